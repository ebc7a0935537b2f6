/*
 * cmd_bench.c - `walrus bench`: workloads run by N clients, timing every
 * operation. Each client opens its own handle, so each is a backend of the
 * instance: threads of this process (the default, as an application's
 * threads would be), or forked processes (--processes, as an application's
 * processes would be).
 *
 * The WAL workloads measure the commit path on its own:
 *   walcommit  insert one record of --value-size bytes, then wal_flush_to it:
 *              durable commits per second and their latency; with several
 *              clients, group commit shows as commits per flush > 1.
 *   walwrite   records of --value-size bytes (default 1 MiB), each flushed:
 *              WAL write bandwidth.
 * The buffer pool workloads read relation BENCH_REL, made once by the
 * parent (smgr_create + buf_extend, each page stamped with its block
 * number, not WAL-logged) and grown when a run needs more pages:
 *   bufhit     random buf_read + shared content lock + read a word + unlock +
 *              release over --pages pages (default: half of shared_buffers),
 *              read into the pool first (untimed), so every read is a hit:
 *              the cost of a hit, and how it scales with clients.
 *   bufscan    a relation of 4 x shared_buffers read end to end by each
 *              client through a read stream (buf_stream, --depth), again
 *              and again for the duration: pages/s and MB/s under
 *              io_method=sync (posix_fadvise ahead) or io_uring (reads in
 *              flight); --random reads random pages with buf_read instead.
 * Every client records latencies in a shared anonymous mapping (each
 * operation's for the WAL workloads; the mean of a batch of BENCH_BATCH
 * operations for the buffer workloads, whose operations are shorter than
 * the clock's resolution would measure well); the parent merges them for
 * the percentiles.
 */
#include "tool.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "buffer/buffer.h"
#include "peers.h"
#include "checkpointer/checkpointer.h"
#include "engine/engine.h"
#include "wal/wal.h"

#define BENCH_MAX_CLIENTS 64
#define BENCH_MAX_SAMPLES (1u << 20)          /* per client */
#define BENCH_REL         1000u               /* the buffer workloads' relation: DIR/base/1000 */
#define BENCH_STAMP       WR_PAGE_HEADER_SIZE /* where its pages keep their block number */
#define BENCH_BATCH       64                  /* buffer workloads: operations per latency sample */

enum bench_kind { BENCH_WALCOMMIT, BENCH_WALWRITE, BENCH_BUFHIT, BENCH_BUFSCAN };

typedef struct bench_args {
	const char *workload;
	int kind; /* enum bench_kind */
	int clients;
	double duration_s;
	uint64_t num; /* ops per client; 0 = run for the duration */
	uint32_t value_size;
	uint64_t pages; /* buffer workloads: relation pages used; 0 = the default */
	int depth;      /* bufscan: read stream depth */
	bool random;    /* bufscan: random buf_read instead of streams */
	bool processes; /* clients are forked processes (--processes), not threads */
	bool json;
} bench_args;

typedef struct client_result {
	uint64_t ops;
	uint64_t bytes;
	uint64_t start_ns, end_ns;
	uint64_t cpu_ns;        /* user + system CPU time of the run */
	uint64_t samples;       /* latency samples recorded */
	uint64_t passes;        /* bufscan: complete passes over the relation */
	uint64_t first_pass_ns; /* bufscan: duration of the first complete pass */
	int depth;              /* bufscan: the stream's depth after its caps */
	int status;
} client_result;

typedef struct bench_shared {
	client_result res[BENCH_MAX_CLIENTS];
	uint32_t lat_ns[]; /* BENCH_MAX_SAMPLES per client */
} bench_shared;

