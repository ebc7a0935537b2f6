/*
 * test_options.c - the option table: defaults, parsing with units, round
 * trips through get/set, bad values, cross-option checks, JSON, public API.
 */
#include "common/common.h"
#include "testutil.h"

#include <locale.h>
#include <stdlib.h>
#include <string.h>

static void assert_einval_naming(int rc, const char *name)
{
	ck_assert_int_eq(rc, WALRUS_EINVAL);
	ck_assert_msg(strstr(walrus_errmsg(), name) != NULL, "message \"%s\" does not name %s",
	              walrus_errmsg(), name);
}

START_TEST(test_defaults)
{
	wr_options o;

	wr_opts_defaults(&o);
	ck_assert_int_eq(o.shared_buffers, 128LL << 20);
	ck_assert_int_eq(o.max_open_files, 1000);
	ck_assert_int_eq(o.huge_pages, WR_HUGE_TRY);
	ck_assert_int_eq(o.data_segment_size, 1LL << 30);
	ck_assert_int_eq(o.max_connections, 100);
	ck_assert_int_eq(o.wal_segment_size, 16LL << 20);
	ck_assert_int_eq(o.wal_buffers, 4LL << 20);
	ck_assert_int_eq(o.wal_sync_method, WR_SYNC_FDATASYNC);
	ck_assert_int_eq(o.wal_direct_io, WR_DIRECT_AUTO);
	ck_assert_int_eq(o.data_direct_io, WR_DIRECT_OFF);
	ck_assert_int_eq(o.io_method, WR_IO_SYNC);
	ck_assert_int_eq(o.wal_compression, WR_COMPRESS_OFF);
	ck_assert_int_eq(o.wal_compression_level, 3);
	ck_assert_int_eq(o.wal_writer_delay_us, 200000);
	ck_assert(o.full_page_writes);
	ck_assert(o.synchronous_commit);
	ck_assert_int_eq(o.checkpoint_timeout_us, 300000000LL);
	ck_assert_int_eq(o.max_wal_size, 1LL << 30);
	ck_assert_int_eq(o.min_wal_size, 80LL << 20);
	ck_assert_double_eq(o.checkpoint_completion_target, 0.9);
	ck_assert_int_eq(o.checkpoint_flush_after, 256 * 1024);
	ck_assert(o.checkpoint_sort);
	ck_assert(o.log_checkpoints);
	ck_assert_int_eq(o.bgwriter_delay_us, 20000);
	ck_assert_int_eq(o.bgwriter_lru_maxpages, 1000);
	ck_assert_double_eq(o.bgwriter_lru_multiplier, 2.0);
	ck_assert_int_eq(o.bgwriter_flush_after, 512 * 1024);
	ck_assert_int_eq(o.supervisor_linger_us, 1000000);
	ck_assert_int_eq(o.commit_gather_us, 250);
	ck_assert_int_eq(o.log_min_messages, WR_LOG);
	ck_assert(!o.create_if_missing);
	ck_assert_int_eq(wr_opts_validate(&o), WALRUS_OK);
}
END_TEST

/* String options: stored in their fixed field, read back as set, escaped in JSON. */
START_TEST(test_string_option)
{
	wr_options o;
	char buf[WR_OPT_TEXT_MAX], json[8192];
	char *lng = malloc(WR_OPT_STR_MAX + 1);
	ck_assert_ptr_nonnull(lng);

	wr_opts_defaults(&o);
	ck_assert_str_eq(o.archive_command, "");
	const char *cmd = "cp %p \"/arc dir/%f\" && echo \\ok";
	ck_assert_int_eq(wr_opts_set(&o, "archive_command", cmd), WALRUS_OK);
	ck_assert_str_eq(o.archive_command, cmd);
	ck_assert_int_eq(wr_opts_get(&o, "archive_command", buf, sizeof(buf)), WALRUS_OK);
	ck_assert_str_eq(buf, cmd);
	wr_opts_json(&o, json, sizeof(json));
	ck_assert_ptr_nonnull(
	    strstr(json, "\"archive_command\":\"cp %p \\\"/arc dir/%f\\\" && echo \\\\ok\""));

	/* The longest value fits; one more character is refused naming the option. */
	memset(lng, 'x', WR_OPT_STR_MAX - 1);
	lng[WR_OPT_STR_MAX - 1] = '\0';
	ck_assert_int_eq(wr_opts_set(&o, "archive_dir", lng), WALRUS_OK);
	ck_assert_uint_eq(strlen(o.archive_dir), WR_OPT_STR_MAX - 1);
	lng[WR_OPT_STR_MAX - 1] = 'x';
	lng[WR_OPT_STR_MAX] = '\0';
	ck_assert_int_eq(wr_opts_set(&o, "archive_dir", lng), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "\"archive_dir\""));
	ck_assert_uint_eq(strlen(o.archive_dir), WR_OPT_STR_MAX - 1); /* unchanged */
	/* One line: a newline would split walrus.settings and the log. */
	ck_assert_int_eq(wr_opts_set(&o, "archive_command", "a\nb"), WALRUS_EINVAL);
	ck_assert_int_eq(wr_opts_set(&o, "archive_command", ""), WALRUS_OK);
	ck_assert_str_eq(o.archive_command, "");
	free(lng);
}
END_TEST

