/*
 * workloads.c - the db_bench-style key-value workloads of walrus-peers and
 * `walrus bench`, defined exactly (README.md beside this file states the
 * definitions; this file is their reference implementation), run against
 * any engine of peers.h.
 *
 * Workloads (N = num, M = sync_ops, R = reads or else N):
 *   fillseq     N puts of keys 0..N-1 in order, asynchronous, one per commit
 *   fillrandom  the same N puts in a fixed random permutation
 *   fillsync    M durable puts per client, P clients on disjoint keys; or
 *               (sync_duration_ns, issue 18's definition) on a load of N
 *               keys, each client putting random existing keys durably, a
 *               new value each, for that long
 *   readrandom  after a fillseq: R random point reads split over P clients
 *   scan        one ordered scan of the N keys
 *   readwhilewriting
 *               readrandom's P readers, plus one writer process (or thread)
 *               putting random keys of the N with new values, without
 *               pause, until the readers are done; the readers' reads are
 *               the figures, the writer's puts are reported beside them
 *   updaterandom
 *               after a fillseq: R read-modify-writes of random keys split
 *               over P clients (db_bench's updaterandom): get the value,
 *               check it, put a new one; one operation is the pair. The
 *               steady dirtying of a working set of N keys, larger or
 *               smaller than the engine's cache: where checkpoints show.
 *   scanrange   after a fillseq: scan_keys keys read in order from a random
 *               start key (one range), each key and value checked
 *   writerandom after a fillseq: one client putting writes (else N) random
 *               existing keys, a new value each, batch puts per commit:
 *               random writes into the loaded tree
 *   txn_transfer
 *               on PEERS_TXN_ACCOUNTS accounts (a decimal balance each,
 *               PEERS_TXN_BALANCE at the load): P clients each moving 1..10
 *               between two random accounts in one read-write transaction
 *               (read both, write both, commit), run again on a conflict;
 *               one operation is a committed transfer, and the retries are
 *               counted as aborts. Afterwards the balances must add up to
 *               what the load wrote.
 * readwhilewriting, updaterandom and writerandom write values of later
 * rounds: the value of key i in round r >= 1 is the round-r value
 * (README.md) with its first 16 bytes replaced
 * by r in 16 lower-case hex digits, so that any reader can check a value
 * whichever writer wrote it. Rounds are (client + 1) * 2^40 + j + 1 for the
 * client's j-th put: distinct across clients.
 *
 * Variations for `walrus bench` (peers_config; zero keeps the definitions):
 * key_size K (keys are K decimal digits, zero-padded), value_size, seed
 * (XOR-ed, times PERM_SEED, into every random stream's seed), duration_ns
 * (every workload runs that long instead of its operations: readrandom,
 * readwhilewriting and updaterandom clients each for the duration; the
 * fills go over their keys again, with the same values, when the duration
 * outlasts them, so the database holds the keys written at least once;
 * scan repeats whole scans until the duration has passed), sync (durable
 * puts in fillseq,
 * fillrandom, updaterandom and readwhilewriting's writer; durable commits in
 * txn_transfer), snapshot (readrandom's and scan's reads through one
 * snapshot per client, on an engine that has them), and hooks that observe a
 * timed run (peers.h).
 *
 * walrus-peers' extras: warm passes that check a sample of the keys instead
 * of scanning them all (warm_sample), for data sets larger than memory; the
 * fills' rows can carry the engine's on-disk
 * bytes (sizes), measured once the engine is closed and idle; and the
 * read workloads can drop the kernel's caches (drop_caches) after every
 * client has prepared and before the timed run, so that the reads start
 * from what the engine holds in its own memory and the disk.
 *
 * Every workload checks its result (fills by a full scan afterwards, reads
 * value by value, the scan key by key) and exits non-zero on a mismatch.
 *
 * Clients: the clients of a multi-process engine (SQLite, LMDB) are forked
 * processes, each opening the database itself; an engine that one process
 * only may open (RocksDB) runs its clients as threads sharing one handle;
 * walrus, whose every handle is a backend, runs them either way
 * (peers_config.client_modes): threads of this process each opening its own
 * handle, or forked processes. A client prepares (opens, warms), signals
 * ready, waits for the start, runs its operations timing each one, and
 * reports: a process through a pipe to the parent, a thread in memory.
 *
 * Errors: every library and system call is checked; a failure prints the
 * engine and the call and exits 3 (peers_fatal), after the parent has killed
 * and reaped its children and removed the scratch directories (unless they
 * are kept: always for an engine with an idle routine, walrus, whose
 * instance may still be running and whose log tells what happened).
 */
#include "peers.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GOLDEN      0x9E3779B97F4A7C15ull   /* value seeds, reader seeds */
#define PERM_SEED   0x2545F4914F6CDD1Dull   /* fillrandom's permutation */
#define MAX_CLIENTS (PEERS_MAX_CLIENTS + 1) /* readwhilewriting: P readers and a writer */
#define ROUND_HEX   16                      /* an updated value's round, in hex digits */
#define ROUND_SHIFT 40 /* a round is (client + 1) << ROUND_SHIFT, plus its put's number */
#define REPLAY_MAX  ((uint64_t)1 << 23) /* keys up to which a single writer is replayed */
#define WARM_SAMPLE 1000                /* keys a sampled warm pass reads (warm_sample) */
#define TAIL_CHECK  1000                /* writerandom's last puts read back exactly */

const char *const peers_workload_names[PEERS_WORKLOAD_COUNT] = {
    "fillseq",          "fillrandom",   "fillsync",     "readrandom", "scan",
    "readwhilewriting", "updaterandom", "txn_transfer", "scanrange",  "writerandom"};

const char *const peers_client_mode_names[PEERS_MAX_MODES] = {"threads", "processes"};

#define CACHE_LINE 64

/* One client of a workload: its orders, and what it measured. Clients that
 * are threads write their own structure and buffers at every operation, so
 * each starts on a cache line of its own (client_new) and no two share one. */
/*
 * A client's latencies, in ns, as a log-linear histogram (HdrHistogram's
 * layout): below 256 ns one bucket per value, above 128 buckets per power
 * of two, so a percentile read from it is within 1/128 of the nearest-rank
 * one over the samples, and a client keeps 26 KiB however long it runs (4
 * bytes an operation would be 160 MiB for a timed fill of 40M keys, inside
 * a --memory-limit).  The sum gives the mean exactly, the sum of squares
 * the deviation; the maximum is kept as it is.
 */
#define LH_SUB_BITS 7
#define LH_SUB      (1u << LH_SUB_BITS)
#define LH_BUCKETS  ((33u - LH_SUB_BITS) * LH_SUB) /* up to UINT32_MAX ns */

typedef struct lat_hist {
	uint64_t count;
	uint64_t sum; /* ns */
	double sumsq; /* ns^2 */
	uint32_t max;
	uint64_t bucket[LH_BUCKETS];
} lat_hist;

typedef struct client {
	_Alignas(CACHE_LINE) const peers_engine *e;
	peers_open_args oa;
	void *h; /* handle to use; NULL: open one (a forked client, or a thread of its own) */
	peers_workload work;
	int id;
	bool writer;                /* readwhilewriting's writer: runs until told to stop */
	uint64_t rate;              /* the writer's puts per second at most (0: no limit) */
	bool upsert;                /* fillsync by duration: durable puts of random keys */
	bool timed;                 /* a measured run: the hooks observe it */
	bool snapshot;              /* reads through a snapshot the client takes */
	bool drop;                  /* in this process, alone: drops the caches once prepared */
	uint64_t first;             /* fills: first key index (sequential order) */
	const uint64_t *order;      /* fillrandom: key index of each op */
	uint64_t span;              /* fills: keys to go over (again with a duration) */
	uint64_t batch;             /* fills: puts per commit (1: each its own) */
	uint64_t num;               /* readrandom and after: keys in the database */
	uint64_t nops;              /* operations to run (0 with a duration or as the writer) */
	uint64_t duration_ns;       /* run this long instead (0: nops) */
	pthread_barrier_t *barrier; /* threads: ready line, then start line (twice) */
	int result_fd;              /* processes: ready byte, then the results */
	int go_fd;                  /* processes: EOF means start */
	uint64_t start_ns;
	uint64_t end_ns;
	lat_hist *lat;   /* latencies (timed clients only) */
	uint64_t ops;    /* operations done */
	uint64_t aborts; /* txn_transfer: attempts rolled back by a conflict */
	char *key;       /* the client's buffers: a key, a value, a value read */
	char *val, *buf;
	char *key2; /* txn_transfer's second account */
} client;

/* What a forked client sends after its ready byte, followed by its
 * latencies (a lat_hist) when it was timed. */
typedef struct client_wire {
	uint64_t ops;
	uint64_t aborts;
	uint64_t start_ns;
	uint64_t end_ns;
} client_wire;

/* Process-wide state the error path needs. */
static bool g_is_child;
static _Thread_local int g_client_id = -1;  /* in a client process or thread */
static const char *g_prog = "walrus-peers"; /* the program, in messages */
static const peers_engine *g_engine_e;      /* engine being run, NULL outside */
static const char *g_engine;                /* its name */
static pid_t g_children[MAX_CLIENTS];
static int g_nchildren;
static char g_base[PATH_MAX]; /* the scratch directory, "" if none */
static bool g_base_created;
static char g_subdir[PATH_MAX]; /* the engine directory in use */
static bool g_keep;
static atomic_flag g_dying = ATOMIC_FLAG_INIT;

/* The run's variations (peers_config), set by peers_run_engine. */
static size_t g_key_size = PEERS_KEY_SIZE;
static size_t g_value_size = PEERS_VALUE_SIZE;
static uint64_t g_seed_mix; /* seed * PERM_SEED: 0 keeps the definitions' streams */
static const peers_hooks *g_hooks;
static _Atomic uint32_t *g_stop; /* shared with forked clients: the writer's stop */
static const char *g_drop_path;  /* peers_config.drop_caches */
static bool g_warm_sample;       /* peers_config.warm_sample */

/* ---------------------------------------------------------------- errors */

static int rm_cb(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	return remove(path) == 0 ? 0 : -1;
}

int peers_rm_tree(const char *path)
{
	if (nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS) != 0)
		return errno == ENOENT ? 0 : (errno ? errno : EIO);
	return 0;
}

/*
 * Kill (when asked) and wait for every child still recorded. Returns 0 when
 * all exited 0, else the first non-zero exit code (PEERS_EXIT_ERROR for a
 * child ended by a signal we did not send).
 */
static int reap_children(bool kill_first)
{
	int code = 0;

	for (int i = 0; i < g_nchildren; i++) {
		int st;
		pid_t r;

		if (g_children[i] <= 0)
			continue;
		if (kill_first && kill(g_children[i], SIGKILL) != 0 && errno != ESRCH)
			fprintf(stderr, "%s: kill(%d) failed: %s\n", g_prog, (int)g_children[i],
			        strerror(errno));
		do
			r = waitpid(g_children[i], &st, 0);
		while (r < 0 && errno == EINTR);
		if (r < 0) {
			fprintf(stderr, "%s: waitpid(%d) failed: %s\n", g_prog, (int)g_children[i],
			        strerror(errno));
			if (code == 0)
				code = PEERS_EXIT_ERROR;
		} else if (WIFEXITED(st) && WEXITSTATUS(st) != 0) {
			if (code == 0)
				code = WEXITSTATUS(st);
		} else if (WIFSIGNALED(st) && !kill_first) {
			fprintf(stderr, "%s: %s: client process %d killed by signal %d\n", g_prog,
			        g_engine, (int)g_children[i], WTERMSIG(st));
			if (code == 0)
				code = PEERS_EXIT_ERROR;
		}
		g_children[i] = 0;
	}
	g_nchildren = 0;
	return code;
}

static void remove_scratch(void)
{
	int err;

	if (g_keep)
		return;
	if (g_engine_e != NULL && g_engine_e->idle != NULL && g_subdir[0]) {
		fprintf(stderr,
		        "%s: %s: kept \"%s\" for inspection (its processes may still be "
		        "running)\n",
		        g_prog, g_engine, g_subdir);
		return;
	}
	if (g_subdir[0] && (err = peers_rm_tree(g_subdir)) != 0)
		fprintf(stderr, "%s: could not remove \"%s\": %s\n", g_prog, g_subdir,
		        strerror(err));
	if (g_base_created && (err = peers_rm_tree(g_base)) != 0)
		fprintf(stderr, "%s: could not remove \"%s\": %s\n", g_prog, g_base, strerror(err));
}

static _Noreturn void die(int code)
{
	if (g_is_child)
		_exit(code);
	/* A second thread failing at the same time waits for the first to end
	 * the process. */
	if (atomic_flag_test_and_set(&g_dying))
		for (;;)
			pause();
	reap_children(true);
	remove_scratch();
	fflush(stdout);
	_exit(code);
}

/* NOLINTNEXTLINE(bugprone-easily-swappable-parameters): the order is fixed */
static void vreport(const char *who, const char *what, const char *fmt, va_list ap)
{
	char msg[1024];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (who == NULL)
		fprintf(stderr, "%s: %s: %s\n", g_prog, what, msg);
	else if (g_client_id >= 0)
		fprintf(stderr, "%s: %s (client %d): %s: %s\n", g_prog, who, g_client_id, what,
		        msg);
	else
		fprintf(stderr, "%s: %s: %s: %s\n", g_prog, who, what, msg);
}

