/*
 * common.h - the ground floor: CRC32C, SHA-256, logging, errors, options,
 * time, growing arrays.
 *
 * Owns: per-process logging state (sinks, process name, level), the
 * thread-local "last error" message, the option table.
 * Locks: none.  Log lines are written with one write(2) each to an O_APPEND
 * file, so lines of different processes never interleave.
 * Returns: WALRUS_* codes (include/walrus.h); wr_error() records a message.
 * PANICs: wr_panic() logs at PANIC and calls the installed panic handler,
 * which brings the instance down (the engine installs it: in auxiliary
 * processes it exits, in a backend it marks the instance crashed and unwinds
 * to the API boundary).  It never returns.
 */
#ifndef WALRUS_COMMON_H
#define WALRUS_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "walrus.h"

#define WR_PAGE_SIZE      WALRUS_PAGE_SIZE /* walrus_config.h: -Dpage_size */
#define WR_ARRAY_LEN(a)   (sizeof(a) / sizeof((a)[0]))
#define WR_MIN(a, b)      ((a) < (b) ? (a) : (b))
#define WR_MAX(a, b)      ((a) > (b) ? (a) : (b))
#define WR_ALIGN_UP(x, a) (((x) + ((a)-1)) & ~((uint64_t)(a)-1))
#define WR_PRINTF(f, a)   __attribute__((format(printf, f, a)))
#define WR_UNLIKELY(x)    __builtin_expect(!!(x), 0)
#define WR_LIKELY(x)      __builtin_expect(!!(x), 1)

/*
 * A small thread-local variable reached on hot paths (the current backend's
 * state of a module).  initial-exec: one %fs-relative load instead of a call
 * to __tls_get_addr in the shared library; the few such pointers fit the
 * static TLS surplus that glibc keeps for libraries loaded with dlopen().
 */
#define WR_TLS _Thread_local __attribute__((tls_model("initial-exec")))

/*
 * Reads that race with writers by design (a page peeked without a lock and
 * checked by its version afterwards, a WAL page written while inserters
 * still fill its tail): under ThreadSanitizer the reads between the two,
 * the caller's own and those of the libc calls and system calls it makes,
 * are not recorded.  A suppression cannot do it: it needs the earlier
 * access's stack, which TSan's history may have lost by the time the
 * writer comes.  No code elsewhere.
 */
#if defined(__SANITIZE_THREAD__)
#define WR_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WR_TSAN 1
#endif
#endif
#ifdef WR_TSAN
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
#define WR_RACY_READS_BEGIN() AnnotateIgnoreReadsBegin(__FILE__, __LINE__)
#define WR_RACY_READS_END()   AnnotateIgnoreReadsEnd(__FILE__, __LINE__)
#else
#define WR_RACY_READS_BEGIN() ((void)0)
#define WR_RACY_READS_END()   ((void)0)
#endif

/* This walrus's version ("0.2.0"): meson.build defines it from the project's. */
#ifndef WR_WALRUS_VERSION
#error "WR_WALRUS_VERSION is not defined: build with meson (meson.build sets it)"
#endif

/* ---------------------------------------------------------------- CRC32C */

/* CRC32C (Castagnoli), as in iSCSI/ext4: crc32c(0, "123456789", 9) == 0xE3069283. */
uint32_t crc32c(uint32_t crc, const void *data, size_t len);
/* The portable table-driven version, exposed so tests can compare the two. */
uint32_t crc32c_sw(uint32_t crc, const void *data, size_t len);
/* True when crc32c() uses the CPU's crc32 instruction (SSE4.2). */
bool crc32c_hw_available(void);

/* ---------------------------------------------------------------- logging */

enum wr_level { WR_DEBUG, WR_LOG, WR_WARNING, WR_ERROR, WR_FATAL, WR_PANIC };

/* "DEBUG", "LOG", ... ; parse returns -1 for an unknown name. */
const char *wr_level_name(int level);
int wr_level_parse(const char *name);

/*
 * Sinks.  A line goes to the log file (if set) when level >= file level, to
 * stderr when level >= stderr level, and its message to the application's
 * handler (walrus_set_log_handler) when level >= the handler's level.
 * Defaults: no file, no stderr (the library never writes on its caller's
 * terminal: a program that wants the lines there says so), no handler.
 * The process name ("walrus-ckpt") appears on every line of file and stderr:
 *   2026-12-03 09:30:00.123 UTC [4242] walrus-ckpt LOG:  message
 * Any thread may log while another changes the sinks.
 */
