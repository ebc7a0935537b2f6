/*
 * histdrv.c - the client of the transaction history tests (tests/txn): runs
 * list-append transactions through include/walrus.h and writes their
 * history, one line per event, for elle.py to check (Jepsen's Elle,
 * list-append workload).
 *
 *   histdrv -D DIR [-o name=value ...] --client NAME --id P --prefix PFX
 *           [--threads N] [--keys K] [--txns T] [--max-ops M] [--seed S]
 *           [--isolation serializable|snapshot|none] [--durability sync|async]
 *           [--until-eof] [--max-restarts R]
 *   histdrv -D DIR [-o name=value ...] --final --prefix PFX [--keys K] [--seq N]
 *
 * Keys are PFX/kNN (K of them, default 10); each holds a list of integers,
 * stored as their decimal forms joined by commas ("" or absent: the empty
 * list).  Thread I is client NAME.tI with a handle of its own; each of its
 * transactions is 1..M (default 4) micro-ops on random keys, each one
 *   append(k, e)   e an integer no other append of the run uses:
 *                  (P * 100 + I) * 1000000 + a counter (P: --id, 0..9999)
 *   read(k)        the whole list
 * With --isolation serializable (the default) or snapshot a transaction is a
 * walrus_txn (flags 0 or WALRUS_TXN_SNAPSHOT): a read is walrus_txn_get, an
 * append a walrus_txn_get and a walrus_txn_put of the list with e added, and
 * the commit walrus_txn_commit(WALRUS_SYNC, or WALRUS_ASYNC with
 * --durability async).  WALRUS_ECONFLICT: the attempt is recorded as
 * aborted and the transaction runs again as a new attempt with new elements
 * (up to 1000 times in a row: more is an error, a livelock).
 * --isolation none runs the same operations without a transaction: reads
 * with walrus_get, appends with walrus_get then walrus_put, so that appends
 * get lost and transactions interleave: what the checker must find (its
 * writes happen before the I line: not for runs with crashes).
 *
 * Each thread stops after T committed transactions (--txns; 0 = no limit)
 * or, with --until-eof, once stdin reaches end of file (at the end of the
 * transaction in hand).  When a call returns WALRUS_ERESTART, WALRUS_EPANIC
 * or WALRUS_ESHUTDOWN (the instance crashed and restarts), the thread
 * closes its handle and opens again (up to R times in a row, default 50).
 *
 * --final: one serializable transaction that reads every key, written as
 * transaction N (--seq, default 1) of client "final": the checker takes the
 * final reads for the last word on what the store holds.
 *
 * Output, one line per event, each written whole (one write(2) under the
 * process's lock; a line may exceed PIPE_BUF, so each process needs a
 * stream of its own):
 *   I NAME SEQ OP OP ...   an attempt, its reads done, written before its
 *                          commit is called: OP = a:KEY:ELEM or
 *                          r:KEY:E1,E2,...  (r:KEY: for an empty list)
 *   C NAME SEQ             committed (WALRUS_SYNC: durable)
 *   A NAME SEQ             aborted: WALRUS_ECONFLICT, nothing applied
 *   U NAME SEQ CODE MSG    the commit met a crash: outcome unknown
 *   O NAME N               handle opened, the N-th time
 *   X NAME CODE MSG        a crash restart seen before any commit was
 *                          called (the attempt never was: no I line)
 *   D NAME COMMITS         the thread is done
 *   E NAME SEQ CODE MSG    an error: the process exits with status 3
 * An I line with no C, A or U after it (the process was killed) is an
 * unknown outcome as well.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "drvutil.h"
#include "walrus.h"

#define MAX_THREADS  64
#define MAX_OPS      16 /* micro-ops of a transaction */
#define MAX_KEYS     100
#define MAX_CONFLICT 1000

enum isolation { ISO_SERIALIZABLE, ISO_SNAPSHOT, ISO_NONE };

typedef struct micro {
	bool append;
	unsigned key;
	unsigned long long elem; /* append */
	char *read;              /* read: the list as read (malloc'd, NUL-terminated) */
} micro;

