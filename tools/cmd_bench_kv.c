/*
 * cmd_bench_kv.c - `walrus bench --workload fillseq|fillrandom|fillsync|
 * readrandom|readwhilewriting|scan|updaterandom|txn_transfer`: the key-value workloads
 * of bench/peers, run by the same code as walrus-peers
 * (bench/peers/workloads.c) with the walrus engine alone, on the data
 * directory DIR, so that `walrus bench` figures and walrus-peers figures are
 * the same measurement. The definitions (keys, values, orders, clients,
 * checks, figures) are in bench/peers/README.md and workloads.c.
 *
 *   fillseq     --num puts of keys 0..N-1 in order (asynchronous unless --sync)
 *   fillrandom  the same puts in a fixed random order
 *   fillsync    --clients clients, each --num WALRUS_SYNC puts
 *               (every workload runs for --duration instead when given: see
 *               kv_usage and bench/peers/workloads.c)
 *   readrandom  --num random point reads over --clients clients (or each
 *               for --duration), of a database holding --num keys
 *   readwhilewriting
 *               readrandom's readers plus one writer client overwriting
 *               random keys until they are done
 *   updaterandom
 *               --num read-modify-writes of random keys over --clients
 *               clients (or each for --duration): the steady dirtying of a
 *               working set of --num keys, larger or smaller than
 *               shared_buffers, where checkpoints show
 *   scan        one ordered scan of such a database
 *   txn_transfer
 *               --clients clients (default 8), each running --num committed
 *               transfers (walrus_txn_*: read two accounts, write both,
 *               commit; run again on WALRUS_ECONFLICT, counted as an abort)
 *               on a database of 10000 accounts, durable with --sync
 *
 * readrandom's and scan's reads go through a snapshot with --snapshot (one
 * per client, taken after the load: walrus_get_into_at, walrus_iter_open_at).
 *
 * The clients of fillsync, readrandom, readwhilewriting, updaterandom and
 * txn_transfer are threads of this process, each with its own handle
 * (--threads, the default), or forked processes, each with its own handle
 * (--processes): both are backends of the instance.
 *
 * Around the workload, a monitor process (bench_monitor.c) attached to the
 * instance keeps a per-second time series and the checkpoints that ran;
 * --progress prints a line every N seconds, --csv writes the series,
 * --plot draws it (bench_report.c), --json ends with one JSON line.
 *
 * DIR: a fill starts from an empty directory (missing, or holding only a
 * prepared wal/ or log/); a non-empty one is refused unless --reuse, which
 * fills the database found there (the check then wants it to hold no other
 * keys). The others use the database in DIR when there is one (the untimed
 * warm pass checks it holds exactly --num keys of the right values, or for
 * txn_transfer the 10000 accounts and their sum) and load it first, untimed,
 * when DIR is empty. The database stays in DIR.
 *
 * cmd_bench_kv returns -1, having done nothing, when argv's --workload is
 * not one of these (cmd_bench handles the others); otherwise an exit code.
 * walrus-peers' scanrange and writerandom are refused (a usage error).
 * A failure inside a workload ends the process with the tool's exit codes
 * (3 engine error, 2 wrong result), the message naming the call.
 */
#include "tool.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peers.h"

#define KV_DEFAULT_NUM      1000000u /* keys: every workload but fillsync */
#define KV_DEFAULT_SYNC_OPS 2000u    /* fillsync, per client */
#define KV_MAX_PROGRESS     3600

typedef struct kv_args {
	int workload; /* peers_workload */
	uint64_t num; /* 0: the workload's default */
	int clients;
	double duration_s;
	uint64_t key_size, value_size, seed;
	uint64_t batch; /* fills: puts per commit */
	bool sync, json, reuse;
	bool snapshot;  /* readrandom, scan: read through a snapshot per client */
	bool processes; /* clients are forked processes (--processes), not threads */
	int progress_s;
	const char *csv, *plot;
	bool set_clients, set_mode, set_batch, set_value_size; /* given on the command line */
} kv_args;

