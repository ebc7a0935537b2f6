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
 *   put      one write, committed on its own, or, between batch_begin and
 *            batch_commit, one write of the open batch
 *   batch_begin, batch_commit
 *            optional (NULL: the engine has no batches in the definitions,
 *            RocksDB, whose puts stay one write each): the puts between them
 *            are one transaction, committed as a put would be
 *   get      one point read into a caller buffer; false when absent
 *   scan     every pair in key order, handed to a callback
 *   range    up to a given number of pairs in key order from the first key at
 *            or after a start key, handed to a callback (scanrange)
 *   close    release the handle
 *   idle     optional: wait until no process of the engine uses the
 *            directory any more (walrus: its instance has shut down), so
 *            that the directory may be removed, or measured
 *   data_dir, wal_dir
 *            optional (NULL: the engine's files are reported as one): the
 *            subdirectories whose on-disk bytes the size figures give apart
 *   snapshot optional (NULL: no snapshots): take (or release) a snapshot on
 *            the handle; while it is held, get and scan read through it
 *   txn_new, txn_free, txn_begin, txn_get, txn_put, txn_commit
 *            optional (txn_new NULL: no transactions, and txn_transfer skips
 *            the engine): a client's transaction context on a handle (the
 *            handle may be shared by threads: each client has its own
 *            context), and one read-write transaction at a time through it,
 *            committed as a put would be (durable or not by the open's
 *            sync). Any of them may answer PEERS_TXN_CONFLICT (a commit's
 *            validation failed, a lock wait timed out or would deadlock, the
 *            write lock is busy): the engine has then rolled the transaction
 *            back, nothing of it applied, and the caller runs it again from
 *            txn_begin
 *
 * Notes: an engine never returns an error. Every library call is checked and
 * a failure ends the program through peers_fatal(), which names the engine
 * and the call, so the workloads stay free of error plumbing. An engine with
 * threads == true cannot be opened by several processes at once; its
 * multi-client workloads share one handle among threads. An engine with
 * thread_handles == true (walrus) runs its clients either way the caller
 * asks (peers_config.client_modes): as threads of this process, each opening
 * its own handle, or as forked processes. Otherwise every client is a
 * forked process that opens its own handle (the parent holds none across
 * fork()).
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

#define PEERS_MAX_CLIENTS  64
#define PEERS_MAX_LIST     16
#define PEERS_MAX_KEYS     10000000000000000ull /* 10^16: keys are 16 decimal digits */
#define PEERS_MAX_BATCH    100000               /* puts per commit of the fills (--batch) */
#define PEERS_MAX_CACHE_MB (1u << 20)           /* --cache-mb: 1 TiB */
#define PEERS_CACHE_MB     256                  /* the peers' cache when --cache-mb is not given */

/* txn_transfer: accounts 0..PEERS_TXN_ACCOUNTS-1, each loaded with this
 * balance, so that the sum of all balances is always their product. */
#define PEERS_TXN_ACCOUNTS 10000
#define PEERS_TXN_BALANCE  1000
#define PEERS_TXN_CLIENTS  8    /* txn_transfer's default client count */
#define PEERS_TXN_OPS      2000 /* committed transfers per client by default */

/* Key and value sizes (peers_config.key_size, value_size; the definitions'
 * are 16 and 100). A key of K bytes holds K decimal digits, so at most
 * 10^K keys (peers_max_keys). */
#define PEERS_KEY_SIZE       16
#define PEERS_VALUE_SIZE     100
#define PEERS_MIN_KEY_SIZE   4
#define PEERS_MAX_KEY_SIZE   1024
#define PEERS_MIN_VALUE_SIZE 16 /* an updated value names its round in 16 bytes */
#define PEERS_MAX_VALUE_SIZE (1u << 20)

/* What a transaction's step answers (peers_engine.txn_*). */
typedef enum peers_txn_rc {
	PEERS_TXN_OK,
	PEERS_TXN_ABSENT,  /* txn_get: no such key */
	PEERS_TXN_CONFLICT /* rolled back, nothing applied: run it again */
} peers_txn_rc;

typedef void (*peers_scan_cb)(void *arg, const char *key, size_t klen, const char *val,
                              size_t vlen);

typedef struct peers_open_args {
	const char *dir;   /* the database's directory (it holds nothing else) */
	bool sync;         /* each put durable before it returns */
	uint64_t nkeys;    /* most keys the database will hold (LMDB map size) */
	uint64_t cache_mb; /* SQLite's page cache, RocksDB's block cache; 0: PEERS_CACHE_MB */
} peers_open_args;

