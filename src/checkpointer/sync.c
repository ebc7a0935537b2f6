/*
 * sync.c - the sync-request queue: data file fds passed to the checkpointer,
 * which alone fsyncs them (DESIGN.md rules 4 and 5).
 *
 * Interface: see checkpointer.h ("sync requests").
 *
 * Sender side.  storage calls ckpt_sync_register after the first write
 * through an fd in a cycle (and before closing a written fd).  The request
 * travels over a per-process SOCK_SEQPACKET connection to
 * DIR/walrus-ckpt.sock with the fd attached (SCM_RIGHTS: the checkpointer
 * gets the same open file description, so the errseq_t sample taken when the
 * sender opened the file).  The socket is non-blocking: a full queue makes
 * the sender wake the checkpointer and retry briefly; when that fails the
 * sender fsyncs the file itself.  A request is never dropped.
 *
 * Checkpointer side.  Requests are absorbed into a table keyed by (rel, seg)
 * that keeps, per file, the fd opened first (the smallest open_seq), whose
 * fsync sees the write-back errors of every write made after it was opened,
 * through any fd of any process.
 *
 * Notes:
 * - Why a sync phase first advances the cycle and only then absorbs: a
 *   write reported done before the sync phase started has its request in the
 *   queue already (the hook runs before the write returns), so the absorb
 *   finds it; a write whose sender read the old cycle but sent after the
 *   absorb happened after the sync phase started and belongs to the next
 *   checkpoint, whose table the request joins.  A sender that read the new
 *   cycle hands its fd over again, so an entry whose latest request carries
 *   the new cycle must stay open: nobody else will send for those writes.
 * - An early sync (fd budget) advances the cycle for the same reason: after
 *   an entry is fsynced and closed, a process that already sent in this
 *   cycle would otherwise not send again for its next write.
 * - ckpt_sync_cycle() adds this process's count of fallback fsyncs to the
 *   shared cycle: storage only compares the value for equality, so every
 *   handle of the process hands its fd over (or fsyncs) again after a
 *   fallback.  Without that, writes after the sender's own fsync would be
 *   covered by nobody.  The request carries the shared cycle alone.
 * - FORGET carries the time it was sent (the clock of open_seq) and drops
 *   only fds opened before it: a FORGET for a removed file absorbed after the
 *   request of a file created again under the same name must not drop it.
 * - Table: a dense array of entries (insertion order) and an open-addressing
 *   index into it.  Removing an entry marks it dead (fd -1); the array is
 *   compacted when it fills up, never during a sync phase, which walks
 *   positions while absorbing in between.
 */
#include "checkpointer/checkpointer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ipc/ipc.h"

#define CKS_REGION        "ckptsync"
#define CKS_BACKOFF_MIN   50   /* us: first sleep of a sender waiting for room */
#define CKS_BACKOFF_MAX   5000 /* us */
#define CKS_INDEX_EMPTY   (-1)
#define CKS_INITIAL_SLOTS 64
/*
 * Senders wake the checkpointer when this many requests wait to be absorbed
 * (PostgreSQL wakes it when its queue is half full).  A connection's queue
 * holds about 278 requests with the default 208 KiB SO_SNDBUF (measured): the
 * bound is the sender's send buffer, not net.unix.max_dgram_qlen, which
 * SOCK_SEQPACKET peers skip.  A full queue wakes it too.
 */
#define CKS_WAKE_BACKLOG 64

/* ---------------------------------------------------------------- shared state */

typedef struct cks_shared {
	_Atomic uint64_t cycle;
	_Atomic uint64_t latch_off;    /* the checkpointer's latch; 0 = this region's latch */
	_Atomic uint32_t latch;        /* the default latch */
	_Atomic uint32_t wake_pending; /* a sender woke the checkpointer since the last absorb */
	_Atomic uint64_t requests;
	_Atomic uint64_t absorbed;
	_Atomic uint64_t sender_fsyncs;
	_Atomic uint64_t early_syncs;
	_Atomic uint64_t forgets;
	_Atomic uint64_t files_synced;
} cks_shared;

static cks_shared *cks_sh;

/* ---------------------------------------------------------------- messages */