static void kv_usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: walrus -D DIR [-o name=value ...] bench --workload W [options]\n\n"
	    "key-value workloads (the workloads of walrus-peers, bench/peers/README.md):\n"
	    "  fillseq           N puts of keys 0..N-1 in order, one per commit\n"
	    "  fillrandom        the same N puts in a fixed random order\n"
	    "  fillsync          P clients, each N durable puts\n"
	    "  readrandom        N random point reads split over P clients\n"
	    "  readwhilewriting  readrandom, plus one writer client overwriting random keys\n"
	    "                    until the readers are done (the readers are measured)\n"
	    "  updaterandom      N read-modify-writes (get, put a new value) of random keys\n"
	    "                    split over P clients: a working set of N keys dirtied\n"
	    "                    steadily, the case where checkpoints matter\n"
	    "  scan              one ordered scan of the N keys\n"
	    "  txn_transfer      on %d accounts of %d each, P clients (default %d) each\n"
	    "                    running N transfers (default %d): a serializable\n"
	    "                    transaction reads two random accounts, moves 1..10 from one\n"
	    "                    to the other, commits; a conflict is an abort, run again.\n"
	    "                    Afterwards the balances must add up to what the load wrote\n\n"
	    "options:\n"
	    "  --num N          keys (default %u), and the operations of every workload\n"
	    "                   unless --duration; fillsync: durable puts per client\n"
	    "                   (default %u); txn_transfer: transfers per client\n"
	    "  --duration S     run S seconds instead of the operations: each client of\n"
	    "                   fillsync, readrandom, readwhilewriting, updaterandom,\n"
	    "                   txn_transfer; the\n"
	    "                   fills go over their N keys again (same values) if time\n"
	    "                   remains; scan repeats whole scans until S have passed\n"
	    "  --clients P      clients of fillsync, readrandom, readwhilewriting (readers),\n"
	    "                   updaterandom, txn_transfer (default 1, txn_transfer %d; at\n"
	    "                   most %d)\n"
	    "  --threads        the clients are threads of this process, each with its own\n"
	    "                   handle (the default)\n"
	    "  --processes      the clients are forked processes, each with its own handle\n"
	    "  --key-size K     key bytes, K decimal digits: at most 10^K keys (default %d,\n"
	    "                   %d..%d)\n"
	    "  --value-size B   value bytes (default %d, %d..%u; not txn_transfer's, whose\n"
	    "                   values are decimal balances)\n"
	    "  --batch N        fillseq, fillrandom: commit N puts at a time, as one walrus\n"
	    "                   batch (default 1: each put its own commit; at most %d)\n"
	    "  --sync           durable puts (fillseq, fillrandom, updaterandom, the writer of\n"
	    "                   readwhilewriting; fillsync always) and txn_transfer's commits:\n"
	    "                   each waits for its WAL flush\n"
	    "  --snapshot       readrandom, scan: each client takes one snapshot after the\n"
	    "                   load and reads through it (walrus_get_into_at,\n"
	    "                   walrus_iter_open_at)\n"
	    "  --seed S         mixed into every random order and key stream (default 0: the\n"
	    "                   definitions' own)\n"
	    "  --progress N     a line on stderr every N seconds: ops/s, latency, the\n"
	    "                   checkpoint's phase, dirty buffers, WAL since the redo point\n"
	    "  --json           print a one-line JSON summary last (the human summary goes to\n"
	    "                   stderr)\n"
	    "  --csv FILE       write the per-second time series\n"
	    "  --plot FILE.svg  draw throughput, p99 latency and dirty buffers per second,\n"
	    "                   checkpoints' write and sync phases shaded\n"
	    "  --reuse          fill the database already in DIR instead of refusing a "
	    "non-empty DIR\n"
	    "  -o name=value    (before `bench`) any engine option, e.g. -o "
	    "checkpoint_timeout=30s\n\n"
	    "A fill starts from an empty DIR; the others use the database in DIR (which must\n"
	    "hold exactly N keys of the workloads' values) or load it first, untimed.\n"
	    "Every result is checked, and walrus verify runs on the database at the end\n"
	    "(untimed): exit 2 on a wrong result or a damaged tree, 3 on an engine error.\n"
	    "walrus bench --compare A.json B.json [--json] sets two --json results side by "
	    "side.\n",
	    PEERS_TXN_ACCOUNTS, PEERS_TXN_BALANCE, PEERS_TXN_CLIENTS, PEERS_TXN_OPS, KV_DEFAULT_NUM,
	    KV_DEFAULT_SYNC_OPS, PEERS_TXN_CLIENTS, PEERS_MAX_CLIENTS, PEERS_KEY_SIZE,
	    PEERS_MIN_KEY_SIZE, PEERS_MAX_KEY_SIZE, PEERS_VALUE_SIZE, PEERS_MIN_VALUE_SIZE,
	    PEERS_MAX_VALUE_SIZE, PEERS_MAX_BATCH);
}

