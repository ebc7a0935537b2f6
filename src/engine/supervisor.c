/*
 * supervisor.c - the supervisor (PostgreSQL's postmaster): owns the data
 * directory, the shared memory and the auxiliary processes; accepts
 * backends on DIR/walrus.sock; restarts the instance after a crash; shuts
 * it down when the last backend has gone.
 *
 * It is a single-threaded event loop over poll(2): a signalfd (SIGCHLD,
 * SIGTERM, SIGINT, SIGQUIT), the listening socket and one connection per
 * backend.  It never touches the data itself, so that it survives anything
 * the other processes do; everything that can PANIC runs in a child.
 *
 * A backend's connection stays open while it is attached.  A connection
 * that ends without a DETACH message means the backend died with shared
 * memory in an unknown state (a lock held, a page half changed): crash
 * restart, exactly as PostgreSQL reacts to a backend's death.
 */
#include "engine/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "buffer/buffer.h"
#include "checkpointer/checkpointer.h"
#include "fdcache/fdcache.h"
#include "kv/kv.h"
#include "repl/repl.h"
#include "testsupport/testsupport.h"
#include "wal/wal.h"

/*
 * RUNNING -> DRAINING (no new calls; those under way finish) -> SHUTDOWN
 * (no backend I/O; the auxiliary processes finish, the checkpointer with
 * the shutdown checkpoint).  A smart stop stays RUNNING until the last
 * backend detaches; an immediate one exits from any phase.
 */
enum sup_phase { SUP_STARTING, SUP_RUNNING, SUP_DRAINING, SUP_SHUTDOWN };

typedef struct sup_conn {
	int fd;
	pid_t pid;
	int slot;      /* proc slot, -1 until attached */
	uint64_t gen;  /* generation it attached to */
	bool pending;  /* ATTACH received, not yet answered */
	bool detached; /* clean DETACH received */
	bool promote;  /* waits for the promotion to end */
} sup_conn;

#define SUP_MAX_CONNS   4096
#define SUP_MAX_SENDERS 64 /* max_wal_senders' upper bound */
/* Replication peers still authenticating, on top of the senders: bounded on
 * their own, so a flood of idle connections costs a bounded number of
 * processes (each gives up after the authentication timeout). */
#define SUP_MAX_UNAUTH   16
#define SUP_SENDER_PROCS (SUP_MAX_SENDERS + SUP_MAX_UNAUTH)

#define SUP_FIRST_ATTACH_NS (10ULL * 1000000000ULL) /* wait for the first client this long */

static struct {
	char abs[PATH_MAX];
	wr_options opts;
	uint8_t sources[WR_OPTS_MAX]; /* of each option: enum wr_opt_source */
	int lock_fd, listen_fd, sig_fd, shm_fd;
	int ready_fd; /* the opener's pipe until start-up is reported */
	int phase;
	uint64_t generation;
	uint64_t crash_restarts;
	pid_t aux[WR_AUX_NKINDS];
	sup_conn conns[SUP_MAX_CONNS];
	int nconns;
	uint64_t linger_deadline_ns; /* 0: no backend has left yet, or someone is attached */
	bool foreground;
	bool ever_attached;
	bool shutdown_failed;      /* an auxiliary process failed its last duty */
	bool reserve_released;     /* on a full disk, for this start (reserve.c) */
	bool read_only;            /* the instance started read-only (reserve.c) */
	bool standby;              /* a standby in recovery (hotstandby.c) */
	char standby_failed[1280]; /* its startup process failed: stop, saying why */
	int stop_mode;             /* WALRUS_STOP_* asked for (walrus_stop, a signal), 0 if none */
	uint64_t drain_note_ns;    /* when a drain that waits says so again */
	/* Streaming replication's primary side: the listener (listen_replication)
	 * and the walrus-wsnd processes (0: free entry), authenticated (holding
	 * a sender slot, repl_sender_slot_of) or not yet. */
	int repl_fd;
	pid_t senders[SUP_SENDER_PROCS];
	/* connections refused here (too many authenticating, a standby): REPL_AUTH_WARN_PER_S a
	 * second */
	uint64_t unauth_warn_ns;
	uint32_t unauth_warn_n, unauth_suppressed;
	bool senders_finishing;       /* clean shutdown: asked to send the rest and exit */
	uint64_t senders_deadline_ns; /* then killed if still there */
} S = {.lock_fd = -1, .listen_fd = -1, .sig_fd = -1, .shm_fd = -1, .ready_fd = -1, .repl_fd = -1};

static const char *const aux_kinds_started[] = {
    [WR_AUX_CKPT] = "checkpointer", [WR_AUX_BGWR] = "background writer",
    [WR_AUX_WALW] = "WAL writer",   [WR_AUX_ARCH] = "archiver",
    [WR_AUX_WRCV] = "WAL receiver",
};

/* ---------------------------------------------------------------- start-up helpers */

static void report_ready(int ready_fd, int code, const char *msg)
{
	char line[1024];
	if (ready_fd < 0)
		return;
	int n = snprintf(line, sizeof(line), "%d %s\n", code, msg);
	if (n > 0) {
		ssize_t w;
		do
			w = write(ready_fd, line, (size_t)WR_MIN(n, (int)sizeof(line) - 1));
		while (w < 0 && errno == EINTR);
	}
	close(ready_fd);
}

static _Noreturn void fail_start(int ready_fd, int code)
{
	wr_log(WR_FATAL, "could not start: %s", walrus_errmsg());
	report_ready(ready_fd, code, walrus_errmsg());
	_exit(1);
}

static void supervisor_panic_handler(void)
{
	shm_header *h = shm_hdr();
	if (h != NULL)
		atomic_store(&h->state, SHM_STATE_CRASHED);
	_exit(WR_PANIC_EXIT);
}

static int open_log(const char *abs, int level)
{
	char path[PATH_MAX];
	if (!wr_snprintf(path, sizeof(path), "%s/%s", abs, WR_LOG_DIR))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", abs);
	if (mkdir(path, 0700) != 0 && errno != EEXIST)
		return wr_error(wr_errno_code(errno), "could not create \"%s\": %m", path);
	if (!wr_snprintf(path, sizeof(path), "%s/%s", abs, WR_LOG_FILE))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", abs);
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return wr_error(wr_errno_code(errno), "could not open log file \"%s\": %m", path);
	wr_log_set_file(fd, level);
	return WALRUS_OK;
}

static int setup_signals(void)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGQUIT);
	sigaddset(&set, SIGUSR1); /* a standby's startup process: reads may begin */
	if (sigprocmask(SIG_BLOCK, &set, NULL) != 0)
		return wr_error(WALRUS_EINTERNAL, "sigprocmask: %m");
	S.sig_fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (S.sig_fd < 0)
		return wr_error(WALRUS_EINTERNAL, "signalfd: %m");
	signal(SIGPIPE, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	return WALRUS_OK;
}

static void mark_source(const char *name, int source)
{
	size_t i;
	if (wr_opts_find(name, &i) != NULL)
		S.sources[i] = (uint8_t)source;
}

/*
 * Sizes fixed when the directory was initialised win over the options:
 * the WAL's segment size is written in every segment's header.
 */
static int adopt_control_file(void)
{
	wal_control c;
	int rc = wal_control_read(S.abs, &c);
	if (rc != WALRUS_OK)
		return rc;
	if ((uint64_t)S.opts.wal_segment_size != c.wal_seg_size)
		mark_source("wal_segment_size", WR_SRC_CONTROL_FILE);
	if ((uint64_t)S.opts.data_segment_size != c.data_seg_size)
		mark_source("data_segment_size", WR_SRC_CONTROL_FILE);
	if ((uint64_t)S.opts.wal_segment_size != c.wal_seg_size ||
	    (uint64_t)S.opts.data_segment_size != c.data_seg_size)
		wr_log(
		    WR_LOG,
		    "using the data directory's wal_segment_size=%llu and data_segment_size=%llu "
		    "(fixed when it was initialised)",
		    (unsigned long long)c.wal_seg_size, (unsigned long long)c.data_seg_size);
	S.opts.wal_segment_size = (int64_t)c.wal_seg_size;
	S.opts.data_segment_size = (int64_t)c.data_seg_size;
	return WALRUS_OK;
}

/* ---------------------------------------------------------------- shared memory */

/* What the segment got, so a user who reserved huge pages sees them used. */
static void log_huge_pages(void)
{
	const shm_header *h = shm_hdr();
	if (h->huge_page_size == 0)
		return;
	wr_log(WR_LOG, "shared memory: %llu MB in %llu huge pages of %llu kB",
	       (unsigned long long)(h->size >> 20),
	       (unsigned long long)(h->size / h->huge_page_size),
	       (unsigned long long)(h->huge_page_size >> 10));
}

