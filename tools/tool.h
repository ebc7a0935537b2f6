/*
 * tool.h - what the `walrus` command's subcommands share: the context built
 * from the global options, opening the database, and exit codes.
 *
 * Exit codes are part of the command contract: 0 ok, 1 not found, 2 damage
 * or usage error, 3 engine error.
 */
#ifndef WALRUS_TOOL_H
#define WALRUS_TOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/common.h"
#include "walrus.h"

#define TOOL_EXIT_OK       0
#define TOOL_EXIT_NOTFOUND 1
#define TOOL_EXIT_USAGE    2
#define TOOL_EXIT_DAMAGE   2
#define TOOL_EXIT_ENGINE   3

typedef struct tool_ctx {
	const char *datadir;
	walrus_opts *opts;
	const char *space; /* -s NAME: the key space of put, get, del, incr, scan, load, bench */
} tool_ctx;

typedef int (*tool_fn)(tool_ctx *ctx, int argc, char **argv);
typedef struct tool_cmd {
	const char *name;
	tool_fn fn;
	const char *help;
} tool_cmd;

/* Prints "walrus: what: message" and returns the exit code for @code. */
int tool_fail(int code, const char *what);
/* Opens ctx->datadir (creating it when @create); prints and returns an exit code on failure. */
int tool_open(tool_ctx *ctx, bool create, walrus **db);
/* The key space -s names (*sp NULL without -s: the default space); prints
 * and returns an exit code when it does not exist (1) or is a bad name (2). */
int tool_space(tool_ctx *ctx, walrus *db, walrus_space **sp);
/* Decodes @n hex digits of @s into @out (n/2 bytes; may be @s itself); false if not hex. */
bool tool_hex_decode(const char *s, size_t n, char *out);
/* True when argv holds -h or --help. */
bool tool_wants_help(int argc, char **argv);

int cmd_serve(tool_ctx *ctx, int argc, char **argv);
int cmd_status(tool_ctx *ctx, int argc, char **argv);
int cmd_stop(tool_ctx *ctx, int argc, char **argv);
int cmd_standby(tool_ctx *ctx, int argc, char **argv);
int cmd_promote(tool_ctx *ctx, int argc, char **argv);
int cmd_slot(tool_ctx *ctx, int argc, char **argv);
int cmd_space(tool_ctx *ctx, int argc, char **argv);
int cmd_selftest(tool_ctx *ctx, int argc, char **argv);
int cmd_doctor(tool_ctx *ctx, int argc, char **argv);
int cmd_options(tool_ctx *ctx, int argc, char **argv);
int cmd_config(tool_ctx *ctx, int argc, char **argv);
/* "name value source" lines of @o; @sources indexed like the option table (cmd_config.c). */
void tool_print_settings(FILE *out, const wr_options *o, const uint8_t *sources,
                         bool instance_only);
int cmd_waldump(tool_ctx *ctx, int argc, char **argv);
int cmd_controldata(tool_ctx *ctx, int argc, char **argv);
int cmd_bench(tool_ctx *ctx, int argc, char **argv);
int cmd_bench_kv(tool_ctx *ctx, int argc, char **argv); /* -1: not a kv workload */
int cmd_bench_ckpt(tool_ctx *ctx, int argc, char **argv);
/* `walrus bench --compare A.json B.json [--json]` (bench_compare.c). */
int cmd_bench_compare(int argc, char **argv);
int cmd_put(tool_ctx *ctx, int argc, char **argv);
int cmd_get(tool_ctx *ctx, int argc, char **argv);
int cmd_del(tool_ctx *ctx, int argc, char **argv);
int cmd_incr(tool_ctx *ctx, int argc, char **argv);
int cmd_scan(tool_ctx *ctx, int argc, char **argv);
int cmd_load(tool_ctx *ctx, int argc, char **argv);
int cmd_checkpoint(tool_ctx *ctx, int argc, char **argv);
int cmd_compact(tool_ctx *ctx, int argc, char **argv);
int cmd_switch_wal(tool_ctx *ctx, int argc, char **argv);
int cmd_restore_point(tool_ctx *ctx, int argc, char **argv);
int cmd_stats(tool_ctx *ctx, int argc, char **argv);
int cmd_verify(tool_ctx *ctx, int argc, char **argv);
int cmd_backup(tool_ctx *ctx, int argc, char **argv);
int cmd_restore(tool_ctx *ctx, int argc, char **argv);

/* ---------------------------------------------------------------- walrus bench: kv runs */

/*
 * What `walrus bench` observes of a key-value run besides the workload's own
 * figures (cmd_bench_kv.c drives it):
 *   bench_monitor.c  a monitor process, attached to the instance, that
 *                    folds the clients' operations into one row per second
 *                    (ops, latency), samples the checkpointer (phase),
 *                    dirty buffers and WAL, prints --progress lines, and
 *                    collects the checkpoints of the run;
 *   bench_report.c   the summary, the one-line JSON, the CSV time series
 *                    and the SVG plot;
 *   bench_compare.c  --compare of two JSON results.
 * Times are seconds from the run's start: the first client's start.
 */
