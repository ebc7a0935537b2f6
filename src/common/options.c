/*
 * options.c - the option table: every engine knob, its default, its range.
 *
 * Interface: wr_opts_defaults/set/get/validate/json work on a wr_options
 * through the table below; wr_parse_size/time_us/bool are the unit parsers,
 * also used by the command line; walrus_opts_* is the public face.
 * wr_opts_set also marks the option as set explicitly (set_mask): such a
 * value outranks DIR/walrus.conf when it starts an instance, and is
 * compared with the running instance's when it opens one (engine/conf.c,
 * engine/client.c).
 *
 * Notes: defaults are written as text and parsed by the same code as user
 * input, so a default can never escape its own range and what
 * wr_opts_get() prints always parses back to the same value.
 * Sizes are integers with an optional unit (B, kB, MB, GB, TB; 1kB = 1024 B;
 * a plain number is bytes).  Times are integers with a unit (us, ms, s,
 * min, h, d); a plain number means the option's natural unit, as in
 * PostgreSQL: milliseconds for the *_delay knobs, seconds for the others.
 * Reals are read and printed in the C locale whatever the embedding
 * application chose, so "0.9" means the same everywhere.
 */
#include "common/common.h"

#include <ctype.h>
#include <locale.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define KB   (1024.0)
#define MB   (1024.0 * KB)
#define GB   (1024.0 * MB)
#define TB   (1024.0 * GB)
#define MS   (1000.0)
#define SEC  (1000.0 * MS)
#define MIN  (60.0 * SEC)
#define HOUR (60.0 * MIN)
#define DAY  (24.0 * HOUR)

static const char *const sync_method_names[] = {"fdatasync", "fsync", "open_datasync", NULL};
static const char *const io_method_names[] = {"sync", "io_uring", NULL};
static const char *const sync_level_names[] = {"flush", "apply", NULL};
static const char *const compression_names[] = {"off", "zstd", NULL};
static const char *const huge_pages_names[] = {"off", "try", "on", NULL};
static const char *const direct_io_names[] = {"off", "on", "auto", NULL};
static const char *const log_level_names[] = {"debug", "log",   "warning", "error",
                                              "fatal", "panic", NULL};

#define OPT(name_, type_, scope_, field_, def_, min_, max_, enums_, help_)                         \
	{                                                                                          \
		.name = (name_), .type = (type_), .scope = (scope_),                               \
		.offset = offsetof(wr_options, field_), /* NOLINT(bugprone-macro-parentheses) */   \
		    .def = (def_), .min = (min_), .max = (max_), .enum_names = (enums_),           \
		.help = (help_)                                                                    \
	}
#define INST WR_SCOPE_INSTANCE
#define SESS WR_SCOPE_SESSION
#define SERV WR_SCOPE_SERVER