static int create_shared_memory(void)
{
	uint32_t nprocs = (uint32_t)S.opts.max_connections + WR_AUX_NKINDS;
	uint32_t nsenders = (uint32_t)S.opts.max_wal_senders, ntotal = nprocs + nsenders;
	size_t sizes[] = {sizeof(engine_shared),       ntotal * sizeof(wr_proc),
	                  ENGINE_SCRATCH_SIZE,         wal_shmem_size(&S.opts, (int)ntotal),
	                  buf_shmem_size(&S.opts),     ckpt_shmem_size(),
	                  ckpt_sync_shmem_size(),      kv_shmem_size(),
	                  kv_mvcc_shmem_size(&S.opts), repl_shmem_size(&S.opts)};
	size_t total = shm_size_for(sizes, (int)WR_ARRAY_LEN(sizes));
	int rc = shm_create(total, S.opts.huge_pages, &S.shm_fd);
	if (rc != WALRUS_OK)
		return rc;
	log_huge_pages();
	engine_shared *e = shm_alloc("engine", sizeof(engine_shared));
	wr_proc *procs = shm_alloc("procs", ntotal * sizeof(wr_proc));
	void *scratch = shm_alloc("scratch", ENGINE_SCRATCH_SIZE);
	if (e == NULL || procs == NULL || scratch == NULL)
		return wr_error(WALRUS_EINTERNAL, "shared memory layout does not fit");
	/* WAL insertion slots for the senders too: a base backup's end record. */
	rc = wal_shmem_init(&S.opts, S.abs, (int)ntotal);
	if (rc == WALRUS_OK)
		rc = wal_slots_load(S.abs);
	if (rc == WALRUS_OK)
		wal_sync_standby_set(S.opts.synchronous_standby);
	if (rc == WALRUS_OK)
		rc = buf_shmem_init(&S.opts);
	if (rc == WALRUS_OK)
		rc = buf_direct_io_init(&S.opts, S.abs);
	if (rc == WALRUS_OK)
		rc = ckpt_shmem_init();
	if (rc == WALRUS_OK)
		rc = ckpt_sync_shmem_init();
	if (rc == WALRUS_OK)
		rc = kv_shmem_init();
	if (rc == WALRUS_OK)
		rc = kv_mvcc_shmem_init(&S.opts);
	if (rc == WALRUS_OK)
		kv_set_mapped_reads(S.opts.mmap_reads);
	if (rc == WALRUS_OK)
		rc = repl_shmem_init(&S.opts);
	if (rc != WALRUS_OK)
		return rc;
	e->opts = S.opts;
	memcpy(e->opt_source, S.sources, sizeof(e->opt_source));
	memcpy(e->datadir, S.abs, sizeof(e->datadir));
	e->supervisor_pid = (uint32_t)getpid();
	e->nprocs = nprocs;
	e->nsender_procs = nsenders;
	e->start_time_us = wr_wall_us();
	e->crash_restarts = S.crash_restarts;
	e->reserve_released = S.reserve_released;
	atomic_store(&e->stop_mode, (uint32_t)S.stop_mode); /* a restart during a smart stop */
	for (uint32_t i = 0; i < ntotal; i++) {
		procs[i].index = i;
		procs[i].kind = i < WR_AUX_NKINDS || i >= nprocs ? WR_PROC_AUX : WR_PROC_FREE;
	}
	atomic_store(&shm_hdr()->generation, S.generation);
	return WALRUS_OK;
}

static void drop_shared_memory(void)
{
	shm_detach();
	if (S.shm_fd >= 0)
		close(S.shm_fd);
	S.shm_fd = -1;
}

/* ---------------------------------------------------------------- children */

/* In a child: it must not hold the supervisor's sockets, or a dead backend's
 * connection would never show EOF to the supervisor. */
static void close_supervisor_fds(void)
{
	if (S.listen_fd >= 0)
		close(S.listen_fd);
	if (S.repl_fd >= 0)
		close(S.repl_fd);
	close(S.sig_fd);
	for (int i = 0; i < S.nconns; i++)
		close(S.conns[i].fd);
	if (S.shm_fd >= 0)
		close(S.shm_fd);
	if (S.ready_fd >= 0)
		close(S.ready_fd); /* or the opener would wait for our EOF too */
}

static pid_t fork_child(int kind)
{
	pid_t pid = fork();
	if (pid < 0) {
		wr_log(WR_WARNING, "could not fork %s: %m", aux_name(kind));
		return -1;
	}
	if (pid > 0)
		return pid;
	close_supervisor_fds();
	aux_main(kind, S.lock_fd);
}

