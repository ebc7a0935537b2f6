/*
 * peers.c - walrus-peers: db_bench-style workloads against walrus, SQLite,
 * LMDB and RocksDB, defined exactly as `walrus bench` runs them, so that
 * walrus's figures can be set beside its peers'. This file is the program:
 * arguments, the scratch directory, and one run of the workload library
 * (workloads.c) per engine. README.md beside this file states the
 * definitions.
 *
 * Errors: usage errors exit 2; every failure after that is reported by the
 * workload library (peers_fatal: exit 3, or 2 for a wrong result).
 */
#include "peers.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "walrus.h"

#define MAX_OPTS 64

#define DROP_CACHES_FILE "/proc/sys/vm/drop_caches"
#define MAX_SYNC_SECONDS 86400
#define MAX_TXN_OPS      1000000000u

/* --memory-limit: cgroup v1's memory controller, and the smallest limit
 * taken (below it not even the program's own pages fit). */
#define MEMCG_ROOT      "/sys/fs/cgroup/memory"
#define MIN_MEMORY_MB   4
#define MAX_MEMORY_SIZE (1ull << 50)

/* walrus's buffer pool in walrus-peers: the 256 MiB that SQLite's page cache
 * and RocksDB's block cache get (--cache-mb sets all three; -o
 * shared_buffers=... overrides walrus's). */
#define PEERS_WALRUS_SHARED_BUFFERS "256MB"

/* Every workload (peers_workload_names, in its order), and the default list:
 * the original five, which RESULTS*.txt hold; the two overwrite workloads
 * are asked for by name. */
#define PEERS_ALL_WORKLOADS                                                                        \
	"fillseq,fillrandom,fillsync,readrandom,scan,readwhilewriting,updaterandom,txn_transfer,"  \
	"scanrange,writerandom"
#define PEERS_DEFAULT_WORKLOADS "fillseq,fillrandom,fillsync,readrandom,scan"

/* walrus's client modes: threads, as RocksDB's (each thread its own handle
 * here), then processes, as SQLite's and LMDB's. */
#define PEERS_DEFAULT_MODES "threads,processes"

/* The default engines: the first four. RocksDB's transaction DBs, which alone
 * run its txn_transfer rows, are asked for by name. */
static const peers_engine *const all_engines[] = {&peers_walrus,       &peers_sqlite,
                                                  &peers_lmdb,         &peers_rocksdb,
                                                  &peers_rocksdb_otxn, &peers_rocksdb_ptxn};
#define PEERS_DEFAULT_ENGINES "walrus,sqlite,lmdb,rocksdb"
#define NENGINES              ((int)(sizeof(all_engines) / sizeof(all_engines[0])))

typedef struct config {
	peers_config run;
	const peers_engine *engines[PEERS_MAX_LIST];
	int nengines;
	const char *dir;
	bool keep;
	const char *opts[MAX_OPTS]; /* -o name=value, for walrus */
	int nopts;
	uint64_t sync_seconds;  /* --sync-seconds, 0: fillsync by --sync-ops */
	uint64_t txn_seconds;   /* --txn-seconds, 0: txn_transfer by --txn-ops */
	uint64_t memory_limit;  /* --memory-limit in bytes, 0: none */
	bool lmdb_nordahead;    /* --lmdb-nordahead */
	const char *memcg_root; /* --memory-cgroup-root, else MEMCG_ROOT */
} config;

static char g_base[PATH_MAX];
static bool g_base_created;