/* The kv workload named by argv's --workload, or -1. */
static int kv_workload(int argc, char **argv)
{
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "--workload") == 0)
			return peers_workload_by_name(argv[i + 1]);
	return -1;
}

/* NOLINTNEXTLINE(bugprone-easily-swappable-parameters): the order is fixed */
static bool parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < min || v > max) {
		fprintf(stderr, "walrus bench: bad value for %s: \"%s\" (%llu..%llu)\n", opt, s,
		        (unsigned long long)min, (unsigned long long)max);
		return false;
	}
	*out = v;
	return true;
}

static bool parse_seconds(const char *opt, const char *s, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(s, &end);
	if (errno != 0 || end == s || *end != '\0' || !(*out > 0) || *out > 86400.0 * 7) {
		fprintf(stderr, "walrus bench: bad value for %s: \"%s\" (seconds, > 0)\n", opt, s);
		return false;
	}
	return true;
}

static bool is_random(int w)
{
	return w == PEERS_READRANDOM || w == PEERS_READWHILEWRITING || w == PEERS_UPDATERANDOM;
}

/* The combinations that make no sense, with what to do instead. */
static int kv_check(kv_args *a)
{
	const char *name = peers_workload_names[a->workload];
	bool txn = a->workload == PEERS_TXN_TRANSFER;
	bool clients = a->workload == PEERS_FILLSYNC || is_random(a->workload) || txn;
	bool writes = a->workload != PEERS_READRANDOM && a->workload != PEERS_SCAN;

	if (a->set_clients && !clients) {
		fprintf(stderr,
		        "walrus bench: %s runs one client (--clients is for fillsync, readrandom, "
		        "readwhilewriting, updaterandom, txn_transfer)\n",
		        name);
		return TOOL_EXIT_USAGE;
	}
	if (a->set_mode && !clients) {
		fprintf(stderr,
		        "walrus bench: %s runs one client, in this process (--threads and "
		        "--processes are for fillsync, readrandom, readwhilewriting, updaterandom, "
		        "txn_transfer)\n",
		        name);
		return TOOL_EXIT_USAGE;
	}
	if (a->snapshot && a->workload != PEERS_READRANDOM && a->workload != PEERS_SCAN) {
		fprintf(stderr, "walrus bench: --snapshot is for readrandom and scan, not %s\n",
		        name);
		return TOOL_EXIT_USAGE;
	}
	if (a->set_value_size && txn) {
		fprintf(stderr,
		        "walrus bench: txn_transfer's values are decimal balances (--value-size is "
		        "for the other workloads)\n");
		return TOOL_EXIT_USAGE;
	}
	if (txn && !a->set_clients)
		a->clients = PEERS_TXN_CLIENTS;
	if (a->set_batch && a->workload != PEERS_FILLSEQ && a->workload != PEERS_FILLRANDOM) {
		fprintf(stderr,
		        "walrus bench: %s has no batches (--batch is for fillseq, fillrandom)\n",
		        name);
		return TOOL_EXIT_USAGE;
	}
	if (a->sync && !writes) {
		fprintf(stderr,
		        "walrus bench: %s does not write (--sync is for the workloads that do)\n",
		        name);
		return TOOL_EXIT_USAGE;
	}
	uint64_t max = peers_max_keys(a->key_size);
	uint64_t num = a->num
	                   ? a->num
	                   : (a->workload == PEERS_FILLSYNC ? KV_DEFAULT_SYNC_OPS : KV_DEFAULT_NUM);
	uint64_t keys = a->workload == PEERS_FILLSYNC ? num * (uint64_t)a->clients : num;
	if (txn)
		keys = PEERS_TXN_ACCOUNTS;
	if (keys > max) {
		fprintf(stderr,
		        "walrus bench: %llu keys do not fit in %llu-byte keys (at most %llu: raise "
		        "--key-size or lower --num)\n",
		        (unsigned long long)keys, (unsigned long long)a->key_size,
		        (unsigned long long)max);
		return TOOL_EXIT_USAGE;
	}
	if (a->workload == PEERS_FILLSYNC)
		a->sync = true;
	return 0;
}

