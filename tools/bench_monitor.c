/*
 * bench_monitor.c - what `walrus bench` sees of a key-value run besides the
 * workload's own figures: a time series of throughput and latency, the
 * checkpoints that ran, dirty buffers and WAL, and --progress lines.
 *
 * Interface routines:
 *   bench_monitor_start  maps the shared area and forks the monitor, which
 *                        opens the data directory as a backend of its own
 *   bench_hook_*         the workload library's hooks (peers.h), called in
 *                        the client processes: start, each operation, end
 *   bench_monitor_stop   after the run: the monitor finishes the series and
 *                        exits; the series stays readable
 *
 * The shared area (an anonymous MAP_SHARED mapping made before any client
 * is forked) holds, per client, a ring of BM_RING one-second slots: the
 * operations that ended in that second, their latency sum, sum of squares,
 * maximum and a log-linear histogram (BM_SUB buckets per power of two, so a
 * percentile read from it is within about 3%). A client is the only writer
 * of its slots; entering a new second it clears the slot it reuses and tags
 * it with the second. The monitor reads second k's slots once k is over
 * (plus BM_GRACE_NS), checking the tag before and after, so a slot reused
 * under it (the monitor BM_RING - 1 seconds late) is dropped, not mixed.
 * The run's time zero is the first client's start (that client also takes
 * the instance's counters then); the last client to end takes them again
 * and marks the end. The exact percentiles of the run come from the
 * library's latencies, not from here.
 *
 * The monitor samples every BM_SAMPLE_MS: the checkpointer's shared state
 * (counters started/done, the phase and when it began: ckpt_shared), the
 * dirty buffers (a scan of the descriptors' state words) and the WAL. A
 * checkpoint's phases come exactly from its own figures once it is done
 * (start, + write_s, + sync_s, + the rest), anchored at the start the
 * checkpointer published; while it runs, the phase shown is the published
 * one, or, as long as the checkpointer publishes only WRITE, "sync" once
 * the sync-request cycle (advanced as each sync phase begins) moved. Its
 * reason is read from the log line "checkpoint complete (REASON): ...
 * lsn=L" whose LSN is the checkpoint's (log_checkpoints=on), else taken
 * from the counters (requested, or time/wal).
 *
 * Errors: the monitor prints its own messages; its exit status says
 * whether it could attach.  It never kills anything: on EOF of its stop
 * pipe (the bench died) it detaches and exits.
 */
#include "tool.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "buffer/buffer.h"
#include "checkpointer/checkpointer.h"
#include "engine/engine.h"
#include "kv/kv.h"
#include "peers.h"
#include "wal/wal.h"

#define BM_RING      8 /* seconds a client's ring holds */
#define BM_SUB_BITS  5
#define BM_SUB       (1 << BM_SUB_BITS)
#define BM_BUCKETS   (BM_SUB * 34) /* up to 2^38 ns */
#define BM_CLIENTS   (PEERS_MAX_CLIENTS + 1)
#define BM_TICK_NS   1000000000ull /* one row */
#define BM_SAMPLE_MS 50
#define BM_GRACE_NS  100000000ull /* an op ended in second k is recorded by then */
#define BM_LOG_LINES 64           /* "checkpoint complete" lines remembered */

typedef struct bm_slot {
	_Atomic uint64_t tag; /* second + 1 held, 0 none */
	_Atomic uint64_t ops, writer_ops, sum_ns, max_ns;
	_Atomic double sumsq_us2;
	_Atomic uint32_t hist[BM_BUCKETS];
} bm_slot;

typedef struct bm_shared {
	_Atomic uint32_t starting; /* claimed by the first client to start */
	_Atomic uint64_t t0_ns;    /* its start: time zero (0 until published) */
	_Atomic uint32_t ended;    /* clients that ended */
	_Atomic uint64_t last_end_ns;
	_Atomic uint64_t t_end_ns; /* the run's end, once every client ended */
	uint32_t expected;
	bench_counters c0, c1; /* the instance's counters at start and end */
	bm_slot slots[BM_CLIENTS][BM_RING];
	bench_series series; /* the monitor's results */
} bm_shared;

struct bench_monitor {
	bm_shared *sh;
	size_t size;
	pid_t pid;
	int stop_fd; /* write end: a byte (or EOF) stops the monitor */
};