/* ------------------------------------------------------------ arguments */

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: walrus-peers [options]\n\n"
	    "db_bench-style workloads against walrus, SQLite, LMDB and RocksDB (see "
	    "bench/peers/README.md).\n\n"
	    "workloads (N = --num, M = --sync-ops, R = --reads, P = a client count):\n"
	    "  fillseq           N puts of keys 0..N-1 in order, one per commit\n"
	    "  fillrandom        the same N puts in a fixed random order\n"
	    "  fillsync          P clients (--sync-procs), each M durable puts of new keys;\n"
	    "                    with --sync-seconds S, on a load of N keys, each client\n"
	    "                    putting random existing keys durably for S seconds\n"
	    "  readrandom        R random point reads split over P clients (--read-procs)\n"
	    "  scan              one ordered scan of the N keys\n"
	    "  readwhilewriting  readrandom, plus one writer overwriting random keys until\n"
	    "                    the readers are done (the readers are measured)\n"
	    "  updaterandom      R read-modify-writes (get, put a new value) of random keys\n"
	    "                    split over P clients (--read-procs)\n"
	    "  txn_transfer      on %d accounts of %d each, P clients (--txn-procs) each\n"
	    "                    moving 1..10 between two random accounts in a read-write\n"
	    "                    transaction, run again on a conflict (an abort); asynchronous\n"
	    "                    and durable commits (--txn-commit); the balances' sum checked\n"
	    "  scanrange         --scan-keys keys read in order from a random start key\n"
	    "  writerandom       one client putting --writes random existing keys, a new\n"
	    "                    value each, --batch puts per commit (random writes into\n"
	    "                    the loaded tree)\n"
	    "readrandom, scan, readwhilewriting, updaterandom, scanrange and writerandom run\n"
	    "on a fillseq load of N keys (untimed, batched by --batch; reused from the\n"
	    "previous workload when it left one).\n\n"
	    "options:\n"
	    "  --num N            N: keys, and the operations of readrandom,\n"
	    "                     readwhilewriting, updaterandom (default 1000000)\n"
	    "  --reads R          the operations in all of readrandom, readwhilewriting\n"
	    "                     (the readers') and updaterandom instead (default N)\n"
	    "  --writes W         writerandom's puts (default N)\n"
	    "  --scan-keys K      scanrange's keys (default N/10; at most N)\n"
	    "  --writer-rate W    readwhilewriting's writer puts at most W keys a second\n"
	    "                     (default: as fast as it can)\n"
	    "  --warm-pass MODE   full: each client's warm pass scans and checks all N keys\n"
	    "                     (the default); sample: it gets and checks 1000 keys spread\n"
	    "                     over them, the last one, and key N absent\n"
	    "  --sync-ops M       durable writes per client in fillsync (default 2000)\n"
	    "  --sync-seconds S   fillsync by time instead: N keys loaded\n"
	    "                     (untimed), then each client upserts random keys, each\n"
	    "                     put durable, for S seconds (1..%d)\n"
	    "  --engines LIST     among walrus,sqlite,lmdb,rocksdb,rocksdb-otxn,rocksdb-ptxn\n"
	    "                     (default " PEERS_DEFAULT_ENGINES "; rocksdb-otxn and\n"
	    "                     rocksdb-ptxn are RocksDB's optimistic and pessimistic\n"
	    "                     transaction DBs: plain rocksdb has no transactions)\n"
	    "  --workloads LIST   among " PEERS_ALL_WORKLOADS "\n"
	    "                     (default " PEERS_DEFAULT_WORKLOADS ")\n"
	    "  --sync-procs LIST  fillsync client counts (default 1,8)\n"
	    "  --read-procs LIST  readrandom, readwhilewriting (readers) and updaterandom\n"
	    "                     client counts (default 1,2)\n"
	    "  --txn-procs LIST   txn_transfer client counts (default %d)\n"
	    "  --txn-ops M        committed transfers per txn_transfer client (default %d)\n"
	    "  --txn-seconds S    txn_transfer: each client runs S seconds instead (1..%d)\n"
	    "  --txn-commit LIST  txn_transfer's commits, each in turn: async and/or sync\n"
	    "                     (durable: each commit waits for its flush) (default\n"
	    "                     async,sync)\n"
	    "  --snapshot         walrus's readrandom and scan run twice: plainly, then\n"
	    "                     through a snapshot (one per client, taken after the load)\n"
	    "  --batch N          fillseq and fillrandom commit N puts at a time: a walrus\n"
	    "                     batch, an SQLite BEGIN..COMMIT, an LMDB write txn; RocksDB\n"
	    "                     still writes each put alone (default 1, at most %d)\n"
	    "  --cache-mb MB      every engine's cache: walrus's shared_buffers, SQLite's\n"
	    "                     cache_size, RocksDB's block cache (LMDB has none)\n"
	    "                     (default %d)\n"
	    "  --drop-caches      before the timed run of readrandom, scan, readwhilewriting\n"
	    "                     and updaterandom (once every client has prepared): sync,\n"
	    "                     then write 3 to " DROP_CACHES_FILE " (needs root)\n"
	    "  --drop-caches-file FILE\n"
	    "                     --drop-caches, writing FILE instead (to test the option)\n"
	    "  --memory-limit SIZE\n"
	    "                     run each engine in a memory cgroup (v1) of SIZE bytes (kB,\n"
	    "                     MB, GB: units of 1024; at least %dMB), page cache included;\n"
	    "                     --cache-mb defaults to a quarter of it and must be smaller;\n"
	    "                     every row reports the cgroup's usage (needs root)\n"
	    "  --memory-cgroup-root DIR\n"
	    "                     the memory controller's directory (default " MEMCG_ROOT ")\n"
	    "  --walrus-clients LIST\n"
	    "                     how walrus's clients of those workloads run, each in turn:\n"
	    "                     threads (of this process, a handle each) and/or processes\n"
	    "                     (forked, a handle each) (default " PEERS_DEFAULT_MODES ")\n"
	    "  --dir DIR          scratch directory (default: a new one under $TMPDIR or "
	    "/tmp)\n"
	    "  --keep             keep the databases at the end\n"
	    "  --lmdb-nordahead   LMDB opens its environments with MDB_NORDAHEAD (no\n"
	    "                     read-around of its map's page faults)\n"
	    "  --compact          after a fill's sizes, walrus compacts (walrus_compact, timed)\n"
	    "                     and its files are measured again\n"
	    "  --json             one JSON object per result on stdout (human lines go "
	    "to stderr)\n"
	    "  -o name=value      a walrus option (repeatable; see `walrus options`); "
	    "walrus-peers\n"
	    "                     starts from shared_buffers=" PEERS_WALRUS_SHARED_BUFFERS
	    ", the peers' cache size\n"
	    "exit: 0 ok, 2 usage or wrong result, 3 engine or system error\n",
	    PEERS_TXN_ACCOUNTS, PEERS_TXN_BALANCE, MAX_SYNC_SECONDS, PEERS_TXN_CLIENTS,
	    PEERS_TXN_OPS, MAX_SYNC_SECONDS, PEERS_MAX_BATCH, PEERS_CACHE_MB, MIN_MEMORY_MB);
}