typedef struct peers_engine {
	const char *name;
	bool threads;        /* single-process engine: clients are threads on one handle */
	bool thread_handles; /* each thread may open a handle of its own: clients may be
	                        threads (peers_config.client_modes) */
	const char *(*version)(void);
	void *(*open)(const peers_open_args *args);
	void (*close)(void *h);
	void (*put)(void *h, const char *key, size_t klen, const char *val, size_t vlen);
	bool (*get)(void *h, const char *key, size_t klen, char *buf, size_t cap, size_t *vlen);
	void (*scan)(void *h, peers_scan_cb cb, void *arg);
	void (*range)(void *h, const char *start, size_t slen, uint64_t max, peers_scan_cb cb,
	              void *arg);
	void (*idle)(const char *dir); /* may be NULL */
	void (*batch_begin)(void *h);  /* may be NULL: no batches */
	void (*batch_commit)(void *h);
	/* may be NULL: the engine's own check of its structures, after the
	 * content checks of the workloads that write (walrus: walrus_verify) */
	void (*check)(void *h, const char *what);
	const char *data_dir; /* may be NULL: see above */
	const char *wal_dir;
	/* may be NULL: gives back the space the engine's files hold unused
	 * (walrus: walrus_compact); returns the seconds it took */
	double (*compact)(void *h);
	void (*snapshot)(void *h, bool take); /* may be NULL: see above */
	void *(*txn_new)(void *h);            /* may be NULL: no transactions */
	void (*txn_free)(void *t);
	peers_txn_rc (*txn_begin)(void *t);
	peers_txn_rc (*txn_get)(void *t, const char *key, size_t klen, char *buf, size_t cap,
	                        size_t *vlen);
	peers_txn_rc (*txn_put)(void *t, const char *key, size_t klen, const char *val,
	                        size_t vlen);
	peers_txn_rc (*txn_commit)(void *t);
} peers_engine;

extern const peers_engine peers_walrus;
extern const peers_engine peers_sqlite;
extern const peers_engine peers_lmdb;
extern const peers_engine peers_rocksdb;
extern const peers_engine peers_rocksdb_otxn; /* OptimisticTransactionDB */
extern const peers_engine peers_rocksdb_ptxn; /* TransactionDB (pessimistic, locks) */

/* The walrus engine opens with these options (create_if_missing is set on
 * them); NULL, the default, means the engine's own, all defaults. The
 * caller keeps ownership; they must outlive every open. */
struct walrus_opts;
void peers_walrus_use_opts(struct walrus_opts *opts);
/* Every handle reads and writes key space @name (made by the first open;
 * NULL, the default: the default space).  Called with no client running;
 * the caller keeps @name alive. */
void peers_walrus_use_space(const char *name);
/* LMDB's environments open with MDB_NORDAHEAD (no read-around of its map's
 * page faults: LMDB's advice when the database is larger than memory) when
 * @on; off by default. Called with no client running. */
void peers_lmdb_nordahead(bool on);

/* ------------------------------------------------------------ workloads */

typedef enum peers_workload {
	PEERS_FILLSEQ,
	PEERS_FILLRANDOM,
	PEERS_FILLSYNC,
	PEERS_READRANDOM,
	PEERS_SCAN,
	PEERS_READWHILEWRITING,
	PEERS_UPDATERANDOM,
	PEERS_TXN_TRANSFER,
	PEERS_SCANRANGE,   /* walrus-peers only: walrus bench refuses it */
	PEERS_WRITERANDOM, /* walrus-peers only */
	PEERS_WORKLOAD_COUNT
} peers_workload;

extern const char *const peers_workload_names[PEERS_WORKLOAD_COUNT];

/* The workload named @name, or -1. */
int peers_workload_by_name(const char *name);

/* The largest latency record a client of this process allocated, in bytes
 * (untimed clients keep none; a timed one a histogram of fixed size). */
uint64_t peers_latency_record_max(void);
/* Checks the latency histogram's buckets and percentiles: NULL, or what is wrong. */
const char *peers_latency_selftest(void);

/* Most keys a database of @key_size-byte keys holds (10^key_size, at most
 * PEERS_MAX_KEYS). */
uint64_t peers_max_keys(size_t key_size);