/* ---------------------------------------------------------------- histograms */

typedef struct bm_hist {
	uint64_t ops, writer_ops, sum_ns, max_ns;
	double sumsq_us2;
	uint64_t h[BM_BUCKETS];
} bm_hist;

static inline int bm_bucket(uint64_t ns)
{
	if (ns < BM_SUB)
		return (int)ns;
	int shift = 63 - __builtin_clzll(ns) - BM_SUB_BITS;
	int b = (shift + 1) * BM_SUB + (int)((ns >> shift) & (BM_SUB - 1));
	return b < BM_BUCKETS ? b : BM_BUCKETS - 1;
}

/* The middle of bucket @b, in ns. */
static double bm_bucket_mid(int b)
{
	if (b < BM_SUB)
		return b;
	int shift = b / BM_SUB - 1;
	double lo = (double)((uint64_t)(BM_SUB + b % BM_SUB) << shift);
	return lo + (double)(1ull << shift) / 2.0;
}

static void hist_merge(bm_hist *to, const bm_hist *from)
{
	to->ops += from->ops;
	to->writer_ops += from->writer_ops;
	to->sum_ns += from->sum_ns;
	to->max_ns = WR_MAX(to->max_ns, from->max_ns);
	to->sumsq_us2 += from->sumsq_us2;
	for (int b = 0; b < BM_BUCKETS; b++)
		to->h[b] += from->h[b];
}

/* Nearest-rank quantile @q (0..1) in us; the maximum caps the top bucket. */
static double hist_quantile_us(const bm_hist *h, double q)
{
	uint64_t n = 0, seen = 0;
	for (int b = 0; b < BM_BUCKETS; b++)
		n += h->h[b];
	if (n == 0)
		return 0;
	uint64_t rank = (uint64_t)ceil(q * (double)n);
	rank = rank ? rank : 1;
	for (int b = 0; b < BM_BUCKETS; b++) {
		seen += h->h[b];
		if (seen >= rank)
			return WR_MIN(bm_bucket_mid(b), (double)h->max_ns) / 1000.0;
	}
	return (double)h->max_ns / 1000.0;
}

static double hist_avg_us(const bm_hist *h)
{
	uint64_t n = 0;
	for (int b = 0; b < BM_BUCKETS; b++)
		n += h->h[b];
	return n ? (double)h->sum_ns / 1000.0 / (double)n : 0.0;
}

static double hist_stddev_us(const bm_hist *h)
{
	uint64_t n = 0;
	for (int b = 0; b < BM_BUCKETS; b++)
		n += h->h[b];
	if (n == 0)
		return 0;
	double avg = hist_avg_us(h), var = h->sumsq_us2 / (double)n - avg * avg;
	return var > 0 ? sqrt(var) : 0.0;
}

/* ---------------------------------------------------------------- the clients' hooks */

static void take_counters(bench_counters *c)
{
	wal_stats w;
	buf_stats b;
	wal_get_stats(&w);
	buf_get_stats(&b);
	*c = (bench_counters){
	    .wal_records = w.records,
	    .wal_bytes = w.bytes,
	    .wal_fpis = w.fpis,
	    .wal_fpi_raw = w.fpi_bytes_raw,
	    .wal_fpi_stored = w.fpi_bytes_stored,
	    .wal_flushes = w.flushes,
	    .wal_segs_created = w.segments_created,
	    .wal_segs_on_demand = w.segments_on_demand,
	    .ckpt_writes = b.ckpt_writes,
	    .bgwriter_writes = b.bgwriter_writes,
	    .backend_writes = b.backend_writes,
	    .evictions = b.evictions,
	    .hits = b.hits,
	    .reads = b.reads,
	};
}

void bench_hook_start(void *arg, int client, uint64_t now_ns)
{
	bm_shared *sh = arg;
	uint32_t no = 0;
	(void)client;
	if (atomic_compare_exchange_strong(&sh->starting, &no, 1)) {
		take_counters(&sh->c0);
		atomic_store(&sh->t0_ns, now_ns);
	}
	while (atomic_load(&sh->t0_ns) == 0) /* the first client is publishing it */
		;
}