/* archive_mode=on needs exactly one way to archive, at the instance's start only. */
START_TEST(test_archive_relations)
{
	wr_options o;
	wr_opts_defaults(&o);
	ck_assert_int_eq(wr_opts_set(&o, "archive_mode", "on"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_validate(&o), WALRUS_OK); /* walrus.conf may add the rest */
	ck_assert_int_eq(wr_opts_validate_instance(&o), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "neither"));
	ck_assert_int_eq(wr_opts_set(&o, "archive_dir", "/arc"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_validate_instance(&o), WALRUS_OK);
	ck_assert_int_eq(wr_opts_set(&o, "archive_command", "true"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_validate_instance(&o), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "both"));
	ck_assert_int_eq(wr_opts_set(&o, "archive_dir", ""), WALRUS_OK);
	ck_assert_int_eq(wr_opts_validate_instance(&o), WALRUS_OK);
	ck_assert_int_eq(wr_opts_set(&o, "archive_timeout", "60"), WALRUS_OK);
	ck_assert_int_eq(o.archive_timeout_us, 60000000);
	/* Replication: wal_sender_timeout in ms without a unit (as PostgreSQL's). */
	ck_assert_int_eq(wr_opts_set(&o, "wal_sender_timeout", "5000"), WALRUS_OK);
	ck_assert_int_eq(o.wal_sender_timeout_us, 5000000);
	ck_assert_int_eq(wr_opts_set(&o, "max_wal_senders", "65"), WALRUS_EINVAL);
	ck_assert_int_eq(wr_opts_set(&o, "max_wal_senders", "0"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_set(&o, "listen_replication", "127.0.0.1:5433"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_validate_instance(&o), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "\"max_wal_senders\" is 0"));
	wr_opts_defaults(&o);
}
END_TEST

/* mmap_reads with data files O_DIRECT is refused at the start; auto steps aside. */
START_TEST(test_direct_data_and_mmap_reads)
{
	wr_options o;
	wr_opts_defaults(&o);
	ck_assert_int_eq(wr_opts_set(&o, "data_direct_io", "on"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_validate_instance(&o), WALRUS_OK);
	ck_assert_int_eq(wr_opts_set(&o, "mmap_reads", "on"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_validate_instance(&o), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "option \"mmap_reads\" cannot be on with "
	                                              "option \"data_direct_io\" on"));
	ck_assert_int_eq(wr_opts_set(&o, "data_direct_io", "auto"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_validate_instance(&o), WALRUS_OK);
	ck_assert_int_eq(wr_opts_set(&o, "data_direct_io", "sometimes"), WALRUS_EINVAL);
}
END_TEST

START_TEST(test_table_covers_struct)
{
	size_t n;
	const wr_opt_desc *t = wr_opts_table(&n);
	bool covered[sizeof(wr_options)] = {false};

	ck_assert_uint_eq(n, 55);
	for (size_t i = 0; i < n; i++) {
		ck_assert_uint_lt(t[i].offset, sizeof(wr_options));
		ck_assert_msg(!covered[t[i].offset], "%s shares a field", t[i].name);
		covered[t[i].offset] = true;
		ck_assert_ptr_nonnull(t[i].help);
		ck_assert(t[i].type != WR_OPT_ENUM || t[i].enum_names != NULL);
		bool session = strcmp(t[i].name, "synchronous_commit") == 0 ||
		               strcmp(t[i].name, "create_if_missing") == 0 ||
		               strcmp(t[i].name, "strict_options") == 0;
		bool server = strcmp(t[i].name, "client_query_buffer_limit") == 0 ||
		              strcmp(t[i].name, "authentication_timeout") == 0 ||
		              strcmp(t[i].name, "databases") == 0;
		ck_assert_int_eq(t[i].scope, session  ? WR_SCOPE_SESSION
		                             : server ? WR_SCOPE_SERVER
		                                      : WR_SCOPE_INSTANCE);
		for (size_t j = 0; j < i; j++)
			ck_assert_str_ne(t[i].name, t[j].name);
	}
}
END_TEST

/* get(default) == the table's default text, and set(get(x)) leaves x unchanged. */
START_TEST(test_defaults_round_trip)
{
	size_t n;
	const wr_opt_desc *t = wr_opts_table(&n);
	wr_options o, o2;
	char buf[64];

	wr_opts_defaults(&o);
	memcpy(&o2, &o, sizeof(o));
	for (size_t i = 0; i < n; i++) {
		ck_assert_int_eq(wr_opts_get(&o, t[i].name, buf, sizeof(buf)), WALRUS_OK);
		ck_assert_msg(strcmp(buf, t[i].def) == 0, "%s: got \"%s\", default \"%s\"",
		              t[i].name, buf, t[i].def);
		ck_assert_int_eq(wr_opts_set(&o2, t[i].name, buf), WALRUS_OK);
	}
	ck_assert(o.set_mask == 0);
	ck_assert(o2.set_mask == (n == 64 ? ~0ULL : (1ULL << n) - 1)); /* every one set */
	o2.set_mask = 0;
	ck_assert_int_eq(memcmp(&o, &o2, sizeof(o)), 0);
}
END_TEST

static void check_set_get(const char *name, const char *in, const char *out)
{
	wr_options o;
	char buf[64];

	wr_opts_defaults(&o);
	ck_assert_msg(wr_opts_set(&o, name, in) == WALRUS_OK, "%s=%s: %s", name, in,
	              walrus_errmsg());
	ck_assert_int_eq(wr_opts_get(&o, name, buf, sizeof(buf)), WALRUS_OK);
	ck_assert_msg(strcmp(buf, out) == 0, "%s=%s reads back \"%s\", expected \"%s\"", name, in,
	              buf, out);
	wr_options o2 = o;
	ck_assert_int_eq(wr_opts_set(&o2, name, buf), WALRUS_OK);
	ck_assert_int_eq(memcmp(&o, &o2, sizeof(o)), 0);
}

START_TEST(test_values_and_units)
{
	check_set_get("shared_buffers", "1048576", "1MB");
	check_set_get("shared_buffers", "131072", "128kB");
	check_set_get("shared_buffers", "128kB", "128kB");
	check_set_get("shared_buffers", "1024kB", "1MB");
	check_set_get("shared_buffers", "1536MB", "1536MB");
	check_set_get("shared_buffers", "2GB", "2GB");
	check_set_get("shared_buffers", "64GB", "64GB");
	check_set_get("shared_buffers", "256 MB", "256MB");
	check_set_get("shared_buffers", "256mb", "256MB");
	check_set_get("max_wal_size", "1TB", "1TB");
	check_set_get("max_wal_size", "1048576kB", "1GB");
	check_set_get("min_wal_size", "100000B", "100000B");
	check_set_get("checkpoint_flush_after", "0", "0");
	check_set_get("wal_segment_size", "64kB", "64kB");
	check_set_get("wal_segment_size", "1GB", "1GB");
	check_set_get("checkpoint_timeout", "30s", "30s");
	check_set_get("checkpoint_timeout", "300", "5min");
	check_set_get("checkpoint_timeout", "1h", "1h");
	check_set_get("checkpoint_timeout", "1d", "1d");
	check_set_get("checkpoint_timeout", "90s", "90s");
	check_set_get("checkpoint_timeout", "1500ms", "1500ms");
	check_set_get("wal_writer_delay", "20", "20ms");
	check_set_get("wal_writer_delay", "1500us", "1500us");
	check_set_get("bgwriter_delay", "1s", "1s");
	check_set_get("supervisor_linger", "0", "0");
	check_set_get("supervisor_linger", "2", "2s");
	check_set_get("supervisor_linger", "1h", "1h");
	check_set_get("full_page_writes", "off", "off");
	check_set_get("full_page_writes", "false", "off");
	check_set_get("full_page_writes", "no", "off");
	check_set_get("full_page_writes", "0", "off");
	check_set_get("wal_direct_io", "on", "on");
	check_set_get("wal_direct_io", "TRUE", "on");
	check_set_get("wal_direct_io", "yes", "on");
	check_set_get("wal_direct_io", "1", "on");
	check_set_get("wal_direct_io", "no", "off");
	check_set_get("wal_direct_io", "False", "off");
	check_set_get("wal_direct_io", "AUTO", "auto");
	check_set_get("data_direct_io", "On", "on");
	check_set_get("io_method", "io_uring", "io_uring");
	check_set_get("huge_pages", "on", "on");
	check_set_get("huge_pages", "OFF", "off");
	check_set_get("wal_sync_method", "open_datasync", "open_datasync");
	check_set_get("wal_compression", "zstd", "zstd");
	check_set_get("wal_compression", "on", "zstd"); /* PostgreSQL's spelling */
	check_set_get("log_min_messages", "debug", "debug");
	check_set_get("log_min_messages", "PANIC", "panic");
	check_set_get("max_connections", "1", "1");
	check_set_get("max_connections", "10000", "10000");
	check_set_get("bgwriter_lru_maxpages", "1073741823", "1073741823");
	check_set_get("checkpoint_completion_target", "0.5", "0.5");
	check_set_get("checkpoint_completion_target", "1", "1.0");
	check_set_get("checkpoint_completion_target", "0", "0.0");
	check_set_get("checkpoint_completion_target", "0.123456789012345678",
	              "0.12345678901234568");
	check_set_get("bgwriter_lru_multiplier", "10", "10.0");
	check_set_get("bgwriter_lru_multiplier", "1e-3", "0.001");
}
END_TEST

/* Stored values land in the right fields and units. */
START_TEST(test_stored_units)
{
	wr_options o;

	wr_opts_defaults(&o);
	ck_assert_int_eq(wr_opts_set(&o, "checkpoint_timeout", "30s"), WALRUS_OK);
	ck_assert_int_eq(o.checkpoint_timeout_us, 30000000);
	ck_assert_int_eq(wr_opts_set(&o, "wal_writer_delay", "5"), WALRUS_OK);
	ck_assert_int_eq(o.wal_writer_delay_us, 5000);
	ck_assert_int_eq(wr_opts_set(&o, "io_method", "io_uring"), WALRUS_OK);
	ck_assert_int_eq(o.io_method, WR_IO_URING);
	ck_assert_int_eq(wr_opts_set(&o, "log_min_messages", "error"), WALRUS_OK);
	ck_assert_int_eq(o.log_min_messages, WR_ERROR);
	ck_assert_int_eq(wr_opts_set(&o, "shared_buffers", "1GB"), WALRUS_OK);
	ck_assert_int_eq(o.shared_buffers, 1LL << 30);
}
END_TEST

static void check_bad(const char *name, const char *value)
{
	wr_options o, before;

	wr_opts_defaults(&o);
	before = o;
	wr_error_clear();
	int rc = wr_opts_set(&o, name, value);
	ck_assert_msg(rc == WALRUS_EINVAL, "%s=\"%s\" accepted", name, value ? value : "(null)");
	ck_assert_msg(strstr(walrus_errmsg(), name) != NULL, "%s=%s: message \"%s\"", name, value,
	              walrus_errmsg());
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "invalid value for option"));
	ck_assert_int_eq(memcmp(&o, &before, sizeof(o)), 0);
}

START_TEST(test_bad_values)
{
	/* sizes */
	check_bad("shared_buffers", "12x");
	check_bad("shared_buffers", "");
	check_bad("shared_buffers", "-8kB");
	check_bad("shared_buffers", "64kB"); /* below 128kB */
	check_bad("shared_buffers", "65GB"); /* above 64GB */
	check_bad("shared_buffers", "99999999999TB");
	check_bad("shared_buffers", "99999999999999999999");
	check_bad("shared_buffers", "130000"); /* not a multiple of 8kB */
	check_bad("shared_buffers", "1.5GB");
	check_bad("shared_buffers", " 128MB");
	check_bad("shared_buffers", "128MB ");
	check_bad("shared_buffers", "MB");
	check_bad("shared_buffers", "128 kBx");
	check_bad("shared_buffers", NULL);
	check_bad("wal_segment_size", "24MB"); /* not a power of two */
	check_bad("wal_segment_size", "32kB");
	check_bad("wal_segment_size", "2GB");
	check_bad("data_segment_size", "100000");
	check_bad("wal_buffers", "68000");
	check_bad("max_wal_size", "64kB");
	check_bad("checkpoint_flush_after", "4MB");
	check_bad("checkpoint_flush_after", "1000");
	/* integers */
	check_bad("max_open_files", "7");
	check_bad("max_open_files", "1000001");
	check_bad("max_open_files", "-5");
	check_bad("max_open_files", "12abc");
	check_bad("max_open_files", "1e3");
	check_bad("max_open_files", "99999999999999999999999");
	check_bad("max_open_files", "");
	check_bad("max_connections", "0");
	check_bad("wal_compression_level", "20");
	check_bad("bgwriter_lru_maxpages", "1073741824");
	/* times */
	check_bad("checkpoint_timeout", "0s");
	check_bad("checkpoint_timeout", "2d");
	check_bad("checkpoint_timeout", "5 minutes");
	check_bad("checkpoint_timeout", "-1s");
	check_bad("checkpoint_timeout", "99999999999999d");
	check_bad("checkpoint_timeout", "");
	check_bad("wal_writer_delay", "500us");
	check_bad("wal_writer_delay", "11s");
	check_bad("bgwriter_delay", "9");
	check_bad("supervisor_linger", "61min");
	/* reals */
	check_bad("checkpoint_completion_target", "1.1");
	check_bad("checkpoint_completion_target", "-0.1");
	check_bad("checkpoint_completion_target", "nan");
	check_bad("checkpoint_completion_target", "inf");
	check_bad("checkpoint_completion_target", "0.5x");
	check_bad("checkpoint_completion_target", "");
	check_bad("checkpoint_completion_target", "0,5");
	check_bad("bgwriter_lru_multiplier", "11");
	/* booleans and enums */
	check_bad("full_page_writes", "maybe");
	check_bad("full_page_writes", "");
	check_bad("full_page_writes", "2");
	check_bad("io_method", "aio");
	check_bad("huge_pages", "maybe");
	check_bad("wal_direct_io", "maybe");
	check_bad("wal_sync_method", "fsync_writethrough");
	check_bad("wal_compression", "lz4");
	check_bad("log_min_messages", "notice");
	check_bad("log_min_messages", "");
}
END_TEST

/* wal_sender_delay: a time, milliseconds without a unit, 0 (every flush) to 10s. */
START_TEST(test_wal_sender_delay)
{
	wr_options o;
	char json[8192];

	wr_opts_defaults(&o);
	ck_assert_int_eq(o.wal_sender_delay_us, 10000);
	wr_opts_json(&o, json, sizeof(json));
	ck_assert_ptr_nonnull(strstr(json, "\"wal_sender_delay\":\"10ms\","));
	check_set_get("wal_sender_delay", "0", "0");
	check_set_get("wal_sender_delay", "5", "5ms");
	check_set_get("wal_sender_delay", "250us", "250us");
	check_set_get("wal_sender_delay", "10s", "10s");
	check_bad("wal_sender_delay", "-1ms");
	check_bad("wal_sender_delay", "11s");
	check_bad("wal_sender_delay", "10001");
	check_bad("wal_sender_delay", "soon");
	check_bad("wal_sender_delay", "10 msx");
	check_bad("wal_sender_delay", "");
	ck_assert_int_eq(wr_opts_set(&o, "wal_sender_delay", "1min"), WALRUS_EINVAL);
	ck_assert_str_eq(walrus_errmsg(),
	                 "invalid value for option \"wal_sender_delay\": \"1min\" (expected a time "
	                 "such as 10ms, between 0 and 10s; a plain number is in milliseconds)");
	ck_assert_int_eq(o.wal_sender_delay_us, 10000); /* unchanged */
}
END_TEST

START_TEST(test_messages)
{
	wr_options o;

	wr_opts_defaults(&o);
	ck_assert_int_eq(wr_opts_set(&o, "shared_buffers", "12x"), WALRUS_EINVAL);
	char want[200];
	snprintf(want, sizeof(want),
	         "invalid value for option \"shared_buffers\": \"12x\" (expected a size such "
	         "as 128MB, a multiple of %dkB, between 128kB and 64GB)",
	         WR_PAGE_SIZE / 1024);
	ck_assert_str_eq(walrus_errmsg(), want);
	ck_assert_int_eq(wr_opts_set(&o, "foo", "1"), WALRUS_EINVAL);
	ck_assert_str_eq(walrus_errmsg(), "unrecognized option \"foo\"");
	ck_assert_int_eq(wr_opts_set(&o, "io_method", "aio"), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "expected one of: sync, io_uring"));
	ck_assert_int_eq(wr_opts_set(&o, "checkpoint_timeout", "0"), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "between 1s and 1d"));
	ck_assert_int_eq(wr_opts_set(&o, NULL, "1"), WALRUS_EINVAL);
	ck_assert_int_eq(wr_opts_set(NULL, "shared_buffers", "1GB"), WALRUS_EINVAL);
}
END_TEST

