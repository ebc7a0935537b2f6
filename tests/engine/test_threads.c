/*
 * test_threads.c - handles as backends in threads: many threads of one
 * process, each with its own handle, beside other processes; a handle used
 * by two threads at once; handles inherited through fork(); opens and
 * closes racing; a normal exit without closing, beside calls and opens of
 * other threads; threads that end without closing; durable writes by default;
 * compaction in one thread beside workers in others.
 *
 * The instance must never restart in any of them: every case ends by
 * checking crash_restarts in the instance's statistics.
 */
#include "testutil.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/engine.h"
#include "wal/wal.h"

#define NTHREADS 8
#define NKEYS    64
#define ROUNDS   400

static const char *dir;

static walrus_opts *test_opts(void)
{
	return tu_instance_opts("100ms", "2MB");
}

/* Opens without libcheck asserts (any thread, any process); NULL on failure. */
static walrus *open_quiet(void)
{
	walrus_opts *o = walrus_opts_new();
	if (o == NULL)
		return NULL;
	(void)walrus_opts_set(o, "create_if_missing", "on");
	(void)walrus_opts_set(o, "supervisor_linger", "100ms");
	(void)walrus_opts_set(o, "shared_buffers", "2MB");
	walrus *db = NULL;
	int rc = walrus_open(dir, o, &db);
	walrus_opts_free(o);
	if (rc != WALRUS_OK)
		fprintf(stderr, "walrus_open: %d %s\n", rc, walrus_errmsg());
	return rc == WALRUS_OK ? db : NULL;
}

static void setup(void)
{
	dir = tu_tmpdir("threads");
}

/* crash_restarts of the running instance, from its statistics. */
static long crash_restarts(walrus *db)
{
	char *json = NULL;
	ck_assert_int_eq(walrus_stats(db, &json), WALRUS_OK);
	const char *p = strstr(json, "\"crash_restarts\":");
	ck_assert_ptr_nonnull(p);
	long n = strtol(p + strlen("\"crash_restarts\":"), NULL, 10);
	walrus_free(json);
	return n;
}

/* ---------------------------------------------------------------- a worker */

/*
 * One worker: its own handle and key space "SPACE/kNN", a model of what it
 * wrote, and every kind of call; each read is checked against the model.
 */
typedef struct worker {
	char space[32];
	unsigned seed;
	int errors;
	char why[256];
	bool have[NKEYS];
	unsigned val[NKEYS];
} worker;

static void key_of(const worker *w, int i, char *k, size_t len)
{
	snprintf(k, len, "%s/k%02d", w->space, i);
}

static bool wfail(worker *w, const char *what, int rc)
{
	if (w->errors++ == 0)
		snprintf(w->why, sizeof(w->why), "%s: %d %s", what, rc, walrus_errmsg());
	return false;
}

static bool check_get(worker *w, walrus *db, int i)
{
	char k[64], v[64];
	size_t vlen = 0;
	key_of(w, i, k, sizeof(k));
	int rc = walrus_get_into(db, k, strlen(k), v, sizeof(v), &vlen);
	if (!w->have[i])
		return rc == WALRUS_ENOTFOUND || wfail(w, "get of a deleted key", rc);
	if (rc != WALRUS_OK)
		return wfail(w, "get", rc);
	char want[64];
	snprintf(want, sizeof(want), "v%u", w->val[i]);
	return (vlen == strlen(want) && memcmp(v, want, vlen) == 0) ||
	       wfail(w, "get returned another value", rc);
}

static bool do_put(worker *w, walrus *db, int i, unsigned val, int flags)
{
	char k[64], v[64];
	key_of(w, i, k, sizeof(k));
	snprintf(v, sizeof(v), "v%u", val);
	int rc = walrus_put(db, k, strlen(k), v, strlen(v), flags);
	if (rc != WALRUS_OK)
		return wfail(w, "put", rc);
	w->have[i] = true;
	w->val[i] = val;
	return true;
}

static bool do_delete(worker *w, walrus *db, int i)
{
	char k[64];
	key_of(w, i, k, sizeof(k));
	int rc = walrus_delete(db, k, strlen(k), WALRUS_SYNC);
	if (rc != (w->have[i] ? WALRUS_OK : WALRUS_ENOTFOUND))
		return wfail(w, "delete", rc);
	w->have[i] = false;
	return true;
}