void wr_log_set_file(int fd, int min_level); /* fd < 0 to disable */
void wr_log_set_stderr(int min_level);       /* > WR_PANIC to silence */
/* walrus_set_log_handler(); NULL @fn removes it (a process the library forks drops it). */
void wr_log_set_handler(walrus_log_fn fn, void *arg, int min_level);
void wr_log_set_process_name(const char *name);
const char *wr_log_process_name(void);

void wr_log(int level, const char *fmt, ...) WR_PRINTF(2, 3);
void wr_vlog(int level, const char *fmt, va_list ap);

/*
 * PANIC: log, then call the panic handler.  Never returns: if the handler
 * returns (or none is installed) the process aborts.  Use it for states the
 * instance cannot continue from: an fsync failure, an error inside a critical
 * section, a broken invariant of shared memory.
 */
_Noreturn void wr_panic(const char *fmt, ...) WR_PRINTF(1, 2);
typedef void (*wr_panic_handler)(void);
/* Process-wide; installing it re-arms the calling thread's recursion guard. */
void wr_set_panic_handler(wr_panic_handler fn);
/* After a handler unwound the calling thread's PANIC: it may PANIC again. */
void wr_panic_rearm(void);

/*
 * Critical sections: code between enter and exit must not fail halfway
 * (WAL insert + page change).  Error paths inside one call wr_panic();
 * wr_error() checks it with WR_ASSERT in debug builds.
 */
void wr_crit_enter(void);
void wr_crit_exit(void);
bool wr_in_crit(void);

/*
 * WR_ASSERT(cond): an invariant the code relies on, checked where NDEBUG is
 * not defined (every build but meson's release buildtype, b_ndebug=if-release).
 * A false one PANICs with the condition and its place: it is a bug, and the
 * state it guards may be shared memory.  In release builds the condition is
 * not evaluated (so it must have no side effects) but still compiled.
 */
