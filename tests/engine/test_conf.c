/*
 * test_conf.c - DIR/walrus.conf and option precedence: the file's format
 * (comments, quotes, errors with file:line and the option), editing it
 * (conf_set keeps the user's lines, never writes a file that would not
 * start), default < file < the starter's explicit options, the sources an
 * instance records, a bad file failing the start, and an open that asks
 * other instance options than the running instance's (a warning left in
 * walrus_errmsg, refused with strict_options=on); walrus serve's settings
 * in the file (its options, and the secret requirepass: skipped by the
 * engine, masked, never set by conf_set, only from a private file).
 *
 * Every case that starts an instance waits for its supervisor to exit.
 */
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"

/* ---------------------------------------------------------------- helpers */

/* A directory holding walrus.conf with @text; its absolute path is returned. */
static const char *dir_with_conf(const char *text)
{
	static char abs[PATH_MAX];
	char path[PATH_MAX + 32];
	const char *dir = tu_tmpdir("walrus-conf");
	ck_assert_ptr_nonnull(realpath(dir, abs));
	snprintf(path, sizeof(path), "%s/%s", abs, WR_CONF_FILE);
	ck_assert_int_eq(tu_write_file(path, text, strlen(text)), 0);
	return abs;
}

/* The whole of DIR/@name into buf (NUL-terminated). */
static void read_file(const char *dir, const char *name, char *buf, size_t len)
{
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, O_RDONLY);
	ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
	ssize_t n = read(fd, buf, len - 1);
	ck_assert_int_ge(n, 0);
	buf[n] = '\0';
	ck_assert_int_eq(close(fd), 0);
}

static void expect_load_error(const char *text, const char *where, const char *what)
{
	const char *dir = dir_with_conf(text);
	wr_options o;
	wr_opts_defaults(&o);
	ck_assert_int_eq(conf_load(dir, &o), WALRUS_EINVAL);
	ck_assert_msg(strstr(walrus_errmsg(), where) != NULL, "%s", walrus_errmsg());
	ck_assert_msg(strstr(walrus_errmsg(), what) != NULL, "%s", walrus_errmsg());
}

static size_t opt_index(const char *name)
{
	size_t i;
	ck_assert_ptr_nonnull(wr_opts_find(name, &i));
	return i;
}

static walrus_opts *test_opts(void)
{
	walrus_opts *o = walrus_opts_new();
	ck_assert_ptr_nonnull(o);
	ck_assert_int_eq(walrus_opts_set(o, "create_if_missing", "on"), WALRUS_OK);
	ck_assert_int_eq(walrus_opts_set(o, "supervisor_linger", "50ms"), WALRUS_OK);
	return o;
}

/* ---------------------------------------------------------------- the format */

START_TEST(format_accepted)
{
	const char *dir = dir_with_conf("# walrus.conf\n"
	                                "\n"
	                                "   # indented comment\n"
	                                "shared_buffers = 1MB   # trailing comment\n"
	                                "wal_buffers='512kB'\n"
	                                "Checkpoint_Timeout 30s\n"
	                                "bgwriter_delay = '1 s'#tight\n"
	                                "wal_compression = 'zstd'\r\n"
	                                "shared_buffers = 2MB\n"
	                                "log_min_messages = debug"); /* no final newline */
	wr_options o;
	wr_opts_defaults(&o);
	ck_assert_int_eq(conf_load(dir, &o), WALRUS_OK);
	ck_assert_int_eq(o.shared_buffers, 2 << 20); /* the last line wins */
	ck_assert_int_eq(o.wal_buffers, 512 << 10);
	ck_assert_int_eq(o.checkpoint_timeout_us, 30000000);
	ck_assert_int_eq(o.bgwriter_delay_us, 1000000);
	ck_assert_int_eq(o.wal_compression, WR_COMPRESS_ZSTD);
	ck_assert_int_eq(o.log_min_messages, WR_DEBUG);
	ck_assert(wr_opts_is_set(&o, opt_index("shared_buffers")));
	ck_assert(!wr_opts_is_set(&o, opt_index("max_wal_size")));
}
END_TEST

START_TEST(format_missing_file_sets_nothing)
{
	char abs[PATH_MAX];
	ck_assert_ptr_nonnull(realpath(tu_tmpdir("walrus-conf"), abs));
	wr_options o;
	wr_opts_defaults(&o);
	ck_assert_int_eq(conf_load(abs, &o), WALRUS_OK);
	ck_assert(o.set_mask == 0);
}
END_TEST