static const wr_opt_desc opt_table[] = {
    OPT("shared_buffers", WR_OPT_SIZE, INST, shared_buffers, "128MB", 128 * KB, 64 * GB, NULL,
        "memory of the shared buffer pool"),
    OPT("huge_pages", WR_OPT_ENUM, INST, huge_pages, "try", 0, 0, huge_pages_names,
        "put shared memory in huge pages (vm.nr_hugepages): off, try, on"),
    OPT("mmap_reads", WR_OPT_BOOL, INST, mmap_reads, "off", 0, 0, NULL,
        "gets read leaves the pool does not hold through a mapping of the data file "
        "(walrus then handles SIGBUS in the process)"),
    OPT("data_direct_io", WR_OPT_ENUM, INST, data_direct_io, "off", 0, 0, direct_io_names,
        "open data files with O_DIRECT: pages bypass the page cache (auto: unless "
        "mmap_reads is on or the file system refuses it)"),
    OPT("snapshot_memory", WR_OPT_SIZE, INST, snapshot_memory, "32MB", 256 * KB, 64 * GB, NULL,
        "shared memory for the old versions live snapshots and transactions need; when "
        "full, the oldest snapshots are invalidated"),
    OPT("old_snapshot_threshold", WR_OPT_TIME, INST, old_snapshot_threshold_us, "0", 0, 30 * DAY,
        NULL,
        "reads through a snapshot older than this fail, and its versions may go "
        "(0: no limit)"),
    OPT("max_open_files", WR_OPT_INT, INST, max_open_files, "1000", 8, 1000000, NULL,
        "file descriptors each process keeps open in its fd cache"),
    OPT("data_segment_size", WR_OPT_SIZE, INST, data_segment_size, "1GB", 64 * KB, 1 * GB, NULL,
        "size of one data file segment"),
    OPT("max_connections", WR_OPT_INT, INST, max_connections, "100", 1, 10000, NULL,
        "backends (handles of every process and thread) attached at once"),
    OPT("wal_segment_size", WR_OPT_SIZE, INST, wal_segment_size, "16MB", 64 * KB, 1 * GB, NULL,
        "size of one WAL segment file"),
    OPT("wal_buffers", WR_OPT_SIZE, INST, wal_buffers, "4MB", 64 * KB, 1 * GB, NULL,
        "shared memory for WAL not yet written"),
    OPT("wal_sync_method", WR_OPT_ENUM, INST, wal_sync_method, "fdatasync", 0, 0, sync_method_names,
        "how WAL is forced to disk"),
    OPT("wal_direct_io", WR_OPT_ENUM, INST, wal_direct_io, "auto", 0, 0, direct_io_names,
        "open WAL segments with O_DIRECT (auto: unless archiving or replication reads them)"),
    OPT("io_method", WR_OPT_ENUM, INST, io_method, "sync", 0, 0, io_method_names,
        "system calls used for checkpoint, bgwriter, WAL and recovery I/O"),
    OPT("wal_compression", WR_OPT_ENUM, INST, wal_compression, "off", 0, 0, compression_names,
        "compression of full page images in the WAL (on = zstd)"),
    OPT("wal_compression_level", WR_OPT_INT, INST, wal_compression_level, "3", 1, 19, NULL,
        "zstd level for wal_compression"),
    OPT("wal_writer_delay", WR_OPT_TIME, INST, wal_writer_delay_us, "200ms", 1 * MS, 10 * SEC, NULL,
        "sleep between WAL writer rounds"),
    OPT("full_page_writes", WR_OPT_BOOL, INST, full_page_writes, "on", 0, 0, NULL,
        "log a whole page at its first change after a checkpoint (torn-page protection)"),
    OPT("synchronous_commit", WR_OPT_BOOL, SESS, synchronous_commit, "on", 0, 0, NULL,
        "wait for the WAL flush before acknowledging a write"),
    OPT("commit_gather", WR_OPT_TIME, INST, commit_gather_us, "250us", 0, 10 * MS, NULL,
        "longest wait of a group-commit leader for other committers (0: flush at once)"),
    OPT("checkpoint_timeout", WR_OPT_TIME, INST, checkpoint_timeout_us, "5min", 1 * SEC, 1 * DAY,
        NULL, "longest time between automatic checkpoints"),
    OPT("checkpoint_warning", WR_OPT_TIME, INST, checkpoint_warning_us, "30s", 0, 1 * DAY, NULL,
        "warn when WAL volume starts checkpoints closer together than this (0: never)"),
    OPT("max_wal_size", WR_OPT_SIZE, INST, max_wal_size, "1GB", 128 * KB, 1 * TB, NULL,
        "WAL written since the last checkpoint that triggers a checkpoint"),
    OPT("min_wal_size", WR_OPT_SIZE, INST, min_wal_size, "80MB", 64 * KB, 1 * TB, NULL,
        "WAL kept for recycling rather than removed"),
    OPT("checkpoint_completion_target", WR_OPT_REAL, INST, checkpoint_completion_target, "0.9", 0.0,
        1.0, NULL, "fraction of the checkpoint interval over which writes are spread"),
    OPT("checkpoint_flush_after", WR_OPT_SIZE, INST, checkpoint_flush_after, "256kB", 0, 2 * MB,
        NULL, "checkpoint writes after which write-back is requested (0 disables)"),
    OPT("checkpoint_sort", WR_OPT_BOOL, INST, checkpoint_sort, "on", 0, 0, NULL,
        "write checkpoint pages in file and block order"),
    OPT("log_checkpoints", WR_OPT_BOOL, INST, log_checkpoints, "on", 0, 0, NULL,
        "log each checkpoint with its statistics"),
    OPT("bgwriter_delay", WR_OPT_TIME, INST, bgwriter_delay_us, "20ms", 10 * MS, 10 * SEC, NULL,
        "sleep between background writer rounds"),
    OPT("bgwriter_lru_maxpages", WR_OPT_INT, INST, bgwriter_lru_maxpages, "1000", 0, 1073741823,
        NULL, "most pages the background writer writes per round (0 disables)"),
    OPT("bgwriter_lru_multiplier", WR_OPT_REAL, INST, bgwriter_lru_multiplier, "2.0", 0.0, 10.0,
        NULL, "multiple of recent buffer demand the background writer cleans ahead"),
    OPT("bgwriter_flush_after", WR_OPT_SIZE, INST, bgwriter_flush_after, "512kB", 0, 2 * MB, NULL,
        "background writer writes after which write-back is requested (0 disables)"),
    OPT("supervisor_linger", WR_OPT_TIME, INST, supervisor_linger_us, "1s", 0, 1 * HOUR, NULL,
        "time the supervisor waits after the last detach before shutting down"),
    OPT("log_min_messages", WR_OPT_ENUM, INST, log_min_messages, "log", 0, 0, log_level_names,
        "lowest level written to DIR/log/walrus.log"),
    OPT("create_if_missing", WR_OPT_BOOL, SESS, create_if_missing, "off", 0, 0, NULL,
        "create and initialise the data directory if it does not exist"),
    OPT("strict_options", WR_OPT_BOOL, SESS, strict_options, "off", 0, 0, NULL,
        "fail the open when an instance option set differs from the running instance's"),
    OPT("client_query_buffer_limit", WR_OPT_SIZE, SERV, client_query_buffer_limit, "1GB", 1 * MB,
        16 * GB, NULL,
        "RESP server: unparsed input a connection may hold (beyond: error and close)"),
    OPT("authentication_timeout", WR_OPT_TIME, SERV, authentication_timeout_us, "10s", 1 * SEC,
        10 * MIN, NULL,
        "RESP server with a password: connections not authenticated by then are closed"),
    OPT("databases", WR_OPT_INT, SERV, databases, "16", 1, 1000000, NULL,
        "RESP server: databases SELECT chooses from (n > 0 is key space \"dbN\")"),
    OPT("archive_mode", WR_OPT_BOOL, INST, archive_mode, "off", 0, 0, NULL,
        "archive each completed WAL segment (walrus-arch) before it may be recycled"),
    OPT("archive_dir", WR_OPT_STRING, INST, archive_dir, "", 0, 0, NULL,
        "archive_mode: copy segments into this directory (or use archive_command)"),
    OPT("archive_command", WR_OPT_STRING, INST, archive_command, "", 0, 0, NULL,
        "archive_mode: shell command archiving %p (segment path) as %f (archive name)"),
    OPT("archive_timeout", WR_OPT_TIME, INST, archive_timeout_us, "0", 0, 1 * DAY, NULL,
        "switch to a new WAL segment when the current one is older than this (0: never)"),
    OPT("listen_replication", WR_OPT_STRING, INST, listen_replication, "", 0, 0, NULL,
        "serve WAL to standbys on HOST:PORT or an absolute socket path (\"\": off; needs "
        "replication_password in walrus.conf)"),
    OPT("max_wal_senders", WR_OPT_INT, INST, max_wal_senders, "4", 0, 64, NULL,
        "standbys served at once (a WAL sender process each)"),
    OPT("wal_sender_timeout", WR_OPT_TIME, INST, wal_sender_timeout_us, "1min", 1 * SEC, 1 * DAY,
        NULL, "a standby that does not answer for this long is disconnected"),
    OPT("wal_sender_delay", WR_OPT_TIME, INST, wal_sender_delay_us, "10ms", 0, 10 * SEC, NULL,
        "an asynchronous standby's sender sends the WAL flushed at most this often (0: at "
        "every flush; a synchronous standby's is sent at every flush)"),
    OPT("ssl", WR_OPT_BOOL, INST, ssl, "off", 0, 0, NULL,
        "TLS on listen_replication: every standby connects with TLS (needs ssl_cert_file "
        "and ssl_key_file)"),
    OPT("ssl_cert_file", WR_OPT_STRING, INST, ssl_cert_file, "", 0, 0, NULL,
        "ssl: the primary's certificate chain (PEM; relative to the data directory)"),
    OPT("ssl_key_file", WR_OPT_STRING, INST, ssl_key_file, "", 0, 0, NULL,
        "ssl: the certificate's private key (PEM, mode 0600; relative to the data directory)"),
    OPT("ssl_ca_file", WR_OPT_STRING, INST, ssl_ca_file, "", 0, 0, NULL,
        "ssl: CA certificates (PEM): standbys must present a certificate they signed (\"\": "
        "no client certificate asked for)"),
    OPT("synchronous_standby", WR_OPT_STRING, INST, synchronous_standby, "", 0, 0, NULL,
        "durable commits wait until the standby of this application_name confirms them"),
    OPT("synchronous_standby_level", WR_OPT_ENUM, INST, synchronous_standby_level, "flush", 0, 0,
        sync_level_names, "what the synchronous standby confirms: flush (durable) or apply"),
    OPT("max_replication_slots", WR_OPT_INT, INST, max_replication_slots, "8", 0, 64, NULL,
        "replication slots that may exist (each keeps the WAL its standby needs)"),
    OPT("max_slot_wal_keep_size", WR_OPT_SIZE, INST, max_slot_wal_keep_size, "1GB", 16 * MB, 1 * TB,
        NULL, "WAL a slot may hold back behind the redo point before it is invalidated"),
};