static const char *describe_status(int st, char *buf, size_t len)
{
	if (WIFEXITED(st) && WEXITSTATUS(st) == WR_PANIC_EXIT)
		snprintf(buf, len, "PANICked");
	else if (WIFEXITED(st))
		snprintf(buf, len, "exited with exit code %d", WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		snprintf(buf, len, "was terminated by signal %d: %s", WTERMSIG(st),
		         strsignal(WTERMSIG(st)));
	else
		snprintf(buf, len, "ended with status 0x%x", (unsigned)st);
	return buf;
}

/*
 * Runs recovery in a child, so that a PANIC there cannot take the supervisor
 * down.  *again: its end-of-recovery checkpoint failed on a full disk, and
 * it should run again without it, read-only (reserve.c): reads must work
 * on a full disk.  Any other failure, or one with room, is the start's error.
 */
static int run_startup(bool *again)
{
	*again = false;
	pid_t pid = fork_child(WR_AUX_STARTUP);
	if (pid < 0)
		return wr_error(WALRUS_EINTERNAL, "could not fork the startup process: %m");
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return wr_error(WALRUS_EINTERNAL, "waitpid: %m");
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return WALRUS_OK;
	char why[128];
	engine_shared *e = engine_sh();
	describe_status(st, why, sizeof(why));
	bool short_of_room = atomic_load(&e->read_only) || reserve_disk_full(S.abs, &S.opts);
	if (e->end_ckpt_started && !e->skip_end_ckpt && short_of_room) {
		wr_log(WR_WARNING,
		       "the startup process %s in its end-of-recovery checkpoint on a "
		       "full disk: recovering again without it, read-only",
		       why);
		*again = true;
		return wr_error(WALRUS_ENOSPC,
		                "the end-of-recovery checkpoint failed on a full disk");
	}
	/* WAL of a newer walrus is no damage: the caller is told to upgrade. */
	if (e->startup_error[0])
		return wr_error(e->startup_code == WALRUS_EVERSION ? WALRUS_EVERSION
		                                                   : WALRUS_ECORRUPT,
		                "recovery failed: %s", e->startup_error);
	return wr_error(WALRUS_EIO, "startup process %s (see %s/%s)", why, S.abs, WR_LOG_FILE);
}

/* Fresh shared memory (the failed startup PANICked in it), then recovery without the checkpoint. */
static int run_startup_read_only(void)
{
	bool again;
	drop_shared_memory();
	int rc = create_shared_memory();
	if (rc != WALRUS_OK)
		return rc;
	engine_sh()->skip_end_ckpt = 1;
	return run_startup(&again);
}

static int start_aux_processes(void)
{
	for (int k = 0; k < WR_AUX_NKINDS; k++) {
		if (k == WR_AUX_STARTUP || k == WR_AUX_WRCV ||
		    (k == WR_AUX_ARCH && !S.opts.archive_mode))
			continue;
		S.aux[k] = fork_child(k);
		if (S.aux[k] < 0)
			return wr_error(WALRUS_EINTERNAL, "could not start the %s: %m",
			                aux_kinds_started[k]);
	}
	return WALRUS_OK;
}

static int aux_index(pid_t pid)
{
	for (int k = 0; k < WR_AUX_NKINDS; k++)
		if (S.aux[k] == pid)
			return k;
	return -1;
}

static void kill_senders(void);

static void kill_aux_processes(void)
{
	kill_senders();
	for (int k = 0; k < WR_AUX_NKINDS; k++) {
		if (S.aux[k] <= 0)
			continue;
		kill(S.aux[k], SIGKILL);
		while (waitpid(S.aux[k], NULL, 0) < 0 && errno == EINTR)
			;
		S.aux[k] = 0;
	}
}

/* The WAL receiver, when there is one, stops before a promotion. */
static void standby_stop_sources(void)
{
	pid_t pid = S.aux[WR_AUX_WRCV];
	if (pid > 0) {
		/* Safe at any point: it publishes only what it synced. */
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		S.aux[WR_AUX_WRCV] = 0;
	}
	atomic_store(&engine_sh()->sb.source, SB_SOURCE_NONE);
}

/* Whether DIR/walrus.standby names a primary to stream from. */
static bool standby_streams(void)
{
	repl_standby_conf c;
	return repl_standby_read(S.abs, &c) == WALRUS_OK && c.primary[0] != '\0';
}

static void answer_promote_waiters(int type, int status, const char *text);

/*
 * The WAL receiver ended on its own: killed (a test's network cut, an
 * operator), it starts again and resumes from what is durable here.  It
 * exits REPL_RCV_EXIT_STOP when it cannot start or its primary refused the
 * standby for good: the standby stops, saying why (standby_failed), as
 * when its startup process fails.  Any other error exit is logged and not
 * retried in a loop.
 */
static void receiver_ended(int st, const char *how)
{
	atomic_store(&engine_sh()->sb.source, SB_SOURCE_NONE);
	if (WIFEXITED(st) && WEXITSTATUS(st) == REPL_RCV_EXIT_STOP) {
		char why[sizeof(repl_shared()->receiver.error)];
		wr_snprintf(why, sizeof(why), "%s", repl_shared()->receiver.error);
		wr_snprintf(S.standby_failed, sizeof(S.standby_failed),
		            "the standby cannot follow its primary: %s", why);
		answer_promote_waiters(WR_MSG_ERROR, WALRUS_EIO, S.standby_failed);
		return;
	}
	if (WIFEXITED(st) && WEXITSTATUS(st) != 0) {
		wr_log(WR_WARNING, "the WAL receiver %s: not started again (see the lines above)",
		       how);
		return;
	}
	wr_log(WR_LOG, "the WAL receiver %s: starting it again", how);
	S.aux[WR_AUX_WRCV] = fork_child(WR_AUX_WRCV);
	if (S.aux[WR_AUX_WRCV] < 0)
		wr_log(WR_WARNING, "could not start the WAL receiver: %m");
}

/* ---------------------------------------------------------------- instance life */

static void answer_pending(void);

/*
 * The status line of walrus.pid, for `walrus status`.  Its first word is
 * the contract: "ready" and "read-only" once every listener the
 * configuration asks for is open and the instance serves; anything else
 * ("starting", "promoting", "restarting", "stopping") while it does not yet,
 * or no longer.
 */
static void publish_state(const char *text)
{
	if (datadir_set_pid_status(S.lock_fd, S.abs, text) != WALRUS_OK)
		wr_log(WR_WARNING, "could not write the status for walrus status: %s",
		       walrus_errmsg());
}

static void publish_status(bool read_only)
{
	char text[1024];
	snprintf(text, sizeof(text), "%s%s", read_only ? "read-only: " : "ready",
	         read_only   ? engine_sh()->read_only_why
	         : S.standby ? ": a standby, serving reads"
	                     : "");
	publish_state(text);
}

/*
 * A standby: recovery goes on while the instance serves reads, so the
 * startup process runs beside the checkpointer and the background writer
 * (restartpoints) and the instance opens once it says it is consistent
 * (SIGUSR1, standby_progress).  No WAL writer or archiver until promoted.
 */
static int standby_start(void)
{
	engine_shared *e = engine_sh();
	atomic_store(&e->sb.active, 1);
	wal_set_in_recovery(true);
	const int kinds[] = {WR_AUX_STARTUP, WR_AUX_CKPT, WR_AUX_BGWR, WR_AUX_WRCV};
	size_t n = WR_ARRAY_LEN(kinds) - (standby_streams() ? 0 : 1);
	for (size_t i = 0; i < n; i++) {
		S.aux[kinds[i]] = fork_child(kinds[i]);
		if (S.aux[kinds[i]] < 0)
			return wr_error(WALRUS_EINTERNAL, "could not start the %s: %m",
			                aux_name(kinds[i]));
	}
	wr_log(WR_LOG, "standby starting (generation %llu): reads wait for a consistent state",
	       (unsigned long long)S.generation);
	publish_state("starting: a standby, replaying up to a consistent state");
	return WALRUS_OK;
}

static void instance_running(bool read_only)
{
	atomic_store(&shm_hdr()->state, SHM_STATE_RUNNING);
	S.phase = SUP_RUNNING;
	publish_status(read_only);
	wr_log(WR_LOG, "instance is ready (generation %llu)%s", (unsigned long long)S.generation,
	       read_only   ? ", read-only"
	       : S.standby ? ", a standby: reads only"
	                   : "");
	answer_pending();
}

/* SIGUSR1 from the startup process: a standby may open for reads. */
static void standby_progress(void)
{
	if (S.standby && S.phase == SUP_STARTING && shm_hdr() != NULL &&
	    atomic_load(&engine_sh()->sb.consistent))
		instance_running(false);
}

static void answer_promote_waiters(int type, int status, const char *text);

/* A promotion a crash interrupted once it was decided is over: its waiters learn it. */
static void promotion_completed_at_start(void)
{
	bool waiting = false;
	for (int i = 0; i < S.nconns; i++)
		waiting = waiting || S.conns[i].promote;
	if (!waiting)
		return;
	wal_control c;
	char text[128];
	snprintf(text, sizeof(text), "promoted: timeline %u (completed by a restart after a crash)",
	         wal_control_read(S.abs, &c) == WALRUS_OK ? wal_control_timeline(&c) : 0);
	wr_log(WR_LOG, "%s: the instance accepts writes", text);
	answer_promote_waiters(WR_MSG_PROMOTE_OK, WALRUS_OK, text);
}

static int instance_start(void)
{
	S.phase = SUP_STARTING;
	bool again = false;
	int rc = create_shared_memory();
	S.standby =
	    rc == WALRUS_OK && standby_configured(S.abs) && !standby_promotion_decided(S.abs);
	if (S.standby)
		return standby_start();
	if (rc == WALRUS_OK)
		rc = run_startup(&again);
	if (again)
		rc = run_startup_read_only();
	/* Read-only: nothing to write, and the WAL writer and the checkpointer
	 * would write (new segments, the shutdown checkpoint). */
	bool read_only = rc == WALRUS_OK && atomic_load(&engine_sh()->read_only);
	S.read_only = read_only;
	if (rc == WALRUS_OK && !read_only)
		rc = start_aux_processes();
	if (rc != WALRUS_OK)
		return rc;
	instance_running(read_only);
	promotion_completed_at_start();
	return WALRUS_OK;
}

/*
 * Whether process @pid can still do anything.  Not when it has exited but
 * is not reaped yet: a backend killed while attached stays a zombie until
 * its parent waits for it (which may be much later, or wait itself for
 * this restart), and kill(pid, 0) succeeds on a zombie.  A pidfd is
 * readable once every thread of the process has exited (Linux 5.3); kill()
 * is the fallback on older kernels.
 */
static bool pid_alive(pid_t pid)
{
	if (pid <= 0)
		return false;
#ifdef SYS_pidfd_open
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd >= 0) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int r = poll(&p, 1, 0);
		close(fd);
		return r <= 0; /* an error (EINTR): look again */
	}
	if (errno == ESRCH)
		return false;
#endif
	return kill(pid, 0) == 0 || errno == EPERM;
}

/* A backend may be inside a write to the old instance's files: let it finish. */
static void wait_backend_io(void)
{
	engine_shared *e = engine_sh();
	wr_proc *procs = engine_procs();
	uint64_t start = wr_now_ns(), next_note = 5000000000ULL;
	for (uint32_t i = WR_AUX_NKINDS; i < e->nprocs; i++) {
		while (atomic_load(&procs[i].in_io) && pid_alive((pid_t)procs[i].pid)) {
			if (wr_now_ns() - start > next_note) {
				wr_log(WR_LOG, "waiting for process %u to finish its I/O",
				       (unsigned)procs[i].pid);
				next_note += 5000000000ULL;
			}
			wr_sleep_us(1000);
		}
	}
}