/* PEERS_ALL_WORKLOADS, which the help shows, names every workload. */
static void check_workload_list(void)
{
	char all[256] = "";
	size_t n = 0;

	for (int i = 0; i < PEERS_WORKLOAD_COUNT; i++)
		n += (size_t)snprintf(all + n, sizeof(all) - n, "%s%s", i ? "," : "",
		                      peers_workload_names[i]);
	if (n >= sizeof(all) || strcmp(all, PEERS_ALL_WORKLOADS) != 0) {
		fprintf(stderr, "walrus-peers: internal error: the help lists \"%s\", not \"%s\"\n",
		        PEERS_ALL_WORKLOADS, all);
		exit(PEERS_EXIT_ERROR);
	}
}

static _Noreturn void bad_usage(const char *fmt, const char *arg)
{
	fprintf(stderr, "walrus-peers: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n");
	usage(stderr);
	exit(PEERS_EXIT_DAMAGE);
}

/* NOLINTNEXTLINE(bugprone-easily-swappable-parameters): the order is fixed */
static uint64_t parse_u64(const char *opt, const char *s, uint64_t max)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v == 0 || v > max)
		bad_usage("bad value for %s", opt);
	return v;
}

/* Split a comma-separated list; calls item() on each element. */
/* NOLINTNEXTLINE(bugprone-easily-swappable-parameters): the order is fixed */
static void parse_list(const char *opt, const char *s, config *cfg,
                       void (*item)(config *, const char *, const char *))
{
	char buf[256];
	char *save = NULL;

	size_t len = strlen(s);

	if (len >= sizeof(buf))
		bad_usage("list too long for %s", opt);
	memcpy(buf, s, len + 1);
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
		item(cfg, opt, t);
}

static void add_engine(config *cfg, const char *opt, const char *name)
{
	for (int i = 0; i < NENGINES; i++) {
		if (strcmp(all_engines[i]->name, name) == 0) {
			if (cfg->nengines == PEERS_MAX_LIST)
				bad_usage("too many entries in %s", opt);
			cfg->engines[cfg->nengines++] = all_engines[i];
			return;
		}
	}
	bad_usage("unknown engine \"%s\"", name);
}

static void add_workload(config *cfg, const char *opt, const char *name)
{
	int w = peers_workload_by_name(name);

	if (w < 0)
		bad_usage("unknown workload \"%s\"", name);
	if (cfg->run.nworkloads == PEERS_MAX_LIST)
		bad_usage("too many entries in %s", opt);
	cfg->run.workloads[cfg->run.nworkloads++] = (peers_workload)w;
}

static void add_mode(config *cfg, const char *opt, const char *name)
{
	for (int i = 0; i < PEERS_MAX_MODES; i++) {
		if (strcmp(peers_client_mode_names[i], name) != 0)
			continue;
		for (int j = 0; j < cfg->run.nclient_modes; j++)
			if (cfg->run.client_modes[j] == (peers_client_mode)i)
				bad_usage("%s names a mode twice", opt);
		cfg->run.client_modes[cfg->run.nclient_modes++] = (peers_client_mode)i;
		return;
	}
	bad_usage("unknown client mode \"%s\" (threads or processes)", name);
}

static void add_procs(int *v, int *n, const char *opt, const char *s)
{
	if (*n == PEERS_MAX_LIST)
		bad_usage("too many entries in %s", opt);
	v[(*n)++] = (int)parse_u64(opt, s, PEERS_MAX_CLIENTS);
}

static void add_sync_procs(config *cfg, const char *opt, const char *s)
{
	add_procs(cfg->run.sync_procs, &cfg->run.nsync_procs, opt, s);
}

static void add_read_procs(config *cfg, const char *opt, const char *s)
{
	add_procs(cfg->run.read_procs, &cfg->run.nread_procs, opt, s);
}

static void add_txn_procs(config *cfg, const char *opt, const char *s)
{
	add_procs(cfg->run.txn_procs, &cfg->run.ntxn_procs, opt, s);
}

static void add_txn_commit(config *cfg, const char *opt, const char *s)
{
	bool sync = strcmp(s, "sync") == 0;

	if (!sync && strcmp(s, "async") != 0)
		bad_usage("unknown commit \"%s\" (async or sync)", s);
	for (int i = 0; i < cfg->run.ntxn_sync; i++)
		if (cfg->run.txn_sync[i] == sync)
			bad_usage("%s names a commit twice", opt);
	cfg->run.txn_sync[cfg->run.ntxn_sync++] = sync;
}

/* --warm-pass: true for a sampled warm pass. */
static bool parse_warm_pass(const char *s)
{
	if (strcmp(s, "sample") == 0)
		return true;
	if (strcmp(s, "full") != 0)
		bad_usage("unknown warm pass \"%s\" (full or sample)", s);
	return false;
}

/* --drop-caches is refused at once, not after the first load, when its file
 * cannot be written (not root). Opening it writes nothing. */
