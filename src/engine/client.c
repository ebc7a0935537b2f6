/*
 * client.c - the backend side: attaching this process to an instance,
 * noticing that the instance crashed or its supervisor died, the I/O guard,
 * the PANIC boundary of public calls, and detaching.
 *
 * Attaching: connect to DIR/walrus.sock (starting a supervisor when nobody
 * listens), send ATTACH, receive the shared memory fd, map it, then take the
 * attach lock (a read lock on byte 1 of walrus.pid) and check that the
 * supervisor is still there.  That order matters: a supervisor that starts
 * after ours died waits for every attach lock to go before it recovers, so
 * a backend that still maps the dead instance's memory can never write into
 * the files the new instance is recovering.
 *
 * The I/O guard closes the other window, the crash restart of a live
 * supervisor: before any write-class I/O a backend sets its slot's in_io
 * and then checks the instance state; the supervisor sets CRASHED and then
 * waits for every live backend's in_io to clear.  With sequentially
 * consistent operations on both sides, either the backend sees CRASHED
 * and refuses, or the supervisor sees in_io and waits (Dekker's pattern).
 * A shutdown (SHUTDOWN) is refused the same way, after the supervisor let
 * the calls under way finish: a call set its slot's in_call before reading
 * the state (client_call_begin), and the supervisor sets STOPPING, waits
 * for in_call to clear, and only then refuses I/O.  Refusing mid-call
 * would PANIC a backend holding the WAL write lock, and the shutdown
 * checkpoint would wait for it.
 */
#include "engine/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buffer/buffer.h"
#include "checkpointer/checkpointer.h"
#include "fdcache/fdcache.h"
#include "kv/kv.h"
#include "repl/repl.h"
#include "storage/storage.h"
#include "wal/wal.h"

/*
 * The process's attachment, shared by its handles.  Changed only under mu,
 * by opens and closes (and the exit hook); the words the calls of other
 * threads read without it are atomics.
 */
static struct {
	pthread_mutex_t mu;
	bool attached;
	_Atomic bool poisoned;    /* a PANIC in this process: nothing more until it reattaches */
	_Atomic bool stale;       /* being dropped: calls on its handles are refused */
	_Atomic pid_t exiting;    /* this pid's exit() began: no call or open from now on */
	_Atomic uint32_t parking; /* threads whose end is giving their handles' slots back */
	pid_t owner;              /* the process that attached; a forked child is not it */
	char abs[PATH_MAX];
	int sock;
	int attach_fd;
	int log_fd;
	int attach_slot;       /* the slot the supervisor gave at ATTACH, or -1 */
	bool attach_slot_used; /* by a backend now */
	uint64_t generation;
	pid_t supervisor;
	_Atomic uint64_t polled_ns; /* when the supervisor's socket was last looked at */
	_Atomic bool sup_alive;     /* what it said then */
	client_backend *backends;   /* open handles' backends, for the exit hook */
	int nbackends;
} C = {
    .mu = PTHREAD_MUTEX_INITIALIZER, .sock = -1, .attach_fd = -1, .log_fd = -1, .attach_slot = -1};

/* What one handle is to the engine: a backend with its own slot and state. */
struct client_backend {
	pid_t pid; /* the process that opened it: in a forked child, calls are refused */
	int slot;
	wr_proc *proc;       /* its slot in the attachment's mapping (NULL once that is dropped) */
	uint64_t generation; /* of the attachment it was made on */
	uint64_t inc;        /* of its module state: new at every backend_fill */
	_Atomic uintptr_t user; /* the thread inside a call on it, 0 when none */
	_Atomic uintptr_t last; /* the thread of its last call (thread-exit parking) */
	_Atomic bool parked;    /* slot and state given back; its next call takes them again */
	wal_backend *wal;
	buf_backend *buf;
	kv_backend *kv;
	client_backend *next;
};

/* Whether this thread holds C.mu, and whether the fork handler took it. */
static _Thread_local bool mu_held, mu_taken_for_fork;

static void client_lock(void)
{
	(void)pthread_mutex_lock(&C.mu);
	mu_held = true;
}

static void client_unlock(void)
{
	mu_held = false;
	(void)pthread_mutex_unlock(&C.mu);
}

/*
 * fork() while another thread opens or closes a handle: the fork waits, so
 * the child's copy is consistent and its mutex free.  Our own forks (the
 * supervisor's launch) happen under the mutex: then it is already held.
 */
static void client_fork_prepare(void)
{
	mu_taken_for_fork = !mu_held;
	if (mu_taken_for_fork)
		client_lock();
}

static void client_fork_release(void)
{
	if (mu_taken_for_fork)
		client_unlock();
	mu_taken_for_fork = false;
}

static pthread_once_t client_fork_once = PTHREAD_ONCE_INIT;

/* After the fd cache's: prepare handlers run last registered first, and C.mu comes before fdc's
 * lock. */
static void client_fork_hook(void)
{
	if (pthread_atfork(client_fork_prepare, client_fork_release, client_fork_release) != 0)
		wr_log(WR_WARNING, "could not install the fork handlers");
}

pid_t client_self_pid(void);

/* exit() began in this process (a child forked meanwhile is not exiting). */
static bool process_exiting(void)
{
	return atomic_load(&C.exiting) == client_self_pid();
}

/* The calling thread's backend and PANIC boundary. */
static WR_TLS client_backend *cur;
/* The incarnation of cur's state this thread's modules point at: a handle
 * parked and taken again, or a struct freed and allocated anew at the same
 * address, has new state behind the same pointer. */
