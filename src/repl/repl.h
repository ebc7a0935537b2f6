/*
 * repl.h - streaming replication's transport: the WAL sender (walrus-wsnd,
 * one per standby, on the primary), the WAL receiver (walrus-wrcv, on a
 * standby), their wire protocol and their shared state (region "repl").
 *
 * Protocol (docs/architecture.md, "Streaming replication: the transport"):
 * over TCP or a Unix socket, messages `u8 type, u32 length, payload`, all
 * integers little-endian, payloads of at most REPL_MAX_PAYLOAD bytes.  The
 * primary challenges (in clear: its nonce, the key derivation's salt and
 * iterations, and whether TLS follows, then TLS when ssl is on); the
 * standby proves it knows replication_password with an HMAC-SHA256 keyed
 * by PBKDF2 of it, over the challenge, both nonces and the TLS session's
 * channel binding, and checks the primary's proof in turn (repl/tls.c
 * says why the binding); then START names the standby's system, timeline and
 * start LSN, and the primary streams the raw bytes of its flushed WAL,
 * exactly as in its segment files.  Nothing is read from an
 * unauthenticated peer but its TLS handshake and its AUTH, and nothing but
 * the challenge, TLS's handshake and an ERROR is sent to it.
 *
 * Owns: region "repl" (a slot per max_wal_senders, the receiver's state),
 * the replication listening socket's address format ("HOST:PORT", or an
 * absolute Unix socket path), DIR/walrus.standby, the TLS state of each
 * replication connection of the process (tls.c, under its own mutex).
 * Locks: none.  A sender slot is claimed and freed by the supervisor only
 * (it forks the sender for the slot and reaps it); its LSNs and state are
 * written by its sender only.  The receiver's fields are written by the
 * receiver, but start_lsn/start_seq (the startup process) and applied
 * (the startup process).
 * Wake-ups: a sender sleeping for WAL sets its slot's `waiting` and counts
 * itself in `nwaiting`, then looks at the flush LSN again before it sleeps
 * in ppoll with SIGUSR1 unblocked; the WAL flusher calls
 * repl_wake_senders() after each flush, which loads nwaiting and, only
 * when it is non-zero, sends SIGUSR1 to each waiting sender.  No lost
 * wake-up: either the flusher sees the count, or the sender sees the flush.
 * An asynchronous standby's sender, after a round of sends, naps until
 * wal_sender_delay has passed since the round began, without `waiting`
 * (no flush signals it; its standby's replies and a stop still do), then
 * sends everything flushed meanwhile at once: under a steady load it
 * wakes once per delay, not once per flush.  A synchronous standby's
 * sender never naps: its commits wait for it.
 * The receiver publishes `flushed` only after fdatasync, then bumps
 * flush_seq and wakes its futex waiters.
 * Returns: WALRUS_* codes with messages.
 * Base backups (BASE_BACKUP instead of START): the sender runs the
 * engine's backup steps (repl_backup_ops): it requests a checkpoint, waits
 * for it, and inserts and flushes one WAL record (XLOG_BACKUP_END) through
 * its own WAL insertion slot (the slots cover the senders' procs), then
 * sends the data files and the WAL range with read(2) (no fd cache).  The
 * supervisor records nothing for it: wal_backup_begin names the sender's
 * pid, and the supervisor ends the backup of a sender it reaps
 * (wal_backup_end_for), however it died.
 * PANICs: the receiver on any error writing or syncing received WAL (as
 * any WAL write); a sender only where the WAL insert and flush of a base
 * backup's end record PANIC (a WAL write or fsync error, as in any
 * backend).  Otherwise a sender only reads, so its death needs no crash
 * restart, but for one killed while `inserting` (repl_sender_slot).
 */
#ifndef WALRUS_REPL_H
#define WALRUS_REPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/common.h"
#include "wal/wal.h"

#define REPL_STANDBY_FILE   "walrus.standby"
#define REPL_NAME_LEN       64
#define REPL_REFUSAL_KINDS  16
#define REPL_REFUSAL_LOG_US (60ULL * 1000 * 1000)

