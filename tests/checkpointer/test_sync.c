/*
 * test_sync.c - the sync-request queue by fd passing (design rules 4 and 5):
 * forked senders write through storage with the hooks installed, and this
 * process (libcheck's forked case) is the checkpointer.
 *
 * Cases: the fd held outlives the sender's and was opened before the write;
 * the oldest of two fds is kept; more dirty files than the fd budget; the
 * cycle (sending again, keeping entries of the new cycle); forget; the
 * sender's fallback (no checkpointer, queue full); a new connection after
 * fork; and the PANICs of a failed fsync (at the checkpointer and at a
 * sender) and of a failed close of a duplicate.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpointer/checkpointer.h"
#include "ipc/ipc.h"
#include "testsupport/testsupport.h"
#include "testutil.h"

#define SEGSIZE ((int64_t)8 * WR_PAGE_SIZE) /* 8 blocks per segment */

static const char *dir;

static void setup(void)
{
	dir = tu_tmpdir("walrus-ckptsync");
	wr_log_set_stderr(WR_PANIC + 1);
	size_t sizes[] = {ckpt_sync_shmem_size()};
	int fd;
	ck_assert_int_eq(shm_create(shm_size_for(sizes, 1), WR_HUGE_OFF, &fd), WALRUS_OK);
	ck_assert_int_eq(close(fd), 0); /* the mapping stays, and forked children share it */
	ck_assert_int_eq(ckpt_sync_shmem_init(), WALRUS_OK);
	ck_assert_int_eq(ckpt_sync_attach(), WALRUS_OK);
	ck_assert_int_eq(fdc_init(100), 0);
	ck_assert_int_eq(smgr_init(dir, SEGSIZE), 0);
	ck_assert_int_eq(ckpt_sync_install_hooks(dir), WALRUS_OK);
}

static void teardown(void)
{
	ckpt_sync_shutdown();
	smgr_shutdown();
	fdc_close_all();
	shm_detach();
}

static const char *seg_path(wr_relid rel, uint32_t seg)
{
	static char buf[4][4096];
	static int next;
	char *p = buf[next++ % 4];
	smgr_segment_path(rel, seg, p, 4096);
	return p;
}

static void make_page(unsigned char *p, wr_relid rel, wr_blkno b)
{
	page_init(p, 16, 1);
	for (size_t i = WR_PAGE_HEADER_SIZE; i < WR_PAGE_SIZE - 16; i++)
		p[i] = (unsigned char)(rel * 31 + b * 7 + i);
}

/* A forked sender starts from a clean cache: its parent's fds are not its own. */
static void child_init(void)
{
	wr_set_panic_handler(tu_panic_exit);
	fdc_reset();
	if (smgr_init(dir, SEGSIZE) != 0 || ckpt_sync_attach() != WALRUS_OK)
		_exit(2);
}

/* Creates @rel (if @create) and writes its block @b through storage. */
static int write_block(wr_relid rel, wr_blkno b, bool create)
{
	smgr_rel *r;
	unsigned char p[WR_PAGE_SIZE];
	if (create && smgr_create(rel) != 0)
		return -1;
	if (smgr_open(rel, &r) != 0)
		return -1;
	make_page(p, rel, b);
	wr_blkno n;
	if (smgr_nblocks(r, &n) != 0)
		return -1;
	return b >= n ? smgr_extend(r, b, p) : smgr_write(r, b, p);
}

/* ---------------------------------------------------------------- pipes */

static void put_u64(int fd, uint64_t v)
{
	ck_assert_int_eq(write(fd, &v, sizeof(v)), (ssize_t)sizeof(v));
}

static uint64_t get_u64(int fd)
{
	uint64_t v = 0;
	ssize_t n;
	do
		n = read(fd, &v, sizeof(v));
	while (n < 0 && errno == EINTR);
	ck_assert_int_eq(n, (ssize_t)sizeof(v));
	return v;
}

/* In a child: ck_assert would not report; a failed pipe read means the parent is gone. */
static uint64_t child_get(int fd)
{
	uint64_t v = 0;
	ssize_t n;
	do
		n = read(fd, &v, sizeof(v));
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof(v))
		_exit(3);
	return v;
}

