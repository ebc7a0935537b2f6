/*
 * peers.h - the db_bench-style key-value workloads (workloads.c), the
 * interface each engine implements for them (eng_*.c), and the helpers the
 * engine files share with them. Two programs run the workloads: walrus-peers
 * (peers.c: walrus, SQLite, LMDB and RocksDB side by side) and the walrus
 * command's `walrus bench --workload fillseq|...` (tools/cmd_bench_kv.c: the
 * walrus engine alone). The workload library itself links no engine.
 *
 * Interface routines of an engine (peers_engine):
 *   open     open or create the database in a directory, for asynchronous
 *            (sync = false) or durable (sync = true) writes
 *   put      one write, committed on its own (no batching)
 *   get      one point read into a caller buffer; false when absent
 *   scan     every pair in key order, handed to a callback
 *   close    release the handle
 *   idle     optional: wait until no process of the engine uses the
 *            directory any more (walrus: its instance has shut down), so
 *            that the directory may be removed
 *
 * Notes: an engine never returns an error. Every library call is checked and
 * a failure ends the program through peers_fatal(), which names the engine
 * and the call, so the workloads stay free of error plumbing. An engine with
 * threads == true cannot be opened by several processes at once; its
 * multi-client workloads share one handle among threads. Otherwise every
 * client is a forked process that opens its own handle (the parent holds
 * none across fork()).
 */
#ifndef WALRUS_PEERS_H
#define WALRUS_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes, as the walrus command's: usage or verification failure, engine
 * or system error. */
#define PEERS_EXIT_DAMAGE 2
#define PEERS_EXIT_ERROR  3

#define PEERS_MAX_CLIENTS 64
#define PEERS_MAX_LIST    16
#define PEERS_MAX_KEYS    10000000000000000ull /* 10^16: keys are 16 decimal digits */

typedef void (*peers_scan_cb)(void *arg, const char *key, size_t klen, const char *val,
                              size_t vlen);

typedef struct peers_open_args {
	const char *dir; /* the database's directory (it holds nothing else) */
	bool sync;       /* each put durable before it returns */
	uint64_t nkeys;  /* most keys the database will hold (LMDB map size) */
} peers_open_args;

typedef struct peers_engine {
	const char *name;
	bool threads; /* single-process engine: clients are threads */
	const char *(*version)(void);
	void *(*open)(const peers_open_args *args);
	void (*close)(void *h);
	void (*put)(void *h, const char *key, size_t klen, const char *val, size_t vlen);
	bool (*get)(void *h, const char *key, size_t klen, char *buf, size_t cap, size_t *vlen);
	void (*scan)(void *h, peers_scan_cb cb, void *arg);
	void (*idle)(const char *dir); /* may be NULL */
} peers_engine;

extern const peers_engine peers_walrus;
extern const peers_engine peers_sqlite;
extern const peers_engine peers_lmdb;
extern const peers_engine peers_rocksdb;

/* The walrus engine opens with these options (create_if_missing is set on
 * them); NULL, the default, means the engine's own, all defaults. The
 * caller keeps ownership; they must outlive every open. */
struct walrus_opts;
void peers_walrus_use_opts(struct walrus_opts *opts);

/* ------------------------------------------------------------ workloads */

typedef enum peers_workload {
	PEERS_FILLSEQ,
	PEERS_FILLRANDOM,
	PEERS_FILLSYNC,
	PEERS_READRANDOM,
	PEERS_SCAN,
	PEERS_WORKLOAD_COUNT
} peers_workload;

extern const char *const peers_workload_names[PEERS_WORKLOAD_COUNT];

/* The workload named @name, or -1. */
int peers_workload_by_name(const char *name);

typedef struct peers_config {
	uint64_t num;      /* keys of fillseq, fillrandom, readrandom, scan */
	uint64_t sync_ops; /* durable puts per fillsync client */
	peers_workload workloads[PEERS_MAX_LIST];
	int nworkloads;
	int sync_procs[PEERS_MAX_LIST]; /* fillsync client counts */
	int nsync_procs;
	int read_procs[PEERS_MAX_LIST]; /* readrandom client counts */
	int nread_procs;
	bool json; /* JSON lines on stdout, human lines on stderr */
	/*
	 * true (walrus-peers): a workload that needs a new database removes and
	 * recreates the engine's directory. false (walrus bench): the directory
	 * is used as found; the caller checked that a fill starts from an empty
	 * one.
	 */
	bool fresh_dirs;
	/* The directory already holds a fillseq load of num keys, so readrandom
	 * and scan start at once (the warm passes check it). */
	bool loaded;
} peers_config;

/*
 * Once, before anything else: @prog prefixes every message ("walrus-peers",
 * "walrus bench"). Ignores SIGPIPE (a closed output is reported as a failed
 * write) and checks the key encoder.
 */
void peers_init(const char *prog);

/*
 * What the error path removes (unless @keep): @base, when @created, after
 * the directory of the engine being run. With @keep everything stays.
 */
void peers_set_scratch(const char *base, bool created, bool keep);

/* Runs cfg's workloads in order against @e in directory @dir, printing one
 * line per (workload, client count). Returns only on success. */
void peers_run_engine(const peers_config *cfg, const peers_engine *e, const char *dir);

/* Waits until @e is done with @dir (its idle routine), then removes it. */
void peers_remove_dir(const peers_engine *e, const char *dir);

/* Removes a directory tree; absent is fine. Returns 0 or an errno value. */
int peers_rm_tree(const char *path);

/* Flushes @f; a failed write is fatal like any other error. */
void peers_flush(FILE *f);

/* ---------------------------------------------------------------- errors */

/* Print "PROG: WHO: OP failed: DETAIL" (WHO is the engine, or NULL outside
 * an engine's run), stop every child process, remove the scratch
 * directories (unless kept) and exit with PEERS_EXIT_ERROR. Safe to call
 * from a child process or a thread. */
_Noreturn void peers_fatal(const char *who, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Same, for a wrong result (exit PEERS_EXIT_DAMAGE). */
_Noreturn void peers_mismatch(const char *who, const char *workload, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void *peers_xmalloc(const char *what, size_t n);

#endif