enum { CKS_REGISTER = 1, CKS_FORGET = 2 };

typedef struct cks_msg {
	uint32_t type;
	uint32_t rel;
	uint32_t seg; /* REGISTER: the segment; FORGET: the first segment to drop */
	uint32_t pad;
	uint64_t seq;   /* REGISTER: open_seq of the fd; FORGET: when it was sent */
	uint64_t cycle; /* REGISTER: the shared cycle the sender saw */
} cks_msg;

/* ---------------------------------------------------------------- private state */

/* The sender side of this process. */
static struct {
	char datadir[PATH_MAX]; /* where the socket is; "" until install_hooks */
	int sock;               /* connection to the checkpointer, or -1 */
	pid_t sock_pid;         /* the process that made it (a forked child must not use it) */
	uint64_t fallbacks;     /* fsyncs this process made itself: part of the cycle token */
	bool stalled;           /* the last wait for room timed out: do not wait again */
} snd = {.sock = -1};

typedef struct cks_entry {
	wr_relid rel;
	uint32_t seg;
	int fd; /* -1: dead */
	uint64_t open_seq;
	uint64_t cycle; /* highest cycle of a request for this file */
	uint64_t order; /* when it was added: early syncs take the oldest */
	dev_t dev;
	ino_t ino;
} cks_entry;

/* The checkpointer side of this process. */
static struct {
	pid_t pid; /* the checkpointer's pid, 0 when not listening */
	int lfd;
	char sockpath[PATH_MAX];
	int *conns;
	int nconns, capconns;
	int accepted;
	cks_entry *tab; /* dense, in insertion order, with dead entries */
	size_t ntab, captab, nlive;
	int32_t *idx; /* open addressing: positions in tab, CKS_INDEX_EMPTY */
	size_t capidx;
	uint64_t next_order;
	int budget;
	bool syncing; /* in ckpt_sync_all: positions must not move */
	ckpt_sync_observer_fn observer;
} ck = {.lfd = -1};

/* ---------------------------------------------------------------- shared memory */

size_t ckpt_sync_shmem_size(void)
{
	return sizeof(cks_shared);
}

int ckpt_sync_shmem_init(void)
{
	cks_shared *sh = shm_alloc(CKS_REGION, sizeof(cks_shared));
	if (sh == NULL)
		return wr_error(WALRUS_EINTERNAL, "no room in shared memory for region \"%s\"",
		                CKS_REGION);
	/* shm_alloc zeroes the region: cycle 0, default latch, no counts. */
	cks_sh = sh;
	return WALRUS_OK;
}

int ckpt_sync_attach(void)
{
	size_t size;
	cks_shared *sh = shm_lookup(CKS_REGION, &size);
	if (sh == NULL || size < sizeof(cks_shared))
		return wr_error(WALRUS_EINTERNAL, "shared memory has no \"%s\" region", CKS_REGION);
	cks_sh = sh;
	return WALRUS_OK;
}