/* The on-disk bytes (st_blocks * 512 of every regular file) of an engine's
 * directory, and of its data and WAL subdirectories when it names them
 * (peers_engine.data_dir, wal_dir; 0 otherwise). raw: the keys' and
 * values' bytes the database holds. */
typedef struct peers_sizes {
	uint64_t total, data, wal, raw;
	const char *data_dir, *wal_dir; /* the engine's, or NULL: data and wal are 0 */
} peers_sizes;

/* Measures @dir for @e; the engine must be done with it (idle). */
void peers_disk_usage(const peers_engine *e, const char *dir, peers_sizes *out);

/* A workload's figures: the measured clients' operations (readwhilewriting:
 * the readers') pooled, and readwhilewriting's writer apart. Latencies in
 * microseconds, nearest-rank percentiles read from a histogram (within
 * 1/128 above the exact one, never above the maximum); has_lat false for scan. */
typedef struct peers_result {
	const char *engine;
	const char *workload;
	const char *mode; /* "processes" or "threads": how the clients ran */
	int procs;        /* measured clients */
	uint64_t batch;   /* puts per commit of a fill (1: each its own; 0: not a fill) */
	uint64_t ops;
	uint64_t start_ns, end_ns; /* CLOCK_MONOTONIC: first start, last end */
	uint64_t ns;               /* end_ns - start_ns */
	bool has_lat;
	double avg_us, stddev_us, p50_us, p99_us, p999_us, max_us;
	uint64_t aborts; /* txn_transfer: attempts that conflicted and were run again */
	bool has_sync;   /* txn_transfer: the row says whether its commits were durable */
	bool sync;
	bool snapshot;       /* readrandom, scan: the reads went through a snapshot */
	uint64_t writer_ops; /* readwhilewriting: the writer's puts, else 0 */
	double writer_p50_us, writer_p99_us, writer_max_us;
	bool cold; /* the kernel's caches were dropped before the timed run */
	/* A fill with peers_config.sizes: the engine's files once it is closed
	 * (walrus: after its shutdown checkpoint), in allocated bytes. */
	bool has_size;
	peers_sizes size;
	/* peers_config.compact on an engine that can: the compaction's time and
	 * the files once the engine is closed and idle again */
	bool has_compacted;
	double compact_s;
	peers_sizes compacted;
} peers_result;

/*
 * Observers of a timed run (walrus bench's progress, time series and
 * summary); every member may be NULL. start, op and end are called in the
 * client that runs the operations (a forked process, a thread, or the
 * caller itself for single-client fills and scan), never during untimed
 * loads and warm passes: start once the client is released, op after each
 * operation (its end time and latency in ns; a scan calls it once per 64
 * keys and once for the rest, with PEERS_OP_NOLAT, the time of its last key
 * and, in place of the latency, the number of keys), end after the last.
 * result is called in the caller with the figures, instead of printing them.
 */
#define PEERS_OP_WRITER 0x1 /* readwhilewriting's writer, outside the measured figures */
#define PEERS_OP_NOLAT  0x2 /* no latency of its own (scan): lat_ns is a count of keys */
typedef struct peers_hooks {
	void *arg;
	void (*start)(void *arg, int client, uint64_t now_ns);
	void (*op)(void *arg, int client, uint64_t end_ns, uint64_t lat_ns, unsigned flags);
	void (*end)(void *arg, int client, uint64_t now_ns);
	void (*result)(void *arg, const peers_result *r);
} peers_hooks;

/* How the clients of an engine with thread_handles run: threads of this
 * process, each with its own handle, or forked processes. */
typedef enum peers_client_mode { PEERS_CLIENTS_THREADS, PEERS_CLIENTS_PROCESSES } peers_client_mode;
#define PEERS_MAX_MODES 2

extern const char *const peers_client_mode_names[PEERS_MAX_MODES];