static WR_TLS uint64_t cur_inc;
static _Atomic uint64_t next_inc = 1;
static _Thread_local jmp_buf *cur_jb;
/* Its address names the thread: distinct for every live thread. */
static _Thread_local char thread_token;

#define CLIENT_ATTACH_TIMEOUT_NS (120ULL * 1000000000ULL)
#define CLIENT_POLL_NS           (5ULL * 1000000) /* 5 ms */
#define CLIENT_DRAIN_NS          (5ULL * 1000000000ULL)

/* ---------------------------------------------------------------- guard and PANIC */

/*
 * in_io counts nested brackets: I/O submitted to io_uring stays in flight
 * across the seam's own calls (a short write finished by pwrite, the
 * flush's own bracket), and an inner exit must not end the outer guard.
 */
static int guard_enter(void)
{
	wr_proc *p = engine_my_proc();
	if (p == NULL)
		return WALRUS_OK;
	atomic_fetch_add(&p->in_io, 1);
	uint32_t state = atomic_load(&shm_hdr()->state);
	if (state == SHM_STATE_CRASHED || state == SHM_STATE_SHUTDOWN) {
		atomic_fetch_sub(&p->in_io, 1);
		/* ERESTART for both: the callers know it as "refused, nothing done". */
		return wr_error(WALRUS_ERESTART, state == SHM_STATE_CRASHED
		                                     ? "the instance crashed and is restarting; "
		                                       "close and reopen the database"
		                                     : "the instance is shutting down");
	}
	return WALRUS_OK;
}

static void guard_exit(void)
{
	wr_proc *p = engine_my_proc();
	if (p != NULL && atomic_fetch_sub(&p->in_io, 1) == 0)
		wr_panic("I/O guard left more often than entered");
}

/* A PANIC unwinds every bracket at once; its I/O can no longer complete. */
static void guard_drop(void)
{
	wr_proc *p = engine_my_proc();
	if (p != NULL)
		atomic_store(&p->in_io, 0);
}

/*
 * A PANIC of this thread's call: unless the instance had crashed already,
 * mark it CRASHED and tell the supervisor.  One that follows a crash (a
 * WAL write or a wait that found the instance gone) is its consequence,
 * not a new failure: the call reports WALRUS_ERESTART like any other call
 * that meets the crash.
 */
static _Thread_local bool panic_after_crash;

static void client_panic_handler(void)
{
	shm_header *h = shm_hdr();
	panic_after_crash = h != NULL && atomic_load(&h->state) == SHM_STATE_CRASHED;
	if (h != NULL && !panic_after_crash) {
		atomic_store(&h->panic_pid, (uint32_t)getpid());
		atomic_store(&h->state, SHM_STATE_CRASHED);
		ipc_wake_all(&h->state);
	}
	guard_drop();
	atomic_store(&C.poisoned, true);
	if (C.sock >= 0 && !panic_after_crash) {
		wr_msg m = {.magic = WR_PROTO_MAGIC,
		            .version = WR_PROTO_VERSION,
		            .type = WR_MSG_PANIC,
		            .pid = (uint32_t)getpid()};
		(void)ipc_send(C.sock, &m, sizeof(m), NULL, 0);
	}
	if (cur_jb != NULL) {
		jmp_buf *jb = cur_jb;
		cur_jb = NULL;
		longjmp(*jb, 1);
	}
	/* Outside a public call there is nowhere to unwind to: wr_panic aborts. */
}

void client_enter(jmp_buf *jb)
{
	cur_jb = jb;
}

void client_leave(void)
{
	cur_jb = NULL;
}

int client_panicked(void)
{
	wr_panic_rearm();
	buf_change_reset(); /* the unwound call may have left a change half made */
	if (panic_after_crash)
		return wr_error(WALRUS_ERESTART,
		                "the instance crashed during this call and is restarting from its "
		                "log (see %s/%s); close and reopen the database",
		                C.abs, WR_LOG_FILE);
	return wr_error(WALRUS_EPANIC,
	                "PANIC: the instance is restarting after an unrecoverable error (see "
	                "%s/%s); close and reopen the database",
	                C.abs, WR_LOG_FILE);
}

/* ---------------------------------------------------------------- attach */

static int send_msg(int type)
{
	wr_msg m = {.magic = WR_PROTO_MAGIC,
	            .version = WR_PROTO_VERSION,
	            .type = (uint32_t)type,
	            .pid = (uint32_t)getpid()};
	return ipc_send(C.sock, &m, sizeof(m), NULL, 0);
}

/*
 * glibc's getpid() is a system call, and every public call checks it (a
 * forked child must not use its parent's attachment): cache it, refreshed
 * in the child by an atfork handler.
 */
static _Thread_local pid_t self_pid; /* 0 until the thread first asks */
static pthread_once_t self_pid_once = PTHREAD_ONCE_INIT;
static _Atomic bool self_pid_hooked;

/* The forking thread is the child's only thread: its copy is the one to refresh. */
static void self_pid_after_fork(void)
{
	self_pid = getpid();
}

static void self_pid_hook(void)
{
	atomic_store(&self_pid_hooked, pthread_atfork(NULL, NULL, self_pid_after_fork) == 0);
}

pid_t client_self_pid(void)
{
	if (WR_LIKELY(self_pid != 0))
		return self_pid;
	(void)pthread_once(&self_pid_once, self_pid_hook);
	pid_t me = getpid();
	if (atomic_load(&self_pid_hooked))
		self_pid = me; /* else every call asks the kernel: still right after a fork */
	return me;
}

