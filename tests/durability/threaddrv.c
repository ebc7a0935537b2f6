/*
 * threaddrv.c - the threaded client of the durability suites: N threads of
 * one process, each with a handle of its own on the same data directory
 * (include/walrus.h, "Threads"), each one client of crashdrv.c's kind on a
 * key space of its own, telling on stdout what it is about to commit and
 * what was acknowledged, so that a test that kills the process (or another
 * process of the instance) can check the state recovered per thread.
 *
 *   threaddrv -D DIR [-o name=value ...] --threads N --client NAME
 *             [--keyspace SPACE] [--modes M,M,...] [--seed S] [--keys K]
 *             [--large PERCENT] [--max-restarts R]
 *
 * Thread I (0..N-1) is client NAME.tI on key space SPACE.tI (SPACE defaults
 * to NAME): keys SPACE.tI/kNNNN, K of them (default 200).  Its mode is the
 * I-th of --modes (repeated cyclically; default sync,batch,async):
 *   sync   one put or delete per commit, WALRUS_SYNC or 0 (the handle's
 *          synchronous_commit, on by default: do not pass it off)
 *   batch  atomic batches of 2..16 distinct keys (puts and a few deletes),
 *          WALRUS_SYNC or 0
 *   async  batches of 1..16, WALRUS_ASYNC; every 8th is followed by
 *          walrus_sync, which acknowledges it and all before it
 * Values as crashdrv's: "NAME.tI:SEQ:KEYINDEX:" then LEN copies of
 * 'a' + SEQ % 26; PERCENT of the puts (default 5) are 3..20 kB.
 *
 * Each thread keeps the state its own commits made (starting from a scan of
 * its key space after its first open) and checks it against gets, single
 * deletes (WALRUS_ENOTFOUND iff absent) and forward and backward iterator
 * scans of its key space made between its commits: nobody else writes there,
 * so any difference is an error.
 *
 * When a call returns WALRUS_ERESTART (the instance crashed and restarted:
 * another process of it died) or WALRUS_EPANIC (the call hit the PANIC that
 * a backend raises when the crashed instance refuses its WAL write; the
 * instance restarts), the thread closes its handle, opens again (up to R
 * times in a row, default 50, on those two errors or WALRUS_ESHUTDOWN),
 * scans its key space and finds which of its commits
 * since the last acknowledged one the recovered state is the state after;
 * none is an error (an acknowledged commit lost, or part of a batch).  The
 * commits after that one never happened; it goes on from there.
 *
 * Output: one line per event, each written whole by one write(2) (a line
 * is far below PIPE_BUF), B before the call, the others right after it:
 *   B NAME SEQ OP OP ...   OP = P:KEYINDEX:LEN or D:KEYINDEX
 *   A NAME SEQ             sync modes: durable, acknowledged
 *   R NAME SEQ             async: returned, not yet durable
 *   S NAME SEQ             async: walrus_sync returned: SEQ and all before it durable
 *   O NAME N               opened (N-th time); after the first, the state was
 *                          checked (K line)
 *   X NAME SEQ CODE MSG    WALRUS_ERESTART or WALRUS_EPANIC (or a failed
 *                          reopen) seen; SEQ is the commit in flight (0: none)
 *   K NAME SEQ             after a restart: the recovered state is the state
 *                          after commit SEQ (0: the state found at the first
 *                          open); later commits never happened
 *   E NAME SEQ CODE MSG    an error; the process exits with status 3
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "walrus.h"

#define MAX_THREADS 64
#define MAX_BATCH   16
#define VAL_MAX     (64 + 20480)

typedef struct kval {
	char *v; /* NULL: absent */
	size_t len;
} kval;

/* One commit since the last acknowledged one: what its keys held before. */
typedef struct undo_rec {
	unsigned long long seq;
	int n;
	unsigned key[MAX_BATCH];
	kval old[MAX_BATCH];
} undo_rec;

typedef struct op {
	char kind; /* 'P' or 'D' */
	unsigned key;
	unsigned len;
} op;