typedef struct client {
	char name[96];
	unsigned idx;
	uint64_t rng;
	walrus *db;
	unsigned opens;
	unsigned long long seq;     /* attempts made */
	unsigned long long commits; /* attempts committed */
	unsigned long long next_elem;
	micro ops[MAX_KEYS]; /* MAX_OPS, or every key for --final */
	int nops;
} client;

static const char *dir, *prefix;
static walrus_opts *opts;
static unsigned nkeys = 10, max_ops = 4, max_restarts = 50, proc_id;
static unsigned long long txns_per_thread;
static enum isolation iso = ISO_SERIALIZABLE;
static int durability = WALRUS_SYNC;
static atomic_bool stop_now;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---------------------------------------------------------------- output */

/* A growing line. */
typedef struct line {
	char *p;
	size_t n, cap;
} line;

static _Noreturn void die_oom(void)
{
	static const char msg[] = "E ? 0 -11 out of memory\n";
	ssize_t w = write(STDOUT_FILENO, msg, sizeof(msg) - 1);
	(void)w;
	_exit(3);
}

__attribute__((format(printf, 2, 3))) static void add(line *l, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(l->p + l->n, l->cap - l->n, fmt, ap);
		va_end(ap);
		if (n < 0)
			die_oom();
		if ((size_t)n < l->cap - l->n) {
			l->n += (size_t)n;
			return;
		}
		size_t cap = l->cap ? l->cap : 256;
		while (cap - l->n <= (size_t)n)
			cap *= 2;
		char *p = realloc(l->p, cap);
		if (p == NULL)
			die_oom();
		l->p = p;
		l->cap = cap;
	}
}

/* Writes @l as one line (newlines inside become spaces), whole. */
static void put_line(line *l)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->p[i] == '\n' || l->p[i] == '\r')
			l->p[i] = ' ';
	add(l, "\n");
	if (pthread_mutex_lock(&out_lock) != 0)
		_exit(3);
	const char *b = l->p;
	size_t len = l->n;
	while (len > 0) {
		ssize_t n = write(STDOUT_FILENO, b, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			_exit(4); /* the reader is gone */
		b += n;
		len -= (size_t)n;
	}
	if (pthread_mutex_unlock(&out_lock) != 0)
		_exit(3);
	l->n = 0;
}

__attribute__((format(printf, 1, 2))) static void emit(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0)
		_exit(3);
	line l = {0};
	add(&l, "%s", buf);
	put_line(&l);
	free(l.p);
}

static _Noreturn void fail(const client *c, int code, const char *what)
{
	emit("E %s %llu %d %s: %s", c->name, c->seq, code, what, walrus_errmsg());
	/* Not exit(): its hook would wait for the other threads' calls. */
	_exit(3);
}

/* ---------------------------------------------------------------- helpers */

static uint64_t rnd(client *c)
{
	return drv_rnd(&c->rng);
}

static unsigned below(client *c, unsigned n)
{
	return (unsigned)(rnd(c) % n);
}

static int key_of(unsigned k, char *buf, size_t cap)
{
	return snprintf(buf, cap, "%s/k%02u", prefix, k);
}

/* The instance crashed and restarts: the handle is dead, open again. */
static bool restartable(int rc)
{
	return rc == WALRUS_ERESTART || rc == WALRUS_EPANIC || rc == WALRUS_ESHUTDOWN;
}

static void reopen(client *c)
{
	if (c->db != NULL) {
		(void)walrus_close(c->db); /* a dead handle: its error says nothing new */
		c->db = NULL;
	}
	for (unsigned attempt = 0;; attempt++) {
		int rc = walrus_open(dir, opts, &c->db);
		if (rc == WALRUS_OK)
			break;
		c->db = NULL;
		if (!restartable(rc) || attempt + 1 >= max_restarts)
			fail(c, rc, "open");
		emit("X %s %d open: %s", c->name, rc, walrus_errmsg());
		struct timespec ts = {0, 20 * 1000000L}; /* a back-off, as attach's own */
		nanosleep(&ts, NULL);
	}
	c->opens++;
	emit("O %s %u", c->name, c->opens);
}

/* A value read, as a NUL-terminated string (the empty list when absent). */
static char *as_text(const void *v, size_t vl)
{
	char *s = malloc(vl + 1);
	if (s == NULL)
		die_oom();
	if (vl > 0)
		memcpy(s, v, vl);
	s[vl] = '\0';
	return s;
}