static void check_drop_caches(const char *path)
{
	int fd;

	do
		fd = open(path, O_WRONLY | O_CLOEXEC);
	while (fd < 0 && errno == EINTR);
	if (fd < 0) {
		fprintf(stderr, "walrus-peers: --drop-caches: cannot write \"%s\": %s%s\n", path,
		        strerror(errno),
		        errno == EACCES || errno == EPERM
		            ? " (dropping the kernel's caches needs root)"
		            : "");
		exit(PEERS_EXIT_DAMAGE);
	}
	if (close(fd) != 0) {
		fprintf(stderr, "walrus-peers: close(\"%s\") failed: %s\n", path, strerror(errno));
		exit(PEERS_EXIT_ERROR);
	}
}

/* A size: digits, then nothing (bytes) or kB, MB, GB, TB (units of 1024,
 * as walrus's options; case ignored). */
static uint64_t parse_size(const char *opt, const char *s)
{
	static const char *const units[] = {"", "kB", "MB", "GB", "TB"};
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || end == s || !isdigit((unsigned char)s[0]) || v == 0)
		bad_usage("bad value for %s (a size: 1GB, 512MB, ...)", opt);
	for (int i = 0; i < (int)(sizeof(units) / sizeof(units[0])); i++) {
		if (strcasecmp(end, units[i]) != 0)
			continue;
		if (v > (MAX_MEMORY_SIZE >> (10 * i)))
			bad_usage("%s is too large", opt);
		return (uint64_t)v << (10 * i);
	}
	bad_usage("bad value for %s (a size: 1GB, 512MB, ...)", opt);
}

/* --memory-limit is refused at once, as --drop-caches: it needs root and
 * the memory controller of cgroup v1. The cache must fit inside the limit. */
static void check_memory_limit(config *cfg)
{
	char path[PATH_MAX];
	struct stat st;

	if (cfg->memory_limit < (uint64_t)MIN_MEMORY_MB << 20) {
		fprintf(stderr, "walrus-peers: --memory-limit: at least %dMB\n", MIN_MEMORY_MB);
		exit(PEERS_EXIT_DAMAGE);
	}
	if (cfg->run.cache_mb == 0)
		cfg->run.cache_mb = cfg->memory_limit >> 22 ? cfg->memory_limit >> 22 : 1;
	if (cfg->run.cache_mb >= cfg->memory_limit >> 20) {
		fprintf(stderr,
		        "walrus-peers: --cache-mb %" PRIu64 " does not fit in --memory-limit of "
		        "%" PRIu64 " MiB\n",
		        cfg->run.cache_mb, cfg->memory_limit >> 20);
		exit(PEERS_EXIT_DAMAGE);
	}
	if (geteuid() != 0) {
		fprintf(stderr,
		        "walrus-peers: --memory-limit: making a memory cgroup needs root\n");
		exit(PEERS_EXIT_DAMAGE);
	}
	errno = 0;
	if ((size_t)snprintf(path, sizeof(path), "%s/memory.limit_in_bytes", cfg->memcg_root) >=
	        sizeof(path) - 64 ||
	    stat(path, &st) != 0) {
		fprintf(stderr,
		        "walrus-peers: --memory-limit: no memory controller of cgroup v1 at \"%s\" "
		        "(%s)\n",
		        cfg->memcg_root, errno ? strerror(errno) : "path too long");
		exit(PEERS_EXIT_DAMAGE);
	}
}

