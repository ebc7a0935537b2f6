/*
 * cmd_bench.c - `walrus bench`: workloads run by N client processes (not
 * threads: each is a backend of the instance, as an application's processes
 * would be), timing every operation.
 *
 * The WAL workloads measure the commit path on its own:
 *   walcommit  insert one record of --value-size bytes, then wal_flush_to it:
 *              durable commits per second and their latency; with several
 *              clients, group commit shows as commits per flush > 1.
 *   walwrite   records of --value-size bytes (default 1 MiB), each flushed:
 *              WAL write bandwidth.
 * Every client records each operation's latency in a shared anonymous
 * mapping; the parent merges them for the percentiles.
 */
#include "tool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/engine.h"
#include "wal/wal.h"

#define BENCH_MAX_CLIENTS 64
#define BENCH_MAX_SAMPLES (1u << 20) /* per client */

typedef struct bench_args {
	const char *workload;
	int clients;
	double duration_s;
	uint64_t num; /* ops per client; 0 = run for the duration */
	uint32_t value_size;
	bool json;
} bench_args;

typedef struct client_result {
	uint64_t ops;
	uint64_t bytes;
	uint64_t start_ns, end_ns;
	int status;
} client_result;

typedef struct bench_shared {
	client_result res[BENCH_MAX_CLIENTS];
	uint32_t lat_us[]; /* BENCH_MAX_SAMPLES per client */
} bench_shared;

static void usage(void)
{
	printf("usage: walrus -D DIR [-o name=value ...] bench --workload W [options]\n\n"
	       "workloads:\n"
	       "  walcommit   insert a record and flush it (durable commits/s, latency)\n"
	       "  walwrite    large records, each flushed (WAL MB/s)\n\n"
	       "options:\n"
	       "  --clients N       client processes (default 1, at most %d)\n"
	       "  --duration S      seconds to run (default 10)\n"
	       "  --num N           operations per client instead of a duration\n"
	       "  --value-size B    record payload bytes (walcommit 100, walwrite 1048576)\n"
	       "  --json            print a one-line JSON summary last\n",
	       BENCH_MAX_CLIENTS);
}

