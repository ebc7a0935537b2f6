/*
 * sync_send.c - the sending side of the sync-request queue, run by every
 * process that writes data files: hands each written fd over to the
 * checkpointer (DESIGN.md rule 4), or fsyncs the file itself when it
 * cannot.  The checkpointer's side is sync.c.
 *
 * Interface: see checkpointer.h ("sync requests").
 *
 * storage calls ckpt_sync_register after the first write through an fd in a
 * cycle (and before closing a written fd).  The request travels over a
 * per-process SOCK_SEQPACKET connection to DIR/walrus-ckpt.sock with the fd
 * attached (SCM_RIGHTS: the checkpointer gets the same open file
 * description, so the errseq_t sample taken when the sender opened the
 * file).  The socket is non-blocking: a full queue makes the sender wake the
 * checkpointer and retry briefly; when that fails the sender fsyncs the
 * file itself.  A request is never dropped.  In the checkpointer itself a
 * request goes straight into its table.
 *
 * Notes:
 * - ckpt_sync_cycle() adds this process's count of fallback fsyncs to the
 *   shared cycle: storage only compares the value for equality, so every
 *   handle of the process hands its fd over (or fsyncs) again after a
 *   fallback.  Without that, writes after the sender's own fsync would be
 *   covered by nobody.  The request carries the shared cycle alone (why the
 *   cycle moves: see sync.c).
 */
#include "checkpointer/sync_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ipc/ipc.h"

#define CKS_BACKOFF_MIN 50   /* us: first sleep of a sender waiting for room */
#define CKS_BACKOFF_MAX 5000 /* us */

/*
 * Senders wake the checkpointer when this many requests wait to be absorbed
 * (PostgreSQL wakes it when its queue is half full).  A connection's queue
 * holds about 278 requests with the default 208 KiB SO_SNDBUF (measured): the
 * bound is the sender's send buffer, not net.unix.max_dgram_qlen, which
 * SOCK_SEQPACKET peers skip.  A full queue wakes it too.
 */
#define CKS_WAKE_BACKLOG 64

/* The sender side of this process. */
static struct {
	char datadir[PATH_MAX]; /* where the socket is; "" until install_hooks */
	int sock;               /* connection to the checkpointer, or -1 */
	pid_t sock_pid;         /* the process that made it (a forked child must not use it) */
	uint64_t fallbacks;     /* fsyncs this process made itself: part of the cycle token */
	bool stalled;           /* the last wait for room timed out: do not wait again */
} snd = {.sock = -1};

static uint64_t cks_shared_cycle(void)
{
	return cks_sh != NULL ? atomic_load(&cks_sh->cycle) : 0;
}

/*
 * The sender's fsync: as the checkpointer's (cks_fsync in sync.c: PANIC on
 * error, never retried), except that the I/O guard's refusal (the instance
 * crashed: no fsync was attempted) is returned to the write, which reports
 * WALRUS_ERESTART like any other I/O of a crashed instance.
 */
static int cks_sender_fsync(wr_relid rel, uint32_t seg, int fd)
{
	char path[PATH_MAX];
	cks_path(rel, seg, path, sizeof(path));
	int rc = fdc_fsync_fd(fd, path);
	if (rc == WALRUS_ERESTART)
		return rc;
	if (rc != WALRUS_OK)
		data_sync_failed("fsync", path, errno);
	return WALRUS_OK;
}

static void cks_disconnect(void)
{
	if (snd.sock >= 0)
		cks_close_socket(snd.sock);
	snd.sock = -1;
}

void ckpt_sync_shutdown(void)
{
	cks_stop_listening();
	cks_disconnect();
}

/* ---------------------------------------------------------------- sending */

/* A connection of this process (a forked child makes its own); false if none can be made. */
static bool cks_connect(void)
{
	pid_t me = getpid();
	if (snd.sock >= 0 && snd.sock_pid == me)
		return true;
	/* Inherited across fork: the parent's connection.  Our copy goes; the parent's stays. */
	cks_disconnect();
	if (snd.datadir[0] == '\0')
		return false;
	int fd;
	if (ipc_connect(snd.datadir, CKPT_SYNC_SOCKET, &fd) != WALRUS_OK) {
		wr_log(WR_DEBUG, "no checkpointer to send sync requests to: %s", walrus_errmsg());
		return false;
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) {
		wr_log(WR_WARNING, "could not make the sync request socket non-blocking: %m");
		cks_close_socket(fd);
		return false;
	}
	snd.sock = fd;
	snd.sock_pid = me;
	return true;
}

/* After a request was sent: count it, and wake the checkpointer (once) if many wait. */
static void cks_sent_request(void)
{
	if (cks_sh == NULL)
		return;
	cks_count(&cks_sh->requests, 1);
	if (cks_backlog() >= CKS_WAKE_BACKLOG && atomic_exchange(&cks_sh->wake_pending, 1) == 0)
		cks_wake();
}