static bool do_batch(worker *w, walrus *db, unsigned round)
{
	walrus_batch *b = walrus_batch_new();
	if (b == NULL)
		return wfail(w, "batch_new", WALRUS_ENOMEM);
	int first = (int)(rand_r(&w->seed) % (NKEYS - 3));
	for (int i = first; i < first + 3; i++) {
		char k[64], v[64];
		key_of(w, i, k, sizeof(k));
		snprintf(v, sizeof(v), "v%u", round);
		(void)walrus_batch_put(b, k, strlen(k), v, strlen(v));
	}
	int rc = walrus_batch_commit(db, b, 0);
	walrus_batch_free(b);
	if (rc != WALRUS_OK)
		return wfail(w, "batch", rc);
	for (int i = first; i < first + 3; i++) {
		w->have[i] = true;
		w->val[i] = round;
	}
	return true;
}

/* The iterator over the worker's space sees exactly the model. */
static bool do_scan(worker *w, walrus *db)
{
	char lo[40], hi[40];
	snprintf(lo, sizeof(lo), "%s/", w->space);
	snprintf(hi, sizeof(hi), "%s0", w->space); /* '0' follows '/' */
	walrus_iter *it = NULL;
	int rc = walrus_iter_open(db, lo, strlen(lo), hi, strlen(hi), &it);
	int seen = 0, want = 0;
	for (int i = 0; i < NKEYS; i++)
		want += w->have[i];
	while (rc == WALRUS_OK && walrus_iter_valid(it)) {
		seen++;
		rc = walrus_iter_next(it);
	}
	walrus_iter_close(it);
	if (rc != WALRUS_OK)
		return wfail(w, "iterator", rc);
	return seen == want || wfail(w, "iterator count differs from the model", seen);
}

static bool step(worker *w, walrus *db, unsigned round)
{
	int i = (int)(rand_r(&w->seed) % NKEYS);
	switch (rand_r(&w->seed) % 8) {
	case 0:
	case 1:
		return do_put(w, db, i, round, WALRUS_SYNC);
	case 2:
		return do_put(w, db, i, round, WALRUS_ASYNC);
	case 3:
		return do_put(w, db, i, round, 0);
	case 4:
		return do_delete(w, db, i);
	case 5:
		return do_batch(w, db, round);
	case 6:
		return do_scan(w, db);
	default:
		return check_get(w, db, i);
	}
}

static void *worker_main(void *arg)
{
	worker *w = arg;
	walrus *db = open_quiet();
	if (db == NULL) {
		wfail(w, "open", -1);
		return NULL;
	}
	for (unsigned r = 1; r <= ROUNDS && w->errors == 0; r++)
		(void)step(w, db, r);
	for (int i = 0; i < NKEYS && w->errors == 0; i++)
		(void)check_get(w, db, i);
	int rc = walrus_close(db);
	if (rc != WALRUS_OK)
		wfail(w, "close", rc);
	return NULL;
}

/* Runs @n workers in threads of this process over spaces PREFIX0.. */
static int run_workers(const char *prefix, int n, worker *ws)
{
	pthread_t t[NTHREADS];
	for (int i = 0; i < n; i++) {
		memset(&ws[i], 0, sizeof(ws[i]));
		snprintf(ws[i].space, sizeof(ws[i].space), "%s%d", prefix, i);
		ws[i].seed = (unsigned)(i * 7919 + getpid());
		if (pthread_create(&t[i], NULL, worker_main, &ws[i]) != 0)
			return -1;
	}
	int errors = 0;
	for (int i = 0; i < n; i++) {
		pthread_join(t[i], NULL);
		if (ws[i].errors) {
			fprintf(stderr, "worker %s: %s\n", ws[i].space, ws[i].why);
			errors++;
		}
	}
	return errors;
}

static int other_process(void *arg)
{
	worker ws[2];
	return run_workers((const char *)arg, 2, ws) == 0 ? 0 : 1;
}

START_TEST(threads_and_processes_mixed)
{
	walrus *db = tu_open(dir, test_opts());
	long restarts = crash_restarts(db);
	pid_t p1 = tu_fork(other_process, "pa");
	pid_t p2 = tu_fork(other_process, "pb");
	worker ws[NTHREADS];
	ck_assert_int_eq(run_workers("t", NTHREADS, ws), 0);
	ck_assert_int_eq(tu_wait(p1), 0);
	ck_assert_int_eq(tu_wait(p2), 0);
	/* Every worker's final state, seen through one more handle. */
	int want = 0;
	for (int i = 0; i < NTHREADS; i++)
		for (int k = 0; k < NKEYS; k++)
			want += ws[i].have[k];
	walrus_iter *it = NULL;
	ck_assert_int_eq(walrus_iter_open(db, "t", 1, "u", 1, &it), WALRUS_OK);
	int seen = 0;
	while (walrus_iter_valid(it)) {
		seen++;
		ck_assert_int_eq(walrus_iter_next(it), WALRUS_OK);
	}
	walrus_iter_close(it);
	ck_assert_int_eq(seen, want);
	ck_assert_int_eq(walrus_verify(db, NULL, NULL), WALRUS_OK);
	ck_assert_int_eq(crash_restarts(db), restarts);
	tu_close_and_wait(db);
}
END_TEST