enum repl_sender_state {
	REPL_SND_FREE = 0,
	REPL_SND_START,     /* authenticated, waiting for START */
	REPL_SND_STREAMING, /* sending WAL */
	REPL_SND_STOPPING,  /* clean shutdown: sending what is left */
	REPL_SND_BACKUP,    /* sending a base backup */
};

enum repl_receiver_state {
	REPL_RCV_STOPPED = 0,
	REPL_RCV_WAITING_START, /* for the startup process's start_lsn */
	REPL_RCV_CONNECTING,
	REPL_RCV_STREAMING,
};

typedef struct repl_sender_slot { /* one per max_wal_senders */
	_Atomic uint32_t pid;     /* 0: free */
	_Atomic uint32_t waiting; /* sleeping for a flush: the flusher signals it */
	_Atomic uint32_t state;   /* enum repl_sender_state */
	char name[REPL_NAME_LEN]; /* the standby's application_name (set at START) */
	char peer[REPL_NAME_LEN]; /* its address (set when the sender claims the slot) */
	_Atomic uint64_t sent, written, flushed, applied; /* LSNs */
	_Atomic uint64_t reply_time_us;                   /* last FEEDBACK, wall clock */
	/* How long the standby took to write, flush and replay what was sent,
	 * as of its last FEEDBACK (lag.c); 0 when it has confirmed all of it. */
	_Atomic uint64_t write_lag_us, flush_lag_us, replay_lag_us;
	/* What the sender's wake-ups cost the primary's CPU: how often its
	 * sleep ended (a flush's signal, the standby's reply, a timer), and
	 * how many WAL messages it sent. */
	_Atomic uint64_t wakeups, wal_messages;
	/* Non-zero while the sender inserts WAL for a base backup: dying then
	 * (but by exit 0) may leave its WAL insertion slot busy, so the
	 * supervisor makes that a crash restart. */
	_Atomic uint32_t inserting;
} repl_sender_slot;

typedef struct repl_receiver { /* the standby's receiver */
	_Atomic uint32_t pid, state;
	/* Set by the STARTUP process once it has replayed the local WAL to its
	 * end: stream from here.  The receiver waits (futex on start_seq) until
	 * it is non-zero. */
	_Atomic uint64_t start_lsn;
	_Atomic uint32_t start_seq;
	_Atomic uint64_t written, flushed; /* durable in DIR/wal up to `flushed` (fdatasync'd) */
	/* Futex word: bumped + FUTEX_WAKE when flushed advances; the startup
	 * process sleeps on it. */
	_Atomic uint32_t flush_seq;
	_Atomic uint64_t applied; /* written by the STARTUP process after each record */
	_Atomic uint64_t primary_flush, last_msg_us;
	_Atomic uint32_t timeline;
	_Atomic uint32_t failed_attempts; /* since it last streamed: the back-off's count */
	_Atomic uint32_t error_seq;       /* odd while error is written */
	char primary[256];                /* from walrus.standby, for stats */
	char error[1024];                 /* last connection error, for stats/logs */
} repl_receiver;

typedef struct repl_state {         /* region "repl" */
	uint32_t nsenders;          /* max_wal_senders */
	_Atomic uint32_t nwaiting;  /* senders with `waiting` set: the flusher's one load */
	_Atomic uint32_t finishing; /* clean shutdown: senders send what is flushed, then exit */
	/* REPL_AUTH_WARN_PER_S WARNINGs a second about peers that did not
	 * authenticate, for all senders together: a flood of them must not
	 * flood the log.  The second began at auth_warn_us. */
	_Atomic uint64_t auth_warn_us;
	_Atomic uint32_t auth_warn_n, auth_warn_suppressed;
	/* The refusals of authenticated standbys, one line per kind (the
	 * standby's name and the reason) every REPL_REFUSAL_LOG_US:
	 * repl_refusal_log_ok.  Races between senders cost a line at most. */
	struct repl_refusal {
		_Atomic uint64_t hash, last_us;
		_Atomic uint32_t suppressed;
	} refusals[REPL_REFUSAL_KINDS];
	repl_receiver receiver;
	repl_sender_slot senders[]; /* nsenders */
} repl_state;

/* ---------------------------------------------------------------- shared memory */