static bool supervisor_connection_alive(void)
{
	struct pollfd p = {.fd = C.sock, .events = POLLIN};
	int r;
	do
		r = poll(&p, 1, 0);
	while (r < 0 && errno == EINTR);
	/* The supervisor never speaks first: anything readable is its end. */
	return r == 0;
}

/* The same, looked at every CLIENT_POLL_NS at most: a poll per call costs more than the call. */
static bool supervisor_connection_alive_cached(void)
{
	uint64_t now = wr_now_ns();
	if (now - atomic_load_explicit(&C.polled_ns, memory_order_relaxed) >= CLIENT_POLL_NS) {
		atomic_store(&C.sup_alive, supervisor_connection_alive());
		atomic_store_explicit(&C.polled_ns, now, memory_order_relaxed);
	}
	return atomic_load(&C.sup_alive);
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* One attempt: returns OK, or an error; *retry tells whether another attempt may work. */
static int attach_once(const char *abs, bool *retry)
{
	wr_msg m;
	size_t len;
	int fds[IPC_MAX_FDS], nfds = 0;

	*retry = false;
	int rc = send_msg(WR_MSG_ATTACH);
	if (rc == WALRUS_OK)
		rc = ipc_recv(C.sock, &m, sizeof(m), &len, fds, &nfds);
	if (rc != WALRUS_OK || len == 0) {
		*retry = true; /* the supervisor went away (shutting down): start another */
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		return rc != WALRUS_OK
		           ? rc
		           : wr_error(WALRUS_ESHUTDOWN, "the supervisor closed the connection");
	}
	if (len != sizeof(m) || m.magic != WR_PROTO_MAGIC || m.version != WR_PROTO_VERSION) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		return wr_error(WALRUS_EPROTO, "unexpected answer from the supervisor of \"%s\"",
		                abs);
	}
	if (m.type == WR_MSG_ERROR || m.type == WR_MSG_REFUSED) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		/* An instance ending on its own is replaced by a new one; a stopped one is not. */
		*retry = m.type == WR_MSG_ERROR && m.status == WALRUS_ESHUTDOWN;
		m.text[sizeof(m.text) - 1] = '\0';
		return wr_error(m.status, "%s", m.text);
	}
	if (m.type != WR_MSG_ATTACH_OK || nfds != 1) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		return wr_error(WALRUS_EPROTO, "unexpected answer from the supervisor of \"%s\"",
		                abs);
	}
	rc = shm_attach(fds[0]);
	close(fds[0]);
	if (rc != WALRUS_OK)
		return rc;
	C.attach_slot = (int)m.slot;
	C.generation = m.generation;
	C.supervisor = (pid_t)m.pid;
	rc = datadir_lock_attach(abs, &C.attach_fd);
	if (rc == WALRUS_OK && !supervisor_connection_alive()) {
		*retry = true;
		rc = wr_error(WALRUS_ERESTART, "the supervisor exited while this process attached");
	}
	if (rc == WALRUS_OK && atomic_load(&shm_hdr()->state) != SHM_STATE_RUNNING) {
		*retry = true;
		rc = wr_error(WALRUS_ERESTART, "the instance stopped while this process attached");
	}
	if (rc != WALRUS_OK) {
		shm_detach();
		close_fd(&C.attach_fd);
	}
	return rc;
}

/* Appends "name=asked (the running instance uses value)" for @d when they differ. */
static void note_one_difference(const wr_options *mine, const wr_opt_desc *d, char *msg, size_t len,
                                size_t *used)
{
	char a[WR_OPT_TEXT_MAX], b[WR_OPT_TEXT_MAX];
	if (wr_opts_get(mine, d->name, a, sizeof(a)) != WALRUS_OK ||
	    wr_opts_get(&engine_sh()->opts, d->name, b, sizeof(b)) != WALRUS_OK ||
	    strcmp(a, b) == 0 || *used >= len)
		return;
	int n = snprintf(msg + *used, len - *used, "%s%s=%s (the running instance uses %s)",
	                 *used ? ", " : "", d->name, a, b);
	*used += n > 0 ? (size_t)n : 0;
}

/*
 * Instance options this opener set explicitly that the running instance
 * does not use: a WARNING, whose text stays readable in walrus_errmsg()
 * after the open succeeds; with strict_options=on the open fails with it
 * (the caller undoes the backend, and the attachment if it made it).
 */
static int note_option_differences(const wr_options *mine)
{
	char msg[768];
	size_t n, used = 0;
	const wr_opt_desc *t = wr_opts_table(&n);
	for (size_t i = 0; i < n; i++)
		if (t[i].scope == WR_SCOPE_INSTANCE && wr_opts_is_set(mine, i))
			note_one_difference(mine, &t[i], msg, sizeof(msg), &used);
	if (used == 0) {
		wr_error_clear(); /* a successful open leaves no stale message behind */
		return WALRUS_OK;
	}
	wr_log(WR_WARNING,
	       "instance options not applied: %s; they take effect when the instance starts", msg);
	if (!mine->strict_options)
		return wr_error(WALRUS_OK, "instance options not applied: %s", msg);
	return wr_error(WALRUS_EINVAL,
	                "strict_options=on: instance options differ from the running "
	                "instance's: %s",
	                msg);
}