static void usage(void)
{
	printf("usage: walrus -D DIR [-o name=value ...] bench --workload W [options]\n\n"
	       "workloads:\n"
	       "  walcommit   insert a record and flush it (durable commits/s, latency)\n"
	       "  walwrite    large records, each flushed (WAL MB/s)\n"
	       "  bufhit      random reads of pages held by the buffer pool: pin, share-lock,\n"
	       "              read a word, unlock, release (ops/s, hit ratio, ns per hit)\n"
	       "  bufscan     sequential scans of a relation 4x shared_buffers through read\n"
	       "              streams, repeated (pages/s, MB/s; try -o io_method=io_uring)\n"
	       "  checkpoint  immediate checkpoints of N dirty pages: write and sync phases;\n"
	       "              --pages N, --num R (or --rounds R, default 3) checkpoints or\n"
	       "              as many as --duration S allows\n"
	       "  fillseq fillrandom fillsync readrandom readwhilewriting updaterandom scan\n"
	       "              key-value workloads, with --progress, --csv, --plot\n"
	       "              (walrus bench --workload updaterandom --help); readrandom and\n"
	       "              scan --snapshot read through a snapshot\n"
	       "  txn_transfer  transactions moving amounts between two of 10,000 accounts\n"
	       "              (walrus bench --workload txn_transfer --help)\n\n"
	       "walrus bench --compare A.json B.json [--json]: two --json results side by side\n\n"
	       "options:\n"
	       "  --clients N       clients (default 1, at most %d), each with its own handle\n"
	       "  --threads         the clients are threads of this process (the default)\n"
	       "  --processes       the clients are forked processes\n"
	       "  --duration S      seconds to run (default 10; every workload takes it)\n"
	       "  --num N           operations per client instead of a duration (every\n"
	       "                    workload takes it; the key-value ones run N by default)\n"
	       "  --value-size B    record payload bytes (walcommit 100, walwrite 1048576)\n"
	       "  --pages N         bufhit/bufscan: relation pages to use (bufhit: half of\n"
	       "                    shared_buffers, bufscan: 4x shared_buffers)\n"
	       "  --depth N         bufscan: read stream depth (default 32)\n"
	       "  --random          bufscan: random buf_read of single pages instead\n"
	       "  --json            print a one-line JSON summary last\n"
	       "  -o name=value     (before `bench`) any engine option, repeatable, e.g.\n"
	       "                    -o checkpoint_timeout=30s (see `walrus options`)\n\n"
	       "key-value workloads (fillseq ... scan), besides --clients, --threads,\n"
	       "--processes, --duration, --num, --value-size, --json (details: walrus bench\n"
	       "--workload updaterandom --help):\n"
	       "  --key-size K      key bytes, K decimal digits (default %d, %d..%d)\n"
	       "  --sync            durable puts: each waits for its WAL flush\n"
	       "  --batch N         fillseq, fillrandom: N puts per commit, one walrus batch\n"
	       "                    (default 1)\n"
	       "  --seed S          mixed into every random order and key stream (default 0)\n"
	       "  --progress N      a line on stderr every N seconds: ops/s, latency,\n"
	       "                    checkpoint phase, dirty buffers, WAL since the redo point\n"
	       "  --csv FILE        write the per-second time series\n"
	       "  --plot FILE.svg   plot throughput, p99 and dirty buffers per second, with\n"
	       "                    the checkpoints' write and sync phases shaded\n"
	       "  --reuse           fill the database already in DIR\n\n"
	       "The buffer workloads use relation %u (DIR/base/%u), created and filled\n"
	       "by the first run that needs it (not WAL-logged: use a bench directory).\n",
	       BENCH_MAX_CLIENTS, PEERS_KEY_SIZE, PEERS_MIN_KEY_SIZE, PEERS_MAX_KEY_SIZE, BENCH_REL,
	       BENCH_REL);
}

/* Every workload, for the messages: this file's, checkpoint's, the kv ones. */
static void print_workloads(FILE *f)
{
	fputs("walcommit, walwrite, bufhit, bufscan, checkpoint", f);
	for (int i = 0; i < PEERS_WORKLOAD_COUNT; i++)
		fprintf(f, ", %s", peers_workload_names[i]);
}

/* The key-value workloads' own options. */
static bool kv_option(const char *k)
{
	static const char *const kv[] = {"--key-size", "--sync", "--seed",  "--progress",
	                                 "--csv",      "--plot", "--reuse", "--batch"};
	for (size_t i = 0; i < WR_ARRAY_LEN(kv); i++)
		if (strcmp(k, kv[i]) == 0)
			return true;
	return false;
}