/* NOLINTNEXTLINE(bugprone-easily-swappable-parameters): the order is fixed */
void peers_fatal(const char *who, const char *op, const char *fmt, ...)
{
	char what[256];
	va_list ap;

	snprintf(what, sizeof(what), "%s failed", op);
	va_start(ap, fmt);
	vreport(who, what, fmt, ap);
	va_end(ap);
	die(PEERS_EXIT_ERROR);
}

/* NOLINTNEXTLINE(bugprone-easily-swappable-parameters): the order is fixed */
void peers_mismatch(const char *who, const char *workload, const char *fmt, ...)
{
	char what[256];
	va_list ap;

	snprintf(what, sizeof(what), "%s: wrong result", workload);
	va_start(ap, fmt);
	vreport(who, what, fmt, ap);
	va_end(ap);
	die(PEERS_EXIT_DAMAGE);
}

/* A failed system call during the current engine's run. */
static _Noreturn void sys_fail(const char *op)
{
	peers_fatal(g_engine, op, "%s", strerror(errno));
}

void *peers_xmalloc(const char *what, size_t n)
{
	void *p = malloc(n ? n : 1);

	if (p == NULL)
		peers_fatal(g_engine, "malloc", "%zu bytes for %s: out of memory", n, what);
	return p;
}

/* A client's buffer: whole cache lines of its own (free() releases it). */
static void *client_alloc(const char *what, size_t n)
{
	size_t size = (n + CACHE_LINE - 1) / CACHE_LINE * CACHE_LINE;
	void *p = aligned_alloc(CACHE_LINE, size ? size : CACHE_LINE);

	if (p == NULL)
		peers_fatal(g_engine, "aligned_alloc", "%zu bytes for %s: out of memory", n, what);
	return p;
}

static void xclose(int fd)
{
	if (close(fd) != 0)
		sys_fail("close");
}

/* Read exactly n bytes unless EOF comes first; returns the bytes read. */
static size_t read_full(int fd, void *buf, size_t n)
{
	size_t done = 0;

	while (done < n) {
		ssize_t r = read(fd, (char *)buf + done, n - done);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			sys_fail("read(pipe)");
		if (r == 0)
			break;
		done += (size_t)r;
	}
	return done;
}

static void write_full(int fd, const void *buf, size_t n)
{
	size_t done = 0;

	while (done < n) {
		ssize_t r = write(fd, (const char *)buf + done, n - done);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			sys_fail("write(pipe)");
		done += (size_t)r;
	}
}

/* ------------------------------------------------------ keys and values */

static uint64_t now_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
		sys_fail("clock_gettime(CLOCK_MONOTONIC)");
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Waits until CLOCK_MONOTONIC reads @ns: a rate limit's pacing. */
static void sleep_until_ns(uint64_t ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
	                      .tv_nsec = (long)(ns % 1000000000u)};
	int err;

	while ((err = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL)) == EINTR)
		;
	if (err != 0) {
		errno = err;
		sys_fail("clock_nanosleep");
	}
}

static inline uint64_t xorshift64(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x;
}

/* A random stream's seed with the run's seed mixed in (never 0, xorshift's
 * one bad state). */
static uint64_t seeded(uint64_t base)
{
	uint64_t x = base ^ g_seed_mix;

	return x ? x : GOLDEN;
}

/* The key of index i: snprintf("%0*llu", key_size, i), i < 10^key_size
 * (checked against snprintf at start). */
static inline void make_key(uint64_t i, char *k)
{
	for (size_t j = g_key_size; j-- > 0;) {
		k[j] = (char)('0' + i % 10);
		i /= 10;
	}
}

static char printable[256]; /* byte b -> ' ' + b % 95 */

static void init_printable(void)
{
	for (int b = 0; b < 256; b++)
		printable[b] = (char)(' ' + b % 95);
}

/*
 * The value of key index i written in round r (the fills write round 0):
 * xorshift64 seeded with i * GOLDEN + r (GOLDEN if that is 0) is stepped
 * once per 8 bytes, and byte j of the value is printable[byte j % 8 of the
 * state], bytes taken from the least significant one. A round r >= 1 then
 * writes r in ROUND_HEX hex digits over the first bytes.
 */
static inline void make_value(uint64_t i, uint64_t round, char *v)
{
	static const char hex[] = "0123456789abcdef";
	uint64_t x = i * GOLDEN + round;

	if (x == 0)
		x = GOLDEN;
	for (size_t j = 0; j < g_value_size; j += 8) {
		uint64_t w = xorshift64(&x);

		for (size_t b = 0; b < 8 && j + b < g_value_size; b++)
			v[j + b] = printable[(w >> (8 * b)) & 0xff];
	}
	for (int j = ROUND_HEX - 1; round != 0 && j >= 0; j--)
		v[j] = hex[(round >> (4 * (ROUND_HEX - 1 - j))) & 0xf];
}

/* The round named by an updated value's first bytes; 0 if they are no hex round. */
static uint64_t value_round(const char *v)
{
	uint64_t r = 0;

	for (int j = 0; j < ROUND_HEX; j++) {
		char ch = v[j];

		if (ch >= '0' && ch <= '9')
			r = r << 4 | (uint64_t)(ch - '0');
		else if (ch >= 'a' && ch <= 'f')
			r = r << 4 | (uint64_t)(ch - 'a' + 10);
		else
			return 0;
	}
	return r;
}

/*
 * Is @v (vlen bytes) a value key index i may hold: its round-0 value, or
 * (any_round) the value of the round it names? @tmp: value_size bytes of
 * scratch.
 */
static bool value_ok(uint64_t i, const char *v, size_t vlen, bool any_round, char *tmp)
{
	uint64_t r;

	if (vlen != g_value_size)
		return false;
	make_value(i, 0, tmp);
	if (memcmp(v, tmp, vlen) == 0)
		return true;
	if (!any_round || (r = value_round(v)) == 0)
		return false;
	make_value(i, r, tmp);
	return memcmp(v, tmp, vlen) == 0;
}

/* Order-sensitive fingerprint of a value sequence (the scan's check). */
static inline uint64_t fold_value(uint64_t acc, const char *v)
{
	uint64_t h = 0, w;
	uint32_t t;

	for (size_t j = 0; j + 8 <= g_value_size; j += 8) {
		memcpy(&w, v + j, 8);
		h ^= w;
	}
	memcpy(&t, v + g_value_size - 4, 4);
	h ^= (uint64_t)t << 32;
	return (acc ^ h) * 0x100000001B3ull;
}

/* Readrandom client c draws key indexes from xorshift64 seeded so. */
static uint64_t reader_seed(int id)
{
	return seeded((uint64_t)(id + 1) * GOLDEN);
}

/* fillrandom's order: Fisher-Yates over 0..n-1, j = xorshift64 % (i + 1)
 * for i from n-1 down to 1, state seeded with PERM_SEED. */
static uint64_t *make_permutation(uint64_t n)
{
	uint64_t *p = peers_xmalloc("permutation", n * sizeof(*p));
	uint64_t x = seeded(PERM_SEED);

	for (uint64_t i = 0; i < n; i++)
		p[i] = i;
	for (uint64_t i = n - 1; i > 0; i--) {
		uint64_t j = xorshift64(&x) % (i + 1);
		uint64_t t = p[i];

		p[i] = p[j];
		p[j] = t;
	}
	return p;
}

uint64_t peers_max_keys(size_t key_size)
{
	uint64_t m = 1;

	for (size_t i = 0; i < key_size && m < PEERS_MAX_KEYS; i++)
		m *= 10;
	return m;
}

static void self_check(void)
{
	static const uint64_t probe[] = {0, 1, 9, 10, 12345678901234ull, PEERS_MAX_KEYS - 1};
	size_t saved = g_key_size;

	g_key_size = PEERS_KEY_SIZE;
	for (size_t i = 0; i < sizeof(probe) / sizeof(probe[0]); i++) {
		char want[PEERS_KEY_SIZE + 1], got[PEERS_KEY_SIZE];

		snprintf(want, sizeof(want), "%016llu", (unsigned long long)probe[i]);
		make_key(probe[i], got);
		if (memcmp(want, got, PEERS_KEY_SIZE) != 0)
			peers_mismatch(NULL, "self-check", "key of %" PRIu64 " is %.16s", probe[i],
			               got);
	}
	g_key_size = saved;
}

/* --------------------------------------------------------- verification */

typedef struct verify_state {
	const char *engine;
	const char *what;
	uint64_t n;
	uint64_t next;
	uint64_t found; /* keys seen */
	uint64_t fold;
	bool any_round;         /* values of later rounds are fine (after updates) */
	const uint8_t *present; /* keys of 0..n-1 expected (bit i); NULL: all of them */
	char *key, *tmp;
} verify_state;

static inline bool bit_is_set(const uint8_t *bits, uint64_t i)
{
	return (bits[i / 8] >> (i % 8)) & 1;
}

/* The first key at or after @i that the database should hold (n: none). */
static uint64_t next_present(const verify_state *s, uint64_t i)
{
	while (s->present != NULL && i < s->n && !bit_is_set(s->present, i))
		i++;
	return i;
}

static void verify_cb(void *arg, const char *k, size_t klen, const char *v, size_t vlen)
{
	verify_state *s = arg;

	s->next = next_present(s, s->next);
	if (s->next >= s->n)
		peers_mismatch(s->engine, s->what, "more than %" PRIu64 " keys", s->n);
	make_key(s->next, s->key);
	if (klen != g_key_size || memcmp(k, s->key, g_key_size) != 0)
		peers_mismatch(s->engine, s->what, "key #%" PRIu64 " is \"%.*s\", expected %.*s",
		               s->next, (int)(klen < 64 ? klen : 64), k, (int)g_key_size, s->key);
	if (!value_ok(s->next, v, vlen, s->any_round, s->tmp))
		peers_mismatch(s->engine, s->what, "value of key %.*s differs (%zu bytes)",
		               (int)g_key_size, s->key, vlen);
	s->fold = fold_value(s->fold, v);
	s->next++;
	s->found++;
}

/* Check by an ordered scan that the database holds exactly the keys of
 * 0..n-1 whose bit is set in @present (NULL: all of them) with their round-0
 * values (any_round: or values of later rounds); returns the fingerprint of
 * the values. */
static uint64_t verify_keys(const peers_engine *e, void *h, uint64_t n, const uint8_t *present,
                            const char *what, bool any_round)
{
	verify_state s = {
	    .engine = e->name, .what = what, .n = n, .any_round = any_round, .present = present};

	s.key = peers_xmalloc("key", g_key_size);
	s.tmp = peers_xmalloc("value", g_value_size);
	e->scan(h, verify_cb, &s);
	if (next_present(&s, s.next) != n) {
		uint64_t want = s.found;

		for (uint64_t i = next_present(&s, s.next); i < n; i = next_present(&s, i + 1))
			want++;
		peers_mismatch(e->name, what, "scan found %" PRIu64 " keys, expected %" PRIu64,
		               s.found, want);
	}
	free(s.key);
	free(s.tmp);
	return s.fold;
}

static uint64_t verify_all(const peers_engine *e, void *h, uint64_t n, const char *what,
                           bool any_round)
{
	return verify_keys(e, h, n, NULL, what, any_round);
}

/* One key of a sampled check: present, with a valid value (any round). */
static void sample_key(const peers_engine *e, void *h, uint64_t i, const char *what, char *key,
                       char *buf, char *tmp)
{
	size_t vlen = 0;

	make_key(i, key);
	if (!e->get(h, key, g_key_size, buf, g_value_size, &vlen))
		peers_mismatch(e->name, what, "key %.*s not found", (int)g_key_size, key);
	if (!value_ok(i, buf, vlen, true, tmp))
		peers_mismatch(e->name, what, "value of key %.*s differs (%zu bytes)",
		               (int)g_key_size, key, vlen);
}

/*
 * The sampled warm pass (warm_sample): by gets, every (n / WARM_SAMPLE)-th
 * key of 0..n-1 (every key when n is smaller) and key n-1 hold a valid
 * value, and key n is absent. A database missing a stretch of its keys, or
 * holding more, shows without a scan of all of it; each timed read checks
 * its own value besides.
 */
static void verify_sample(const peers_engine *e, void *h, uint64_t n, const char *what)
{
	uint64_t step = n > WARM_SAMPLE ? n / WARM_SAMPLE : 1;
	char *key = peers_xmalloc("key", g_key_size);
	char *buf = peers_xmalloc("value", g_value_size);
	char *tmp = peers_xmalloc("value", g_value_size);
	size_t vlen = 0;

	for (uint64_t i = 0; i < n; i += step)
		sample_key(e, h, i, what, key, buf, tmp);
	sample_key(e, h, n - 1, what, key, buf, tmp);
	if (n < peers_max_keys(g_key_size)) {
		make_key(n, key);
		if (e->get(h, key, g_key_size, buf, g_value_size, &vlen))
			peers_mismatch(e->name, what, "key %.*s found: more than %" PRIu64 " keys",
			               (int)g_key_size, key, n);
	}
	free(key);
	free(buf);
	free(tmp);
}

/* A client's warm pass over the n keys: a full scan, or the sampled check. */
static void warm_pass(const peers_engine *e, void *h, uint64_t n, const char *what)
{
	if (g_warm_sample)
		verify_sample(e, h, n, what);
	else
		verify_all(e, h, n, what, true);
}

/* After a workload that wrote: the engine's structural check, if it has one. */
static void check_engine(const peers_engine *e, void *h, const char *what)
{
	if (e->check != NULL)
		e->check(h, what);
}

/* ------------------------------------------------------------- accounts */