static void open_backend_log(const char *abs, int level)
{
	char path[PATH_MAX];
	if (!wr_snprintf(path, sizeof(path), "%s/%s", abs, WR_LOG_FILE))
		return;
	C.log_fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
	if (C.log_fd >= 0)
		wr_log_set_file(C.log_fd, level);
}

/*
 * The process-wide part of attaching: modules mapped, hooks installed.  The
 * instance's options rule (its max_open_files bounds every process's fd
 * cache, its log level every line), not the opener's: they may come from
 * walrus.conf or from whoever started the instance.
 */
static int finish_attach(const char *abs)
{
	const wr_options *inst = &engine_sh()->opts;
	int rc = fdc_init(inst->max_open_files);
	if (rc == WALRUS_OK)
		rc = wal_attach(-1);
	if (rc == WALRUS_OK)
		rc = buf_attach();
	buf_change_reset(); /* a PANIC may have cut a change short before a reopen */
	if (rc == WALRUS_OK)
		rc = ckpt_attach();
	ckpt_set_alive_check(supervisor_connection_alive_cached);
	wal_set_alive_check(supervisor_connection_alive_cached);
	if (rc == WALRUS_OK)
		rc = ckpt_sync_attach();
	if (rc == WALRUS_OK)
		rc = ckpt_sync_install_hooks(abs);
	if (rc == WALRUS_OK)
		rc = kv_attach();
	if (rc == WALRUS_OK)
		rc = repl_attach(); /* its flushes wake the WAL senders */
	if (rc == WALRUS_OK)
		rc = smgr_init(abs, inst->data_segment_size);
	if (rc != WALRUS_OK)
		return rc;
	C.attached = true;
	atomic_store(&C.poisoned, false);
	atomic_store(&C.stale, false);
	C.owner = client_self_pid();
	atomic_store(&C.polled_ns, 0); /* look at the new socket at the first call */
	atomic_store(&C.sup_alive, true);
	C.attach_slot_used = false;
	wr_snprintf(C.abs, sizeof(C.abs), "%s", abs);
	fdc_set_io_guard(guard_enter, guard_exit);
	wr_set_panic_handler(client_panic_handler);
	wr_log_set_process_name("walrus-backend"); /* log lines only: the process keeps its name */
	open_backend_log(abs, inst->log_min_messages);
	return WALRUS_OK;
}

/* The process-local half of detaching: hooks, mapping, fds, state. */
static void drop_attachment(void)
{
	ckpt_sync_shutdown(); /* our connection to the checkpointer */
	fdc_set_io_guard(NULL, NULL);
	wr_set_panic_handler(NULL);
	engine_my_proc_set(-1);
	shm_detach();
	close_fd(&C.sock);
	close_fd(&C.attach_fd);
	if (C.log_fd >= 0) {
		wr_log_set_file(-1, WR_PANIC);
		close_fd(&C.log_fd);
	}
	C.attached = false;
	C.attach_slot = -1;
	C.attach_slot_used = false;
	atomic_store(&C.poisoned, false);
}

/* ---------------------------------------------------------------- backends */

static bool instance_usable(void)
{
	return !atomic_load(&C.poisoned) && !atomic_load(&C.stale) && engine_running() &&
	       supervisor_connection_alive_cached();
}

/*
 * A slot of the process table for a new backend: the one the supervisor
 * gave the process at ATTACH while no backend holds it, else a free one
 * taken by compare-and-swap (the supervisor takes free slots the same way).
 * Slots other than the ATTACH slot are given back by their backend; the
 * supervisor frees the ATTACH slot when the process detaches.
 */
static int claim_slot(void)
{
	if (!C.attach_slot_used && C.attach_slot >= 0) {
		C.attach_slot_used = true;
		return C.attach_slot;
	}
	engine_shared *e = engine_sh();
	wr_proc *procs = engine_procs();
	uint32_t me = (uint32_t)client_self_pid();
	for (uint32_t i = WR_AUX_NKINDS; i < e->nprocs; i++) {
		uint32_t zero = 0;
		if (atomic_load_explicit(&procs[i].pid, memory_order_relaxed) != 0 ||
		    !atomic_compare_exchange_strong(&procs[i].pid, &zero, me))
			continue;
		atomic_store(&procs[i].in_io, 0);
		atomic_store(&procs[i].in_call, 0);
		procs[i].kind = WR_PROC_BACKEND;
		atomic_fetch_add(&e->attaches, 1);
		return (int)i;
	}
	return wr_error(WALRUS_ELIMIT,
	                "too many backends attached (max_connections=%lld): every handle of "
	                "every process is one",
	                (long long)e->opts.max_connections);
}

static void release_slot(int slot)
{
	if (slot == C.attach_slot) {
		C.attach_slot_used = false;
		return;
	}
	wr_proc *p = &engine_procs()[slot];
	p->kind = WR_PROC_FREE;
	atomic_store(&p->in_io, 0);
	atomic_store(&p->pid, 0);
}

/*
 * Gives back a backend's pins, slot and state; the struct stays.  @healthy:
 * its pins and slot are in live shared memory.
 */
static int backend_strip(client_backend *b, bool healthy)
{
	int rc = WALRUS_OK;
	if (cur == b)
		client_backend_use(NULL);
	if (b->buf != NULL && healthy) {
		rc = buf_backend_close(b->buf);
		release_slot(b->slot);
	} else {
		buf_backend_forget(b->buf);
	}
	b->buf = NULL;
	b->proc = NULL;
	b->slot = -1;
	wal_backend_free(b->wal);
	b->wal = NULL;
	kv_backend_free(b->kv);
	b->kv = NULL;
	return rc;
}