static void parse_args(int argc, char **argv, config *cfg)
{
	*cfg = (config){
	    .run = {
	        .num = 1000000, .sync_ops = 2000, .batch = 1, .fresh_dirs = true, .sizes = true}};
	for (int i = 1; i < argc; i++) {
		const char *k = argv[i];

		if (strcmp(k, "--json") == 0) {
			cfg->run.json = true;
			continue;
		}
		if (strcmp(k, "--keep") == 0) {
			cfg->keep = true;
			continue;
		}
		if (strcmp(k, "--compact") == 0) {
			cfg->run.compact = true;
			continue;
		}
		if (strcmp(k, "--lmdb-nordahead") == 0) {
			cfg->lmdb_nordahead = true;
			continue;
		}
		if (strcmp(k, "--snapshot") == 0) {
			cfg->run.snapshot = cfg->run.snapshot_and_plain = true;
			continue;
		}
		if (strcmp(k, "--drop-caches") == 0) {
			if (cfg->run.drop_caches == NULL)
				cfg->run.drop_caches = DROP_CACHES_FILE;
			continue;
		}
		if (strcmp(k, "--help") == 0 || strcmp(k, "-h") == 0) {
			usage(stdout);
			exit(0);
		}
		if (i + 1 >= argc)
			bad_usage("%s needs a value (or is unknown)", k);
		const char *v = argv[++i];

		if (strcmp(k, "--num") == 0)
			cfg->run.num = parse_u64(k, v, PEERS_MAX_KEYS);
		else if (strcmp(k, "--reads") == 0)
			cfg->run.reads = parse_u64(k, v, PEERS_MAX_KEYS);
		else if (strcmp(k, "--writes") == 0)
			cfg->run.writes = parse_u64(k, v, PEERS_MAX_KEYS);
		else if (strcmp(k, "--scan-keys") == 0)
			cfg->run.scan_keys = parse_u64(k, v, PEERS_MAX_KEYS);
		else if (strcmp(k, "--writer-rate") == 0)
			cfg->run.writer_rate = parse_u64(k, v, 1000000000);
		else if (strcmp(k, "--warm-pass") == 0)
			cfg->run.warm_sample = parse_warm_pass(v);
		else if (strcmp(k, "--sync-ops") == 0)
			cfg->run.sync_ops = parse_u64(k, v, PEERS_MAX_KEYS / PEERS_MAX_CLIENTS);
		else if (strcmp(k, "--sync-seconds") == 0)
			cfg->sync_seconds = parse_u64(k, v, MAX_SYNC_SECONDS);
		else if (strcmp(k, "--txn-seconds") == 0)
			cfg->txn_seconds = parse_u64(k, v, MAX_SYNC_SECONDS);
		else if (strcmp(k, "--txn-ops") == 0)
			cfg->run.txn_ops = parse_u64(k, v, MAX_TXN_OPS);
		else if (strcmp(k, "--txn-procs") == 0)
			parse_list(k, v, cfg, add_txn_procs);
		else if (strcmp(k, "--txn-commit") == 0)
			parse_list(k, v, cfg, add_txn_commit);
		else if (strcmp(k, "--drop-caches-file") == 0)
			cfg->run.drop_caches = v;
		else if (strcmp(k, "--memory-limit") == 0)
			cfg->memory_limit = parse_size(k, v);
		else if (strcmp(k, "--memory-cgroup-root") == 0)
			cfg->memcg_root = v;
		else if (strcmp(k, "--batch") == 0)
			cfg->run.batch = parse_u64(k, v, PEERS_MAX_BATCH);
		else if (strcmp(k, "--cache-mb") == 0)
			cfg->run.cache_mb = parse_u64(k, v, PEERS_MAX_CACHE_MB);
		else if (strcmp(k, "--engines") == 0)
			parse_list(k, v, cfg, add_engine);
		else if (strcmp(k, "--workloads") == 0)
			parse_list(k, v, cfg, add_workload);
		else if (strcmp(k, "--sync-procs") == 0)
			parse_list(k, v, cfg, add_sync_procs);
		else if (strcmp(k, "--read-procs") == 0)
			parse_list(k, v, cfg, add_read_procs);
		else if (strcmp(k, "--walrus-clients") == 0)
			parse_list(k, v, cfg, add_mode);
		else if (strcmp(k, "--dir") == 0)
			cfg->dir = v;
		else if (strcmp(k, "-o") == 0) {
			if (cfg->nopts == MAX_OPTS)
				bad_usage("too many %s options", k);
			cfg->opts[cfg->nopts++] = v;
		} else
			bad_usage("unknown option \"%s\"", k);
	}
	if (cfg->nengines == 0)
		parse_list("--engines", PEERS_DEFAULT_ENGINES, cfg, add_engine);
	if (cfg->run.nworkloads == 0)
		parse_list("--workloads", PEERS_DEFAULT_WORKLOADS, cfg, add_workload);
	if (cfg->run.nsync_procs == 0)
		parse_list("--sync-procs", "1,8", cfg, add_sync_procs);
	if (cfg->run.nread_procs == 0)
		parse_list("--read-procs", "1,2", cfg, add_read_procs);
	if (cfg->run.nclient_modes == 0)
		parse_list("--walrus-clients", PEERS_DEFAULT_MODES, cfg, add_mode);
	if (cfg->run.ntxn_procs == 0)
		cfg->run.txn_procs[cfg->run.ntxn_procs++] = PEERS_TXN_CLIENTS;
	if (cfg->run.ntxn_sync == 0)
		parse_list("--txn-commit", "async,sync", cfg, add_txn_commit);
	if (cfg->run.scan_keys > cfg->run.num)
		bad_usage("--scan-keys is more than the %s keys", "--num");
	cfg->run.sync_duration_ns = cfg->sync_seconds * 1000000000u;
	cfg->run.txn_duration_ns = cfg->txn_seconds * 1000000000u;
	if (cfg->run.drop_caches != NULL)
		check_drop_caches(cfg->run.drop_caches);
	if (cfg->memcg_root == NULL)
		cfg->memcg_root = MEMCG_ROOT;
	if (cfg->memory_limit != 0)
		check_memory_limit(cfg);
}

/* The walrus engine's options: the peers' cache size, then every -o. */
static walrus_opts *make_walrus_opts(const config *cfg)
{
	walrus_opts *o = walrus_opts_new();

	if (o == NULL) {
		fprintf(stderr, "walrus-peers: walrus_opts_new failed: out of memory\n");
		exit(PEERS_EXIT_ERROR);
	}
	char sb[32] = PEERS_WALRUS_SHARED_BUFFERS;

	if (cfg->run.cache_mb)
		snprintf(sb, sizeof(sb), "%lluMB", (unsigned long long)cfg->run.cache_mb);
	if (walrus_opts_set(o, "shared_buffers", sb) != WALRUS_OK) {
		fprintf(stderr, "walrus-peers: shared_buffers: %s\n", walrus_errmsg());
		exit(PEERS_EXIT_ERROR);
	}
	for (int i = 0; i < cfg->nopts; i++) {
		char name[128];
		const char *eq = strchr(cfg->opts[i], '=');
		size_t n = eq ? (size_t)(eq - cfg->opts[i]) : 0;

		if (eq == NULL || n == 0 || n >= sizeof(name))
			bad_usage("-o wants name=value, not \"%s\"", cfg->opts[i]);
		memcpy(name, cfg->opts[i], n);
		name[n] = '\0';
		if (walrus_opts_set(o, name, eq + 1) != WALRUS_OK) {
			fprintf(stderr, "walrus-peers: -o %s: %s\n", cfg->opts[i], walrus_errmsg());
			usage(stderr);
			exit(PEERS_EXIT_DAMAGE);
		}
	}
	return o;
}