size_t repl_shmem_size(const wr_options *o);
/* In the supervisor, while creating shared memory. */
int repl_shmem_init(const wr_options *o);
/* In every process after attaching (the flusher's repl_wake_senders needs it). */
int repl_attach(void);
repl_state *repl_shared(void); /* NULL when not attached */

/* After each WAL flush (wal's flush hook, set by repl_attach): one atomic
 * load when no sender sleeps. */
void repl_wake_senders(void);

/*
 * A base backup sent by a WAL sender (BASE_BACKUP): the engine's steps,
 * the same as walrus_backup's (engine/backup.c), run in the sender.
 * begin: refuses a standby or a read-only instance; forces full-page
 * images and keeps WAL (wal_backup_begin, EBUSY when a backup runs),
 * requests a checkpoint and waits for it, and says what it left.
 * each_data_file: calls @fn for each file of the data part (base/, the
 * version file, walrus.conf), its path relative to DIR and absolute; a
 * file that vanished meanwhile is skipped.  end_record: inserts and
 * flushes XLOG_BACKUP_END.  release: ends what begin forced; called on
 * every path once begin succeeded.
 */
typedef struct repl_backup_info {
	wal_control ctl;     /* as read right after the backup's checkpoint */
	wr_lsn start;        /* its redo point: the backup's start */
	uint64_t data_bytes; /* the data part's size, an estimate */
} repl_backup_info;
typedef int (*repl_file_fn)(const char *rel, const char *abs, void *arg);
typedef struct repl_backup_ops {
	/* @tick(@arg) is called at least every 100 ms while the checkpoint is
	 * awaited: the sender keeps the standby's wait alive meanwhile. */
	int (*begin)(bool fast, repl_backup_info *info, void (*tick)(void *), void *arg);
	int (*each_data_file)(repl_file_fn fn, void *arg);
	int (*end_record)(wr_lsn start, wr_lsn *end);
	void (*release)(void);
} repl_backup_ops;

/*
 * What the sender and the receiver need of the instance: the engine, which
 * runs them in its processes, says it before calling their mains (repl
 * sits below the engine and does not include it).
 */
typedef struct repl_instance {
	const char *datadir;
	const wr_options *opts;
	_Atomic uint32_t *shutdown; /* non-zero: the supervisor asks the receiver to exit */
	pid_t supervisor;
	/* A standby's (the receiver's): the end of the WAL durable in DIR/wal for
	 * replay, whoever wrote it (moved to the receiver's flushed, never back),
	 * its futex word (bumped and woken when it moves), and who writes DIR/wal
	 * (0 nobody, 1 the receiver, 2 the startup process copying from the
	 * archive): the receiver streams only while it holds the word. */
	_Atomic uint64_t *wal_end;
	_Atomic uint32_t *wal_seq;
	_Atomic uint32_t *source;
	/* A primary's senders: how to take a base backup (NULL: refused). */
	const repl_backup_ops *backup;
} repl_instance;
void repl_set_instance(const repl_instance *inst);

/* ---------------------------------------------------------------- the primary's side */

/*
 * The primary's side of the handshake, for the senders this process forks
 * (never in shared memory): the MAC key derived from replication_password
 * with a salt drawn now, and the TLS context when option ssl is on (files
 * relative to @datadir).  WALRUS_EINVAL naming a bad TLS file.
 */
int repl_server_setup(const char *password, const wr_options *o, const char *datadir);
/* Listens on @addr ("HOST:PORT" or an absolute socket path), non-blocking, close-on-exec. */
int repl_listen(const char *addr, int *fd_out);
/* Checks the form of listen_replication / primary without using it. */
int repl_check_address(const char *addr);
/* Accepts one connection (non-blocking listener): WALRUS_ENOTFOUND when none waits;
 * @peer gets its address ("1.2.3.4:5678", "unix socket"). */
int repl_accept(int lfd, int *fd_out, char *peer, size_t len);
/* Takes a free sender slot for the calling, authenticated sender, whose
 * peer is @peer: its index, or -1 when all max_wal_senders are taken. */