typedef struct peers_config {
	uint64_t num; /* keys of every workload but fillsync, and their operations
	                 (unless duration_ns, reads, writes or scan_keys) */
	/* The operations in all of readrandom, readwhilewriting (the readers')
	 * and updaterandom, and writerandom's puts (0: num); scanrange's keys
	 * (0: num / 10, at least 1; at most num). */
	uint64_t reads;
	uint64_t writes;
	uint64_t scan_keys;
	/* readwhilewriting's writer puts at most this many keys a second (its
	 * k-th put, from 0, starts no sooner than k / writer_rate s after it
	 * started), so that engines are compared at the same write load; 0
	 * (the default): as fast as it can. */
	uint64_t writer_rate;
	/* Each client's warm pass checks a sample of the keys (spread over
	 * 0..num-1, and the key num absent) instead of scanning them all. */
	bool warm_sample;
	uint64_t sync_ops; /* durable puts per fillsync client */
	/* fillsync by issue 18's definition instead (0: sync_ops new keys per
	 * client): on a load of num keys (untimed, as readrandom's), each client
	 * puts random existing keys durably, a new value each, for this long. */
	uint64_t sync_duration_ns;
	peers_workload workloads[PEERS_MAX_LIST];
	int nworkloads;
	int sync_procs[PEERS_MAX_LIST]; /* fillsync client counts */
	int nsync_procs;
	/* readrandom, readwhilewriting (readers), updaterandom client counts */
	int read_procs[PEERS_MAX_LIST];
	int nread_procs;
	/* An engine with thread_handles (walrus) runs every client count of
	 * fillsync, readrandom, readwhilewriting and updaterandom once per mode,
	 * in this order; none given: threads. The other engines have one way. */
	peers_client_mode client_modes[PEERS_MAX_MODES];
	int nclient_modes;
	bool json; /* JSON lines on stdout, human lines on stderr */
	/*
	 * true (walrus-peers): a workload that needs a new database removes and
	 * recreates the engine's directory. false (walrus bench): the directory
	 * is used as found; the caller checked that a fill starts from an empty
	 * one.
	 */
	bool fresh_dirs;
	/* The directory already holds a fillseq load of num keys (values may
	 * have been updated since), so readrandom, scan, readwhilewriting and
	 * updaterandom start at once (the warm passes check it). */
	bool loaded;
	/* walrus bench's variations; zero keeps the definitions (README.md). */
	size_t key_size;      /* bytes of a key, PEERS_MIN_KEY_SIZE..PEERS_MAX_KEY_SIZE */
	size_t value_size;    /* bytes of a value, PEERS_MIN_VALUE_SIZE..PEERS_MAX_VALUE_SIZE */
	uint64_t seed;        /* mixed into every random stream */
	uint64_t duration_ns; /* run each workload (each client) this long instead of its
	                         operations; fills go over their keys again if time remains,
	                         scan repeats whole scans */
	bool sync;            /* durable puts in fillseq, fillrandom, updaterandom and
	                         readwhilewriting's writer */
	uint64_t batch;       /* fillseq and fillrandom commit this many puts at a time
	                         (0 or 1: each its own) on engines with batches */
	uint64_t cache_mb;    /* the peers' caches (peers_open_args); 0: PEERS_CACHE_MB */
	/* fillseq and fillrandom rows report the engine's on-disk bytes once it
	 * is closed and idle (walrus-peers; not walrus bench, whose monitor keeps
	 * the instance up). */
	bool sizes;
	/* With sizes: after measuring them, an engine with a compact hook
	 * (walrus) is opened again, compacts (timed) and is measured again. */
	bool compact;
	/* Non-NULL: readrandom, scan, readwhilewriting and updaterandom runs
	 * sync() and write "3" to this file (/proc/sys/vm/drop_caches) once
	 * every client has prepared, just before the timed run. */
	const char *drop_caches;
	/* Non-NULL: the memory cgroup (v1) directory this process runs in
	 * (walrus-peers --memory-limit). Every row then reports the cgroup's
	 * limit, its most usage since the previous row (memory.max_usage_in_bytes,
	 * reset after each row), its failcnt, what memory.stat says of its
	 * resident and cached bytes at the row's end, and how many processes it
	 * holds (the walrus instance's supervisor and auxiliaries included). */
	const char *memcg;
	/* readrandom and scan on an engine with snapshots (walrus) read through
	 * one snapshot per client, taken after the load and the warm pass;
	 * with snapshot_and_plain, each such row follows the same row read
	 * plainly, so that the two are measured side by side. */
	bool snapshot;
	bool snapshot_and_plain;
	/* txn_transfer: client counts; for each, the commits' durability in
	 * turn (false: asynchronous, true: durable); committed transfers per
	 * client, or (txn_duration_ns, else duration_ns) each client's time */
	int txn_procs[PEERS_MAX_LIST];
	int ntxn_procs;
	bool txn_sync[2];
	int ntxn_sync;
	uint64_t txn_ops;
	uint64_t txn_duration_ns;
	/* The directory already holds txn_transfer's accounts (walrus bench on
	 * a directory a previous txn_transfer left: its warm pass checks). */
	bool accounts;
	const peers_hooks *hooks;
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