START_TEST(format_errors_name_file_line_option)
{
	expect_load_error("# ok\nshared_buffers = 1MB\nno_such_option = 3\n",
	                  "walrus.conf:3:", "unrecognized option \"no_such_option\"");
	expect_load_error("\n\nshared_buffers = 12q\n",
	                  "walrus.conf:3:", "invalid value for option \"shared_buffers\": \"12q\"");
	expect_load_error("synchronous_commit = off\n", "walrus.conf:1:",
	                  "option \"synchronous_commit\" is chosen by each opener");
	expect_load_error("wal_buffers = 'unterminated\n",
	                  "walrus.conf:1:", "unterminated quoted value for option \"wal_buffers\"");
	expect_load_error("checkpoint_timeout = 5 min\n",
	                  "walrus.conf:1:", "after the value of option \"checkpoint_timeout\"");
	expect_load_error("\nmax_wal_size =\n",
	                  "walrus.conf:2:", "missing value for option \"max_wal_size\"");
	expect_load_error("= 3\n", "walrus.conf:1:", "syntax error");
}
END_TEST

/* ---------------------------------------------------------------- editing */

START_TEST(set_keeps_the_users_lines)
{
	const char *dir = dir_with_conf("# my settings\n"
	                                "shared_buffers = 1MB    # small box\n"
	                                "\n"
	                                "wal_buffers = 512kB\n"
	                                "shared_buffers = 2MB\n");
	char text[4096], v[64];
	bool found;

	ck_assert_int_eq(conf_set(dir, "shared_buffers", "4MB"), WALRUS_OK);
	ck_assert_int_eq(conf_set(dir, "wal_buffers", "1MB"), WALRUS_OK);
	ck_assert_int_eq(conf_set(dir, "Checkpoint_Timeout", "10 min"), WALRUS_OK);
	ck_assert_int_eq(conf_set(dir, "wal_compression", "zstd"), WALRUS_OK);
	read_file(dir, WR_CONF_FILE, text, sizeof(text));
	ck_assert_str_eq(text, "# my settings\n"
	                       "shared_buffers = 1MB    # small box\n"
	                       "\n"
	                       "wal_buffers = 1MB\n"
	                       "shared_buffers = 4MB\n"
	                       "checkpoint_timeout = '10 min'\n"
	                       "wal_compression = zstd\n");
	ck_assert_int_eq(conf_set(dir, "shared_buffers", "8MB"), WALRUS_OK);
	ck_assert_int_eq(conf_get(dir, "shared_buffers", v, sizeof(v), &found), WALRUS_OK);
	ck_assert(found);
	ck_assert_str_eq(v, "8MB");
	ck_assert_int_eq(conf_get(dir, "CHECKPOINT_TIMEOUT", v, sizeof(v), &found), WALRUS_OK);
	ck_assert(found);
	ck_assert_str_eq(v, "10min");
	ck_assert_int_eq(conf_get(dir, "max_wal_size", v, sizeof(v), &found), WALRUS_OK);
	ck_assert(!found);
	ck_assert_str_eq(v, "1GB");
	ck_assert_int_eq(conf_get(dir, "nonsense", v, sizeof(v), &found), WALRUS_EINVAL);
	/* No temp file left behind. */
	char tmp[PATH_MAX + 32];
	snprintf(tmp, sizeof(tmp), "%s/%s.tmp", dir, WR_CONF_FILE);
	ck_assert_int_ne(access(tmp, F_OK), 0);
}
END_TEST

START_TEST(set_keeps_a_replaced_lines_comment)
{
	const char *dir = dir_with_conf("wal_buffers = 1MB    # aligned\n\tmax_wal_size=2GB#x\n");
	char text[512];
	ck_assert_int_eq(conf_set(dir, "wal_buffers", "2MB"), WALRUS_OK);
	ck_assert_int_eq(conf_set(dir, "max_wal_size", "4GB"), WALRUS_OK);
	read_file(dir, WR_CONF_FILE, text, sizeof(text));
	ck_assert_str_eq(text, "wal_buffers = 2MB    # aligned\nmax_wal_size = 4GB#x\n");
}
END_TEST

START_TEST(set_quotes_what_needs_it)
{
	char abs[PATH_MAX], text[512];
	wr_options o;
	ck_assert_ptr_nonnull(realpath(tu_tmpdir("walrus-conf"), abs));
	ck_assert_int_eq(conf_set(abs, "bgwriter_delay", "1 s"), WALRUS_OK);
	read_file(abs, WR_CONF_FILE, text, sizeof(text));
	ck_assert_str_eq(text, "bgwriter_delay = '1 s'\n");
	wr_opts_defaults(&o);
	ck_assert_int_eq(conf_load(abs, &o), WALRUS_OK);
	ck_assert_int_eq(o.bgwriter_delay_us, 1000000);
}
END_TEST