/* ------------------------------------------------------ memory cgroups */

/*
 * --memory-limit: each engine runs in a child process of its own, which
 * joins a new memory cgroup (MEMCG_ROOT/walrus-peers-PID-ENGINE) before it
 * opens the engine, so that everything it forks joins too: the clients,
 * and walrus's supervisor and auxiliaries, which walrus_open forks. The
 * parent waits for it, kills whatever is left in the cgroup, reports a
 * failed row when the child did not succeed (the OOM killer's SIGKILL
 * among others), and removes the cgroup on every path.
 */
static volatile sig_atomic_t g_stop_signal;

static void on_stop_signal(int sig)
{
	g_stop_signal = sig;
}

static void cg_file(char *out, size_t n, const char *cg, const char *file)
{
	if ((size_t)snprintf(out, n, "%s/%s", cg, file) >= n)
		peers_fatal(NULL, "memory cgroup", "path too long: \"%s\"", cg);
}

/* Writes @text to the cgroup's @file: 0 or an errno value. */
static int cg_write(const char *cg, const char *file, const char *text)
{
	char path[PATH_MAX];
	size_t n = strlen(text);
	int fd, err = 0;

	cg_file(path, sizeof(path), cg, file);
	do
		fd = open(path, O_WRONLY | O_CLOEXEC);
	while (fd < 0 && errno == EINTR);
	if (fd < 0)
		return errno;
	if (write(fd, text, n) != (ssize_t)n)
		err = errno ? errno : EIO;
	if (close(fd) != 0 && err == 0)
		err = errno;
	return err;
}

/* The number after @key in the cgroup's @file ("KEY VALUE" lines; NULL:
 * the file is one number); 0 when absent or unreadable. */
static uint64_t cg_read(const char *cg, const char *file, const char *key)
{
	char path[PATH_MAX], name[64];
	unsigned long long v = 0, got = 0;
	FILE *f;

	cg_file(path, sizeof(path), cg, file);
	f = fopen(path, "re");
	if (f == NULL)
		return 0;
	if (key == NULL) {
		if (fscanf(f, "%llu", &got) != 1)
			got = 0;
	} else {
		while (fscanf(f, "%63s %llu", name, &v) == 2)
			if (strcmp(name, key) == 0)
				got = v;
	}
	if (fclose(f) != 0)
		return 0;
	return got;
}

/* Kills every process in the cgroup and waits until each has exited. They
 * need not be ours (walrus's supervisor is not), hence pidfds: one taken
 * before the signal cannot name a reused pid. Returns 0 or an errno value. */
static int cg_empty(const char *cg)
{
	char path[PATH_MAX];

	cg_file(path, sizeof(path), cg, "cgroup.procs");
	for (;;) {
		FILE *f = fopen(path, "re");
		long long pid;
		int n = 0;

		if (f == NULL)
			return errno;
		while (fscanf(f, "%lld", &pid) == 1) {
			int fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
			struct pollfd p = {.fd = fd, .events = POLLIN};

			n++;
			if (fd < 0) {
				if (errno == ESRCH)
					continue;
				(void)fclose(f);
				return errno;
			}
			if (syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0) != 0 &&
			    errno != ESRCH)
				fprintf(stderr, "walrus-peers: kill(%lld) failed: %s\n", pid,
				        strerror(errno));
			while (poll(&p, 1, -1) < 0 && errno == EINTR)
				;
			if (close(fd) != 0)
				fprintf(stderr, "walrus-peers: close(pidfd) failed: %s\n",
				        strerror(errno));
		}
		if (fclose(f) != 0)
			return errno;
		if (n == 0)
			return 0;
	}
}

/* Empties and removes the cgroup; says so on stderr when it cannot. */
static void cg_remove(const char *cg)
{
	int err = cg_empty(cg);

	if (err != 0)
		fprintf(stderr, "walrus-peers: emptying memory cgroup \"%s\" failed: %s\n", cg,
		        strerror(err));
	if (rmdir(cg) != 0 && errno != ENOENT)
		fprintf(stderr, "walrus-peers: rmdir(\"%s\") failed: %s\n", cg, strerror(errno));
}

static void default_stop_signals(void)
{
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};

	for (int i = 0; i < 3; i++)
		if (sigaction(sigs[i], &(struct sigaction){.sa_handler = SIG_DFL}, NULL) != 0)
			peers_fatal(NULL, "sigaction", "%s", strerror(errno));
}

/* A signal that would stop the program stops the engine's child instead,
 * so that the parent removes the cgroup before it exits. */
static void catch_stop_signals(void)
{
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};

	for (int i = 0; i < 3; i++)
		if (sigaction(sigs[i], &(struct sigaction){.sa_handler = on_stop_signal}, NULL) !=
		    0)
			peers_fatal(NULL, "sigaction", "%s", strerror(errno));
}