#define BENCH_MAX_ROWS  86400 /* per-second rows kept: a day */
#define BENCH_MAX_CKPTS 256   /* checkpoints kept per run */

/* Checkpoint phases seen during a row (bits). */
#define BENCH_PHASE_WRITE  0x1u
#define BENCH_PHASE_SYNC   0x2u
#define BENCH_PHASE_FINISH 0x4u

typedef struct bench_row {
	double t_s;  /* end of the interval */
	double secs; /* its length (the last one may be shorter) */
	uint64_t ops, writer_ops;
	double avg_us, stddev_us, p50_us, p99_us, max_us; /* from a histogram: +-3% */
	uint32_t phases;                                  /* BENCH_PHASE_* */
	uint32_t dirty;                                   /* dirty buffers at its end */
	double wal_since_redo_mb;                         /* WAL since the redo point at its end */
	uint64_t wal_bytes;                               /* WAL inserted during it */
} bench_row;

typedef struct bench_ckpt {
	char reason[16]; /* as the log says: time, wal, requested, immediate, shutdown */
	double start_s, write_end_s, sync_end_s, end_s;
	uint32_t buffers, nbuffers, files;
	double write_s, sync_s, total_s, longest_sync_s;
	uint64_t distance_kb;
	bool complete; /* false: still running when the run ended (start and phase only) */
} bench_ckpt;

/* Counters of the instance over the run (end - start). */
typedef struct bench_counters {
	uint64_t wal_records, wal_bytes, wal_fpis, wal_fpi_raw, wal_fpi_stored, wal_flushes;
	uint64_t wal_segs_created, wal_segs_on_demand;
	uint64_t ckpt_writes, bgwriter_writes, backend_writes, evictions, hits, reads;
} bench_counters;

/* What the monitor hands back after the run. */
typedef struct bench_series {
	uint32_t nbuffers;
	uint64_t kv_pages; /* the tree's pages at the end: the working set */
	bench_counters delta;
	uint32_t dirty_max;
	int nrows;
	int nckpts;        /* checkpoints that ended during the run (complete) */
	bool ckpt_running; /* and one still running at the end (ckpts[nckpts], incomplete) */
	uint64_t ckpts_failed;
	/* Rows with a checkpoint phase against the others. */
	double in_ckpt_s, out_ckpt_s;
	uint64_t in_ckpt_ops, out_ckpt_ops;
	double in_ckpt_p99_us, out_ckpt_p99_us;
	char options[8192]; /* the instance's effective options, a JSON object */
	bench_ckpt ckpts[BENCH_MAX_CKPTS + 1];
	bench_row rows[BENCH_MAX_ROWS];
} bench_series;

typedef struct bench_monitor bench_monitor;

/*
 * Forks the monitor: it opens ctx->datadir (creating it), then waits for
 * the first client's start. @expected: the clients that will call the
 * start and end hooks; @progress_s: seconds between progress lines on
 * stderr (0: none). Returns 0 or an exit code (message printed).
 */
int bench_monitor_start(tool_ctx *ctx, int expected, int progress_s, bench_monitor **out);
/* The hooks of peers.h, to call with bench_monitor_arg(m) as their argument. */
void *bench_monitor_arg(bench_monitor *m);
void bench_hook_start(void *arg, int client, uint64_t now_ns);
void bench_hook_op(void *arg, int client, uint64_t end_ns, uint64_t lat_ns, unsigned flags);
void bench_hook_end(void *arg, int client, uint64_t now_ns);
/* After the run: stops the monitor; *series stays valid until bench_monitor_free. */
int bench_monitor_stop(bench_monitor *m, const bench_series **series);
void bench_monitor_free(bench_monitor *m);

/* A run's settings and the workload's figures (pooled latencies, exact). */
typedef struct bench_kv_run {
	const char *workload, *mode, *datadir;
	int clients; /* measured client processes */
	uint64_t num;
	uint64_t key_size, value_size, seed;
	double duration_s; /* 0: --num operations */
	bool sync;
	uint64_t batch; /* fills: puts per commit (1: each its own) */
	uint64_t ops;
	double seconds;
	bool has_lat;
	double avg_us, stddev_us, p50_us, p99_us, p999_us, max_us;
	uint64_t writer_ops; /* readwhilewriting */
	double writer_p50_us, writer_p99_us, writer_max_us;
} bench_kv_run;

void bench_print_summary(FILE *f, const bench_kv_run *r, const bench_series *s);
void bench_print_json(FILE *f, const bench_kv_run *r, const bench_series *s);
/* Write the per-second rows / the plot; 0, or an exit code (message printed). */
int bench_write_csv(const char *path, const bench_kv_run *r, const bench_series *s);
int bench_write_svg(const char *path, const bench_kv_run *r, const bench_series *s);

#endif
