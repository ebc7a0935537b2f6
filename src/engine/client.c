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
 */
#include "engine/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "buffer/buffer.h"
#include "checkpointer/checkpointer.h"
#include "fdcache/fdcache.h"
#include "kv/kv.h"
#include "storage/storage.h"
#include "wal/wal.h"

static struct {
	bool attached;
	bool poisoned; /* this process PANICked: nothing more until it reopens */
	pid_t owner;   /* the process that attached; a forked child is not it */
	char abs[PATH_MAX];
	int sock;
	int attach_fd;
	int log_fd;
	int slot;
	uint64_t generation;
	pid_t supervisor;
	jmp_buf *jb;
	uint64_t polled_ns; /* when the supervisor's socket was last looked at */
	bool sup_alive;     /* what it said then */
} C = {.sock = -1, .attach_fd = -1, .log_fd = -1, .slot = -1};

#define CLIENT_ATTACH_TIMEOUT_NS (120ULL * 1000000000ULL)
#define CLIENT_POLL_NS           (5ULL * 1000000) /* 5 ms */

/* ---------------------------------------------------------------- guard and PANIC */

static int guard_enter(void)
{
	wr_proc *p = engine_my_proc();
	if (p == NULL)
		return WALRUS_OK;
	atomic_store(&p->in_io, 1);
	uint32_t state = atomic_load(&shm_hdr()->state);
	if (state == SHM_STATE_CRASHED) {
		atomic_store(&p->in_io, 0);
		return wr_error(WALRUS_ERESTART,
		                "the instance crashed and is restarting; close and reopen the "
		                "database");
	}
	return WALRUS_OK;
}

static void guard_exit(void)
{
	wr_proc *p = engine_my_proc();
	if (p != NULL)
		atomic_store(&p->in_io, 0);
}

static void client_panic_handler(void)
{
	shm_header *h = shm_hdr();
	if (h != NULL) {
		atomic_store(&h->panic_pid, (uint32_t)getpid());
		atomic_store(&h->state, SHM_STATE_CRASHED);
		ipc_wake_all(&h->state);
	}
	guard_exit();
	C.poisoned = true;
	if (C.sock >= 0) {
		wr_msg m = {.magic = WR_PROTO_MAGIC,
		            .version = WR_PROTO_VERSION,
		            .type = WR_MSG_PANIC,
		            .pid = (uint32_t)getpid()};
		(void)ipc_send(C.sock, &m, sizeof(m), NULL, 0);
	}
	if (C.jb != NULL) {
		jmp_buf *jb = C.jb;
		C.jb = NULL;
		longjmp(*jb, 1);
	}
	/* Outside a public call there is nowhere to unwind to: wr_panic aborts. */
}

void client_enter(jmp_buf *jb)
{
	C.jb = jb;
}

void client_leave(void)
{
	C.jb = NULL;
}