int repl_sender_claim(const char *peer);
/* The slot sender process @pid holds, or -1 (the supervisor, reaping it). */
int repl_sender_slot_of(uint32_t pid);
/* Senders holding a slot. */
uint32_t repl_senders_claimed(void);
/* Frees @slot (the supervisor, once the sender is reaped). */
void repl_sender_free(int slot);
#define REPL_AUTH_WARN_PER_S 10
/* True when a WARNING about an unauthenticated peer may go to the log now;
 * *@suppressed gets how many were left out since the last one. */
bool repl_auth_warn_ok(uint32_t *suppressed);
/* True when the refusal of standby @who for @why may go to the log now: the
 * same one at most every REPL_REFUSAL_LOG_US (a standby that retries must
 * not fill the primary's log); *@suppressed as above. */
bool repl_refusal_log_ok(const char *who, const char *why, uint32_t *suppressed);
/* Asks the senders to send what is flushed and exit (clean shutdown, after the checkpointer). */
void repl_senders_finish(void);
/* Sends an ERROR without blocking (a refused connection), best effort. */
void repl_refuse(int fd, int code, const char *text);
/* Runs a sender on a connection accepted from @peer; in the forked
 * walrus-wsnd.  It authenticates the peer before it takes a sender slot
 * (repl_sender_claim), then calls @attach with the slot.  Never returns. */
_Noreturn void repl_sender_main(int sock_fd, const char *peer, int (*attach)(int slot));

/* ---------------------------------------------------------------- the standby's side */

/* How a standby uses TLS (libpq's sslmode). */
enum repl_sslmode {
	REPL_SSL_DISABLE,     /* never: a primary that asks for TLS is refused */
	REPL_SSL_PREFER,      /* when the primary asks for it; the certificate is not checked */
	REPL_SSL_REQUIRE,     /* always: a primary without TLS is refused */
	REPL_SSL_VERIFY_CA,   /* ... and its certificate signed by rootcert's CA */
	REPL_SSL_VERIFY_FULL, /* ... and naming the host of primary = HOST:PORT */
};
typedef struct repl_ssl_conf {
	int mode;            /* enum repl_sslmode */
	char rootcert[1024]; /* CA certificates (PEM) for verify-ca and verify-full */
	char cert[1024];     /* the standby's certificate, or "" */
	char key[1024];      /* its key, or "" */
} repl_ssl_conf;
/* "disable", ...; and back (-1 for an unknown name). */
const char *repl_sslmode_name(int mode);
int repl_sslmode_parse(const char *text);

/*
 * DIR/walrus.standby, in walrus.conf's format ("name = value", '#'
 * comments, values optionally single-quoted), mode 0600 (refused when its
 * group or others may read it: it holds the password).  Keys: primary
 * (required), slot, application_name (default: DIR's base name), password,
 * wal_archive (the standby's archive, read by the engine; kept here so
 * that a file with both round-trips), sslmode (default prefer),
 * sslrootcert, sslcert, sslkey (paths relative to DIR when not absolute).
 * Its presence makes every start of DIR a standby start.
 */
typedef struct repl_standby_conf {
	char primary[256];
	char slot[REPL_NAME_LEN];
	char application_name[REPL_NAME_LEN];
	char password[256];
	char wal_archive[1024]; /* the standby's archive fall-back (hotstandby.c reads it) */
	char sslmode[16];       /* as written ("" for the default); ssl.mode is what it means */
	repl_ssl_conf ssl;      /* its paths made absolute by repl_standby_parse */
} repl_standby_conf;
/* WALRUS_ENOENT when absent; WALRUS_EINVAL naming the line for a bad one. */
int repl_standby_read(const char *abs, repl_standby_conf *c);
/* Parses the text of such a file (@abs gives the default application_name). */
int repl_standby_parse(const char *abs, const char *path, char *text, repl_standby_conf *c);
/* Writes it durably (temp file, fsync, rename, fsync DIR), mode 0600. */
int repl_standby_write(const char *abs, const repl_standby_conf *c);

/* The receiver; in the forked walrus-wrcv.  Never returns.  It exits with
 * REPL_RCV_EXIT_STOP, the reason in receiver.error, when it cannot start or
 * the primary refused the standby for good: the standby must stop. */
#define REPL_RCV_EXIT_STOP 3
_Noreturn void repl_receiver_main(void);

#endif /* WALRUS_REPL_H */