static int parse_args(int argc, char **argv, bench_args *a)
{
	*a = (bench_args){.clients = 1, .duration_s = 10, .depth = 32};
	bool set_mode = false;
	for (int i = 1; i < argc; i++) {
		const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		bool has = v != NULL;
		if (strcmp(k, "--json") == 0) {
			a->json = true;
			continue;
		}
		if (strcmp(k, "--random") == 0) {
			a->random = true;
			continue;
		}
		if (strcmp(k, "--threads") == 0 || strcmp(k, "--processes") == 0) {
			bool processes = strcmp(k, "--processes") == 0;
			if (set_mode && a->processes != processes) {
				fprintf(
				    stderr,
				    "walrus bench: --threads and --processes exclude each other\n");
				return TOOL_EXIT_USAGE;
			}
			a->processes = processes;
			set_mode = true;
			continue;
		}
		if (kv_option(k)) {
			fprintf(stderr,
			        "walrus bench: %s is an option of the key-value workloads (fillseq "
			        "... scan), not of %s\n",
			        k, a->workload != NULL ? a->workload : "this workload");
			return TOOL_EXIT_USAGE;
		}
		if (!has) {
			fprintf(stderr, "walrus bench: %s needs a value\n", k);
			return TOOL_EXIT_USAGE;
		}
		i++;
		char *end;
		errno = 0;
		if (strcmp(k, "--workload") == 0)
			a->workload = v;
		else if (strcmp(k, "--clients") == 0)
			a->clients = (int)strtol(v, &end, 10);
		else if (strcmp(k, "--duration") == 0)
			a->duration_s = strtod(v, &end);
		else if (strcmp(k, "--num") == 0)
			a->num = strtoull(v, &end, 10);
		else if (strcmp(k, "--value-size") == 0)
			a->value_size = (uint32_t)strtoul(v, &end, 10);
		else if (strcmp(k, "--pages") == 0)
			a->pages = strtoull(v, &end, 10);
		else if (strcmp(k, "--depth") == 0)
			a->depth = (int)strtol(v, &end, 10);
		else {
			fprintf(stderr, "walrus bench: unknown option \"%s\"\n", k);
			return TOOL_EXIT_USAGE;
		}
		if (strcmp(k, "--workload") != 0 &&
		    (errno != 0 || end == v || *end != '\0' || v[0] == '-')) {
			fprintf(stderr, "walrus bench: bad value for %s: \"%s\"\n", k, v);
			return TOOL_EXIT_USAGE;
		}
	}
	static const char *const names[] = {"walcommit", "walwrite", "bufhit", "bufscan"};
	if (a->workload == NULL) {
		fputs("walrus bench: --workload is required: ", stderr);
		print_workloads(stderr);
		fputs(" (walrus bench --help)\n", stderr);
		return TOOL_EXIT_USAGE;
	}
	a->kind = -1;
	for (int i = 0; i < (int)WR_ARRAY_LEN(names); i++)
		if (strcmp(a->workload, names[i]) == 0)
			a->kind = i;
	if (a->kind < 0) {
		fprintf(stderr, "walrus bench: unknown workload \"%s\": the workloads are ",
		        a->workload);
		print_workloads(stderr);
		fputc('\n', stderr);
		return TOOL_EXIT_USAGE;
	}
	if (a->value_size == 0)
		a->value_size = a->kind == BENCH_WALWRITE ? 1048576 : 100;
	if (a->clients < 1 || a->clients > BENCH_MAX_CLIENTS || a->duration_s <= 0 ||
	    a->value_size > 64u * 1024 * 1024 || a->depth < 1 || a->depth > BUF_STREAM_MAX_DEPTH ||
	    a->pages > WR_INVALID_BLKNO - 1) {
		fprintf(stderr,
		        "walrus bench: --clients 1..%d, --duration > 0, --value-size <= "
		        "64MiB, --depth 1..%d, --pages < 2^32 - 1\n",
		        BENCH_MAX_CLIENTS, BUF_STREAM_MAX_DEPTH);
		return TOOL_EXIT_USAGE;
	}
	return 0;
}

/* ---------------------------------------------------------------- clients */

static void add_sample(client_result *r, uint32_t *lat, uint64_t ns)
{
	if (r->samples < BENCH_MAX_SAMPLES)
		lat[r->samples++] = (uint32_t)WR_MIN(ns, UINT32_MAX);
}

static bool client_done(const bench_args *a, const client_result *r, uint64_t now)
{
	return a->num ? r->ops >= a->num : now >= r->start_ns + (uint64_t)(a->duration_s * 1e9);
}

static int client_wal(const bench_args *a, client_result *r, uint32_t *lat, const char *payload)
{
	for (;;) {
		uint64_t t0 = wr_now_ns();
		if (client_done(a, r, t0))
			break;
		wal_begin();
		wal_register_data(payload, a->value_size);
		wr_lsn end = wal_insert(RM_XLOG, XLOG_NOOP);
		wal_flush_to(end);
		add_sample(r, lat, wr_now_ns() - t0);
		r->ops++;
		r->bytes += a->value_size;
	}
	return 0;
}

static uint64_t rng_next(uint64_t *x)
{
	/* xorshift64*: cheap next to a buffer hit, and good enough to spread reads. */
	*x ^= *x >> 12;
	*x ^= *x << 25;
	*x ^= *x >> 27;
	return *x * 0x2545F4914F6CDD1DULL;
}