START_TEST(set_refuses_and_leaves_the_file)
{
	const char *before = "# keep\nmax_wal_size = 1GB\n";
	const char *dir = dir_with_conf(before);
	char text[512];

	ck_assert_int_eq(conf_set(dir, "shared_buffers", "lots"), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "shared_buffers"));
	ck_assert_int_eq(conf_set(dir, "no_such_option", "1"), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "unrecognized option \"no_such_option\""));
	ck_assert_int_eq(conf_set(dir, "create_if_missing", "on"), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "create_if_missing"));
	/* Valid alone, but the file could not start an instance. */
	ck_assert_int_eq(conf_set(dir, "min_wal_size", "2GB"), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "min_wal_size"));
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), WR_CONF_FILE));
	read_file(dir, WR_CONF_FILE, text, sizeof(text));
	ck_assert_str_eq(text, before);
}
END_TEST

/* ---------------------------------------------------------------- walrus serve's settings */

START_TEST(server_settings_and_secret)
{
	const char *before = "requirepass = 'a b''c'\nauthentication_timeout = 3s\n";
	const char *dir = dir_with_conf(before);
	char path[PATH_MAX + 32], buf[64], text[512];
	bool found;
	wr_options o;

	snprintf(path, sizeof(path), "%s/%s", dir, WR_CONF_FILE);
	ck_assert_int_eq(chmod(path, 0600), 0);
	wr_opts_defaults(&o);
	ck_assert_int_eq(conf_load(dir, &o), WALRUS_OK); /* the engine skips the secret */
	ck_assert_int_eq(o.authentication_timeout_us, 3000000);
	ck_assert_int_eq(conf_secret(dir, "requirepass", buf, sizeof(buf), &found), WALRUS_OK);
	ck_assert(found);
	ck_assert_str_eq(buf, "a b'c");
	ck_assert_int_eq(conf_get(dir, "requirepass", buf, sizeof(buf), &found), WALRUS_OK);
	ck_assert(found);
	ck_assert_str_eq(buf, "********");
	ck_assert_int_eq(conf_set(dir, "requirepass", "x"), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "ps"));
	read_file(dir, WR_CONF_FILE, text, sizeof(text));
	ck_assert_str_eq(text, before);
	/* an edit keeps the file private */
	ck_assert_int_eq(conf_set(dir, "client_query_buffer_limit", "64MB"), WALRUS_OK);
	struct stat st;
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0600);
	ck_assert_int_eq(chmod(path, 0640), 0);
	ck_assert_int_eq(conf_secret(dir, "requirepass", buf, sizeof(buf), &found), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "readable by its group (mode 0640)"));
	/* no secret, no rule on the mode */
	const char *plain = dir_with_conf("authentication_timeout = 3s\n");
	ck_assert_int_eq(conf_secret(plain, "requirepass", buf, sizeof(buf), &found), WALRUS_OK);
	ck_assert(!found);
}
END_TEST

/* ---------------------------------------------------------------- precedence */