START_TEST(test_set_pair)
{
	wr_options o;

	wr_opts_defaults(&o);
	ck_assert_int_eq(wr_opts_set_pair(&o, "shared_buffers=256MB"), WALRUS_OK);
	ck_assert_int_eq(o.shared_buffers, 256LL << 20);
	ck_assert_int_eq(wr_opts_set_pair(&o, " io_method = io_uring"), WALRUS_OK);
	ck_assert_int_eq(o.io_method, WR_IO_URING);
	assert_einval_naming(wr_opts_set_pair(&o, "shared_buffers"), "shared_buffers");
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "name=value"));
	assert_einval_naming(wr_opts_set_pair(&o, "shared_buffers="), "shared_buffers");
	assert_einval_naming(wr_opts_set_pair(&o, "nope=1"), "nope");
	assert_einval_naming(wr_opts_set_pair(&o, "=1"), "unrecognized");
	ck_assert_int_eq(wr_opts_set_pair(&o, NULL), WALRUS_EINVAL);
}
END_TEST

START_TEST(test_validate)
{
	wr_options o;

	wr_opts_defaults(&o);
	ck_assert_int_eq(wr_opts_set(&o, "min_wal_size", "2GB"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_validate(&o), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "min_wal_size"));
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "max_wal_size"));
	ck_assert_int_eq(wr_opts_set(&o, "max_wal_size", "2GB"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_validate(&o), WALRUS_OK);

	wr_opts_defaults(&o);
	ck_assert_int_eq(wr_opts_set(&o, "wal_segment_size", "1GB"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_validate(&o), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "wal_segment_size"));
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "max_wal_size"));
	ck_assert_int_eq(wr_opts_set(&o, "max_wal_size", "2GB"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_validate(&o), WALRUS_OK);

	/* Fields set directly, bypassing the parser, are checked too. */
	wr_opts_defaults(&o);
	o.shared_buffers += 100;
	assert_einval_naming(wr_opts_validate(&o), "shared_buffers");
	wr_opts_defaults(&o);
	o.io_method = 7;
	assert_einval_naming(wr_opts_validate(&o), "io_method");
	wr_opts_defaults(&o);
	o.checkpoint_completion_target = 2.0;
	assert_einval_naming(wr_opts_validate(&o), "checkpoint_completion_target");
}
END_TEST

