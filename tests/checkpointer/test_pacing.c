/*
 * test_pacing.c - checkpoint write pacing with an injected clock and WAL
 * position (on schedule: sleep; behind by time or by WAL: never; immediate:
 * never), the (rel, blk) sort order of checkpoint writes, and when the
 * next checkpoint starts (checkpoint_timeout counted from each start).
 */
#include <stdlib.h>

#include "checkpointer/checkpointer.h"
#include "testutil.h"

#define S  1000000ULL /* us */
#define MB (1024ULL * 1024)

static wr_options opts;
static ckpt_pacer pacer;
static const uint64_t t0 = 5000 * S;         /* an arbitrary clock start */
static const uint64_t w0 = 3ULL * 1024 * MB; /* and WAL position */

/* checkpoint_timeout 100 s, target 0.5, max_wal_size 150 MB: WAL budget 100 MB. */
static void setup(void)
{
	wr_opts_defaults(&opts);
	ck_assert_int_eq(wr_opts_set(&opts, "checkpoint_timeout", "100s"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_set(&opts, "checkpoint_completion_target", "0.5"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_set(&opts, "max_wal_size", "150MB"), WALRUS_OK);
	ckpt_pace_start(&pacer, &opts, t0, w0, false);
}

START_TEST(test_start)
{
	ck_assert(!pacer.immediate);
	ck_assert_uint_eq(pacer.start_us, t0);
	ck_assert_uint_eq(pacer.wal_start, w0);
	ck_assert_uint_eq(pacer.timeout_us, 100 * S);
	ck_assert(pacer.wal_budget > 100.0 * MB - 1 && pacer.wal_budget < 100.0 * MB + 1);
	ck_assert(pacer.target == 0.5);
}
END_TEST

START_TEST(test_on_schedule_sleeps)
{
	/* Half the pages after 10 s: 0.25 done, 0.10 elapsed; far ahead: the cap. */
	ck_assert(ckpt_pace_on_schedule(&pacer, 0.5, t0 + 10 * S, w0));
	ck_assert_uint_eq(ckpt_pace_sleep_us(&pacer, 0.5, t0 + 10 * S, w0), CKPT_PACE_MAX_SLEEP_US);
	/* 0.25 done at 24.95 s elapsed: 50 ms ahead. */
	uint64_t now = t0 + 24950000ULL;
	uint64_t us = ckpt_pace_sleep_us(&pacer, 0.5, now, w0);
	ck_assert_msg(us >= 49999 && us <= 50001, "slept %llu us", (unsigned long long)us);
	/* Nothing written yet, at the very start: exactly on schedule, nothing to wait for. */
	ck_assert(ckpt_pace_on_schedule(&pacer, 0.0, t0, w0));
	ck_assert_uint_eq(ckpt_pace_sleep_us(&pacer, 0.0, t0, w0), 0);
	/* Ahead by less than the minimum worth sleeping: write on. */
	now = t0 + 24999500ULL;
	ck_assert(ckpt_pace_on_schedule(&pacer, 0.5, now, w0));
	ck_assert_uint_eq(ckpt_pace_sleep_us(&pacer, 0.5, now, w0), 0);
}
END_TEST

START_TEST(test_behind_by_time)
{
	/* 0.05 done after 50 s (0.5 elapsed). */
	ck_assert(!ckpt_pace_on_schedule(&pacer, 0.1, t0 + 50 * S, w0));
	ck_assert_uint_eq(ckpt_pace_sleep_us(&pacer, 0.1, t0 + 50 * S, w0), 0);
	/* Past the timeout, even all pages written is behind by the clock. */
	ck_assert(!ckpt_pace_on_schedule(&pacer, 1.0, t0 + 60 * S, w0));
	ck_assert_uint_eq(ckpt_pace_sleep_us(&pacer, 1.0, t0 + 60 * S, w0), 0);
	/* Progress beyond 1 is clamped. */
	ck_assert(!ckpt_pace_on_schedule(&pacer, 5.0, t0 + 60 * S, w0));
}
END_TEST

START_TEST(test_behind_by_wal)
{
	/* Ahead by the clock (0.25 done, 0.01 elapsed), but 30 MB of 100 MB WAL used. */
	uint64_t now = t0 + 1 * S;
	ck_assert(ckpt_pace_on_schedule(&pacer, 0.5, now, w0));
	ck_assert(!ckpt_pace_on_schedule(&pacer, 0.5, now, w0 + 30 * MB));
	ck_assert_uint_eq(ckpt_pace_sleep_us(&pacer, 0.5, now, w0 + 30 * MB), 0);
	/* Exactly at the WAL mark is on schedule. */
	ck_assert(ckpt_pace_on_schedule(&pacer, 0.5, now, w0 + 25 * MB));
}
END_TEST

START_TEST(test_wal_rate_shortens_sleep)
{
	/* 0.25 done after 10 s, 24.5 MB of WAL used (0.245): at that rate WAL reaches 0.25
	 * in 0.005 / 0.0245 per s = 204 ms, before the clock does (15 s): the cap. */
	uint64_t now = t0 + 10 * S;
	uint64_t us = ckpt_pace_sleep_us(&pacer, 0.5, now, w0 + (uint64_t)(0.245 * 100.0 * MB));
	ck_assert_uint_eq(us, CKPT_PACE_MAX_SLEEP_US);
	/* 24.9 MB: 0.001 / 0.0249 per s = 40 ms. */
	uint64_t wal = w0 + (uint64_t)(0.249 * 100.0 * MB);
	us = ckpt_pace_sleep_us(&pacer, 0.5, now, wal);
	ck_assert_msg(us > 40000 && us < 40300, "slept %llu us", (unsigned long long)us);
	/* Without WAL written, only the clock counts. */
	ck_assert_uint_eq(ckpt_pace_sleep_us(&pacer, 0.5, now, w0), CKPT_PACE_MAX_SLEEP_US);
	/* The WAL position moving backwards (a new pacer for an older position) counts as none. */
	ck_assert(ckpt_pace_on_schedule(&pacer, 0.5, now, w0 - MB));
}
END_TEST

START_TEST(test_immediate_never_sleeps)
{
	ckpt_pace_start(&pacer, &opts, t0, w0, true);
	ck_assert(pacer.immediate);
	ck_assert(ckpt_pace_on_schedule(&pacer, 0.5, t0 + 10 * S, w0));
	ck_assert_uint_eq(ckpt_pace_sleep_us(&pacer, 0.5, t0 + 10 * S, w0), 0);
	ck_assert_uint_eq(ckpt_pace_sleep_us(&pacer, 1.0, t0, w0), 0);
}
END_TEST

START_TEST(test_clock_before_start)
{
	/* A clock read before the start (injected) is no time elapsed. */
	ck_assert(ckpt_pace_on_schedule(&pacer, 0.1, t0 - S, w0));
	ck_assert_uint_eq(ckpt_pace_sleep_us(&pacer, 0.1, t0 - S, w0), CKPT_PACE_MAX_SLEEP_US);
}
END_TEST

START_TEST(test_sort_items)
{
	enum { N = 1000 };
	ckpt_item *it = malloc(sizeof(*it) * N);
	ck_assert_ptr_nonnull(it);
	srand(42);
	for (int i = 0; i < N; i++)
		it[i] = (ckpt_item){
		    .rel = (wr_relid)(rand() % 7) + 1u, .blk = (wr_blkno)rand() % 5000u, .buf = i};
	it[3].rel = UINT32_MAX; /* no overflow in the comparison */
	it[4].blk = WR_INVALID_BLKNO - 1;
	ckpt_sort_items(it, N);
	for (int i = 1; i < N; i++) {
		bool ordered = it[i - 1].rel < it[i].rel ||
		               (it[i - 1].rel == it[i].rel && it[i - 1].blk < it[i].blk) ||
		               (it[i - 1].rel == it[i].rel && it[i - 1].blk == it[i].blk &&
		                it[i - 1].buf < it[i].buf);
		ck_assert_msg(ordered, "items %d and %d out of order", i - 1, i);
	}
	ck_assert_uint_eq(it[N - 1].rel, UINT32_MAX);
	ckpt_sort_items(it, 0);
	ckpt_sort_items(NULL, 0);
	free(it);
	ckpt_item two[2] = {{.rel = 2, .blk = 1, .buf = 5}, {.rel = 1, .blk = 9, .buf = 6}};
	ckpt_sort_items(two, 2);
	ck_assert_uint_eq(two[0].rel, 1);
	ck_assert_int_eq(two[1].buf, 5);
}
END_TEST

/* ---------------------------------------------------------------- scheduling */

#define NS 1000000000ULL

/*
 * checkpoint_timeout 6 s, a busy instance, and a spread checkpoint that
 * takes 5.4 s: timed checkpoints start every 6 s, counted from each start.
 * (Counted from each end, the second would start at 17.4 s.)
 */
START_TEST(test_sched_counts_from_start)
{
	ckpt_sched s;
	wr_lsn lsn = 1000;
	ckpt_sched_init(&s, 6 * NS, 0, lsn);
	lsn += 10; /* WAL written: the instance is busy */
	ck_assert_int_eq(ckpt_sched_decide(&s, 6 * NS - 1, 0, false, lsn), CKPT_ACT_WAIT);
	ck_assert_uint_eq(ckpt_sched_wait_ns(&s, 6 * NS - 1), 1);
	for (uint64_t start = 6 * NS; start < 60 * NS; start += 6 * NS) {
		ck_assert_int_eq(ckpt_sched_decide(&s, start, 0, false, lsn), CKPT_ACT_RUN);
		lsn += 10; /* written while the checkpoint ran */
		uint64_t end = start + 54 * NS / 10;
		ckpt_sched_ended(&s, lsn);
		ck_assert_int_eq(ckpt_sched_decide(&s, end, 0, false, lsn), CKPT_ACT_WAIT);
		ck_assert_uint_eq(ckpt_sched_wait_ns(&s, end), 6 * NS / 10);
		lsn += 10;
	}
}
END_TEST

/* An idle interval runs nothing, and the next one counts from its end. */
START_TEST(test_sched_idle)
{
	ckpt_sched s;
	ckpt_sched_init(&s, 6 * NS, 0, 1000);
	ck_assert_int_eq(ckpt_sched_decide(&s, 6 * NS, 0, false, 1000), CKPT_ACT_WAIT);
	ck_assert_uint_eq(ckpt_sched_wait_ns(&s, 6 * NS), 6 * NS);
	/* WAL arrives: the timed checkpoint comes a whole interval later. */
	ck_assert_int_eq(ckpt_sched_decide(&s, 11 * NS, 0, false, 2000), CKPT_ACT_WAIT);
	ck_assert_int_eq(ckpt_sched_decide(&s, 12 * NS, 0, false, 2000), CKPT_ACT_RUN);
}
END_TEST

/* Requests and WAL volume start one at once; a request with nothing to do is skipped. */
START_TEST(test_sched_requests)
{
	ckpt_sched s;
	ckpt_sched_init(&s, 6 * NS, 0, 1000);
	ck_assert_int_eq(ckpt_sched_decide(&s, NS, CKPT_REQUESTED, false, 1000), CKPT_ACT_SKIP);
	ck_assert_int_eq(ckpt_sched_decide(&s, NS, CKPT_REQUESTED | CKPT_FORCE, false, 1000),
	                 CKPT_ACT_RUN);
	ck_assert_int_eq(ckpt_sched_decide(&s, 2 * NS, CKPT_REQUESTED, false, 1500), CKPT_ACT_RUN);
	ckpt_sched_ended(&s, 1600);
	ck_assert_int_eq(ckpt_sched_decide(&s, 3 * NS, 0, true, 1700), CKPT_ACT_RUN);
	ckpt_sched_ended(&s, 1800);
	/* The timer restarted at the WAL-triggered start. */
	ck_assert_uint_eq(ckpt_sched_wait_ns(&s, 4 * NS), 5 * NS);
}
END_TEST

/*
 * gap_ns, what checkpoint_warning compares, runs from one checkpoint's start
 * to the next one's: an idle interval that restarts the timer or a skipped
 * request does not shorten it.
 */
START_TEST(test_sched_gap_between_runs)
{
	ckpt_sched s;
	ckpt_sched_init(&s, 6 * NS, 0, 1000);
	ck_assert_int_eq(ckpt_sched_decide(&s, 2 * NS, 0, true, 1100), CKPT_ACT_RUN);
	ck_assert_uint_eq(s.gap_ns, 2 * NS); /* from the start of the schedule */
	ckpt_sched_ended(&s, 1200);
	ck_assert_int_eq(ckpt_sched_decide(&s, 2 * NS + NS / 2, 0, true, 1300), CKPT_ACT_RUN);
	ck_assert_uint_eq(s.gap_ns, NS / 2);
	ckpt_sched_ended(&s, 1400);
	/* Idle through an interval (the timer restarts at 8.5 s), a request
	 * with nothing to do at 9 s, then WAL volume at 10 s. */
	ck_assert_int_eq(ckpt_sched_decide(&s, 8 * NS + NS / 2, 0, false, 1400), CKPT_ACT_WAIT);
	ck_assert_int_eq(ckpt_sched_decide(&s, 9 * NS, CKPT_REQUESTED, false, 1400), CKPT_ACT_SKIP);
	ck_assert_int_eq(ckpt_sched_decide(&s, 10 * NS, 0, true, 1500), CKPT_ACT_RUN);
	ck_assert_uint_eq(s.gap_ns, 10 * NS - (2 * NS + NS / 2));
}
END_TEST

static Suite *pacing_suite(void)
{
	Suite *s = suite_create("ckpt-pacing");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, test_start);
	tcase_add_test(tc, test_on_schedule_sleeps);
	tcase_add_test(tc, test_behind_by_time);
	tcase_add_test(tc, test_behind_by_wal);
	tcase_add_test(tc, test_wal_rate_shortens_sleep);
	tcase_add_test(tc, test_immediate_never_sleeps);
	tcase_add_test(tc, test_clock_before_start);
	tcase_add_test(tc, test_sort_items);
	tcase_add_test(tc, test_sched_counts_from_start);
	tcase_add_test(tc, test_sched_idle);
	tcase_add_test(tc, test_sched_requests);
	tcase_add_test(tc, test_sched_gap_between_runs);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(pacing_suite());
}