START_TEST(precedence_default_file_command_line)
{
	const char *dir = dir_with_conf("shared_buffers = 2MB\nwal_buffers = 1MB\n");
	wr_options starter, eff;
	uint8_t src[WR_OPTS_MAX];

	wr_opts_defaults(&starter);
	ck_assert_int_eq(wr_opts_set(&starter, "wal_buffers", "512kB"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_set(&starter, "create_if_missing", "on"), WALRUS_OK);
	ck_assert_int_eq(conf_effective(dir, &starter, &eff, src), WALRUS_OK);
	ck_assert_int_eq(eff.shared_buffers, 2 << 20);
	ck_assert_int_eq(eff.wal_buffers, 512 << 10);
	ck_assert_int_eq(eff.max_wal_size, 1LL << 30);
	ck_assert(eff.create_if_missing);
	ck_assert_int_eq(src[opt_index("shared_buffers")], WR_SRC_FILE);
	ck_assert_int_eq(src[opt_index("wal_buffers")], WR_SRC_COMMAND_LINE);
	ck_assert_int_eq(src[opt_index("max_wal_size")], WR_SRC_DEFAULT);
	ck_assert_int_eq(src[opt_index("create_if_missing")], WR_SRC_COMMAND_LINE);
}
END_TEST

/* ---------------------------------------------------------------- instances */

START_TEST(instance_uses_file_and_records_sources)
{
	const char *dir = dir_with_conf("shared_buffers = 2MB  # from the file\n");
	walrus_opts *o = test_opts();
	ck_assert_int_eq(walrus_opts_set(o, "wal_buffers", "256kB"), WALRUS_OK);
	walrus *db = tu_open(dir, o);

	engine_shared *e = engine_sh();
	ck_assert_int_eq(e->opts.shared_buffers, 2 << 20);
	ck_assert_int_eq(e->opts.wal_buffers, 256 << 10);
	ck_assert_int_eq(e->opt_source[opt_index("shared_buffers")], WR_SRC_FILE);
	ck_assert_int_eq(e->opt_source[opt_index("wal_buffers")], WR_SRC_COMMAND_LINE);
	ck_assert_int_eq(e->opt_source[opt_index("max_wal_size")], WR_SRC_DEFAULT);
	char *json;
	ck_assert_int_eq(walrus_stats(db, &json), WALRUS_OK);
	ck_assert_msg(strstr(json, "\"shared_buffers\":{\"value\":\"2MB\",\"source\":\"file\"}"),
	              "%s", json);
	ck_assert_ptr_nonnull(
	    strstr(json, "\"wal_buffers\":{\"value\":\"256kB\",\"source\":\"command line\"}"));
	ck_assert_ptr_nonnull(
	    strstr(json, "\"max_wal_size\":{\"value\":\"1GB\",\"source\":\"default\"}"));
	walrus_free(json);
	tu_close_and_wait(db);
}
END_TEST

START_TEST(new_setting_after_restart)
{
	char abs[PATH_MAX];
	ck_assert_ptr_nonnull(realpath(tu_tmpdir("walrus-conf"), abs));
	walrus *db = tu_open(abs, test_opts());
	ck_assert_int_eq(engine_sh()->opts.shared_buffers, 128LL << 20);
	ck_assert_int_eq(conf_set(abs, "shared_buffers", "3MB"), WALRUS_OK);
	ck_assert_int_eq(engine_sh()->opts.shared_buffers, 128LL << 20); /* until a restart */
	tu_close_and_wait(db);
	db = tu_open(abs, test_opts());
	ck_assert_int_eq(engine_sh()->opts.shared_buffers, 3LL << 20);
	ck_assert_int_eq(engine_sh()->opt_source[opt_index("shared_buffers")], WR_SRC_FILE);
	tu_close_and_wait(db);
}
END_TEST

START_TEST(bad_file_fails_the_start)
{
	const char *dir = dir_with_conf("# fine\nshared_buffers = 2MB\nwal_buffers = huge\n");
	walrus_opts *o = test_opts();
	tu_open_fails(dir, o, WALRUS_EINVAL, "walrus.conf:3:");
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "wal_buffers"));
	/* The log says so too. */
	char log[4096];
	read_file(dir, WR_LOG_FILE, log, sizeof(log));
	ck_assert_msg(strstr(log, "walrus.conf:3:") != NULL, "%s", log);
	/* An option of the starter does not hide a bad line. */
	ck_assert_int_eq(walrus_opts_set(o, "wal_buffers", "1MB"), WALRUS_OK);
	tu_open_fails(dir, o, WALRUS_EINVAL, "walrus.conf:3:");
	walrus_opts_free(o);
}
END_TEST

/* ---------------------------------------------------------------- conflicting opens */

struct conflict_arg {
	const char *dir;
	const char *shared_buffers; /* NULL: not set */
	bool strict;
};

/* An open by another process: 0 when it behaved as expected for @a. */
static int conflicting_open(void *p)
{
	const struct conflict_arg *a = p;
	walrus *db = NULL;
	walrus_opts *o = walrus_opts_new();
	TU_CHILD_CHECK(walrus_opts_set(o, "supervisor_linger", "50ms") == WALRUS_OK);
	if (a->shared_buffers)
		TU_CHILD_CHECK(walrus_opts_set(o, "shared_buffers", a->shared_buffers) ==
		               WALRUS_OK);
	TU_CHILD_CHECK(walrus_opts_set(o, "strict_options", a->strict ? "on" : "off") == WALRUS_OK);
	int rc = walrus_open(a->dir, o, &db);
	walrus_opts_free(o);
	if (a->shared_buffers == NULL) {
		/* The default differs from the instance's, but nobody asked for it. */
		TU_CHILD_CHECK(rc == WALRUS_OK && walrus_errmsg()[0] == '\0');
		return walrus_close(db) == WALRUS_OK ? 0 : 2;
	}
	const char *m = walrus_errmsg();
	TU_CHILD_CHECK(strstr(m, "shared_buffers=2MB") != NULL && strstr(m, "1MB") != NULL);
	if (a->strict) {
		TU_CHILD_CHECK(rc == WALRUS_EINVAL && strstr(m, "strict_options") != NULL);
		TU_CHILD_CHECK(!client_attached(NULL)); /* detached cleanly */
		return 0;
	}
	TU_CHILD_CHECK(rc == WALRUS_OK);
	TU_CHILD_CHECK(walrus_put(db, "k", 1, "v", 1, WALRUS_SYNC) == WALRUS_OK);
	return walrus_close(db) == WALRUS_OK ? 0 : 2;
}