/* ---------------------------------------------------------------- mapped reads */

typedef struct mreader {
	walrus *db;
	_Atomic bool stop;
	long gets, bad;
} mreader;

static void mapped_value(char *v, size_t vl, uint32_t i)
{
	memset(v, 'm', vl);
	snprintf(v, vl, "value-%06u", i);
}

/* Gets of the preloaded keys, each checked, until told to stop (one pass at least). */
static void *mreader_main(void *arg)
{
	mreader *r = arg;
	for (uint32_t pass = 0; pass == 0 || !atomic_load(&r->stop); pass++)
		for (uint32_t i = pass % 7; i < 20000; i += 7) {
			char k[32], want[200];
			snprintf(k, sizeof(k), "m/%06u", i);
			mapped_value(want, sizeof(want), i);
			void *v = NULL;
			size_t vl = 0;
			int rc = walrus_get(r->db, k, strlen(k), &v, &vl);
			r->gets++;
			if (rc != WALRUS_OK || vl != sizeof(want) || memcmp(v, want, vl) != 0)
				r->bad++;
			walrus_free(v);
		}
	return NULL;
}

/*
 * Gets reading leaves through the file's mapping (mmap_reads=on) while
 * worker threads and a process write, evict and load pages of a small pool:
 * every value read is whole and right, and the mapping answered some.
 */
START_TEST(mapped_reads_beside_worker_threads)
{
	walrus_opts *o = test_opts();
	ck_assert_int_eq(walrus_opts_set(o, "mmap_reads", "on"), WALRUS_OK);
	ck_assert_int_eq(walrus_opts_set(o, "shared_buffers", "1MB"), WALRUS_OK);
	walrus *db = tu_open(dir, o);
	walrus_batch *b = walrus_batch_new();
	for (uint32_t i = 0; i < 20000; i++) {
		char k[32], v[200];
		snprintf(k, sizeof(k), "m/%06u", i);
		mapped_value(v, sizeof(v), i);
		ck_assert_int_eq(walrus_batch_put(b, k, strlen(k), v, sizeof(v)), WALRUS_OK);
		if (walrus_batch_count(b) == 500) {
			ck_assert_int_eq(walrus_batch_commit(db, b, WALRUS_ASYNC), WALRUS_OK);
			walrus_batch_clear(b);
		}
	}
	walrus_batch_free(b);
	/* The process first: a fork beside a running thread could copy a lock
	 * that thread holds. */
	pid_t p1 = tu_fork(other_process, "pa");
	mreader r = {.db = tu_open(dir, test_opts())};
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, mreader_main, &r), 0);
	worker ws[NTHREADS];
	ck_assert_int_eq(run_workers("t", NTHREADS, ws), 0);
	ck_assert_int_eq(tu_wait(p1), 0);
	atomic_store(&r.stop, true);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_int_eq(r.bad, 0);
	ck_assert_int_gt(r.gets, 0);
	char *json = NULL;
	ck_assert_int_eq(walrus_stats(db, &json), WALRUS_OK);
	const char *m = strstr(json, "\"mapped_reads\":");
	ck_assert_ptr_nonnull(m);
	ck_assert_int_gt(atol(m + strlen("\"mapped_reads\":")), 0);
	walrus_free(json);
	ck_assert_int_eq(walrus_verify(db, NULL, NULL), WALRUS_OK);
	walrus_close(r.db);
	tu_close_and_wait(db);
}
END_TEST

/* ---------------------------------------------------------------- compaction */

typedef struct compactor {
	walrus *db;
	_Atomic bool stop;
	int runs, rc;
	char why[256];
} compactor;

/* Compacts in a loop, on a handle of its own, until told to stop (once at least). */
static void *compactor_main(void *arg)
{
	compactor *c = arg;
	while (c->rc == WALRUS_OK && (c->runs == 0 || !atomic_load(&c->stop))) {
		walrus_compact_stats st;
		c->rc = walrus_compact(c->db, &st);
		if (c->rc != WALRUS_OK)
			snprintf(c->why, sizeof(c->why), "%s", walrus_errmsg());
		c->runs++;
	}
	return NULL;
}