void bench_hook_op(void *arg, int client, uint64_t end_ns, uint64_t lat_ns, unsigned flags)
{
	bm_shared *sh = arg;
	uint64_t t0 = atomic_load_explicit(&sh->t0_ns, memory_order_relaxed);
	uint64_t k = end_ns > t0 ? (end_ns - t0) / BM_TICK_NS : 0;
	bm_slot *s = &sh->slots[client][k % BM_RING];
	if (atomic_load_explicit(&s->tag, memory_order_relaxed) != k + 1) {
		atomic_store_explicit(&s->ops, 0, memory_order_relaxed);
		atomic_store_explicit(&s->writer_ops, 0, memory_order_relaxed);
		atomic_store_explicit(&s->sum_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&s->max_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&s->sumsq_us2, 0.0, memory_order_relaxed);
		for (int b = 0; b < BM_BUCKETS; b++)
			atomic_store_explicit(&s->hist[b], 0, memory_order_relaxed);
		atomic_store_explicit(&s->tag, k + 1, memory_order_release);
	}
#define BM_ADD(field, v)                                                                           \
	atomic_store_explicit(&s->field,                                                           \
	                      atomic_load_explicit(&s->field, memory_order_relaxed) + (v),         \
	                      memory_order_relaxed)
	if (flags & PEERS_OP_WRITER) {
		BM_ADD(writer_ops, 1);
		return;
	}
	if (flags & PEERS_OP_NOLAT) { /* a scan's keys, lat_ns of them */
		BM_ADD(ops, lat_ns);
		return;
	}
	BM_ADD(ops, 1);
	double us = (double)lat_ns / 1000.0;
	BM_ADD(sum_ns, lat_ns);
	BM_ADD(sumsq_us2, us * us);
	BM_ADD(hist[bm_bucket(lat_ns)], 1);
#undef BM_ADD
	if (lat_ns > atomic_load_explicit(&s->max_ns, memory_order_relaxed))
		atomic_store_explicit(&s->max_ns, lat_ns, memory_order_relaxed);
}

void bench_hook_end(void *arg, int client, uint64_t now_ns)
{
	bm_shared *sh = arg;
	uint64_t last = atomic_load(&sh->last_end_ns);
	(void)client;
	while (now_ns > last && !atomic_compare_exchange_weak(&sh->last_end_ns, &last, now_ns))
		;
	if (atomic_fetch_add(&sh->ended, 1) + 1 == sh->expected) {
		take_counters(&sh->c1);
		atomic_store(&sh->t_end_ns, WR_MAX(now_ns, atomic_load(&sh->last_end_ns)));
	}
}

/* ---------------------------------------------------------------- the monitor process */

typedef struct bm_logline {
	char lsn[32];
	char reason[16];
} bm_logline;

typedef struct bm_state {
	bm_shared *sh;
	bench_series *se;
	int progress_s;
	uint64_t t0;
	uint64_t rows_done; /* rows folded */
	uint64_t inst_done; /* rows whose end-of-interval instants were taken */
	bm_hist *row_hist;  /* per folded row */
	uint64_t row_cap;
	bm_hist prog;          /* since the last progress line */
	uint64_t wal_bytes_at; /* the WAL counter at the last instant */
	/* the checkpointer, as last seen */
	uint64_t started, done, failed, requested;
	wr_lsn last_lsn;          /* of the last checkpoint result seen */
	uint64_t cur_seq;         /* the running checkpoint's number (started), 0 none */
	uint64_t cur_start_ns;    /* its start as published (0: seen too late for it) */
	uint64_t cur_seen_ns;     /* when it was first seen */
	uint64_t cur_cycle;       /* the sync cycle when it was seen */
	uint64_t cur_ckpt_writes; /* pages written by checkpoints then */
	uint32_t phase;           /* BENCH_PHASE_* of the running checkpoint, 0 none */
	uint32_t dirty;           /* at the last sample taken while the run went on */
	double redo_mb;           /* WAL since the redo point then */
	/* the log */
	char log_path[PATH_MAX + 32];
	long log_off;
	bm_logline lines[BM_LOG_LINES];
	int nlines;
	bool final;
} bm_state;