/* backend_strip, and off the list (a handle may still point at the struct). */
static int backend_release(client_backend *b, bool healthy)
{
	int rc = backend_strip(b, healthy);
	for (client_backend **p = &C.backends; *p != NULL; p = &(*p)->next) {
		if (*p == b) {
			*p = b->next;
			C.nbackends--;
			break;
		}
	}
	return rc;
}

static int backend_free(client_backend *b, bool healthy)
{
	int rc = backend_release(b, healthy);
	free(b);
	return rc;
}

/* A slot and fresh module state for @b, on the current attachment. */
static int backend_fill(client_backend *b)
{
	int rc = claim_slot();
	if (rc < 0)
		return rc;
	b->slot = rc;
	b->proc = &engine_procs()[rc];
	b->generation = C.generation;
	b->inc = atomic_fetch_add(&next_inc, 1);
	b->wal = wal_backend_new(b->slot);
	b->buf = buf_backend_new();
	b->kv = kv_backend_new();
	if (b->wal == NULL || b->buf == NULL || b->kv == NULL) {
		rc = b->wal == NULL ? wr_error(WALRUS_ENOMEM, "out of memory for a backend") : -1;
		rc = walrus_errmsg()[0] != '\0' && rc == -1 ? WALRUS_ENOMEM : rc;
		(void)backend_strip(b, true);
		return rc;
	}
	return WALRUS_OK;
}

static void park_arm(void);