/* Share-locks pinned @buf, checks its stamp is @blk, unlocks and releases it. */
static int bench_touch(int buf, wr_blkno blk)
{
	uint32_t stamp;
	buf_lock(buf, false);
	memcpy(&stamp, (const char *)buf_page(buf) + BENCH_STAMP, sizeof(stamp));
	buf_unlock(buf);
	buf_release(buf);
	if (stamp == blk)
		return 0;
	fprintf(stderr, "walrus bench: block %u of relation %u holds the stamp of block %u\n", blk,
	        BENCH_REL, stamp);
	return 3;
}

/* BENCH_BATCH random page reads over [0, pages): one latency sample. */
static int random_batch(client_result *r, uint32_t *lat, uint64_t pages, uint64_t *seed)
{
	uint64_t t0 = wr_now_ns();
	for (int i = 0; i < BENCH_BATCH; i++) {
		wr_blkno blk = (wr_blkno)(rng_next(seed) % pages);
		int buf;
		int rc = buf_read(BENCH_REL, blk, &buf);
		if (rc != WALRUS_OK) {
			fprintf(stderr, "walrus bench: %s\n", walrus_errmsg());
			return 3;
		}
		if (bench_touch(buf, blk) != 0)
			return 3;
	}
	add_sample(r, lat, (wr_now_ns() - t0) / BENCH_BATCH);
	r->ops += BENCH_BATCH;
	r->bytes += (uint64_t)BENCH_BATCH * WR_PAGE_SIZE;
	return 0;
}

/* One pass of a read stream over [0, pages), cut short at the end of the run. */
static int scan_pass(const bench_args *a, client_result *r, uint32_t *lat, uint64_t pages)
{
	buf_stream *s;
	int buf, rc, ex = 0;
	wr_blkno blk;
	uint64_t t0 = wr_now_ns(), tb = t0;
	int in_batch = 0;
	bool cut = false;
	rc = buf_stream_open(&s, BENCH_REL, 0, (wr_blkno)pages, a->depth);
	if (rc != WALRUS_OK) {
		fprintf(stderr, "walrus bench: %s\n", walrus_errmsg());
		return 3;
	}
	buf_stream_stats st;
	buf_stream_get_stats(s, &st);
	r->depth = st.depth;
	while ((rc = buf_stream_next(s, &buf, &blk)) == WALRUS_OK) {
		if (bench_touch(buf, blk) != 0) {
			ex = 3;
			break;
		}
		r->ops++;
		r->bytes += WR_PAGE_SIZE;
		if (++in_batch == BENCH_BATCH) {
			uint64_t now = wr_now_ns();
			add_sample(r, lat, (now - tb) / BENCH_BATCH);
			tb = now;
			in_batch = 0;
			if (client_done(a, r, now)) {
				cut = true;
				break;
			}
		}
	}
	buf_stream_close(s);
	if (ex == 0 && !cut && rc != WALRUS_ENOTFOUND) {
		fprintf(stderr, "walrus bench: %s\n", walrus_errmsg());
		ex = 3;
	}
	if (ex == 0 && !cut && r->passes++ == 0)
		r->first_pass_ns = wr_now_ns() - t0;
	return ex;
}