START_TEST(conflicting_instance_options)
{
	char abs[PATH_MAX];
	static char log[1 << 17];
	ck_assert_ptr_nonnull(realpath(tu_tmpdir("walrus-conf"), abs));
	walrus_opts *o = test_opts();
	ck_assert_int_eq(walrus_opts_set(o, "shared_buffers", "1MB"), WALRUS_OK);
	walrus *db = tu_open(abs, o);
	ck_assert_str_eq(walrus_errmsg(), ""); /* the starter got what it asked */

	struct conflict_arg quiet = {.dir = abs}, warn = {.dir = abs, .shared_buffers = "2MB"},
	                    strict = {.dir = abs, .shared_buffers = "2MB", .strict = true};
	ck_assert_int_eq(tu_wait(tu_fork(conflicting_open, &quiet)), 0);
	ck_assert_int_eq(tu_wait(tu_fork(conflicting_open, &warn)), 0);
	ck_assert_int_eq(tu_wait(tu_fork(conflicting_open, &strict)), 0);
	read_file(abs, WR_LOG_FILE, log, sizeof(log));
	ck_assert_msg(strstr(log, "WARNING:  instance options not applied: shared_buffers=2MB "
	                          "(the running instance uses 1MB)") != NULL,
	              "%s", log);
	/* The instance took no harm: its first handle still works. */
	ck_assert_int_eq(walrus_put(db, "k2", 2, "v", 1, WALRUS_SYNC), WALRUS_OK);
	ck_assert_int_eq(engine_sh()->opts.shared_buffers, 1 << 20);
	tu_close_and_wait(db);
}
END_TEST

/* A second handle of the same process goes through the same check. */
START_TEST(conflicting_second_handle)
{
	char abs[PATH_MAX];
	ck_assert_ptr_nonnull(realpath(tu_tmpdir("walrus-conf"), abs));
	walrus_opts *o = test_opts();
	ck_assert_int_eq(walrus_opts_set(o, "shared_buffers", "1MB"), WALRUS_OK);
	walrus *db = tu_open(abs, o), *db2 = NULL;

	o = test_opts();
	ck_assert_int_eq(walrus_opts_set(o, "shared_buffers", "2MB"), WALRUS_OK);
	ck_assert_int_eq(walrus_open(abs, o, &db2), WALRUS_OK);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "shared_buffers=2MB"));
	ck_assert_int_eq(walrus_close(db2), WALRUS_OK);
	ck_assert_int_eq(walrus_opts_set(o, "strict_options", "on"), WALRUS_OK);
	db2 = NULL;
	ck_assert_int_eq(walrus_open(abs, o, &db2), WALRUS_EINVAL);
	ck_assert_ptr_null(db2);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "the running instance uses 1MB"));
	walrus_opts_free(o);
	/* The first handle keeps its attachment. */
	ck_assert_int_eq(walrus_put(db, "k", 1, "v", 1, WALRUS_SYNC), WALRUS_OK);
	tu_close_and_wait(db);
}
END_TEST

static Suite *conf_suite(void)
{
	Suite *s = suite_create("conf");
	TCase *f = tcase_create("file");
	tcase_add_test(f, format_accepted);
	tcase_add_test(f, format_missing_file_sets_nothing);
	tcase_add_test(f, format_errors_name_file_line_option);
	tcase_add_test(f, set_keeps_the_users_lines);
	tcase_add_test(f, set_keeps_a_replaced_lines_comment);
	tcase_add_test(f, set_quotes_what_needs_it);
	tcase_add_test(f, set_refuses_and_leaves_the_file);
	tcase_add_test(f, server_settings_and_secret);
	tcase_add_test(f, precedence_default_file_command_line);
	suite_add_tcase(s, f);
	TCase *i = tcase_create("instance");
	tcase_set_timeout(i, 120);
	tcase_add_test(i, instance_uses_file_and_records_sources);
	tcase_add_test(i, new_setting_after_restart);
	tcase_add_test(i, bad_file_fails_the_start);
	tcase_add_test(i, conflicting_instance_options);
	tcase_add_test(i, conflicting_second_handle);
	suite_add_tcase(s, i);
	return s;
}

int main(void)
{
	return tu_run(conf_suite());
}