/* The child: joins the cgroup, then runs the engine as without a limit. */
static _Noreturn void engine_child(config *cfg, const peers_engine *e, const char *sub,
                                   const char *cg)
{
	char pid[32];
	int err;

	default_stop_signals();
	/* The scratch base is the parent's to remove, after every engine. */
	peers_set_scratch(g_base, false, cfg->keep);
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	err = cg_write(cg, "cgroup.procs", pid);
	if (err != 0)
		peers_fatal(e->name, "memory cgroup", "writing %s to \"%s/cgroup.procs\": %s", pid,
		            cg, strerror(err));
	cfg->run.memcg = cg;
	peers_run_engine(&cfg->run, e, sub);
	if (!cfg->keep)
		peers_remove_dir(e, sub);
	peers_flush(stdout);
	exit(0);
}

/* The row of an engine whose child failed: how, and what the cgroup saw. */
static void failed_row(const config *cfg, const peers_engine *e, const char *cg, int st)
{
	FILE *human = cfg->run.json ? stderr : stdout;
	uint64_t max = cg_read(cg, "memory.max_usage_in_bytes", NULL);
	uint64_t failcnt = cg_read(cg, "memory.failcnt", NULL);
	uint64_t ooms = cg_read(cg, "memory.oom_control", "oom_kill");
	char how[64];

	if (WIFSIGNALED(st))
		snprintf(how, sizeof(how), "killed by signal %d", WTERMSIG(st));
	else
		snprintf(how, sizeof(how), "exit %d", WEXITSTATUS(st));
	fprintf(human,
	        "%-12s failed under --memory-limit: %s  memcg max %.1f of %.1f MiB failcnt %" PRIu64
	        " oom_kill %" PRIu64 "\n",
	        e->name, how, (double)max / 1048576.0, (double)cfg->memory_limit / 1048576.0,
	        failcnt, ooms);
	peers_flush(human);
	if (!cfg->run.json)
		return;
	printf("{\"engine\":\"%s\",\"workload\":null,\"failed\":true,\"exit_code\":", e->name);
	if (WIFSIGNALED(st))
		printf("null,\"signal\":%d", WTERMSIG(st));
	else
		printf("%d,\"signal\":null", WEXITSTATUS(st));
	printf(",\"memory_limit_bytes\":%" PRIu64 ",\"memory_max_usage_bytes\":%" PRIu64
	       ",\"memory_failcnt\":%" PRIu64 ",\"memory_oom_kills\":%" PRIu64 "}\n",
	       cfg->memory_limit, max, failcnt, ooms);
	peers_flush(stdout);
}

/* Removes what a failed or stopped child left: its processes are gone. */
static void remove_leftovers(const config *cfg, const char *sub)
{
	int err;

	if (cfg->keep)
		return;
	err = peers_rm_tree(sub);
	if (err != 0)
		fprintf(stderr, "walrus-peers: could not remove \"%s\": %s\n", sub, strerror(err));
}

/* Runs engine @e in its cgroup; returns 0, or the failed child's exit code
 * (PEERS_EXIT_ERROR when a signal ended it). */
static int run_in_cgroup(config *cfg, const peers_engine *e, const char *sub)
{
	char cg[PATH_MAX], lim[32];
	pid_t pid;
	int st = 0, err;

	if ((size_t)snprintf(cg, sizeof(cg), "%s/walrus-peers-%d-%s", cfg->memcg_root,
	                     (int)getpid(), e->name) >= sizeof(cg) - 64)
		peers_fatal(e->name, "memory cgroup", "path too long under \"%s\"",
		            cfg->memcg_root);
	if (mkdir(cg, 0755) != 0)
		peers_fatal(e->name, "mkdir", "\"%s\": %s", cg, strerror(errno));
	snprintf(lim, sizeof(lim), "%" PRIu64, cfg->memory_limit);
	err = cg_write(cg, "memory.limit_in_bytes", lim);
	if (err != 0) {
		cg_remove(cg);
		peers_fatal(e->name, "memory cgroup",
		            "writing %s to \"%s/memory.limit_in_bytes\": %s", lim, cg,
		            strerror(err));
	}
	peers_flush(stdout);
	peers_flush(stderr);
	pid = fork();
	if (pid < 0) {
		err = errno;
		cg_remove(cg);
		peers_fatal(e->name, "fork", "%s", strerror(err));
	}
	if (pid == 0)
		engine_child(cfg, e, sub, cg);
	while (waitpid(pid, &st, 0) < 0) {
		if (errno != EINTR) {
			err = errno;
			(void)kill(pid, SIGKILL);
			cg_remove(cg);
			peers_fatal(e->name, "waitpid", "%s", strerror(err));
		}
		if (g_stop_signal != 0 && kill(pid, SIGKILL) != 0 && errno != ESRCH)
			fprintf(stderr, "walrus-peers: kill(%d) failed: %s\n", (int)pid,
			        strerror(errno));
	}
	if (g_stop_signal != 0) {
		cg_remove(cg);
		remove_leftovers(cfg, sub);
		peers_fatal(e->name, "run", "stopped by signal %d", (int)g_stop_signal);
	}
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
		cg_remove(cg);
		return 0;
	}
	failed_row(cfg, e, cg, st);
	cg_remove(cg);
	remove_leftovers(cfg, sub);
	return WIFEXITED(st) ? WEXITSTATUS(st) : PEERS_EXIT_ERROR;
}