/* txn_transfer's balances: decimal digits, no sign, no padding. The sum of
 * all of them, PEERS_TXN_ACCOUNTS * PEERS_TXN_BALANCE, is the largest a
 * balance can reach, far below the 19 digits a uint64_t always holds. */
#define BALANCE_DIGITS 19
#define BALANCE_TOTAL  ((uint64_t)PEERS_TXN_ACCOUNTS * PEERS_TXN_BALANCE)

/* Writes @b's digits into @out (BALANCE_DIGITS bytes); returns their count. */
static size_t format_balance(uint64_t b, char *out)
{
	char rev[BALANCE_DIGITS];
	size_t n = 0;

	do {
		rev[n++] = (char)('0' + b % 10);
		b /= 10;
	} while (b != 0 && n < BALANCE_DIGITS);
	for (size_t i = 0; i < n; i++)
		out[i] = rev[n - 1 - i];
	return n;
}

static bool parse_balance(const char *v, size_t vlen, uint64_t *b)
{
	uint64_t x = 0;

	if (vlen == 0 || vlen > BALANCE_DIGITS)
		return false;
	for (size_t i = 0; i < vlen; i++) {
		if (v[i] < '0' || v[i] > '9')
			return false;
		x = x * 10 + (uint64_t)(v[i] - '0');
	}
	*b = x;
	return true;
}

typedef struct accounts_state {
	const char *engine;
	const char *what;
	uint64_t next; /* accounts seen, and the index of the one expected next */
	uint64_t sum;
	char *key;
} accounts_state;

static void accounts_cb(void *arg, const char *k, size_t klen, const char *v, size_t vlen)
{
	accounts_state *s = arg;
	uint64_t b;

	if (s->next >= PEERS_TXN_ACCOUNTS)
		peers_mismatch(s->engine, s->what,
		               "more than %d keys: not txn_transfer's accounts (a database of "
		               "another workload?)",
		               PEERS_TXN_ACCOUNTS);
	make_key(s->next, s->key);
	if (klen != g_key_size || memcmp(k, s->key, g_key_size) != 0)
		peers_mismatch(s->engine, s->what, "key #%" PRIu64 " is \"%.*s\", expected %.*s",
		               s->next, (int)(klen < 64 ? klen : 64), k, (int)g_key_size, s->key);
	if (!parse_balance(v, vlen, &b))
		peers_mismatch(s->engine, s->what,
		               "account %.*s holds \"%.*s\", not a decimal balance",
		               (int)g_key_size, s->key, (int)(vlen < 64 ? vlen : 64), v);
	s->sum += b;
	s->next++;
}

/* Every account 0..PEERS_TXN_ACCOUNTS-1 there, in order, nothing else,
 * and the balances adding up to what the load wrote: a transfer applied
 * in part, or lost against another, changes the sum. */
static void verify_accounts(const peers_engine *e, void *h, const char *what)
{
	accounts_state s = {.engine = e->name, .what = what};

	s.key = peers_xmalloc("key", g_key_size);
	e->scan(h, accounts_cb, &s);
	free(s.key);
	if (s.next != PEERS_TXN_ACCOUNTS)
		peers_mismatch(e->name, what, "%" PRIu64 " accounts, expected %d", s.next,
		               PEERS_TXN_ACCOUNTS);
	if (s.sum != BALANCE_TOTAL)
		peers_mismatch(e->name, what,
		               "the balances add up to %" PRIu64 ", expected %" PRIu64, s.sum,
		               BALANCE_TOTAL);
}

/* -------------------------------------------------------------- clients */

static inline uint32_t lat32(uint64_t ns)
{
	return ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
}

static uint64_t g_lat_max; /* the largest latency record allocated */

static lat_hist *lat_alloc(void)
{
	if (sizeof(lat_hist) > g_lat_max)
		g_lat_max = sizeof(lat_hist);
	lat_hist *h = client_alloc("latencies", sizeof(lat_hist));
	memset(h, 0, sizeof(*h));
	return h;
}

static unsigned lh_index(uint32_t v)
{
	if (v < 2 * LH_SUB)
		return v;
	unsigned shift = (unsigned)(31 - __builtin_clz(v)) - LH_SUB_BITS;
	return shift * LH_SUB + (v >> shift);
}

/* The largest value bucket @i holds. */
static uint64_t lh_high(unsigned i)
{
	if (i < 2 * LH_SUB)
		return i;
	unsigned shift = i / LH_SUB - 1;
	return ((uint64_t)(i - shift * LH_SUB + 1) << shift) - 1;
}

static void lh_add(lat_hist *h, uint32_t v)
{
	h->count++;
	h->sum += v;
	h->sumsq += (double)v * v;
	h->max = v > h->max ? v : h->max;
	h->bucket[lh_index(v)]++;
}

static void lh_merge(lat_hist *into, const lat_hist *h)
{
	into->count += h->count;
	into->sum += h->sum;
	into->sumsq += h->sumsq;
	into->max = h->max > into->max ? h->max : into->max;
	for (unsigned i = 0; i < LH_BUCKETS; i++)
		into->bucket[i] += h->bucket[i];
}

uint64_t peers_latency_record_max(void)
{
	return g_lat_max;
}

/*
 * Records one operation: its latency, and for the hooks its end.  An
 * untimed client (the load before readrandom and the others) only counts.
 */
static void client_record(client *c, uint64_t t0, uint64_t t1)
{
	c->ops++;
	if (!c->timed)
		return;
	lh_add(c->lat, lat32(t1 - t0));
	if (g_hooks != NULL && g_hooks->op != NULL)
		g_hooks->op(g_hooks->arg, c->id, t1, t1 - t0, c->writer ? PEERS_OP_WRITER : 0);
}

/* Has the client more to do, @now being the end of its last operation? The
 * writer puts at least once, even when the readers were done before it was
 * first scheduled (small runs), so that readwhilewriting always writes. */
static bool client_more(const client *c, uint64_t now)
{
	if (c->writer)
		return c->ops == 0 || atomic_load_explicit(g_stop, memory_order_relaxed) == 0;
	if (c->duration_ns)
		return now - c->start_ns < c->duration_ns;
	return c->ops < c->nops;
}

static void barrier_wait(const peers_engine *e, pthread_barrier_t *b)
{
	int rc = pthread_barrier_wait(b);

	if (rc != 0 && rc != PTHREAD_BARRIER_SERIAL_THREAD)
		peers_fatal(e->name, "pthread_barrier_wait", "%s", strerror(rc));
}

/*
 * Between the untimed preparation and a timed read run: the dirty pages
 * written out (sync), then the page cache, dentries and inodes dropped, so
 * that the reads find only what the engine holds in its own memory. Not an
 * fsync of anything the engine relies on; a failed write is an error.
 */
static void drop_caches(void)
{
	static const char three[] = "3\n";
	int fd;
	ssize_t r;

	sync();
	do
		fd = open(g_drop_path, O_WRONLY | O_CLOEXEC);
	while (fd < 0 && errno == EINTR);
	if (fd < 0)
		peers_fatal(g_engine, "open", "\"%s\": %s", g_drop_path, strerror(errno));
	do
		r = write(fd, three, sizeof(three) - 1);
	while (r < 0 && errno == EINTR);
	if (r != (ssize_t)sizeof(three) - 1) {
		int err = r < 0 ? errno : EIO;

		close(fd);
		peers_fatal(g_engine, "write", "\"%s\": %s", g_drop_path, strerror(err));
	}
	if (close(fd) != 0)
		peers_fatal(g_engine, "close", "\"%s\": %s", g_drop_path, strerror(errno));
}

static void client_ready(client *c)
{
	if (c->barrier != NULL) {
		/* Ready, then (once the caller has dropped the caches) go. */
		barrier_wait(c->e, c->barrier);
		barrier_wait(c->e, c->barrier);
	} else if (c->result_fd >= 0) {
		char b = 'R';

		write_full(c->result_fd, &b, 1);
		/* The parent never writes: its closing the pipe is the start. */
		while (read_full(c->go_fd, &b, 1) != 0)
			;
	} else if (c->drop) {
		drop_caches();
	}
}

/* The client's @j-th put (c->key, c->val), timed and recorded, in a batch of
 * c->batch puts when that is more than 1: the first opens it (*open), the
 * last commits it. Returns the put's end. */
static uint64_t batch_put(client *c, void *h, uint64_t j, bool *open)
{
	/* Without a duration the last put is known and closes its batch; with
	 * one, the caller's loop's end does. */
	bool last = c->batch > 1 && ((j + 1) % c->batch == 0 || j + 1 == c->nops);
	uint64_t t0 = now_ns(), t1;

	if (c->batch > 1 && !*open) {
		c->e->batch_begin(h);
		*open = true;
	}
	c->e->put(h, c->key, g_key_size, c->val, g_value_size);
	if (last) {
		c->e->batch_commit(h);
		*open = false;
	}
	t1 = now_ns();
	client_record(c, t0, t1);
	return t1;
}

/* The fills: nops puts, or as many as the duration allows, going over the
 * client's span of keys again (same values) when it outlasts them. */
static void client_fill(client *c, void *h)
{
	uint64_t t1 = c->start_ns;
	bool open = false; /* a batch is open */

	for (uint64_t j = 0; client_more(c, t1); j++) {
		uint64_t at = j % c->span;
		uint64_t idx = c->order ? c->order[at] : c->first + at;

		make_key(idx, c->key);
		make_value(idx, 0, c->val);
		t1 = batch_put(c, h, j, &open);
	}
	/* A duration's last batch: inside the run's time, which ends after it. */
	if (open)
		c->e->batch_commit(h);
}

/* writerandom: puts of random existing keys (readrandom's stream of the
 * client's id), each a new round's value, batched as the fills' puts. */
static void client_write(client *c, void *h)
{
	uint64_t x = reader_seed(c->id), t1 = c->start_ns;
	bool open = false;

	for (uint64_t j = 0; client_more(c, t1); j++) {
		uint64_t idx = xorshift64(&x) % c->num;

		make_key(idx, c->key);
		make_value(idx, ((uint64_t)(c->id + 1) << ROUND_SHIFT) + j + 1, c->val);
		t1 = batch_put(c, h, j, &open);
	}
	if (open)
		c->e->batch_commit(h);
}

/* Marks in @bits (of a span starting at key 0) the keys fill client @c wrote. */
static void mark_filled(const client *c, uint8_t *bits)
{
	uint64_t n = c->ops < c->span ? c->ops : c->span;

	for (uint64_t j = 0; j < n; j++) {
		uint64_t idx = c->order ? c->order[j] : c->first + j;

		bits[idx / 8] |= (uint8_t)(1u << (idx % 8));
	}
}

/* After a fill of @n keys by @nc clients: did they write every key? If
 * not (a duration shorter than the fill), which ones (*bits, to free). */
static bool fill_complete(const client *cl, int nc, uint64_t n, uint8_t **bits)
{
	bool all = true;

	*bits = NULL;
	for (int i = 0; i < nc; i++)
		all = all && cl[i].ops >= cl[i].span;
	if (all)
		return true;
	*bits = peers_xmalloc("key bitmap", n / 8 + 1);
	memset(*bits, 0, n / 8 + 1);
	for (int i = 0; i < nc; i++)
		mark_filled(&cl[i], *bits);
	return false;
}

static void client_read(client *c, void *h)
{
	uint64_t x = reader_seed(c->id), t1 = c->start_ns;

	while (client_more(c, t1)) {
		uint64_t idx = xorshift64(&x) % c->num;
		size_t vlen = 0;
		uint64_t t0;
		bool found;

		make_key(idx, c->key);
		t0 = now_ns();
		found = c->e->get(h, c->key, g_key_size, c->buf, g_value_size, &vlen);
		t1 = now_ns();
		client_record(c, t0, t1);
		if (!found)
			peers_mismatch(c->e->name, peers_workload_names[c->work],
			               "key %.*s not found", (int)g_key_size, c->key);
		if (!value_ok(idx, c->buf, vlen, true, c->val))
			peers_mismatch(c->e->name, peers_workload_names[c->work],
			               "value of key %.*s differs (%zu bytes)", (int)g_key_size,
			               c->key, vlen);
	}
}

/*
 * A paced writer (--writer-rate) waits for its next put's start: put k
 * (from 0: the first at once) starts k / rate s after the writer did, not
 * sooner.  It sleeps a millisecond at most at a time, so that once the
 * readers are done it ends within one (a long sleep would stretch the row
 * they are measured in); false when it was told to stop.
 */
static bool writer_pace(const client *c)
{
	uint64_t due = c->start_ns + c->ops * 1000000000u / c->rate;

	for (uint64_t now = now_ns(); now < due; now = now_ns()) {
		if (atomic_load_explicit(g_stop, memory_order_relaxed) != 0)
			return false;
		sleep_until_ns(due - now > 1000000u ? now + 1000000u : due);
	}
	return true;
}

/* updaterandom (get, check, put a new value), readwhilewriting's writer and
 * fillsync's upserts (put a new value): random keys, rounds of this client. */