/* A shuffled load of @n keys "z/NNNNNNNN", then all but every eighth deleted. */
static void sparse_tree(walrus *db, uint32_t n)
{
	uint32_t *order = malloc(n * sizeof(*order));
	for (uint32_t i = 0; i < n; i++)
		order[i] = i;
	unsigned seed = 7;
	for (uint32_t i = n - 1; i > 0; i--) {
		uint32_t j = (uint32_t)rand_r(&seed) % (i + 1), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	walrus_batch *b = walrus_batch_new();
	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t i = 0; i < n; i++) {
			char k[32];
			snprintf(k, sizeof(k), "z/%08u", order[i]);
			if (pass == 0)
				ck_assert_int_eq(
				    walrus_batch_put(b, k, strlen(k),
				                     "value-of-forty-bytes-xxxxxxxxxxxxxxxxxx", 40),
				    WALRUS_OK);
			else if (order[i] % 8 != 0)
				ck_assert_int_eq(walrus_batch_delete(b, k, strlen(k)), WALRUS_OK);
			if (walrus_batch_count(b) == 50 || i + 1 == n) {
				ck_assert_int_eq(walrus_batch_commit(db, b, WALRUS_ASYNC),
				                 WALRUS_OK);
				walrus_batch_clear(b);
			}
		}
	}
	walrus_batch_free(b);
	free(order);
}

/*
 * Compaction in one thread while worker threads write, delete, scan and
 * read their own keys through handles of their own: each worker's model
 * holds, the sparse keys stay, and the tree is valid (under TSan: no race).
 */
START_TEST(compaction_beside_worker_threads)
{
	walrus *db = tu_open(dir, test_opts());
	long restarts = crash_restarts(db);
	sparse_tree(db, 20000);
	compactor c = {.db = open_quiet()};
	ck_assert_ptr_nonnull(c.db);
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, compactor_main, &c), 0);
	worker ws[NTHREADS / 2];
	ck_assert_int_eq(run_workers("c", NTHREADS / 2, ws), 0);
	atomic_store(&c.stop, true);
	pthread_join(t, NULL);
	ck_assert_msg(c.rc == WALRUS_OK, "walrus_compact: %d %s", c.rc, c.why);
	ck_assert_int_ge(c.runs, 1);
	ck_assert_int_eq(walrus_close(c.db), WALRUS_OK);
	for (uint32_t i = 0; i < 20000; i += 8) {
		char k[32], v[64];
		size_t vlen;
		snprintf(k, sizeof(k), "z/%08u", i);
		ck_assert_int_eq(walrus_get_into(db, k, strlen(k), v, sizeof(v), &vlen), WALRUS_OK);
		ck_assert_uint_eq(vlen, 40);
	}
	ck_assert_int_eq(walrus_verify(db, NULL, NULL), WALRUS_OK);
	ck_assert_int_eq(crash_restarts(db), restarts);
	tu_close_and_wait(db);
}
END_TEST

/* ---------------------------------------------------------------- misuse */

typedef struct misuse {
	walrus *db;
	int rc;
	char msg[256];
} misuse;

static void *call_on_shared_handle(void *arg)
{
	misuse *m = arg;
	char v[8];
	size_t vlen;
	m->rc = walrus_get_into(m->db, "k", 1, v, sizeof(v), &vlen);
	snprintf(m->msg, sizeof(m->msg), "%s", walrus_errmsg());
	return NULL;
}

START_TEST(two_threads_on_one_handle)
{
	walrus *db = tu_open(dir, test_opts());
	long restarts = crash_restarts(db);
	ck_assert_int_eq(walrus_put(db, "k", 1, "v", 1, 0), WALRUS_OK);
	/* This thread is inside a call on db (entered, not yet left)... */
	ck_assert_int_eq(api_call_begin(db, "test"), WALRUS_OK);
	misuse m = {.db = db};
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, call_on_shared_handle, &m), 0);
	pthread_join(t, NULL);
	/* ...so another thread's call is refused, and changes nothing. */
	ck_assert_int_eq(m.rc, WALRUS_EMISUSE);
	ck_assert_ptr_nonnull(strstr(m.msg, "another thread"));
	ck_assert_int_eq(walrus_close(db), WALRUS_EMISUSE); /* not under a running call */
	api_call_end(db);
	/* Once the call left, the handle serves any thread, one at a time. */
	ck_assert_int_eq(pthread_create(&t, NULL, call_on_shared_handle, &m), 0);
	pthread_join(t, NULL);
	ck_assert_int_eq(m.rc, WALRUS_OK);
	ck_assert_int_eq(crash_restarts(db), restarts);
	tu_close_and_wait(db);
}
END_TEST

