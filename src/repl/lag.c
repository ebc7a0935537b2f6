/*
 * lag.c - how long a standby takes to write, flush and replay the WAL sent
 * to it, in time (pg_stat_replication's write_lag, flush_lag, replay_lag),
 * kept by its sender.
 *
 * The sender notes (end LSN, when) for each WAL message it sends: it sends
 * only flushed WAL, as soon as it is flushed, so that is when the primary
 * made it durable.  A FEEDBACK that confirms a position passes the samples
 * at or below it: the lag of that kind is the time from the last one
 * passed to the FEEDBACK's arrival.  While a position stays behind what
 * was sent, the lag is at least the age of the oldest sample not passed
 * (a standby that stalls shows a lag that grows with each FEEDBACK, at
 * least one a second).  Once a position has confirmed everything sent and
 * a FEEDBACK passes nothing new, the standby is idle for that kind: lag 0
 * (where PostgreSQL shows NULL).
 *
 * A full ring (a standby far behind) extends its newest sample to the new
 * end instead of taking another: the bytes sent since then count from that
 * older time, an over-estimate rather than a lag that looks small.
 */
#include "repl/repl_int.h"

void repl_lag_sent(repl_lag *l, wr_lsn end, uint64_t now_ns)
{
	uint64_t oldest = l->recorded;
	for (int k = 0; k < REPL_LAG_KINDS; k++)
		oldest = WR_MIN(oldest, l->passed[k]);
	if (l->recorded - oldest == REPL_LAG_SAMPLES) {
		l->samples[(l->recorded - 1) % REPL_LAG_SAMPLES].lsn = end;
		return;
	}
	l->samples[l->recorded % REPL_LAG_SAMPLES] = (struct repl_lag_sample){end, now_ns};
	l->recorded++;
}

void repl_lag_confirmed(repl_lag *l, int kind, wr_lsn pos, wr_lsn sent, uint64_t now_ns)
{
	uint64_t *next = &l->passed[kind];
	bool passed = false;
	uint64_t when = 0;
	while (*next < l->recorded && l->samples[*next % REPL_LAG_SAMPLES].lsn <= pos) {
		when = l->samples[*next % REPL_LAG_SAMPLES].ns;
		(*next)++;
		passed = true;
	}
	if (passed)
		l->lag_ns[kind] = now_ns > when ? now_ns - when : 0;
	else if (pos >= sent)
		l->lag_ns[kind] = 0; /* idle */
	if (pos < sent && *next < l->recorded) {
		uint64_t waiting = l->samples[*next % REPL_LAG_SAMPLES].ns;
		if (now_ns > waiting)
			l->lag_ns[kind] = WR_MAX(l->lag_ns[kind], now_ns - waiting);
	}
}