static void cks_count(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static uint64_t cks_shared_cycle(void)
{
	return cks_sh != NULL ? atomic_load(&cks_sh->cycle) : 0;
}

static uint64_t cks_advance_cycle(void)
{
	return cks_sh != NULL ? atomic_fetch_add(&cks_sh->cycle, 1) + 1 : 0;
}

void ckpt_sync_set_latch(_Atomic uint32_t *latch)
{
	if (cks_sh != NULL)
		atomic_store(&cks_sh->latch_off, latch != NULL ? shm_off((const void *)latch) : 0);
}

_Atomic uint32_t *ckpt_sync_latch(void)
{
	if (cks_sh == NULL)
		return NULL;
	uint64_t off = atomic_load(&cks_sh->latch_off);
	return off != 0 ? (_Atomic uint32_t *)shm_ptr(off) : &cks_sh->latch;
}

/* Wakes the checkpointer's latch. */
static void cks_wake(void)
{
	_Atomic uint32_t *l = ckpt_sync_latch();
	if (l == NULL)
		return;
	atomic_fetch_add(l, 1);
	ipc_wake_all(l);
}

void ckpt_sync_get_stats(ckpt_sync_stats *s)
{
	*s = (ckpt_sync_stats){0};
	if (cks_sh == NULL)
		return;
	s->cycle = atomic_load(&cks_sh->cycle);
	s->requests = atomic_load(&cks_sh->requests);
	s->absorbed = atomic_load(&cks_sh->absorbed);
	s->sender_fsyncs = atomic_load(&cks_sh->sender_fsyncs);
	s->early_syncs = atomic_load(&cks_sh->early_syncs);
	s->forgets = atomic_load(&cks_sh->forgets);
	s->files_synced = atomic_load(&cks_sh->files_synced);
}

/* ---------------------------------------------------------------- fsync and close */

static bool cks_is_checkpointer(void)
{
	return ck.pid != 0 && ck.pid == getpid();
}

static void cks_path(wr_relid rel, uint32_t seg, char *buf, size_t len)
{
	smgr_segment_path(rel, seg, buf, len);
}

/*
 * fsync of a data file fd, once.  A failure is a PANIC and is never retried:
 * when write-back of a dirty page fails, Linux reports the error to the next
 * fsync of each open file description (errseq_t: once per description) and
 * may already have marked the page clean or dropped it.  A second fsync
 * would then "succeed" although the data never reached the disk, and the
 * checkpoint would lie about durability.  Only replaying the WAL from the
 * last completed checkpoint restores the pages, so the instance must stop.
 */
static void cks_fsync(wr_relid rel, uint32_t seg, int fd)
{
	char path[PATH_MAX];
	cks_path(rel, seg, path, sizeof(path));
	if (fdc_fsync_fd(fd, path) != WALRUS_OK)
		data_sync_failed("fsync", path, errno);
}

/*
 * The sender's fsync: the same, except that the I/O guard's refusal (the
 * instance crashed: no fsync was attempted) is returned to the write, which
 * reports WALRUS_ERESTART like any other I/O of a crashed instance.
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

/*
 * close of a written data file fd: checked, never retried (Linux frees the
 * fd before reporting); an error may be a write-back error that nobody will
 * see again, so it is a PANIC too.
 */
static void cks_close(wr_relid rel, uint32_t seg, int fd)
{
	char path[PATH_MAX];
	cks_path(rel, seg, path, sizeof(path));
	if (fdc_close_fd(fd, path) != WALRUS_OK)
		data_sync_failed("close", path, errno);
}

/* ---------------------------------------------------------------- the table */

static size_t cks_hash(wr_relid rel, uint32_t seg)
{
	uint64_t k = ((uint64_t)rel << 32) | seg;
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	return (size_t)k;
}

static void cks_index_put(size_t pos)
{
	size_t mask = ck.capidx - 1;
	size_t h = cks_hash(ck.tab[pos].rel, ck.tab[pos].seg) & mask;
	while (ck.idx[h] != CKS_INDEX_EMPTY)
		h = (h + 1) & mask;
	ck.idx[h] = (int32_t)pos;
}

/* Rebuilds the index over tab[0..ntab) with capidx slots. */
static void cks_index_rebuild(void)
{
	for (size_t i = 0; i < ck.capidx; i++)
		ck.idx[i] = CKS_INDEX_EMPTY;
	for (size_t i = 0; i < ck.ntab; i++)
		cks_index_put(i);
}

/* The live entry of (rel, seg), or -1.  Dead entries stay indexed until compaction. */
static long cks_find(wr_relid rel, uint32_t seg)
{
	if (ck.capidx == 0)
		return -1;
	size_t mask = ck.capidx - 1;
	for (size_t h = cks_hash(rel, seg) & mask; ck.idx[h] != CKS_INDEX_EMPTY;
	     h = (h + 1) & mask) {
		const cks_entry *e = &ck.tab[ck.idx[h]];
		if (e->fd >= 0 && e->rel == rel && e->seg == seg)
			return ck.idx[h];
	}
	return -1;
}

/* Drops dead entries (positions move) and rebuilds the index. */
static void cks_compact(void)
{
	size_t n = 0;
	for (size_t i = 0; i < ck.ntab; i++)
		if (ck.tab[i].fd >= 0)
			ck.tab[n++] = ck.tab[i];
	ck.ntab = n;
	if (ck.capidx > 0)
		cks_index_rebuild();
}

/* Room for one more entry at tab[ntab]; false when out of memory. */
static bool cks_make_room(void)
{
	if (ck.ntab < ck.captab)
		return true;
	if (!ck.syncing && ck.nlive < ck.ntab) {
		cks_compact();
		if (ck.ntab < ck.captab)
			return true;
	}
	size_t cap = ck.captab == 0 ? CKS_INITIAL_SLOTS : ck.captab * 2;
	if (cap > INT32_MAX / 2)
		return false;
	cks_entry *t = realloc(ck.tab, cap * sizeof(*t));
	if (t == NULL)
		return false;
	ck.tab = t;
	int32_t *x = malloc(cap * 2 * sizeof(*x));
	if (x == NULL)
		return false; /* the grown array is kept; the index still fits the old size */
	free(ck.idx);
	ck.idx = x;
	ck.captab = cap;
	ck.capidx = cap * 2;
	cks_index_rebuild();
	return true;
}

static void cks_kill(size_t pos)
{
	ck.tab[pos].fd = -1;
	ck.nlive--;
}

/* fsyncs the entry at @pos (PANIC on error) and tells the observer. */
static void cks_sync_entry(size_t pos, bool early)
{
	cks_entry e = ck.tab[pos];
	cks_fsync(e.rel, e.seg, e.fd);
	if (cks_sh != NULL)
		cks_count(&cks_sh->files_synced, 1);
	if (ck.observer != NULL)
		ck.observer(e.rel, e.seg, e.fd, early);
}

/* fsyncs and closes @pos now; the caller has advanced the cycle. */
static void cks_sync_close(size_t pos)
{
	cks_sync_entry(pos, true);
	cks_close(ck.tab[pos].rel, ck.tab[pos].seg, ck.tab[pos].fd);
	cks_kill(pos);
	if (cks_sh != NULL)
		cks_count(&cks_sh->early_syncs, 1);
}

/*
 * Over the fd budget: fsync and close the oldest quarter of the entries
 * (at least one), after advancing the cycle, so every later write hands an
 * fd over again (see the notes at the top).  Nothing is dropped.
 */
static void cks_early_sync(size_t want_free)
{
	size_t n = WR_MAX(want_free, (size_t)WR_MAX(1, ck.budget / 4));
	cks_advance_cycle();
	size_t done = 0;
	for (; done < n && ck.nlive > 0; done++) {
		size_t oldest = SIZE_MAX;
		for (size_t i = 0; i < ck.ntab; i++)
			if (ck.tab[i].fd >= 0 &&
			    (oldest == SIZE_MAX || ck.tab[i].order < ck.tab[oldest].order))
				oldest = i;
		cks_sync_close(oldest);
	}
	wr_log(WR_DEBUG, "sync request table full (budget %d fds): %zu files synced early",
	       ck.budget, done);
}

static void cks_enforce_budget(void)
{
	if (ck.nlive > (size_t)ck.budget)
		cks_early_sync(ck.nlive - (size_t)ck.budget);
}

/*
 * Applies one REGISTER: takes ownership of @fd.  Of two fds of one file the
 * older stays (its fsync covers every write either fd made); an fd of another
 * inode under the same name replaces the entry when it is newer (the old file
 * was unlinked before the new one was created and opened) and is dropped
 * when older (it is the removed file's).
 */
static void cks_add(wr_relid rel, uint32_t seg, uint64_t open_seq, uint64_t cycle, int fd)
{
	if (cks_sh != NULL)
		cks_count(&cks_sh->absorbed, 1);
	struct stat st;
	if (fstat(fd, &st) != 0) {
		char path[PATH_MAX];
		cks_path(rel, seg, path, sizeof(path));
		wr_panic("could not stat a received fd of file \"%s\": %m", path);
	}
	long pos = cks_find(rel, seg);
	if (pos >= 0) {
		cks_entry *e = &ck.tab[pos];
		bool same = e->dev == st.st_dev && e->ino == st.st_ino;
		bool newer = open_seq > e->open_seq;
		if (same ? newer || open_seq == e->open_seq : !newer) {
			if (same && cycle > e->cycle)
				e->cycle = cycle;
			cks_close(rel, seg, fd);
			return;
		}
		int old = e->fd;
		e->fd = fd;
		e->open_seq = open_seq;
		e->cycle = same ? WR_MAX(cycle, e->cycle) : cycle;
		e->dev = st.st_dev;
		e->ino = st.st_ino;
		cks_close(rel, seg, old);
		return;
	}
	if (ck.nlive >= (size_t)ck.budget)
		cks_early_sync(ck.nlive + 1 - (size_t)ck.budget);
	if (!cks_make_room()) {
		/* No memory to hold it: sync it now, as an early sync would. */
		wr_log(WR_WARNING, "out of memory for the sync request table: syncing now");
		cks_advance_cycle();
		cks_fsync(rel, seg, fd);
		cks_close(rel, seg, fd);
		if (cks_sh != NULL) {
			cks_count(&cks_sh->files_synced, 1);
			cks_count(&cks_sh->early_syncs, 1);
		}
		return;
	}
	size_t p = ck.ntab++;
	ck.tab[p] = (cks_entry){.rel = rel,
	                        .seg = seg,
	                        .fd = fd,
	                        .open_seq = open_seq,
	                        .cycle = cycle,
	                        .order = ck.next_order++,
	                        .dev = st.st_dev,
	                        .ino = st.st_ino};
	cks_index_put(p);
	ck.nlive++;
}

/* Drops (closes without fsync) entries of @rel from @from_seg on, opened before @when. */
static void cks_forget(wr_relid rel, uint32_t from_seg, uint64_t when)
{
	if (cks_sh != NULL)
		cks_count(&cks_sh->forgets, 1);
	for (size_t i = 0; i < ck.ntab; i++) {
		cks_entry *e = &ck.tab[i];
		if (e->fd >= 0 && e->rel == rel && e->seg >= from_seg && e->open_seq < when) {
			cks_close(e->rel, e->seg, e->fd);
			cks_kill(i);
		}
	}
}

/* ---------------------------------------------------------------- absorbing */

static void cks_close_socket(int fd)
{
	if (close(fd) != 0)
		wr_log(WR_WARNING, "could not close a sync request socket: %m");
}

static void cks_drop_conn(int i)
{
	cks_close_socket(ck.conns[i]);
	ck.conns[i] = ck.conns[--ck.nconns];
}

static void cks_add_conn(int fd)
{
	if (ck.nconns == ck.capconns) {
		int cap = ck.capconns == 0 ? 16 : ck.capconns * 2;
		int *c = realloc(ck.conns, sizeof(*c) * (size_t)cap);
		/* Closing it would lose the requests queued on it. */
		if (c == NULL)
			wr_panic("out of memory for sync request connections");
		ck.conns = c;
		ck.capconns = cap;
	}
	ck.conns[ck.nconns++] = fd;
	ck.accepted++;
}

/* Applies one received message; a malformed one may have lost a request: PANIC. */
static void cks_apply(const cks_msg *m, size_t len, int *fds, int nfds)
{
	bool ok = len == sizeof(*m) &&
	          ((m->type == CKS_REGISTER && nfds == 1) || (m->type == CKS_FORGET && nfds == 0));
	if (!ok)
		wr_panic(
		    "malformed sync request (%zu bytes, type %u, %d fds): a request may be lost",
		    len, len >= sizeof(uint32_t) ? m->type : 0, nfds);
	if (m->type == CKS_REGISTER)
		cks_add(m->rel, m->seg, m->seq, m->cycle, fds[0]);
	else
		cks_forget(m->rel, m->seg, m->seq);
}

/* Applies every message queued on connection @i; false when it reached EOF (and was dropped). */
static bool cks_drain(int i)
{
	for (;;) {
		cks_msg m;
		size_t len;
		int fds[IPC_MAX_FDS];
		int nfds = 0;
		int rc = ipc_recv_nowait(ck.conns[i], &m, sizeof(m), &len, fds, &nfds);
		if (rc != WALRUS_OK)
			wr_panic("could not receive a sync request: %s (a request may be lost)",
			         walrus_errmsg());
		if (len == SIZE_MAX)
			return true;
		if (len == 0) {
			cks_drop_conn(i);
			return false;
		}
		cks_apply(&m, len, fds, nfds);
	}
}

static void cks_accept_all(void)
{
	for (;;) {
		int fd;
		int rc = ipc_accept(ck.lfd, &fd);
		if (rc == WALRUS_OK) {
			cks_add_conn(fd);
			continue;
		}
		if (rc == WALRUS_EBUSY)
			return; /* none pending */
		/* Out of fds: free some by syncing early, and try again. */
		if (rc == WALRUS_ELIMIT && ck.nlive > 0) {
			cks_early_sync(1);
			continue;
		}
		/* The connection stays queued; a sync phase must not end without it. */
		wr_panic("could not accept a sync request connection: %s", walrus_errmsg());
	}
}

/* Drains every connection that poll says is readable (all of them if poll fails). */
static void cks_drain_ready(void)
{
	if (ck.nconns == 0)
		return;
	struct pollfd *p = calloc((size_t)ck.nconns, sizeof(*p));
	int n = -1;
	if (p != NULL) {
		for (int i = 0; i < ck.nconns; i++)
			p[i] = (struct pollfd){.fd = ck.conns[i], .events = POLLIN};
		do
			n = poll(p, (nfds_t)ck.nconns, 0);
		while (n < 0 && errno == EINTR);
	}
	int count = ck.nconns;
	/* Backwards: dropping connection i moves the last one into its place. */
	for (int i = count - 1; i >= 0; i--)
		if (n < 0 || p[i].revents != 0)
			cks_drain(i);
	free(p);
}

/* Requests sent but not yet absorbed (all connections together; forgets not counted). */
static int64_t cks_backlog(void)
{
	if (cks_sh == NULL)
		return 0;
	uint64_t absorbed = atomic_load(&cks_sh->absorbed);
	return (int64_t)(atomic_load(&cks_sh->requests) - absorbed);
}

bool ckpt_sync_pending(void)
{
	return cks_backlog() > 0 || (cks_sh != NULL && atomic_load(&cks_sh->wake_pending) != 0);
}

void ckpt_sync_absorb(void)
{
	if (!cks_is_checkpointer())
		return;
	/* Before draining: a sender that needs us after this wakes us again. */
	if (cks_sh != NULL)
		atomic_store(&cks_sh->wake_pending, 0);
	cks_enforce_budget();
	cks_accept_all();
	cks_drain_ready();
}

/* ---------------------------------------------------------------- the sync phase */

int ckpt_sync_all(ckpt_sync_result *r)
{
	*r = (ckpt_sync_result){0};
	if (!cks_is_checkpointer())
		return wr_error(WALRUS_EINVAL,
		                "ckpt_sync_all: this process is not the checkpointer");
	/* First the cycle, then absorb: see the notes at the top. */
	uint64_t cycle = cks_advance_cycle();
	r->cycle = cycle;
	ckpt_sync_absorb();
	ck.syncing = true; /* positions stay put while we walk them */
	size_t end = ck.ntab;
	uint64_t longest = 0, total = 0;
	for (size_t i = 0; i < end; i++) {
		if (ck.tab[i].fd < 0)
			continue; /* removed, forgotten or synced early */
		uint64_t t0 = wr_now_ns();
		cks_sync_entry(i, false);
		uint64_t dt = wr_now_ns() - t0;
		longest = WR_MAX(longest, dt);
		total += dt;
		r->files++;
		if (ck.tab[i].cycle >= cycle) {
			r->kept++;
		} else {
			cks_close(ck.tab[i].rel, ck.tab[i].seg, ck.tab[i].fd);
			cks_kill(i);
		}
		/* Keep senders from filling their queues while the fsyncs run. */
		if (ckpt_sync_pending())
			ckpt_sync_absorb();
	}
	ck.syncing = false;
	cks_compact();
	r->longest_s = (double)longest / 1e9;
	r->total_s = (double)total / 1e9;
	r->average_s = r->files > 0 ? r->total_s / r->files : 0.0;
	return WALRUS_OK;
}

/* ---------------------------------------------------------------- listening */

/* Half of the process's fd bound; the cache keeps the other half. */
static int cks_default_budget(void)
{
	return WR_MAX(1, fdc_bound() / 2);
}

/* Forgets checkpointer state inherited across fork without touching the fds (the parent's). */
static void cks_forget_inherited(void)
{
	free(ck.conns);
	free(ck.tab);
	free(ck.idx);
	ckpt_sync_observer_fn obs = ck.observer;
	int budget = ck.budget;
	memset(&ck, 0, sizeof(ck));
	ck.lfd = -1;
	ck.observer = obs;
	ck.budget = budget;
}

int ckpt_sync_listen(const char *datadir)
{
	if (cks_is_checkpointer())
		return wr_error(WALRUS_EINVAL, "already listening for sync requests");
	if (ck.pid != 0)
		cks_forget_inherited();
	if (!wr_snprintf(ck.sockpath, sizeof(ck.sockpath), "%s/%s", datadir, CKPT_SYNC_SOCKET))
		return wr_error(WALRUS_EINVAL, "data directory path is too long: \"%s\"", datadir);
	int fd;
	int rc = ipc_listen(datadir, CKPT_SYNC_SOCKET, &fd);
	if (rc != WALRUS_OK)
		return rc;
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) {
		rc = wr_error(wr_errno_code(errno), "could not make socket \"%s\" non-blocking: %m",
		              ck.sockpath);
		if (unlink(ck.sockpath) != 0)
			wr_log(WR_WARNING, "could not remove \"%s\": %m", ck.sockpath);
		cks_close_socket(fd);
		return rc;
	}
	ck.lfd = fd;
	ck.pid = getpid();
	if (ck.budget <= 0) {
		/* The received fds and the cache's share the process's bound:
		 * together past RLIMIT_NOFILE, a request's fd would be lost. */
		ck.budget = cks_default_budget();
		fdc_lower_bound(fdc_bound() - ck.budget);
	}
	return WALRUS_OK;
}