int client_panicked(void)
{
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
static pid_t self_pid;
static bool self_pid_hooked;

static void self_pid_after_fork(void)
{
	self_pid = getpid();
}

pid_t client_self_pid(void)
{
	if (!self_pid_hooked) {
		self_pid_hooked = pthread_atfork(NULL, NULL, self_pid_after_fork) == 0;
		self_pid = getpid();
		if (!self_pid_hooked)
			return getpid();
	}
	return self_pid;
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
	if (m.type == WR_MSG_ERROR) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		*retry = m.status == WALRUS_ESHUTDOWN;
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
	C.slot = (int)m.slot;
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
	char a[64], b[64];
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
 * (@detach: this open made the attachment, so it undoes it).
 */
static int note_option_differences(const wr_options *mine, bool detach)
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
	if (detach)
		(void)client_detach();
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

static int finish_attach(const char *abs, const wr_options *opts)
{
	int rc = wal_attach(C.slot);
	if (rc == WALRUS_OK)
		rc = buf_attach();
	buf_change_reset(); /* a PANIC may have cut a change short before a reopen */
	if (rc == WALRUS_OK)
		rc = ckpt_attach();
	ckpt_set_alive_check(supervisor_connection_alive);
	if (rc == WALRUS_OK)
		rc = ckpt_sync_attach();
	if (rc == WALRUS_OK)
		rc = ckpt_sync_install_hooks(abs);
	if (rc == WALRUS_OK)
		rc = kv_attach();
	if (rc == WALRUS_OK)
		rc = smgr_init(abs, engine_sh()->opts.data_segment_size);
	if (rc != WALRUS_OK)
		return rc;
	C.attached = true;
	C.poisoned = false;
	C.owner = client_self_pid();
	C.polled_ns = 0; /* look at the new socket at the first call */
	wr_snprintf(C.abs, sizeof(C.abs), "%s", abs);
	engine_my_proc_set(C.slot);
	fdc_set_io_guard(guard_enter, guard_exit);
	wr_set_panic_handler(client_panic_handler);
	wr_log_set_process_name("walrus-backend"); /* log lines only: the process keeps its name */
	open_backend_log(abs, opts->log_min_messages);
	return WALRUS_OK;
}

/*
 * A child forked by an attached process inherits our state but is not
 * attached: drop its copies quietly.  Closing copies of the socket and of
 * the lock file's fd releases nothing: the parent's descriptions stay open.
 */
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
	C.poisoned = false;
}

static void forget_inherited(void)
{
	fdc_reset();
	wal_detach();
	drop_attachment();
}

int client_attach(const char *abs, const wr_options *opts)
{
	if (C.attached && C.owner != client_self_pid())
		forget_inherited();
	if (C.attached) {
		if (strcmp(C.abs, abs) == 0)
			return note_option_differences(opts, false);
		return wr_error(WALRUS_EBUSY,
		                "this process already has \"%s\" open; a process serves one data "
		                "directory",
		                C.abs);
	}
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
	rc = finish_attach(abs, opts);
	if (rc != WALRUS_OK) {
		(void)send_msg(WR_MSG_DETACH);
		shm_detach();
		close_fd(&C.sock);
		close_fd(&C.attach_fd);
		C.attached = false;
		return rc;
	}
	return note_option_differences(opts, true);
}

/* ---------------------------------------------------------------- state */

int client_check(void)
{
	if (!C.attached || C.owner != client_self_pid())
		return wr_error(WALRUS_EINVAL, "the database handle is not open");
	if (C.poisoned)
		return wr_error(WALRUS_ERESTART,
		                "this process hit a PANIC; close and reopen the database");
	uint32_t state = atomic_load(&shm_hdr()->state);
	if (state == SHM_STATE_CRASHED)
		return wr_error(WALRUS_ERESTART,
		                "the instance crashed and restarted from its log (see %s/%s); "
		                "close and reopen the database",
		                C.abs, WR_LOG_FILE);
	if (state == SHM_STATE_SHUTDOWN)
		return wr_error(WALRUS_ESHUTDOWN, "the instance is shutting down");
	/* A dead supervisor leaves no mark in shared memory, only a closed
	 * socket; a poll per call would cost more than a cached read, so the
	 * socket is looked at every CLIENT_POLL_NS at most. */
	uint64_t now = wr_now_ns();
	if (now - C.polled_ns >= CLIENT_POLL_NS) {
		C.sup_alive = supervisor_connection_alive();
		C.polled_ns = now;
	}
	if (!C.sup_alive)
		return wr_error(WALRUS_ERESTART,
		                "the supervisor (pid %d) of \"%s\" has exited; close and reopen "
		                "the database",
		                (int)C.supervisor, C.abs);
	return WALRUS_OK;
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

/* ---------------------------------------------------------------- detach */

int client_detach(void)
{
	if (!C.attached)
		return WALRUS_OK;
	bool healthy = !C.poisoned && engine_running() && supervisor_connection_alive();
	/* Dirty fds are handed to the checkpointer before they close, unless the
	 * instance is gone: then recovery rewrites whatever they held. */
	int leak = healthy ? buf_detach_check() : WALRUS_OK;
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
	return leak != WALRUS_OK ? leak : rc;
}