static void client_update(client *c, void *h)
{
	uint64_t x = reader_seed(c->id), t1 = c->start_ns;
	bool rmw = !c->writer && !c->upsert;

	while (client_more(c, t1)) {
		uint64_t idx = xorshift64(&x) % c->num;
		uint64_t round = ((uint64_t)(c->id + 1) << ROUND_SHIFT) + c->ops + 1;
		size_t vlen = 0;
		bool found = true;
		uint64_t t0;

		make_key(idx, c->key);
		make_value(idx, round, c->val);
		if (c->rate != 0 && !writer_pace(c))
			break;
		t0 = now_ns();
		if (rmw)
			found = c->e->get(h, c->key, g_key_size, c->buf, g_value_size, &vlen);
		c->e->put(h, c->key, g_key_size, c->val, g_value_size);
		t1 = now_ns();
		client_record(c, t0, t1);
		if (!found)
			peers_mismatch(c->e->name, "updaterandom", "key %.*s not found",
			               (int)g_key_size, c->key);
		/* c->val is free now: the put copied it. */
		if (rmw && !value_ok(idx, c->buf, vlen, true, c->val))
			peers_mismatch(c->e->name, "updaterandom",
			               "value of key %.*s differs (%zu bytes)", (int)g_key_size,
			               c->key, vlen);
	}
}

/* The balance of the account @key in the open transaction @t; false when
 * the engine rolled the transaction back (a conflict). */
static bool txn_balance(client *c, void *t, const char *key, uint64_t *b)
{
	size_t vlen = 0;
	peers_txn_rc rc = c->e->txn_get(t, key, g_key_size, c->buf, g_value_size, &vlen);

	if (rc == PEERS_TXN_CONFLICT)
		return false;
	if (rc == PEERS_TXN_ABSENT)
		peers_mismatch(c->e->name, "txn_transfer", "account %.*s not found",
		               (int)g_key_size, key);
	if (vlen > g_value_size || !parse_balance(c->buf, vlen, b))
		peers_mismatch(c->e->name, "txn_transfer",
		               "account %.*s holds %zu bytes, not a decimal balance",
		               (int)g_key_size, key, vlen);
	return true;
}

/* One attempt at moving @amount from account c->key to c->key2 (when the
 * first holds it); false when it conflicted and nothing was applied. Both
 * accounts are written either way, so every transfer has the same shape. */
static bool transfer_once(client *c, void *t, uint64_t amount)
{
	const peers_engine *e = c->e;
	char fv[BALANCE_DIGITS], tv[BALANCE_DIGITS];
	uint64_t from, to;
	size_t fn, tn;

	if (e->txn_begin(t) != PEERS_TXN_OK)
		return false;
	if (!txn_balance(c, t, c->key, &from) || !txn_balance(c, t, c->key2, &to))
		return false;
	if (from >= amount) {
		from -= amount;
		to += amount;
	}
	fn = format_balance(from, fv);
	tn = format_balance(to, tv);
	if (e->txn_put(t, c->key, g_key_size, fv, fn) != PEERS_TXN_OK ||
	    e->txn_put(t, c->key2, g_key_size, tv, tn) != PEERS_TXN_OK)
		return false;
	return e->txn_commit(t) == PEERS_TXN_OK;
}

/* txn_transfer: transfers between random distinct accounts, each run again
 * until it commits; its latency is from its first begin to its commit. */
static void client_transfer(client *c, void *h)
{
	uint64_t x = reader_seed(c->id), t1 = c->start_ns;
	void *t = c->e->txn_new(h);

	while (client_more(c, t1)) {
		uint64_t from = xorshift64(&x) % PEERS_TXN_ACCOUNTS;
		uint64_t to = xorshift64(&x) % (PEERS_TXN_ACCOUNTS - 1);
		uint64_t amount = 1 + xorshift64(&x) % 10;
		uint64_t t0;

		to += to >= from; /* distinct from the source, uniform over the others */
		make_key(from, c->key);
		make_key(to, c->key2);
		t0 = now_ns();
		while (!transfer_once(c, t, amount))
			c->aborts++;
		t1 = now_ns();
		client_record(c, t0, t1);
	}
	c->e->txn_free(t);
}

/* Prepare, wait for the start, run the timed operations. */
static void client_run(client *c)
{
	void *h = c->h ? c->h : c->e->open(&c->oa);
	bool reads = c->work == PEERS_READRANDOM || c->work == PEERS_READWHILEWRITING ||
	             c->work == PEERS_UPDATERANDOM;
	char what[64];

	if (c->work == PEERS_TXN_TRANSFER) {
		verify_accounts(c->e, h, "txn_transfer warm pass");
	} else if ((reads || c->upsert || c->work == PEERS_WRITERANDOM) && !c->writer) {
		snprintf(what, sizeof(what), "%s warm pass", peers_workload_names[c->work]);
		warm_pass(c->e, h, c->num, what);
	}
	/* After the load and the warm pass: the reads see all of it. */
	if (c->snapshot)
		c->e->snapshot(h, true);
	client_ready(c);
	c->start_ns = now_ns();
	if (c->timed && g_hooks != NULL && g_hooks->start != NULL)
		g_hooks->start(g_hooks->arg, c->id, c->start_ns);
	if (c->work == PEERS_TXN_TRANSFER)
		client_transfer(c, h);
	else if (c->work == PEERS_WRITERANDOM)
		client_write(c, h);
	else if (c->work == PEERS_UPDATERANDOM || c->writer || c->upsert)
		client_update(c, h);
	else if (reads)
		client_read(c, h);
	else
		client_fill(c, h);
	c->end_ns = now_ns();
	if (c->timed && g_hooks != NULL && g_hooks->end != NULL)
		g_hooks->end(g_hooks->arg, c->id, c->end_ns);
	if (c->snapshot)
		c->e->snapshot(h, false);
	if (c->h == NULL)
		c->e->close(h);
}

static void *thread_main(void *arg)
{
	client *c = arg;

	g_client_id = c->id;
	client_run(c);
	return NULL;
}

/* Threads, on one handle (cl[i].h set) or each opening its own (NULL); a
 * writer (the last client, if any) is told to stop once the others are done.
 * This thread passes the barrier with them twice: once all are ready (then
 * drops the caches when @drop), and to start them. */
static void run_threads(client *cl, int n, bool drop)
{
	pthread_t tid[MAX_CLIENTS];
	pthread_barrier_t barrier;
	int rc = pthread_barrier_init(&barrier, NULL, (unsigned)n + 1);

	if (rc != 0)
		peers_fatal(cl[0].e->name, "pthread_barrier_init", "%s", strerror(rc));
	for (int i = 0; i < n; i++) {
		cl[i].barrier = &barrier;
		rc = pthread_create(&tid[i], NULL, thread_main, &cl[i]);
		if (rc != 0)
			peers_fatal(cl[0].e->name, "pthread_create", "%s", strerror(rc));
	}
	barrier_wait(cl[0].e, &barrier);
	if (drop)
		drop_caches();
	barrier_wait(cl[0].e, &barrier);
	for (int i = 0; i < n; i++) {
		if (cl[i].writer)
			atomic_store(g_stop, 1);
		rc = pthread_join(tid[i], NULL);
		if (rc != 0)
			peers_fatal(cl[0].e->name, "pthread_join", "%s", strerror(rc));
	}
	rc = pthread_barrier_destroy(&barrier);
	if (rc != 0)
		peers_fatal(cl[0].e->name, "pthread_barrier_destroy", "%s", strerror(rc));
}

static _Noreturn void children_failed(int id, const char *what)
{
	int code = reap_children(true);

	fprintf(stderr, "%s: %s: client process %d %s\n", g_prog, g_engine, id, what);
	die(code ? code : PEERS_EXIT_ERROR);
}

static _Noreturn void child_main(client *c)
{
	client_wire w;

	g_is_child = true;
	g_client_id = c->id;
	g_nchildren = 0;
	client_run(c);
	w.ops = c->ops;
	w.aborts = c->aborts;
	w.start_ns = c->start_ns;
	w.end_ns = c->end_ns;
	write_full(c->result_fd, &w, sizeof(w));
	if (c->timed)
		write_full(c->result_fd, c->lat, sizeof(*c->lat));
	xclose(c->result_fd);
	_exit(0);
}

static void run_processes(client *cl, int n, bool drop)
{
	int go[2];
	int code;

	if (pipe(go) != 0)
		sys_fail("pipe");
	if (fflush(stdout) != 0 || fflush(stderr) != 0) /* or children write it again */
		sys_fail("fflush");
	for (int i = 0; i < n; i++) {
		int fds[2];
		pid_t pid;

		if (pipe(fds) != 0)
			sys_fail("pipe");
		pid = fork();
		if (pid < 0)
			sys_fail("fork");
		if (pid == 0) {
			g_is_child = true;
			xclose(go[1]);
			xclose(fds[0]);
			for (int j = 0; j < i; j++)
				xclose(cl[j].result_fd);
			cl[i].go_fd = go[0];
			cl[i].result_fd = fds[1];
			child_main(&cl[i]);
		}
		g_children[g_nchildren++] = pid;
		xclose(fds[1]);
		cl[i].result_fd = fds[0];
	}
	xclose(go[0]);

	for (int i = 0; i < n; i++) {
		char b;

		if (read_full(cl[i].result_fd, &b, 1) != 1)
			children_failed(cl[i].id, "failed while preparing");
	}
	if (drop)
		drop_caches();
	xclose(go[1]); /* start */
	for (int i = 0; i < n; i++) {
		client_wire w;

		if (cl[i].writer) /* the others are done */
			atomic_store(g_stop, 1);
		if (read_full(cl[i].result_fd, &w, sizeof(w)) != sizeof(w))
			children_failed(cl[i].id, "ended without reporting");
		if (cl[i].nops != 0 && w.ops != cl[i].nops)
			children_failed(cl[i].id, "reported a wrong operation count");
		cl[i].start_ns = w.start_ns;
		cl[i].end_ns = w.end_ns;
		cl[i].aborts = w.aborts;
		cl[i].ops = w.ops;
		if (cl[i].timed && (read_full(cl[i].result_fd, cl[i].lat, sizeof(*cl[i].lat)) !=
		                        sizeof(*cl[i].lat) ||
		                    cl[i].lat->count != w.ops))
			children_failed(cl[i].id, "sent truncated latencies");
		xclose(cl[i].result_fd);
		cl[i].result_fd = -1;
	}
	code = reap_children(false);
	if (code != 0) {
		fprintf(stderr, "%s: %s: a client process failed\n", g_prog, g_engine);
		die(code);
	}
}

/* ------------------------------------------------------------ reporting */

/* Output goes out line by line; a failed write (a closed pipe: SIGPIPE is
 * ignored) is an error like any other. */
void peers_flush(FILE *f)
{
	if (fflush(f) != 0 || ferror(f))
		sys_fail(f == stdout ? "write(stdout)" : "write(stderr)");
}

/* Nearest-rank percentile (in thousandths), in microseconds: the top of the
 * bucket holding that rank, or the maximum when it is lower. */
static double percentile_us(const lat_hist *h, unsigned per_mille)
{
	uint64_t rank = (h->count * per_mille + 999) / 1000, seen = 0;

	if (h->count == 0)
		return 0.0;
	if (rank == 0)
		rank = 1;
	for (unsigned i = 0; i < LH_BUCKETS; i++) {
		seen += h->bucket[i];
		if (seen >= rank) {
			uint64_t v = lh_high(i);
			return (double)(v < h->max ? v : h->max) / 1000.0;
		}
	}
	return (double)h->max / 1000.0;
}

const char *peers_latency_selftest(void)
{
	lat_hist *h = lat_alloc();
	const char *bad = NULL;

	/* Every value lands in a bucket whose top is at most 1/128 above it,
	 * and the buckets follow the values' order. */
	for (uint64_t v = 0, prev = 0; v <= UINT32_MAX && bad == NULL; v += 1 + v / 97) {
		unsigned i = lh_index((uint32_t)v);
		uint64_t top = lh_high(i);
		if (i >= LH_BUCKETS || i < prev || top < v || top - v > v / LH_SUB)
			bad = "a value's bucket is out of order or too wide";
		prev = i;
	}
	/* 1..100000 ns once each: the nearest-rank p50 is 50000, p99 99000. */
	for (uint32_t v = 1; v <= 100000; v++)
		lh_add(h, v);
	double p50 = percentile_us(h, 500), p99 = percentile_us(h, 990);
	if (bad == NULL && (p50 < 50.0 || p50 > 50.0 * (1 + 1.0 / LH_SUB) || p99 < 99.0 ||
	                    p99 > 99.0 * (1 + 1.0 / LH_SUB) || percentile_us(h, 1000) != 100.0))
		bad = "a percentile is off by more than 1/128";
	free(h);
	return bad;
}

#define MIB(b) ((double)(b) / 1048576.0)

/* The size on the fill's human line: on disk, the raw pairs, their ratio. */
static void emit_size_human(FILE *f, const peers_sizes *z)
{
	fprintf(f, "  disk %.1f MiB", MIB(z->total));
	if (z->data_dir != NULL)
		fprintf(f, " (%s %.1f, %s %.1f, other %.1f)", z->data_dir, MIB(z->data), z->wal_dir,
		        MIB(z->wal), MIB(z->total - z->data - z->wal));
	fprintf(f, " raw %.1f MiB x%.2f", MIB(z->raw),
	        z->raw ? (double)z->total / (double)z->raw : 0.0);
}

static void emit_size_json(const peers_sizes *z)
{
	printf("\"total_bytes\":%" PRIu64 ",\"raw_bytes\":%" PRIu64 ",", z->total, z->raw);
	if (z->data_dir != NULL)
		printf("\"data_bytes\":%" PRIu64 ",\"wal_bytes\":%" PRIu64
		       ",\"other_bytes\":%" PRIu64 ",",
		       z->data, z->wal, z->total - z->data - z->wal);
}

/* ------------------------------------------------------- memory cgroup */

