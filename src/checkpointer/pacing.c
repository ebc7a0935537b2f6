/*
 * pacing.c - when a checkpoint starts, spreading its writes over the
 * interval, and the sort order of the writes.
 *
 * Interface: see checkpointer.h ("pacing").
 *
 * The idea is PostgreSQL's IsCheckpointOnSchedule: a checkpoint that wrote a
 * fraction `progress` of its pages, scaled by checkpoint_completion_target,
 * is on schedule while that is no less than the fraction of
 * checkpoint_timeout elapsed since it started and no less than the fraction
 * of the WAL budget consumed since then.  The budget is the WAL distance
 * that requests the next checkpoint, max_wal_size / (1 + target): finishing
 * the writes by the time target of it is used leaves the rest of the WAL for
 * the sync phase and the next checkpoint's start.
 *
 * Unlike PostgreSQL (a fixed 100 ms nap whenever on schedule), the sleep is
 * the time until the schedule catches up with the progress made: by the
 * clock, or earlier if WAL keeps being written at the rate seen so far.  It
 * is capped so the checkpointer re-checks often (absorbing sync requests,
 * shutdown, a jump in WAL), and sleeps too short to be worth a wake-up are
 * skipped: the writes just run a little ahead.
 *
 * Every function is pure: clock and WAL position come from the caller.
 */
#include "checkpointer/checkpointer.h"

#include <stdlib.h>

void ckpt_pace_start(ckpt_pacer *p, const wr_options *o, uint64_t now_us, uint64_t wal_pos,
                     bool immediate)
{
	double target = o->checkpoint_completion_target;
	if (!(target > 0.0))
		target = 0.0;
	if (target > 1.0)
		target = 1.0;
	*p = (ckpt_pacer){
	    .immediate = immediate,
	    .start_us = now_us,
	    .wal_start = wal_pos,
	    .timeout_us = o->checkpoint_timeout_us > 0 ? (uint64_t)o->checkpoint_timeout_us : 1,
	    .wal_budget = o->max_wal_size > 0 ? (double)o->max_wal_size / (1.0 + target) : 0.0,
	    .target = target,
	};
}

static double clamp01(double x)
{
	if (!(x > 0.0))
		return 0.0; /* also NaN */
	return x > 1.0 ? 1.0 : x;
}

/* The scaled progress the schedule is compared with. */
static double scaled(const ckpt_pacer *p, double progress)
{
	return clamp01(progress) * p->target;
}

static double time_fraction(const ckpt_pacer *p, uint64_t now_us)
{
	if (now_us <= p->start_us)
		return 0.0;
	return (double)(now_us - p->start_us) / (double)p->timeout_us;
}

static double wal_fraction(const ckpt_pacer *p, uint64_t wal_pos)
{
	if (p->wal_budget <= 0.0 || wal_pos <= p->wal_start)
		return 0.0;
	return (double)(wal_pos - p->wal_start) / p->wal_budget;
}

bool ckpt_pace_on_schedule(const ckpt_pacer *p, double progress, uint64_t now_us, uint64_t wal_pos)
{
	double done = scaled(p, progress);
	return done >= time_fraction(p, now_us) && done >= wal_fraction(p, wal_pos);
}

uint64_t ckpt_pace_sleep_us(const ckpt_pacer *p, double progress, uint64_t now_us, uint64_t wal_pos)
{
	/* Never sleep when asked to hurry, or when behind: catching up comes first. */
	if (p->immediate || !ckpt_pace_on_schedule(p, progress, now_us, wal_pos))
		return 0;
	double done = scaled(p, progress);
	double tf = time_fraction(p, now_us);
	/* By the clock: until the elapsed fraction reaches the progress made. */
	double sleep = (done - tf) * (double)p->timeout_us;
	/* By WAL: when it would reach the progress at the rate seen so far. */
	double wf = wal_fraction(p, wal_pos);
	if (wf > 0.0 && now_us > p->start_us) {
		double per_us = wf / (double)(now_us - p->start_us);
		double wal_sleep = (done - wf) / per_us;
		if (wal_sleep < sleep)
			sleep = wal_sleep;
	}
	if (sleep > (double)CKPT_PACE_MAX_SLEEP_US)
		return CKPT_PACE_MAX_SLEEP_US;
	if (!(sleep >= (double)CKPT_PACE_MIN_SLEEP_US))
		return 0;
	return (uint64_t)sleep;
}

/* ---------------------------------------------------------------- scheduling */

void ckpt_sched_init(ckpt_sched *s, uint64_t period_ns, uint64_t now_ns, wr_lsn insert_lsn)
{
	*s = (ckpt_sched){.period_ns = period_ns ? period_ns : 1,
	                  .last_ns = now_ns,
	                  .last_end = insert_lsn,
	                  .run_ns = now_ns};
}

ckpt_action ckpt_sched_decide(ckpt_sched *s, uint64_t now_ns, uint32_t req, bool wal,
                              wr_lsn insert_lsn)
{
	bool timed = now_ns - s->last_ns >= s->period_ns;
	bool busy = insert_lsn != s->last_end;
	bool requested = (req & CKPT_REQUESTED) != 0;
	if (!requested && !wal && !(timed && busy)) {
		/* Idle through a whole interval: the next one counts from now. */
		if (timed)
			s->last_ns = now_ns;
		return CKPT_ACT_WAIT;
	}
	s->last_ns = now_ns; /* the start, whatever the checkpoint then takes */
	if (requested && !busy && !(req & CKPT_FORCE))
		return CKPT_ACT_SKIP;
	s->gap_ns = now_ns - s->run_ns;
	s->run_ns = now_ns;
	return CKPT_ACT_RUN;
}

void ckpt_sched_ended(ckpt_sched *s, wr_lsn insert_lsn)
{
	s->last_end = insert_lsn;
}

uint64_t ckpt_sched_wait_ns(const ckpt_sched *s, uint64_t now_ns)
{
	uint64_t gone = now_ns - s->last_ns;
	return gone < s->period_ns ? s->period_ns - gone : 1;
}

/* ---------------------------------------------------------------- sorting */

static int item_cmp(const void *a, const void *b)
{
	const ckpt_item *x = a, *y = b;
	if (x->rel != y->rel)
		return x->rel < y->rel ? -1 : 1;
	if (x->blk != y->blk)
		return x->blk < y->blk ? -1 : 1;
	/* The same block twice would be a bug upstream; keep the order total anyway. */
	return (x->buf > y->buf) - (x->buf < y->buf);
}

void ckpt_sort_items(ckpt_item *items, size_t n)
{
	if (n > 1)
		qsort(items, n, sizeof(*items), item_cmp);
}