static _Noreturn void sup_exit(int code)
{
	if (S.repl_fd >= 0) {
		close(S.repl_fd);
		if (S.opts.listen_replication[0] == '/')
			unlink(S.opts.listen_replication);
	}
	if (S.listen_fd >= 0) {
		char path[PATH_MAX];
		close(S.listen_fd);
		if (wr_snprintf(path, sizeof(path), "%s/%s", S.abs, WR_SOCKET_NAME))
			unlink(path);
	}
	/* Read-only on a full disk, a new pid file might find no block: the
	 * next start reuses this one (its lock, not its presence, is what counts). */
	if (code == 0 && S.lock_fd >= 0 && !S.read_only) {
		char path[PATH_MAX];
		if (wr_snprintf(path, sizeof(path), "%s/%s", S.abs, WR_PID_FILE))
			unlink(path);
	}
	wr_log(WR_LOG, code == 0 ? "supervisor shut down" : "supervisor exits with code %d", code);
	_exit(code);
}

static void crash_restart(const char *why)
{
	/* A decided promotion completes at the restart: its waiters are answered then. */
	wal_control c;
	if (wal_control_read(S.abs, &c) != WALRUS_OK || c.promoted == 0)
		answer_promote_waiters(WR_MSG_ERROR, WALRUS_ERESTART,
		                       "the standby crashed during the promotion: it restarts as a "
		                       "standby; promote it again");
	wr_log(WR_LOG, "%s", why);
	wr_log(WR_LOG, "terminating every other process of the instance");
	shm_header *h = shm_hdr();
	atomic_store(&h->state, SHM_STATE_CRASHED);
	ipc_wake_all(&h->state);
	kill_aux_processes();
	wait_backend_io();
	drop_shared_memory();
	S.generation++;
	S.crash_restarts++;
	publish_state("restarting after a crash");
	wr_log(WR_LOG, "all processes of the instance stopped; reinitialising");
	int rc = instance_start();
	if (rc != WALRUS_OK) {
		wr_log(WR_FATAL, "could not restart the instance: %s", walrus_errmsg());
		sup_exit(1);
	}
}

/* ---------------------------------------------------------------- connections */

static void send_reply(sup_conn *c, int type, int status, const char *text, const int *fds,
                       int nfds)
{
	wr_msg m = {.magic = WR_PROTO_MAGIC,
	            .version = WR_PROTO_VERSION,
	            .type = (uint32_t)type,
	            .status = status,
	            .pid = (uint32_t)getpid(),
	            .slot = (uint32_t)c->slot,
	            .generation = S.generation};
	if (text)
		wr_snprintf(m.text, sizeof(m.text), "%s", text);
	if (ipc_send(c->fd, &m, sizeof(m), fds, nfds) != WALRUS_OK)
		wr_log(WR_DEBUG, "could not answer process %d: %s", (int)c->pid, walrus_errmsg());
}

/* Taken by compare-and-swap: attached processes take slots for their further backends too. */
static int claim_backend_slot(pid_t pid)
{
	engine_shared *e = engine_sh();
	wr_proc *procs = engine_procs();
	for (uint32_t i = WR_AUX_NKINDS; i < e->nprocs; i++) {
		uint32_t zero = 0;
		if (atomic_compare_exchange_strong(&procs[i].pid, &zero, (uint32_t)pid))
			return (int)i;
	}
	return -1;
}

static const char *const stop_names[] = {"", "smart", "fast", "immediate"};

static void answer_attach(sup_conn *c)
{
	c->pending = false;
	if (S.stop_mode != 0) {
		char text[PATH_MAX + 128];
		snprintf(text, sizeof(text),
		         "the instance of \"%s\" is being stopped (%s shutdown): it accepts no "
		         "new processes",
		         S.abs, stop_names[S.stop_mode]);
		send_reply(c, WR_MSG_REFUSED, WALRUS_ESHUTDOWN, text, NULL, 0);
		return;
	}
	if (S.phase == SUP_SHUTDOWN || S.phase == SUP_DRAINING) {
		send_reply(c, WR_MSG_ERROR, WALRUS_ESHUTDOWN, "the instance is shutting down", NULL,
		           0);
		return;
	}
	/*
	 * A process killed while its ATTACH waited (in the listen queue, or
	 * during a crash restart) must not take a slot: its end of file would
	 * then count as a backend dying while attached and restart the instance
	 * for nothing, under every process that attached meanwhile.
	 */
	if (c->pid > 0 && !pid_alive(c->pid)) {
		wr_log(WR_DEBUG, "process %d ended before its attach was answered", (int)c->pid);
		return;
	}
	int slot = claim_backend_slot(c->pid);
	if (slot < 0) {
		char text[128];
		snprintf(text, sizeof(text), "too many backends attached (max_connections=%lld)",
		         (long long)S.opts.max_connections);
		send_reply(c, WR_MSG_ERROR, WALRUS_ELIMIT, text, NULL, 0);
		return;
	}
	wr_proc *p = &engine_procs()[slot];
	atomic_store(&p->in_io, 0);
	atomic_store(&p->in_call, 0);
	p->kind = WR_PROC_BACKEND;
	atomic_fetch_add(&engine_sh()->attaches, 1);
	c->slot = slot;
	c->gen = S.generation;
	S.ever_attached = true;
	send_reply(c, WR_MSG_ATTACH_OK, WALRUS_OK, NULL, &S.shm_fd, 1);
	wr_log(WR_DEBUG, "process %d attached (slot %d)", (int)c->pid, slot);
}

static void answer_pending(void)
{
	for (int i = 0; i < S.nconns; i++)
		if (S.conns[i].pending)
			answer_attach(&S.conns[i]);
}

/*
 * The process of @c detached or ended: its slot is free again, and a base
 * backup it was taking is cancelled (walrus_backup copies files between its
 * calls: a process may leave then, and forced full-page images and kept WAL
 * must not outlive it, as for a WAL sender).
 */
static void release_slot(sup_conn *c)
{
	if (c->slot >= 0 && c->gen == S.generation && shm_hdr() != NULL) {
		wr_proc *p = &engine_procs()[c->slot];
		atomic_store(&p->pid, 0);
		p->kind = WR_PROC_FREE;
		if (wal_backup_end_for((uint32_t)c->pid))
			wr_log(WR_LOG,
			       "process %d %s during a base backup: the backup is cancelled",
			       (int)c->pid, c->detached ? "detached" : "ended");
	}
	c->slot = -1;
}

static void drop_conn(int i)
{
	close(S.conns[i].fd);
	S.conns[i] = S.conns[--S.nconns];
}

static void accept_conn(void)
{
	int fd;
	if (ipc_accept(S.listen_fd, &fd) != WALRUS_OK)
		return;
	if (S.nconns >= SUP_MAX_CONNS) {
		close(fd);
		return;
	}
	sup_conn *c = &S.conns[S.nconns++];
	*c = (sup_conn){.fd = fd, .slot = -1};
	if (ipc_peer_pid(fd, &c->pid) != WALRUS_OK)
		c->pid = 0;
}

static void answer_stop(sup_conn *c, int mode);

/*
 * `walrus promote`: answered when the promotion is over (or failed).  The
 * sources stop first, so that the startup process replays what they made
 * durable and nothing arrives after it decided where the new timeline
 * begins.
 */
static void answer_promote(sup_conn *c)
{
	engine_shared *e = engine_sh();
	const char *refusal = NULL;
	if (!S.standby)
		refusal = "the instance is not a standby";
	else if (S.phase == SUP_STARTING)
		refusal = "the standby has not reached a consistent state yet";
	else if (S.phase != SUP_RUNNING || S.stop_mode != 0)
		refusal = "the standby is shutting down";
	if (refusal != NULL) {
		char text[PATH_MAX + 128];
		snprintf(text, sizeof(text), "cannot promote \"%s\": %s", S.abs, refusal);
		send_reply(c, WR_MSG_ERROR, WALRUS_EINVAL, text, NULL, 0);
		return;
	}
	c->promote = true;
	if (atomic_exchange(&e->sb.promote, 1) != 0)
		return; /* under way: this one waits with the others */
	wr_log(WR_LOG, "promotion requested by process %d", (int)c->pid);
	publish_state("promoting");
	standby_stop_sources();
	atomic_store(&e->sb.no_stream, 1);
	atomic_fetch_add(&e->sb.wal_seq, 1);
	ipc_wake_all(&e->sb.wal_seq);
}