static int child_of_fork(void *arg)
{
	walrus *inherited = arg;
	char v[8];
	size_t vlen;
	TU_CHILD_CHECK(walrus_get_into(inherited, "k", 1, v, sizeof(v), &vlen) == WALRUS_EMISUSE);
	TU_CHILD_CHECK(strstr(walrus_errmsg(), "fork") != NULL);
	TU_CHILD_CHECK(walrus_put(inherited, "k", 1, "x", 1, 0) == WALRUS_EMISUSE);
	/* Its own handle works. */
	walrus *mine = open_quiet();
	TU_CHILD_CHECK(mine != NULL);
	TU_CHILD_CHECK(walrus_get_into(mine, "k", 1, v, sizeof(v), &vlen) == WALRUS_OK);
	TU_CHILD_CHECK(vlen == 1 && v[0] == 'v');
	TU_CHILD_CHECK(walrus_put(mine, "c", 1, "child", 5, 0) == WALRUS_OK);
	TU_CHILD_CHECK(walrus_close(mine) == WALRUS_OK);
	/* Closing the inherited handle releases nothing of the parent's. */
	TU_CHILD_CHECK(walrus_close(inherited) == WALRUS_OK);
	return 0;
}

START_TEST(handle_after_fork)
{
	walrus *db = tu_open(dir, test_opts());
	long restarts = crash_restarts(db);
	ck_assert_int_eq(walrus_put(db, "k", 1, "v", 1, 0), WALRUS_OK);
	ck_assert_int_eq(tu_wait(tu_fork(child_of_fork, db)), 0);
	char v[8];
	size_t vlen;
	ck_assert_int_eq(walrus_get_into(db, "c", 1, v, sizeof(v), &vlen), WALRUS_OK);
	ck_assert_int_eq(vlen, 5);
	ck_assert_int_eq(walrus_put(db, "k", 1, "w", 1, 0), WALRUS_OK);
	ck_assert_int_eq(crash_restarts(db), restarts);
	tu_close_and_wait(db);
}
END_TEST

typedef struct opener {
	int errors;
	char why[256];
} opener;

static void *open_close_loop(void *arg)
{
	opener *o = arg;
	for (int i = 0; i < 20 && o->errors == 0; i++) {
		walrus *db = open_quiet();
		if (db == NULL) {
			o->errors++;
			snprintf(o->why, sizeof(o->why), "open: %s", walrus_errmsg());
			break;
		}
		int rc = walrus_put(db, "race", 4, "x", 1, i % 2 ? WALRUS_ASYNC : 0);
		int crc = walrus_close(db);
		if (rc != WALRUS_OK || crc != WALRUS_OK) {
			o->errors++;
			snprintf(o->why, sizeof(o->why), "put %d close %d: %s", rc, crc,
			         walrus_errmsg());
		}
	}
	return NULL;
}

static void race_opens(void)
{
	pthread_t t[16];
	opener o[16] = {0};
	for (int i = 0; i < 16; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, open_close_loop, &o[i]), 0);
	for (int i = 0; i < 16; i++) {
		pthread_join(t[i], NULL);
		ck_assert_msg(o[i].errors == 0, "thread %d: %s", i, o[i].why);
	}
}

START_TEST(open_close_races_with_a_handle_held)
{
	walrus *db = tu_open(dir, test_opts());
	long restarts = crash_restarts(db);
	race_opens();
	ck_assert_int_eq(crash_restarts(db), restarts);
	ck_assert_int_eq(walrus_verify(db, NULL, NULL), WALRUS_OK);
	tu_close_and_wait(db);
}
END_TEST

/* The process attaches and detaches while the threads race (no handle held between). */
START_TEST(open_close_races_attaching)
{
	race_opens();
	walrus *db = tu_open(dir, test_opts());
	char v[8];
	size_t vlen;
	ck_assert_int_eq(walrus_get_into(db, "race", 4, v, sizeof(v), &vlen), WALRUS_OK);
	ck_assert_int_eq(walrus_verify(db, NULL, NULL), WALRUS_OK);
	/* Instances may have come and gone (linger), but none crashed: the log says so. */
	char path[4200], line[1024];
	snprintf(path, sizeof(path), "%s/log/walrus.log", dir);
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f) != NULL)
		ck_assert_msg(strstr(line, "ended without detaching") == NULL &&
		                  strstr(line, "PANIC") == NULL,
		              "%s", line);
	fclose(f);
	tu_close_and_wait(db);
}
END_TEST

/* ---------------------------------------------------------------- exit without close */