static void child_put(int fd, uint64_t v)
{
	if (write(fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
		_exit(3);
}

typedef struct chan {
	int up[2];   /* child -> parent */
	int down[2]; /* parent -> child */
} chan;

static void chan_open(chan *c)
{
	ck_assert_int_eq(pipe(c->up), 0);
	ck_assert_int_eq(pipe(c->down), 0);
}

static void chan_close(chan *c)
{
	close(c->up[0]);
	close(c->up[1]);
	close(c->down[0]);
	close(c->down[1]);
}

/* ---------------------------------------------------------------- the observer */

#define MAX_REL 512
static int synced[MAX_REL][4]; /* fsyncs seen, by (rel, seg) */
static int synced_early;
static void (*on_sync)(wr_relid rel, uint32_t seg);

static void observe(wr_relid rel, uint32_t seg, int fd, bool early)
{
	ck_assert_uint_lt(rel, MAX_REL);
	ck_assert_uint_lt(seg, 4);
	ck_assert_msg(tu_same_file(fd, seg_path(rel, seg)), "fd synced for %u.%u is another file",
	              rel, seg);
	synced[rel][seg]++;
	if (early)
		synced_early++;
	if (on_sync != NULL)
		on_sync(rel, seg);
}

static void listen_here(void)
{
	ck_assert_int_eq(ckpt_sync_listen(dir), WALRUS_OK);
	ckpt_sync_set_observer(observe);
}

/* ---------------------------------------------------------------- held fd */

static int held_child(void *arg)
{
	chan *c = arg;
	child_init();
	smgr_rel *r;
	wr_blkno n;
	unsigned char p[WR_PAGE_SIZE];
	TU_CHILD_CHECK(smgr_open(1, &r) == 0);
	TU_CHILD_CHECK(smgr_nblocks(r, &n) == 0 && n == 0); /* opens segment 0 */
	make_page(p, 1, 0);
	uint64_t t_write = wr_now_ns();
	TU_CHILD_CHECK(smgr_extend(r, 0, p) == 0);
	fdc_close_all(); /* the sender's fd is gone */
	fdc_stats st;
	fdc_get_stats(&st);
	TU_CHILD_CHECK(st.open_now == 0);
	child_put(c->up[1], t_write);
	return 0;
}

START_TEST(test_fd_held_after_sender_closes)
{
	int fds0 = tu_count_fds();
	listen_here();
	ck_assert_int_eq(smgr_create(1), 0);
	smgr_shutdown(); /* no fd of the file left here */
	ck_assert_int_eq(smgr_init(dir, SEGSIZE), 0);
	chan c;
	chan_open(&c);
	pid_t pid = tu_fork(held_child, &c);
	uint64_t t_write = get_u64(c.up[0]);
	ck_assert_int_eq(tu_wait(pid), 0);
	chan_close(&c);

	ckpt_sync_absorb();
	int fd;
	uint64_t open_seq, cycle;
	ck_assert(ckpt_sync_debug_lookup(1, 0, &fd, &open_seq, &cycle));
	ck_assert_int_eq(ckpt_sync_debug_count(), 1);
	ck_assert(tu_same_file(fd, seg_path(1, 0)));
	ck_assert_uint_le(open_seq, t_write); /* opened no later than the write */
	ck_assert_uint_gt(open_seq, 0);
	unsigned char want[WR_PAGE_SIZE], got[WR_PAGE_SIZE];
	make_page(want, 1, 0);
	page_set_checksum(want, 0);
	ck_assert_int_eq(pread(fd, got, WR_PAGE_SIZE, 0), WR_PAGE_SIZE);
	ck_assert_int_eq(memcmp(got, want, WR_PAGE_SIZE), 0);

	ckpt_sync_result r;
	ck_assert_int_eq(ckpt_sync_all(&r), WALRUS_OK);
	ck_assert_int_eq(r.files, 1);
	ck_assert_int_eq(r.kept, 0);
	ck_assert_int_eq(synced[1][0], 1);
	ck_assert(r.longest_s >= 0.0 && r.longest_s <= r.total_s);
	ck_assert_int_eq(ckpt_sync_debug_count(), 0);
	ckpt_sync_stats st;
	ckpt_sync_get_stats(&st);
	ck_assert_uint_eq(st.requests, 1);
	ck_assert_uint_eq(st.absorbed, 1);
	ck_assert_uint_eq(st.files_synced, 1);
	ck_assert_uint_eq(st.sender_fsyncs, 0);
	ck_assert_uint_eq(st.cycle, r.cycle);
	ck_assert_int_eq(ckpt_sync_debug_connections(NULL), 0); /* EOF closed it */
	ckpt_sync_shutdown();
	ck_assert_int_eq(tu_count_fds(), fds0);
	struct stat sb;
	ck_assert_int_ne(stat(seg_path(1, 0), &sb), -1);
	char sock[4200];
	snprintf(sock, sizeof(sock), "%s/%s", dir, CKPT_SYNC_SOCKET);
	ck_assert_int_eq(stat(sock, &sb), -1); /* the socket is removed */
}
END_TEST

/* ---------------------------------------------------------------- oldest fd kept */

/* Opens relation 2 (reporting the time window of the open), waits, writes block @arg. */
typedef struct opener_arg {
	chan c;
	wr_blkno blk;
} opener_arg;

static int opener_child(void *arg)
{
	opener_arg *a = arg;
	child_init();
	smgr_rel *r;
	wr_blkno n;
	unsigned char p[WR_PAGE_SIZE];
	TU_CHILD_CHECK(smgr_open(2, &r) == 0);
	uint64_t t0 = wr_now_ns();
	TU_CHILD_CHECK(smgr_nblocks(r, &n) == 0);
	uint64_t t1 = wr_now_ns();
	child_put(a->c.up[1], t0);
	child_put(a->c.up[1], t1);
	child_get(a->c.down[0]);
	make_page(p, 2, a->blk);
	TU_CHILD_CHECK(smgr_extend(r, a->blk, p) == 0);
	child_put(a->c.up[1], 1);
	return 0;
}

START_TEST(test_oldest_fd_kept)
{
	listen_here();
	ck_assert_int_eq(smgr_create(2), 0);
	opener_arg a = {.blk = 1}, b = {.blk = 0};
	chan_open(&a.c);
	chan_open(&b.c);
	int fds0 = tu_count_fds();
	pid_t pa = tu_fork(opener_child, &a);
	uint64_t a0 = get_u64(a.c.up[0]), a1 = get_u64(a.c.up[0]);
	pid_t pb = tu_fork(opener_child, &b);
	uint64_t b0 = get_u64(b.c.up[0]), b1 = get_u64(b.c.up[0]);
	ck_assert_uint_lt(a1, b0);
	/* The newer fd arrives first. */
	put_u64(b.c.down[1], 1);
	get_u64(b.c.up[0]);
	ck_assert_int_eq(tu_wait(pb), 0);
	ckpt_sync_absorb();
	int fd;
	uint64_t seq;
	ck_assert(ckpt_sync_debug_lookup(2, 0, &fd, &seq, NULL));
	ck_assert(seq >= b0 && seq <= b1);
	/* Then the older one: it replaces it, and the newer is closed. */
	put_u64(a.c.down[1], 1);
	get_u64(a.c.up[0]);
	ck_assert_int_eq(tu_wait(pa), 0);
	ckpt_sync_absorb();
	ck_assert(ckpt_sync_debug_lookup(2, 0, &fd, &seq, NULL));
	ck_assert_msg(seq >= a0 && seq <= a1, "kept open_seq %llu, older fd opened in [%llu, %llu]",
	              (unsigned long long)seq, (unsigned long long)a0, (unsigned long long)a1);
	ck_assert(tu_same_file(fd, seg_path(2, 0)));
	ck_assert_int_eq(ckpt_sync_debug_count(), 1);
	ck_assert_int_eq(ckpt_sync_debug_connections(NULL), 0);
	ck_assert_int_eq(tu_count_fds(), fds0 + 1); /* one fd held, the other closed */
	ckpt_sync_stats st;
	ckpt_sync_get_stats(&st);
	ck_assert_uint_eq(st.absorbed, 2);
	ckpt_sync_result r;
	ck_assert_int_eq(ckpt_sync_all(&r), WALRUS_OK);
	ck_assert_int_eq(r.files, 1);
	ck_assert_int_eq(synced[2][0], 1);
	ck_assert_int_eq(tu_count_fds(), fds0);
	chan_close(&a.c);
	chan_close(&b.c);
}
END_TEST

/* ---------------------------------------------------------------- fd budget */

#define BUDGET_FILES 20

static int many_files_child(void *arg)
{
	(void)arg;
	child_init();
	for (wr_relid rel = 100; rel < 100 + BUDGET_FILES; rel++)
		TU_CHILD_CHECK(write_block(rel, 0, true) == 0);
	return 0;
}

/* The fds of the table and the cache's share the bound (setup: 100). */
START_TEST(test_default_budget_shares_the_bound)
{
	ck_assert_int_eq(fdc_bound(), 100);
	listen_here();
	ck_assert_int_eq(ckpt_sync_budget(), 50);
	ck_assert_int_eq(fdc_bound(), 50);
}
END_TEST

START_TEST(test_budget_syncs_early)
{
	listen_here();
	ckpt_sync_set_budget(4);
	ck_assert_int_eq(ckpt_sync_budget(), 4);
	_Atomic uint32_t *latch = ckpt_sync_latch();
	ck_assert_ptr_nonnull(latch);
	pid_t pid = tu_fork(many_files_child, NULL);
	int status = -1;
	for (;;) {
		uint32_t seen = atomic_load(latch);
		ckpt_sync_absorb();
		ck_assert_int_le(ckpt_sync_debug_count(), 4);
		pid_t w = waitpid(pid, &status, WNOHANG);
		ck_assert_int_ge(w, 0);
		if (w == pid)
			break;
		ipc_wait_u32(latch, seen, 20ULL * 1000 * 1000);
	}
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ckpt_sync_absorb();
	ck_assert_int_le(ckpt_sync_debug_count(), 4);
	int early = synced_early;
	ckpt_sync_result r;
	ck_assert_int_eq(ckpt_sync_all(&r), WALRUS_OK);
	ckpt_sync_stats st;
	ckpt_sync_get_stats(&st);
	ck_assert_uint_eq(st.sender_fsyncs, 0);
	ck_assert_uint_eq(st.requests, BUDGET_FILES);
	ck_assert_uint_eq(st.early_syncs, (uint64_t)early);
	ck_assert_int_gt(early, 0);
	ck_assert_int_eq(early + r.files, BUDGET_FILES);
	for (wr_relid rel = 100; rel < 100 + BUDGET_FILES; rel++)
		ck_assert_msg(synced[rel][0] == 1, "relation %u synced %d times", rel,
		              synced[rel][0]);
	/* Each early sync advanced the cycle, and so did the sync phase. */
	ck_assert_uint_gt(r.cycle, 1);
	ck_assert_int_eq(ckpt_sync_debug_count(), 0);
}
END_TEST

/* ---------------------------------------------------------------- cycles */

/* Writes relation (command) block 0 for each command; 0 ends. */
static int commanded_child(void *arg)
{
	chan *c = arg;
	child_init();
	for (;;) {
		uint64_t rel = child_get(c->down[0]);
		if (rel == 0)
			return 0;
		TU_CHILD_CHECK(write_block((wr_relid)rel, 0, false) == 0);
		ckpt_sync_stats st;
		ckpt_sync_get_stats(&st);
		child_put(c->up[1], st.requests);
	}
}

static chan *cycle_chan;

/* Written while the sync phase runs: relation 2's request carries the new cycle. */
static void write_rel2_during_sync(wr_relid rel, uint32_t seg)
{
	(void)seg;
	if (rel != 1)
		return;
	on_sync = NULL;
	put_u64(cycle_chan->down[1], 2);
	get_u64(cycle_chan->up[0]);
}

static uint64_t command(chan *c, wr_relid rel)
{
	put_u64(c->down[1], rel);
	return get_u64(c->up[0]);
}

START_TEST(test_cycle)
{
	listen_here();
	ck_assert_int_eq(smgr_create(1), 0);
	ck_assert_int_eq(smgr_create(2), 0);
	chan c;
	chan_open(&c);
	cycle_chan = &c;
	pid_t pid = tu_fork(commanded_child, &c);
	ck_assert_uint_eq(command(&c, 1), 1);
	ck_assert_uint_eq(command(&c, 2), 2);
	ck_assert_uint_eq(command(&c, 1), 2); /* same cycle: nothing sent */
	ckpt_sync_absorb();
	ck_assert_int_eq(ckpt_sync_debug_count(), 2);

	on_sync = write_rel2_during_sync;
	ckpt_sync_result r;
	ck_assert_int_eq(ckpt_sync_all(&r), WALRUS_OK);
	ck_assert_int_eq(r.files, 2);
	ck_assert_int_eq(r.kept, 1);
	uint64_t cyc;
	ck_assert(!ckpt_sync_debug_lookup(1, 0, NULL, NULL, NULL));
	ck_assert(ckpt_sync_debug_lookup(2, 0, NULL, NULL, &cyc)); /* stays for the next one */
	ck_assert_uint_eq(cyc, r.cycle);
	ckpt_sync_stats st;
	ckpt_sync_get_stats(&st);
	ck_assert_uint_eq(st.requests, 3);

	/* The next write to relation 1 sends again (new cycle), once. */
	ck_assert_uint_eq(command(&c, 1), 4);
	ck_assert_uint_eq(command(&c, 1), 4);
	ck_assert_uint_eq(command(&c, 2), 4); /* already sent in this cycle */
	ckpt_sync_absorb();
	ck_assert(ckpt_sync_debug_lookup(1, 0, NULL, NULL, &cyc));
	ck_assert_uint_eq(cyc, r.cycle);

	ck_assert_int_eq(ckpt_sync_all(&r), WALRUS_OK);
	ck_assert_int_eq(r.files, 2);
	ck_assert_int_eq(r.kept, 0);
	ck_assert_int_eq(synced[1][0], 2);
	ck_assert_int_eq(synced[2][0], 2);
	ck_assert_int_eq(ckpt_sync_debug_count(), 0);
	/* And after that one, both send again. */
	ck_assert_uint_eq(command(&c, 2), 5);
	ck_assert_uint_eq(command(&c, 1), 6);
	put_u64(c.down[1], 0);
	ck_assert_int_eq(tu_wait(pid), 0);
	chan_close(&c);
}
END_TEST

/* ---------------------------------------------------------------- forget */

static int forget_child(void *arg)
{
	(void)arg;
	child_init();
	TU_CHILD_CHECK(write_block(5, 0, true) == 0);
	TU_CHILD_CHECK(smgr_create(6) == 0);
	for (wr_blkno b = 0; b < 18; b++) /* three segments */
		TU_CHILD_CHECK(write_block(6, b, false) == 0);
	TU_CHILD_CHECK(smgr_unlink(5) == 0);
	smgr_rel *r;
	TU_CHILD_CHECK(smgr_open(6, &r) == 0);
	TU_CHILD_CHECK(smgr_truncate(r, 8) == 0); /* segments 1 and 2 go */
	return 0;
}

START_TEST(test_forget)
{
	listen_here();
	ck_assert_int_eq(tu_wait(tu_fork(forget_child, NULL)), 0);
	ckpt_sync_absorb();
	ckpt_sync_stats st;
	ckpt_sync_get_stats(&st);
	ck_assert_uint_eq(st.requests, 4); /* 5.0, 6.0, 6.1, 6.2 */
	ck_assert_uint_eq(st.forgets, 2);
	ck_assert_int_eq(ckpt_sync_debug_count(), 1);
	ck_assert(ckpt_sync_debug_lookup(6, 0, NULL, NULL, NULL));
	ckpt_sync_result r;
	ck_assert_int_eq(ckpt_sync_all(&r), WALRUS_OK);
	ck_assert_int_eq(r.files, 1);
	ck_assert_int_eq(synced[6][0], 1);
	ck_assert_int_eq(synced[5][0], 0);
	ck_assert_int_eq(synced[6][1] + synced[6][2], 0);
}
END_TEST

/* A file removed and created again under the same name: the new file's fd wins. */
static int recreate_child(void *arg)
{
	chan *c = arg;
	child_init();
	TU_CHILD_CHECK(write_block(7, 0, true) == 0);
	child_put(c->up[1], 1);
	child_get(c->down[0]);
	/* Removed behind storage's back (no forget), then created again. */
	TU_CHILD_CHECK(unlink(seg_path(7, 0)) == 0);
	fdc_reset();
	TU_CHILD_CHECK(smgr_init(dir, SEGSIZE) == 0);
	TU_CHILD_CHECK(write_block(7, 0, true) == 0);
	return 0;
}

START_TEST(test_recreated_file)
{
	listen_here();
	chan c;
	chan_open(&c);
	pid_t pid = tu_fork(recreate_child, &c);
	get_u64(c.up[0]);
	ckpt_sync_absorb();
	put_u64(c.down[1], 1);
	ck_assert_int_eq(tu_wait(pid), 0);
	ckpt_sync_absorb();
	int fd;
	ck_assert(ckpt_sync_debug_lookup(7, 0, &fd, NULL, NULL));
	ck_assert(tu_same_file(fd, seg_path(7, 0)));
	ck_assert_int_eq(ckpt_sync_debug_count(), 1);
	chan_close(&c);
}
END_TEST

/* ---------------------------------------------------------------- sender fallback */

static int no_ckpt_child(void *arg)
{
	(void)arg;
	child_init();
	TU_CHILD_CHECK(write_block(8, 0, true) == 0);
	ckpt_sync_stats st;
	ckpt_sync_get_stats(&st);
	TU_CHILD_CHECK(st.sender_fsyncs == 1);
	/* After fsyncing itself, its next write is covered again (not skipped as sent). */
	TU_CHILD_CHECK(write_block(8, 1, false) == 0);
	ckpt_sync_get_stats(&st);
	TU_CHILD_CHECK(st.sender_fsyncs == 2);
	TU_CHILD_CHECK(st.requests == 0);
	return 0;
}

START_TEST(test_fallback_no_checkpointer)
{
	ck_assert_int_eq(tu_wait(tu_fork(no_ckpt_child, NULL)), 0);
	ckpt_sync_stats st;
	ckpt_sync_get_stats(&st);
	ck_assert_uint_eq(st.sender_fsyncs, 2);
}
END_TEST

/* More than a connection's queue holds (about 278 requests). */
/* The I/O guard lets the write pass and refuses the fallback fsync (the instance crashed). */
static int guard_calls;

static int refuse_second(void)
{
	if (++guard_calls == 2)
		return wr_error(WALRUS_ERESTART, "the instance crashed (test)");
	return WALRUS_OK;
}

static void guard_exit(void) {}

static int guard_child(void *arg)
{
	(void)arg;
	child_init();
	TU_CHILD_CHECK(smgr_create(18) == 0);
	fdc_set_io_guard(refuse_second, guard_exit);
	TU_CHILD_CHECK(write_block(18, 0, false) == WALRUS_ERESTART);
	TU_CHILD_CHECK(guard_calls == 2);
	fdc_set_io_guard(NULL, NULL);
	ckpt_sync_stats st;
	ckpt_sync_get_stats(&st);
	TU_CHILD_CHECK(st.sender_fsyncs == 0);
	return 0;
}

START_TEST(test_fallback_guard_refusal)
{
	ck_assert_int_eq(tu_wait(tu_fork(guard_child, NULL)), 0);
}
END_TEST

#define FULL_FIRST 200
#define FULL_FILES 300

static int full_queue_child(void *arg)
{
	(void)arg;
	child_init();
	wr_relid last = FULL_FIRST + FULL_FILES - 1;
	for (wr_relid rel = FULL_FIRST; rel < last; rel++)
		TU_CHILD_CHECK(write_block(rel, 0, false) == 0);
	ckpt_sync_stats st;
	ckpt_sync_get_stats(&st);
	TU_CHILD_CHECK(st.sender_fsyncs > 0);
	/*
	 * One bounded wait, not one per file: while the queue stays full, a
	 * sender wakes the checkpointer once and falls back at once.  Waiting
	 * for room would wake it again before every retry (the latch counts
	 * the wake-ups), and fsync nothing more than this one file.
	 */
	_Atomic uint32_t *latch = ckpt_sync_latch();
	uint32_t wakes0 = atomic_load(latch);
	TU_CHILD_CHECK(write_block(last, 0, false) == 0);
	TU_CHILD_CHECK(atomic_load(latch) - wakes0 == 1);
	ckpt_sync_stats st2;
	ckpt_sync_get_stats(&st2);
	TU_CHILD_CHECK(st2.sender_fsyncs == st.sender_fsyncs + 1);
	return 0;
}

START_TEST(test_fallback_queue_full)
{
	listen_here();
	ckpt_sync_set_budget(1000);
	/* The files exist already (without fsyncs, to keep the case fast). */
	for (wr_relid rel = FULL_FIRST; rel < FULL_FIRST + FULL_FILES; rel++) {
		int fd = open(seg_path(rel, 0), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(close(fd), 0);
	}
	_Atomic uint32_t *latch = ckpt_sync_latch();
	uint32_t latch0 = atomic_load(latch);
	/* Nobody absorbs while the sender runs. */
	ck_assert_int_eq(tu_wait(tu_fork(full_queue_child, NULL)), 0);
	ck_assert_uint_ne(atomic_load(latch), latch0); /* it was woken */
	ck_assert(ckpt_sync_pending());
	ckpt_sync_stats st;
	ckpt_sync_get_stats(&st);
	ck_assert_uint_gt(st.sender_fsyncs, 0);
	ck_assert_uint_gt(st.requests, 0);
	ck_assert_uint_eq(st.requests + st.sender_fsyncs, FULL_FILES);
	ckpt_sync_absorb();
	ck_assert(!ckpt_sync_pending());
	ckpt_sync_result r;
	ck_assert_int_eq(ckpt_sync_all(&r), WALRUS_OK);
	ck_assert_uint_eq((uint64_t)r.files, st.requests);
	for (wr_relid rel = FULL_FIRST; rel < FULL_FIRST + FULL_FILES; rel++)
		ck_assert_int_le(synced[rel][0], 1);
}
END_TEST

/* ---------------------------------------------------------------- fork: a new connection */

static int grandchild(void *arg)
{
	(void)arg;
	child_init();
	TU_CHILD_CHECK(write_block(13, 0, true) == 0);
	return 0;
}

static int forking_child(void *arg)
{
	(void)arg;
	child_init();
	TU_CHILD_CHECK(write_block(12, 0, true) == 0);
	pid_t pid = fork();
	TU_CHILD_CHECK(pid >= 0);
	if (pid == 0)
		_exit(grandchild(NULL));
	int st;
	TU_CHILD_CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	TU_CHILD_CHECK(write_block(17, 0, true) == 0); /* through its own connection, still open */
	return 0;
}

START_TEST(test_fork_reconnects)
{
	listen_here();
	ck_assert_int_eq(tu_wait(tu_fork(forking_child, NULL)), 0);
	ckpt_sync_absorb();
	int accepted;
	ck_assert_int_eq(ckpt_sync_debug_connections(&accepted), 0);
	ck_assert_int_eq(accepted, 2);
	ck_assert(ckpt_sync_debug_lookup(12, 0, NULL, NULL, NULL));
	ck_assert(ckpt_sync_debug_lookup(13, 0, NULL, NULL, NULL));
	ck_assert(ckpt_sync_debug_lookup(17, 0, NULL, NULL, NULL));
	ckpt_sync_stats st;
	ckpt_sync_get_stats(&st);
	ck_assert_uint_eq(st.requests, 3);
	ck_assert_uint_eq(st.sender_fsyncs, 0);
}
END_TEST

/* ---------------------------------------------------------------- the checkpointer's own writes */

START_TEST(test_checkpointer_registers_directly)
{
	listen_here();
	int fds0 = tu_count_fds();
	ck_assert_int_eq(write_block(14, 0, true), 0);
	ck_assert_int_eq(ckpt_sync_debug_count(), 1);
	int fd;
	ck_assert(ckpt_sync_debug_lookup(14, 0, &fd, NULL, NULL));
	ck_assert(tu_same_file(fd, seg_path(14, 0)));
	ck_assert_int_eq(ckpt_sync_debug_connections(NULL), 0);
	ckpt_sync_forget(14, 0);
	ck_assert_int_eq(ckpt_sync_debug_count(), 0);
	ck_assert_int_eq(write_block(14, 1, false), 0); /* same cycle: not sent again */
	ck_assert_int_eq(ckpt_sync_debug_count(), 0);
	ckpt_sync_result r;
	ck_assert_int_eq(ckpt_sync_all(&r), WALRUS_OK);
	ck_assert_int_eq(r.files, 0);
	ck_assert_int_eq(write_block(14, 2, false), 0); /* a new cycle */
	ck_assert_int_eq(ckpt_sync_debug_count(), 1);
	ck_assert_int_eq(ckpt_sync_all(&r), WALRUS_OK);
	ck_assert_int_eq(r.files, 1);
	ck_assert_int_eq(synced[14][0], 1);
	smgr_shutdown(); /* smgr's own fd of relation 14 */
	ck_assert_int_eq(tu_count_fds(), fds0);
	ck_assert_int_eq(ckpt_sync_all(&r), WALRUS_OK);
	ck_assert_int_eq(r.files, 0);
	ck_assert_int_eq(ckpt_sync_listen(dir), WALRUS_EINVAL); /* already */
}
END_TEST

/* ---------------------------------------------------------------- PANICs */

static int sender_of_9(void *arg)
{
	(void)arg;
	child_init();
	TU_CHILD_CHECK(write_block(9, 0, true) == 0);
	return 0;
}

/* The checkpointer: absorbs a sender's request, then its fsync fails. */
static int ckpt_fsync_fails_child(void *arg)
{
	tu_child_log_to(arg);
	TU_CHILD_CHECK(ckpt_sync_listen(dir) == WALRUS_OK);
	pid_t pid = fork();
	TU_CHILD_CHECK(pid >= 0);
	if (pid == 0)
		_exit(sender_of_9(NULL));
	int st;
	TU_CHILD_CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	ckpt_sync_absorb();
	TU_CHILD_CHECK(ckpt_sync_debug_count() == 1);
	TU_CHILD_CHECK(ts_failpoint_set("fsync:EIO:/base/9") == 0);
	ckpt_sync_result r;
	ckpt_sync_all(&r);
	return 1; /* not reached: the failed fsync PANICs */
}

START_TEST(test_checkpointer_fsync_failure_panics)
{
	tu_expect_panic(dir, ckpt_fsync_fails_child, "could not fsync file", seg_path(9, 0));
}
END_TEST

/* The early sync's fsync fails just the same. */
static int early_fsync_fails_child(void *arg)
{
	tu_child_log_to(arg);
	TU_CHILD_CHECK(ckpt_sync_listen(dir) == WALRUS_OK);
	ckpt_sync_set_budget(1);
	TU_CHILD_CHECK(write_block(15, 0, true) == 0);
	TU_CHILD_CHECK(ts_failpoint_set("fsync:EIO:/base/15") == 0);
	TU_CHILD_CHECK(smgr_create(16) == 0);
	write_block(16, 0, false); /* over the budget: relation 15 is synced early */
	return 1;
}

START_TEST(test_early_sync_failure_panics)
{
	tu_expect_panic(dir, early_fsync_fails_child, "could not fsync file", seg_path(15, 0));
}
END_TEST

/* A sender without a checkpointer fsyncs itself; WALRUS_FAILPOINTS makes that fail. */
static int sender_fsync_fails_child(void *arg)
{
	tu_child_log_to(arg);
	/* The first fsync (smgr_create's own) passes, the fallback's fails. */
	TU_CHILD_CHECK(setenv("WALRUS_FAILPOINTS", "fsync:EIO:/base/10@1", 1) == 0);
	child_init();
	TU_CHILD_CHECK(fdc_init(100) == 0);
	TU_CHILD_CHECK(smgr_create(10) == 0);
	wr_log(WR_LOG, "writing block 0 of relation 10");
	write_block(10, 0, false);
	return 1;
}

START_TEST(test_sender_fsync_failure_panics)
{
	tu_expect_panic(dir, sender_fsync_fails_child, "could not fsync file", seg_path(10, 0));
	char log[4096];
	snprintf(log, sizeof(log), "%s/%s", dir, TU_PANIC_LOG);
	tu_check_panic_log(log, "writing block 0 of relation 10", "");
}
END_TEST

/* Closing the newer duplicate of a written fd is checked: an error PANICs. */
static int dup_close_fails_child(void *arg)
{
	tu_child_log_to(arg);
	TU_CHILD_CHECK(ckpt_sync_listen(dir) == WALRUS_OK);
	TU_CHILD_CHECK(smgr_create(11) == 0);
	int a = open(seg_path(11, 0), O_RDWR | O_CLOEXEC);
	TU_CHILD_CHECK(a >= 0);
	uint64_t ta = wr_now_ns();
	int b = open(seg_path(11, 0), O_RDWR | O_CLOEXEC);
	TU_CHILD_CHECK(b >= 0);
	uint64_t tb = wr_now_ns();
	smgr_sync_req req = {.rel = 11, .seg = 0, .open_seq = ta, .cycle = ckpt_sync_cycle()};
	TU_CHILD_CHECK(ckpt_sync_register(&req, a) == WALRUS_OK);
	TU_CHILD_CHECK(ts_failpoint_set("close:EIO:/base/11") == 0);
	req.open_seq = tb;
	ckpt_sync_register(&req, b);
	return 1;
}

START_TEST(test_dup_close_failure_panics)
{
	tu_expect_panic(dir, dup_close_fails_child, "could not close file", seg_path(11, 0));
}
END_TEST

/* ---------------------------------------------------------------- suite */

static Suite *sync_suite(void)
{
	Suite *s = suite_create("ckpt-sync");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_fd_held_after_sender_closes);
	tcase_add_test(tc, test_oldest_fd_kept);
	tcase_add_test(tc, test_default_budget_shares_the_bound);
	tcase_add_test(tc, test_budget_syncs_early);
	tcase_add_test(tc, test_cycle);
	tcase_add_test(tc, test_forget);
	tcase_add_test(tc, test_recreated_file);
	tcase_add_test(tc, test_fallback_no_checkpointer);
	tcase_add_test(tc, test_fallback_guard_refusal);
	tcase_add_test(tc, test_fallback_queue_full);
	tcase_add_test(tc, test_fork_reconnects);
	tcase_add_test(tc, test_checkpointer_registers_directly);
	tcase_add_test(tc, test_checkpointer_fsync_failure_panics);
	tcase_add_test(tc, test_early_sync_failure_panics);
	tcase_add_test(tc, test_sender_fsync_failure_panics);
	tcase_add_test(tc, test_dup_close_failure_panics);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(sync_suite());
}