_Static_assert(WR_ARRAY_LEN(opt_table) <= WR_OPTS_MAX, "set_mask has a bit per option");

#undef INST
#undef SESS
#undef SERV

/* Constraints the generic table cannot say. */
struct opt_rule {
	const char *name;
	int64_t multiple;  /* value must be a multiple of this */
	bool pow2;         /* value must be a power of two */
	double plain_unit; /* TIME: microseconds meant by a number without a unit */
};

static const struct opt_rule opt_rules[] = {
    {.name = "shared_buffers", .multiple = WR_PAGE_SIZE},
    {.name = "data_segment_size", .multiple = WR_PAGE_SIZE},
    {.name = "wal_buffers", .multiple = WR_PAGE_SIZE},
    {.name = "checkpoint_flush_after", .multiple = WR_PAGE_SIZE},
    {.name = "bgwriter_flush_after", .multiple = WR_PAGE_SIZE},
    {.name = "wal_segment_size", .pow2 = true},
    {.name = "wal_writer_delay", .plain_unit = MS},
    {.name = "commit_gather", .plain_unit = 1},
    {.name = "bgwriter_delay", .plain_unit = MS},
    {.name = "checkpoint_timeout", .plain_unit = SEC},
    {.name = "checkpoint_warning", .plain_unit = SEC},
    {.name = "old_snapshot_threshold", .plain_unit = SEC},
    {.name = "snapshot_memory", .multiple = 8},
    {.name = "supervisor_linger", .plain_unit = SEC},
    {.name = "archive_timeout", .plain_unit = SEC},
    {.name = "wal_sender_timeout", .plain_unit = MS},
    {.name = "wal_sender_delay", .plain_unit = MS},
};

static const struct opt_rule no_rule = {.name = "", .plain_unit = SEC};