static int exits_without_closing(void *arg)
{
	(void)arg;
	walrus *a = open_quiet(), *b = open_quiet();
	TU_CHILD_CHECK(a != NULL && b != NULL);
	TU_CHILD_CHECK(walrus_put(a, "exit-a", 6, "1", 1, 0) == WALRUS_OK);
	TU_CHILD_CHECK(walrus_put(b, "exit-b", 6, "1", 1, 0) == WALRUS_OK);
	exit(0); /* no walrus_close: the library's exit hook detaches both */
}

/*
 * Another process writing all along: durable puts until the test writes to
 * its pipe, then ten more (after the exit), each of which must succeed.
 * (A process, not a thread of the test: a child forked from a process
 * whose other thread is inside malloc inherits a held allocator lock under
 * the sanitizers.)
 */
static int keep_writing(void *arg)
{
	int stop_fd = *(int *)arg;
	walrus *db = open_quiet();
	TU_CHILD_CHECK(db != NULL);
	int after = -1;
	for (int n = 0; after < 10; n++) {
		char k[32];
		snprintf(k, sizeof(k), "w%d", n);
		TU_CHILD_CHECK(walrus_put(db, k, strlen(k), "v", 1, WALRUS_SYNC) == WALRUS_OK);
		struct pollfd p = {.fd = stop_fd, .events = POLLIN};
		if (after >= 0)
			after++;
		else if (poll(&p, 1, 0) == 1)
			after = 0;
	}
	TU_CHILD_CHECK(walrus_close(db) == WALRUS_OK);
	return 0;
}

START_TEST(exit_without_close_is_no_crash)
{
	walrus *db = tu_open(dir, test_opts());
	long restarts = crash_restarts(db);
	int stop[2];
	ck_assert_int_eq(pipe(stop), 0);
	pid_t writer = tu_fork(keep_writing, &stop[0]);
	ck_assert_int_eq(tu_wait(tu_fork(exits_without_closing, NULL)), 0);
	ck_assert_int_eq(write(stop[1], "x", 1), 1);
	ck_assert_int_eq(tu_wait(writer), 0);
	close(stop[0]);
	close(stop[1]);
	char v[8];
	size_t vlen;
	ck_assert_int_eq(walrus_get_into(db, "exit-a", 6, v, sizeof(v), &vlen), WALRUS_OK);
	ck_assert_int_eq(walrus_get_into(db, "exit-b", 6, v, sizeof(v), &vlen), WALRUS_OK);
	ck_assert_int_eq(crash_restarts(db), restarts);
	tu_close_and_wait(db);
}
END_TEST

/* ---------------------------------------------------------------- exit beside calls */

#define EXIT_THREADS 16
#define EXIT_ROUNDS  12

typedef struct getter {
	walrus *db;
	_Atomic long calls;
} getter;

/*
 * Gets until the process exits under it.  A call that begins once exit()
 * has begun must fail cleanly (ESHUTDOWN), never reach freed state: any
 * other answer ends the process with status 3.
 */
static void *get_until_exit(void *arg)
{
	getter *g = arg;
	char v[8];
	size_t vlen;
	for (;;) {
		int rc = walrus_get_into(g->db, "exit-k", 6, v, sizeof(v), &vlen);
		if (rc != WALRUS_OK && rc != WALRUS_ESHUTDOWN)
			_exit(3);
		atomic_fetch_add(&g->calls, 1);
	}
	return NULL;
}

static int exits_beside_getters(void *arg)
{
	(void)arg;
	static getter g[EXIT_THREADS];
	pthread_t t;
	for (int i = 0; i < EXIT_THREADS; i++) {
		g[i].db = open_quiet();
		TU_CHILD_CHECK(g[i].db != NULL);
		atomic_store(&g[i].calls, 0);
	}
	TU_CHILD_CHECK(walrus_put(g[0].db, "exit-k", 6, "v", 1, 0) == WALRUS_OK);
	for (int i = 0; i < EXIT_THREADS; i++)
		TU_CHILD_CHECK(pthread_create(&t, NULL, get_until_exit, &g[i]) == 0);
	for (int i = 0; i < EXIT_THREADS; i++)
		while (atomic_load(&g[i].calls) < 50)
			sched_yield();
	exit(0); /* every thread is in or between gets */
}

/* No line of the instance's log says a process ended without detaching. */
static void log_has_no_crash(void)
{
	char path[4200], line[1024];
	snprintf(path, sizeof(path), "%s/log/walrus.log", dir);
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f) != NULL)
		ck_assert_msg(strstr(line, "ended without detaching") == NULL &&
		                  strstr(line, "PANIC") == NULL,
		              "%s", line);
	fclose(f);
}

