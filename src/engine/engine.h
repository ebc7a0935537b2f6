/*
 * engine.h - the instance: data directory, supervisor, auxiliary processes,
 * backends attaching, crash restart, and the public API's plumbing.
 *
 * Data directory: initialised by the supervisor under the directory lock,
 * atomically: a durable marker (DIR/walrus.bootstrap) is written first and
 * removed after WALRUS_VERSION, so a bootstrap cut by a crash or power cut
 * is recognised and done again; never renamed into place, since DIR may be
 * a mount point or made beforehand (datadir.c, docs/architecture.md).
 *
 * Owns: the data directory's layout and lock (DIR/walrus.pid), the
 * supervisor process and its socket (DIR/walrus.sock), the shared memory
 * segment's lifetime, the process table in shared memory (one slot per
 * attached process), and this process's attachment; on a full disk, the
 * reserve (DIR/walrus.reserve) and the read-only start (reserve.c).
 *
 * Process model (as PostgreSQL's): the first walrus_open() of a directory
 * forks a detached supervisor (fork, setsid, fork) that takes the directory
 * lock, creates shared memory, runs recovery in a startup process, forks the
 * checkpointer, background writer and WAL writer, and listens.  Backends
 * connect, receive the shared memory fd with SCM_RIGHTS and keep the
 * connection open while attached: a connection that ends without a DETACH
 * message means the backend died, and the supervisor performs a crash
 * restart.  See docs/architecture.md.
 *
 * Backends: every handle of the application (a thread's, or a process's) is
 * a backend with its own proc slot; the handles of one process share its
 * attachment (see client_open).
 *
 * Locks: the directory lock is an OFD write lock on byte 0 of walrus.pid,
 * held by the supervisor (and inherited by its children) for its whole life;
 * each backend holds an OFD read lock on byte 1 while attached, so a new
 * supervisor can tell that processes of a dead instance are still around.
 * Locks in shared memory: a free slot of the process table is taken by
 * compare-and-swap of its pid word (by the supervisor at ATTACH, by a
 * process for its further backends) and given back by whoever took it; a
 * slot's in_io and in_call words are written only by its owner.  The
 * supervisor never takes a lock or spins on a word a backend may hold: a
 * backend killed inside one would stop the only process that can declare
 * the crash which ends such waits.  What a process holds in shared memory is
 * given back by itself when it detaches, or by the crash restart.
 *
 * Stopping (walrus_stop, or SIGTERM/SIGINT/SIGQUIT to the supervisor): smart
 * waits for every attached process to detach; fast drains (state STOPPING:
 * new calls fail, the supervisor waits for every in_call to clear, Dekker's
 * pattern as the I/O guard); both then set SHUTDOWN (the I/O guard refuses,
 * in_io drains) and ask the auxiliary processes for the shutdown checkpoint.
 * Immediate marks the instance CRASHED and stops without a checkpoint.
 *
 * Returns: WALRUS_* codes with messages (walrus_errmsg()).
 * PANICs: through wr_panic(), whose handler here marks the instance CRASHED;
 * in auxiliary processes it then exits with WR_PANIC_EXIT; in a backend it
 * unwinds to the public call that was running (which returns WALRUS_EPANIC).
 */
#ifndef WALRUS_ENGINE_H
#define WALRUS_ENGINE_H

#include <limits.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/common.h"
#include "ipc/ipc.h"

/*
 * 2: WAL page headers carry the position known durable when they were written
 * 3: tree leaves leave out the key prefix their fences share (kv_special.prefix)
 */
#define WR_FORMAT_VERSION 3
#define WR_VERSION_FILE   "WALRUS_VERSION"
#define WR_PID_FILE       "walrus.pid"
#define WR_SOCKET_NAME    "walrus.sock"
#define WR_SETTINGS_FILE  "walrus.settings"  /* the running instance's settings, for status */
#define WR_SERVE_FILE     "walrus-serve.pid" /* a RESP server's state, for status */
#define WR_LOG_DIR        "log"
#define WR_LOG_FILE       "log/walrus.log"
#define WR_CONF_FILE      "walrus.conf"
#define WR_BOOTSTRAP_FILE "walrus.bootstrap" /* initialisation under way (datadir.c) */
#define WR_RESERVE_FILE   "walrus.reserve"   /* space kept for the end-of-recovery checkpoint */
#define WR_STANDBY_FILE   "walrus.standby"   /* this directory is a standby (hotstandby.c) */
#define WR_PANIC_EXIT     86                 /* exit code of a process that PANICked */
#define WR_PROTO_MAGIC    0x57524d31u        /* "WRM1" */
#define WR_PROTO_VERSION  1