/* What a row says of the memory cgroup it ran in (peers_config.memcg). */
typedef struct memcg_figures {
	uint64_t limit, max_usage, failcnt, rss, cache;
	unsigned procs;
} memcg_figures;

static FILE *memcg_open(const char *dir, const char *file, const char *mode)
{
	char path[PATH_MAX];
	FILE *f;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, file) >= sizeof(path))
		peers_fatal(g_engine, "memory cgroup", "path too long: \"%s\"", dir);
	f = fopen(path, mode);
	if (f == NULL)
		peers_fatal(g_engine, "fopen", "\"%s\": %s", path, strerror(errno));
	return f;
}

static void memcg_close(FILE *f, const char *dir, const char *file)
{
	bool bad = ferror(f) != 0;

	if (fclose(f) != 0 || bad)
		peers_fatal(g_engine, "memory cgroup", "\"%s/%s\": %s", dir, file,
		            bad ? "read error" : strerror(errno));
}

static uint64_t memcg_u64(const char *dir, const char *file)
{
	FILE *f = memcg_open(dir, file, "r");
	unsigned long long v;

	if (fscanf(f, "%llu", &v) != 1)
		peers_fatal(g_engine, "memory cgroup", "\"%s/%s\" holds no number", dir, file);
	memcg_close(f, dir, file);
	return v;
}

/* memory.stat's "total_rss" (anonymous memory) and "total_cache" (page
 * cache and shared memory: walrus's pool is there). */
static void memcg_stat(const char *dir, memcg_figures *m)
{
	FILE *f = memcg_open(dir, "memory.stat", "r");
	char name[64];
	unsigned long long v;

	while (fscanf(f, "%63s %llu", name, &v) == 2) {
		if (strcmp(name, "total_rss") == 0)
			m->rss = v;
		else if (strcmp(name, "total_cache") == 0)
			m->cache = v;
	}
	memcg_close(f, dir, "memory.stat");
}

static unsigned memcg_procs(const char *dir)
{
	FILE *f = memcg_open(dir, "cgroup.procs", "r");
	unsigned long long pid;
	unsigned n = 0;

	while (fscanf(f, "%llu", &pid) == 1)
		n++;
	memcg_close(f, dir, "cgroup.procs");
	return n;
}

/* The cgroup's figures for a row; the maximum is then reset (to the usage
 * now), so that each row's covers its own load, warm pass and timed run. */
static void memcg_read(const char *dir, memcg_figures *m)
{
	FILE *f;

	*m = (memcg_figures){.limit = memcg_u64(dir, "memory.limit_in_bytes"),
	                     .max_usage = memcg_u64(dir, "memory.max_usage_in_bytes"),
	                     .failcnt = memcg_u64(dir, "memory.failcnt")};
	memcg_stat(dir, m);
	m->procs = memcg_procs(dir);
	f = memcg_open(dir, "memory.max_usage_in_bytes", "w");
	if (fputs("0", f) == EOF)
		peers_fatal(g_engine, "memory cgroup", "\"%s/memory.max_usage_in_bytes\": %s", dir,
		            strerror(errno));
	memcg_close(f, dir, "memory.max_usage_in_bytes");
}

static void emit_memcg_human(FILE *f, const memcg_figures *m)
{
	fprintf(f, "  memcg max %.1f of %.1f MiB failcnt %" PRIu64 " rss %.1f cache %.1f procs %u",
	        MIB(m->max_usage), MIB(m->limit), m->failcnt, MIB(m->rss), MIB(m->cache), m->procs);
}

/* The JSON fields, each after a comma: the caller closes the object. */
static void emit_memcg_json(const memcg_figures *m)
{
	printf(",\"memory_limit_bytes\":%" PRIu64 ",\"memory_max_usage_bytes\":%" PRIu64
	       ",\"memory_failcnt\":%" PRIu64 ",\"memory_rss_bytes\":%" PRIu64
	       ",\"memory_cache_bytes\":%" PRIu64 ",\"memory_procs\":%u",
	       m->limit, m->max_usage, m->failcnt, m->rss, m->cache, m->procs);
}

/* txn_transfer's row: commits, not pairs (no MB/s), its durability and aborts. */
static void emit_txn(const peers_config *cfg, const peers_result *r, const memcg_figures *m)
{
	double secs = (double)r->ns / 1e9;
	double ops_s = secs > 0 ? (double)r->ops / secs : 0.0;
	uint64_t tries = r->ops + r->aborts;
	double rate = tries ? (double)r->aborts / (double)tries : 0.0;
	FILE *human = cfg->json ? stderr : stdout;

	fprintf(human,
	        "%-12s %-16s procs=%-2d %-9s %10" PRIu64 " commits %8.3f s %11.0f commits/s  %-7s"
	        "  aborts %" PRIu64 " (%.2f%%)  p50 %9.2f us  p99 %9.2f us",
	        r->engine, r->workload, r->procs, r->mode, r->ops, secs, ops_s,
	        r->sync ? "durable" : "async", r->aborts, 100.0 * rate, r->p50_us, r->p99_us);
	if (m != NULL)
		emit_memcg_human(human, m);
	fputc('\n', human);
	peers_flush(human);
	if (!cfg->json)
		return;
	printf("{\"engine\":\"%s\",\"workload\":\"%s\",\"procs\":%d,\"mode\":\"%s\","
	       "\"batch\":1,\"sync\":%s,\"ops\":%" PRIu64
	       ",\"seconds\":%.6f,\"ops_per_s\":%.1f,\"mb_per_s\":null,\"commits\":%" PRIu64
	       ",\"aborts\":%" PRIu64 ",\"abort_rate\":%.6f,\"p50_us\":%.3f,\"p99_us\":%.3f",
	       r->engine, r->workload, r->procs, r->mode, r->sync ? "true" : "false", r->ops, secs,
	       ops_s, r->ops, r->aborts, rate, r->p50_us, r->p99_us);
	if (m != NULL)
		emit_memcg_json(m);
	printf("}\n");
	peers_flush(stdout);
}

static void emit(const peers_config *cfg, const peers_result *r)
{
	double secs = (double)r->ns / 1e9;
	double ops_s = secs > 0 ? (double)r->ops / secs : 0.0;
	double mb_s = secs > 0
	                  ? (double)r->ops * (double)(g_key_size + g_value_size) / secs / 1048576.0
	                  : 0.0;
	FILE *human = cfg->json ? stderr : stdout;
	bool keys = strcmp(r->workload, "scan") == 0 || strcmp(r->workload, "scanrange") == 0;
	bool writer = strcmp(r->workload, "readwhilewriting") == 0;
	memcg_figures mf, *m = NULL;

	if (cfg->memcg != NULL) {
		memcg_read(cfg->memcg, &mf);
		m = &mf;
	}
	if (r->has_sync) {
		emit_txn(cfg, r, m);
		return;
	}
	fprintf(human,
	        "%-12s %-16s procs=%-2d %-9s %10" PRIu64 " %-4s %8.3f s %11.0f %-6s %8.1f MB/s",
	        r->engine, r->workload, r->procs, r->mode, r->ops, keys ? "keys" : "ops", secs,
	        ops_s, keys ? "keys/s" : "ops/s", mb_s);
	if (r->has_lat)
		fprintf(human, "  p50 %9.2f us  p99 %9.2f us", r->p50_us, r->p99_us);
	if (writer)
		fprintf(human, "  writer %.0f puts/s p99 %.2f us",
		        secs > 0 ? (double)r->writer_ops / secs : 0.0, r->writer_p99_us);
	if (writer && cfg->writer_rate != 0)
		fprintf(human, " (at most %" PRIu64 "/s)", cfg->writer_rate);
	if (r->batch > 1)
		fprintf(human, "  batch %" PRIu64, r->batch);
	if (r->cold)
		fprintf(human, "  cold");
	if (r->snapshot)
		fprintf(human, "  snapshot");
	if (r->has_size)
		emit_size_human(human, &r->size);
	if (r->has_compacted) {
		fprintf(human, "  compacted in %.3f s:", r->compact_s);
		emit_size_human(human, &r->compacted);
	}
	if (m != NULL)
		emit_memcg_human(human, m);
	fputc('\n', human);
	peers_flush(human);
	if (!cfg->json)
		return;
	printf("{\"engine\":\"%s\",\"workload\":\"%s\",\"procs\":%d,\"mode\":\"%s\","
	       "\"batch\":%" PRIu64 ",\"ops\":%" PRIu64
	       ",\"seconds\":%.6f,\"ops_per_s\":%.1f,\"mb_per_s\":%.3f,",
	       r->engine, r->workload, r->procs, r->mode, r->batch ? r->batch : 1, r->ops, secs,
	       ops_s, mb_s);
	if (writer)
		printf("\"writer_ops\":%" PRIu64 ",\"writer_p99_us\":%.3f,\"writer_rate\":%" PRIu64
		       ",",
		       r->writer_ops, r->writer_p99_us, cfg->writer_rate);
	if (r->cold)
		printf("\"drop_caches\":true,");
	if (r->snapshot)
		printf("\"snapshot\":true,");
	if (r->has_size)
		emit_size_json(&r->size);
	if (r->has_compacted) {
		printf("\"compacted\":{");
		emit_size_json(&r->compacted);
		printf("\"seconds\":%.6f},", r->compact_s);
	}
	if (r->has_lat)
		printf("\"p50_us\":%.3f,\"p99_us\":%.3f", r->p50_us, r->p99_us);
	else
		printf("\"p50_us\":null,\"p99_us\":null");
	if (m != NULL)
		emit_memcg_json(m);
	printf("}\n");
	peers_flush(stdout);
}

/* The pooled latencies of the clients whose writer flag is @writer (freed by the caller). */
static lat_hist *pool_latencies(const client *cl, int n, bool writer)
{
	lat_hist *all = peers_xmalloc("latencies", sizeof(lat_hist));

	memset(all, 0, sizeof(*all));
	for (int i = 0; i < n; i++)
		if (cl[i].writer == writer && cl[i].lat != NULL)
			lh_merge(all, cl[i].lat);
	return all;
}

/* Hand the figures to the result hook, or print them. */
static void deliver(const peers_config *cfg, const peers_result *r)
{
	if (g_hooks != NULL && g_hooks->result != NULL)
		g_hooks->result(g_hooks->arg, r);
	else
		emit(cfg, r);
}

/* Merge the clients' figures into *r: the run lasts from the first start to
 * the last end, latencies are pooled (a writer's apart). */
static void merge_clients(const client *cl, int n, peers_workload w, const char *mode,
                          peers_result *r)
{
	uint64_t start = UINT64_MAX, end = 0, aborts = 0;
	int procs = 0;

	for (int i = 0; i < n; i++) {
		procs += !cl[i].writer;
		aborts += cl[i].aborts;
		start = cl[i].start_ns < start ? cl[i].start_ns : start;
		end = cl[i].end_ns > end ? cl[i].end_ns : end;
	}
	lat_hist *all = pool_latencies(cl, n, false), *wall = pool_latencies(cl, n, true);
	uint64_t ops = all->count, wops = wall->count;
	double mean = ops ? (double)all->sum / (double)ops : 0.0;
	double var = ops ? all->sumsq / (double)ops - mean * mean : 0.0;
	*r = (peers_result){
	    .engine = cl[0].e->name,
	    .workload = peers_workload_names[w],
	    .mode = mode,
	    .procs = procs,
	    .batch = cl[0].batch,
	    .ops = ops,
	    .aborts = aborts,
	    .start_ns = start,
	    .end_ns = end,
	    .ns = end - start,
	    .has_lat = true,
	    .avg_us = mean / 1000.0,
	    .stddev_us = var > 0 ? sqrt(var) / 1000.0 : 0.0,
	    .p50_us = percentile_us(all, 500),
	    .p99_us = percentile_us(all, 990),
	    .p999_us = percentile_us(all, 999),
	    .max_us = (double)all->max / 1000.0,
	    .writer_ops = wops,
	    .writer_p50_us = percentile_us(wall, 500),
	    .writer_p99_us = percentile_us(wall, 990),
	    .writer_max_us = (double)wall->max / 1000.0,
	};
	free(all);
	free(wall);
}

static void report_clients(const peers_config *cfg, const client *cl, int n, peers_workload w,
                           const char *mode)
{
	peers_result r;

	merge_clients(cl, n, w, mode, &r);
	deliver(cfg, &r);
}

/* ------------------------------------------------------------ workloads */

/* A new, empty directory for a database (walrus-peers); with fresh_dirs
 * off (walrus bench), the directory as it is. Mode 0700: walrus refuses a
 * data directory open to group or others. */
static void reset_dir(const peers_config *cfg, const peers_engine *e, const char *dir)
{
	int err;

	if (!cfg->fresh_dirs)
		return;
	if (e->idle != NULL)
		e->idle(dir);
	err = peers_rm_tree(dir);
	if (err != 0)
		peers_fatal(g_engine, "remove", "\"%s\": %s", dir, strerror(err));
	if (mkdir(dir, 0700) != 0)
		peers_fatal(g_engine, "mkdir", "\"%s\": %s", dir, strerror(errno));
}

/* A client of workload @w doing @nops operations (0: for a duration, or
 * as the writer); @timed: observed by the hooks. */