static int backend_new(client_backend **out)
{
	client_backend *b = calloc(1, sizeof(*b));
	if (b == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory for a backend");
	b->slot = -1;
	b->pid = client_self_pid();
	int rc = backend_fill(b);
	if (rc != WALRUS_OK) {
		free(b);
		return rc;
	}
	atomic_store(&b->last, (uintptr_t)&thread_token);
	park_arm();
	b->next = C.backends;
	C.backends = b;
	C.nbackends++;
	*out = b;
	return WALRUS_OK;
}

void client_backend_use(client_backend *b)
{
	cur = b;
	cur_inc = b ? b->inc : 0;
	wal_backend_set(b ? b->wal : NULL);
	buf_backend_set(b ? b->buf : NULL);
	kv_backend_set(b ? b->kv : NULL);
	engine_my_proc_set(b ? b->slot : -1);
}

/* ---------------------------------------------------------------- attach and detach */

/*
 * Detaches the process (its last backend is gone).  On a live instance,
 * dirty fds are handed to the checkpointer before they close and the
 * supervisor is told; on a dead one, recovery rewrites whatever they held.
 * Snapshots of handles left open at exit() are released here, not by the
 * supervisor: it takes no lock a backend may hold (engine.h).
 */
static int detach_process(void)
{
	if (!C.attached)
		return WALRUS_OK;
	bool healthy =
	    !atomic_load(&C.poisoned) && engine_running() && supervisor_connection_alive();
	if (healthy)
		kv_snap_release_pid((uint32_t)client_self_pid());
	wal_detach();
	if (healthy) {
		smgr_shutdown();
		fdc_close_all();
	} else {
		fdc_reset(); /* smgr's cache is dropped by the next smgr_init */
	}
	int rc = WALRUS_OK;
	if (supervisor_connection_alive())
		rc = send_msg(WR_MSG_DETACH);
	drop_attachment();
	return rc;
}

/*
 * A child forked by an attached process inherits our state but is not
 * attached: drop its copies quietly.  Closing copies of the socket and of
 * the lock file's fd releases nothing: the parent's descriptions stay open.
 * The handles it inherited stay the parent's: their calls are refused.
 */
static void forget_inherited(void)
{
	/* The structs stay: the inherited handles point at them (walrus_close frees them). */
	C.backends = NULL;
	C.nbackends = 0;
	client_backend_use(NULL);
	fdc_reset();
	wal_detach();
	drop_attachment();
}

/*
 * After C.stale or C.exiting was set: waits until each handle has been seen
 * with no call inside, once.  A call that enters after that sees the flag
 * and is refused (it sets its user word, then reads the flag), so a handle
 * seen idle stays safe; waiting for all of them idle at the same instant
 * could last for ever beside threads that retry refused calls in a loop.
 * False at @deadline.
 */
static bool calls_drained(uint64_t deadline)
{
	for (client_backend *b = C.backends; b != NULL; b = b->next)
		while (atomic_load(&b->user) != 0) {
			if (wr_now_ns() > deadline)
				return false;
			wr_sleep_us(100);
		}
	return true;
}

/*
 * The instance under this process's attachment crashed, or its supervisor
 * died, while other handles are still open.  A new open must not join the
 * dead attachment: mark it stale (calls on its handles are refused from now
 * on), wait for the calls already inside to leave, and drop it; the old
 * handles keep their memory and report WALRUS_ERESTART until closed.
 * Dekker again: a call sets its handle's user word and then reads stale;
 * we set stale and then read the user words.
 */
static int drop_dead_attachment(void)
{
	atomic_store(&C.stale, true);
	if (!calls_drained(wr_now_ns() + CLIENT_DRAIN_NS))
		return wr_error(WALRUS_ERESTART,
		                "the instance restarted and calls on this process's old "
		                "handles are still running; close them and open again");
	for (client_backend *b = C.backends; b != NULL; b = b->next) {
		buf_backend_forget(b->buf); /* its pins were in the dead memory */
		b->buf = NULL;
		b->slot = -1;
		b->proc = NULL;
	}
	fdc_reset();
	wal_detach();
	drop_attachment();
	return WALRUS_OK;
}

static int attach_process(const char *abs, const wr_options *opts)
{
	/* From here a PANIC unwinds to walrus_open's boundary, never aborts. */
	wr_set_panic_handler(client_panic_handler);
	int rc = fdc_init(opts->max_open_files);
	if (rc != WALRUS_OK)
		return rc;
	uint64_t deadline = wr_now_ns() + CLIENT_ATTACH_TIMEOUT_NS;
	for (;;) {
		bool retry = false;
		rc = ipc_connect(abs, WR_SOCKET_NAME, &C.sock);
		if (rc == WALRUS_ENOENT) {
			rc = supervisor_launch(abs, opts);
			retry = rc == WALRUS_OK || rc == WALRUS_EBUSY;
			if (rc == WALRUS_OK)
				continue;
		} else if (rc == WALRUS_OK) {
			rc = attach_once(abs, &retry);
			if (rc == WALRUS_OK)
				break;
			close_fd(&C.sock);
		}
		if (!retry || wr_now_ns() > deadline)
			return rc;
		wr_sleep_us(20000);
	}
	rc = finish_attach(abs);
	if (rc != WALRUS_OK) {
		(void)send_msg(WR_MSG_DETACH);
		shm_detach();
		close_fd(&C.sock);
		close_fd(&C.attach_fd);
		C.attached = false;
		return rc;
	}
	return WALRUS_OK;
}

static void exit_hook(void);
static pthread_once_t exit_hook_once = PTHREAD_ONCE_INIT;

static void install_exit_hook(void)
{
	if (atexit(exit_hook) != 0)
		wr_log(WR_WARNING, "could not install the exit hook: a process that exits "
		                   "without closing its handles will restart the instance");
}

static int client_open_locked(const char *abs, const wr_options *opts, client_backend **out)
{
	if (C.attached && C.owner != client_self_pid())
		forget_inherited();
	if (process_exiting())
		return wr_error(WALRUS_ESHUTDOWN, "the process is exiting (exit() was called): no "
		                                  "new opens");
	if (C.attached && strcmp(C.abs, abs) != 0)
		return wr_error(WALRUS_EBUSY,
		                "this process already has \"%s\" open; a process serves one data "
		                "directory",
		                C.abs);
	if (C.attached && !instance_usable()) {
		int rc = drop_dead_attachment();
		if (rc != WALRUS_OK)
			return rc;
	}
	bool attached_here = false;
	if (!C.attached) {
		int rc = attach_process(abs, opts);
		if (rc != WALRUS_OK)
			return rc;
		attached_here = true;
		(void)pthread_once(&exit_hook_once, install_exit_hook);
		(void)pthread_once(&client_fork_once, client_fork_hook);
	}
	int rc = backend_new(out);
	if (rc == WALRUS_OK) {
		rc = note_option_differences(opts);
		if (rc != WALRUS_OK) {
			(void)backend_free(*out, true);
			*out = NULL;
		}
	}
	if (rc != WALRUS_OK && attached_here && C.nbackends == 0)
		(void)detach_process();
	return rc;
}

int client_open(const char *abs, const wr_options *opts, client_backend **out)
{
	*out = NULL;
	/* The thread's last backend may have been closed by another thread since. */
	client_backend_use(NULL);
	client_lock();
	int rc = client_open_locked(abs, opts, out);
	if (rc == WALRUS_OK) /* under the mutex: an exit in another thread may strip it next */
		client_backend_use(*out);
	client_unlock();
	return rc;
}

/* Whether @b still belongs to this process's current attachment. */
static bool backend_current(const client_backend *b)
{
	return C.attached && C.owner == client_self_pid() && b->buf != NULL &&
	       b->generation == C.generation;
}

bool client_backend_inherited(const client_backend *b)
{
	return b->pid != client_self_pid();
}

int client_close(client_backend *b)
{
	client_backend_use(NULL); /* see client_open */
	client_lock();
	int rc = WALRUS_OK;
	if (client_backend_inherited(b)) {
		/* Inherited through fork(): the parent's backend; only our copy goes. */
		for (client_backend **p = &C.backends; *p != NULL; p = &(*p)->next) {
			if (*p == b) {
				*p = b->next;
				C.nbackends--;
				break;
			}
		}
		free(b);
		client_unlock();
		return WALRUS_OK;
	}
	bool live = backend_current(b);
	rc = backend_free(b, live && instance_usable());
	if (C.nbackends == 0 && C.attached) {
		int drc = detach_process();
		rc = rc != WALRUS_OK ? rc : drc;
	}
	client_unlock();
	return rc;
}

static int instance_check(void);

/* The shared-memory mark of a call, which a fast shutdown waits on. */
static void call_mark(const client_backend *b, uint32_t v)
{
	if (b->proc != NULL)
		atomic_store(&b->proc->in_call, v);
}

/* ---------------------------------------------------------------- parking */

/*
 * A thread that ends without closing its handles would hold their slots
 * until the process exits: enough such threads and every open fails with
 * ELIMIT.  When a thread ends, the handles whose last call was its own
 * give back their slot and state ("parked"); the handle stays valid, and
 * its next call, from any thread, takes a slot again.  Nothing a handle
 * holds between calls lives in its slot (pins, locks and WAL insertion
 * end with each call; an iterator walks a private copy).
 */
static pthread_key_t park_key;
static _Atomic bool park_key_made;
static pthread_once_t park_once = PTHREAD_ONCE_INIT;
static _Thread_local bool park_armed;

static void park_thread_exit(void *token);

static void park_key_create(void)
{
	atomic_store(&park_key_made, pthread_key_create(&park_key, park_thread_exit) == 0);
}

/* The calling thread will park its handles when it ends. */
static void park_arm(void)
{
	if (WR_LIKELY(park_armed))
		return;
	(void)pthread_once(&park_once, park_key_create);
	park_armed =
	    atomic_load(&park_key_made) && pthread_setspecific(park_key, &thread_token) == 0;
}

/* Under C.mu, with @b claimed by this thread: gives its slot back. */
static void park_one(client_backend *b)
{
	if (!backend_current(b) || !instance_usable())
		return; /* a dead attachment's handle keeps reporting that */
	(void)backend_strip(b, true);
	atomic_store(&b->parked, true);
}

static void park_all(uintptr_t me)
{
	for (client_backend *b = C.backends; b != NULL; b = b->next) {
		uintptr_t none = 0;
		if (atomic_load(&b->last) != me || atomic_load(&b->parked) ||
		    !atomic_compare_exchange_strong(&b->user, &none, me))
			continue;
		park_one(b);
		atomic_store(&b->user, 0);
	}
}

/*
 * Run by the C library as the thread ends, outside any public call: a PANIC
 * while giving slots back (releasing pins may meet a crashed instance) has
 * a boundary here, as in the exit hook, so that it ends the parking (the
 * instance restarts) instead of aborting the application.
 */
static void park_thread_exit(void *token)
{
	client_backend_use(NULL);
	client_lock();
	if (C.attached && C.owner == client_self_pid() && !process_exiting()) {
		atomic_fetch_add(&C.parking, 1);
		jmp_buf jb;
		if (setjmp(jb) == 0) {
			client_enter(&jb);
			park_all((uintptr_t)token);
		} else {
			wr_panic_rearm();
		}
		client_leave();
		atomic_fetch_sub(&C.parking, 1);
	}
	client_unlock();
}

/*
 * A thread that made the last call on a handle has ended, as far as its
 * joiner knows (a language runtime may say so before the C library's
 * thread-exit destructors ran), and its parking holds the handle for a
 * moment: the next call waits for that instead of failing with EMISUSE.
 */
static bool wait_parking(client_backend *b, uintptr_t holder)
{
	/* The parking count is read before the user word: a parking that let
	 * the handle go between the two reads is seen as let go. */
	for (;;) {
		uint32_t parking = atomic_load(&C.parking);
		if (atomic_load(&b->user) != holder)
			return true; /* let go meanwhile: try again */
		if (parking == 0)
			return false; /* a thread inside a call: misuse */
		sched_yield();        /* a parking ends: it waits for nothing this caller holds */
	}
}
/*
 * A parked handle's next call: a slot again, on the attachment it was made
 * on.  Not with its user word held: a holder of C.mu may be waiting for
 * calls to leave (exit, a dead attachment's drop).
 */
static int unpark(client_backend *b)
{
	client_lock();
	int rc = WALRUS_OK;
	if (process_exiting())
		rc = wr_error(WALRUS_ESHUTDOWN, "the process is exiting: no new calls");
	else if (atomic_load(&b->parked)) {
		if (!C.attached || C.owner != client_self_pid() || b->generation != C.generation ||
		    atomic_load(&C.stale))
			rc = wr_error(WALRUS_ERESTART,
			              "the instance restarted since this handle was "
			              "opened; close and reopen the database");
		else if ((rc = backend_fill(b)) == WALRUS_OK)
			atomic_store(&b->parked, false);
	}
	client_unlock();
	return rc;
}

/* ---------------------------------------------------------------- calls */

int client_call_begin(client_backend *b)
{
	if (client_backend_inherited(b))
		return wr_error(WALRUS_EMISUSE,
		                "this handle belongs to process %d; a child created by fork() must "
		                "open its own",
		                (int)b->pid);
	uintptr_t none = 0, me = (uintptr_t)&thread_token;
	while (!atomic_compare_exchange_strong(&b->user, &none, me) && none != me &&
	       wait_parking(b, none))
		none = 0;
	if (none != 0)
		return wr_error(WALRUS_EMISUSE,
		                none == me ? "this handle is already inside a call of this thread"
		                           : "this handle is in use by another thread: a handle "
		                             "serves one thread at a time");
	/* Dekker with exit_hook: it sets exiting, then reads the user words. */
	if (process_exiting()) {
		atomic_store(&b->user, 0);
		return wr_error(WALRUS_ESHUTDOWN, "the process is exiting (exit() was called): "
		                                  "no new calls");
	}
	if (WR_UNLIKELY(atomic_load(&b->parked))) {
		atomic_store(&b->user, 0);
		int rc = unpark(b);
		if (rc != WALRUS_OK)
			return rc;
		return client_call_begin(b);
	}
	if (atomic_load_explicit(&b->last, memory_order_relaxed) != me) {
		atomic_store(&b->last, me);
		park_arm();
	}
	/* Ours (pid checked) and made on the current attachment: the process is attached. */
	if (atomic_load(&C.stale) || b->buf == NULL || b->generation != C.generation) {
		atomic_store(&b->user, 0);
		return wr_error(WALRUS_ERESTART,
		                "the instance restarted since this handle was opened; close and "
		                "reopen the database");
	}
	if (cur != b || cur_inc != b->inc)
		client_backend_use(b);
	call_mark(b, 1); /* before the state is read: see the I/O guard */
	int rc = instance_check();
	if (rc != WALRUS_OK) {
		call_mark(b, 0);
		atomic_store(&b->user, 0);
	}
	return rc;
}

void client_call_end(client_backend *b)
{
	call_mark(b, 0);
	atomic_store(&b->user, 0);
}

/* ---------------------------------------------------------------- state */

static const char *const stop_modes[] = {"", "smart", "fast", "immediate"};

/* ESHUTDOWN naming the stop asked for (walrus_stop, a signal); OK when none explains @state. */
static int stop_error(uint32_t state)
{
	uint32_t mode = atomic_load(&engine_sh()->stop_mode);
	if (mode == 0 || mode >= WR_ARRAY_LEN(stop_modes))
		return WALRUS_OK;
	if (state == SHM_STATE_CRASHED && mode == WALRUS_STOP_IMMEDIATE)
		return wr_error(
		    WALRUS_ESHUTDOWN,
		    "the instance of \"%s\" was stopped (immediate shutdown); close the "
		    "database (the next open recovers from the WAL)",
		    C.abs);
	if (state == SHM_STATE_STOPPING || state == SHM_STATE_SHUTDOWN)
		return wr_error(WALRUS_ESHUTDOWN,
		                "the instance of \"%s\" is being stopped (%s shutdown); close the "
		                "database",
		                C.abs, stop_modes[mode]);
	return WALRUS_OK; /* a crash while a smart stop waits: a crash like any other */
}

/* The attached instance is usable: not crashed, not stopping, its supervisor alive. */
static int instance_check(void)
{
	if (atomic_load(&C.poisoned))
		return wr_error(WALRUS_ERESTART,
		                "this process hit a PANIC; close and reopen the database");
	uint32_t state = atomic_load(&shm_hdr()->state);
	int rc = state == SHM_STATE_RUNNING ? WALRUS_OK : stop_error(state);
	if (rc != WALRUS_OK)
		return rc;
	if (state == SHM_STATE_CRASHED)
		return wr_error(WALRUS_ERESTART,
		                "the instance crashed and restarted from its log (see %s/%s); "
		                "close and reopen the database",
		                C.abs, WR_LOG_FILE);
	if (state == SHM_STATE_SHUTDOWN || state == SHM_STATE_STOPPING)
		return wr_error(WALRUS_ESHUTDOWN, "the instance is shutting down");
	if (!supervisor_connection_alive_cached())
		return wr_error(WALRUS_ERESTART,
		                "the supervisor (pid %d) of \"%s\" has exited; close and reopen "
		                "the database",
		                (int)C.supervisor, C.abs);
	return WALRUS_OK;
}

int client_check(void)
{
	if (!C.attached || C.owner != client_self_pid())
		return wr_error(WALRUS_EINVAL, "the database handle is not open");
	return instance_check();
}

bool client_attached(const char *abs)
{
	return C.attached && (abs == NULL || strcmp(abs, C.abs) == 0);
}

pid_t client_supervisor_pid(void)
{
	return C.supervisor;
}

uint64_t client_generation(void)
{
	return C.generation;
}

void *client_scratch(void)
{
	return C.attached ? shm_lookup("scratch", NULL) : NULL;
}

/* ---------------------------------------------------------------- exit */

/*
 * exit() with handles open: detach them, so that a normal exit is not taken
 * for a crash.  From the moment exit begins, every new call and open of any
 * thread is refused (ESHUTDOWN), for good: the mapping is about to go.
 * Calls already inside are given a moment to leave; if one stays, the
 * process is treated as dying abnormally, as PostgreSQL treats a backend
 * that dies in a critical section: the instance restarts.
 */
static void exit_detach(void)
{
	if (!C.attached || C.owner != client_self_pid())
		return;
	if (!calls_drained(wr_now_ns() + CLIENT_DRAIN_NS)) {
		wr_log(WR_LOG, "process exits with a call still running on one of its handles");
		return;
	}
	bool healthy = instance_usable();
	while (C.backends != NULL) /* the handles keep their structs: walrus_close may follow */
		(void)backend_release(C.backends, healthy);
	(void)detach_process();
}

/*
 * A PANIC boundary of its own, as every public call has: releasing pins and
 * closing written fds may PANIC, and inside the application's exit that
 * must end the detach (the instance restarts), never abort the process.
 */
static void exit_hook(void)
{
	client_backend_use(NULL); /* see client_open */
	atomic_store(&C.exiting, client_self_pid());
	/* Another thread may be inside an open, which holds the mutex while it
	 * talks to the supervisor: wait for it a moment, not forever. */
	struct timespec until;
	uint64_t ns;
	if (clock_gettime(CLOCK_REALTIME, &until) != 0)
		return;
	ns = (uint64_t)until.tv_nsec + CLIENT_DRAIN_NS;
	until.tv_sec += (time_t)(ns / 1000000000ULL);
	until.tv_nsec = (long)(ns % 1000000000ULL);
	if (pthread_mutex_timedlock(&C.mu, &until) != 0) {
		wr_log(WR_LOG, "process exits while another thread opens a database: not detached");
		return;
	}
	mu_held = true;
	jmp_buf jb;
	if (setjmp(jb) == 0) {
		client_enter(&jb);
		exit_detach();
	} else {
		wr_panic_rearm();
	}
	client_leave();
	client_unlock();
}