/* ---------------------------------------------------------------- data directory */

/* Makes @dir absolute (creating it 0700 when @create, each new directory's
 * name made durable) into out (PATH_MAX). */
int datadir_resolve(const char *dir, bool create, char *out);
/* Ownership, permissions (no group/world bits), writability. */
int datadir_check(const char *abs);
/* Verifies WALRUS_VERSION, or initialises an empty directory when
 * opts->create_if_missing (with the WAL's bootstrap: control file and first
 * segment).  Atomic: a marker file written first makes an initialisation cut
 * by a crash or power cut recognisable; it is then done again (datadir.c).
 * Called under the instance lock. */
int datadir_init_or_verify(const char *abs, const wr_options *opts);
/* Takes the instance lock (byte 0 of walrus.pid); EBUSY naming the owner's pid. */
int datadir_lock_instance(const char *abs, int *lock_fd);
/* Waits (bounded) until no process of a previous instance holds an attach lock. */
int datadir_wait_old_backends(int lock_fd, const char *abs, uint64_t timeout_us);
/* Writes "pid\ndir\nstart\n" into the locked pid file. */
int datadir_write_pid(int lock_fd, const char *abs);
/* A backend's shared attach lock (byte 1); released by closing the fd. */
int datadir_lock_attach(const char *abs, int *fd);
/* The supervisor's pid when an instance holds the directory lock; 0 when none
 * does, -1 when one is starting (locked, pid not written yet). */
pid_t datadir_instance_pid(const char *abs);
/* Replaces DIR/@name with @text atomically: temp file, fsync, rename, fsync DIR. */
int datadir_write_file(const char *abs, const char *name, const char *text);

/* Rewrites the status line of the locked pid file in place ("ready", "read-only:
 * why"), as PostgreSQL's postmaster.pid: `walrus status` shows it.  Written
 * within the file's first block, so it needs no new space on a full disk. */
int datadir_set_pid_status(int lock_fd, const char *abs, const char *status);
/* The status line of the running instance's pid file into buf ("" when none). */
void datadir_pid_status(const char *abs, char *buf, size_t len);

/*
 * DIR/walrus-serve.pid (serve_status.c): the state of `walrus serve`'s RESP
 * server for `walrus status`.  claim: takes the file (an OFD lock held until
 * release); WALRUS_EBUSY, with no message, when another live server holds
 * it (then @fd_out is -1 and set/release do nothing).  set: "starting" or
 * "ready: ..." (the first word counts).  read: false when no live server
 * holds the file; else its pid and state.
 */
int serve_status_claim(const char *abs, int *fd_out);
int serve_status_set(int fd, const char *abs, const char *state);
void serve_status_release(int fd, const char *abs);
bool serve_status_read(const char *abs, long *pid, char *state, size_t len);

/* ---------------------------------------------------------------- a full disk (reserve.c) */

/*
 * The instance accepts writes only while DIR/walrus.reserve holds
 * reserve_size() bytes and as much is free beside it: the room its
 * end-of-recovery checkpoint needs (a new WAL segment, the control file,
 * the log).  On a full disk the reserve is released (by the supervisor
 * before it writes its pid file, or by the startup process), the
 * checkpoint runs in its room and the instance starts read-only; when even
 * that room is not enough it starts read-only without the checkpoint (the
 * next start recovers from the same WAL).  Reads work either way; the
 * reserve is made again at the next start that finds room for it.
 */
uint64_t reserve_size(const wr_options *o);
/* In the startup process, before the end-of-recovery checkpoint: decides
 * read-only or not (engine_shared) and whether the checkpoint can run. */
bool reserve_startup(const char *abs, const wr_options *o);
/* In the supervisor before it writes anything: on a full disk, releases the
 * reserve (its room takes the pid file, the log and the checkpoint). */