static client client_new(const peers_engine *e, const peers_open_args *oa, peers_workload w,
                         uint64_t nops, bool timed)
{
	client c = {
	    .e = e,
	    .oa = *oa,
	    .work = w,
	    .nops = nops,
	    .timed = timed,
	    .result_fd = -1,
	    .go_fd = -1,
	    .batch = 1,
	};

	c.lat = timed ? lat_alloc() : NULL;
	c.key = client_alloc("key", g_key_size);
	c.val = client_alloc("value", g_value_size);
	c.buf = client_alloc("value", g_value_size);
	c.key2 = client_alloc("key", g_key_size);
	return c;
}

static void client_free(client *c)
{
	free(c->lat);
	free(c->key);
	free(c->val);
	free(c->buf);
	free(c->key2);
}

/* fillseq / fillrandom on a new database, in this process. With report ==
 * false, the untimed load that readrandom and scan start from (all num
 * keys, whatever the duration). Returns whether the database holds all num
 * keys (a timed fill may end before). */
static bool wl_fill(const peers_config *cfg, const peers_engine *e, peers_workload w, bool report)
{
	peers_open_args oa = {.dir = g_subdir,
	                      .sync = report && cfg->sync,
	                      .nkeys = cfg->num,
	                      .cache_mb = cfg->cache_mb};
	uint64_t duration = report ? cfg->duration_ns : 0;
	client c = client_new(e, &oa, w, duration ? 0 : cfg->num, report);
	uint64_t *order = w == PEERS_FILLRANDOM ? make_permutation(cfg->num) : NULL;
	uint8_t *bits;
	bool all;

	reset_dir(cfg, e, g_subdir);
	/* walrus bench says so itself. */
	if (!report && cfg->fresh_dirs) {
		fprintf(
		    stderr,
		    "%s: %s: loading %" PRIu64 " keys by fillseq, batch %" PRIu64 " (untimed)\n",
		    g_prog, e->name, cfg->num, cfg->batch > 1 && e->batch_begin ? cfg->batch : 1);
		peers_flush(stderr);
	}
	c.h = e->open(&oa);
	c.order = order;
	c.span = cfg->num;
	c.duration_ns = duration;
	if (e->batch_begin != NULL && cfg->batch > 1)
		c.batch = cfg->batch;
	client_run(&c);
	all = fill_complete(&c, 1, cfg->num, &bits);
	if (report) {
		verify_keys(e, c.h, cfg->num, bits, peers_workload_names[w], false);
		check_engine(e, c.h, peers_workload_names[w]);
	}
	e->close(c.h);
	if (report) {
		peers_result r;

		merge_clients(&c, 1, w, "processes", &r);
		if (cfg->sizes) {
			/* Untimed: walrus's shutdown checkpoint, then the files. */
			if (e->idle != NULL)
				e->idle(g_subdir);
			peers_disk_usage(e, g_subdir, &r.size);
			r.size.raw = all ? cfg->num * (uint64_t)(g_key_size + g_value_size) : 0;
			r.has_size = true;
		}
		if (cfg->sizes && cfg->compact && e->compact != NULL) {
			void *h = e->open(&oa);
			r.compact_s = e->compact(h);
			check_engine(e, h, "compact");
			e->close(h);
			if (e->idle != NULL)
				e->idle(g_subdir);
			peers_disk_usage(e, g_subdir, &r.compacted);
			r.compacted.raw = r.size.raw;
			r.has_compacted = true;
		}
		deliver(cfg, &r);
	}
	free(bits);
	free(order);
	client_free(&c);
	return all;
}

/* Run n clients as forked processes, as threads each opening its own handle
 * (an engine with thread_handles, in mode threads), or as threads on one
 * handle (a single-process engine). Returns the mode's name. */
/* NOLINTNEXTLINE(bugprone-easily-swappable-parameters): the order is fixed */
static const char *run_clients(const peers_engine *e, const peers_open_args *oa, client *cl, int n,
                               peers_client_mode mode, bool drop)
{
	atomic_store(g_stop, 0);
	if (!e->threads && e->thread_handles && mode == PEERS_CLIENTS_THREADS) {
		run_threads(cl, n, drop);
		return "threads";
	}
	if (!e->threads) {
		run_processes(cl, n, drop);
		return "processes";
	}
	void *h = e->open(oa);

	for (int i = 0; i < n; i++)
		cl[i].h = h;
	run_threads(cl, n, drop);
	e->close(h);
	return "threads";
}

static void wl_fillsync(const peers_config *cfg, const peers_engine *e, int procs,
                        peers_client_mode cmode)
{
	uint64_t total = cfg->sync_ops * (uint64_t)procs;
	peers_open_args oa = {
	    .dir = g_subdir, .sync = true, .nkeys = total, .cache_mb = cfg->cache_mb};
	client cl[MAX_CLIENTS];
	const char *mode;
	uint8_t *bits;
	void *h;

	/* Create the database here, so the clients only open it. */
	reset_dir(cfg, e, g_subdir);
	e->close(e->open(&oa));
	for (int i = 0; i < procs; i++) {
		cl[i] =
		    client_new(e, &oa, PEERS_FILLSYNC, cfg->duration_ns ? 0 : cfg->sync_ops, true);
		cl[i].id = i;
		cl[i].first = (uint64_t)i * cfg->sync_ops;
		cl[i].span = cfg->sync_ops;
		cl[i].duration_ns = cfg->duration_ns;
	}
	mode = run_clients(e, &oa, cl, procs, cmode, false);

	h = e->open(&oa);
	fill_complete(cl, procs, total, &bits);
	verify_keys(e, h, total, bits, "fillsync", false);
	check_engine(e, h, "fillsync");
	free(bits);
	e->close(h);
	report_clients(cfg, cl, procs, PEERS_FILLSYNC, mode);
	for (int i = 0; i < procs; i++)
		client_free(&cl[i]);
}

/* The round of key i's value @v (0: its round-0 value); verify_cb has
 * checked it is a valid one. @tmp: value_size bytes of scratch. */
static uint64_t key_round(uint64_t i, const char *v, size_t vlen, char *tmp)
{
	make_value(i, 0, tmp);
	return vlen == g_value_size && memcmp(v, tmp, vlen) == 0 ? 0 : value_round(v);
}

/* The rounds the database holds before an overwrite workload, when earlier
 * runs may have left later rounds in it. */
typedef struct rounds_state {
	verify_state v; /* first: verify_cb's argument */
	uint64_t *round;
} rounds_state;

static void rounds_cb(void *arg, const char *k, size_t klen, const char *v, size_t vlen)
{
	rounds_state *s = arg;
	uint64_t i = s->v.next;

	verify_cb(&s->v, k, klen, v, vlen);
	s->round[i] = key_round(i, v, vlen, s->v.tmp);
}

/* The check after an overwrite workload: verify_cb's, and the rounds. */
typedef struct writes_state {
	verify_state v; /* first: verify_cb's argument */
	const client *cl;
	int n;
	const uint64_t *before; /* each key's round before the run; NULL: all 0 */
	const uint64_t *last;   /* single writer: the round each put left, 0 if none */
	uint64_t updated;       /* keys whose round the run changed */
	char *tmp;
} writes_state;

/* Does the client put values of its own rounds? */
static bool client_writes(const client *c)
{
	return c->work == PEERS_UPDATERANDOM || c->work == PEERS_WRITERANDOM || c->writer ||
	       c->upsert;
}

static void writes_cb(void *arg, const char *k, size_t klen, const char *v, size_t vlen)
{
	writes_state *s = arg;
	uint64_t i = s->v.next, r, old;

	verify_cb(&s->v, k, klen, v, vlen); /* the key, and a value of some round */
	r = key_round(i, v, vlen, s->tmp);
	old = s->before != NULL ? s->before[i] : 0;
	if (r != old) {
		uint64_t id = (r >> ROUND_SHIFT) - 1,
		         j = (r & (((uint64_t)1 << ROUND_SHIFT) - 1)) - 1;

		if (r == 0 || id >= (uint64_t)s->n || j >= s->cl[id].ops ||
		    !client_writes(&s->cl[id]))
			peers_mismatch(s->v.engine, s->v.what,
			               "key %.*s holds round %#" PRIx64 ", which no client wrote",
			               (int)g_key_size, s->v.key, r);
		s->updated++;
	}
	if (s->last != NULL && r != (s->last[i] ? s->last[i] : old))
		peers_mismatch(s->v.engine, s->v.what,
		               "key %.*s holds round %#" PRIx64 ", its last put wrote %#" PRIx64,
		               (int)g_key_size, s->v.key, r, s->last[i] ? s->last[i] : old);
}

/* Each key's round in the database at @dir (its values checked on the way);
 * NULL beyond REPLAY_MAX keys. */
static uint64_t *read_rounds(const peers_engine *e, const peers_open_args *oa, uint64_t num,
                             const char *what)
{
	rounds_state s = {.v = {.engine = e->name, .what = what, .n = num, .any_round = true}};
	void *h;

	if (num > REPLAY_MAX)
		return NULL;
	s.round = peers_xmalloc("rounds", num * sizeof(uint64_t));
	s.v.key = peers_xmalloc("key", g_key_size);
	s.v.tmp = peers_xmalloc("value", g_value_size);
	h = e->open(oa);
	e->scan(h, rounds_cb, &s);
	e->close(h);
	if (s.v.next != num)
		peers_mismatch(e->name, what, "scan found %" PRIu64 " keys, expected %" PRIu64,
		               s.v.next, num);
	free(s.v.key);
	free(s.v.tmp);
	return s.round;
}

/*
 * After readwhilewriting, updaterandom or fillsync's upserts: every key 0..num-1 holds a value
 * of some round (verify_all's check). Up to REPLAY_MAX keys, also: every key
 * whose round changed holds a round a writing client did write; with a
 * single writing client (its stream replayed), each key holds exactly the
 * value of its last put, or its value from before the run (@before, NULL
 * when all were round 0) if it had none; and, starting from round-0 values,
 * some key was overwritten when there were puts (an engine whose put left
 * an existing key as it was would pass the rest).
 */
static void verify_writes(const peers_engine *e, void *h, uint64_t num, const char *what,
                          const client *cl, int n, const uint64_t *before, bool pristine)
{
	writes_state s = {.v = {.engine = e->name, .what = what, .n = num, .any_round = true},
	                  .cl = cl,
	                  .n = n,
	                  .before = before};
	uint64_t puts = 0, *last = NULL;
	int writers = 0, w = -1;

	check_engine(e, h, what);
	if (num > REPLAY_MAX || (!pristine && before == NULL)) {
		verify_all(e, h, num, what, true);
		return;
	}
	for (int i = 0; i < n; i++) {
		if (!client_writes(&cl[i]))
			continue;
		puts += cl[i].ops;
		writers += cl[i].ops > 0;
		w = cl[i].ops > 0 ? i : w;
	}
	if (writers == 1) {
		uint64_t x = reader_seed(cl[w].id);

		last = calloc(num, sizeof(*last));
		if (last == NULL)
			peers_fatal(e->name, "calloc", "%" PRIu64 " rounds: out of memory", num);
		for (uint64_t j = 0; j < cl[w].ops; j++)
			last[xorshift64(&x) % num] =
			    ((uint64_t)(cl[w].id + 1) << ROUND_SHIFT) + j + 1;
	}
	s.last = last;
	s.v.key = peers_xmalloc("key", g_key_size);
	s.v.tmp = peers_xmalloc("value", g_value_size);
	s.tmp = peers_xmalloc("value", g_value_size);
	e->scan(h, writes_cb, &s);
	if (s.v.next != num)
		peers_mismatch(e->name, what, "scan found %" PRIu64 " keys, expected %" PRIu64,
		               s.v.next, num);
	if (pristine && puts > 0 && s.updated == 0)
		peers_mismatch(e->name, what, "%" PRIu64 " puts overwrote no value", puts);
	if (s.updated > puts)
		peers_mismatch(e->name, what,
		               "%" PRIu64 " keys hold a new round after %" PRIu64 " puts",
		               s.updated, puts);
	free(last);
	free(s.v.key);
	free(s.v.tmp);
	free(s.tmp);
}

/*
 * readrandom, readwhilewriting, updaterandom, and fillsync by duration
 * (its upserts), on the loaded database: P clients sharing reads (else num)
 * operations (or each running duration_ns, fillsync sync_duration_ns), plus
 * readwhilewriting's writer; afterwards (when anything was written) a full
 * scan checks that the database still holds every key with a valid value,
 * and the values the puts left (verify_writes). The read workloads drop the
 * kernel's caches before their timed run when asked (drop_caches).
 * readrandom's clients read through a snapshot each with @snapshot.
 */