#ifdef NDEBUG
#define WR_ASSERT(cond) ((void)sizeof((cond) ? 1 : 0))
#else
#define WR_ASSERT(cond)                                                                            \
	(WR_LIKELY(cond) ? (void)0 : wr_assert_failed(#cond, __FILE__, __LINE__, __func__))
#endif
_Noreturn void wr_assert_failed(const char *cond, const char *file, int line, const char *func);

/* ---------------------------------------------------------------- errors */

/*
 * Records a detailed message for walrus_errmsg() and returns @code, so error
 * paths read:  return wr_error(WALRUS_EIO, "could not read \"%s\": %m", path);
 * (%m works: errno is kept for the formatting).  Does not log.
 */
int wr_error(int code, const char *fmt, ...) WR_PRINTF(2, 3);
/* Maps an errno to the closest WALRUS_E* code (ENOSPC->ENOSPC, EACCES->EPERM, ...). */
int wr_errno_code(int err);
/* Clears the thread's message. */
void wr_error_clear(void);

/* ---------------------------------------------------------------- time */

uint64_t wr_now_ns(void);      /* CLOCK_MONOTONIC */
uint64_t wr_wall_us(void);     /* CLOCK_REALTIME, microseconds since the epoch */
void wr_sleep_us(uint64_t us); /* sleeps the whole time, retrying on EINTR */

/* ---------------------------------------------------------------- options */

/*
 * The option table: one entry per knob, with its type, default, range and
 * scope.  Sizes are parsed with units (B, kB, MB, GB; 1kB = 1024 B), times
 * with units (us, ms, s, min, h, d), booleans as on/off/true/false/1/0.
 * Every field of wr_options holds the value in the unit named in its
 * comment.
 */
enum wr_opt_type {
	WR_OPT_BOOL,
	WR_OPT_INT,
	WR_OPT_SIZE,
	WR_OPT_TIME,
	WR_OPT_REAL,
	WR_OPT_ENUM,
	WR_OPT_STRING, /* a char[WR_OPT_STR_MAX] field: wr_options lives in shared memory */
};

/* A string option's field, its terminator included: longer values are refused. */
#define WR_OPT_STR_MAX 1024
/* Room for any option's value as text (wr_opts_get). */
#define WR_OPT_TEXT_MAX (WR_OPT_STR_MAX + 64)
enum wr_opt_scope {
	WR_SCOPE_INSTANCE, /* fixed when the instance starts */
	WR_SCOPE_SESSION,  /* per open handle */
	WR_SCOPE_SERVER,   /* read by `walrus serve` (walrus.conf or -o); the engine ignores it */
};

enum wr_sync_method { WR_SYNC_FDATASYNC, WR_SYNC_FSYNC, WR_SYNC_OPEN_DATASYNC };
enum wr_sync_level { WR_SYNC_LEVEL_FLUSH, WR_SYNC_LEVEL_APPLY };
enum wr_io_method { WR_IO_SYNC, WR_IO_URING };
enum wr_wal_compression { WR_COMPRESS_OFF, WR_COMPRESS_ZSTD };
enum wr_huge_pages { WR_HUGE_OFF, WR_HUGE_TRY, WR_HUGE_ON };
/* wal_direct_io auto: O_DIRECT unless archiving or replication reads the WAL back
 * (src/wal/flush.c); data_direct_io auto: unless mmap_reads, or the file system
 * refuses it (src/storage/direct.c). */
enum wr_direct_io { WR_DIRECT_OFF, WR_DIRECT_ON, WR_DIRECT_AUTO };

typedef struct wr_options {
	/* memory and files */
	int64_t shared_buffers;    /* bytes, multiple of WR_PAGE_SIZE */
	int huge_pages;            /* enum wr_huge_pages, for the whole segment */
	int64_t max_open_files;    /* per-process real fds of the fd cache */
	int64_t data_segment_size; /* bytes per data file segment, multiple of WR_PAGE_SIZE */
	int64_t max_connections;   /* processes attached at once */
	/* WAL */
	int64_t wal_segment_size; /* bytes, power of two */
	int64_t wal_buffers;      /* bytes */
	int wal_sync_method;      /* enum wr_sync_method */
	int wal_direct_io;        /* enum wr_direct_io */
	int io_method;            /* enum wr_io_method */
	int wal_compression;      /* enum wr_wal_compression */
	int64_t wal_compression_level;
	int64_t wal_writer_delay_us;
	bool full_page_writes;
	bool mmap_reads;                   /* kv gets read unpooled leaves through a file mapping */
	int data_direct_io;                /* enum wr_direct_io: data files opened O_DIRECT */
	int64_t snapshot_memory;           /* bytes: the version store of snapshots (kv) */
	int64_t old_snapshot_threshold_us; /* 0: snapshots never expire */
	bool synchronous_commit;
	int64_t commit_gather_us; /* group commit: how long a leader may wait for committers */
	/* checkpoints */
	int64_t checkpoint_timeout_us;
	int64_t checkpoint_warning_us;
	int64_t max_wal_size; /* bytes */
	int64_t min_wal_size; /* bytes */
	double checkpoint_completion_target;
	int64_t checkpoint_flush_after; /* bytes, 0 = no write-back hints */
	bool checkpoint_sort;
	bool log_checkpoints;
	/* background writer */
	int64_t bgwriter_delay_us;
	int64_t bgwriter_lru_maxpages;
	double bgwriter_lru_multiplier;
	int64_t bgwriter_flush_after; /* bytes */
	/* instance and session */
	int64_t supervisor_linger_us; /* how long the supervisor waits after the last detach */
	int log_min_messages;         /* enum wr_level, for DIR/log/walrus.log */
	bool create_if_missing;
	bool strict_options; /* an open asking other instance-wide values fails */
	/* the RESP server */
	int64_t client_query_buffer_limit; /* bytes of a connection's unparsed input */
	int64_t authentication_timeout_us; /* a connection must AUTH within this */
	int64_t databases;                 /* SELECT 0 .. databases - 1 */
	/* WAL archiving (engine/archiver.c) */
	bool archive_mode;
	char synchronous_standby[WR_OPT_STR_MAX]; /* application_name, or "" */
	int synchronous_standby_level;            /* enum wr_sync_level */
	int64_t max_replication_slots;
	int64_t max_slot_wal_keep_size;       /* bytes */
	char archive_dir[WR_OPT_STR_MAX];     /* built-in copy into this directory, or "" */
	char archive_command[WR_OPT_STR_MAX]; /* shell command with %p, %f, %%, or "" */
	int64_t archive_timeout_us;           /* 0: off; else switch a segment older than this */
	/* streaming replication, the primary's side (src/repl) */
	char listen_replication[WR_OPT_STR_MAX]; /* "HOST:PORT", a socket path, or "" (off) */
	int64_t max_wal_senders;
	int64_t wal_sender_timeout_us; /* a standby silent this long is dropped */
	int64_t wal_sender_delay_us;   /* an asynchronous standby's sends, at most this often */
	bool ssl;                      /* TLS on listen_replication (src/repl/tls.c) */
	char ssl_cert_file[WR_OPT_STR_MAX]; /* relative paths: to the data directory */
	char ssl_key_file[WR_OPT_STR_MAX];
	char ssl_ca_file[WR_OPT_STR_MAX]; /* "": no client certificates asked for */
	/* Bit i: option i of the table was set explicitly (wr_opts_set), so it
	 * outranks walrus.conf and is compared with a running instance's value. */
	uint64_t set_mask;
} wr_options;

#define WR_OPTS_MAX 64 /* options the table may hold: the bits of set_mask */

/* Where an instance's option value came from, lowest precedence first. */
enum wr_opt_source {
	WR_SRC_DEFAULT,      /* the table's default */
	WR_SRC_FILE,         /* DIR/walrus.conf */
	WR_SRC_COMMAND_LINE, /* set by the process that started the instance (-o, walrus_opts_set)
	                      */
	WR_SRC_CONTROL_FILE, /* fixed when the data directory was initialised */
};

typedef struct wr_opt_desc {
	const char *name;
	int type;                      /* enum wr_opt_type */
	int scope;                     /* enum wr_opt_scope */
	size_t offset;                 /* of the field in wr_options */
	const char *def;               /* default, as text */
	double min, max;               /* for INT/SIZE/TIME/REAL, in the field's unit */
	const char *const *enum_names; /* for ENUM: NULL-terminated */
	const char *help;
} wr_opt_desc;

/* The public walrus_opts (include/walrus.h) is this table's values. */
struct walrus_opts {
	wr_options o;
};

/* Fills @o with every default. */
void wr_opts_defaults(wr_options *o);
/* Parses and validates; WALRUS_EINVAL with a message naming the option and the accepted form. */
int wr_opts_set(wr_options *o, const char *name, const char *value);
/* Formats the current value as text (sizes and times with their best unit). */
int wr_opts_get(const wr_options *o, const char *name, char *buf, size_t len);
/* Checks relations between options (min_wal_size <= max_wal_size, ...). */
int wr_opts_validate(const wr_options *o);
/* wr_opts_validate, plus the relations only an instance's effective options
 * must satisfy (archive_mode=on needs archive_dir or archive_command): an
 * opener may set one and walrus.conf the other. */
int wr_opts_validate_instance(const wr_options *o);
/* The table, for dumps ("name = value" at start) and docs. */
const wr_opt_desc *wr_opts_table(size_t *count);
/* Parses "name=value"; the -o form of the command line. */
int wr_opts_set_pair(wr_options *o, const char *name_eq_value);
/* Appends the effective options as a JSON object to buf; returns the length it needs. */
size_t wr_opts_json(const wr_options *o, char *buf, size_t len);
/* The option called @name (exact, lower case) and its index in the table; NULL if none. */
const wr_opt_desc *wr_opts_find(const char *name, size_t *index);
/* Whether option @index was set explicitly rather than left at its default. */
bool wr_opts_is_set(const wr_options *o, size_t index);
/* Copies option @index's value from @src to @dst, and whether it was set explicitly. */
void wr_opts_copy(wr_options *dst, const wr_options *src, size_t index);
/* "default", "file", "command line", "control file". */
const char *wr_opt_source_name(int source);

/* Unit parsers, exposed for the command line: WALRUS_EINVAL on bad input. */
int wr_parse_size(const char *s, int64_t *out);
int wr_parse_time_us(const char *s, int64_t *out);
int wr_parse_bool(const char *s, bool *out);

/* ---------------------------------------------------------------- memory */

/*
 * Grows the array *@bufp (a pointer of any object type, passed by address)
 * of *@cap elements of @elem bytes to hold at least @need: *@cap doubles,
 * starting from @first when the array is empty.  WALRUS_OK (also when it
 * is large enough already), or WALRUS_ENOMEM when need * elem overflows or
 * realloc fails: *@bufp and *@cap are then unchanged and the old contents
 * intact.  Records no message: the caller knows what it was growing.
 */
int wr_grow(void *bufp, size_t *cap, size_t need, size_t elem, size_t first);

/* ---------------------------------------------------------------- strings */

/* snprintf that always terminates and reports truncation as false. */
bool wr_snprintf(char *buf, size_t len, const char *fmt, ...) WR_PRINTF(3, 4);
/* Up to @cap - 1 bytes of @src (@len long) into @buf, terminated, each byte
 * outside printable ASCII shown as @other: bytes that go into messages and
 * logs.  Returns how many of @src it took. */
size_t wr_shown(char *buf, size_t cap, const char *src, size_t len, char other);
/* read(2) until @len bytes or the end of the file, retrying EINTR: the bytes
 * read, or -1 with errno. */
ssize_t wr_read_full(int fd, void *buf, size_t len);
/* write(2) all of @buf, through short writes and EINTR: 0, or -1 with errno. */
int wr_write_full(int fd, const void *buf, size_t len);

/* ---------------------------------------------------------------- HMAC (hmac.c) */

/* HMAC-SHA256 (OpenSSL's libcrypto), for the replication handshake (src/repl). */
#define WR_SHA256_LEN 32
/* A message given in parts, hashed as their concatenation. */
struct wr_iovec_c {
	const void *base;
	size_t len;
};
/* WALRUS_OK, or WALRUS_EINTERNAL when libcrypto fails (out of memory, a
 * FIPS provider without HMAC). */
int wr_hmac_sha256(const void *key, size_t klen, const struct wr_iovec_c *parts, int nparts,
                   uint8_t out[WR_SHA256_LEN]);
/* Compares two MACs in time independent of where they differ. */
bool wr_mac_equal(const uint8_t *a, const uint8_t *b, size_t len);
/* PBKDF2-HMAC-SHA256 (RFC 8018) of @password: @outlen bytes into @out.
 * WALRUS_OK, or WALRUS_EINTERNAL when libcrypto fails. */
int wr_pbkdf2_sha256(const char *password, const uint8_t *salt, size_t saltlen, uint32_t iterations,
                     uint8_t *out, size_t outlen);

/* ---------------------------------------------------------------- TLS (tls.c) */

/*
 * OpenSSL's libssl for the replication connection and the RESP server:
 * contexts (TLS 1.2 and later, no session resumption, no renegotiation),
 * and one libssl call per function, whose result says what the socket must
 * become before the call is repeated.  The types are libssl's SSL_CTX and
 * SSL, named here without its headers.
 */
typedef struct ssl_ctx_st wr_tls_ctx;
typedef struct ssl_st wr_tls;

enum wr_tls_verify {
	WR_TLS_VERIFY_NONE,     /* no client certificate asked for */
	WR_TLS_VERIFY_OPTIONAL, /* checked against the CA when the client sends one */
	WR_TLS_VERIFY_REQUIRED, /* a client without a valid one is refused */
};
/*
 * A server's context: the certificate chain in @cert and its key in @key
 * (refused when others may read it, or when it does not match); @ca (NULL
 * or "": none) the CAs client certificates are checked against, as
 * @verify says.  WALRUS_EINVAL naming the file and libssl's reason.
 */
int wr_tls_server_ctx(const char *cert, const char *key, const char *ca, int verify,
                      wr_tls_ctx **out);
/* A client's: the server's certificate checked against @ca when given (not
 * at all otherwise); @cert and @key (NULL or "": none) its own. */
int wr_tls_client_ctx(const char *ca, const char *cert, const char *key, wr_tls_ctx **out);
void wr_tls_ctx_free(wr_tls_ctx *ctx);
/* A connection on socket @fd (the caller sets it to connect or accept). */
int wr_tls_new(wr_tls_ctx *ctx, int fd, wr_tls **out);
void wr_tls_free(wr_tls *s);

/* Results besides a byte count (> 0). */
enum {
	WR_TLS_DONE = 1,        /* wr_tls_handshake: finished */
	WR_TLS_EOF = 0,         /* the peer ended the connection */
	WR_TLS_ERROR = -1,      /* recorded with wr_error (WALRUS_EIO), errno set */
	WR_TLS_WANT_READ = -2,  /* call again once the socket is readable (a blocking
	                           socket: its receive timeout expired) */
	WR_TLS_WANT_WRITE = -3, /* ... writable */
};
int wr_tls_handshake(wr_tls *s);
ssize_t wr_tls_read(wr_tls *s, void *buf, size_t len);
/* A short write is possible; the next call passes the rest (the buffer may have moved). */
ssize_t wr_tls_write(wr_tls *s, const void *buf, size_t len);
/* Bytes decrypted and not yet read: readable although the socket may not be. */
size_t wr_tls_pending(wr_tls *s);
/* Sends close_notify without waiting for the peer's (wr_tls_free follows). */
void wr_tls_close(wr_tls *s);

#endif /* WALRUS_COMMON_H */