static int client_buf(const bench_args *a, client_result *r, uint32_t *lat, uint64_t pages, int id)
{
	uint64_t seed = 0x9E3779B97F4A7C15ULL * (uint64_t)(id + 1) ^ wr_now_ns();
	seed = seed ? seed : 1;
	while (!client_done(a, r, wr_now_ns())) {
		int rc = a->kind == BENCH_BUFSCAN && !a->random
		             ? scan_pass(a, r, lat, pages)
		             : random_batch(r, lat, pages, &seed);
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* The client's user + system CPU time (its process's, or its thread's): on a
 * shared machine, unlike the wall clock, it does not count the time other
 * processes ran instead. */
static uint64_t cpu_time_ns(bool thread)
{
	struct rusage ru;
	if (getrusage(thread ? RUSAGE_THREAD : RUSAGE_SELF, &ru) != 0)
		return 0;
	return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000u +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000u;
}

static int client_main(tool_ctx *ctx, const bench_args *a, bench_shared *sh, int id, int ready,
                       int go, uint64_t pages)
{
	walrus *db;
	char c;
	client_result *r = &sh->res[id];
	if (walrus_open(ctx->datadir, ctx->opts, &db) != WALRUS_OK) {
		fprintf(stderr, "walrus bench: client %d: %s\n", id, walrus_errmsg());
		(void)!write(ready, "x", 1); /* ready all the same: the parent counts on it */
		return 3;
	}
	bool wal = a->kind == BENCH_WALCOMMIT || a->kind == BENCH_WALWRITE;
	char *payload = wal ? malloc(a->value_size) : NULL;
	for (uint32_t i = 0; payload != NULL && i < a->value_size; i++)
		payload[i] = (char)(i * 7 + id);
	if (write(ready, "r", 1) != 1 || read(go, &c, 1) != 1 || (wal && payload == NULL)) {
		free(payload);
		(void)walrus_close(db);
		return 3;
	}
	bool thread = !a->processes;
	uint64_t cpu0 = cpu_time_ns(thread);
	r->start_ns = wr_now_ns();
	uint32_t *lat = sh->lat_ns + (size_t)id * BENCH_MAX_SAMPLES;
	int ex = wal ? client_wal(a, r, lat, payload) : client_buf(a, r, lat, pages, id);
	r->end_ns = wr_now_ns();
	r->cpu_ns = cpu_time_ns(thread) - cpu0;
	free(payload);
	if (walrus_close(db) != WALRUS_OK) {
		fprintf(stderr, "walrus bench: client %d: %s\n", id, walrus_errmsg());
		ex = 3;
	}
	return ex;
}

/* A client thread's orders, and its exit code. */
typedef struct client_thread {
	tool_ctx *ctx;
	const bench_args *a;
	bench_shared *sh;
	int id, ready, go;
	uint64_t pages;
	int ex;
} client_thread;

static void *client_thread_main(void *arg)
{
	client_thread *t = arg;
	t->ex = client_main(t->ctx, t->a, t->sh, t->id, t->ready, t->go, t->pages);
	return NULL;
}

static int run_clients(tool_ctx *ctx, const bench_args *a, bench_shared *sh, uint64_t pages)
{
	int ready[2], go[2];
	pid_t pids[BENCH_MAX_CLIENTS];
	pthread_t tids[BENCH_MAX_CLIENTS];
	client_thread th[BENCH_MAX_CLIENTS];
	int started = 0, failed = 0;
	if (pipe(ready) != 0 || pipe(go) != 0) {
		perror("walrus bench: pipe");
		return TOOL_EXIT_ENGINE;
	}
	fflush(NULL);
	for (int i = 0; i < a->clients; i++) {
		if (!a->processes) {
			th[i] = (client_thread){.ctx = ctx,
			                        .a = a,
			                        .sh = sh,
			                        .id = i,
			                        .ready = ready[1],
			                        .go = go[0],
			                        .pages = pages};
			int rc = pthread_create(&tids[i], NULL, client_thread_main, &th[i]);
			if (rc != 0) {
				fprintf(stderr, "walrus bench: pthread_create: %s\n", strerror(rc));
				failed++;
				break;
			}
			started++;
			continue;
		}
		pids[i] = fork();
		if (pids[i] < 0) {
			perror("walrus bench: fork");
			return TOOL_EXIT_ENGINE;
		}
		if (pids[i] == 0)
			_exit(client_main(ctx, a, sh, i, ready[1], go[0], pages));
		started++;
	}
	char c;
	for (int i = 0; i < started; i++)
		if (read(ready[0], &c, 1) != 1)
			break;
	for (int i = 0; i < started; i++)
		if (write(go[1], "g", 1) != 1)
			break;
	for (int i = 0; i < started; i++) {
		if (!a->processes) {
			(void)pthread_join(tids[i], NULL);
			failed += th[i].ex != 0;
			continue;
		}
		int st;
		while (waitpid(pids[i], &st, 0) < 0 && errno == EINTR)
			;
		failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	close(ready[0]);
	close(ready[1]);
	close(go[0]);
	close(go[1]);
	return failed ? TOOL_EXIT_ENGINE : 0;
}

/* ---------------------------------------------------------------- report */

static int cmp_u32(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
	return (a > b) - (a < b);
}

typedef struct bench_summary {
	uint64_t ops, bytes, passes, cpu_ns;
	double secs, ops_s, mb_s, avg_ns, first_pass_s;
	uint32_t p50, p99, p999, max; /* ns */
	int depth;
} bench_summary;

static void summarise(const bench_args *a, bench_shared *sh, bench_summary *s)
{
	uint64_t first = UINT64_MAX, last = 0, n = 0, nsamples = 0;
	double sum = 0;
	memset(s, 0, sizeof(*s));
	for (int i = 0; i < a->clients; i++) {
		client_result *r = &sh->res[i];
		s->ops += r->ops;
		s->bytes += r->bytes;
		s->passes += r->passes;
		s->cpu_ns += r->cpu_ns;
		s->depth = WR_MAX(s->depth, r->depth);
		/* The slowest client's first pass: what a cold cache costs everyone. */
		s->first_pass_s = WR_MAX(s->first_pass_s, (double)r->first_pass_ns / 1e9);
		nsamples += r->samples;
		first = WR_MIN(first, r->start_ns);
		last = WR_MAX(last, r->end_ns);
	}
	uint32_t *all = malloc(sizeof(uint32_t) * (nsamples ? nsamples : 1));
	for (int i = 0; all && i < a->clients; i++) {
		for (uint64_t j = 0; j < sh->res[i].samples; j++) {
			all[n++] = sh->lat_ns[(size_t)i * BENCH_MAX_SAMPLES + j];
			sum += all[n - 1];
		}
	}
	s->secs = last > first ? (double)(last - first) / 1e9 : 0;
	s->ops_s = s->secs > 0 ? (double)s->ops / s->secs : 0;
	s->mb_s = s->secs > 0 ? (double)s->bytes / 1048576.0 / s->secs : 0;
	if (all && n > 0) {
		qsort(all, n, sizeof(uint32_t), cmp_u32);
		s->avg_ns = sum / (double)n;
		s->p50 = all[n / 2];
		s->p99 = all[(size_t)((double)n * 0.99)];
		s->p999 = all[(size_t)((double)n * 0.999)];
		s->max = all[n - 1];
	}
	free(all);
}

static void report_wal(tool_ctx *ctx, const bench_args *a, const bench_summary *s,
                       const wal_stats *w0, const wal_stats *w1)
{
	uint64_t flushes = w1->flushes - w0->flushes;
	char sync[32], io[32];
	wr_opts_get(&engine_sh()->opts, "wal_sync_method", sync, sizeof(sync));
	wr_opts_get(&engine_sh()->opts, "io_method", io, sizeof(io));
	printf("%s: %d client(s) (%s), %s%s, io_method=%s, %u-byte records\n", a->workload,
	       a->clients, a->processes ? "processes" : "threads", sync,
	       w1->direct_io ? " + O_DIRECT" : "", io, a->value_size);
	printf("  %llu ops in %.2f s: %.0f ops/s, %.1f MB/s\n", (unsigned long long)s->ops, s->secs,
	       s->ops_s, s->mb_s);
	printf("  latency us: avg %.0f  p50 %u  p99 %u  p99.9 %u  max %u\n", s->avg_ns / 1000,
	       s->p50 / 1000, s->p99 / 1000, s->p999 / 1000, s->max / 1000);
	uint64_t flush_ns = w1->flush_ns - w0->flush_ns;
	printf("  WAL: %llu flushes, %.2f commits per flush, %.0f us per write+flush\n",
	       (unsigned long long)flushes, flushes ? (double)s->ops / (double)flushes : 0.0,
	       flushes ? (double)flush_ns / 1000.0 / (double)flushes : 0.0);
	if (!a->json)
		return;
	char opts[8192];
	wr_opts_json(&engine_sh()->opts, opts, sizeof(opts));
	printf("{\"workload\":\"%s\",\"clients\":%d,\"clients_mode\":\"%s\",\"value_size\":%u,"
	       "\"ops\":%llu,\"seconds\":%.3f,\"ops_per_s\":%.1f,\"MBps\":%.2f,\"avg_us\":%.1f,"
	       "\"p50_us\":%u,"
	       "\"p99_us\":%u,\"p999_us\":%u,\"max_us\":%u,\"wal_flushes\":%llu,"
	       "\"datadir\":\"%s\",\"options\":%s}\n",
	       a->workload, a->clients, a->processes ? "processes" : "threads", a->value_size,
	       (unsigned long long)s->ops, s->secs, s->ops_s, s->mb_s, s->avg_ns / 1000,
	       s->p50 / 1000, s->p99 / 1000, s->p999 / 1000, s->max / 1000,
	       (unsigned long long)flushes, ctx->datadir, opts);
}

static void report_buf(tool_ctx *ctx, const bench_args *a, const bench_summary *s, uint64_t pages,
                       double setup_s, const buf_stats *b0, const buf_stats *b1)
{
	uint64_t hits = b1->hits - b0->hits, reads = b1->reads - b0->reads;
	double ratio = hits + reads ? 100.0 * (double)hits / (double)(hits + reads) : 0.0;
	double io_wait_ms = (double)(b1->io_wait_ns - b0->io_wait_ns) / 1e6;
	double lock_wait_ms = (double)(b1->content_wait_ns - b0->content_wait_ns) / 1e6;
	bool scan = a->kind == BENCH_BUFSCAN && !a->random;
	char io[32];
	wr_opts_get(&engine_sh()->opts, "io_method", io, sizeof(io));
	printf("%s: %d client(s) (%s), %s over %llu pages (%.0f MB) of relation %u; shared_buffers "
	       "%u pages (%.0f MB)",
	       a->workload, a->clients, a->processes ? "processes" : "threads",
	       scan ? "sequential read streams" : "random page reads", (unsigned long long)pages,
	       (double)pages * WR_PAGE_SIZE / 1048576.0, BENCH_REL, b1->nbuffers,
	       (double)b1->nbuffers * WR_PAGE_SIZE / 1048576.0);
	if (a->kind == BENCH_BUFSCAN)
		printf(", io_method=%s", io);
	if (scan)
		printf(", depth %d (%d after caps)", a->depth, s->depth);
	printf("\n");
	if (setup_s > 0)
		printf("  relation grown to %llu pages in %.2f s first\n",
		       (unsigned long long)pages, setup_s);
	if (a->kind == BENCH_BUFHIT)
		printf("  %llu ops in %.2f s: %.0f ops/s\n", (unsigned long long)s->ops, s->secs,
		       s->ops_s);
	else
		printf("  %llu pages in %.2f s: %.0f pages/s, %.1f MB/s\n",
		       (unsigned long long)s->ops, s->secs, s->ops_s, s->mb_s);
	if (scan)
		printf("  %llu complete passes; first pass %.3f s (%.1f MB/s)\n",
		       (unsigned long long)s->passes, s->first_pass_s,
		       s->first_pass_s > 0
		           ? (double)pages * WR_PAGE_SIZE / 1048576.0 / s->first_pass_s
		           : 0.0);
	printf("  latency ns per %s (means of batches of %d): avg %.1f  p50 %u  p99 %u  p99.9 %u  "
	       "max %u\n",
	       a->kind == BENCH_BUFHIT ? "op" : "page", BENCH_BATCH, s->avg_ns, s->p50, s->p99,
	       s->p999, s->max);
	printf("  CPU time of the clients: %.1f ns per %s (%.2f s in all)\n",
	       s->ops ? (double)s->cpu_ns / (double)s->ops : 0.0,
	       a->kind == BENCH_BUFHIT ? "op" : "page", (double)s->cpu_ns / 1e9);
	printf("  pool: %llu hits, %llu reads (hit ratio %.2f%%), %llu evictions; waits: I/O %.1f "
	       "ms, content locks %.1f ms\n",
	       (unsigned long long)hits, (unsigned long long)reads, ratio,
	       (unsigned long long)(b1->evictions - b0->evictions), io_wait_ms, lock_wait_ms);
	if (!a->json)
		return;
	char opts[8192];
	wr_opts_json(&engine_sh()->opts, opts, sizeof(opts));
	printf(
	    "{\"workload\":\"%s\",\"clients\":%d,\"clients_mode\":\"%s\",\"mode\":\"%s\","
	    "\"io_method\":\"%s\","
	    "\"depth\":%d,\"effective_depth\":%d,\"pages\":%llu,\"nbuffers\":%u,\"page_size\":%d,"
	    "\"setup_s\":%.3f,\"ops\":%llu,\"seconds\":%.3f,\"ops_per_s\":%.1f,"
	    "\"pages_per_s\":%.1f,\"MBps\":%.2f,\"passes\":%llu,\"first_pass_s\":%.3f,"
	    "\"hits\":%llu,\"reads\":%llu,\"hit_ratio\":%.4f,\"evictions\":%llu,"
	    "\"io_wait_ms\":%.1f,\"cpu_ns_per_op\":%.1f,\"batch\":%d,\"avg_ns\":%.1f,"
	    "\"p50_ns\":%u,\"p99_ns\":%u,"
	    "\"p999_ns\":%u,\"max_ns\":%u,\"datadir\":\"%s\",\"options\":%s}\n",
	    a->workload, a->clients, a->processes ? "processes" : "threads",
	    scan ? "sequential" : "random", io, a->depth, s->depth, (unsigned long long)pages,
	    b1->nbuffers, WR_PAGE_SIZE, setup_s, (unsigned long long)s->ops, s->secs, s->ops_s,
	    s->ops_s, s->mb_s, (unsigned long long)s->passes, s->first_pass_s,
	    (unsigned long long)hits, (unsigned long long)reads, ratio / 100.0,
	    (unsigned long long)(b1->evictions - b0->evictions), io_wait_ms,
	    s->ops ? (double)s->cpu_ns / (double)s->ops : 0.0, BENCH_BATCH, s->avg_ns, s->p50,
	    s->p99, s->p999, s->max, ctx->datadir, opts);
}

/*
 * Relation BENCH_REL with at least @pages pages, each stamped with its
 * block number; new pages are written out and checkpointed before the
 * clients start, so the run does not pay for them.  Sets *secs to the time
 * it took (0 when nothing was added).
 */
static int prepare_relation(uint64_t pages, double *secs)
{
	smgr_rel *r;
	wr_blkno have = 0;
	uint64_t t0 = wr_now_ns();
	*secs = 0;
	int rc = smgr_exists(BENCH_REL) ? WALRUS_OK : smgr_create(BENCH_REL);
	if (rc == WALRUS_OK)
		rc = smgr_open(BENCH_REL, &r);
	if (rc == WALRUS_OK)
		rc = smgr_nblocks(r, &have);
	for (uint64_t b = have; rc == WALRUS_OK && b < pages; b++) {
		int buf;
		wr_blkno blk;
		rc = buf_extend(BENCH_REL, &buf, &blk);
		if (rc != WALRUS_OK)
			break;
		/* Not WAL-logged: a bench relation, rebuilt if a crash loses it. */
		memcpy((char *)buf_page(buf) + BENCH_STAMP, &blk, sizeof(blk));
		buf_mark_dirty(buf);
		buf_unlock(buf);
		buf_release(buf);
	}
	if (rc == WALRUS_OK && have < pages) {
		rc = buf_flush_all();
		if (rc == WALRUS_OK)
			rc = ckpt_request(CKPT_IMMEDIATE | CKPT_FORCE, true);
		*secs = (double)(wr_now_ns() - t0) / 1e9;
	}
	if (rc != WALRUS_OK)
		return tool_fail(rc, "preparing the bench relation");
	return 0;
}

/* bufhit measures hits: every page is read into the pool once first, untimed. */
static int warm_pool(uint64_t pages)
{
	for (uint64_t b = 0; b < pages; b++) {
		int buf;
		int rc = buf_read(BENCH_REL, (wr_blkno)b, &buf);
		if (rc != WALRUS_OK)
			return tool_fail(rc, "warming the pool");
		buf_release(buf);
	}
	return 0;
}

int cmd_bench(tool_ctx *ctx, int argc, char **argv)
{
	bench_args a;
	walrus *db;

	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--compare") == 0)
			return cmd_bench_compare(argc, argv);
	int kv = cmd_bench_kv(ctx, argc, argv); /* -1: not a key-value workload */
	if (kv >= 0)
		return kv;
	if (tool_wants_help(argc, argv)) {
		usage();
		return 0;
	}
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "--workload") == 0 && strcmp(argv[i + 1], "checkpoint") == 0)
			return cmd_bench_ckpt(ctx, argc, argv);
	int ex = parse_args(argc, argv, &a);
	if (ex != 0)
		return ex;
	size_t size =
	    sizeof(bench_shared) + sizeof(uint32_t) * (size_t)BENCH_MAX_SAMPLES * (size_t)a.clients;
	bench_shared *sh =
	    mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) {
		perror("walrus bench: mmap");
		return TOOL_EXIT_ENGINE;
	}
	ex = tool_open(ctx, true, &db); /* keeps the instance up between clients */
	if (ex == 0) {
		bool wal = a.kind == BENCH_WALCOMMIT || a.kind == BENCH_WALWRITE;
		uint64_t pages = a.pages;
		double setup_s = 0;
		if (!wal && pages == 0)
			pages = a.kind == BENCH_BUFHIT ? WR_MAX(buf_nbuffers() / 2, 1u)
			                               : (uint64_t)buf_nbuffers() * 4;
		if (!wal)
			ex = prepare_relation(pages, &setup_s);
		if (ex == 0 && a.kind == BENCH_BUFHIT)
			ex = warm_pool(pages);
		wal_stats w0, w1;
		buf_stats b0, b1;
		bench_summary s;
		wal_get_stats(&w0);
		buf_get_stats(&b0);
		if (ex == 0)
			ex = run_clients(ctx, &a, sh, pages);
		wal_get_stats(&w1);
		buf_get_stats(&b1);
		summarise(&a, sh, &s);
		if (ex == 0 && wal)
			report_wal(ctx, &a, &s, &w0, &w1);
		else if (ex == 0)
			report_buf(ctx, &a, &s, pages, setup_s, &b0, &b1);
		int rc = walrus_close(db);
		if (ex == 0 && rc != WALRUS_OK)
			ex = tool_fail(rc, "close");
	}
	munmap(sh, size);
	return ex;
}