START_TEST(exit_with_threads_inside_calls)
{
	walrus *db = tu_open(dir, test_opts());
	long restarts = crash_restarts(db);
	for (int r = 0; r < EXIT_ROUNDS; r++)
		ck_assert_msg(tu_wait(tu_fork(exits_beside_getters, NULL)) == 0,
		              "round %d: the exiting process did not end with status 0", r);
	ck_assert_int_eq(crash_restarts(db), restarts);
	log_has_no_crash();
	tu_close_and_wait(db);
}
END_TEST

static void *open_close_until_exit(void *arg)
{
	_Atomic long *opens = arg;
	walrus_opts *o = tu_instance_opts("100ms", "2MB");
	for (;;) {
		walrus *db = NULL;
		if (walrus_open(dir, o, &db) == WALRUS_OK) { /* refused once exit began */
			atomic_fetch_add(opens, 1);
			(void)walrus_close(db);
		}
	}
	return NULL;
}

/* exit() while another thread opens and closes: the exit ends, and detaches. */
static int exits_beside_an_opener(void *arg)
{
	(void)arg;
	static _Atomic long opens;
	walrus *db = open_quiet();
	TU_CHILD_CHECK(db != NULL);
	pthread_t t;
	TU_CHILD_CHECK(pthread_create(&t, NULL, open_close_until_exit, &opens) == 0);
	while (atomic_load(&opens) < 20)
		sched_yield();
	exit(0);
}

START_TEST(exit_while_another_thread_opens)
{
	walrus *db = tu_open(dir, test_opts());
	long restarts = crash_restarts(db);
	for (int r = 0; r < EXIT_ROUNDS; r++)
		ck_assert_msg(tu_wait(tu_fork(exits_beside_an_opener, NULL)) == 0,
		              "round %d: the exiting process did not end with status 0", r);
	ck_assert_int_eq(crash_restarts(db), restarts);
	log_has_no_crash();
	tu_close_and_wait(db);
}
END_TEST

/* ---------------------------------------------------------------- threads that end */

#define PARK_MAX 6 /* max_connections of the case */

typedef struct opener_thread {
	walrus *db;
	int n, rc;
	char why[256];
} opener_thread;

static void *open_put_and_end(void *arg)
{
	opener_thread *o = arg;
	walrus_opts *opts = tu_instance_opts("100ms", "2MB");
	o->rc = walrus_open(dir, opts, &o->db);
	walrus_opts_free(opts);
	if (o->rc == WALRUS_OK) {
		char k[16];
		snprintf(k, sizeof(k), "park%02d", o->n);
		o->rc = walrus_put(o->db, k, strlen(k), "v", 1, 0);
	}
	snprintf(o->why, sizeof(o->why), "%s", walrus_errmsg());
	return NULL; /* without walrus_close */
}

/*
 * Threads that each open a handle, write, and end without closing it: three
 * times as many as there are slots.  Each ended thread's handle gives its
 * slot back, so every open succeeds; a handle whose thread ended still
 * works from another thread, and closes.
 */
START_TEST(ended_threads_give_their_slots_back)
{
	walrus_opts *o = tu_instance_opts("100ms", "2MB");
	char mc[8];
	snprintf(mc, sizeof(mc), "%d", PARK_MAX);
	ck_assert_int_eq(walrus_opts_set(o, "max_connections", mc), WALRUS_OK);
	walrus *db = tu_open(dir, o);
	opener_thread th[3 * PARK_MAX];
	for (int i = 0; i < 3 * PARK_MAX; i++) {
		pthread_t t;
		th[i] = (opener_thread){.n = i};
		ck_assert_int_eq(pthread_create(&t, NULL, open_put_and_end, &th[i]), 0);
		ck_assert_int_eq(pthread_join(t, NULL), 0);
		ck_assert_msg(th[i].rc == WALRUS_OK, "thread %d: %d %s", i, th[i].rc, th[i].why);
	}
	char v[8];
	size_t vlen;
	for (int i = 0; i < 3 * PARK_MAX; i++) {
		char k[16];
		snprintf(k, sizeof(k), "park%02d", i);
		ck_assert_int_eq(walrus_get_into(db, k, strlen(k), v, sizeof(v), &vlen), WALRUS_OK);
	}
	/* Two ended threads' handles used here: each takes a slot again. */
	ck_assert_int_eq(walrus_put(th[0].db, "park-again", 10, "1", 1, 0), WALRUS_OK);
	ck_assert_int_eq(walrus_get_into(th[1].db, "park-again", 10, v, sizeof(v), &vlen),
	                 WALRUS_OK);
	for (int i = 0; i < 3 * PARK_MAX; i++)
		ck_assert_int_eq(walrus_close(th[i].db), WALRUS_OK);
	ck_assert_int_eq(walrus_verify(db, NULL, NULL), WALRUS_OK);
	tu_close_and_wait(db);
}
END_TEST