static int kv_parse(int argc, char **argv, kv_args *a)
{
	*a = (kv_args){
	    .workload = kv_workload(argc, argv),
	    .clients = 1,
	    .key_size = PEERS_KEY_SIZE,
	    .value_size = PEERS_VALUE_SIZE,
	    .batch = 1,
	};
	for (int i = 1; i < argc; i++) {
		const char *k = argv[i];
		uint64_t v;

		if (strcmp(k, "--json") == 0) {
			a->json = true;
			continue;
		}
		if (strcmp(k, "--reuse") == 0) {
			a->reuse = true;
			continue;
		}
		if (strcmp(k, "--sync") == 0) {
			a->sync = true;
			continue;
		}
		if (strcmp(k, "--snapshot") == 0) {
			a->snapshot = true;
			continue;
		}
		if (strcmp(k, "--threads") == 0 || strcmp(k, "--processes") == 0) {
			bool processes = strcmp(k, "--processes") == 0;

			if (a->set_mode && a->processes != processes) {
				fprintf(
				    stderr,
				    "walrus bench: --threads and --processes exclude each other\n");
				return TOOL_EXIT_USAGE;
			}
			a->processes = processes;
			a->set_mode = true;
			continue;
		}
		if (strcmp(k, "--workload") != 0 && strcmp(k, "--num") != 0 &&
		    strcmp(k, "--clients") != 0 && strcmp(k, "--duration") != 0 &&
		    strcmp(k, "--key-size") != 0 && strcmp(k, "--value-size") != 0 &&
		    strcmp(k, "--seed") != 0 && strcmp(k, "--progress") != 0 &&
		    strcmp(k, "--batch") != 0 && strcmp(k, "--csv") != 0 &&
		    strcmp(k, "--plot") != 0) {
			fprintf(stderr,
			        "walrus bench: unknown option \"%s\" for workload %s (walrus bench "
			        "--workload %s --help lists them)\n",
			        k, peers_workload_names[a->workload],
			        peers_workload_names[a->workload]);
			return TOOL_EXIT_USAGE;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "walrus bench: %s needs a value\n", k);
			return TOOL_EXIT_USAGE;
		}
		const char *s = argv[++i];
		bool ok = true;
		if (strcmp(k, "--num") == 0) {
			ok = parse_u64(k, s, 1, PEERS_MAX_KEYS, &a->num);
		} else if (strcmp(k, "--clients") == 0) {
			ok = parse_u64(k, s, 1, PEERS_MAX_CLIENTS, &v);
			a->clients = (int)v;
			a->set_clients = true;
		} else if (strcmp(k, "--duration") == 0) {
			ok = parse_seconds(k, s, &a->duration_s);
		} else if (strcmp(k, "--key-size") == 0) {
			ok = parse_u64(k, s, PEERS_MIN_KEY_SIZE, PEERS_MAX_KEY_SIZE, &a->key_size);
		} else if (strcmp(k, "--value-size") == 0) {
			ok = parse_u64(k, s, PEERS_MIN_VALUE_SIZE, PEERS_MAX_VALUE_SIZE,
			               &a->value_size);
			a->set_value_size = true;
		} else if (strcmp(k, "--batch") == 0) {
			ok = parse_u64(k, s, 1, PEERS_MAX_BATCH, &a->batch);
			a->set_batch = true;
		} else if (strcmp(k, "--seed") == 0) {
			ok = parse_u64(k, s, 0, UINT64_MAX, &a->seed);
		} else if (strcmp(k, "--progress") == 0) {
			ok = parse_u64(k, s, 1, KV_MAX_PROGRESS, &v);
			a->progress_s = (int)v;
		} else if (strcmp(k, "--csv") == 0 || strcmp(k, "--plot") == 0) {
			if (s[0] == '\0' || (s[0] == '-' && s[1] == '-')) {
				fprintf(stderr, "walrus bench: %s needs a file name, not \"%s\"\n",
				        k, s);
				return TOOL_EXIT_USAGE;
			}
			*(strcmp(k, "--csv") == 0 ? &a->csv : &a->plot) = s;
		}
		if (!ok)
			return TOOL_EXIT_USAGE;
	}
	return kv_check(a);
}