START_TEST(test_get_errors)
{
	wr_options o;
	char buf[5];

	wr_opts_defaults(&o);
	assert_einval_naming(wr_opts_get(&o, "bogus", buf, sizeof(buf)), "bogus");
	assert_einval_naming(wr_opts_get(&o, "shared_buffers", buf, sizeof(buf)), "shared_buffers");
	ck_assert_int_eq(wr_opts_get(&o, "io_method", buf, sizeof(buf)), WALRUS_OK);
	ck_assert_str_eq(buf, "sync");
}
END_TEST

START_TEST(test_json)
{
	wr_options o;

	wr_opts_defaults(&o);
	size_t need = wr_opts_json(&o, NULL, 0);
	ck_assert_uint_gt(need, 100);
	char *buf = malloc(need + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(wr_opts_json(&o, buf, need + 1), need);
	ck_assert_uint_eq(strlen(buf), need);
	ck_assert_int_eq(buf[0], '{');
	ck_assert_int_eq(buf[need - 1], '}');
	ck_assert_ptr_nonnull(strstr(buf, "{\"shared_buffers\":\"128MB\","));
	ck_assert_ptr_nonnull(strstr(buf, "\"max_open_files\":1000,"));
	ck_assert_ptr_nonnull(strstr(buf, "\"full_page_writes\":true,"));
	ck_assert_ptr_nonnull(strstr(buf, "\"wal_direct_io\":\"auto\","));
	ck_assert_ptr_nonnull(strstr(buf, "\"checkpoint_timeout\":\"5min\","));
	ck_assert_ptr_nonnull(strstr(buf, "\"checkpoint_completion_target\":\"0.9\","));
	ck_assert_ptr_nonnull(strstr(buf, "\"create_if_missing\":false,"));
	ck_assert_ptr_nonnull(strstr(buf, "\"strict_options\":false,"));
	ck_assert_ptr_nonnull(strstr(buf, "\"authentication_timeout\":\"10s\","));
	ck_assert_ptr_nonnull(strstr(buf, "\"archive_command\":\"\","));
	ck_assert_ptr_nonnull(strstr(buf, "\"archive_timeout\":\"0\","));
	ck_assert_ptr_nonnull(strstr(buf, "\"listen_replication\":\"\","));
	ck_assert_ptr_nonnull(strstr(buf, "\"max_wal_senders\":4,"));
	ck_assert_ptr_nonnull(strstr(buf, "\"wal_sender_timeout\":\"1min\","));
	ck_assert_ptr_nonnull(strstr(buf, "\"max_slot_wal_keep_size\":\"1GB\"}"));

	/* Short buffers: terminated, truncated, and the needed length still returned. */
	char small[10];
	ck_assert_uint_eq(wr_opts_json(&o, small, sizeof(small)), need);
	ck_assert_uint_eq(strlen(small), sizeof(small) - 1);
	ck_assert_int_eq(strncmp(small, buf, sizeof(small) - 1), 0);
	free(buf);
}
END_TEST

START_TEST(test_size_time_bool_parsers)
{
	int64_t v;
	bool b;

	ck_assert_int_eq(wr_parse_size("1TB", &v), WALRUS_OK);
	ck_assert_int_eq(v, 1LL << 40);
	ck_assert_int_eq(wr_parse_size("0", &v), WALRUS_OK);
	ck_assert_int_eq(v, 0);
	ck_assert_int_eq(wr_parse_size("10b", &v), WALRUS_OK);
	ck_assert_int_eq(v, 10);
	ck_assert_int_eq(wr_parse_size("9999999TB", &v), WALRUS_EINVAL);
	ck_assert_int_eq(wr_parse_size("-1", &v), WALRUS_EINVAL);
	ck_assert_int_eq(wr_parse_size(NULL, &v), WALRUS_EINVAL);
	ck_assert_int_eq(wr_parse_time_us("500us", &v), WALRUS_OK);
	ck_assert_int_eq(v, 500);
	ck_assert_int_eq(wr_parse_time_us("2min", &v), WALRUS_OK);
	ck_assert_int_eq(v, 120000000);
	ck_assert_int_eq(wr_parse_time_us("0", &v), WALRUS_OK);
	ck_assert_int_eq(v, 0);
	ck_assert_int_eq(wr_parse_time_us("10", &v), WALRUS_EINVAL); /* unit needed */
	ck_assert_int_eq(wr_parse_time_us("3 weeks", &v), WALRUS_EINVAL);
	ck_assert_int_eq(wr_parse_bool("On", &b), WALRUS_OK);
	ck_assert(b);
	ck_assert_int_eq(wr_parse_bool("no", &b), WALRUS_OK);
	ck_assert(!b);
	ck_assert_int_eq(wr_parse_bool("nein", &b), WALRUS_EINVAL);
}
END_TEST

/* A caller's locale with a decimal comma must not change how reals read or print. */
START_TEST(test_real_ignores_locale)
{
	wr_options o;
	char buf[32];

	if (setlocale(LC_NUMERIC, "de_DE.UTF-8") == NULL &&
	    setlocale(LC_NUMERIC, "fr_FR.UTF-8") == NULL)
		return; /* no such locale installed: nothing to prove */
	wr_opts_defaults(&o);
	ck_assert_int_eq(wr_opts_set(&o, "checkpoint_completion_target", "0.75"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_get(&o, "checkpoint_completion_target", buf, sizeof(buf)),
	                 WALRUS_OK);
	ck_assert_str_eq(buf, "0.75");
}
END_TEST

/* Which options were set explicitly: what walrus.conf may not override. */
START_TEST(test_explicitly_set)
{
	wr_options o, dst;
	size_t sb, wb;

	wr_opts_defaults(&o);
	ck_assert_ptr_nonnull(wr_opts_find("shared_buffers", &sb));
	ck_assert_ptr_nonnull(wr_opts_find("wal_buffers", &wb));
	ck_assert_ptr_null(wr_opts_find("Shared_Buffers", NULL));
	ck_assert(!wr_opts_is_set(&o, sb));
	/* Setting the default value is still an explicit choice. */
	ck_assert_int_eq(wr_opts_set(&o, "shared_buffers", "128MB"), WALRUS_OK);
	ck_assert(wr_opts_is_set(&o, sb));
	ck_assert(!wr_opts_is_set(&o, wb));
	/* A refused value marks nothing. */
	ck_assert_int_eq(wr_opts_set(&o, "wal_buffers", "12q"), WALRUS_EINVAL);
	ck_assert(!wr_opts_is_set(&o, wb));
	ck_assert_int_eq(wr_opts_set_pair(&o, "wal_buffers=1MB"), WALRUS_OK);
	ck_assert(wr_opts_is_set(&o, wb));
	ck_assert(!wr_opts_is_set(&o, WR_OPTS_MAX));

	wr_opts_defaults(&dst);
	wr_opts_copy(&dst, &o, wb);
	ck_assert_int_eq(dst.wal_buffers, 1 << 20);
	ck_assert(wr_opts_is_set(&dst, wb));
	ck_assert(!wr_opts_is_set(&dst, sb));
	ck_assert_str_eq(wr_opt_source_name(WR_SRC_DEFAULT), "default");
	ck_assert_str_eq(wr_opt_source_name(WR_SRC_FILE), "file");
	ck_assert_str_eq(wr_opt_source_name(WR_SRC_COMMAND_LINE), "command line");
}
END_TEST

START_TEST(test_public_api)
{
	walrus_opts *opts = walrus_opts_new();
	char buf[32];

	ck_assert_ptr_nonnull(opts);
	ck_assert_int_eq(walrus_opts_get(opts, "shared_buffers", buf, sizeof(buf)), WALRUS_OK);
	ck_assert_str_eq(buf, "128MB");
	ck_assert_int_eq(walrus_opts_set(opts, "shared_buffers", "1GB"), WALRUS_OK);
	ck_assert_int_eq(walrus_opts_get(opts, "shared_buffers", buf, sizeof(buf)), WALRUS_OK);
	ck_assert_str_eq(buf, "1GB");
	ck_assert_int_eq(opts->o.shared_buffers, 1LL << 30);
	assert_einval_naming(walrus_opts_set(opts, "shared_buffers", "lots"), "shared_buffers");
	assert_einval_naming(walrus_opts_get(opts, "lots", buf, sizeof(buf)), "lots");
	ck_assert_int_eq(walrus_opts_set(NULL, "shared_buffers", "1GB"), WALRUS_EINVAL);
	ck_assert_int_eq(walrus_opts_get(NULL, "shared_buffers", buf, sizeof(buf)), WALRUS_EINVAL);
	walrus_opts_free(opts);
	walrus_opts_free(NULL);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("options");
	TCase *tc = tcase_create("options");

	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_table_covers_struct);
	tcase_add_test(tc, test_defaults_round_trip);
	tcase_add_test(tc, test_values_and_units);
	tcase_add_test(tc, test_stored_units);
	tcase_add_test(tc, test_bad_values);
	tcase_add_test(tc, test_messages);
	tcase_add_test(tc, test_set_pair);
	tcase_add_test(tc, test_validate);
	tcase_add_test(tc, test_get_errors);
	tcase_add_test(tc, test_json);
	tcase_add_test(tc, test_size_time_bool_parsers);
	tcase_add_test(tc, test_real_ignores_locale);
	tcase_add_test(tc, test_explicitly_set);
	tcase_add_test(tc, test_public_api);
	tcase_add_test(tc, test_string_option);
	tcase_add_test(tc, test_archive_relations);
	tcase_add_test(tc, test_direct_data_and_mmap_reads);
	tcase_add_test(tc, test_wal_sender_delay);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
