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
#include "testutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fdcache/fdcache.h"
#include "wal/wal.h"

#define SYSID  TU_SYSID
#define NSLOTS 16
#define NPROC  8

typedef struct rec_payload {
	uint32_t who, seq, len;
	uint32_t check;
} rec_payload;

/* Shared with the children (the "tutest" region). */
typedef struct shared_ctl {
	_Atomic uint32_t stop_writer;
	_Atomic uint32_t early_release; /* a committer saw flushed < its end */
} shared_ctl;

static char waldir[4200];
static wr_options opts;
static shared_ctl *ctl;

static void base_opts(const char *name, const char *value)
{
	wr_opts_defaults(&opts);
	ck_assert_int_eq(wr_opts_set(&opts, "wal_segment_size", "64kB"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_set(&opts, "max_wal_size", "1MB"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_set(&opts, "min_wal_size", "128kB"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_set(&opts, "wal_buffers", "64kB"), WALRUS_OK); /* 8 pages */
	if (name)
		ck_assert_int_eq(wr_opts_set(&opts, name, value), WALRUS_OK);
}

static void setup_wal(const char *dir)
{
	snprintf(waldir, sizeof(waldir), "%s/wal", dir);
	ctl = tu_shm_wal_buffers_setup(&opts, dir, NSLOTS, false, sizeof(shared_ctl));
	memset(ctl, 0, sizeof(*ctl));
}

static uint32_t payload_len(uint32_t who, uint32_t seq)
{
	/* Mostly commit-sized, sometimes several pages: records cross pages,
	 * segments and the ring of 8 buffers. */
	uint32_t x = (who * 2654435761u) ^ (seq * 40503u);
	return (x % 23 == 0) ? 9000 + x % 30000 : 16 + x % 200;
}

static void fill(char *buf, const rec_payload *p)
{
	memcpy(buf, p, sizeof(*p));
	for (uint32_t i = sizeof(*p); i < p->len; i++)
		buf[i] = (char)(p->who * 31 + p->seq + i);
}

static wr_lsn insert_one(uint32_t who, uint32_t seq)
{
	static char buf[40000];
	rec_payload p = {who, seq, payload_len(who, seq), who ^ seq};
	fill(buf, &p);
	wal_begin();
	wal_register_data(buf, p.len);
	return wal_insert(RM_XLOG, XLOG_NOOP);
}

static bool payload_ok(const wal_decoded *r, rec_payload *out)
{
	static char buf[40000];
	if (r->main_len < sizeof(rec_payload))
		return false;
	memcpy(out, r->main_data, sizeof(*out));
	if (out->len != r->main_len || out->check != (out->who ^ out->seq))
		return false;
	fill(buf, out);
	return memcmp(buf, r->main_data, out->len) == 0;
}

/* Reads the whole stream; checks every payload and each writer's order; returns records. */
static int read_all(uint32_t *per_who_next, int nwho)
{
	wal_reader *r;
	wal_decoded *rec;
	int n = 0;
	ck_assert_int_eq(wal_reader_open(waldir, (uint64_t)opts.wal_segment_size, SYSID, &r),
	                 WALRUS_OK);
	int rc = wal_read_record(r, WAL_LONG_PHD, &rec);
	while (rc == WALRUS_OK) {
		rec_payload p;
		ck_assert_msg(payload_ok(rec, &p), "bad payload at " WAL_LSN_FMT,
		              WAL_LSN_ARGS(rec->lsn));
		ck_assert_int_lt((int)p.who, nwho);
		ck_assert_uint_eq(p.seq, per_who_next[p.who]);
		per_who_next[p.who]++;
		n++;
		rc = wal_read_record(r, 0, &rec);
	}
	ck_assert_msg(rc == WALRUS_ENOTFOUND, "stream ended with %d: %s", rc, walrus_errmsg());
	wal_reader_close(r);
	return n;
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
	ck_assert_int_eq(read_all(next, n), total);
	for (int i = 0; i < n; i++)
		ck_assert_uint_eq(next[i], args[i].count);
}

static int variant(void *p)
{
	const char **v = p;
	wal_detach();
	shm_detach(); /* inherited from the test process: each variant has its own */
	base_opts(v[1], v[2]);
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

/* Committers that pause, stop early or commit rarely: the gather expects
 * some that do not come, and must give up on them (no hang, all durable). */
START_TEST(committers_that_come_and_go)
{
	base_opts("wal_buffers", "1MB");
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
	base_opts("commit_gather", "10ms");
	ck_assert_int_eq(wr_opts_set(&opts, "wal_buffers", "1MB"), WALRUS_OK);
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
	base_opts("commit_gather", "0");
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