/* @cur with @elem appended. */
static char *appended(const char *cur, unsigned long long elem, size_t *len)
{
	size_t cl = strlen(cur);
	char *s = malloc(cl + 32);
	if (s == NULL)
		die_oom();
	int n = snprintf(s, cl + 32, "%s%s%llu", cur, cl ? "," : "", elem);
	*len = (size_t)n;
	return s;
}

static void clear_reads(client *c)
{
	for (int i = 0; i < c->nops; i++) {
		free(c->ops[i].read);
		c->ops[i].read = NULL;
	}
}

/* ---------------------------------------------------------------- one attempt */

/* The I line of the attempt in c->ops. */
static void emit_invoke(client *c)
{
	line l = {0};
	add(&l, "I %s %llu", c->name, c->seq);
	for (int i = 0; i < c->nops; i++) {
		const micro *m = &c->ops[i];
		if (m->append)
			add(&l, " a:%u:%llu", m->key, m->elem);
		else
			add(&l, " r:%u:%s", m->key, m->read);
	}
	put_line(&l);
	free(l.p);
}

/* A get through the transaction (or the handle, @t NULL): the list as text. */
static int get_list(client *c, walrus_txn *t, unsigned k, char **out)
{
	char key[128];
	int kl = key_of(k, key, sizeof(key));
	void *v = NULL;
	size_t vl = 0;
	int rc = t != NULL ? walrus_txn_get(t, key, (size_t)kl, &v, &vl)
	                   : walrus_get(c->db, key, (size_t)kl, &v, &vl);
	if (rc == WALRUS_ENOTFOUND) {
		*out = as_text("", 0);
		return WALRUS_OK;
	}
	if (rc != WALRUS_OK)
		return rc;
	*out = as_text(v, vl);
	walrus_free(v);
	return WALRUS_OK;
}

static int put_list(client *c, walrus_txn *t, unsigned k, const char *val, size_t vl)
{
	char key[128];
	int kl = key_of(k, key, sizeof(key));
	return t != NULL ? walrus_txn_put(t, key, (size_t)kl, val, vl)
	                 : walrus_put(c->db, key, (size_t)kl, val, vl, durability);
}

/* The micro-ops of c->ops through @t (NULL: --isolation none). */
static int run_ops(client *c, walrus_txn *t)
{
	for (int i = 0; i < c->nops; i++) {
		micro *m = &c->ops[i];
		char *cur = NULL;
		int rc = get_list(c, t, m->key, &cur);
		if (rc != WALRUS_OK)
			return rc;
		if (!m->append) {
			m->read = cur;
			continue;
		}
		size_t nl;
		char *nv = appended(cur, m->elem, &nl);
		free(cur);
		rc = put_list(c, t, m->key, nv, nl);
		free(nv);
		if (rc != WALRUS_OK)
			return rc;
	}
	return WALRUS_OK;
}

enum outcome { OUT_COMMITTED, OUT_CONFLICT, OUT_RESTART };

/* One attempt of the transaction whose shape is in c->ops. */
static enum outcome attempt(client *c)
{
	c->seq++;
	for (int i = 0; i < c->nops; i++)
		if (c->ops[i].append)
			c->ops[i].elem = c->next_elem++;
	walrus_txn *t = NULL;
	int rc = WALRUS_OK;
	if (iso != ISO_NONE)
		rc = walrus_txn_begin(c->db, iso == ISO_SNAPSHOT ? WALRUS_TXN_SNAPSHOT : 0, &t);
	if (rc == WALRUS_OK)
		rc = run_ops(c, t);
	if (rc != WALRUS_OK) {
		/* Before the commit: nothing of the attempt is anywhere (none: it
		 * is, but none has no restarts to survive).  Its reads are void. */
		walrus_txn_free(t);
		clear_reads(c);
		if (restartable(rc)) {
			emit("X %s %d %s", c->name, rc, walrus_errmsg());
			return OUT_RESTART;
		}
		if (rc == WALRUS_ESNAPSHOT || rc == WALRUS_ECONFLICT)
			return OUT_CONFLICT; /* its snapshot is gone: another attempt */
		fail(c, rc, "reads of the transaction");
	}
	emit_invoke(c);
	clear_reads(c);
	if (t != NULL) {
		rc = walrus_txn_commit(t, durability);
		walrus_txn_free(t);
	}
	if (rc == WALRUS_OK) {
		emit("C %s %llu", c->name, c->seq);
		return OUT_COMMITTED;
	}
	if (rc == WALRUS_ECONFLICT) {
		emit("A %s %llu", c->name, c->seq);
		return OUT_CONFLICT;
	}
	if (restartable(rc)) {
		emit("U %s %llu %d %s", c->name, c->seq, rc, walrus_errmsg());
		return OUT_RESTART;
	}
	fail(c, rc, "walrus_txn_commit");
}