static void make_base(const config *cfg)
{
	if (cfg->dir != NULL) {
		struct stat st;

		if ((size_t)snprintf(g_base, sizeof(g_base), "%s", cfg->dir) >= sizeof(g_base) - 16)
			peers_fatal(NULL, "--dir", "path too long");
		if (mkdir(g_base, 0755) == 0)
			g_base_created = true;
		else if (errno != EEXIST)
			peers_fatal(NULL, "mkdir", "\"%s\": %s", g_base, strerror(errno));
		if (stat(g_base, &st) != 0)
			peers_fatal(NULL, "stat", "\"%s\": %s", g_base, strerror(errno));
		if (!S_ISDIR(st.st_mode))
			peers_fatal(NULL, "--dir", "\"%s\" is not a directory", g_base);
		return;
	}
	const char *tmp = getenv("TMPDIR");

	if (tmp == NULL || tmp[0] == '\0')
		tmp = "/tmp";
	if ((size_t)snprintf(g_base, sizeof(g_base), "%s/walrus-peers.XXXXXX", tmp) >=
	    sizeof(g_base) - 16)
		peers_fatal(NULL, "mkdtemp", "path too long under \"%s\"", tmp);
	if (mkdtemp(g_base) == NULL)
		peers_fatal(NULL, "mkdtemp", "\"%s\": %s", g_base, strerror(errno));
	g_base_created = true;
}

int main(int argc, char **argv)
{
	config cfg;
	walrus_opts *wopts;
	int failed = 0; /* --memory-limit: the first failed engine's exit code */

	check_workload_list();
	parse_args(argc, argv, &cfg);
	wopts = make_walrus_opts(&cfg);
	peers_walrus_use_opts(wopts);
	peers_lmdb_nordahead(cfg.lmdb_nordahead);
	peers_init("walrus-peers");
	make_base(&cfg);
	peers_set_scratch(g_base, g_base_created, cfg.keep);

	FILE *human = cfg.run.json ? stderr : stdout;

	fprintf(human,
	        "walrus-peers: num=%" PRIu64 " sync-ops=%" PRIu64 " batch=%" PRIu64
	        " cache-mb=%" PRIu64 " dir=%s",
	        cfg.run.num, cfg.run.sync_ops, cfg.run.batch,
	        cfg.run.cache_mb ? cfg.run.cache_mb : (uint64_t)PEERS_CACHE_MB, g_base);
	for (int i = 0; i < cfg.nengines; i++)
		fprintf(human, " %s=%s", cfg.engines[i]->name, cfg.engines[i]->version());
	if (cfg.sync_seconds)
		fprintf(human, " sync-seconds=%" PRIu64, cfg.sync_seconds);
	if (cfg.txn_seconds)
		fprintf(human, " txn-seconds=%" PRIu64, cfg.txn_seconds);
	if (cfg.run.reads)
		fprintf(human, " reads=%" PRIu64, cfg.run.reads);
	if (cfg.run.writes)
		fprintf(human, " writes=%" PRIu64, cfg.run.writes);
	if (cfg.run.scan_keys)
		fprintf(human, " scan-keys=%" PRIu64, cfg.run.scan_keys);
	if (cfg.run.writer_rate)
		fprintf(human, " writer-rate=%" PRIu64, cfg.run.writer_rate);
	if (cfg.run.warm_sample)
		fprintf(human, " warm-pass=sample");
	if (cfg.lmdb_nordahead)
		fprintf(human, " lmdb-nordahead");
	if (cfg.run.snapshot)
		fprintf(human, " snapshot");
	if (cfg.run.drop_caches != NULL)
		fprintf(human, " drop-caches=%s", cfg.run.drop_caches);
	if (cfg.memory_limit != 0)
		fprintf(human, " memory-limit=%" PRIu64 " memory-cgroup-root=%s", cfg.memory_limit,
		        cfg.memcg_root);
	fprintf(human, " walrus-clients=");
	for (int i = 0; i < cfg.run.nclient_modes; i++)
		fprintf(human, "%s%s", i ? "," : "",
		        peers_client_mode_names[cfg.run.client_modes[i]]);
	for (int i = 0; i < cfg.nopts; i++)
		fprintf(human, " -o %s", cfg.opts[i]);
	fputc('\n', human);
	peers_flush(human);

	if (cfg.memory_limit != 0)
		catch_stop_signals();
	for (int i = 0; i < cfg.nengines; i++) {
		const peers_engine *e = cfg.engines[i];
		char sub[PATH_MAX];

		if ((size_t)snprintf(sub, sizeof(sub), "%s/%s", g_base, e->name) >= sizeof(sub))
			peers_fatal(e->name, "--dir", "path too long");
		if (cfg.memory_limit != 0) {
			int code = run_in_cgroup(&cfg, e, sub);

			failed = failed ? failed : code;
			continue;
		}
		peers_run_engine(&cfg.run, e, sub);
		if (!cfg.keep)
			peers_remove_dir(e, sub);
	}
	if (cfg.keep) {
		fprintf(human, "walrus-peers: kept %s\n", g_base);
	} else if (g_base_created) {
		int err = peers_rm_tree(g_base);

		peers_set_scratch(NULL, false, false);
		if (err != 0)
			peers_fatal(NULL, "remove", "\"%s\": %s", g_base, strerror(err));
	}
	peers_flush(stdout);
	peers_walrus_use_opts(NULL);
	walrus_opts_free(wopts);
	return failed;
}
