/*
 * sync.c - the checkpointer's side of the sync-request queue: it receives
 * data file fds from every process and alone fsyncs them (DESIGN.md rules 4
 * and 5).  The sending side, which every process runs, is sync_send.c.
 *
 * Interface: see checkpointer.h ("sync requests"); sync_int.h for what the
 * sending side uses.
 *
 * Requests are absorbed into a table keyed by (rel, seg) that keeps, per
 * file, the fd opened first (the smallest open_seq), whose fsync sees the
 * write-back errors of every write made after it was opened, through any fd
 * of any process.
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
 * - FORGET carries the time it was sent (the clock of open_seq) and drops
 *   only fds opened before it: a FORGET for a removed file absorbed after the
 *   request of a file created again under the same name must not drop it.
 * - Table: a dense array of entries (insertion order) and an open-addressing
 *   index into it.  Removing an entry marks it dead (fd -1); the array is
 *   compacted when it fills up, never during a sync phase, which walks
 *   positions while absorbing in between.
 */
#include "checkpointer/sync_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ipc/ipc.h"

#define CKS_REGION        "ckptsync"
#define CKS_INDEX_EMPTY   (-1)
#define CKS_INITIAL_SLOTS 64

cks_shared *cks_sh;

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

void cks_count(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
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
void cks_wake(void)
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

bool cks_is_checkpointer(void)
{
	return ck.pid != 0 && ck.pid == getpid();
}

void cks_path(wr_relid rel, uint32_t seg, char *buf, size_t len)
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
void cks_add(wr_relid rel, uint32_t seg, uint64_t open_seq, uint64_t cycle, int fd)
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
void cks_forget(wr_relid rel, uint32_t from_seg, uint64_t when)
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

void cks_close_socket(int fd)
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
int64_t cks_backlog(void)
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

void cks_stop_listening(void)
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