/* Returns true when the connection must be dropped. */
static bool handle_conn(int i, char *crash_why, size_t why_len)
{
	sup_conn *c = &S.conns[i];
	wr_msg m;
	size_t len;
	int fds[IPC_MAX_FDS], nfds = 0;

	int rc = ipc_recv(c->fd, &m, sizeof(m), &len, fds, &nfds);
	for (int k = 0; k < nfds; k++)
		close(fds[k]); /* backends never send fds here */
	bool current = c->slot >= 0 && c->gen == S.generation && !c->detached;
	if (rc != WALRUS_OK || len == 0) {
		if (current)
			snprintf(crash_why, why_len, "backend process %d ended without detaching",
			         (int)c->pid);
		release_slot(c);
		return true;
	}
	if (len != sizeof(m) || m.magic != WR_PROTO_MAGIC || m.version != WR_PROTO_VERSION) {
		wr_log(WR_WARNING, "process %d sent a malformed message; closing its connection",
		       (int)c->pid);
		if (current)
			snprintf(crash_why, why_len, "backend process %d broke the protocol",
			         (int)c->pid);
		release_slot(c);
		return true;
	}
	switch (m.type) {
	case WR_MSG_ATTACH:
		if (c->slot >= 0)
			break;
		c->pending = true;
		if (S.phase != SUP_STARTING)
			answer_attach(c);
		break;
	case WR_MSG_DETACH:
		c->detached = true;
		release_slot(c);
		return true;
	case WR_MSG_PANIC:
		if (current)
			snprintf(crash_why, why_len, "backend process %d PANICked", (int)c->pid);
		break;
	case WR_MSG_STOP:
		answer_stop(c, m.status);
		break;
	case WR_MSG_PROMOTE:
		answer_promote(c);
		break;
	default:
		wr_log(WR_WARNING, "process %d sent unknown message type %u", (int)c->pid, m.type);
	}
	return false;
}

/* ---------------------------------------------------------------- shutdown */

static int live_connections(void)
{
	int n = 0;
	for (int i = 0; i < S.nconns; i++)
		n += S.conns[i].slot >= 0 || S.conns[i].pending;
	return n;
}

static void close_listener(void)
{
	if (S.listen_fd < 0)
		return;
	char path[PATH_MAX];
	close(S.listen_fd);
	S.listen_fd = -1;
	if (wr_snprintf(path, sizeof(path), "%s/%s", S.abs, WR_SOCKET_NAME))
		unlink(path);
}

/* New calls fail with ESHUTDOWN; calls under way finish (calls_drained). */
static void begin_drain(const char *why)
{
	wr_log(WR_LOG, "shutting down: %s", why);
	publish_state("stopping");
	S.phase = SUP_DRAINING;
	S.drain_note_ns = wr_now_ns() + 5000000000ULL;
	answer_pending();
	shm_header *h = shm_hdr();
	atomic_store(&h->state, SHM_STATE_STOPPING);
	ipc_wake_all(&h->state);
}

/* Whether no live backend is inside a call (it marked in_call before reading the state). */
static bool calls_drained(void)
{
	engine_shared *e = engine_sh();
	wr_proc *procs = engine_procs();
	for (uint32_t i = WR_AUX_NKINDS; i < e->nprocs; i++) {
		pid_t pid = (pid_t)atomic_load(&procs[i].pid);
		if (pid == 0 || !atomic_load(&procs[i].in_call) || !pid_alive(pid))
			continue;
		if (wr_now_ns() >= S.drain_note_ns) {
			wr_log(WR_LOG, "waiting for a call of process %d to finish", (int)pid);
			S.drain_note_ns = wr_now_ns() + 5000000000ULL;
		}
		return false;
	}
	return true;
}

/* Whether our child @pid has not exited; it stays unreaped for reap_children. */
static bool child_alive(pid_t pid)
{
	siginfo_t si = {0};
	if (pid <= 0)
		return false;
	if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0)
		return errno == EINTR;
	return si.si_pid == 0;
}

/* Backends do no more I/O; the auxiliary processes finish their duties and exit. */
static void finish_shutdown(void)
{
	S.phase = SUP_SHUTDOWN;
	shm_header *h = shm_hdr();
	engine_shared *e = engine_sh();
	atomic_store(&h->state, SHM_STATE_SHUTDOWN);
	ipc_wake_all(&h->state);
	wait_backend_io();
	/* No archive_timeout switch may follow the shutdown checkpoint. */
	atomic_store(&e->arch.no_switch, 1);
	while (atomic_load(&e->arch.switching) != 0 && child_alive(S.aux[WR_AUX_ARCH]))
		(void)ipc_wait_u32(&e->arch.switching, 1, 10 * 1000000ULL);
	atomic_store(&e->shutdown_requested, 1);
	ipc_wake_all(&e->shutdown_requested);
	/* A standby's startup process sleeps on the WAL's arrival between records
	 * (hotstandby.c, hs_wait): a new value ends its wait at once, without it
	 * the stop waited out its 10 s nap. */
	atomic_fetch_add(&e->sb.wal_seq, 1);
	ipc_wake_all(&e->sb.wal_seq);
	for (int k = 0; k < WR_AUX_NKINDS; k++)
		ipc_wake_all(&e->aux_wakeup[k]);
	wal_wake_workers();
}

/* The instance ends on its own (linger): a new open starts the next one once we are gone. */
static void begin_shutdown(const char *why)
{
	close_listener();
	begin_drain(why);
}

/*
 * No checkpoint: backends see CRASHED (their waits and I/O stop as after a
 * crash), the auxiliary processes are killed, and the next start recovers
 * from the WAL, which holds everything acknowledged as durable.
 */
static _Noreturn void stop_immediately(const char *why)
{
	wr_log(WR_LOG, "immediate shutdown: %s", why);
	publish_state("stopping");
	shm_header *h = shm_hdr();
	if (h != NULL) {
		atomic_store(&engine_sh()->stop_mode, WALRUS_STOP_IMMEDIATE);
		atomic_store(&h->state, SHM_STATE_CRASHED);
		ipc_wake_all(&h->state);
	}
	kill_aux_processes();
	if (h != NULL)
		wait_backend_io();
	sup_exit(2);
}

/* A stop asked for by walrus_stop or a signal: it escalates one under way, never weakens it. */
static void request_stop(int mode, const char *by)
{
	if (mode <= S.stop_mode) {
		wr_log(WR_LOG, "%s shutdown requested by %s: a %s shutdown is already under way",
		       stop_names[mode], by, stop_names[S.stop_mode]);
		return;
	}
	S.stop_mode = mode;
	char why[128];
	snprintf(why, sizeof(why), "%s shutdown requested by %s", stop_names[mode], by);
	if (mode == WALRUS_STOP_IMMEDIATE)
		stop_immediately(why);
	wr_log(WR_LOG, "%s", why);
	publish_state("stopping");
	if (shm_hdr() != NULL)
		atomic_store(&engine_sh()->stop_mode, (uint32_t)mode);
	answer_pending(); /* refused from now on */
}

/* Moves a stop on as far as it can go now; called at every turn of the loop. */
static void stop_progress(void)
{
	if (S.phase == SUP_RUNNING && S.stop_mode == WALRUS_STOP_FAST)
		begin_drain("fast shutdown");
	else if (S.phase == SUP_RUNNING && S.stop_mode == WALRUS_STOP_SMART &&
	         live_connections() == 0)
		begin_drain("smart shutdown: every process has detached");
	if (S.phase == SUP_DRAINING && calls_drained())
		finish_shutdown();
}

/* Answers first: an immediate stop does not come back. */
static void answer_stop(sup_conn *c, int mode)
{
	char by[64];
	if (mode < WALRUS_STOP_SMART || mode > WALRUS_STOP_IMMEDIATE) {
		send_reply(c, WR_MSG_ERROR, WALRUS_EINVAL, "unknown shutdown mode", NULL, 0);
		return;
	}
	char text[PATH_MAX + 128];
	snprintf(text, sizeof(text), "%s shutdown of the instance of \"%s\" (supervisor pid %d)",
	         stop_names[WR_MAX(mode, S.stop_mode)], S.abs, (int)getpid());
	send_reply(c, WR_MSG_STOP_OK, WALRUS_OK, text, NULL, 0);
	snprintf(by, sizeof(by), "process %d", (int)c->pid);
	request_stop(mode, by);
}

/* The shutdown checkpoint is written (or will not be): the archiver's last pass. */
static void archiver_final_pass(void)
{
	engine_shared *e = engine_sh();
	atomic_store(&e->arch.final, 1);
	atomic_fetch_add(&e->aux_wakeup[WR_AUX_ARCH], 1);
	ipc_wake_all(&e->aux_wakeup[WR_AUX_ARCH]);
}

static bool aux_all_gone(void)
{
	for (int k = 0; k < WR_AUX_NKINDS; k++)
		if (S.aux[k] > 0)
			return false;
	return true;
}

/* ---------------------------------------------------------------- WAL senders */