static void *run(void *arg)
{
	client *c = arg;
	reopen(c);
	while (!atomic_load(&stop_now) && (txns_per_thread == 0 || c->commits < txns_per_thread)) {
		c->nops = 1 + (int)below(c, max_ops);
		for (int i = 0; i < c->nops; i++) {
			c->ops[i].append = below(c, 2) == 0;
			c->ops[i].key = below(c, nkeys);
			c->ops[i].read = NULL;
		}
		unsigned conflicts = 0, restarts = 0;
		for (;;) {
			enum outcome o = attempt(c);
			if (o == OUT_COMMITTED) {
				c->commits++;
				break;
			}
			if (o == OUT_CONFLICT && ++conflicts >= MAX_CONFLICT) {
				emit("E %s %llu %d %u conflicts in a row: a livelock?", c->name,
				     c->seq, WALRUS_ECONFLICT, conflicts);
				_exit(3);
			}
			if (o == OUT_RESTART) {
				if (++restarts >= max_restarts) {
					emit("E %s %llu %d gave up after %u restarts", c->name,
					     c->seq, WALRUS_ERESTART, restarts);
					_exit(3);
				}
				reopen(c);
			}
			if (atomic_load(&stop_now))
				break;
		}
	}
	emit("D %s %llu", c->name, c->commits);
	int rc = walrus_close(c->db);
	c->db = NULL;
	if (rc != WALRUS_OK)
		fail(c, rc, "walrus_close");
	return NULL;
}

/* --until-eof: stdin's end stops the threads. */
static void *watch_stdin(void *arg)
{
	(void)arg;
	char buf[256];
	for (;;) {
		ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
		if (n == 0 || (n < 0 && errno != EINTR))
			break;
	}
	atomic_store(&stop_now, true);
	return NULL;
}

/* ---------------------------------------------------------------- --final */

static int final_read(unsigned long long seq)
{
	client c = {.name = "final"};
	reopen(&c);
	c.seq = seq;
	c.nops = (int)nkeys;
	for (unsigned k = 0; k < nkeys; k++)
		c.ops[k] = (micro){.append = false, .key = k};
	walrus_txn *t = NULL;
	int rc = walrus_txn_begin(c.db, 0, &t);
	if (rc != WALRUS_OK)
		fail(&c, rc, "walrus_txn_begin");
	rc = run_ops(&c, t);
	if (rc != WALRUS_OK)
		fail(&c, rc, "final read");
	emit_invoke(&c);
	clear_reads(&c);
	rc = walrus_txn_commit(t, WALRUS_SYNC);
	walrus_txn_free(t);
	if (rc != WALRUS_OK)
		fail(&c, rc, "walrus_txn_commit");
	emit("C final %llu", seq);
	rc = walrus_close(c.db);
	if (rc != WALRUS_OK)
		fail(&c, rc, "walrus_close");
	return 0;
}

/* ---------------------------------------------------------------- main */

static _Noreturn void usage(void)
{
	fprintf(stderr,
	        "usage: histdrv -D DIR [-o name=value ...] --client NAME --id P --prefix PFX "
	        "[--threads N] [--keys K] [--txns T] [--max-ops M] [--seed S] "
	        "[--isolation serializable|snapshot|none] [--durability sync|async] "
	        "[--until-eof] [--max-restarts R]\n"
	        "       histdrv -D DIR [-o name=value ...] --final --prefix PFX [--keys K] "
	        "[--seq N]\n");
	exit(2);
}

static unsigned long long num(const char *v)
{
	unsigned long long n;
	if (!drv_num(v, &n))
		usage();
	return n;
}