/* Reads the log lines written since the last call; remembers the checkpoints'. */
static void read_log(bm_state *st)
{
	FILE *f = fopen(st->log_path, "r");
	char line[2048];
	if (f == NULL)
		return;
	if (fseek(f, st->log_off, SEEK_SET) != 0) {
		fclose(f);
		return;
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		size_t len = strlen(line);
		if (len == 0 || line[len - 1] != '\n') /* a line still being written */
			break;
		st->log_off += (long)len;
		const char *c = strstr(line, "checkpoint complete (");
		const char *l = strstr(line, "; lsn=");
		if (c == NULL || l == NULL)
			continue;
		bm_logline *ll = &st->lines[st->nlines++ % BM_LOG_LINES];
		c += strlen("checkpoint complete (");
		size_t rn = strcspn(c, ")");
		snprintf(ll->reason, sizeof(ll->reason), "%.*s", (int)WR_MIN(rn, 15), c);
		l += strlen("; lsn=");
		snprintf(ll->lsn, sizeof(ll->lsn), "%.*s", (int)strcspn(l, ", \n"), l);
	}
	fclose(f);
}

static void reason_of(bm_state *st, wr_lsn lsn, bool requested, char *out, size_t len)
{
	char want[32];
	snprintf(want, sizeof(want), WAL_LSN_FMT, WAL_LSN_ARGS(lsn));
	read_log(st);
	for (int i = 0; i < WR_MIN(st->nlines, BM_LOG_LINES); i++) {
		if (strcmp(st->lines[i].lsn, want) == 0) {
			snprintf(out, len, "%s", st->lines[i].reason);
			return;
		}
	}
	snprintf(out, len, "%s", requested ? "requested" : "time/wal");
}

static double rel_s(const bm_state *st, uint64_t ns)
{
	return ((double)ns - (double)st->t0) / 1e9;
}

/* OR @bit into the rows covering [from, to) seconds. */
static void mark_rows(bench_series *se, double from, double to, uint32_t bit)
{
	if (to <= from || to <= 0)
		return;
	for (long k = (long)WR_MAX(from, 0.0); k < BENCH_MAX_ROWS && (double)k < to; k++)
		se->rows[k].phases |= bit;
}

/* A checkpoint ended (result @r): keep it if it overlapped the run. */
static void ckpt_ended(bm_state *st, const ckpt_result *r, uint64_t now, bool requested)
{
	bench_series *se = st->se;
	uint64_t start = st->cur_start_ns && st->cur_seq == st->done + 1
	                     ? st->cur_start_ns
	                     : now - WR_MIN(now, (uint64_t)(r->total_s * 1e9));
	uint64_t t_end = atomic_load(&st->sh->t_end_ns);
	double total = r->total_s;
	if (st->t0 == 0 || start + (uint64_t)(total * 1e9) < st->t0 || (t_end && start > t_end) ||
	    se->nckpts >= BENCH_MAX_CKPTS)
		return;
	bench_ckpt *c = &se->ckpts[se->nckpts++];
	*c = (bench_ckpt){
	    .start_s = rel_s(st, start),
	    .buffers = r->bufs_written,
	    .nbuffers = r->nbuffers,
	    .files = r->sync_files,
	    .write_s = r->write_s,
	    .sync_s = r->sync_s,
	    .total_s = total,
	    .longest_sync_s = r->sync_longest_s,
	    .distance_kb = r->distance / 1024,
	    .complete = true,
	};
	c->write_end_s = c->start_s + r->write_s;
	c->sync_end_s = c->write_end_s + r->sync_s;
	c->end_s = c->start_s + total;
	reason_of(st, r->lsn, requested, c->reason, sizeof(c->reason));
	mark_rows(se, c->start_s, c->write_end_s, BENCH_PHASE_WRITE);
	mark_rows(se, c->write_end_s, c->sync_end_s, BENCH_PHASE_SYNC);
	mark_rows(se, c->sync_end_s, c->end_s, BENCH_PHASE_FINISH);
}