/*
 * Does @dir hold a database, or anything else? Missing, or holding only what
 * walrus accepts in a directory it initialises (a prepared wal/ or log/),
 * counts as empty. Returns 0 and sets *empty, or an exit code.
 */
static int kv_dir_empty(const char *dir, bool *empty)
{
	static const char *const allowed[] = {".", "..", "wal", "log", "lost+found"};
	DIR *d = opendir(dir);
	struct dirent *e;

	*empty = true;
	if (d == NULL) {
		if (errno == ENOENT)
			return 0;
		fprintf(stderr, "walrus bench: could not open directory \"%s\": %s\n", dir,
		        strerror(errno));
		return errno == ENOTDIR ? TOOL_EXIT_USAGE : TOOL_EXIT_ENGINE;
	}
	errno = 0;
	while (*empty && (e = readdir(d)) != NULL) {
		bool ok = false;

		for (size_t i = 0; i < WR_ARRAY_LEN(allowed); i++)
			ok = ok || strcmp(e->d_name, allowed[i]) == 0;
		*empty = ok;
	}
	if (*empty && errno != 0) {
		fprintf(stderr, "walrus bench: could not read directory \"%s\": %s\n", dir,
		        strerror(errno));
		closedir(d);
		return TOOL_EXIT_ENGINE;
	}
	closedir(d);
	return 0;
}

/* Where kv_result puts the workload's figures (the hooks' argument is the
 * monitor's), and what of them bench_kv_run has no room for: txn_transfer's
 * aborts, and whether the reads went through a snapshot. */
static bench_kv_run *kv_run;
static bool kv_txn;
static uint64_t kv_aborts;
static bool kv_snapshot;

/* The workload's figures, from the library's result hook. */
static void kv_result(void *arg, const peers_result *r)
{
	bench_kv_run *run = kv_run;

	(void)arg;
	run->mode = r->mode;
	run->ops = r->ops;
	run->seconds = (double)r->ns / 1e9;
	run->has_lat = r->has_lat;
	run->avg_us = r->avg_us;
	run->stddev_us = r->stddev_us;
	run->p50_us = r->p50_us;
	run->p99_us = r->p99_us;
	run->p999_us = r->p999_us;
	run->max_us = r->max_us;
	run->writer_ops = r->writer_ops;
	run->writer_p50_us = r->writer_p50_us;
	run->writer_p99_us = r->writer_p99_us;
	run->writer_max_us = r->writer_max_us;
	kv_txn = r->has_sync;
	kv_aborts = r->aborts;
	kv_snapshot = r->snapshot;
}

static double kv_abort_rate(const bench_kv_run *run)
{
	uint64_t tries = run->ops + kv_aborts;

	return tries ? (double)kv_aborts / (double)tries : 0.0;
}

/* bench_print_json's line with kv_result's extra figures before its closing
 * brace, so that one object still holds the whole run. */