int main(int argc, char **argv)
{
	const char *name = NULL;
	unsigned nthreads = 1;
	unsigned long long seed = 1, final_seq = 1;
	bool final = false, until_eof = false;
	opts = walrus_opts_new();
	if (opts == NULL)
		return 3;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--final") == 0) {
			final = true;
			continue;
		}
		if (strcmp(a, "--until-eof") == 0) {
			until_eof = true;
			continue;
		}
		if (i + 1 >= argc)
			usage();
		const char *v = argv[++i];
		if (strcmp(a, "-D") == 0) {
			dir = v;
		} else if (strcmp(a, "-o") == 0) {
			int orc = drv_opt(opts, v, "histdrv");
			if (orc == 1)
				usage();
			if (orc != 0)
				return orc;
		} else if (strcmp(a, "--client") == 0) {
			name = v;
		} else if (strcmp(a, "--id") == 0) {
			proc_id = (unsigned)num(v);
		} else if (strcmp(a, "--prefix") == 0) {
			prefix = v;
		} else if (strcmp(a, "--threads") == 0) {
			nthreads = (unsigned)num(v);
		} else if (strcmp(a, "--keys") == 0) {
			nkeys = (unsigned)num(v);
		} else if (strcmp(a, "--txns") == 0) {
			txns_per_thread = num(v);
		} else if (strcmp(a, "--max-ops") == 0) {
			max_ops = (unsigned)num(v);
		} else if (strcmp(a, "--seed") == 0) {
			seed = num(v);
		} else if (strcmp(a, "--seq") == 0) {
			final_seq = num(v);
		} else if (strcmp(a, "--max-restarts") == 0) {
			max_restarts = (unsigned)num(v);
		} else if (strcmp(a, "--isolation") == 0) {
			if (strcmp(v, "serializable") == 0)
				iso = ISO_SERIALIZABLE;
			else if (strcmp(v, "snapshot") == 0)
				iso = ISO_SNAPSHOT;
			else if (strcmp(v, "none") == 0)
				iso = ISO_NONE;
			else
				usage();
		} else if (strcmp(a, "--durability") == 0) {
			if (strcmp(v, "sync") == 0)
				durability = WALRUS_SYNC;
			else if (strcmp(v, "async") == 0)
				durability = WALRUS_ASYNC;
			else
				usage();
		} else {
			usage();
		}
	}
	if (dir == NULL || prefix == NULL || nkeys < 1 || nkeys > MAX_KEYS || max_restarts < 1)
		usage();
	if (final)
		return final_read(final_seq);
	if (name == NULL || nthreads < 1 || nthreads > MAX_THREADS || proc_id > 9999 ||
	    max_ops < 1 || max_ops > MAX_OPS)
		usage();

	static client clients[MAX_THREADS];
	pthread_t tids[MAX_THREADS];
	for (unsigned i = 0; i < nthreads; i++) {
		client *c = &clients[i];
		c->idx = i;
		snprintf(c->name, sizeof(c->name), "%s.t%u", name, i);
		c->rng = seed ^ (0x9e3779b97f4a7c15ull * (i + 1));
		c->next_elem = ((unsigned long long)proc_id * 100 + i) * 1000000ull;
	}
	if (until_eof) {
		pthread_t w;
		int err = pthread_create(&w, NULL, watch_stdin, NULL);
		if (err == 0)
			err = pthread_detach(w);
		if (err != 0) {
			emit("E %s 0 %d pthread_create: %s", name, WALRUS_ENOMEM, strerror(err));
			_exit(3);
		}
	}
	for (unsigned i = 0; i < nthreads; i++) {
		int err = pthread_create(&tids[i], NULL, run, &clients[i]);
		if (err != 0) {
			emit("E %s 0 %d pthread_create: %s", clients[i].name, WALRUS_ENOMEM,
			     strerror(err));
			_exit(3);
		}
	}
	for (unsigned i = 0; i < nthreads; i++) {
		int err = pthread_join(tids[i], NULL);
		if (err != 0) {
			emit("E %s 0 %d pthread_join: %s", name, WALRUS_EINTERNAL, strerror(err));
			_exit(3);
		}
	}
	walrus_opts_free(opts);
	return 0;
}