/* Samples the checkpointer: ends, starts, the running one's phase. */
static void sample_ckpt(bm_state *st, uint64_t now)
{
	ckpt_shared *c = ckpt_shared_state();
	uint64_t done = atomic_load(&c->done), failed = atomic_load(&c->failed);
	uint64_t requested = atomic_load(&c->num_requested);
	if (done > st->done) {
		ckpt_result r = c->last; /* written before done moved */
		if (failed > st->failed)
			st->se->ckpts_failed += failed - st->failed;
		else if (r.lsn != st->last_lsn) /* else a request found nothing to do */
			ckpt_ended(st, &r, now, requested > st->requested);
		st->last_lsn = r.lsn;
		st->done = done;
		st->failed = failed;
		st->requested = requested;
		st->cur_seq = 0;
	}
	uint64_t started = atomic_load(&c->started);
	uint32_t p1 = atomic_load(&c->phase);
	uint64_t since = atomic_load(&c->phase_start_ns);
	uint32_t p2 = atomic_load(&c->phase);
	st->started = started;
	if (started <= done) {
		st->phase = 0;
		return;
	}
	if (st->cur_seq != started) {
		ckpt_sync_stats ss;
		buf_stats b;
		ckpt_sync_get_stats(&ss);
		buf_get_stats(&b);
		st->cur_seq = started;
		st->cur_cycle = ss.cycle;
		st->cur_ckpt_writes = b.ckpt_writes;
		st->cur_seen_ns = now;
		st->cur_start_ns = p1 == CKPT_PHASE_WRITE && p1 == p2 ? since : 0;
	}
	if (p2 == CKPT_PHASE_SYNC)
		st->phase = BENCH_PHASE_SYNC;
	else if (p2 == CKPT_PHASE_FINISH)
		st->phase = BENCH_PHASE_FINISH;
	else {
		ckpt_sync_stats ss;
		ckpt_sync_get_stats(&ss);
		st->phase = ss.cycle != st->cur_cycle ? BENCH_PHASE_SYNC : BENCH_PHASE_WRITE;
	}
}

/* Reads client slot (second @k) into @h; false if it was reused meanwhile. */
static bool slot_read(bm_slot *s, uint64_t k, bm_hist *h)
{
	uint64_t tag = atomic_load_explicit(&s->tag, memory_order_acquire);
	if (tag != k + 1)
		return true; /* no operation ended in that second */
	bm_hist x = {
	    .ops = atomic_load_explicit(&s->ops, memory_order_relaxed),
	    .writer_ops = atomic_load_explicit(&s->writer_ops, memory_order_relaxed),
	    .sum_ns = atomic_load_explicit(&s->sum_ns, memory_order_relaxed),
	    .max_ns = atomic_load_explicit(&s->max_ns, memory_order_relaxed),
	    .sumsq_us2 = atomic_load_explicit(&s->sumsq_us2, memory_order_relaxed),
	};
	for (int b = 0; b < BM_BUCKETS; b++)
		x.h[b] = atomic_load_explicit(&s->hist[b], memory_order_relaxed);
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&s->tag, memory_order_relaxed) != tag)
		return false;
	hist_merge(h, &x);
	return true;
}

static const char *phase_name(uint32_t phase)
{
	return phase == BENCH_PHASE_WRITE    ? "write"
	       : phase == BENCH_PHASE_SYNC   ? "sync"
	       : phase == BENCH_PHASE_FINISH ? "finish"
	                                     : "-";
}

static void print_progress(bm_state *st, double t)
{
	const bm_hist *h = &st->prog;
	double secs = (double)st->progress_s;
	char ck[96] = "-", writer[64] = "";
	if (st->phase == BENCH_PHASE_WRITE) {
		buf_stats b;
		buf_get_stats(&b);
		snprintf(ck, sizeof(ck), "write (%llu pages written)",
		         (unsigned long long)(b.ckpt_writes - st->cur_ckpt_writes));
	} else if (st->phase) {
		snprintf(ck, sizeof(ck), "%s", phase_name(st->phase));
	}
	if (h->writer_ops)
		snprintf(writer, sizeof(writer), ", writer %.0f puts/s",
		         (double)h->writer_ops / secs);
	uint32_t nbuf = st->se->nbuffers ? st->se->nbuffers : 1;
	fprintf(stderr,
	        "progress: %.1f s, %.1f ops/s, lat %.1f us stddev %.1f us, p99 %.1f us%s; "
	        "checkpoint %s; dirty %u (%.1f%%); WAL since redo %.1f MB\n",
	        t, (double)h->ops / secs, hist_avg_us(h), hist_stddev_us(h),
	        hist_quantile_us(h, 0.99), writer, ck, st->dirty, 100.0 * st->dirty / nbuf,
	        st->redo_mb);
	fflush(stderr);
}