bool reserve_release_if_full(const char *abs, const wr_options *o);
/* Whether DIR's or DIR/wal's file system has less than reserve_size() free. */
bool reserve_disk_full(const char *abs, const wr_options *o);
/* WALRUS_ENOSPC with the reason, for a write refused by a read-only instance. */
int reserve_refuse(const char *fn);

/* ---------------------------------------------------------------- walrus.conf (conf.c) */

/*
 * DIR/walrus.conf holds instance options in PostgreSQL's format ("name =
 * value", '#' comments, values optionally single-quoted).  Precedence:
 * default < walrus.conf < options set explicitly by the process that
 * starts the instance.  Every error names the file, the line and the option.
 */
/* Applies DIR/walrus.conf over @o (marking what it sets); no file sets nothing. */
int conf_load(const char *abs, wr_options *o);
/* The options an instance started by @starter runs with, and each one's source
 * (enum wr_opt_source, indexed like the option table). */
int conf_effective(const char *abs, const wr_options *starter, wr_options *out,
                   uint8_t sources[WR_OPTS_MAX]);
/* Sets @name = @value in DIR/walrus.conf, replacing the line that sets it (the
 * last one) or appending; keeps every other line; written atomically.
 * WALRUS_EINVAL, naming the option, for an unknown option, a bad value, a
 * session option, or a file that would not start an instance. */
int conf_set(const char *abs, const char *name, const char *value);
/* The value DIR/walrus.conf gives @name into buf; *found false when it sets none.
 * A secret (requirepass) reads back as "********". */
int conf_get(const char *abs, const char *name, char *buf, size_t len, bool *found);
/*
 * Secrets: settings of walrus.conf that are not options but a password:
 * requirepass (`walrus serve`), replication_password (the WAL senders).  The engine skips them when
 * it applies the file; conf_set refuses them (the value would be on a command line, in ps);
 * conf_get masks them; no option dump, log or statistics sees them. conf_secret reads one: *found
 * false when the file sets none; a file that sets one must not be readable by its group or others
 * (WALRUS_EINVAL naming its mode).
 */
int conf_secret(const char *abs, const char *name, char *buf, size_t len, bool *found);
/*
 * DIR/walrus.conf as a base backup copies it (malloc'd into *text): without
 * the secrets, listen_replication and synchronous_standby, each replaced by
 * a comment saying so (a copy never carries a password over the wire or
 * onto another disk, and a standby or restored instance listens where, and
 * waits for the standby, it chooses).
 * WALRUS_ENOENT when there is no file.
 */
int conf_backup_text(const char *abs, char **text);

/* ---------------------------------------------------------------- shared state */

enum wr_proc_kind { WR_PROC_FREE = 0, WR_PROC_BACKEND, WR_PROC_AUX };

typedef struct wr_proc {
	_Atomic uint32_t pid;   /* 0 when the slot is free */
	_Atomic uint32_t in_io; /* 1 while its owner does I/O on the instance's files */
	uint32_t kind;          /* enum wr_proc_kind */
	uint32_t index;
	_Atomic uint32_t in_call; /* 1 while a public call runs on the backend (owner writes) */
	/* The key space's relation a call reads or writes (0: none): a drop
	 * waits until no backend has it (api_space.c). */
	_Atomic uint32_t space_rel;
	char _pad[40];
} wr_proc;

/*
 * The archiver's state and counters (archiver.c).  The names are written by
 * the archiver only, under the sequence word (odd while it writes them).
 */
typedef struct arch_shared {
	_Atomic uint64_t archived_count, failed_count;
	_Atomic uint64_t last_archived_us, last_failed_us; /* wall clock, 0: never */
	_Atomic uint64_t pending_bytes;                    /* completed segments not archived yet */
	_Atomic uint32_t names_seq;
	char last_archived[40], last_failed[40];
	/* Clean shutdown: set by the supervisor once the checkpointer is gone
	 * (the shutdown checkpoint is written): archive what is left, then exit. */
	_Atomic uint32_t final;
	/* archive_timeout's switch against the shutdown checkpoint (Dekker):
	 * no WAL may follow that checkpoint.  The archiver sets switching, then
	 * looks at no_switch; the supervisor sets no_switch, then waits for
	 * switching to clear before it asks for the checkpoint. */
	_Atomic uint32_t switching, no_switch;
} arch_shared;