/*
 * The primary's side of streaming replication: listen on
 * listen_replication (with replication_password from walrus.conf), fork a
 * walrus-wsnd per accepted connection; it takes a free sender slot once its
 * peer has authenticated.  A sender
 * holds no lock and changes nothing shared but its slot, so its death
 * (but a PANIC) frees the slot without a crash restart.
 *
 * A standby serves no WAL (no cascading), but it listens all the same and
 * refuses each connection saying it is a standby (refuse_as_standby): a
 * standby pointed at it by mistake then stops with that reason instead of
 * retrying "connection refused" for ever.  Once promoted it serves.
 */
static int replication_setup(void)
{
	char pw[256];
	bool found, standby = standby_configured(S.abs);
	if (S.opts.listen_replication[0] == '\0')
		return WALRUS_OK;
	if (!standby) {
		int rc = conf_secret(S.abs, "replication_password", pw, sizeof(pw), &found);
		if (rc == WALRUS_OK && (!found || pw[0] == '\0'))
			rc = wr_error(WALRUS_EINVAL,
			              "option \"listen_replication\" is set but %s/%s sets no "
			              "replication_password: standbys must authenticate",
			              S.abs, WR_CONF_FILE);
		if (rc == WALRUS_OK)
			rc = repl_server_setup(pw, &S.opts, S.abs);
		explicit_bzero(pw, sizeof(pw));
		if (rc != WALRUS_OK && S.repl_fd >= 0) { /* promoted: no replication */
			close(S.repl_fd);
			S.repl_fd = -1;
		}
		if (rc != WALRUS_OK)
			return rc;
	}
	if (S.repl_fd < 0) {
		int rc = repl_listen(S.opts.listen_replication, &S.repl_fd);
		if (rc != WALRUS_OK)
			return rc;
	}
	if (standby)
		wr_log(WR_LOG,
		       "a standby: refusing replication connections on %s until promoted "
		       "(a standby serves no WAL)",
		       S.opts.listen_replication);
	else
		wr_log(WR_LOG, "listening for standbys on %s%s", S.opts.listen_replication,
		       S.opts.ssl ? " (TLS)" : "");
	return WALRUS_OK;
}

/*
 * Whether accepting now makes sense: a primary once it runs, a standby at
 * any time (it only refuses) but during its promotion, whose end serves
 * the connections waiting in the backlog.
 */
static bool replication_accepting(void)
{
	if (S.repl_fd < 0)
		return false;
	if (!S.standby)
		return S.phase == SUP_RUNNING;
	bool promoting = shm_hdr() != NULL && atomic_load(&engine_sh()->sb.promote) != 0;
	return (S.phase == SUP_RUNNING || S.phase == SUP_STARTING) && !promoting;
}

/*
 * REPL_AUTH_WARN_PER_S lines a second about refused replication
 * connections; @more gets the count of those left out before.
 */
static bool refusal_log_ok(char *more, size_t len)
{
	uint64_t now = wr_now_ns();
	if (S.unauth_warn_ns == 0 || now - S.unauth_warn_ns >= 1000000000ULL) {
		S.unauth_warn_ns = now;
		S.unauth_warn_n = 0;
	}
	more[0] = '\0';
	if (S.unauth_warn_n++ >= REPL_AUTH_WARN_PER_S) {
		S.unauth_suppressed++;
		return false;
	}
	if (S.unauth_suppressed > 0)
		snprintf(more, len, " (%u such messages suppressed before)", S.unauth_suppressed);
	S.unauth_suppressed = 0;
	return true;
}

/* A standby's answer to a replication connection: a reason the peer cannot retry away. */
static void refuse_as_standby(int fd, const char *peer)
{
	char text[PATH_MAX + 96], more[80];
	snprintf(text, sizeof(text), "\"%s\" is a standby: point the standby at its primary",
	         S.abs);
	if (refusal_log_ok(more, sizeof(more)))
		wr_log(WR_LOG,
		       "replication connection from %s refused: this instance is a standby%s", peer,
		       more);
	repl_refuse(fd, WALRUS_EREADONLY, text);
	close(fd);
}

static uint32_t sender_procs(int *free_entry)
{
	uint32_t n = 0;
	*free_entry = -1;
	for (int i = 0; i < SUP_SENDER_PROCS; i++) {
		if (S.senders[i] != 0)
			n++;
		else if (*free_entry < 0)
			*free_entry = i;
	}
	return n;
}

/*
 * The sender authenticates its peer before it takes a sender slot
 * (repl_sender_claim): what the supervisor bounds here is how many peers
 * may be authenticating at once, with one WARNING a second when it refuses.
 */
static void start_sender(int fd, const char *peer)
{
	int entry;
	uint32_t procs = sender_procs(&entry), claimed = repl_senders_claimed();
	if (procs - claimed >= SUP_MAX_UNAUTH || entry < 0) {
		char text[128], more[80];
		snprintf(text, sizeof(text), "too many connections authenticating (%d)",
		         SUP_MAX_UNAUTH);
		if (refusal_log_ok(more, sizeof(more)))
			wr_log(WR_WARNING, "replication connection from %s refused: %s%s", peer,
			       text, more);
		repl_refuse(fd, WALRUS_ELIMIT, text);
		close(fd);
		return;
	}
	pid_t pid = fork();
	if (pid == 0) {
		close_supervisor_fds();
		aux_sender_main(fd, peer);
	}
	close(fd);
	if (pid < 0) {
		wr_log(WR_WARNING, "could not fork a WAL sender for %s: %m", peer);
		return;
	}
	S.senders[entry] = pid;
}

static void accept_replication(void)
{
	int fd;
	char peer[64];
	while (S.repl_fd >= 0 && repl_accept(S.repl_fd, &fd, peer, sizeof(peer)) == WALRUS_OK) {
		if (S.standby)
			refuse_as_standby(fd, peer);
		else
			start_sender(fd, peer);
	}
}

static int sender_index(pid_t pid)
{
	for (int i = 0; i < SUP_SENDER_PROCS; i++)
		if (S.senders[i] == pid)
			return i;
	return -1;
}

/* A sender ended: its slot is free again; only a PANIC means shared memory may be damaged. */
static void sender_reaped(pid_t pid, int st, char *crash_why, size_t why_len)
{
	int e = sender_index(pid);
	if (e < 0)
		return;
	S.senders[e] = 0;
	bool inserting = false;
	int i = shm_hdr() != NULL ? repl_sender_slot_of((uint32_t)pid) : -1;
	if (i >= 0) {
		inserting = atomic_load(&repl_shared()->senders[i].inserting) != 0;
		atomic_store(&repl_shared()->senders[i].inserting, 0);
		repl_sender_free(i);
		wal_slots_release_pid((uint32_t)pid); /* its replication slot, if it had one */
		/* A base backup it was sending: forced full-page images and kept WAL
		 * must not outlive it. */
		if (wal_backup_end_for((uint32_t)pid))
			wr_log(WR_LOG,
			       "walrus-wsnd process (pid %d) ended during a base backup: "
			       "the backup is cancelled",
			       (int)pid);
		atomic_store(&engine_procs()[engine_sh()->nprocs + (uint32_t)i].pid, 0);
	}
	char how[128];
	describe_status(st, how, sizeof(how));
	bool clean = WIFEXITED(st) && WEXITSTATUS(st) == 0;
	if ((WIFEXITED(st) && WEXITSTATUS(st) == WR_PANIC_EXIT) || (inserting && !clean)) {
		/* Killed inside a WAL insert, its insertion slot may stay busy. */
		snprintf(crash_why, why_len, "walrus-wsnd process (pid %d) %s%s", (int)pid, how,
		         inserting ? " while inserting WAL" : "");
		return;
	}
	wr_log(WIFEXITED(st) && WEXITSTATUS(st) == 0 ? WR_DEBUG : WR_LOG,
	       "walrus-wsnd process (pid %d) %s", (int)pid, how);
}

static void kill_senders(void)
{
	for (int i = 0; i < SUP_SENDER_PROCS; i++) {
		if (S.senders[i] <= 0)
			continue;
		kill(S.senders[i], SIGKILL);
		while (waitpid(S.senders[i], NULL, 0) < 0 && errno == EINTR)
			;
		S.senders[i] = 0;
	}
}

/*
 * Clean shutdown: once the checkpointer is gone (its shutdown checkpoint
 * is flushed) the senders send what is left and exit; one whose standby
 * does not take it within wal_sender_timeout is killed.  True when none is left.
 */