/* The instants that end row @k: dirty buffers, WAL. */
static void take_instant(bm_state *st, uint64_t k)
{
	wal_stats w;
	wal_get_stats(&w);
	/* At the end, the counters the last client took then. */
	uint64_t bytes = atomic_load(&st->sh->t_end_ns) ? st->sh->c1.wal_bytes : w.bytes;
	if (k < BENCH_MAX_ROWS) {
		bench_row *r = &st->se->rows[k];
		r->dirty = st->dirty;
		r->wal_since_redo_mb = st->redo_mb;
		r->wal_bytes = bytes - WR_MIN(bytes, st->wal_bytes_at);
	}
	st->wal_bytes_at = bytes;
}

/* Folds row @k from the clients' slots; @secs: its length. */
static void fold_row(bm_state *st, uint64_t k, double secs)
{
	bm_hist h = {0};
	for (uint32_t c = 0; c < st->sh->expected && c < BM_CLIENTS; c++)
		(void)slot_read(&st->sh->slots[c][k % BM_RING], k, &h);
	if (k < BENCH_MAX_ROWS) {
		bench_row *r = &st->se->rows[k];
		r->t_s = (double)k + secs;
		r->secs = secs;
		r->ops = h.ops;
		r->writer_ops = h.writer_ops;
		r->avg_us = hist_avg_us(&h);
		r->stddev_us = hist_stddev_us(&h);
		r->p50_us = hist_quantile_us(&h, 0.50);
		r->p99_us = hist_quantile_us(&h, 0.99);
		r->max_us = (double)h.max_ns / 1000.0;
		if (k >= st->row_cap) {
			uint64_t cap = WR_MAX(st->row_cap * 2, k + 64);
			bm_hist *rh = realloc(st->row_hist, cap * sizeof(bm_hist));
			if (rh == NULL) {
				fprintf(stderr,
				        "walrus bench: monitor: out of memory at row %llu\n",
				        (unsigned long long)k);
				exit(TOOL_EXIT_ENGINE);
			}
			st->row_hist = rh;
			st->row_cap = cap;
		}
		st->row_hist[k] = h;
		st->se->nrows = (int)k + 1;
	}
	hist_merge(&st->prog, &h);
	st->rows_done = k + 1;
	if (st->progress_s > 0 && (k + 1) % (uint64_t)st->progress_s == 0 && secs >= 1.0) {
		print_progress(st, (double)(k + 1));
		st->prog = (bm_hist){0};
	}
}