/* NOLINTNEXTLINE(bugprone-easily-swappable-parameters): the order is fixed */
static void wl_random(const peers_config *cfg, const peers_engine *e, peers_workload w, int procs,
                      peers_client_mode cmode, bool pristine, bool snapshot)
{
	bool writes = w != PEERS_READRANDOM, upsert = w == PEERS_FILLSYNC;
	bool drop = g_drop_path != NULL && !upsert;
	uint64_t duration = upsert ? cfg->sync_duration_ns : cfg->duration_ns;
	peers_open_args oa = {.dir = g_subdir,
	                      .sync = upsert || (writes && cfg->sync),
	                      .nkeys = cfg->num,
	                      .cache_mb = cfg->cache_mb};
	client cl[MAX_CLIENTS];
	int n = procs + (w == PEERS_READWHILEWRITING);
	uint64_t total = cfg->reads ? cfg->reads : cfg->num; /* the measured operations */
	const char *mode;
	uint64_t *before = NULL;
	peers_result r;

	/* Untimed: the rounds earlier runs left, which the check afterwards needs. */
	if (writes && !pristine)
		before = read_rounds(e, &oa, cfg->num, peers_workload_names[w]);

	for (int i = 0; i < n; i++) {
		uint64_t share =
		    total / (uint64_t)procs + ((uint64_t)i < total % (uint64_t)procs ? 1 : 0);
		bool writer = i == procs;

		cl[i] = client_new(e, &oa, w, duration || writer ? 0 : share, true);
		cl[i].id = i;
		cl[i].num = cfg->num;
		cl[i].writer = writer;
		cl[i].rate = writer ? cfg->writer_rate : 0;
		cl[i].upsert = upsert;
		cl[i].duration_ns = writer ? 0 : duration;
		cl[i].snapshot = snapshot;
	}
	mode = run_clients(e, &oa, cl, n, cmode, drop);
	if (writes) {
		void *h = e->open(&oa);

		verify_writes(e, h, cfg->num, peers_workload_names[w], cl, n, before, pristine);
		e->close(h);
	}
	merge_clients(cl, n, w, mode, &r);
	r.cold = drop;
	r.snapshot = snapshot;
	deliver(cfg, &r);
	for (int i = 0; i < n; i++)
		client_free(&cl[i]);
	free(before);
}

typedef struct scan_state {
	const char *engine;
	const char *what; /* the workload, in messages */
	uint64_t n;
	uint64_t count;
	uint64_t fold;
	char *key; /* the key expected next, as decimal digits */
} scan_state;

static void scan_cb(void *arg, const char *k, size_t klen, const char *v, size_t vlen)
{
	scan_state *s = arg;

	if (s->count >= s->n)
		peers_mismatch(s->engine, s->what, "more than %" PRIu64 " keys", s->n);
	if (klen != g_key_size || memcmp(k, s->key, g_key_size) != 0)
		peers_mismatch(s->engine, s->what, "key #%" PRIu64 " is \"%.*s\", expected %.*s",
		               s->count, (int)(klen < 64 ? klen : 64), k, (int)g_key_size, s->key);
	if (vlen != g_value_size)
		peers_mismatch(s->engine, s->what, "value of key %.*s has %zu bytes",
		               (int)g_key_size, s->key, vlen);
	s->fold = fold_value(s->fold, v);
	s->count++;
	for (size_t j = g_key_size; j-- > 0;) {
		if (s->key[j] != '9') {
			s->key[j]++;
			break;
		}
		s->key[j] = '0';
	}
	/* Per 64 keys: a call per key cost the scan 7% of its time (perf, 1M
	 * keys in memory). */
	if (s->count % 64 == 0 && g_hooks != NULL && g_hooks->op != NULL)
		g_hooks->op(g_hooks->arg, 0, now_ns(), 64, PEERS_OP_NOLAT);
}

/* Reports the keys of a scan that scan_cb has not reported yet. */
static void scan_report_rest(const scan_state *s)
{
	if (s->count % 64 != 0 && g_hooks != NULL && g_hooks->op != NULL)
		g_hooks->op(g_hooks->arg, 0, now_ns(), s->count % 64, PEERS_OP_NOLAT);
}

/* scan; through a snapshot (taken after the warm pass) with @snapshot. */
static void wl_scan(const peers_config *cfg, const peers_engine *e, bool snapshot)
{
	peers_open_args oa = {
	    .dir = g_subdir, .sync = false, .nkeys = cfg->num, .cache_mb = cfg->cache_mb};
	void *h = e->open(&oa);
	uint64_t want = verify_all(e, h, cfg->num, "scan warm pass", true);
	scan_state s = {.engine = e->name, .what = "scan", .n = cfg->num};
	uint64_t t0, t1, keys = 0;
	peers_result r;

	if (snapshot)
		e->snapshot(h, true);
	s.key = peers_xmalloc("key", g_key_size);
	if (g_drop_path != NULL)
		drop_caches();
	t0 = now_ns();
	if (g_hooks != NULL && g_hooks->start != NULL)
		g_hooks->start(g_hooks->arg, 0, t0);
	do { /* with a duration: whole scans until it has passed */
		s.count = 0;
		s.fold = 0;
		make_key(0, s.key);
		e->scan(h, scan_cb, &s);
		scan_report_rest(&s);
		if (s.count != cfg->num)
			peers_mismatch(e->name, "scan", "found %" PRIu64 " keys, expected %" PRIu64,
			               s.count, cfg->num);
		if (s.fold != want)
			peers_mismatch(e->name, "scan", "values differ from the warm pass's");
		keys += s.count;
		t1 = now_ns();
	} while (cfg->duration_ns != 0 && t1 - t0 < cfg->duration_ns);
	if (g_hooks != NULL && g_hooks->end != NULL)
		g_hooks->end(g_hooks->arg, 0, t1);
	if (snapshot)
		e->snapshot(h, false);
	e->close(h);
	free(s.key);
	r = (peers_result){
	    .engine = e->name,
	    .workload = "scan",
	    .mode = "processes",
	    .procs = 1,
	    .ops = keys,
	    .start_ns = t0,
	    .end_ns = t1,
	    .ns = t1 - t0,
	    .cold = g_drop_path != NULL,
	    .snapshot = snapshot,
	};
	deliver(cfg, &r);
}

/* scanrange's keys: scan_keys, else num / 10 (at least 1), at most num. */
static uint64_t range_keys(const peers_config *cfg)
{
	uint64_t m = cfg->scan_keys ? cfg->scan_keys : cfg->num / 10;

	return m == 0 ? 1 : m > cfg->num ? cfg->num : m;
}

/*
 * scanrange: after the warm pass, M keys read in order from key index
 * next(x) mod (num - M + 1), x seeded as readrandom's client 0 (so the
 * range lies inside the keys), each key checked against the expected next
 * one and each value's length, the count, and a fingerprint of the values;
 * then, untimed, the same range again with each value checked (any round)
 * and the fingerprint the timed pass's.
 */
static void wl_scanrange(const peers_config *cfg, const peers_engine *e)
{
	peers_open_args oa = {
	    .dir = g_subdir, .sync = false, .nkeys = cfg->num, .cache_mb = cfg->cache_mb};
	uint64_t m = range_keys(cfg), x = reader_seed(0);
	uint64_t first = xorshift64(&x) % (cfg->num - m + 1);
	void *h = e->open(&oa);
	scan_state s = {.engine = e->name, .what = "scanrange", .n = m};
	verify_state v = {.engine = e->name,
	                  .what = "scanrange check",
	                  .n = first + m,
	                  .next = first,
	                  .any_round = true};
	char *start = peers_xmalloc("key", g_key_size);
	uint64_t t0, t1;
	peers_result r;

	warm_pass(e, h, cfg->num, "scanrange warm pass");
	s.key = peers_xmalloc("key", g_key_size);
	make_key(first, s.key);
	make_key(first, start);
	if (g_drop_path != NULL)
		drop_caches();
	t0 = now_ns();
	if (g_hooks != NULL && g_hooks->start != NULL)
		g_hooks->start(g_hooks->arg, 0, t0);
	e->range(h, start, g_key_size, m, scan_cb, &s);
	scan_report_rest(&s);
	t1 = now_ns();
	if (g_hooks != NULL && g_hooks->end != NULL)
		g_hooks->end(g_hooks->arg, 0, t1);
	if (s.count != m)
		peers_mismatch(e->name, "scanrange",
		               "found %" PRIu64 " keys from key %.*s, expected %" PRIu64, s.count,
		               (int)g_key_size, start, m);
	v.key = peers_xmalloc("key", g_key_size);
	v.tmp = peers_xmalloc("value", g_value_size);
	e->range(h, start, g_key_size, m, verify_cb, &v);
	if (v.found != m || v.fold != s.fold)
		peers_mismatch(e->name, "scanrange",
		               "the check found %" PRIu64 " keys from key %.*s%s", v.found,
		               (int)g_key_size, start,
		               v.fold != s.fold ? ", values other than the timed pass's" : "");
	e->close(h);
	free(v.key);
	free(v.tmp);
	free(s.key);
	free(start);
	r = (peers_result){
	    .engine = e->name,
	    .workload = "scanrange",
	    .mode = "processes",
	    .procs = 1,
	    .ops = m,
	    .start_ns = t0,
	    .end_ns = t1,
	    .ns = t1 - t0,
	    .cold = g_drop_path != NULL,
	};
	deliver(cfg, &r);
}

/*
 * After writerandom: each key of the client's last (up to) TAIL_CHECK puts
 * holds exactly the value of its last put (the stream replayed), read by a
 * get. Puts lost, or left unapplied, show whatever the number of keys,
 * where verify_writes replays every key only up to REPLAY_MAX.
 */
static void verify_tail(const peers_engine *e, void *h, const client *c)
{
	uint64_t n = c->ops < TAIL_CHECK ? c->ops : TAIL_CHECK, from = c->ops - n;
	uint64_t *idx = peers_xmalloc("keys", (n ? n : 1) * sizeof(uint64_t));
	uint64_t x = reader_seed(c->id);
	char *key = peers_xmalloc("key", g_key_size);
	char *buf = peers_xmalloc("value", g_value_size);
	char *tmp = peers_xmalloc("value", g_value_size);

	for (uint64_t j = 0; j < c->ops; j++) {
		uint64_t i = xorshift64(&x) % c->num;

		if (j >= from)
			idx[j - from] = i;
	}
	for (uint64_t t = 0; t < n; t++) {
		uint64_t round = ((uint64_t)(c->id + 1) << ROUND_SHIFT) + from + t + 1;
		bool later = false; /* a later put of the key decides its value */
		size_t vlen = 0;

		for (uint64_t l = t + 1; l < n && !later; l++)
			later = idx[l] == idx[t];
		if (later)
			continue;
		make_key(idx[t], key);
		if (!e->get(h, key, g_key_size, buf, g_value_size, &vlen))
			peers_mismatch(e->name, "writerandom", "key %.*s not found",
			               (int)g_key_size, key);
		make_value(idx[t], round, tmp);
		if (vlen != g_value_size || memcmp(buf, tmp, vlen) != 0)
			peers_mismatch(e->name, "writerandom",
			               "key %.*s holds round %#" PRIx64
			               ", its last put wrote %#" PRIx64,
			               (int)g_key_size, key,
			               vlen == g_value_size ? value_round(buf) : 0, round);
	}
	free(idx);
	free(key);
	free(buf);
	free(tmp);
}

/*
 * writerandom on the loaded database: one client, in this process, after
 * its warm pass, putting random existing keys (writes, else num; or for
 * duration_ns), a new round's value each, batch puts per commit on an
 * engine with batches, asynchronous unless sync; afterwards, untimed, its
 * last puts read back exactly (verify_tail) and the database checked as
 * after updaterandom (verify_writes).
 */
static void wl_writerandom(const peers_config *cfg, const peers_engine *e, bool pristine)
{
	peers_open_args oa = {
	    .dir = g_subdir, .sync = cfg->sync, .nkeys = cfg->num, .cache_mb = cfg->cache_mb};
	uint64_t nops = cfg->writes ? cfg->writes : cfg->num;
	/* Untimed: the rounds earlier runs left, which the check afterwards needs. */
	uint64_t *before = pristine ? NULL : read_rounds(e, &oa, cfg->num, "writerandom");
	client c = client_new(e, &oa, PEERS_WRITERANDOM, cfg->duration_ns ? 0 : nops, true);
	peers_result r;

	c.num = cfg->num;
	c.duration_ns = cfg->duration_ns;
	c.drop = g_drop_path != NULL;
	if (e->batch_begin != NULL && cfg->batch > 1)
		c.batch = cfg->batch;
	c.h = e->open(&oa);
	client_run(&c);
	verify_tail(e, c.h, &c);
	verify_writes(e, c.h, cfg->num, "writerandom", &c, 1, before, pristine);
	e->close(c.h);
	merge_clients(&c, 1, PEERS_WRITERANDOM, "processes", &r);
	r.cold = c.drop;
	deliver(cfg, &r);
	client_free(&c);
	free(before);
}

/* txn_transfer's database, untimed: PEERS_TXN_ACCOUNTS accounts holding
 * PEERS_TXN_BALANCE each, put asynchronously (in batches of 1000 where the
 * engine has batches), checked. */
static void load_accounts(const peers_config *cfg, const peers_engine *e)
{
	peers_open_args oa = {
	    .dir = g_subdir, .sync = false, .nkeys = PEERS_TXN_ACCOUNTS, .cache_mb = cfg->cache_mb};
	char *key = peers_xmalloc("key", g_key_size);
	char val[BALANCE_DIGITS];
	size_t vlen = format_balance(PEERS_TXN_BALANCE, val);
	bool batches = e->batch_begin != NULL;
	void *h;

	reset_dir(cfg, e, g_subdir);
	h = e->open(&oa);
	for (uint64_t i = 0; i < PEERS_TXN_ACCOUNTS; i++) {
		if (batches && i % 1000 == 0)
			e->batch_begin(h);
		make_key(i, key);
		e->put(h, key, g_key_size, val, vlen);
		if (batches && (i % 1000 == 999 || i + 1 == PEERS_TXN_ACCOUNTS))
			e->batch_commit(h);
	}
	verify_accounts(e, h, "txn_transfer load");
	e->close(h);
	free(key);
}

/*
 * txn_transfer on the accounts: @procs clients, each running txn_ops
 * committed transfers (or for its duration), durable commits with @sync;
 * afterwards the balances must still add up (verify_accounts), and the
 * engine's own check runs.
 */
