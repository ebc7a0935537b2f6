/*
 * cmd_bench_kv.c - `walrus bench --workload fillseq|fillrandom|fillsync|
 * readrandom|scan`: the key-value workloads of bench/peers, run by the same
 * code as walrus-peers (bench/peers/workloads.c) with the walrus engine
 * alone, on the data directory DIR, so that `walrus bench` figures and
 * walrus-peers figures are the same measurement. The definitions (keys,
 * values, orders, clients, checks, figures) are in bench/peers/README.md.
 *
 *   fillseq     --num puts of keys 0..N-1 in order, WALRUS_ASYNC
 *   fillrandom  the same puts in a fixed random order
 *   fillsync    --clients processes, each --num WALRUS_SYNC puts
 *   readrandom  --num random point reads over --clients processes, of a
 *               database holding a fillseq load of --num keys
 *   scan        one ordered scan of such a database
 *
 * DIR: a fill starts from an empty directory (missing, or holding only a
 * prepared wal/ or log/); a non-empty one is refused unless --reuse, which
 * fills the database found there (the check then wants it to hold no other
 * keys). readrandom and scan use the database in DIR when there is one (the
 * untimed warm pass checks it holds exactly the fillseq load of --num keys)
 * and load it first, untimed, when DIR is empty. The database stays in DIR.
 *
 * cmd_bench_kv returns -1, having done nothing, when argv's --workload is
 * not one of these five (cmd_bench handles the others); otherwise an exit
 * code. A failure inside a workload ends the process with the tool's exit
 * codes (3 engine error, 2 wrong result), the message naming the call.
 */
#include "tool.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peers.h"

#define KV_DEFAULT_NUM      1000000u /* fillseq, fillrandom, readrandom, scan */
#define KV_DEFAULT_SYNC_OPS 2000u    /* fillsync, per client */

typedef struct kv_args {
	int workload; /* peers_workload */
	uint64_t num; /* 0: the workload's default */
	int clients;
	bool json;
	bool reuse;
} kv_args;

static void kv_usage(FILE *f)
{
	fprintf(f,
	        "usage: walrus -D DIR [-o name=value ...] bench --workload W [--num N] "
	        "[--clients P]\n"
	        "                                          [--reuse] [--json]\n\n"
	        "key-value workloads (the workloads of walrus-peers, bench/peers/README.md):\n"
	        "  fillseq     N puts of keys 0..N-1 in order, asynchronous, one per commit\n"
	        "  fillrandom  the same N puts in a fixed random order\n"
	        "  fillsync    P client processes, each N durable puts (WALRUS_SYNC)\n"
	        "  readrandom  N random point reads split over P client processes\n"
	        "  scan        one ordered scan of the N keys\n\n"
	        "options:\n"
	        "  --num N      keys (default %u); fillsync: durable puts per client (default %u)\n"
	        "  --clients P  fillsync and readrandom client processes (default 1, at most %d)\n"
	        "  --reuse      fill the database already in DIR instead of refusing a non-empty "
	        "DIR\n"
	        "  --json       print a one-line JSON summary last (the human line goes to "
	        "stderr)\n\n"
	        "A fill starts from an empty DIR; readrandom and scan use the database in DIR\n"
	        "(which must hold exactly a fillseq load of N keys) or load it first, untimed.\n"
	        "Every result is checked: exit 2 on a wrong one, 3 on an engine error.\n",
	        KV_DEFAULT_NUM, KV_DEFAULT_SYNC_OPS, PEERS_MAX_CLIENTS);
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
static bool parse_count(const char *opt, const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v == 0 || v > max) {
		fprintf(stderr, "walrus bench: bad value for %s: \"%s\" (1..%llu)\n", opt, s,
		        (unsigned long long)max);
		return false;
	}
	*out = v;
	return true;
}

static int kv_parse(int argc, char **argv, kv_args *a)
{
	*a = (kv_args){.workload = kv_workload(argc, argv), .clients = 1};
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
		if (i + 1 >= argc) {
			fprintf(stderr, "walrus bench: %s needs a value (or is unknown)\n", k);
			return TOOL_EXIT_USAGE;
		}
		if (strcmp(k, "--workload") == 0) {
			i++;
		} else if (strcmp(k, "--num") == 0) {
			if (!parse_count(k, argv[++i], PEERS_MAX_KEYS / PEERS_MAX_CLIENTS, &a->num))
				return TOOL_EXIT_USAGE;
		} else if (strcmp(k, "--clients") == 0) {
			if (!parse_count(k, argv[++i], PEERS_MAX_CLIENTS, &v))
				return TOOL_EXIT_USAGE;
			a->clients = (int)v;
		} else {
			fprintf(stderr, "walrus bench: unknown option \"%s\" for workload %s\n", k,
			        peers_workload_names[a->workload]);
			return TOOL_EXIT_USAGE;
		}
	}
	if (a->clients != 1 && a->workload != PEERS_FILLSYNC && a->workload != PEERS_READRANDOM) {
		fprintf(stderr,
		        "walrus bench: %s runs one client (--clients is for fillsync and "
		        "readrandom)\n",
		        peers_workload_names[a->workload]);
		return TOOL_EXIT_USAGE;
	}
	return 0;
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

int cmd_bench_kv(tool_ctx *ctx, int argc, char **argv)
{
	kv_args a;
	peers_config cfg;
	bool empty, fill;
	int ex;

	if (kv_workload(argc, argv) < 0)
		return -1;
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
	if (fill && !empty && !a.reuse) {
		fprintf(stderr,
		        "walrus bench: %s starts from an empty data directory, but \"%s\" is not "
		        "empty (use a new directory, or --reuse to fill the database in it)\n",
		        peers_workload_names[a.workload], ctx->datadir);
		return TOOL_EXIT_USAGE;
	}

	cfg = (peers_config){
	    .num = a.num ? a.num : KV_DEFAULT_NUM,
	    .sync_ops = a.num ? a.num : KV_DEFAULT_SYNC_OPS,
	    .workloads = {(peers_workload)a.workload},
	    .nworkloads = 1,
	    .sync_procs = {a.clients},
	    .nsync_procs = 1,
	    .read_procs = {a.clients},
	    .nread_procs = 1,
	    .json = a.json,
	    .fresh_dirs = false,
	    .loaded = !fill && !empty,
	};
	peers_walrus_use_opts(ctx->opts);
	peers_init("walrus bench");
	peers_set_scratch(NULL, false, true); /* DIR is the user's: never removed */
	peers_run_engine(&cfg, &peers_walrus, ctx->datadir);
	peers_flush(stdout);
	peers_walrus_use_opts(NULL);
	return TOOL_EXIT_OK;
}