/*
 * A standby (hotstandby.c): recovery runs while the instance serves reads.
 * The startup process replays WAL up to wal_end, which its sources (the WAL
 * receiver, the archive) move as they make WAL durable in DIR/wal.
 */
typedef struct standby_shared {
	_Atomic uint32_t active;     /* a standby in recovery: writes are refused */
	_Atomic uint32_t consistent; /* set by the startup process: reads may begin */
	_Atomic uint32_t promote;    /* asked for: end recovery once what arrived is replayed */
	_Atomic uint32_t no_stream;  /* the receiver is gone for good (promotion) */
	_Atomic uint64_t local_end;  /* the local WAL ended here: sources continue from it */
	_Atomic uint64_t wal_end;    /* WAL durable in DIR/wal up to here, for replay */
	_Atomic uint32_t wal_seq;    /* futex word: bumped when wal_end or promote changes */
	_Atomic uint32_t source;     /* who writes DIR/wal now: enum standby_source */
	_Atomic uint64_t restored;   /* segments copied from the archive */
} standby_shared;
enum standby_source { SB_SOURCE_NONE = 0, SB_SOURCE_STREAM = 1, SB_SOURCE_ARCHIVE = 2 };

/* Instance-wide facts and counters, region "engine". */
typedef struct engine_shared {
	wr_options opts;                 /* the instance's effective options */
	uint8_t opt_source[WR_OPTS_MAX]; /* where each came from: enum wr_opt_source */
	char datadir[PATH_MAX];
	uint32_t supervisor_pid;
	uint32_t nprocs; /* slots of the auxiliary processes and backends (backends scan to here) */
	/* After them, a slot per max_wal_senders for the WAL senders (walrus-wsnd),
	 * kind WR_PROC_AUX: procs[nprocs + i] is sender slot i's. */
	uint32_t nsender_procs;
	uint64_t start_time_us;
	uint64_t crash_restarts; /* before this generation */
	_Atomic uint64_t attaches;
	_Atomic uint32_t shutdown_requested; /* futex word the aux processes wait on */
	_Atomic uint32_t stop_mode;          /* WALRUS_STOP_* requested, 0 when none */
	_Atomic uint32_t aux_wakeup[8];      /* one latch per auxiliary process kind */
	char startup_error[512];             /* why recovery failed, for the clients */
	int32_t startup_code;                /* and its code when it is WALRUS_EVERSION */
	/* Set by the startup process (reserve.c) before the instance runs:
	 * writes are refused with WALRUS_ENOSPC and read_only_why. */
	_Atomic uint32_t read_only;
	uint32_t skip_end_ckpt;    /* set by the supervisor: recover without the checkpoint */
	uint32_t end_ckpt_started; /* the startup process got as far as its checkpoint */
	uint32_t reserve_released; /* by the supervisor, for this start */
	char read_only_why[768];
	arch_shared arch; /* the archiver (archiver.c) */
	standby_shared sb;
} engine_shared;

#define ENGINE_SCRATCH_SIZE 4096 /* region "scratch": free for tests and tools */

engine_shared *engine_sh(void);
wr_proc *engine_procs(void);
/*
 * Runs @fn(@rel, @arg) as a call inside key space relation @rel (a drop
 * waits for it), once the space is found live; ENGINE_SPACE_GONE when it
 * was dropped, before or meanwhile (no error message kept).  For the
 * instance-wide walks over every space: verify, compact, stats.
 */
#define ENGINE_SPACE_GONE 1
typedef int (*engine_space_fn)(uint32_t rel, void *arg);
int engine_in_space(uint32_t rel, engine_space_fn fn, void *arg);
/* Returns once no other process's call is inside key space relation @rel
 * (api_space.c; kv_set_drop_wait's hook, on a primary and in redo). */
void engine_space_drop_wait(uint32_t rel);
wr_proc *engine_my_proc(void);     /* NULL outside an attached process */
void engine_my_proc_set(int slot); /* -1: none */
/* Whether shared memory says the instance is usable (RUNNING). */
bool engine_running(void);