/* NOLINTNEXTLINE(bugprone-easily-swappable-parameters): the order is fixed */
static void wl_transfer(const peers_config *cfg, const peers_engine *e, int procs,
                        peers_client_mode cmode, bool sync)
{
	uint64_t duration = cfg->txn_duration_ns ? cfg->txn_duration_ns : cfg->duration_ns;
	uint64_t nops = duration ? 0 : (cfg->txn_ops ? cfg->txn_ops : PEERS_TXN_OPS);
	peers_open_args oa = {
	    .dir = g_subdir, .sync = sync, .nkeys = PEERS_TXN_ACCOUNTS, .cache_mb = cfg->cache_mb};
	client cl[MAX_CLIENTS];
	const char *mode;
	peers_result r;
	void *h;

	for (int i = 0; i < procs; i++) {
		cl[i] = client_new(e, &oa, PEERS_TXN_TRANSFER, nops, true);
		cl[i].id = i;
		cl[i].duration_ns = duration;
	}
	mode = run_clients(e, &oa, cl, procs, cmode, false);
	h = e->open(&oa);
	verify_accounts(e, h, "txn_transfer");
	check_engine(e, h, "txn_transfer");
	e->close(h);
	merge_clients(cl, procs, PEERS_TXN_TRANSFER, mode, &r);
	r.has_sync = true;
	r.sync = sync;
	deliver(cfg, &r);
	for (int i = 0; i < procs; i++)
		client_free(&cl[i]);
}

/* The run's variations, checked: a wrong one is the caller's bug. */
static void set_variations(const peers_config *cfg)
{
	g_key_size = cfg->key_size ? cfg->key_size : PEERS_KEY_SIZE;
	g_value_size = cfg->value_size ? cfg->value_size : PEERS_VALUE_SIZE;
	g_seed_mix = cfg->seed * PERM_SEED;
	g_hooks = cfg->hooks;
	g_drop_path = cfg->drop_caches;
	g_warm_sample = cfg->warm_sample;
	if (g_key_size < PEERS_MIN_KEY_SIZE || g_key_size > PEERS_MAX_KEY_SIZE ||
	    g_value_size < PEERS_MIN_VALUE_SIZE || g_value_size > PEERS_MAX_VALUE_SIZE)
		peers_fatal(NULL, "configuration", "key size %zu or value size %zu out of range",
		            g_key_size, g_value_size);
	if (cfg->nclient_modes < 0 || cfg->nclient_modes > PEERS_MAX_MODES)
		peers_fatal(NULL, "configuration", "%d client modes", cfg->nclient_modes);
	for (int i = 0; i < cfg->nclient_modes; i++)
		if (cfg->client_modes[i] != PEERS_CLIENTS_THREADS &&
		    cfg->client_modes[i] != PEERS_CLIENTS_PROCESSES)
			peers_fatal(NULL, "configuration", "client mode %d",
			            (int)cfg->client_modes[i]);
	for (int i = 0; i < cfg->nworkloads; i++) {
		uint64_t keys =
		    cfg->workloads[i] == PEERS_TXN_TRANSFER ? PEERS_TXN_ACCOUNTS : cfg->num;

		for (int j = 0; cfg->workloads[i] == PEERS_FILLSYNC && !cfg->sync_duration_ns &&
		                j < cfg->nsync_procs;
		     j++)
			keys = j == 0 || cfg->sync_ops * (uint64_t)cfg->sync_procs[j] > keys
			           ? cfg->sync_ops * (uint64_t)cfg->sync_procs[j]
			           : keys;
		if (keys > peers_max_keys(g_key_size))
			peers_fatal(NULL, "configuration",
			            "%zu-byte keys hold at most %" PRIu64
			            " keys, %s needs %" PRIu64,
			            g_key_size, peers_max_keys(g_key_size),
			            peers_workload_names[cfg->workloads[i]], keys);
	}
}

/* After fillsync's load, untimed: the engine's own write-back of it done
 * (walrus: its instance has exited, after its shutdown checkpoint), then
 * every dirty page of the kernel's written (LMDB's and SQLite's unsynced
 * writes), so that no engine's durable puts pay for the asynchronous load. */
static void settle(const peers_engine *e)
{
	if (e->idle != NULL && g_subdir[0])
		e->idle(g_subdir);
	sync();
}

void peers_run_engine(const peers_config *cfg, const peers_engine *e, const char *dir)
{
	/* Does g_subdir hold exactly a fillseq load of num keys? With its
	 * round-0 values still (known only for a load of this run)? */
	bool loaded = cfg->loaded, pristine = false;
	/* The ways its clients run: each mode asked for, or the engine's one way. */
	peers_client_mode modes[PEERS_MAX_MODES] = {PEERS_CLIENTS_THREADS};
	int nmodes = 1;
	/* readrandom's and scan's rows: plain (0) and/or through a snapshot (1) */
	int snap_to = cfg->snapshot && e->snapshot != NULL && !e->threads ? 1 : 0;
	int snap_from = snap_to == 1 && !cfg->snapshot_and_plain ? 1 : 0;
	/* txn_transfer's client counts and durabilities, else its defaults */
	const int default_txn_procs = PEERS_TXN_CLIENTS;
	const int *txn_procs = cfg->ntxn_procs > 0 ? cfg->txn_procs : &default_txn_procs;
	int ntxn = cfg->ntxn_procs > 0 ? cfg->ntxn_procs : 1;
	const bool *syncs = cfg->ntxn_sync > 0 ? cfg->txn_sync : &cfg->sync;
	int nsyncs = cfg->ntxn_sync > 0 ? cfg->ntxn_sync : 1;
	bool accounts = cfg->accounts; /* g_subdir holds txn_transfer's accounts */

	if (e->thread_handles && !e->threads && cfg->nclient_modes > 0) {
		nmodes = cfg->nclient_modes;
		memcpy(modes, cfg->client_modes, (size_t)nmodes * sizeof(modes[0]));
	}

	set_variations(cfg);
	g_engine_e = e;
	g_engine = e->name;
	if ((size_t)snprintf(g_subdir, sizeof(g_subdir), "%s", dir) >= sizeof(g_subdir))
		peers_fatal(e->name, "directory", "path too long: \"%s\"", dir);

	for (int i = 0; i < cfg->nworkloads; i++) {
		peers_workload w = cfg->workloads[i];

		switch (w) {
		case PEERS_FILLSEQ:
			loaded = pristine = wl_fill(cfg, e, PEERS_FILLSEQ, true);
			break;
		case PEERS_FILLRANDOM:
			wl_fill(cfg, e, PEERS_FILLRANDOM, true);
			loaded = false;
			break;
		case PEERS_FILLSYNC:
			if (cfg->sync_duration_ns != 0) {
				/* The upserts leave the load's keys: the next workload
				 * reuses it. */
				if (!loaded) {
					wl_fill(cfg, e, PEERS_FILLSEQ, false);
					settle(e);
					pristine = true;
				}
				loaded = true;
				for (int j = 0; j < cfg->nsync_procs; j++) {
					for (int m = 0; m < nmodes; m++) {
						wl_random(cfg, e, w, cfg->sync_procs[j], modes[m],
						          pristine, false);
						pristine = false;
					}
				}
				break;
			}
			for (int j = 0; j < cfg->nsync_procs; j++)
				for (int m = 0; m < nmodes; m++)
					wl_fillsync(cfg, e, cfg->sync_procs[j], modes[m]);
			loaded = false;
			break;
		case PEERS_READRANDOM:
		case PEERS_READWHILEWRITING:
		case PEERS_UPDATERANDOM:
			if (!loaded) {
				wl_fill(cfg, e, PEERS_FILLSEQ, false);
				pristine = true;
			}
			loaded = true;
			for (int j = 0; j < cfg->nread_procs; j++) {
				for (int m = 0; m < nmodes; m++) {
					bool rr = w == PEERS_READRANDOM;

					for (int v = rr ? snap_from : 0; v <= (rr ? snap_to : 0);
					     v++) {
						wl_random(cfg, e, w, cfg->read_procs[j], modes[m],
						          pristine, v == 1);
						pristine = pristine && rr;
					}
				}
			}
			break;
		case PEERS_SCAN:
			if (!loaded) {
				wl_fill(cfg, e, PEERS_FILLSEQ, false);
				pristine = true;
			}
			loaded = true;
			for (int v = snap_from; v <= snap_to; v++)
				wl_scan(cfg, e, v == 1);
			break;
		case PEERS_SCANRANGE:
		case PEERS_WRITERANDOM:
			if (!loaded) {
				wl_fill(cfg, e, PEERS_FILLSEQ, false);
				pristine = true;
			}
			loaded = true;
			if (w == PEERS_SCANRANGE) {
				wl_scanrange(cfg, e);
			} else {
				wl_writerandom(cfg, e, pristine);
				pristine = false;
			}
			break;
		case PEERS_TXN_TRANSFER:
			if (e->txn_new == NULL) {
				fprintf(cfg->json ? stderr : stdout,
				        "%s: %s: no transactions in this engine: txn_transfer "
				        "skipped\n",
				        g_prog, e->name);
				peers_flush(cfg->json ? stderr : stdout);
				break;
			}
			/* The same accounts serve every row: each leaves the sum as it
			 * found it. After a new load walrus-peers lets the engine
			 * settle, so that no durable commit pays for the asynchronous
			 * load (walrus bench cannot: its monitor keeps the instance up). */
			if (!accounts) {
				load_accounts(cfg, e);
				if (cfg->fresh_dirs)
					settle(e);
				accounts = true;
			}
			for (int d = 0; d < nsyncs; d++)
				for (int j = 0; j < ntxn; j++)
					for (int m = 0; m < nmodes; m++)
						wl_transfer(cfg, e, txn_procs[j], modes[m],
						            syncs[d]);
			loaded = pristine = false;
			break;
		case PEERS_WORKLOAD_COUNT:
			break;
		}
		/* Every other workload replaces the accounts, or loads over them. */
		if (w != PEERS_TXN_TRANSFER)
			accounts = false;
	}
	g_subdir[0] = '\0';
	g_engine = NULL;
	g_engine_e = NULL;
	g_hooks = NULL;
}

void peers_remove_dir(const peers_engine *e, const char *dir)
{
	int err;

	g_engine_e = e;
	g_engine = e->name;
	if ((size_t)snprintf(g_subdir, sizeof(g_subdir), "%s", dir) >= sizeof(g_subdir))
		peers_fatal(e->name, "directory", "path too long: \"%s\"", dir);
	if (e->idle != NULL)
		e->idle(dir);
	err = peers_rm_tree(dir);
	if (err != 0)
		peers_fatal(e->name, "remove", "\"%s\": %s", dir, strerror(err));
	g_subdir[0] = '\0';
	g_engine = NULL;
	g_engine_e = NULL;
}

/* ------------------------------------------------------------- sizes */

static uint64_t du_bytes; /* nftw's callback has no argument; callers are single-threaded */

static int du_cb(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)path;
	(void)ftw;
	if (type == FTW_F && S_ISREG(st->st_mode))
		du_bytes += (uint64_t)st->st_blocks * 512u;
	return 0;
}

/* Allocated bytes of the regular files under @dir (absent: 0). */
static uint64_t dir_bytes(const char *dir)
{
	du_bytes = 0;
	if (nftw(dir, du_cb, 16, FTW_PHYS) != 0 && errno != ENOENT)
		peers_fatal(g_engine, "nftw", "\"%s\": %s", dir, strerror(errno));
	return du_bytes;
}

void peers_disk_usage(const peers_engine *e, const char *dir, peers_sizes *out)
{
	char sub[PATH_MAX];

	*out = (peers_sizes){.total = dir_bytes(dir)};
	if (e->data_dir == NULL || e->wal_dir == NULL)
		return;
	out->data_dir = e->data_dir;
	out->wal_dir = e->wal_dir;
	if ((size_t)snprintf(sub, sizeof(sub), "%s/%s", dir, e->data_dir) >= sizeof(sub))
		peers_fatal(e->name, "directory", "path too long: \"%s\"", dir);
	out->data = dir_bytes(sub);
	if ((size_t)snprintf(sub, sizeof(sub), "%s/%s", dir, e->wal_dir) >= sizeof(sub))
		peers_fatal(e->name, "directory", "path too long: \"%s\"", dir);
	out->wal = dir_bytes(sub);
}

/* ---------------------------------------------------------------- setup */

int peers_workload_by_name(const char *name)
{
	for (int i = 0; i < PEERS_WORKLOAD_COUNT; i++)
		if (strcmp(peers_workload_names[i], name) == 0)
			return i;
	return -1;
}

void peers_init(const char *prog)
{
	g_prog = prog;
	if (sigaction(SIGPIPE, &(struct sigaction){.sa_handler = SIG_IGN}, NULL) != 0)
		sys_fail("sigaction(SIGPIPE)");
	if (g_stop == NULL) {
		void *p = mmap(NULL, sizeof(*g_stop), PROT_READ | PROT_WRITE,
		               MAP_SHARED | MAP_ANONYMOUS, -1, 0);

		if (p == MAP_FAILED)
			sys_fail("mmap");
		g_stop = p;
	}
	init_printable();
	self_check();
}

void peers_set_scratch(const char *base, bool created, bool keep)
{
	g_keep = keep;
	g_base_created = false;
	g_base[0] = '\0';
	if (base == NULL)
		return;
	if ((size_t)snprintf(g_base, sizeof(g_base), "%s", base) >= sizeof(g_base))
		peers_fatal(NULL, "directory", "path too long: \"%s\"", base);
	g_base_created = created;
}