static bool cks_queue_full(int err)
{
	/* ETOOMANYREFS: too many fds in flight for this user; also a matter of waiting. */
	return err == EAGAIN || err == EWOULDBLOCK || err == ETOOMANYREFS || err == ENOBUFS ||
	       err == ENOMEM;
}

/*
 * Sends @m (with @fd unless -1) without blocking.  A full queue: wake the
 * checkpointer and retry for up to CKPT_SYNC_RETRY_US (not again while the
 * checkpointer stays stalled); a lost connection: reconnect once.  False when
 * the request could not be sent: the caller falls back.
 */
static bool cks_send(const cks_msg *m, int fd)
{
	if (!cks_connect())
		return false;
	bool reconnected = false;
	uint64_t deadline = 0;
	uint64_t backoff = CKS_BACKOFF_MIN;
	for (;;) {
		int rc = ipc_send(snd.sock, m, sizeof(*m), fd >= 0 ? &fd : NULL, fd >= 0 ? 1 : 0);
		if (rc == WALRUS_OK) {
			snd.stalled = false;
			return true;
		}
		int err = errno;
		if (cks_queue_full(err)) {
			cks_wake();
			uint64_t now = wr_now_ns();
			if (deadline == 0)
				deadline = now + (uint64_t)CKPT_SYNC_RETRY_US * 1000;
			if (snd.stalled || now >= deadline) {
				snd.stalled = true;
				wr_log(WR_DEBUG, "sync request queue is full: %s", walrus_errmsg());
				return false;
			}
			wr_sleep_us(backoff);
			backoff = WR_MIN(backoff * 2, CKS_BACKOFF_MAX);
			continue;
		}
		/* EPIPE, ECONNRESET, ...: the checkpointer went away; maybe a new one listens. */
		wr_log(WR_DEBUG, "lost the connection to the checkpointer: %s", walrus_errmsg());
		cks_disconnect();
		if (reconnected || !cks_connect())
			return false;
		reconnected = true;
	}
}

/*
 * No checkpointer took the request: the sender makes the write durable itself
 * (PANIC on error, never retried: see cks_fsync in sync.c), and bumps its part of the
 * cycle token so that its later writes are handed over again.
 */
static int cks_fallback(wr_relid rel, uint32_t seg, int fd)
{
	int rc = cks_sender_fsync(rel, seg, fd);
	if (rc != WALRUS_OK)
		return rc;
	snd.fallbacks++;
	if (cks_sh != NULL)
		cks_count(&cks_sh->sender_fsyncs, 1);
	wr_error_clear(); /* the failed send's message is no error of the write */
	return WALRUS_OK;
}

uint64_t ckpt_sync_cycle(void)
{
	return cks_shared_cycle() + snd.fallbacks;
}

int ckpt_sync_register(const smgr_sync_req *req, int fd)
{
	/* The token from ckpt_sync_cycle() minus our part: the shared cycle it saw. */
	uint64_t cycle = req->cycle >= snd.fallbacks ? req->cycle - snd.fallbacks : req->cycle;
	if (cks_is_checkpointer()) {
		int dupfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
		if (dupfd < 0) {
			wr_log(WR_DEBUG, "could not keep an fd for a sync request: %m");
			return cks_fallback(req->rel, req->seg, fd);
		}
		if (cks_sh != NULL)
			cks_count(&cks_sh->requests, 1);
		cks_add(req->rel, req->seg, req->open_seq, cycle, dupfd);
		return WALRUS_OK;
	}
	cks_msg m = {.type = CKS_REGISTER,
	             .rel = req->rel,
	             .seg = req->seg,
	             .seq = req->open_seq,
	             .cycle = cycle};
	if (cks_send(&m, fd)) {
		cks_sent_request();
		return WALRUS_OK;
	}
	return cks_fallback(req->rel, req->seg, fd);
}

void ckpt_sync_forget(wr_relid rel, uint32_t from_seg)
{
	uint64_t now = wr_now_ns();
	if (cks_is_checkpointer()) {
		cks_forget(rel, from_seg, now);
		return;
	}
	cks_msg m = {.type = CKS_FORGET, .rel = rel, .seg = from_seg, .seq = now};
	/* Undelivered is harmless: the checkpointer holds fds, it just fsyncs a removed file. */
	if (!cks_send(&m, -1)) {
		wr_log(WR_DEBUG, "could not forward a forget request for relation %u", rel);
		wr_error_clear();
	}
}

int ckpt_sync_install_hooks(const char *datadir)
{
	if (strcmp(snd.datadir, datadir) != 0)
		cks_disconnect();
	if (!wr_snprintf(snd.datadir, sizeof(snd.datadir), "%s", datadir)) {
		snd.datadir[0] = '\0';
		return wr_error(WALRUS_EINVAL, "data directory path is too long: \"%s\"", datadir);
	}
	smgr_set_sync_hooks(ckpt_sync_register, ckpt_sync_forget, ckpt_sync_cycle);
	return WALRUS_OK;
}