struct unit {
	const char *name;
	int64_t factor;
};

/* Largest first: formatting picks the first unit that divides the value. */
static const struct unit size_units[] = {
    {"TB", 1LL << 40}, {"GB", 1LL << 30}, {"MB", 1LL << 20}, {"kB", 1LL << 10}, {"B", 1},
};
static const struct unit time_units[] = {
    {"d", 86400000000LL}, {"h", 3600000000LL}, {"min", 60000000LL},
    {"s", 1000000LL},     {"ms", 1000LL},      {"us", 1},
};

/* A value of any option type, before it is stored in its field. */
union opt_value {
	bool b;
	int64_t i;
	double r;
	int e;
	const char *s; /* STRING: the text, or the field it is in */
};

/* ------------------------------------------------------------ lookups */

static const wr_opt_desc *find_opt(const char *name)
{
	if (name == NULL)
		return NULL;
	for (size_t i = 0; i < WR_ARRAY_LEN(opt_table); i++)
		if (strcmp(opt_table[i].name, name) == 0)
			return &opt_table[i];
	return NULL;
}

static const struct opt_rule *find_rule(const wr_opt_desc *d)
{
	for (size_t i = 0; i < WR_ARRAY_LEN(opt_rules); i++)
		if (strcmp(opt_rules[i].name, d->name) == 0)
			return &opt_rules[i];
	return &no_rule;
}

const wr_opt_desc *wr_opts_table(size_t *count)
{
	if (count != NULL)
		*count = WR_ARRAY_LEN(opt_table);
	return opt_table;
}

/* ------------------------------------------------------------ C locale */

/*
 * Created once and never freed.  Threads that race to create it each make
 * one; the first published wins and the others free theirs.
 */
static _Atomic(locale_t) c_loc;

static locale_t c_locale(void)
{
	locale_t loc = atomic_load_explicit(&c_loc, memory_order_acquire);
	if (loc != (locale_t)0)
		return loc;
	/* On failure (ENOMEM) fall back to the current locale: still right in most programs. */
	locale_t mine = newlocale(LC_ALL_MASK, "C", (locale_t)0);
	if (mine == (locale_t)0)
		return mine;
	if (atomic_compare_exchange_strong_explicit(&c_loc, &loc, mine, memory_order_acq_rel,
	                                            memory_order_acquire))
		return mine;
	freelocale(mine); /* another thread's is in place: @loc */
	return loc;
}

/* ------------------------------------------------------------ parsing */

/* Reads decimal digits (at least one) into *out; false on overflow or no digit. */
static bool parse_digits(const char **sp, int64_t *out)
{
	const char *s = *sp;
	int64_t v = 0;

	if (!isdigit((unsigned char)*s))
		return false;
	for (; isdigit((unsigned char)*s); s++)
		if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *s - '0', &v))
			return false;
	*sp = s;
	*out = v;
	return true;
}

/* Number, optional blanks, optional unit from @units; a missing unit means @plain. */
static bool parse_with_units(const char *s, const struct unit *units, size_t nunits, int64_t plain,
                             int64_t *out)
{
	int64_t n, factor = plain;

	if (s == NULL || !parse_digits(&s, &n))
		return false;
	while (*s == ' ' || *s == '\t')
		s++;
	if (*s != '\0') {
		size_t i;
		for (i = 0; i < nunits; i++)
			if (strcasecmp(s, units[i].name) == 0)
				break;
		if (i == nunits)
			return false;
		factor = units[i].factor;
	} else if (plain <= 0) {
		return false;
	}
	return !__builtin_mul_overflow(n, factor, out);
}

static bool parse_size(const char *s, int64_t *out)
{
	return parse_with_units(s, size_units, WR_ARRAY_LEN(size_units), 1, out);
}

static bool parse_time(const char *s, int64_t plain_unit, int64_t *out)
{
	return parse_with_units(s, time_units, WR_ARRAY_LEN(time_units), plain_unit, out);
}

static bool parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = {"on", "true", "yes", "1"};
	static const char *const no[] = {"off", "false", "no", "0"};

	if (s == NULL)
		return false;
	for (size_t i = 0; i < WR_ARRAY_LEN(yes); i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = true;
			return true;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = false;
			return true;
		}
	}
	return false;
}

static bool parse_int(const char *s, int64_t *out)
{
	bool neg = false;

	if (s == NULL)
		return false;
	if (*s == '-' || *s == '+')
		neg = *s++ == '-';
	if (!parse_digits(&s, out) || *s != '\0')
		return false;
	if (neg)
		*out = -*out;
	return true;
}

static bool parse_real(const char *s, double *out)
{
	char *end;

	/* strtod would skip leading blanks and take "nan" or hex; none is a sane knob value. */
	if (s == NULL || !(isdigit((unsigned char)*s) || *s == '.' || *s == '-' || *s == '+'))
		return false;
	locale_t loc = c_locale();
	*out = loc ? strtod_l(s, &end, loc) : strtod(s, &end);
	return end != s && *end == '\0' && isfinite(*out);
}

static bool parse_enum(const char *s, const char *const *names, int *out)
{
	if (s == NULL)
		return false;
	for (int i = 0; names[i] != NULL; i++)
		if (strcasecmp(s, names[i]) == 0) {
			*out = i;
			return true;
		}
	return false;
}