static int parse_args(int argc, char **argv, bench_args *a)
{
	*a = (bench_args){.clients = 1, .duration_s = 10};
	for (int i = 1; i < argc; i++) {
		const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		bool has = v != NULL;
		if (strcmp(k, "--json") == 0) {
			a->json = true;
			continue;
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
		else {
			fprintf(stderr, "walrus bench: unknown option \"%s\"\n", k);
			return TOOL_EXIT_USAGE;
		}
		if (strcmp(k, "--workload") != 0 && (errno != 0 || *end != '\0')) {
			fprintf(stderr, "walrus bench: bad value for %s: \"%s\"\n", k, v);
			return TOOL_EXIT_USAGE;
		}
	}
	if (a->workload == NULL) {
		fprintf(stderr, "walrus bench: --workload is required (walcommit, walwrite)\n");
		return TOOL_EXIT_USAGE;
	}
	if (strcmp(a->workload, "walcommit") != 0 && strcmp(a->workload, "walwrite") != 0) {
		fprintf(stderr, "walrus bench: unknown workload \"%s\"\n", a->workload);
		return TOOL_EXIT_USAGE;
	}
	if (a->value_size == 0)
		a->value_size = strcmp(a->workload, "walwrite") == 0 ? 1048576 : 100;
	if (a->clients < 1 || a->clients > BENCH_MAX_CLIENTS || a->duration_s <= 0 ||
	    a->value_size > 64u * 1024 * 1024) {
		fprintf(stderr,
		        "walrus bench: --clients 1..%d, --duration > 0, --value-size <= "
		        "64MiB\n",
		        BENCH_MAX_CLIENTS);
		return TOOL_EXIT_USAGE;
	}
	return 0;
}

/* ---------------------------------------------------------------- clients */

static void client_loop(const bench_args *a, client_result *r, uint32_t *lat, char *payload)
{
	uint64_t deadline = r->start_ns + (uint64_t)(a->duration_s * 1e9);
	for (;;) {
		uint64_t t0 = wr_now_ns();
		if (a->num ? r->ops >= a->num : t0 >= deadline)
			break;
		wal_begin();
		wal_register_data(payload, a->value_size);
		wr_lsn end = wal_insert(RM_XLOG, XLOG_NOOP);
		wal_flush_to(end);
		uint64_t us = (wr_now_ns() - t0) / 1000;
		if (r->ops < BENCH_MAX_SAMPLES)
			lat[r->ops] = (uint32_t)WR_MIN(us, UINT32_MAX);
		r->ops++;
		r->bytes += a->value_size;
	}
	r->end_ns = wr_now_ns();
}

static int client_main(tool_ctx *ctx, const bench_args *a, bench_shared *sh, int id, int ready,
                       int go)
{
	walrus *db;
	char c;
	client_result *r = &sh->res[id];
	if (walrus_open(ctx->datadir, ctx->opts, &db) != WALRUS_OK) {
		fprintf(stderr, "walrus bench: client %d: %s\n", id, walrus_errmsg());
		return 3;
	}
	char *payload = malloc(a->value_size);
	if (payload == NULL)
		return 3;
	for (uint32_t i = 0; i < a->value_size; i++)
		payload[i] = (char)(i * 7 + id);
	if (write(ready, "r", 1) != 1 || read(go, &c, 1) != 1)
		return 3;
	r->start_ns = wr_now_ns();
	client_loop(a, r, sh->lat_us + (size_t)id * BENCH_MAX_SAMPLES, payload);
	free(payload);
	return walrus_close(db) == WALRUS_OK ? 0 : 3;
}

static int run_clients(tool_ctx *ctx, const bench_args *a, bench_shared *sh)
{
	int ready[2], go[2];
	pid_t pids[BENCH_MAX_CLIENTS];
	if (pipe(ready) != 0 || pipe(go) != 0) {
		perror("walrus bench: pipe");
		return TOOL_EXIT_ENGINE;
	}
	fflush(NULL);
	for (int i = 0; i < a->clients; i++) {
		pids[i] = fork();
		if (pids[i] < 0) {
			perror("walrus bench: fork");
			return TOOL_EXIT_ENGINE;
		}
		if (pids[i] == 0)
			_exit(client_main(ctx, a, sh, i, ready[1], go[0]));
	}
	char c;
	for (int i = 0; i < a->clients; i++)
		if (read(ready[0], &c, 1) != 1)
			break;
	for (int i = 0; i < a->clients; i++)
		if (write(go[1], "g", 1) != 1)
			break;
	int failed = 0;
	for (int i = 0; i < a->clients; i++) {
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
	uint64_t ops, bytes;
	double secs, ops_s, mb_s, avg_us;
	uint32_t p50, p99, p999, max;
} bench_summary;

static void summarise(const bench_args *a, bench_shared *sh, bench_summary *s)
{
	uint64_t first = UINT64_MAX, last = 0, n = 0;
	double sum = 0;
	memset(s, 0, sizeof(*s));
	for (int i = 0; i < a->clients; i++) {
		client_result *r = &sh->res[i];
		s->ops += r->ops;
		s->bytes += r->bytes;
		first = WR_MIN(first, r->start_ns);
		last = WR_MAX(last, r->end_ns);
	}
	uint32_t *all = malloc(sizeof(uint32_t) * (s->ops ? s->ops : 1));
	for (int i = 0; all && i < a->clients; i++) {
		uint64_t k = WR_MIN(sh->res[i].ops, BENCH_MAX_SAMPLES);
		for (uint64_t j = 0; j < k; j++) {
			all[n++] = sh->lat_us[(size_t)i * BENCH_MAX_SAMPLES + j];
			sum += all[n - 1];
		}
	}
	s->secs = last > first ? (double)(last - first) / 1e9 : 0;
	s->ops_s = s->secs > 0 ? (double)s->ops / s->secs : 0;
	s->mb_s = s->secs > 0 ? (double)s->bytes / 1048576.0 / s->secs : 0;
	if (all && n > 0) {
		qsort(all, n, sizeof(uint32_t), cmp_u32);
		s->avg_us = sum / (double)n;
		s->p50 = all[n / 2];
		s->p99 = all[(size_t)((double)n * 0.99)];
		s->p999 = all[(size_t)((double)n * 0.999)];
		s->max = all[n - 1];
	}
	free(all);
}

static void report(tool_ctx *ctx, const bench_args *a, const bench_summary *s, const wal_stats *w0,
                   const wal_stats *w1)
{
	uint64_t flushes = w1->flushes - w0->flushes;
	char sync[32], io[32], direct[8];
	wr_opts_get(&engine_sh()->opts, "wal_sync_method", sync, sizeof(sync));
	wr_opts_get(&engine_sh()->opts, "io_method", io, sizeof(io));
	wr_opts_get(&engine_sh()->opts, "wal_direct_io", direct, sizeof(direct));
	printf("%s: %d client(s), %s%s, io_method=%s, %u-byte records\n", a->workload, a->clients,
	       sync, strcmp(direct, "on") == 0 ? " + O_DIRECT" : "", io, a->value_size);
	printf("  %llu ops in %.2f s: %.0f ops/s, %.1f MB/s\n", (unsigned long long)s->ops, s->secs,
	       s->ops_s, s->mb_s);
	printf("  latency us: avg %.0f  p50 %u  p99 %u  p99.9 %u  max %u\n", s->avg_us, s->p50,
	       s->p99, s->p999, s->max);
	uint64_t flush_ns = w1->flush_ns - w0->flush_ns;
	printf("  WAL: %llu flushes, %.2f commits per flush, %.0f us per write+flush\n",
	       (unsigned long long)flushes, flushes ? (double)s->ops / (double)flushes : 0.0,
	       flushes ? (double)flush_ns / 1000.0 / (double)flushes : 0.0);
	if (!a->json)
		return;
	char opts[8192];
	wr_opts_json(&engine_sh()->opts, opts, sizeof(opts));
	printf("{\"workload\":\"%s\",\"clients\":%d,\"value_size\":%u,\"ops\":%llu,"
	       "\"seconds\":%.3f,\"ops_per_s\":%.1f,\"MBps\":%.2f,\"avg_us\":%.1f,\"p50_us\":%u,"
	       "\"p99_us\":%u,\"p999_us\":%u,\"max_us\":%u,\"wal_flushes\":%llu,"
	       "\"datadir\":\"%s\",\"options\":%s}\n",
	       a->workload, a->clients, a->value_size, (unsigned long long)s->ops, s->secs,
	       s->ops_s, s->mb_s, s->avg_us, s->p50, s->p99, s->p999, s->max,
	       (unsigned long long)flushes, ctx->datadir, opts);
}

int cmd_bench(tool_ctx *ctx, int argc, char **argv)
{
	bench_args a;
	walrus *db;

	if (tool_wants_help(argc, argv)) {
		usage();
		return 0;
	}
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
		wal_stats w0, w1;
		bench_summary s;
		wal_get_stats(&w0);
		ex = run_clients(ctx, &a, sh);
		wal_get_stats(&w1);
		summarise(&a, sh, &s);
		if (ex == 0)
			report(ctx, &a, &s, &w0, &w1);
		int rc = walrus_close(db);
		if (ex == 0 && rc != WALRUS_OK)
			ex = tool_fail(rc, "close");
	}
	munmap(sh, size);
	return ex;
}