static int kv_print_json(const bench_kv_run *run, const bench_series *s)
{
	char *line = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&line, &len);

	if (m == NULL) {
		fprintf(stderr, "walrus bench: open_memstream failed: %s\n", strerror(errno));
		return TOOL_EXIT_ENGINE;
	}
	bench_print_json(m, run, s);
	if (ferror(m) || fclose(m) != 0) {
		fprintf(stderr, "walrus bench: writing the JSON line failed: %s\n",
		        strerror(errno));
		free(line);
		return TOOL_EXIT_ENGINE;
	}
	if (len < 2 || line[len - 2] != '}' || line[len - 1] != '\n') {
		fprintf(stderr, "walrus bench: internal error: the JSON line does not end in }\n");
		free(line);
		return TOOL_EXIT_ENGINE;
	}
	fwrite(line, 1, len - 2, stdout);
	free(line);
	if (kv_txn)
		printf(",\"commits\":%llu,\"aborts\":%llu,\"abort_rate\":%.6f",
		       (unsigned long long)run->ops, (unsigned long long)kv_aborts,
		       kv_abort_rate(run));
	if (kv_snapshot)
		printf(",\"snapshot\":true");
	printf("}\n");
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "walrus bench: writing to stdout failed: %s\n", strerror(errno));
		return TOOL_EXIT_ENGINE;
	}
	return 0;
}

/* The outputs of a finished run. */
static int kv_report(const kv_args *a, const bench_kv_run *run, const bench_series *s)
{
	int ex = 0;
	FILE *human = a->json ? stderr : stdout;

	bench_print_summary(human, run, s);
	if (kv_txn)
		fprintf(human, "  aborts: %llu (%.2f%% of attempts), each run again\n",
		        (unsigned long long)kv_aborts, 100.0 * kv_abort_rate(run));
	if (kv_snapshot)
		fprintf(human,
		        "  reads through a snapshot (one per client, taken after the load)\n");
	if (a->csv != NULL && (ex = bench_write_csv(a->csv, run, s)) == 0)
		fprintf(stderr, "walrus bench: time series written to %s\n", a->csv);
	if (ex == 0 && a->plot != NULL && (ex = bench_write_svg(a->plot, run, s)) == 0)
		fprintf(stderr, "walrus bench: plot written to %s\n", a->plot);
	if (ex == 0 && a->json)
		ex = kv_print_json(run, s);
	return ex;
}

static void kv_verify_print(void *arg, uint32_t block, const char *msg)
{
	(*(unsigned long *)arg)++;
	fprintf(stderr, "verify: block %u: %s\n", block, msg);
}

/*
 * Every run ends with walrus_verify on the database it left (untimed): an
 * optimisation that broke the tree must fail its benchmark, not only a
 * later read.
 */
static int kv_verify(tool_ctx *ctx)
{
	walrus *db;
	unsigned long problems = 0;
	int ex = tool_open(ctx, false, &db);
	if (ex != 0)
		return ex;
	int rc = walrus_verify(db, kv_verify_print, &problems);
	if (rc == WALRUS_OK)
		fprintf(stderr, "verify: ok\n");
	else if (rc == WALRUS_ECORRUPT)
		fprintf(stderr, "verify: %lu problem(s) found\n", problems);
	else
		ex = tool_fail(rc, "verify");
	int crc = walrus_close(db);
	if (ex == 0 && rc == WALRUS_ECORRUPT)
		ex = TOOL_EXIT_DAMAGE;
	if (ex == 0 && crc != WALRUS_OK)
		ex = tool_fail(crc, "close");
	return ex;
}