/* ---------------------------------------------------------------- supervisor */

/* Messages on walrus.sock (SOCK_SEQPACKET). */
enum wr_msg_type {
	WR_MSG_ATTACH = 1, /* backend -> supervisor */
	WR_MSG_ATTACH_OK,  /* supervisor -> backend, with the shm fd */
	WR_MSG_ERROR,      /* supervisor -> backend: status + text */
	WR_MSG_DETACH,     /* backend -> supervisor: clean detach */
	WR_MSG_PANIC,      /* backend -> supervisor: this backend PANICked */
	WR_MSG_STOP,       /* walrus_stop -> supervisor: status = WALRUS_STOP_* */
	WR_MSG_STOP_OK,    /* supervisor -> walrus_stop: under way; the connection ends at exit */
	WR_MSG_REFUSED,    /* supervisor -> backend: status + text, the instance is being
	                    * stopped on request: not worth retrying, unlike an ERROR */
	WR_MSG_PROMOTE,    /* walrus_promote -> supervisor */
	WR_MSG_PROMOTE_OK, /* supervisor -> walrus_promote: promoted (text: the timeline) */
};

typedef struct wr_msg {
	uint32_t magic;
	uint32_t version;
	uint32_t type;
	int32_t status;
	uint32_t pid;
	uint32_t slot;
	uint64_t generation;
	char text[512];
} wr_msg;

/*
 * Runs a supervisor for @abs in this process and never returns.  When
 * @ready_fd >= 0, a line "0 ok" or "<code> <message>" is written to it once
 * the supervisor listens (or failed to start), then it is closed.
 */
_Noreturn void supervisor_main(const char *abs, const wr_options *opts, int ready_fd,
                               bool foreground);
/* Forks a detached supervisor (double fork + setsid); waits for its readiness line. */
int supervisor_launch(const char *abs, const wr_options *opts);

/* ---------------------------------------------------------------- auxiliary processes */

enum wr_aux_kind {
	WR_AUX_CKPT,
	WR_AUX_BGWR,
	WR_AUX_WALW,
	WR_AUX_STARTUP,
	WR_AUX_ARCH, /* only with archive_mode=on */
	WR_AUX_WRCV, /* the WAL receiver of a standby (src/repl); started by the standby mode */
	WR_AUX_NKINDS
};
const char *aux_name(int kind); /* "walrus-ckpt", ... */
/* In a child just forked by the supervisor: names the process, arranges to
 * die with the supervisor, closes what it must not hold, and runs the loop. */
_Noreturn void aux_main(int kind, int keep_fd);
/* The same frame for a WAL sender (walrus-wsnd) on connection @sock accepted
 * from @peer: it takes a sender slot of region "repl" once the peer has
 * authenticated (repl_sender_main). */
_Noreturn void aux_sender_main(int sock, const char *peer);
/*
 * The archiver (walrus-arch, archiver.c): copies each completed WAL segment
 * (and each timeline history file) in order into archive_dir, or hands it
 * to archive_command, then marks it .done so that it may be recycled;
 * failures are retried with a WARNING, never skipped.  With archive_timeout
 * it switches a segment that has held WAL too long.  At a clean shutdown it
 * archives every completed segment (bounded) before it exits.
 */
_Noreturn void archiver_main(pid_t supervisor);
/*
 * A standby's startup process (hotstandby.c): replays the local WAL, says
 * when reads may begin (SIGUSR1 to the supervisor), then replays what the
 * sources bring (the WAL receiver's stream, the archive's segments) until a
 * promotion, which ends in a new timeline and the end-of-recovery
 * checkpoint.  Never returns.
 */
_Noreturn void standby_startup_main(void);
/* Before replay after a crash: everything durable (aux.c), temporary segments gone. */
struct wal_control;
void startup_prepare(const char *datadir, const struct wal_control *c);
/* The startup process's redo set-up (resource managers, redo through the
 * pool) and its result, allocated (aux.c). */