/*
 * A runtime such as Python's says a thread has ended (its join returns)
 * when the thread signals it, before the C library runs the thread's exit
 * destructors, where the handles it used give their slots back.  A call on
 * such a handle from the joiner, at that moment, waits for the parking
 * instead of failing with EMISUSE.  Here the thread sets a flag as its last
 * act, the way those runtimes do, and the joiner spins on it.
 */
typedef struct {
	walrus *db;
	_Atomic int done;
	int rc;
} last_call;

static void *call_then_signal(void *arg)
{
	last_call *l = arg;
	l->rc = walrus_put(l->db, "last", 4, "v", 1, WALRUS_ASYNC);
	atomic_store(&l->done, 1);
	return NULL;
}

START_TEST(call_right_after_a_thread_signals_its_end)
{
	walrus *db = tu_open(dir, test_opts());
	last_call l = {.db = db};
	char v[8];
	size_t vlen;
	for (int i = 0; i < 2000; i++) {
		pthread_t t;
		atomic_store(&l.done, 0);
		ck_assert_int_eq(pthread_create(&t, NULL, call_then_signal, &l), 0);
		while (atomic_load(&l.done) == 0)
			; /* the joiner reacts at once, as a spinning runtime may */
		ck_assert_int_eq(l.rc, WALRUS_OK);
		int rc = walrus_get_into(db, "last", 4, v, sizeof(v), &vlen);
		ck_assert_msg(rc == WALRUS_OK, "round %d: %d %s", i, rc, walrus_errmsg());
		ck_assert_int_eq(pthread_join(t, NULL), 0);
	}
	tu_close_and_wait(db);
}
END_TEST

/* ---------------------------------------------------------------- durable by default */

START_TEST(flags_zero_is_durable_by_default)
{
	walrus *db = tu_open(dir, test_opts());
	ck_assert_int_eq(walrus_put(db, "d", 1, "v", 1, 0), WALRUS_OK);
	/* The write's record is flushed when the call returns. */
	ck_assert_uint_ge(wal_flushed_lsn(), wal_insert_lsn());
	ck_assert_int_eq(walrus_put(db, "d", 1, "v", 1, WALRUS_SYNC | WALRUS_ASYNC), WALRUS_EINVAL);
	ck_assert_int_eq(walrus_put(db, "d", 1, "v", 1, 0x4), WALRUS_EINVAL);
	ck_assert_int_eq(walrus_delete(db, "d", 1, 0), WALRUS_OK);
	ck_assert_uint_ge(wal_flushed_lsn(), wal_insert_lsn());
	/* A handle opened with synchronous_commit=off: flags 0 does not wait, SYNC does. */
	walrus_opts *o = test_opts();
	ck_assert_int_eq(walrus_opts_set(o, "synchronous_commit", "off"), WALRUS_OK);
	walrus *lazy = tu_open(dir, o);
	ck_assert_int_eq(walrus_put(lazy, "e", 1, "v", 1, WALRUS_SYNC), WALRUS_OK);
	ck_assert_uint_ge(wal_flushed_lsn(), wal_insert_lsn());
	ck_assert_int_eq(walrus_put(lazy, "e", 1, "w", 1, 0), WALRUS_OK);
	ck_assert_int_eq(walrus_sync(lazy), WALRUS_OK);
	ck_assert_uint_ge(wal_flushed_lsn(), wal_insert_lsn());
	ck_assert_int_eq(walrus_close(lazy), WALRUS_OK);
	tu_close_and_wait(db);
}
END_TEST

static Suite *threads_suite(void)
{
	Suite *s = suite_create("threads");
	TCase *tc = tcase_create("threads");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, threads_and_processes_mixed);
	tcase_add_test(tc, two_threads_on_one_handle);
	tcase_add_test(tc, handle_after_fork);
	tcase_add_test(tc, open_close_races_with_a_handle_held);
	tcase_add_test(tc, open_close_races_attaching);
	tcase_add_test(tc, exit_without_close_is_no_crash);
	tcase_add_test(tc, exit_with_threads_inside_calls);
	tcase_add_test(tc, exit_while_another_thread_opens);
	tcase_add_test(tc, ended_threads_give_their_slots_back);
	tcase_add_test(tc, call_right_after_a_thread_signals_its_end);
	tcase_add_test(tc, flags_zero_is_durable_by_default);
	tcase_add_test(tc, compaction_beside_worker_threads);
	tcase_add_test(tc, mapped_reads_beside_worker_threads);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(threads_suite());
}