int cmd_bench_kv(tool_ctx *ctx, int argc, char **argv)
{
	kv_args a;
	peers_config cfg;
	bool empty, fill;
	int ex;

	if (kv_workload(argc, argv) < 0)
		return -1;
	if (kv_workload(argc, argv) == PEERS_SCANRANGE ||
	    kv_workload(argc, argv) == PEERS_WRITERANDOM) {
		fprintf(stderr,
		        "walrus bench: %s is a workload of walrus-peers only "
		        "(bench/peers/README.md)\n",
		        peers_workload_names[kv_workload(argc, argv)]);
		return TOOL_EXIT_USAGE;
	}
	if (tool_wants_help(argc, argv)) {
		kv_usage(stdout);
		return 0;
	}
	ex = kv_parse(argc, argv, &a);
	if (ex != 0)
		return ex;
	if (ctx->datadir == NULL) {
		fprintf(stderr, "walrus: no data directory: use -D DIR or set WALRUS_DATA\n");
		return TOOL_EXIT_USAGE;
	}
	ex = kv_dir_empty(ctx->datadir, &empty);
	if (ex != 0)
		return ex;
	fill = a.workload == PEERS_FILLSEQ || a.workload == PEERS_FILLRANDOM ||
	       a.workload == PEERS_FILLSYNC;
	bool txn = a.workload == PEERS_TXN_TRANSFER;
	if (fill && !empty && !a.reuse) {
		fprintf(stderr,
		        "walrus bench: %s starts from an empty data directory, but \"%s\" is not "
		        "empty (use a new directory, or --reuse to fill the database in it)\n",
		        peers_workload_names[a.workload], ctx->datadir);
		return TOOL_EXIT_USAGE;
	}

	uint64_t num = a.num ? a.num : KV_DEFAULT_NUM;
	bench_kv_run run = {
	    .workload = peers_workload_names[a.workload],
	    .mode = a.processes ? "processes" : "threads",
	    .datadir = ctx->datadir,
	    .clients = a.clients,
	    .num = a.workload == PEERS_FILLSYNC ? (a.num ? a.num : KV_DEFAULT_SYNC_OPS)
	           : txn                        ? PEERS_TXN_ACCOUNTS
	                                        : num,
	    .key_size = a.key_size,
	    .value_size = a.value_size,
	    .seed = a.seed,
	    .duration_s = a.duration_s,
	    .sync = a.sync,
	    .batch = a.batch,
	};
	bench_monitor *mon;
	int expected = a.workload == PEERS_FILLSYNC || is_random(a.workload) || txn ? a.clients : 1;
	expected += a.workload == PEERS_READWHILEWRITING;
	ex = bench_monitor_start(ctx, expected, a.progress_s, &mon);
	if (ex != 0)
		return ex;
	peers_hooks hooks = {
	    .arg = bench_monitor_arg(mon),
	    .start = bench_hook_start,
	    .op = bench_hook_op,
	    .end = bench_hook_end,
	    .result = kv_result,
	};
	kv_run = &run;
	cfg = (peers_config){
	    .num = num,
	    .sync_ops = a.num ? a.num : KV_DEFAULT_SYNC_OPS,
	    .workloads = {(peers_workload)a.workload},
	    .nworkloads = 1,
	    .sync_procs = {a.clients},
	    .nsync_procs = 1,
	    .read_procs = {a.clients},
	    .nread_procs = 1,
	    .client_modes = {a.processes ? PEERS_CLIENTS_PROCESSES : PEERS_CLIENTS_THREADS},
	    .nclient_modes = 1,
	    .json = a.json,
	    .fresh_dirs = false,
	    .loaded = !fill && !txn && !empty,
	    .accounts = txn && !empty,
	    .snapshot = a.snapshot,
	    .txn_procs = {a.clients},
	    .ntxn_procs = 1,
	    .txn_sync = {a.sync},
	    .ntxn_sync = 1,
	    .txn_ops = a.num ? a.num : PEERS_TXN_OPS,
	    .key_size = a.key_size,
	    .value_size = a.value_size,
	    .seed = a.seed,
	    .duration_ns = (uint64_t)llround(a.duration_s * 1e9),
	    .sync = a.sync,
	    .batch = a.batch,
	    .hooks = &hooks,
	};
	if (txn && empty)
		fprintf(stderr, "walrus bench: loading %d accounts into %s first (untimed)\n",
		        PEERS_TXN_ACCOUNTS, ctx->datadir);
	else if (!fill && empty)
		fprintf(stderr, "walrus bench: loading %llu keys into %s first (untimed)\n",
		        (unsigned long long)num, ctx->datadir);
	peers_walrus_use_opts(ctx->opts);
	peers_walrus_use_space(ctx->space);
	peers_init("walrus bench");
	peers_set_scratch(NULL, false, true); /* DIR is the user's: never removed */
	peers_run_engine(&cfg, &peers_walrus, ctx->datadir);
	peers_walrus_use_opts(NULL);
	peers_walrus_use_space(NULL);
	kv_run = NULL;

	const bench_series *s;
	ex = bench_monitor_stop(mon, &s);
	if (ex == 0)
		ex = kv_report(&a, &run, s);
	bench_monitor_free(mon);
	if (ex == 0)
		ex = kv_verify(ctx);
	return ex;
}