typedef struct client {
	int idx;
	char name[96];
	char space[96];
	const char *mode;
	bool sync;
	int minb, maxb;
	uint64_t rng;
	walrus *db;
	kval *model;   /* the state after every commit that returned (and the one in flight) */
	kval *obs;     /* scratch: what a scan found */
	undo_rec *log; /* commits since the last acknowledged one, in order */
	int nlog, caplog;
	unsigned long long seq;
	unsigned long long acked; /* seq of the last acknowledged commit (or K) */
	unsigned opens;
	unsigned char *used;
	char *val;
	walrus_batch *batch;
} client;

static const char *dir;
static walrus_opts *opts;
static unsigned nkeys = 200, large = 5, max_restarts = 50;

/* ---------------------------------------------------------------- output */

static void write_all(const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(STDOUT_FILENO, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			_exit(4); /* the reader is gone */
		buf += n;
		len -= (size_t)n;
	}
}

/* One line, one write(2): lines of different threads never interleave. */
__attribute__((format(printf, 1, 2))) static void emit(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	for (int i = 0; i < n; i++)
		if (buf[i] == '\n' || buf[i] == '\r')
			buf[i] = ' ';
	buf[n++] = '\n';
	write_all(buf, (size_t)n);
}

static _Noreturn void fail(client *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static _Noreturn void fail(client *c, int code, const char *fmt, ...)
{
	char msg[700];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	emit("E %s %llu %d %s", c->name, c->seq, code, msg);
	/* Not exit(): its hook would wait for the other threads' calls. */
	_exit(3);
}

/* ---------------------------------------------------------------- helpers */

static uint64_t rnd(client *c)
{
	/* splitmix64 */
	uint64_t z = (c->rng += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static unsigned below(client *c, unsigned n)
{
	return (unsigned)(rnd(c) % n);
}

static int key_of(const client *c, unsigned k, char *buf, size_t cap)
{
	return snprintf(buf, cap, "%s/k%04u", c->space, k);
}

static size_t make_value(char *buf, const char *name, unsigned long long seq, unsigned key,
                         unsigned len)
{
	int n = snprintf(buf, 128, "%s:%llu:%u:", name, seq, key);
	memset(buf + n, 'a' + (int)(seq % 26), len);
	return (size_t)n + len;
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n == 0 ? 1 : n);
	if (p == NULL) {
		emit("E ? 0 %d out of memory", WALRUS_ENOMEM);
		_exit(3);
	}
	return p;
}

static bool same(const kval *a, const kval *b)
{
	if ((a->v == NULL) != (b->v == NULL))
		return false;
	return a->v == NULL || (a->len == b->len && memcmp(a->v, b->v, a->len) == 0);
}

/* A value for messages: its first bytes, or <absent>. */
static const char *show(const kval *a, char *buf, size_t cap)
{
	if (a->v == NULL)
		return "<absent>";
	size_t n = a->len < 40 ? a->len : 40;
	snprintf(buf, cap, "'%.*s'(%zu bytes)", (int)n, a->v, a->len);
	return buf;
}

static void clear_log(client *c)
{
	for (int i = 0; i < c->nlog; i++)
		for (int j = 0; j < c->log[i].n; j++)
			free(c->log[i].old[j].v);
	c->nlog = 0;
}

static void set_acked(client *c, unsigned long long seq)
{
	c->acked = seq;
	clear_log(c);
}

/* ---------------------------------------------------------------- reading back */

/* Parses "SPACE/kNNNN" of this client; returns the index or -1. */
static long parse_key(const client *c, const char *k, size_t klen)
{
	size_t sl = strlen(c->space);
	if (klen < sl + 3 || memcmp(k, c->space, sl) != 0 || k[sl] != '/' || k[sl + 1] != 'k')
		return -1;
	unsigned long idx = 0;
	for (size_t i = sl + 2; i < klen; i++) {
		if (k[i] < '0' || k[i] > '9' || idx > 1000000)
			return -1;
		idx = idx * 10 + (unsigned long)(k[i] - '0');
	}
	char canon[128];
	int n = key_of(c, (unsigned)idx, canon, sizeof(canon));
	if (idx >= nkeys || (size_t)n != klen || memcmp(canon, k, klen) != 0)
		return -1;
	return (long)idx;
}

/*
 * Scans the key space into c->obs (forward, or backward with seek_last and
 * prev).  Returns a walrus code; a key out of the key space, out of order
 * or twice is an error of the driver's check (fail()).
 */
static int scan_space(client *c, bool backward)
{
	for (unsigned i = 0; i < nkeys; i++) {
		free(c->obs[i].v);
		c->obs[i] = (kval){NULL, 0};
	}
	char lo[128], hi[128];
	int lol = snprintf(lo, sizeof(lo), "%s/", c->space);
	int hil = snprintf(hi, sizeof(hi), "%s0", c->space); /* '0' follows '/' */
	walrus_iter *it = NULL;
	int rc = walrus_iter_open(c->db, lo, (size_t)lol, hi, (size_t)hil, &it);
	if (rc == WALRUS_OK && backward)
		rc = walrus_iter_seek_last(it);
	long prev = backward ? (long)nkeys : -1;
	while (rc == WALRUS_OK && walrus_iter_valid(it)) {
		const void *k, *v;
		size_t kl, vl;
		walrus_iter_key(it, &k, &kl);
		walrus_iter_value(it, &v, &vl);
		long idx = parse_key(c, k, kl);
		if (idx < 0 || (backward ? idx >= prev : idx <= prev)) {
			walrus_iter_close(it);
			fail(c, WALRUS_EINTERNAL,
			     "%s scan of [%s, %s) returned key '%.*s' after k%04ld",
			     backward ? "backward" : "forward", lo, hi, (int)(kl < 80 ? kl : 80),
			     (const char *)k, prev);
		}
		prev = idx;
		c->obs[idx].v = xmalloc(vl);
		memcpy(c->obs[idx].v, v, vl);
		c->obs[idx].len = vl;
		rc = backward ? walrus_iter_prev(it) : walrus_iter_next(it);
	}
	walrus_iter_close(it);
	return rc;
}

/* The first key where c->obs and c->model differ, or -1. */
static long first_difference(const client *c)
{
	for (unsigned i = 0; i < nkeys; i++)
		if (!same(&c->obs[i], &c->model[i]))
			return (long)i;
	return -1;
}

static void fail_difference(client *c, long k, const char *what)
{
	char a[96], b[96];
	fail(c, WALRUS_EINTERNAL, "%s: %s/k%04ld holds %s, my writes say %s", what, c->space, k,
	     show(&c->obs[k], a, sizeof(a)), show(&c->model[k], b, sizeof(b)));
}

/* ---------------------------------------------------------------- restart */

/* The instance restarts: the handle is dead, open again (include/walrus.h). */
static bool restartable(int rc)
{
	return rc == WALRUS_ERESTART || rc == WALRUS_EPANIC;
}

static int open_handle(client *c)
{
	int rc = WALRUS_OK;
	for (unsigned attempt = 0;; attempt++) {
		rc = walrus_open(dir, opts, &c->db);
		if (rc == WALRUS_OK)
			break;
		c->db = NULL;
		if (!restartable(rc) && rc != WALRUS_ESHUTDOWN)
			return rc;
		if (attempt + 1 >= max_restarts)
			return rc;
		emit("X %s 0 %d open: %s", c->name, rc, walrus_errmsg());
		struct timespec ts = {0, 20 * 1000000L}; /* a back-off, as attach's own */
		nanosleep(&ts, NULL);
	}
	c->opens++;
	return rc;
}

/*
 * (Re)opens the handle and learns the state of the key space: at the first
 * open it is the starting state; after a restart it must be the state after
 * one of the commits since the last acknowledged one (the log is undone
 * from the end until it matches).
 */
static void reopen(client *c, bool first, unsigned long long inflight, int why)
{
	for (unsigned attempt = 0;; attempt++) {
		if (attempt >= max_restarts)
			fail(c, why, "gave up after %u restarts in a row", attempt);
		if (c->db != NULL) {
			(void)walrus_close(c->db);
			c->db = NULL;
		}
		int rc = open_handle(c);
		if (rc != WALRUS_OK)
			fail(c, rc, "open: %s", walrus_errmsg());
		rc = scan_space(c, false);
		if (restartable(rc)) {
			emit("X %s %llu %d scan after open: %s", c->name, inflight, rc,
			     walrus_errmsg());
			why = rc;
			continue;
		}
		if (rc != WALRUS_OK)
			fail(c, rc, "scan after open: %s", walrus_errmsg());
		break;
	}
	if (first) {
		for (unsigned i = 0; i < nkeys; i++) {
			c->model[i] = c->obs[i];
			c->obs[i] = (kval){NULL, 0};
		}
		emit("O %s %u", c->name, c->opens);
		return;
	}
	long k;
	while ((k = first_difference(c)) >= 0 && c->nlog > 0) {
		undo_rec *u = &c->log[--c->nlog];
		for (int j = u->n - 1; j >= 0; j--) {
			free(c->model[u->key[j]].v);
			c->model[u->key[j]] = u->old[j];
		}
	}
	if (k >= 0) {
		char a[96], b[96];
		fail(c, WALRUS_EINTERNAL,
		     "after the restart %s/k%04ld holds %s, but the state after my last "
		     "acknowledged commit %llu (or any later one) says %s",
		     c->space, k, show(&c->obs[k], a, sizeof(a)), c->acked,
		     show(&c->model[k], b, sizeof(b)));
	}
	unsigned long long at = c->nlog > 0 ? c->log[c->nlog - 1].seq : c->acked;
	set_acked(c, at);
	emit("O %s %u", c->name, c->opens);
	emit("K %s %llu", c->name, at);
}

/* Handles a failed call: a restart reopens, anything else is fatal. */
static void after_error(client *c, int rc, unsigned long long inflight, const char *what)
{
	if (!restartable(rc))
		fail(c, rc, "%s: %s", what, walrus_errmsg());
	emit("X %s %llu %d %s: %s", c->name, inflight, rc, what, walrus_errmsg());
	reopen(c, false, inflight, rc);
}

/* ---------------------------------------------------------------- the work */

static int check_get(client *c)
{
	unsigned k = below(c, nkeys);
	char key[128];
	int kl = key_of(c, k, key, sizeof(key));
	kval got = {NULL, 0};
	int rc;
	if (below(c, 2) == 0) {
		void *v = NULL;
		size_t vl = 0;
		rc = walrus_get(c->db, key, (size_t)kl, &v, &vl);
		if (rc == WALRUS_OK) {
			got.v = xmalloc(vl);
			memcpy(got.v, v, vl);
			got.len = vl;
			walrus_free(v);
		}
	} else {
		size_t vl = 0;
		rc = walrus_get_into(c->db, key, (size_t)kl, c->val, VAL_MAX, &vl);
		if (rc == WALRUS_OK) {
			got.v = xmalloc(vl);
			memcpy(got.v, c->val, vl);
			got.len = vl;
		}
	}
	if (rc == WALRUS_ENOTFOUND)
		rc = WALRUS_OK;
	if (rc != WALRUS_OK)
		return rc;
	free(c->obs[k].v);
	c->obs[k] = got;
	if (!same(&got, &c->model[k]))
		fail_difference(c, (long)k, "get");
	return WALRUS_OK;
}

static int check_scan(client *c)
{
	bool backward = below(c, 2) == 0;
	int rc = scan_space(c, backward);
	if (rc != WALRUS_OK)
		return rc;
	long k = first_difference(c);
	if (k >= 0)
		fail_difference(c, k, backward ? "backward scan" : "forward scan");
	return WALRUS_OK;
}

/* One commit: B line, model and undo record updated, the call, A/R line. */
static void commit_one(client *c)
{
	unsigned long long seq = ++c->seq;
	int n = c->minb + (int)below(c, (unsigned)(c->maxb - c->minb + 1));
	op ops[MAX_BATCH];
	char line[MAX_BATCH * 32 + 200];
	int len = snprintf(line, sizeof(line), "B %s %llu", c->name, seq);
	for (int i = 0; i < n; i++) {
		unsigned k;
		do
			k = below(c, nkeys);
		while (c->used[k]);
		c->used[k] = 1;
		ops[i].key = k;
		ops[i].kind = below(c, 100) < 15 ? 'D' : 'P';
		ops[i].len = below(c, 100) < large ? 3000 + below(c, 17000) : 1 + below(c, 200);
		if (ops[i].kind == 'P')
			len += snprintf(line + len, sizeof(line) - (size_t)len, " P:%u:%u", k,
			                ops[i].len);
		else
			len += snprintf(line + len, sizeof(line) - (size_t)len, " D:%u", k);
	}
	for (int i = 0; i < n; i++)
		c->used[ops[i].key] = 0;
	int flags = c->sync ? (below(c, 2) == 0 ? WALRUS_SYNC : 0) : WALRUS_ASYNC;

	/* The model: this commit applied, what it replaced kept to undo it. */
	if (c->nlog == c->caplog) {
		c->caplog = c->caplog ? 2 * c->caplog : 16;
		undo_rec *nl = realloc(c->log, (size_t)c->caplog * sizeof(*nl));
		if (nl == NULL)
			fail(c, WALRUS_ENOMEM, "out of memory");
		c->log = nl;
	}
	undo_rec *u = &c->log[c->nlog++];
	u->seq = seq;
	u->n = n;
	bool was_present = c->model[ops[0].key].v != NULL;
	for (int i = 0; i < n; i++) {
		u->key[i] = ops[i].key;
		u->old[i] = c->model[ops[i].key];
		kval nv = {NULL, 0};
		if (ops[i].kind == 'P') {
			size_t vl = make_value(c->val, c->name, seq, ops[i].key, ops[i].len);
			nv.v = xmalloc(vl);
			memcpy(nv.v, c->val, vl);
			nv.len = vl;
		}
		c->model[ops[i].key] = nv;
	}
	emit("%s", line);

	int rc = WALRUS_OK;
	const char *what = "walrus_batch_commit";
	char key[128];
	if (n == 1 && c->sync) {
		/* the single-write calls, not a batch */
		int kl = key_of(c, ops[0].key, key, sizeof(key));
		if (ops[0].kind == 'P') {
			what = "walrus_put";
			const kval *v = &c->model[ops[0].key];
			rc = walrus_put(c->db, key, (size_t)kl, v->v, v->len, flags);
		} else {
			what = "walrus_delete";
			rc = walrus_delete(c->db, key, (size_t)kl, flags);
			if ((rc == WALRUS_ENOTFOUND && was_present) ||
			    (rc == WALRUS_OK && !was_present))
				fail(c, rc, "walrus_delete of %s: %s, but my writes say it was %s",
				     key, rc == WALRUS_OK ? "deleted" : "not found",
				     was_present ? "present" : "absent");
			if (rc == WALRUS_ENOTFOUND)
				rc = WALRUS_OK;
		}
	} else {
		walrus_batch_clear(c->batch);
		for (int i = 0; i < n && rc == WALRUS_OK; i++) {
			int kl = key_of(c, ops[i].key, key, sizeof(key));
			const kval *v = &c->model[ops[i].key];
			if (ops[i].kind == 'P')
				rc = walrus_batch_put(c->batch, key, (size_t)kl, v->v, v->len);
			else
				rc = walrus_batch_delete(c->batch, key, (size_t)kl);
		}
		if (rc != WALRUS_OK)
			fail(c, rc, "building a batch: %s", walrus_errmsg());
		rc = walrus_batch_commit(c->db, c->batch, flags);
	}
	if (rc != WALRUS_OK) {
		after_error(c, rc, seq, what);
		return;
	}
	emit("%c %s %llu", c->sync ? 'A' : 'R', c->name, seq);
	if (c->sync) {
		set_acked(c, seq);
	} else if (seq % 8 == 0) {
		rc = walrus_sync(c->db);
		if (rc != WALRUS_OK) {
			after_error(c, rc, 0, "walrus_sync");
			return;
		}
		emit("S %s %llu", c->name, seq);
		set_acked(c, seq);
	}
}

static void *run(void *arg)
{
	client *c = arg;
	reopen(c, true, 0, WALRUS_OK);
	for (;;) {
		commit_one(c);
		unsigned r = below(c, 100);
		int rc = WALRUS_OK;
		const char *what = NULL;
		if (r < 25) {
			what = "get";
			rc = check_get(c);
		} else if (r < 31) {
			what = "scan";
			rc = check_scan(c);
		}
		if (rc != WALRUS_OK)
			after_error(c, rc, 0, what);
	}
	return NULL;
}

/* ---------------------------------------------------------------- main */

static _Noreturn void usage(void)
{
	fprintf(stderr, "usage: threaddrv -D DIR [-o name=value ...] --threads N --client NAME "
	                "[--keyspace SPACE] [--modes M,M,...] [--seed S] [--keys K] "
	                "[--large PCT] [--max-restarts R]\n");
	exit(2);
}

static bool mode_params(const char *m, bool *sync, int *minb, int *maxb)
{
	if (strcmp(m, "sync") == 0)
		*sync = true, *minb = 1, *maxb = 1;
	else if (strcmp(m, "batch") == 0)
		*sync = true, *minb = 2, *maxb = MAX_BATCH;
	else if (strcmp(m, "async") == 0)
		*sync = false, *minb = 1, *maxb = MAX_BATCH;
	else
		return false;
	return true;
}

int main(int argc, char **argv)
{
	const char *name = NULL, *space = NULL;
	char modes_buf[512] = "sync,batch,async";
	unsigned nthreads = 0;
	unsigned long long seed = 1;
	opts = walrus_opts_new();
	if (opts == NULL)
		return 3;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (i + 1 >= argc)
			usage();
		const char *v = argv[++i];
		if (strcmp(a, "-D") == 0) {
			dir = v;
		} else if (strcmp(a, "-o") == 0) {
			const char *eq = strchr(v, '=');
			if (eq == NULL)
				usage();
			char key[128];
			snprintf(key, sizeof(key), "%.*s", (int)(eq - v), v);
			if (walrus_opts_set(opts, key, eq + 1) != WALRUS_OK) {
				fprintf(stderr, "threaddrv: -o %s: %s\n", v, walrus_errmsg());
				return 2;
			}
		} else if (strcmp(a, "--threads") == 0) {
			nthreads = (unsigned)strtoul(v, NULL, 10);
		} else if (strcmp(a, "--client") == 0) {
			name = v;
		} else if (strcmp(a, "--keyspace") == 0) {
			space = v;
		} else if (strcmp(a, "--modes") == 0) {
			snprintf(modes_buf, sizeof(modes_buf), "%s", v);
		} else if (strcmp(a, "--seed") == 0) {
			seed = strtoull(v, NULL, 10);
		} else if (strcmp(a, "--keys") == 0) {
			nkeys = (unsigned)strtoul(v, NULL, 10);
		} else if (strcmp(a, "--large") == 0) {
			large = (unsigned)strtoul(v, NULL, 10);
		} else if (strcmp(a, "--max-restarts") == 0) {
			max_restarts = (unsigned)strtoul(v, NULL, 10);
		} else {
			usage();
		}
	}
	if (dir == NULL || name == NULL || nthreads < 1 || nthreads > MAX_THREADS ||
	    nkeys < MAX_BATCH || nkeys > 100000 || max_restarts < 1)
		usage();
	if (space == NULL)
		space = name;
	const char *modes[MAX_THREADS];
	unsigned nmodes = 0;
	char *save = NULL;
	for (char *m = strtok_r(modes_buf, ",", &save); m != NULL && nmodes < MAX_THREADS;
	     m = strtok_r(NULL, ",", &save))
		modes[nmodes++] = m;
	if (nmodes == 0)
		usage();

	static client clients[MAX_THREADS];
	pthread_t tids[MAX_THREADS];
	for (unsigned i = 0; i < nthreads; i++) {
		client *c = &clients[i];
		c->idx = (int)i;
		snprintf(c->name, sizeof(c->name), "%s.t%u", name, i);
		snprintf(c->space, sizeof(c->space), "%s.t%u", space, i);
		c->mode = modes[i % nmodes];
		if (!mode_params(c->mode, &c->sync, &c->minb, &c->maxb))
			usage();
		c->rng = seed ^ (0x9e3779b97f4a7c15ull * (i + 1));
		c->model = calloc(nkeys, sizeof(kval));
		c->obs = calloc(nkeys, sizeof(kval));
		c->used = calloc(nkeys, 1);
		c->val = malloc(VAL_MAX);
		c->batch = walrus_batch_new();
		if (c->model == NULL || c->obs == NULL || c->used == NULL || c->val == NULL ||
		    c->batch == NULL)
			return 3;
	}
	for (unsigned i = 0; i < nthreads; i++) {
		int err = pthread_create(&tids[i], NULL, run, &clients[i]);
		if (err != 0) {
			emit("E %s 0 %d pthread_create: %s", clients[i].name, WALRUS_ENOMEM,
			     strerror(err));
			_exit(3);
		}
	}
	/* The threads run until the process is killed or one of them fails. */
	for (unsigned i = 0; i < nthreads; i++)
		pthread_join(tids[i], NULL);
	return 0;
}