int wr_parse_size(const char *s, int64_t *out)
{
	if (!parse_size(s, out) || *out < 0)
		return wr_error(WALRUS_EINVAL,
		                "invalid size \"%.100s\" (expected a number with an optional unit "
		                "B, kB, MB, GB or TB, such as 128MB)",
		                s ? s : "");
	return WALRUS_OK;
}

/* Without an option to give it a natural unit, a bare number other than 0 is ambiguous. */
int wr_parse_time_us(const char *s, int64_t *out)
{
	if (s != NULL && strcmp(s, "0") == 0) {
		*out = 0;
		return WALRUS_OK;
	}
	if (!parse_time(s, 0, out))
		return wr_error(WALRUS_EINVAL,
		                "invalid time \"%.100s\" (expected a number with a unit us, ms, s, "
		                "min, h or d, such as 200ms)",
		                s ? s : "");
	return WALRUS_OK;
}

int wr_parse_bool(const char *s, bool *out)
{
	if (!parse_bool(s, out))
		return wr_error(WALRUS_EINVAL, "invalid boolean \"%.100s\" (expected on or off)",
		                s ? s : "");
	return WALRUS_OK;
}

/* ------------------------------------------------------------ formatting */

static void format_with_units(int64_t v, const struct unit *units, size_t nunits, char *buf,
                              size_t len)
{
	if (v == 0) {
		wr_snprintf(buf, len, "0");
		return;
	}
	for (size_t i = 0; i < nunits; i++)
		if (v % units[i].factor == 0) {
			wr_snprintf(buf, len, "%lld%s", (long long)(v / units[i].factor),
			            units[i].name);
			return;
		}
}

/* The shortest text that reads back as exactly @v. */
static void format_real(double v, char *buf, size_t len)
{
	locale_t loc = c_locale();
	locale_t old = loc ? uselocale(loc) : (locale_t)0;
	char *end;

	wr_snprintf(buf, len, "%.15g", v);
	if (strtod(buf, &end) != v)
		wr_snprintf(buf, len, "%.17g", v);
	/* Keep it recognisably a real, as a reader of the dump expects ("2.0", not "2"). */
	if (strspn(buf, "-0123456789") == strlen(buf) && strlen(buf) + 2 < len)
		strcat(buf, ".0");
	if (loc)
		uselocale(old);
}

static void format_value(const wr_opt_desc *d, union opt_value v, char *buf, size_t len)
{
	switch (d->type) {
	case WR_OPT_BOOL:
		wr_snprintf(buf, len, "%s", v.b ? "on" : "off");
		break;
	case WR_OPT_INT:
		wr_snprintf(buf, len, "%lld", (long long)v.i);
		break;
	case WR_OPT_SIZE:
		format_with_units(v.i, size_units, WR_ARRAY_LEN(size_units), buf, len);
		break;
	case WR_OPT_TIME:
		format_with_units(v.i, time_units, WR_ARRAY_LEN(time_units), buf, len);
		break;
	case WR_OPT_REAL:
		format_real(v.r, buf, len);
		break;
	case WR_OPT_ENUM: {
		int n = 0;
		while (d->enum_names[n] != NULL)
			n++;
		wr_snprintf(buf, len, "%s", v.e >= 0 && v.e < n ? d->enum_names[v.e] : "?");
		break;
	}
	case WR_OPT_STRING:
		wr_snprintf(buf, len, "%s", v.s);
		break;
	}
}

/* ------------------------------------------------------------ field access */

static union opt_value load_field(const wr_options *o, const wr_opt_desc *d)
{
	const char *p = (const char *)o + d->offset;
	union opt_value v = {0};

	switch (d->type) {
	case WR_OPT_BOOL:
		memcpy(&v.b, p, sizeof(v.b));
		break;
	case WR_OPT_INT:
	case WR_OPT_SIZE:
	case WR_OPT_TIME:
		memcpy(&v.i, p, sizeof(v.i));
		break;
	case WR_OPT_REAL:
		memcpy(&v.r, p, sizeof(v.r));
		break;
	case WR_OPT_ENUM:
		memcpy(&v.e, p, sizeof(v.e));
		break;
	case WR_OPT_STRING:
		v.s = p;
		break;
	}
	return v;
}

static void store_field(wr_options *o, const wr_opt_desc *d, union opt_value v)
{
	char *p = (char *)o + d->offset;

	switch (d->type) {
	case WR_OPT_BOOL:
		memcpy(p, &v.b, sizeof(v.b));
		break;
	case WR_OPT_INT:
	case WR_OPT_SIZE:
	case WR_OPT_TIME:
		memcpy(p, &v.i, sizeof(v.i));
		break;
	case WR_OPT_REAL:
		memcpy(p, &v.r, sizeof(v.r));
		break;
	case WR_OPT_ENUM:
		memcpy(p, &v.e, sizeof(v.e));
		break;
	case WR_OPT_STRING: {
		/* value_ok checked the length; @v may be this very field. */
		size_t n = strnlen(v.s, WR_OPT_STR_MAX - 1);
		memmove(p, v.s, n);
		p[n] = '\0';
		break;
	}
	}
}

/* ------------------------------------------------------------ checking */