static bool senders_done(void)
{
	bool any = false;
	for (int i = 0; i < SUP_SENDER_PROCS; i++)
		any = any || S.senders[i] > 0;
	if (!any)
		return true;
	if (S.phase != SUP_SHUTDOWN || S.aux[WR_AUX_CKPT] > 0)
		return false;
	if (!S.senders_finishing) {
		S.senders_finishing = true;
		S.senders_deadline_ns = wr_now_ns() + (uint64_t)S.opts.wal_sender_timeout_us * 1000;
		repl_senders_finish();
		/* A peer still authenticating has nothing to receive: it goes now
		 * (one that takes a slot meanwhile dies as a sender would). */
		for (int e = 0; e < SUP_SENDER_PROCS; e++)
			if (S.senders[e] > 0 && repl_sender_slot_of((uint32_t)S.senders[e]) < 0)
				(void)kill(S.senders[e], SIGKILL);
	} else if (wr_now_ns() > S.senders_deadline_ns) {
		wr_log(WR_WARNING, "WAL senders still running at shutdown after "
		                   "wal_sender_timeout: killing them");
		kill_senders();
		return true;
	}
	return false;
}

/* ---------------------------------------------------------------- the loop */

/* Answers every process waiting for the promotion. */
static void answer_promote_waiters(int type, int status, const char *text)
{
	for (int i = 0; i < S.nconns; i++)
		if (S.conns[i].promote) {
			S.conns[i].promote = false;
			send_reply(&S.conns[i], type, status, text, NULL, 0);
		}
}

/*
 * A standby's startup process ended: after a promotion, the instance takes
 * writes (the WAL writer and the archiver start); otherwise recovery failed,
 * and a standby that cannot replay must not serve reads that go stale: the
 * instance stops, saying why (a crash restart would fail the same way).
 */
static void standby_startup_ended(int st, const char *how)
{
	engine_shared *e = engine_sh();
	bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0 && atomic_load(&e->sb.promote);
	if (!ok) {
		wr_snprintf(S.standby_failed, sizeof(S.standby_failed),
		            "the standby's startup process %s%s%s", how,
		            e->startup_error[0] ? ": " : "", e->startup_error);
		answer_promote_waiters(WR_MSG_ERROR, WALRUS_EIO, S.standby_failed);
		return;
	}
	S.standby = false;
	atomic_store(&e->sb.active, 0);
	for (int k = 0; k < WR_AUX_NKINDS; k++) {
		if (S.aux[k] > 0 || k == WR_AUX_STARTUP || k == WR_AUX_CKPT || k == WR_AUX_BGWR ||
		    k == WR_AUX_WRCV || (k == WR_AUX_ARCH && !S.opts.archive_mode))
			continue;
		S.aux[k] = fork_child(k);
		if (S.aux[k] < 0)
			wr_log(WR_WARNING, "could not start the %s: %m", aux_name(k));
	}
	wal_control c;
	char text[128];
	snprintf(text, sizeof(text), "promoted: timeline %u",
	         wal_control_read(S.abs, &c) == WALRUS_OK ? wal_control_timeline(&c) : 0);
	wr_log(WR_LOG, "%s: the instance accepts writes", text);
	if (S.opts.synchronous_standby[0] != '\0')
		wr_log(WR_LOG,
		       "durable writes wait for synchronous standby \"%s\" (synchronous_standby in "
		       "walrus.conf): until it connects, they wait",
		       S.opts.synchronous_standby);
	else
		wr_log(WR_LOG,
		       "durable writes wait for no standby (synchronous_standby is not set)");
	if (replication_setup() != WALRUS_OK)
		wr_log(WR_WARNING, "no replication after the promotion: %s", walrus_errmsg());
	publish_status(false);
	answer_promote_waiters(WR_MSG_PROMOTE_OK, WALRUS_OK, text);
}

static void reap_children(char *crash_why, size_t why_len)
{
	int st;
	pid_t pid;
	while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
		int k = aux_index(pid);
		if (k < 0) {
			sender_reaped(pid, st, crash_why, why_len);
			continue;
		}
		S.aux[k] = 0;
		char how[128];
		describe_status(st, how, sizeof(how));
		if (S.phase == SUP_SHUTDOWN) {
			if (k == WR_AUX_CKPT)
				archiver_final_pass();
			if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
				wr_log(WR_DEBUG, "%s exited", aux_name(k));
			} else {
				/* The shutdown checkpoint may be missing: the next
				 * start recovers, and says so. */
				wr_log(WR_WARNING, "%s process (pid %d) %s during shutdown",
				       aux_name(k), (int)pid, how);
				S.shutdown_failed = true;
			}
			continue;
		}
		if (k == WR_AUX_STARTUP && S.standby) {
			standby_startup_ended(st, how);
			continue;
		}
		if (k == WR_AUX_WRCV && S.standby &&
		    !(WIFEXITED(st) && WEXITSTATUS(st) == WR_PANIC_EXIT)) {
			receiver_ended(st, how);
			continue;
		}
		snprintf(crash_why, why_len, "%s process (pid %d) %s", aux_name(k), (int)pid, how);
	}
}

