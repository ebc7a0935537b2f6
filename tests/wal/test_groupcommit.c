/*
 * test_groupcommit.c - group commit under stress: committers that gather
 * for a flush, a WAL writer preallocating tiny segments while they switch
 * segments, committers that come and go (the gather's expectation must
 * not hold anyone back), and every sync method.  A committer checks that
 * its WAL is durable when wal_flush_to returns; the stream is read back
 * whole at the end.
 *
 * The WAL is set up without an instance, as in test_insert.c: a shared
 * memory segment with the WAL region, inherited by forked children.
 */
#include "waltest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fdcache/fdcache.h"

#define NPROC 8

/* Shared with the children (the "tutest" region). */
typedef struct shared_ctl {
	_Atomic uint32_t stop_writer;
	_Atomic uint32_t early_release; /* a committer saw flushed < its end */
} shared_ctl;

static shared_ctl *ctl;

static void setup_wal(const char *dir)
{
	ctl = wt_setup_wal(dir, sizeof(shared_ctl));
	memset(ctl, 0, sizeof(*ctl));
}

static uint32_t payload_len(uint32_t who, uint32_t seq)
{
	/* Mostly commit-sized, sometimes several pages: records cross pages,
	 * segments and the ring of 8 buffers. */
	uint32_t x = (who * 2654435761u) ^ (seq * 40503u);
	return (x % 23 == 0) ? 9000 + x % 30000 : 16 + x % 200;
}

static wr_lsn insert_one(uint32_t who, uint32_t seq)
{
	return wt_insert(who, seq, payload_len(who, seq), NULL);
}

struct committer_arg {
	uint32_t who, count;
	uint32_t pause_us; /* 0: commit back to back; else up to this long between commits */
};

static int committer(void *p)
{
	struct committer_arg *a = p;
	if (wal_attach((int)a->who + 1) != WALRUS_OK)
		return 10;
	uint32_t x = a->who * 7919u + 1;
	for (uint32_t i = 0; i < a->count; i++) {
		wr_lsn end = insert_one(a->who, i);
		wal_flush_to(end);
		if (wal_flushed_lsn() < end) {
			atomic_store(&ctl->early_release, 1);
			return 11; /* released before its commit was durable */
		}
		if (a->pause_us) {
			x = x * 1103515245u + 12345u;
			usleep((x >> 8) % a->pause_us);
		}
	}
	return 0;
}

/* Inserts records of one to five pages and never waits for a flush: every
 * write is one an inserter does to free a buffer page of the ring. */
static int big_inserter(void *p)
{
	const struct committer_arg *a = p;
	if (wal_attach((int)a->who + 1) != WALRUS_OK)
		return 10;
	for (uint32_t i = 0; i < a->count; i++)
		wt_insert(a->who, i, 9000 + (a->who * 7919u + i * 4099u) % 30000, NULL);
	return 0;
}

/* The WAL writer's loop, faster than the real one: it flushes and
 * preallocates segments while committers switch segments under it. */
static int walwriter(void *p)
{
	(void)p;
	if (wal_attach(NPROC + 1) != WALRUS_OK)
		return 10;
	while (!atomic_load(&ctl->stop_writer)) {
		wal_writer_round();
		usleep(200);
	}
	wal_writer_round();
	return 0;
}

/* NPROC committers and a WAL writer on a fresh WAL; checks the stream after. */
static void run_committers(const struct committer_arg *args, int n, bool writer)
{
	pid_t pids[NPROC], wpid = 0;
	ck_assert_int_le(n, NPROC);
	if (writer)
		wpid = tu_fork(walwriter, NULL);
	for (int i = 0; i < n; i++)
		pids[i] = tu_fork(committer, (void *)&args[i]);
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(tu_wait(pids[i]), 0);
	atomic_store(&ctl->stop_writer, 1);
	if (writer)
		ck_assert_int_eq(tu_wait(wpid), 0);
	ck_assert_uint_eq(atomic_load(&ctl->early_release), 0);
	uint32_t next[NPROC] = {0};
	int total = 0;
	for (int i = 0; i < n; i++)
		total += (int)args[i].count;
	ck_assert_int_eq(wt_read_all(next, n), total);
	for (int i = 0; i < n; i++)
		ck_assert_uint_eq(next[i], args[i].count);
}

static int variant(void *p)
{
	const char **v = p;
	wal_detach();
	shm_detach(); /* inherited from the test process: each variant has its own */
	wt_base_opts(v[1], v[2]);
	setup_wal(v[0]);
	if (wal_attach(0) != WALRUS_OK)
		return 20;
	uint32_t count = tu_long_mode() ? 2000 : 250;
	struct committer_arg args[NPROC];
	for (uint32_t i = 0; i < NPROC; i++)
		args[i] = (struct committer_arg){i, count, 0};
	run_committers(args, NPROC, true);
	wal_stats st;
	wal_get_stats(&st);
	/* The gather lets one flush serve several committers. */
	ck_assert_uint_lt(st.flushes, st.records / 2);
	return 0;
}