void ckpt_sync_set_budget(int n)
{
	ck.budget = WR_MAX(1, n);
}

int ckpt_sync_budget(void)
{
	return ck.budget > 0 ? ck.budget : cks_default_budget();
}

void ckpt_sync_set_observer(ckpt_sync_observer_fn fn)
{
	ck.observer = fn;
}

static void cks_disconnect(void)
{
	if (snd.sock >= 0)
		cks_close_socket(snd.sock);
	snd.sock = -1;
}

void ckpt_sync_shutdown(void)
{
	if (cks_is_checkpointer()) {
		if (unlink(ck.sockpath) != 0 && errno != ENOENT)
			wr_log(WR_WARNING, "could not remove \"%s\": %m", ck.sockpath);
		cks_close_socket(ck.lfd);
		while (ck.nconns > 0)
			cks_drop_conn(ck.nconns - 1);
		for (size_t i = 0; i < ck.ntab; i++) {
			if (ck.tab[i].fd >= 0) {
				cks_close(ck.tab[i].rel, ck.tab[i].seg, ck.tab[i].fd);
				cks_kill(i);
			}
		}
	}
	if (ck.pid != 0)
		cks_forget_inherited();
	cks_disconnect();
}

/* ---------------------------------------------------------------- sender side */

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
 * (PANIC on error, never retried: see cks_fsync), and bumps its part of the
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

/* ---------------------------------------------------------------- test support */

int ckpt_sync_debug_count(void)
{
	return (int)ck.nlive;
}

bool ckpt_sync_debug_lookup(wr_relid rel, uint32_t seg, int *fd, uint64_t *open_seq,
                            uint64_t *cycle)
{
	long pos = cks_find(rel, seg);
	if (pos < 0)
		return false;
	if (fd != NULL)
		*fd = ck.tab[pos].fd;
	if (open_seq != NULL)
		*open_seq = ck.tab[pos].open_seq;
	if (cycle != NULL)
		*cycle = ck.tab[pos].cycle;
	return true;
}

int ckpt_sync_debug_connections(int *accepted)
{
	if (accepted != NULL)
		*accepted = ck.accepted;
	return ck.nconns;
}