/* Fits its field, and one line: walrus.settings and the log show it as such. */
static bool string_ok(const char *s)
{
	size_t n = strnlen(s, WR_OPT_STR_MAX);
	if (n >= WR_OPT_STR_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return true;
}

static bool value_ok(const wr_opt_desc *d, union opt_value v)
{
	const struct opt_rule *r = find_rule(d);

	switch (d->type) {
	case WR_OPT_BOOL:
		return true;
	case WR_OPT_ENUM: {
		int n = 0;
		while (d->enum_names[n] != NULL)
			n++;
		return v.e >= 0 && v.e < n;
	}
	case WR_OPT_REAL:
		return v.r >= d->min && v.r <= d->max; /* false for NaN too */
	case WR_OPT_STRING:
		return string_ok(v.s);
	}
	if (v.i < (int64_t)d->min || v.i > (int64_t)d->max)
		return false;
	if (r->multiple > 0 && v.i % r->multiple != 0)
		return false;
	if (r->pow2 && (v.i <= 0 || (v.i & (v.i - 1)) != 0))
		return false;
	return true;
}

/* Spellings users bring from PostgreSQL: wal_compression = on picks the one method there is. */
static const struct {
	const char *opt, *alias, *value;
} enum_aliases[] = {
    {"wal_compression", "on", "zstd"},
    /* wal_direct_io was a boolean: its spellings still mean on and off. */
    {"wal_direct_io", "true", "on"},
    {"wal_direct_io", "yes", "on"},
    {"wal_direct_io", "1", "on"},
    {"wal_direct_io", "false", "off"},
    {"wal_direct_io", "no", "off"},
    {"wal_direct_io", "0", "off"},
};

static const char *enum_alias(const wr_opt_desc *d, const char *text)
{
	for (size_t i = 0; i < WR_ARRAY_LEN(enum_aliases); i++)
		if (strcmp(d->name, enum_aliases[i].opt) == 0 &&
		    strcasecmp(text, enum_aliases[i].alias) == 0)
			return enum_aliases[i].value;
	return text;
}

static bool parse_value(const wr_opt_desc *d, const char *text, union opt_value *v)
{
	switch (d->type) {
	case WR_OPT_BOOL:
		return parse_bool(text, &v->b);
	case WR_OPT_INT:
		return parse_int(text, &v->i);
	case WR_OPT_SIZE:
		return parse_size(text, &v->i);
	case WR_OPT_TIME:
		return parse_time(text, (int64_t)find_rule(d)->plain_unit, &v->i);
	case WR_OPT_REAL:
		return parse_real(text, &v->r);
	case WR_OPT_ENUM:
		return parse_enum(enum_alias(d, text), d->enum_names, &v->e);
	case WR_OPT_STRING:
		v->s = text;
		return text != NULL;
	}
	return false;
}

/* "(expected a size such as 128MB, a multiple of 8kB between 128kB and 64GB)" */
static void describe_expected(const wr_opt_desc *d, char *buf, size_t len)
{
	const struct opt_rule *r = find_rule(d);
	union opt_value lo = {.i = (int64_t)d->min}, hi = {.i = (int64_t)d->max};
	char los[32], his[32], extra[48] = "";

	if (d->type == WR_OPT_REAL) {
		lo.r = d->min;
		hi.r = d->max;
	}
	format_value(d, lo, los, sizeof(los));
	format_value(d, hi, his, sizeof(his));
	if (r->multiple > 0) {
		char m[16];
		format_with_units(r->multiple, size_units, WR_ARRAY_LEN(size_units), m, sizeof(m));
		wr_snprintf(extra, sizeof(extra), ", a multiple of %s", m);
	} else if (r->pow2) {
		wr_snprintf(extra, sizeof(extra), ", a power of two");
	}

	switch (d->type) {
	case WR_OPT_BOOL:
		wr_snprintf(buf, len, "expected on or off");
		break;
	case WR_OPT_INT:
		wr_snprintf(buf, len, "expected an integer between %s and %s", los, his);
		break;
	case WR_OPT_SIZE:
		wr_snprintf(buf, len, "expected a size such as %s%s, between %s and %s", d->def,
		            extra, los, his);
		break;
	case WR_OPT_TIME:
		wr_snprintf(
		    buf, len,
		    "expected a time such as %s, between %s and %s; a plain number is in %s",
		    d->def, los, his, r->plain_unit == MS ? "milliseconds" : "seconds");
		break;
	case WR_OPT_REAL:
		wr_snprintf(buf, len, "expected a number between %s and %s", los, his);
		break;
	case WR_OPT_ENUM: {
		size_t used = (size_t)snprintf(buf, len, "expected one of:");
		for (int i = 0; d->enum_names[i] != NULL && used < len; i++)
			used += (size_t)snprintf(buf + used, len - used, "%s %s", i ? "," : "",
			                         d->enum_names[i]);
		break;
	}
	case WR_OPT_STRING:
		wr_snprintf(buf, len, "expected at most %d characters on one line",
		            WR_OPT_STR_MAX - 1);
		break;
	}
}

static int invalid_value(const wr_opt_desc *d, const char *text)
{
	char expected[256];

	describe_expected(d, expected, sizeof(expected));
	return wr_error(WALRUS_EINVAL, "invalid value for option \"%s\": \"%.100s\" (%s)", d->name,
	                text ? text : "", expected);
}

/* ------------------------------------------------------------ the interface */

void wr_opts_defaults(wr_options *o)
{
	memset(o, 0, sizeof(*o));
	for (size_t i = 0; i < WR_ARRAY_LEN(opt_table); i++) {
		const wr_opt_desc *d = &opt_table[i];
		union opt_value v;
		if (!parse_value(d, d->def, &v) || !value_ok(d, v))
			wr_panic("default \"%s\" of option \"%s\" is invalid", d->def, d->name);
		store_field(o, d, v);
	}
}

int wr_opts_set(wr_options *o, const char *name, const char *value)
{
	const wr_opt_desc *d = find_opt(name);
	union opt_value v;

	if (o == NULL)
		return wr_error(WALRUS_EINVAL, "no options object given");
	if (d == NULL)
		return wr_error(WALRUS_EINVAL, "unrecognized option \"%.100s\"", name ? name : "");
	if (!parse_value(d, value, &v) || !value_ok(d, v))
		return invalid_value(d, value);
	store_field(o, d, v);
	o->set_mask |= 1ULL << (size_t)(d - opt_table);
	return WALRUS_OK;
}

int wr_opts_get(const wr_options *o, const char *name, char *buf, size_t len)
{
	const wr_opt_desc *d = find_opt(name);
	char text[WR_OPT_TEXT_MAX];

	if (o == NULL || buf == NULL)
		return wr_error(WALRUS_EINVAL, "no options object or buffer given");
	if (d == NULL)
		return wr_error(WALRUS_EINVAL, "unrecognized option \"%.100s\"", name ? name : "");
	format_value(d, load_field(o, d), text, sizeof(text));
	if (!wr_snprintf(buf, len, "%s", text))
		return wr_error(WALRUS_EINVAL, "buffer of %zu bytes too small for option \"%s\"",
		                len, d->name);
	return WALRUS_OK;
}

/* @a's value must not exceed @b's; the message names both. */
static int check_le(const wr_options *o, const char *a, const char *b)
{
	int64_t va = load_field(o, find_opt(a)).i;
	int64_t vb = load_field(o, find_opt(b)).i;
	char sa[32], sb[32];

	if (va <= vb)
		return WALRUS_OK;
	wr_opts_get(o, a, sa, sizeof(sa));
	wr_opts_get(o, b, sb, sizeof(sb));
	return wr_error(WALRUS_EINVAL,
	                "option \"%s\" (%s) must not be greater than option \"%s\" (%s)", a, sa, b,
	                sb);
}

int wr_opts_validate(const wr_options *o)
{
	int rc;

	if (o == NULL)
		return wr_error(WALRUS_EINVAL, "no options object given");
	for (size_t i = 0; i < WR_ARRAY_LEN(opt_table); i++) {
		const wr_opt_desc *d = &opt_table[i];
		union opt_value v = load_field(o, d);
		if (!value_ok(d, v)) {
			char text[WR_OPT_TEXT_MAX];
			format_value(d, v, text, sizeof(text));
			return invalid_value(d, text);
		}
	}
	if ((rc = check_le(o, "min_wal_size", "max_wal_size")) != WALRUS_OK)
		return rc;
	/* A checkpoint must be able to finish before WAL fills: at least two segments. */
	if (o->max_wal_size / 2 < o->wal_segment_size) {
		char smax[32], sseg[32];
		wr_opts_get(o, "max_wal_size", smax, sizeof(smax));
		wr_opts_get(o, "wal_segment_size", sseg, sizeof(sseg));
		return wr_error(WALRUS_EINVAL,
		                "option \"max_wal_size\" (%s) must be at least twice option "
		                "\"wal_segment_size\" (%s)",
		                smax, sseg);
	}
	return WALRUS_OK;
}

int wr_opts_validate_instance(const wr_options *o)
{
	int rc = wr_opts_validate(o);
	/* A mapped read trusts the page cache to hold the file's latest copy of a
	 * page; direct writes bypass it (docs/architecture.md, "Direct I/O for
	 * data files"). */
	if (rc == WALRUS_OK && o->mmap_reads && o->data_direct_io == WR_DIRECT_ON)
		return wr_error(WALRUS_EINVAL,
		                "option \"mmap_reads\" cannot be on with option \"data_direct_io\" "
		                "on: mapped reads go through the page cache, which direct writes "
		                "bypass (use data_direct_io=auto to open data files O_DIRECT only "
		                "without mmap_reads)");
	if (rc == WALRUS_OK && o->listen_replication[0] != '\0' && o->max_wal_senders == 0)
		return wr_error(WALRUS_EINVAL, "option \"listen_replication\" is set but option "
		                               "\"max_wal_senders\" is 0");
	if (rc != WALRUS_OK || !o->archive_mode)
		return rc;
	if ((o->archive_dir[0] != '\0') == (o->archive_command[0] != '\0'))
		return wr_error(WALRUS_EINVAL,
		                "option \"archive_mode\" is on: set exactly one of options "
		                "\"archive_dir\" and \"archive_command\" (%s)",
		                o->archive_dir[0] != '\0' ? "both are set" : "neither is set");
	if (o->archive_dir[0] != '\0' && o->archive_dir[0] != '/')
		return wr_error(WALRUS_EINVAL,
		                "option \"archive_dir\" must be an absolute path (\"%.100s\")",
		                o->archive_dir);
	return WALRUS_OK;
}

int wr_opts_set_pair(wr_options *o, const char *name_eq_value)
{
	const char *eq = name_eq_value ? strchr(name_eq_value, '=') : NULL;
	char name[128];

	if (eq == NULL)
		return wr_error(WALRUS_EINVAL,
		                "invalid option setting \"%.100s\" (expected name=value)",
		                name_eq_value ? name_eq_value : "");
	const char *start = name_eq_value;
	const char *end = eq;
	while (start < end && isspace((unsigned char)*start))
		start++;
	while (end > start && isspace((unsigned char)end[-1]))
		end--;
	if ((size_t)(end - start) >= sizeof(name))
		return wr_error(WALRUS_EINVAL, "unrecognized option \"%.100s\"", start);
	memcpy(name, start, (size_t)(end - start));
	name[end - start] = '\0';

	const char *value = eq + 1;
	while (isspace((unsigned char)*value))
		value++;
	return wr_opts_set(o, name, value);
}

/* Appends like snprintf at *pos, which keeps counting past the end of buf. */
static void json_append(char *buf, size_t len, size_t *pos, const char *fmt, ...) WR_PRINTF(4, 5);
static void json_append(char *buf, size_t len, size_t *pos, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	int n =
	    *pos < len ? vsnprintf(buf + *pos, len - *pos, fmt, ap) : vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		*pos += (size_t)n;
}

/* @s as a JSON string; string options hold no control characters (string_ok). */
static void json_string(char *buf, size_t len, size_t *pos, const char *s)
{
	json_append(buf, len, pos, "\"");
	for (; *s != '\0'; s++) {
		if (*s == '"' || *s == '\\')
			json_append(buf, len, pos, "\\%c", *s);
		else
			json_append(buf, len, pos, "%c", *s);
	}
	json_append(buf, len, pos, "\"");
}

size_t wr_opts_json(const wr_options *o, char *buf, size_t len)
{
	size_t pos = 0;

	if (buf != NULL && len > 0)
		buf[0] = '\0';
	else
		len = 0;
	json_append(buf, len, &pos, "{");
	for (size_t i = 0; i < WR_ARRAY_LEN(opt_table); i++) {
		const wr_opt_desc *d = &opt_table[i];
		union opt_value v = load_field(o, d);
		const char *sep = i ? "," : "";
		char text[64];

		/* Names and values other than strings never contain '"' or '\\'. */
		if (d->type == WR_OPT_STRING) {
			json_append(buf, len, &pos, "%s\"%s\":", sep, d->name);
			json_string(buf, len, &pos, v.s);
		} else if (d->type == WR_OPT_BOOL) {
			json_append(buf, len, &pos, "%s\"%s\":%s", sep, d->name,
			            v.b ? "true" : "false");
		} else if (d->type == WR_OPT_INT) {
			json_append(buf, len, &pos, "%s\"%s\":%lld", sep, d->name, (long long)v.i);
		} else {
			format_value(d, v, text, sizeof(text));
			json_append(buf, len, &pos, "%s\"%s\":\"%s\"", sep, d->name, text);
		}
	}
	json_append(buf, len, &pos, "}");
	return pos;
}

const wr_opt_desc *wr_opts_find(const char *name, size_t *index)
{
	const wr_opt_desc *d = find_opt(name);

	if (d != NULL && index != NULL)
		*index = (size_t)(d - opt_table);
	return d;
}

bool wr_opts_is_set(const wr_options *o, size_t index)
{
	return index < WR_ARRAY_LEN(opt_table) && (o->set_mask >> index & 1) != 0;
}

void wr_opts_copy(wr_options *dst, const wr_options *src, size_t index)
{
	if (index >= WR_ARRAY_LEN(opt_table))
		return;
	store_field(dst, &opt_table[index], load_field(src, &opt_table[index]));
	dst->set_mask = (dst->set_mask & ~(1ULL << index)) | (src->set_mask & (1ULL << index));
}

const char *wr_opt_source_name(int source)
{
	switch (source) {
	case WR_SRC_DEFAULT:
		return "default";
	case WR_SRC_FILE:
		return "file";
	case WR_SRC_COMMAND_LINE:
		return "command line";
	case WR_SRC_CONTROL_FILE:
		return "control file";
	}
	return "unknown";
}

/* ------------------------------------------------------------ public API */

walrus_opts *walrus_opts_new(void)
{
	walrus_opts *opts = malloc(sizeof(*opts));

	if (opts == NULL) {
		wr_error(WALRUS_ENOMEM, "out of memory allocating options");
		return NULL;
	}
	wr_opts_defaults(&opts->o);
	return opts;
}

void walrus_opts_free(walrus_opts *opts)
{
	free(opts);
}

int walrus_opts_set(walrus_opts *opts, const char *name, const char *value)
{
	if (opts == NULL)
		return wr_error(WALRUS_EINVAL, "no options object given");
	return wr_opts_set(&opts->o, name, value);
}

int walrus_opts_get(const walrus_opts *opts, const char *name, char *buf, size_t len)
{
	if (opts == NULL)
		return wr_error(WALRUS_EINVAL, "no options object given");
	return wr_opts_get(&opts->o, name, buf, len);
}