/* The run is over: the last rows, the running checkpoint, the totals. */
static void finish(bm_state *st, uint64_t t_end)
{
	bench_series *se = st->se;
	bm_shared *sh = st->sh;
	if (st->t0 == 0) /* nothing ran */
		st->t0 = t_end;
	uint64_t len = t_end > st->t0 ? t_end - st->t0 : 0;
	uint64_t rows = len ? (len + BM_TICK_NS - 1) / BM_TICK_NS : 1;
	/* A last row of a few ms (a run of whole seconds ends just past one)
	 * would only show noise: its operations stay in the run's figures. */
	if (rows > 1 && len - (rows - 1) * BM_TICK_NS < BM_TICK_NS / 10 &&
	    rows - 1 >= st->rows_done)
		rows--;
	for (uint64_t k = st->rows_done; k < rows; k++) {
		if (k >= st->inst_done)
			take_instant(st, k);
		fold_row(st, k, k + 1 < rows ? 1.0 : (double)(len - k * BM_TICK_NS) / 1e9);
	}
	sample_ckpt(st, wr_now_ns());
	if (st->phase && se->nckpts < BENCH_MAX_CKPTS + 1) {
		bench_ckpt *c = &se->ckpts[se->nckpts];
		*c = (bench_ckpt){
		    .start_s = rel_s(st, st->cur_start_ns ? st->cur_start_ns : st->cur_seen_ns),
		    .complete = false,
		};
		snprintf(c->reason, sizeof(c->reason), "%s", phase_name(st->phase));
		se->ckpt_running = true;
	}
	bm_hist in = {0}, out = {0};
	for (int k = 0; k < se->nrows; k++) {
		bool ck = se->rows[k].phases != 0;
		hist_merge(ck ? &in : &out, &st->row_hist[k]);
		*(ck ? &se->in_ckpt_s : &se->out_ckpt_s) += se->rows[k].secs;
		*(ck ? &se->in_ckpt_ops : &se->out_ckpt_ops) += se->rows[k].ops;
	}
	se->in_ckpt_p99_us = hist_quantile_us(&in, 0.99);
	se->out_ckpt_p99_us = hist_quantile_us(&out, 0.99);
	if (atomic_load(&sh->t_end_ns)) {
		bench_counters *d = &se->delta, *a = &sh->c0, *b = &sh->c1;
		*d = (bench_counters){
		    .wal_records = b->wal_records - a->wal_records,
		    .wal_bytes = b->wal_bytes - a->wal_bytes,
		    .wal_fpis = b->wal_fpis - a->wal_fpis,
		    .wal_fpi_raw = b->wal_fpi_raw - a->wal_fpi_raw,
		    .wal_fpi_stored = b->wal_fpi_stored - a->wal_fpi_stored,
		    .wal_flushes = b->wal_flushes - a->wal_flushes,
		    .wal_segs_created = b->wal_segs_created - a->wal_segs_created,
		    .wal_segs_on_demand = b->wal_segs_on_demand - a->wal_segs_on_demand,
		    .ckpt_writes = b->ckpt_writes - a->ckpt_writes,
		    .bgwriter_writes = b->bgwriter_writes - a->bgwriter_writes,
		    .backend_writes = b->backend_writes - a->backend_writes,
		    .evictions = b->evictions - a->evictions,
		    .hits = b->hits - a->hits,
		    .reads = b->reads - a->reads,
		};
	}
	kv_stats k;
	kv_get_stats(&k);
	se->kv_pages = k.pages;
	st->final = true;
}

/* One sample: the checkpointer, dirty buffers, rows that are over. */
static void sample(bm_state *st)
{
	uint64_t now = wr_now_ns();
	if (st->final) /* the run is over: nothing more belongs to it */
		return;
	/* Once the run ended, what follows (its checks, the shutdown) is not its
	 * state: the last row keeps the last values sampled during the run. */
	if (atomic_load(&st->sh->t_end_ns) == 0) {
		st->dirty = buf_count_dirty();
		st->redo_mb = (double)wal_since_redo() / 1048576.0;
		st->se->dirty_max = WR_MAX(st->se->dirty_max, st->dirty);
	}
	sample_ckpt(st, now);
	if (st->t0 == 0) {
		st->t0 = atomic_load(&st->sh->t0_ns);
		if (st->t0 == 0)
			return;
		st->wal_bytes_at = st->sh->c0.wal_bytes;
	}
	uint64_t t_end = atomic_load(&st->sh->t_end_ns);
	uint64_t upto = t_end ? WR_MIN(now, t_end) : now;
	uint64_t k_now = upto > st->t0 ? (upto - st->t0) / BM_TICK_NS : 0;
	if (k_now < BENCH_MAX_ROWS && st->phase)
		st->se->rows[k_now].phases |= st->phase;
	for (; st->inst_done < k_now; st->inst_done++)
		take_instant(st, st->inst_done);
	while (now >= st->t0 + (st->rows_done + 1) * BM_TICK_NS + BM_GRACE_NS &&
	       st->rows_done < st->inst_done)
		fold_row(st, st->rows_done, 1.0);
	if (t_end && !st->final)
		finish(st, t_end);
}