static void handle_signals(char *crash_why, size_t why_len)
{
	struct signalfd_siginfo si;
	while (read(S.sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		switch (si.ssi_signo) {
		case SIGCHLD:
			reap_children(crash_why, why_len);
			break;
		case SIGTERM:
			request_stop(WALRUS_STOP_SMART, "SIGTERM");
			break;
		case SIGINT:
			request_stop(WALRUS_STOP_FAST, "SIGINT");
			break;
		case SIGQUIT:
			request_stop(WALRUS_STOP_IMMEDIATE, "SIGQUIT");
			break;
		case SIGUSR1:
			standby_progress();
			break;
		default:
			break;
		}
	}
}

static int poll_timeout_ms(void)
{
	if (S.phase == SUP_DRAINING)
		return 10; /* calls_drained looks at shared memory: nothing wakes us */
	if (S.linger_deadline_ns == 0)
		return S.phase == SUP_SHUTDOWN ? 100 : 1000;
	uint64_t now = wr_now_ns();
	if (now >= S.linger_deadline_ns)
		return 0;
	return (int)((S.linger_deadline_ns - now) / 1000000 + 1);
}

static void update_linger(void)
{
	if (S.phase != SUP_RUNNING || S.foreground)
		return;
	if (live_connections() > 0) {
		S.linger_deadline_ns = 0;
		return;
	}
	uint64_t now = wr_now_ns();
	if (S.linger_deadline_ns == 0) {
		uint64_t linger = (uint64_t)S.opts.supervisor_linger_us * 1000;
		/* The opener that started us connects only after reading the
		 * ready line: give it time even with supervisor_linger=0. */
		if (!S.ever_attached)
			linger = WR_MAX(linger, SUP_FIRST_ATTACH_NS);
		S.linger_deadline_ns = now + linger;
		return;
	}
	if (now >= S.linger_deadline_ns)
		begin_shutdown("no process is attached");
}

static void event_loop(void)
{
	struct pollfd *pfds = calloc(SUP_MAX_CONNS + 3, sizeof(*pfds));
	if (pfds == NULL)
		wr_panic("out of memory in the supervisor");
	for (;;) {
		char crash_why[256] = "";
		int n = 0;
		pfds[n++] = (struct pollfd){.fd = S.sig_fd, .events = POLLIN};
		int first_conn = n;
		if (S.listen_fd >= 0)
			pfds[n++] = (struct pollfd){.fd = S.listen_fd, .events = POLLIN};
		int listen_idx = S.listen_fd >= 0 ? first_conn : -1;
		/* Standbys are served once the instance runs; until then they wait in the backlog.
		 */
		int repl_idx = replication_accepting() ? n : -1;
		if (repl_idx >= 0)
			pfds[n++] = (struct pollfd){.fd = S.repl_fd, .events = POLLIN};
		int conn_base = n;
		for (int i = 0; i < S.nconns; i++)
			pfds[n++] = (struct pollfd){.fd = S.conns[i].fd, .events = POLLIN};
		int r = poll(pfds, (nfds_t)n, poll_timeout_ms());
		if (r < 0 && errno != EINTR)
			wr_panic("poll failed in the supervisor: %m");
		if (r > 0 && pfds[0].revents)
			handle_signals(crash_why, sizeof(crash_why));
		/* Connections first, from the end, so that drop_conn's swap is safe. */
		for (int i = S.nconns - 1; r > 0 && i >= 0; i--) {
			if (conn_base + i >= n || pfds[conn_base + i].revents == 0)
				continue;
			if (handle_conn(i, crash_why, sizeof(crash_why)))
				drop_conn(i);
		}
		if (r > 0 && listen_idx >= 0 && S.listen_fd >= 0 && pfds[listen_idx].revents)
			accept_conn();
		if (r > 0 && repl_idx >= 0 && pfds[repl_idx].revents)
			accept_replication();
		if (S.standby_failed[0] && S.phase != SUP_SHUTDOWN)
			stop_immediately(S.standby_failed);
		if (crash_why[0] &&
		    (S.phase == SUP_RUNNING || (S.phase == SUP_STARTING && S.standby)))
			crash_restart(crash_why);
		/* Shared memory may be inconsistent: no shutdown checkpoint from it. */
		if (crash_why[0] && S.phase == SUP_DRAINING)
			stop_immediately(crash_why);
		stop_progress();
		bool senders_gone = senders_done();
		if (S.phase == SUP_SHUTDOWN && aux_all_gone() && senders_gone)
			break;
		update_linger();
	}
	free(pfds);
}

/* ---------------------------------------------------------------- entry points */

static void detach_from_caller(int ready_fd)
{
	/* Keep only the readiness pipe: any other inherited fd (a pipe the
	 * caller's parent reads, a socket) must not be held open by us. */
	if (ready_fd != 3) {
		if (dup2(ready_fd, 3) < 0)
			_exit(1);
	}
	close_range(4, ~0U, 0);
	int null = open("/dev/null", O_RDWR);
	if (null >= 0) {
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
		if (null > 2)
			close(null);
	}
	sigset_t all;
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	for (int sig = 1; sig < NSIG; sig++)
		signal(sig, SIG_DFL);
}

/* Test builds: failpoint "step:STOP:supervisor listen" holds the supervisor
 * after it wrote its pid, before its sockets, where status must say starting. */
static void test_step(const char *step)
{
	FDC_LOCKED();
	(void)ts_fp_check("step", step, NULL);
}

/*
 * The instance settings with their sources into @buf: as one log line
 * ("name=value (source), ...") of those not at their defaults, or as a table
 * of all of them, a line each.  Returns how many it wrote.
 */
static size_t format_settings(char *buf, size_t len, bool table)
{
	size_t n, used = 0, count = 0;
	const wr_opt_desc *t = wr_opts_table(&n);

	buf[0] = '\0';
	for (size_t i = 0; i < n && used < len; i++) {
		char v[WR_OPT_TEXT_MAX];
		if (t[i].scope != WR_SCOPE_INSTANCE || (!table && S.sources[i] == WR_SRC_DEFAULT) ||
		    wr_opts_get(&S.opts, t[i].name, v, sizeof(v)) != WALRUS_OK)
			continue;
		const char *src = wr_opt_source_name(S.sources[i]);
		int w =
		    table ? snprintf(buf + used, len - used, "%-30s %-12s %s\n", t[i].name, v, src)
		          : snprintf(buf + used, len - used, "%s%s=%s (%s)", count ? ", " : "",
		                     t[i].name, v, src);
		used += w > 0 ? (size_t)w : 0;
		count++;
	}
	return count;
}

/*
 * The settings other than the defaults in the log, and every instance
 * setting with its source in DIR/walrus.settings (as PostgreSQL's
 * postmaster.opts): `walrus status` reads them there, since attaching to
 * read shared memory would keep the instance alive.
 */
static void publish_settings(void)
{
	char text[8192];
	if (format_settings(text, sizeof(text), false) == 0)
		snprintf(text, sizeof(text), "none");
	wr_log(WR_LOG, "settings other than the defaults: %s", text);
	format_settings(text, sizeof(text), true);
	if (datadir_write_file(S.abs, WR_SETTINGS_FILE, text) != WALRUS_OK)
		wr_log(WR_WARNING, "could not write the settings for walrus status: %s",
		       walrus_errmsg());
}

_Noreturn void supervisor_main(const char *abs, const wr_options *opts, int ready_fd,
                               bool foreground)
{
	int rc;

	/* Read before anything uses an option; its error is reported once the log is open. */
	int conf_rc = conf_effective(abs, opts, &S.opts, S.sources);
	S.foreground = foreground;
	S.ready_fd = ready_fd;
	wr_snprintf(S.abs, sizeof(S.abs), "%s", abs);
	prctl(PR_SET_NAME, "walrus-super", 0, 0, 0);
	wr_log_set_process_name("walrus-super");
	wr_set_panic_handler(supervisor_panic_handler);
	/* Forked from an application: its log handler is its code, not ours to run. */
	wr_log_set_handler(NULL, NULL, 0);
	umask(077);
	if (!foreground)
		wr_log_set_stderr(WR_PANIC + 1);
	if ((rc = open_log(abs, S.opts.log_min_messages)) != WALRUS_OK)
		fail_start(ready_fd, rc);
	if (conf_rc != WALRUS_OK)
		fail_start(ready_fd, conf_rc);
	if ((rc = fdc_init(S.opts.max_open_files)) != WALRUS_OK)
		fail_start(ready_fd, rc);
	if ((rc = datadir_lock_instance(abs, &S.lock_fd)) != WALRUS_OK)
		fail_start(ready_fd, rc);
	if ((rc = datadir_init_or_verify(abs, &S.opts)) != WALRUS_OK)
		fail_start(ready_fd, rc);
	if ((rc = adopt_control_file()) != WALRUS_OK)
		fail_start(ready_fd, rc);
	if ((rc = datadir_wait_old_backends(S.lock_fd, abs, 30000000)) != WALRUS_OK)
		fail_start(ready_fd, rc);
	S.reserve_released = reserve_release_if_full(abs, &S.opts);
	if ((rc = datadir_write_pid(S.lock_fd, abs)) != WALRUS_OK)
		fail_start(ready_fd, rc);
	publish_state("starting");
	if (chdir(abs) != 0)
		wr_log(WR_WARNING, "could not change directory to \"%s\": %m", abs);
	if ((rc = setup_signals()) != WALRUS_OK)
		fail_start(ready_fd, rc);
	test_step("supervisor listen");
	if ((rc = ipc_listen(abs, WR_SOCKET_NAME, &S.listen_fd)) != WALRUS_OK)
		fail_start(ready_fd, rc);
	if ((rc = replication_setup()) != WALRUS_OK)
		fail_start(ready_fd, rc);
	wr_log(WR_LOG, "supervisor starting for \"%s\" (pid %d)", abs, (int)getpid());
	publish_settings();
	/* Readiness is reported after recovery, so that the opener gets
	 * recovery's error itself; others wait on the socket meanwhile. */
	if ((rc = instance_start()) != WALRUS_OK) {
		wr_log(WR_FATAL, "could not start the instance: %s", walrus_errmsg());
		kill_aux_processes();
		report_ready(ready_fd, rc, walrus_errmsg());
		sup_exit(1);
	}
	report_ready(ready_fd, 0, "ok");
	S.ready_fd = -1;
	event_loop();
	sup_exit(S.shutdown_failed ? 1 : 0);
}

int supervisor_launch(const char *abs, const wr_options *opts)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0)
		return wr_error(wr_errno_code(errno), "could not create a pipe: %m");
	pid_t pid = fork();
	if (pid < 0) {
		int err = errno;
		close(p[0]);
		close(p[1]);
		errno = err;
		return wr_error(WALRUS_ELIMIT, "could not fork the supervisor: %m");
	}
	if (pid == 0) {
		/* The intermediate child: a new session, then the supervisor is its
		 * orphan, so the caller never has to reap it and no terminal signal
		 * reaches it. */
		close(p[0]);
		if (setsid() < 0)
			_exit(1);
		pid_t sup = fork();
		if (sup != 0)
			_exit(sup < 0 ? 1 : 0);
		detach_from_caller(p[1]);
		supervisor_main(abs, opts, 3, false);
	}
	close(p[1]);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	char line[1100];
	size_t got = 0;
	for (;;) {
		ssize_t n = read(p[0], line + got, sizeof(line) - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
		/* One line is the whole answer: do not wait for EOF, which a
		 * child holding the pipe by mistake would delay. */
		if (got == sizeof(line) - 1 || memchr(line, '\n', got) != NULL)
			break;
	}
	close(p[0]);
	line[got] = '\0';
	if (got == 0)
		return wr_error(WALRUS_EIO, "the supervisor exited during start-up (see %s/%s)",
		                abs, WR_LOG_FILE);
	char *nl = strchr(line, '\n');
	if (nl)
		*nl = '\0';
	char *msg;
	long code = strtol(line, &msg, 10);
	if (code == 0)
		return WALRUS_OK;
	while (*msg == ' ')
		msg++;
	return wr_error((int)code, "%s", msg);
}