struct wal_recovery_result;
struct wal_recovery_result *startup_begin(void);
/* WALRUS_EREADONLY: @fn writes, and the instance is a standby. */
int standby_refuse(const char *fn);
/* Whether DIR/walrus.standby makes this start a standby's. */
bool standby_configured(const char *abs);
/* The checkpointer's promotion hook: DIR/walrus.standby goes, durably (PANIC otherwise). */
void standby_settings_remove(void);
/* At a start: a promotion decided before a crash (the control file says so)
 * is completed, the standby's settings removed.  True if it was. */
bool standby_promotion_decided(const char *abs);

/*
 * A standby's base backup from its primary (basebackup.c), for `walrus
 * standby` on a missing or empty @dir: connects to @primary, authenticates
 * with @password, receives the backup over the replication connection.
 * Its checkpoint is immediate with @fast, spread otherwise.  A stalled
 * primary fails it after wal_sender_timeout (and checkpoint_timeout for
 * the checkpoint).  On failure @dir is removed if it was missing, emptied
 * if it was empty, and the error names the cause.  WALRUS_EINVAL (dir
 * untouched) when @dir is neither missing nor empty.
 */
typedef struct standby_backup_args {
	const char *dir, *primary, *password;
	const struct repl_ssl_conf *ssl; /* NULL: sslmode prefer, no certificates */
	bool fast;
	const wr_options *opts;
	walrus_progress_fn progress; /* may be NULL */
	void *arg;
} standby_backup_args;
int standby_base_backup(const standby_backup_args *a);
/* Fills the "archiver" member of the statistics (stats.c). */
void archiver_stats(const arch_shared *a, char *last_archived, char *last_failed, size_t len);

/* ---------------------------------------------------------------- backends */

/*
 * A handle's backend.  The process attaches once (one connection, one
 * mapping, one fd cache, under a process mutex) and every handle is a
 * backend of its own: a proc slot, and the WAL, buffer and tree state of
 * wal_backend, buf_backend and kv_backend.  A call makes its handle's
 * backend current in the calling thread (thread-local pointers of each
 * module), after claiming the handle with an atomic word: a second thread
 * entering the same handle gets WALRUS_EMISUSE.
 */
typedef struct client_backend client_backend;
/* Attaches the process if needed (starting the instance), then makes a backend, current here. */
int client_open(const char *abs, const wr_options *opts, client_backend **out);
/* Releases the backend (pins, slot); detaches the process with its last one. */
int client_close(client_backend *b);
/* Enters a public call on @b: claims it for the thread, checks the instance, makes it current. */
int client_call_begin(client_backend *b);
void client_call_end(client_backend *b);
/* Opened by another process (inherited through fork). */
bool client_backend_inherited(const client_backend *b);
/* Makes @b the calling thread's backend in every module (NULL: the process defaults). */
void client_backend_use(client_backend *b);
/* Is this process attached (to @abs when non-NULL)? */
bool client_attached(const char *abs);
/* ERESTART if the instance crashed or its supervisor died; ESHUTDOWN while it stops. */
int client_check(void);
pid_t client_supervisor_pid(void);
/* getpid() without a system call (refreshed after fork). */
pid_t client_self_pid(void);

/* The instance's counters as a JSON object (malloc'd); attached processes only. */
int engine_stats_json(char **out);
uint64_t client_generation(void);
/* Region "scratch" of the attached instance (tests, tools). */
void *client_scratch(void);

/*
 * The PANIC boundary of a public call: a PANIC inside it longjmps here and
 * the call returns WALRUS_EPANIC.  Usage in an API function:
 *     jmp_buf jb;
 *     if (setjmp(jb)) return client_panicked();
 *     client_enter(&jb); ... rc = ...; client_leave(); return rc;
 */
void client_enter(jmp_buf *jb);
/* A public call's handle checks and entry: open, same instance, healthy, not in use. */
int api_handle_check(const walrus *db, const char *fn);
/* Only that @db is a handle: its instance is checked by the call that follows
 * (api_call_begin), where another thread's reopen cannot pull it away. */
int api_handle_valid(const walrus *db, const char *fn);
int api_call_begin(walrus *db, const char *fn);
void api_call_end(walrus *db);
/* The handle's synchronous_commit: what a write's flags 0 mean. */
bool api_sync_default(const walrus *db);
void client_leave(void);
int client_panicked(void);

#endif /* WALRUS_ENGINE_H */