/* Tiny segments, a small ring, the WAL writer preallocating: each sync method. */
START_TEST(committers_switch_segments_under_the_writer)
{
	static const char *const variants[][2] = {
	    {NULL, NULL},
	    {"wal_sync_method", "fsync"},
	    {"wal_sync_method", "open_datasync"},
	    {"wal_direct_io", "on"},
	    {"io_method", "io_uring"},
	};
	const char *arg[3] = {tu_tmpdir("walrus-walgc"), variants[_i][0], variants[_i][1]};
	pid_t pid = tu_fork(variant, arg);
	ck_assert_int_eq(tu_wait(pid), 0);
}
END_TEST

/*
 * Eight inserters on a ring of eight pages: each needs pages the others
 * hold, and races them to map the next one.  Mapping past the page needed
 * once ran the mapping a ring ahead of the reservations, and an inserter
 * waited forever for the write of the page it was filling itself.
 */
START_TEST(inserters_race_for_the_ring)
{
	wt_base_opts(NULL, NULL);
	setup_wal(tu_tmpdir("walrus-walgc"));
	ck_assert_int_eq(wal_attach(0), WALRUS_OK);
	struct committer_arg args[NPROC];
	pid_t pids[NPROC];
	for (uint32_t i = 0; i < NPROC; i++) {
		args[i] = (struct committer_arg){i, tu_long_mode() ? 600 : 80, 0};
		pids[i] = tu_fork(big_inserter, &args[i]);
	}
	for (int i = 0; i < NPROC; i++)
		ck_assert_int_eq(tu_wait(pids[i]), 0);
	wal_flush_to(wal_insert_lsn());
	uint32_t next[NPROC] = {0};
	ck_assert_int_eq(wt_read_all(next, NPROC), (int)(NPROC * args[0].count));
	wal_stats st;
	wal_get_stats(&st);
	ck_assert_uint_gt(st.buffer_full_waits, 0);
}
END_TEST

/* Committers that pause, stop early or commit rarely: the gather expects
 * some that do not come, and must give up on them (no hang, all durable). */
START_TEST(committers_that_come_and_go)
{
	wt_base_opts("wal_buffers", "1MB");
	setup_wal(tu_tmpdir("walrus-walgc"));
	ck_assert_int_eq(wal_attach(0), WALRUS_OK);
	struct committer_arg args[NPROC];
	for (uint32_t i = 0; i < NPROC; i++) {
		uint32_t count = i % 3 == 0 ? 20 : 200; /* some leave early */
		uint32_t pause = i % 2 == 0 ? 0 : 2000; /* some commit rarely */
		args[i] = (struct committer_arg){i, count, pause};
	}
	run_committers(args, NPROC, true);
}
END_TEST

/* After a crowd of committers leaves, a lone one is not held back waiting
 * for them: with the longest gather allowed (10 ms), the crowd's
 * expectation makes it wait once at most (the flush it then does corrects
 * the expectation), and each of its commits is one flush.  Counted, not
 * timed: the machine may be loaded. */
START_TEST(lone_committer_after_a_crowd)
{
	enum { LONE = 200 };
	wt_base_opts("commit_gather", "10ms");
	ck_assert_int_eq(wr_opts_set(&wt_opts, "wal_buffers", "1MB"), WALRUS_OK);
	setup_wal(tu_tmpdir("walrus-walgc"));
	ck_assert_int_eq(wal_attach(0), WALRUS_OK);
	struct committer_arg args[NPROC];
	for (uint32_t i = 0; i < NPROC; i++)
		args[i] = (struct committer_arg){i + 1, 100, 0};
	pid_t pids[NPROC];
	for (int i = 0; i < NPROC; i++)
		pids[i] = tu_fork(committer, &args[i]);
	for (int i = 0; i < NPROC; i++)
		ck_assert_int_eq(tu_wait(pids[i]), 0);
	wal_stats s0, s1;
	wal_get_stats(&s0);
	for (uint32_t i = 0; i < LONE; i++) {
		wr_lsn end = insert_one(0, i);
		wal_flush_to(end);
		ck_assert_uint_ge(wal_flushed_lsn(), end);
	}
	wal_get_stats(&s1);
	/* A nap ends early when a flush happens; the first may be cut into a
	 * few by spurious wake-ups, never one per commit. */
	ck_assert_msg(s1.gather_naps - s0.gather_naps <= 3, "%d lone commits napped %llu times",
	              LONE, (unsigned long long)(s1.gather_naps - s0.gather_naps));
	ck_assert_uint_eq(s1.flushes - s0.flushes, LONE);
}
END_TEST

/* commit_gather=0: no gather at all, everything still durable. */
START_TEST(no_gather)
{
	wt_base_opts("commit_gather", "0");
	setup_wal(tu_tmpdir("walrus-walgc"));
	ck_assert_int_eq(wal_attach(0), WALRUS_OK);
	struct committer_arg args[NPROC];
	for (uint32_t i = 0; i < NPROC; i++)
		args[i] = (struct committer_arg){i, 150, 0};
	run_committers(args, NPROC, false);
}
END_TEST

static Suite *groupcommit_suite(void)
{
	Suite *s = suite_create("wal-groupcommit");
	TCase *t = tcase_create("groupcommit");
	tcase_set_timeout(t, 280);
	tcase_add_loop_test(t, committers_switch_segments_under_the_writer, 0, 5);
	tcase_add_test(t, inserters_race_for_the_ring);
	tcase_add_test(t, committers_that_come_and_go);
	tcase_add_test(t, lone_committer_after_a_crowd);
	tcase_add_test(t, no_gather);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	return tu_run(groupcommit_suite());
}