static int monitor_main(tool_ctx *ctx, bm_shared *sh, int progress_s, int ready_fd, int stop_fd)
{
	walrus *db;
	char code;
	int ex = tool_open(ctx, true, &db);
	code = (char)ex;
	if (write(ready_fd, &code, 1) != 1 || ex != 0)
		return ex ? ex : TOOL_EXIT_ENGINE;
	close(ready_fd);
	bm_state st = {.sh = sh, .se = &sh->series, .progress_s = progress_s};
	ckpt_shared *c = ckpt_shared_state();
	st.se->nbuffers = buf_nbuffers();
	wr_opts_json(&engine_sh()->opts, st.se->options, sizeof(st.se->options));
	st.done = atomic_load(&c->done);
	st.failed = atomic_load(&c->failed);
	st.requested = atomic_load(&c->num_requested);
	st.last_lsn = c->last.lsn;
	snprintf(st.log_path, sizeof(st.log_path), "%s/%s", engine_sh()->datadir, WR_LOG_FILE);
	FILE *lf = fopen(st.log_path, "r");
	if (lf != NULL && fseek(lf, 0, SEEK_END) == 0)
		st.log_off = ftell(lf);
	if (lf != NULL)
		fclose(lf);
	for (;;) {
		struct pollfd p = {.fd = stop_fd, .events = POLLIN};
		int n = poll(&p, 1, BM_SAMPLE_MS);
		if (n < 0 && errno != EINTR)
			break;
		if (!engine_running())
			break;
		sample(&st);
		if (n > 0)
			break; /* a stop byte, or EOF: the bench is done (or died) */
	}
	if (!st.final)
		finish(&st, atomic_load(&sh->t_end_ns) ? atomic_load(&sh->t_end_ns) : wr_now_ns());
	free(st.row_hist);
	int rc = walrus_close(db);
	return rc == WALRUS_OK ? 0 : tool_fail(rc, "monitor: close");
}

int bench_monitor_start(tool_ctx *ctx, int expected, int progress_s, bench_monitor **out)
{
	int ready[2], stop[2];
	char code;
	bench_monitor *m = calloc(1, sizeof(*m));
	*out = NULL;
	if (m == NULL)
		return tool_fail(WALRUS_ENOMEM, "bench monitor");
	m->size = sizeof(bm_shared);
	m->sh = mmap(NULL, m->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (m->sh == MAP_FAILED) {
		perror("walrus bench: mmap");
		free(m);
		return TOOL_EXIT_ENGINE;
	}
	m->sh->expected = (uint32_t)expected;
	if (pipe(ready) != 0 || pipe(stop) != 0) {
		perror("walrus bench: pipe");
		bench_monitor_free(m);
		return TOOL_EXIT_ENGINE;
	}
	fflush(NULL);
	m->pid = fork();
	if (m->pid < 0) {
		perror("walrus bench: fork");
		bench_monitor_free(m);
		return TOOL_EXIT_ENGINE;
	}
	if (m->pid == 0) {
		close(ready[0]);
		close(stop[1]);
		_exit(monitor_main(ctx, m->sh, progress_s, ready[1], stop[0]));
	}
	close(ready[1]);
	close(stop[0]);
	m->stop_fd = stop[1];
	ssize_t n = read(ready[0], &code, 1);
	close(ready[0]);
	if (n != 1 || code != 0) {
		int st;
		close(m->stop_fd);
		m->stop_fd = -1;
		waitpid(m->pid, &st, 0);
		m->pid = 0;
		bench_monitor_free(m);
		return n == 1 ? code : TOOL_EXIT_ENGINE;
	}
	*out = m;
	return 0;
}

void *bench_monitor_arg(bench_monitor *m)
{
	return m->sh;
}

int bench_monitor_stop(bench_monitor *m, const bench_series **series)
{
	int st = 0;
	if (m->stop_fd >= 0) {
		if (write(m->stop_fd, "s", 1) != 1)
			perror("walrus bench: monitor stop");
		close(m->stop_fd);
		m->stop_fd = -1;
	}
	if (m->pid > 0) {
		while (waitpid(m->pid, &st, 0) < 0 && errno == EINTR)
			;
		m->pid = 0;
	}
	*series = &m->sh->series;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "walrus bench: the monitor process failed\n");
		return TOOL_EXIT_ENGINE;
	}
	return 0;
}

void bench_monitor_free(bench_monitor *m)
{
	if (m == NULL)
		return;
	if (m->stop_fd > 0)
		close(m->stop_fd);
	if (m->pid > 0)
		waitpid(m->pid, NULL, 0);
	if (m->sh != NULL && m->sh != MAP_FAILED)
		munmap(m->sh, m->size);
	free(m);
}
