/*
 * test_spaces.c - named key spaces (include/walrus.h): each its own ordered
 * key space, create/open/list/drop and their errors, batches and
 * transactions across spaces (atomic across a crash), drops under
 * concurrent readers and under iterators looking ahead, thousands of spaces with the fd cache
 * bounded, snapshots, verify and compaction, orphan files removed at start.
 */
#include "testutil.h"
#include "kv/kv.h"

#ifdef WALRUS_TEST_HOOKS
#include "testsupport/testsupport.h"
#endif

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *dir;

static void setup(void)
{
	dir = tu_tmpdir("spaces");
}

static walrus_opts *opts(void)
{
	return tu_instance_opts("100ms", "16MB");
}

static walrus_space *space(walrus *db, const char *name)
{
	walrus_space *sp = NULL;
	int rc = walrus_space_open(db, name, WALRUS_SPACE_CREATE, &sp);
	ck_assert_msg(rc == WALRUS_OK, "open %s: %d %s", name, rc, walrus_errmsg());
	return sp;
}

static void put_in(walrus *db, walrus_space *sp, const char *k, const char *v)
{
	int rc = walrus_put_in(db, sp, k, strlen(k), v, strlen(v), WALRUS_ASYNC);
	ck_assert_msg(rc == WALRUS_OK, "put %s: %d %s", k, rc, walrus_errmsg());
}

/* The value of @k in @sp, "-" when absent. */
static const char *get_in(walrus *db, walrus_space *sp, const char *k, char *buf, size_t cap)
{
	size_t vl;
	int rc = walrus_get_into_in(db, sp, k, strlen(k), buf, cap - 1, &vl);
	if (rc == WALRUS_ENOTFOUND)
		return "-";
	ck_assert_msg(rc == WALRUS_OK, "get %s: %d %s", k, rc, walrus_errmsg());
	buf[vl] = '\0';
	return buf;
}

/* "k=v k=v" of a whole space, in order. */
static void scan(walrus *db, walrus_space *sp, char *out, size_t cap)
{
	walrus_iter *it;
	ck_assert_int_eq(walrus_iter_open_in(db, sp, NULL, 0, NULL, 0, &it), WALRUS_OK);
	size_t n = 0;
	out[0] = '\0';
	while (walrus_iter_valid(it)) {
		const void *k, *v;
		size_t kl, vl;
		walrus_iter_key(it, &k, &kl);
		walrus_iter_value(it, &v, &vl);
		n += (size_t)snprintf(out + n, cap - n, "%s%.*s=%.*s", n ? " " : "", (int)kl,
		                      (const char *)k, (int)vl, (const char *)v);
		ck_assert_int_eq(walrus_iter_next(it), WALRUS_OK);
	}
	walrus_iter_close(it);
}

/* Data files of key spaces (relations 16 and up) in DIR/base. */
static int space_files(void)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/base", dir);
	DIR *d = opendir(path);
	ck_assert_ptr_nonnull(d);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		char *end;
		unsigned long v = strtoul(e->d_name, &end, 10);
		if (end != e->d_name && *end == '\0' && v >= 16)
			n++;
	}
	closedir(d);
	return n;
}

/* ---------------------------------------------------------------- isolation */

START_TEST(spaces_are_isolated)
{
	walrus *db = tu_open(dir, opts());
	walrus_space *users = space(db, "users"), *index = space(db, "index");
	ck_assert_int_eq(walrus_put(db, "k", 1, "default", 7, WALRUS_ASYNC), WALRUS_OK);
	put_in(db, users, "k", "user");
	put_in(db, users, "u2", "x");
	put_in(db, index, "k", "index");
	char b[64], s[256];
	ck_assert_str_eq(get_in(db, NULL, "k", b, sizeof(b)), "default");
	ck_assert_str_eq(get_in(db, users, "k", b, sizeof(b)), "user");
	ck_assert_str_eq(get_in(db, index, "k", b, sizeof(b)), "index");
	ck_assert_str_eq(get_in(db, index, "u2", b, sizeof(b)), "-");
	ck_assert_str_eq(get_in(db, NULL, "u2", b, sizeof(b)), "-");
	scan(db, users, s, sizeof(s));
	ck_assert_str_eq(s, "k=user u2=x");
	scan(db, NULL, s, sizeof(s));
	ck_assert_str_eq(s, "k=default");
	/* A delete in one space leaves the others alone. */
	ck_assert_int_eq(walrus_delete_in(db, users, "k", 1, WALRUS_SYNC), WALRUS_OK);
	ck_assert_int_eq(walrus_delete_in(db, users, "k", 1, WALRUS_SYNC), WALRUS_ENOTFOUND);
	ck_assert_str_eq(get_in(db, index, "k", b, sizeof(b)), "index");
	ck_assert_str_eq(get_in(db, NULL, "k", b, sizeof(b)), "default");
	/* The same handle each time, and the names in order. */
	walrus_space *again;
	ck_assert_int_eq(walrus_space_open(db, "users", 0, &again), WALRUS_OK);
	ck_assert_ptr_eq(again, users);
	ck_assert_str_eq(walrus_space_name(users), "users");
	char **names;
	size_t n;
	ck_assert_int_eq(walrus_space_list(db, &names, &n), WALRUS_OK);
	ck_assert_uint_eq(n, 2);
	ck_assert_str_eq(names[0], "index");
	ck_assert_str_eq(names[1], "users");
	ck_assert_ptr_null(names[2]);
	walrus_free(names);
	ck_assert_int_eq(tu_stat(db, "\"spaces\"", "count"), 2);
	ck_assert_int_eq(tu_stat(db, "\"spaces\"", "keys"), 2);
	ck_assert_int_eq(walrus_verify(db, NULL, NULL), WALRUS_OK);
	tu_close_and_wait(db);
	/* Kept across a restart (the end-of-recovery checkpoint and none). */
	db = tu_open(dir, opts());
	ck_assert_int_eq(walrus_space_open(db, "users", 0, &users), WALRUS_OK);
	ck_assert_str_eq(get_in(db, users, "u2", b, sizeof(b)), "x");
	ck_assert_str_eq(get_in(db, users, "k", b, sizeof(b)), "-");
	tu_close_and_wait(db);
}
END_TEST

START_TEST(bad_names_and_missing_spaces)
{
	walrus *db = tu_open(dir, opts());
	walrus_space *sp = NULL;
	char longname[80];
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	ck_assert_int_eq(walrus_space_create(db, ""), WALRUS_EINVAL);
	ck_assert_int_eq(walrus_space_create(db, "a/b"), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "a/b"));
	ck_assert_int_eq(walrus_space_create(db, longname), WALRUS_EINVAL);
	ck_assert_int_eq(walrus_space_open(db, "nope", 0, &sp), WALRUS_ENOTFOUND);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "no key space \"nope\""));
	ck_assert_ptr_null(sp);
	ck_assert_int_eq(walrus_space_drop(db, "nope"), WALRUS_ENOTFOUND);
	ck_assert_int_eq(walrus_space_open(db, "x", 0x8, &sp), WALRUS_EINVAL);
	ck_assert_int_eq(walrus_space_create(db, "q"), WALRUS_OK);
	ck_assert_int_eq(walrus_space_create(db, "q"), WALRUS_EEXIST);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "\"q\" exists"));
	/* Another handle's space handle. */
	walrus *other = tu_open(dir, opts());
	walrus_space *q = space(other, "q");
	ck_assert_int_eq(walrus_put_in(db, q, "k", 1, "v", 1, 0), WALRUS_EMISUSE);
	ck_assert_int_eq(walrus_iter_open_in(db, q, NULL, 0, NULL, 0, &(walrus_iter *){NULL}),
	                 WALRUS_EMISUSE);
	walrus_close(other);
	tu_close_and_wait(db);
}
END_TEST

/* ---------------------------------------------------------------- batches and transactions */

START_TEST(batch_and_txn_span_spaces)
{
	walrus *db = tu_open(dir, opts());
	walrus_space *a = space(db, "a"), *b = space(db, "b");
	walrus_batch *bt = walrus_batch_new();
	ck_assert_int_eq(walrus_batch_put_in(bt, a, "k", 1, "A", 1), WALRUS_OK);
	ck_assert_int_eq(walrus_batch_put_in(bt, b, "k", 1, "B", 1), WALRUS_OK);
	ck_assert_int_eq(walrus_batch_put(bt, "k", 1, "D", 1), WALRUS_OK);
	ck_assert_int_eq(walrus_batch_commit(db, bt, WALRUS_SYNC), WALRUS_OK);
	walrus_batch_free(bt);
	char v[64];
	ck_assert_str_eq(get_in(db, a, "k", v, sizeof(v)), "A");
	ck_assert_str_eq(get_in(db, b, "k", v, sizeof(v)), "B");
	ck_assert_str_eq(get_in(db, NULL, "k", v, sizeof(v)), "D");
	/* A snapshot sees each space as of its moment. */
	walrus_snapshot *s;
	ck_assert_int_eq(walrus_snapshot_take(db, &s), WALRUS_OK);
	put_in(db, a, "k", "A2");
	void *val;
	size_t vl;
	ck_assert_int_eq(walrus_get_at_in(db, s, a, "k", 1, &val, &vl), WALRUS_OK);
	ck_assert_int_eq((int)vl, 1);
	ck_assert_int_eq(memcmp(val, "A", 1), 0);
	walrus_free(val);
	ck_assert_int_eq(walrus_get_at_in(db, s, b, "k", 1, &val, &vl), WALRUS_OK);
	ck_assert_int_eq(memcmp(val, "B", 1), 0);
	walrus_free(val);
	ck_assert_int_eq(walrus_get_into_at_in(db, s, a, "k", 1, v, sizeof(v), &vl), WALRUS_OK);
	ck_assert_int_eq(memcmp(v, "A", 1), 0);
	walrus_snapshot_release(s);
	/* A transaction writes both spaces; the same key in another space is
	 * another key (no conflict), the same key in the same space is one. */
	walrus_txn *t, *u;
	ck_assert_int_eq(walrus_txn_begin(db, 0, &t), WALRUS_OK);
	ck_assert_int_eq(walrus_txn_get_into_in(t, a, "k", 1, v, sizeof(v), &vl), WALRUS_OK);
	ck_assert_int_eq((int)vl, 2);
	ck_assert_int_eq(walrus_txn_put_in(t, b, "k", 1, "B3", 2), WALRUS_OK);
	ck_assert_int_eq(walrus_txn_put_in(t, a, "n", 1, "N", 1), WALRUS_OK);
	put_in(db, b, "other", "x"); /* not read by t */
	ck_assert_int_eq(walrus_put(db, "k", 1, "D2", 2, WALRUS_SYNC), WALRUS_OK); /* default k */
	ck_assert_int_eq(walrus_txn_commit(t, WALRUS_SYNC), WALRUS_OK);
	walrus_txn_free(t);
	ck_assert_str_eq(get_in(db, b, "k", v, sizeof(v)), "B3");
	ck_assert_str_eq(get_in(db, a, "n", v, sizeof(v)), "N");
	ck_assert_int_eq(walrus_txn_begin(db, 0, &u), WALRUS_OK);
	ck_assert_int_eq(walrus_txn_get_in(u, a, "k", 1, &val, &vl), WALRUS_OK);
	walrus_free(val);
	ck_assert_int_eq(walrus_txn_put_in(u, a, "z", 1, "Z", 1), WALRUS_OK);
	put_in(db, a, "k", "A3");
	ck_assert_int_eq(walrus_txn_commit(u, WALRUS_SYNC), WALRUS_ECONFLICT);
	walrus_txn_free(u);
	ck_assert_str_eq(get_in(db, a, "z", v, sizeof(v)), "-");
	/* A transaction's iterator sees its own writes of that space only. */
	ck_assert_int_eq(walrus_txn_begin(db, 0, &t), WALRUS_OK);
	ck_assert_int_eq(walrus_txn_put_in(t, b, "bb", 2, "1", 1), WALRUS_OK);
	ck_assert_int_eq(walrus_txn_put_in(t, a, "aa", 2, "1", 1), WALRUS_OK);
	walrus_iter *it;
	ck_assert_int_eq(walrus_txn_iter_open_in(t, b, NULL, 0, NULL, 0, &it), WALRUS_OK);
	int seen = 0;
	while (walrus_iter_valid(it)) {
		const void *k;
		size_t kl;
		walrus_iter_key(it, &k, &kl);
		ck_assert_msg(!(kl == 2 && memcmp(k, "aa", 2) == 0), "a's write in b's scan");
		seen++;
		ck_assert_int_eq(walrus_iter_next(it), WALRUS_OK);
	}
	ck_assert_int_eq(seen, 3); /* bb, k, other */
	walrus_iter_close(it);
	ck_assert_int_eq(walrus_txn_commit(t, WALRUS_SYNC), WALRUS_OK);
	walrus_txn_free(t);
	ck_assert_int_eq(walrus_verify(db, NULL, NULL), WALRUS_OK);
	tu_close_and_wait(db);
}
END_TEST

#define CRASH_KEYS 40
#define CRASH_VLEN 1500

/* The writer: batches of CRASH_KEYS keys in each of three spaces and the
 * default one (several WAL records each), durable; reports each on @fd. */
static int crash_writer(void *arg)
{
	int fd = *(int *)arg;
	walrus *db;
	walrus_opts *o = opts();
	int orc = walrus_open(dir, o, &db);
	walrus_opts_free(o);
	if (orc != WALRUS_OK)
		return 2;
	walrus_space *sp[3];
	const char *names[3] = {"s0", "s1", "s2"};
	for (int i = 0; i < 3; i++)
		if (walrus_space_open(db, names[i], WALRUS_SPACE_CREATE, &sp[i]) != WALRUS_OK)
			return 3;
	char v[CRASH_VLEN];
	for (uint32_t gen = 1;; gen++) {
		walrus_batch *b = walrus_batch_new();
		memset(v, 'a' + (int)(gen % 26), sizeof(v));
		memcpy(v, &gen, sizeof(gen));
		for (int k = 0; k < CRASH_KEYS; k++) {
			char key[16];
			int kl = snprintf(key, sizeof(key), "k%03d", k);
			for (int i = 0; i < 3; i++)
				if (walrus_batch_put_in(b, sp[i], key, (size_t)kl, v, sizeof(v)) !=
				    0)
					return 4;
			if (walrus_batch_put(b, key, (size_t)kl, v, sizeof(v)) != 0)
				return 4;
		}
		if (walrus_batch_commit(db, b, WALRUS_SYNC) != WALRUS_OK)
			return 5;
		walrus_batch_free(b);
		if (write(fd, &gen, sizeof(gen)) != sizeof(gen))
			return 6;
	}
}

/* Every key of every space holds the same generation, at least @acked. */
static void check_one_generation(walrus *db, uint32_t acked)
{
	walrus_space *sp[4] = {NULL};
	for (int i = 0; i < 3; i++) {
		char name[4];
		snprintf(name, sizeof(name), "s%d", i);
		ck_assert_int_eq(walrus_space_open(db, name, 0, &sp[i + 1]), WALRUS_OK);
	}
	uint32_t first = 0;
	for (int s = 0; s < 4; s++) {
		for (int k = 0; k < CRASH_KEYS; k++) {
			char key[16], v[CRASH_VLEN];
			size_t vl;
			int kl = snprintf(key, sizeof(key), "k%03d", k);
			ck_assert_int_eq(
			    walrus_get_into_in(db, sp[s], key, (size_t)kl, v, sizeof(v), &vl),
			    WALRUS_OK);
			uint32_t gen;
			memcpy(&gen, v, sizeof(gen));
			if (s == 0 && k == 0)
				first = gen;
			ck_assert_msg(gen == first, "space %d key %d has generation %u, another %u",
			              s, k, gen, first);
		}
	}
	ck_assert_msg(first >= acked, "generation %u acknowledged, %u recovered", acked, first);
}

START_TEST(batch_across_spaces_atomic_across_crash)
{
	for (int round = 0; round < 3; round++) {
		int pfd[2];
		ck_assert_int_eq(pipe(pfd), 0);
		pid_t child = tu_fork(crash_writer, &pfd[1]);
		close(pfd[1]);
		uint32_t acked = 0, gen;
		/* Let it commit a few batches, a different number each round. */
		for (int i = 0; i < 3 + 4 * round; i++) {
			ck_assert_int_eq(read(pfd[0], &gen, sizeof(gen)), (ssize_t)sizeof(gen));
			acked = gen;
		}
		walrus *probe = tu_open(dir, opts());
		pid_t sup = walrus_supervisor_pid(probe);
		ck_assert_int_eq(kill(sup, SIGKILL), 0);
		ck_assert_int_eq(kill(child, SIGKILL), 0);
		while (read(pfd[0], &gen, sizeof(gen)) == (ssize_t)sizeof(gen))
			acked = gen; /* acknowledged before the kill */
		close(pfd[0]);
		ck_assert_int_eq(waitpid(child, NULL, 0), child);
		tu_wait_gone(sup);
		walrus_close(probe);
		walrus *db = tu_open(dir, opts());
		check_one_generation(db, acked);
		ck_assert_int_eq(walrus_verify(db, NULL, NULL), WALRUS_OK);
		tu_close_and_wait(db);
	}
}
END_TEST

/* ---------------------------------------------------------------- drop */

#define READERS 4

typedef struct reader_arg {
	_Atomic long mine; /* this reader's reads */
	_Atomic long *reads;
	_Atomic int *alive;
	int last_rc;
	char msg[256];
} reader_arg;

/* Reads and scans space "hot" through its own handle until it is dropped. */
static void *reader(void *p)
{
	reader_arg *a = p;
	walrus *db;
	walrus_opts *o = opts();
	int orc = walrus_open(dir, o, &db);
	walrus_opts_free(o);
	if (orc != WALRUS_OK) {
		a->last_rc = -1000;
		atomic_fetch_sub(a->alive, 1);
		return NULL;
	}
	walrus_space *sp;
	int rc = walrus_space_open(db, "hot", 0, &sp);
	for (long i = 0; rc == WALRUS_OK; i++) {
		char v[256];
		size_t vl;
		char key[16];
		int kl = snprintf(key, sizeof(key), "k%03ld", i % 100);
		rc = walrus_get_into_in(db, sp, key, (size_t)kl, v, sizeof(v), &vl);
		walrus_iter *it = NULL;
		if (rc == WALRUS_OK && i % 10 == 0) {
			rc = walrus_iter_open_in(db, sp, NULL, 0, NULL, 0, &it);
			while (rc == WALRUS_OK && walrus_iter_valid(it))
				rc = walrus_iter_next(it);
			walrus_iter_close(it);
		}
		if (rc == WALRUS_OK) {
			atomic_fetch_add(a->reads, 1);
			atomic_fetch_add(&a->mine, 1);
		}
	}
	a->last_rc = rc;
	snprintf(a->msg, sizeof(a->msg), "%s", walrus_errmsg());
	walrus_close(db);
	atomic_fetch_sub(a->alive, 1);
	return NULL;
}

START_TEST(drop_under_concurrent_readers)
{
	walrus *db = tu_open(dir, opts());
	int before = space_files();
	walrus_space *hot = space(db, "hot");
	char v[200];
	memset(v, 'v', sizeof(v));
	for (int i = 0; i < 100; i++) {
		char key[16];
		int kl = snprintf(key, sizeof(key), "k%03d", i);
		ck_assert_int_eq(
		    walrus_put_in(db, hot, key, (size_t)kl, v, sizeof(v), WALRUS_ASYNC), WALRUS_OK);
	}
	ck_assert_int_eq(walrus_checkpoint(db), WALRUS_OK); /* pages in the file too */
	ck_assert_int_eq(space_files(), before + 1);
	_Atomic long reads = 0;
	_Atomic int alive = READERS;
	pthread_t th[READERS];
	reader_arg ra[READERS];
	for (int i = 0; i < READERS; i++) {
		ra[i] = (reader_arg){.reads = &reads, .alive = &alive};
		ck_assert_int_eq(pthread_create(&th[i], NULL, reader, &ra[i]), 0);
	}
	/* Every reader inside the space's pages, many times over. */
	for (int i = 0; i < READERS && atomic_load(&alive) == READERS; i++)
		while (atomic_load(&ra[i].mine) < 100 && atomic_load(&alive) == READERS)
			sched_yield();
	while (atomic_load(&reads) < 2000 && atomic_load(&alive) == READERS)
		sched_yield();
	for (int i = 0; i < READERS && atomic_load(&alive) < READERS; i++)
		ck_assert_msg(ra[i].last_rc == 0, "reader %d stopped early: %d %s", i,
		              ra[i].last_rc, ra[i].msg);
	ck_assert_int_eq(walrus_space_drop(db, "hot"), WALRUS_OK);
	for (int i = 0; i < READERS; i++) {
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
		ck_assert_msg(ra[i].last_rc == WALRUS_ENOTFOUND, "reader %d ended with %d: %s", i,
		              ra[i].last_rc, ra[i].msg);
		ck_assert_msg(strstr(ra[i].msg, "\"hot\" was dropped") != NULL, "reader %d: %s", i,
		              ra[i].msg);
	}
	/* The file went back to the file system; the handle says why it fails. */
	ck_assert_int_eq(space_files(), before);
	char b[8];
	size_t vl;
	ck_assert_int_eq(walrus_get_into_in(db, hot, "k000", 4, b, sizeof(b), &vl),
	                 WALRUS_ENOTFOUND);
	ck_assert_int_eq(walrus_put_in(db, hot, "k", 1, "v", 1, 0), WALRUS_ENOTFOUND);
	/* A new space of that name starts empty. */
	walrus_space *again = space(db, "hot");
	ck_assert_ptr_ne(again, hot);
	ck_assert_str_eq(get_in(db, again, "k000", b, sizeof(b)), "-");
	/* A batch holding a write to a dropped space fails whole. */
	walrus_space *gone = space(db, "gone");
	walrus_batch *bt = walrus_batch_new();
	ck_assert_int_eq(walrus_batch_put(bt, "d", 1, "1", 1), WALRUS_OK);
	ck_assert_int_eq(walrus_batch_put_in(bt, gone, "g", 1, "1", 1), WALRUS_OK);
	ck_assert_int_eq(walrus_space_drop(db, "gone"), WALRUS_OK);
	ck_assert_int_eq(walrus_batch_commit(db, bt, WALRUS_SYNC), WALRUS_ENOTFOUND);
	ck_assert_msg(strstr(walrus_errmsg(), "key space \"gone\"") != NULL, "%s", walrus_errmsg());
	walrus_batch_free(bt);
	ck_assert_str_eq(get_in(db, NULL, "d", b, sizeof(b)), "-");
	ck_assert_int_eq(walrus_verify(db, NULL, NULL), WALRUS_OK);
	tu_close_and_wait(db);
	/* The drop is durable: gone after a restart too. */
	db = tu_open(dir, opts());
	walrus_space *sp;
	ck_assert_int_eq(walrus_space_open(db, "gone", 0, &sp), WALRUS_ENOTFOUND);
	tu_close_and_wait(db);
}
END_TEST

#ifdef WALRUS_TEST_HOOKS
/* Steps @it until a move fails (at most @max steps): its code, or 0 at the end. */
static int step_until_failure(walrus_iter *it, int max)
{
	for (int i = 0; i < max && walrus_iter_valid(it); i++) {
		int rc = walrus_iter_next(it);
		if (rc != WALRUS_OK)
			return rc;
	}
	return walrus_iter_valid(it) ? -1 : 0;
}

/*
 * Loop over io_method (0 sync, 1 io_uring).  Iterators in a space, each
 * with its look-ahead under way (read streams of the leaves ahead, in a
 * pool smaller than the space), hold nothing between their calls: a drop
 * of the space from their own handle and from another returns (the drop
 * waits for every buffer of the space to be unpinned), and their next
 * move that leaves their leaf fails with ENOTFOUND naming the space.
 */
START_TEST(drop_with_iterators_looking_ahead)
{
	walrus_opts *o = tu_instance_opts("100ms", "2MB");
	ck_assert_int_eq(walrus_opts_set(o, "io_method", _i ? "io_uring" : "sync"), WALRUS_OK);
	walrus *db = tu_open(dir, o);
	int before = space_files();
	walrus_space *sp = space(db, "scanned");
	char v[200];
	memset(v, 'v', sizeof(v));
	walrus_batch *b = walrus_batch_new();
	for (int i = 0; i < 12000; i++) {
		char key[16];
		int kl = snprintf(key, sizeof(key), "k%05d", i);
		ck_assert_int_eq(walrus_batch_put_in(b, sp, key, (size_t)kl, v, sizeof(v)),
		                 WALRUS_OK);
		if (i % 500 == 499) {
			ck_assert_int_eq(walrus_batch_commit(db, b, WALRUS_ASYNC), WALRUS_OK);
			walrus_batch_clear(b);
		}
	}
	walrus_batch_free(b);
	ck_assert_int_eq(walrus_checkpoint(db), WALRUS_OK);
	walrus_opts *o2 = tu_instance_opts("100ms", "2MB");
	ck_assert_int_eq(walrus_opts_set(o2, "io_method", _i ? "io_uring" : "sync"), WALRUS_OK);
	walrus *db2 = tu_open(dir, o2);
	walrus_space *sp2;
	ck_assert_int_eq(walrus_space_open(db2, "scanned", 0, &sp2), WALRUS_OK);
	kv_test_iter_ahead_always(true);
	long ahead0 = tu_stat(db, "\"kv\"", "scan_ahead");
	walrus_iter *it, *it2;
	ck_assert_int_eq(walrus_iter_open_in(db, sp, NULL, 0, NULL, 0, &it), WALRUS_OK);
	ck_assert_int_eq(walrus_iter_open_in(db2, sp2, "k03000", 6, NULL, 0, &it2), WALRUS_OK);
	for (int i = 0; i < 2000; i++) { /* some 50 leaves each */
		ck_assert_int_eq(walrus_iter_next(it), WALRUS_OK);
		ck_assert_int_eq(walrus_iter_next(it2), WALRUS_OK);
	}
	long ahead1 = tu_stat(db, "\"kv\"", "scan_ahead");
	ck_assert_int_gt(ahead1 - ahead0, 2 * 30);
	ck_assert_int_eq(walrus_space_drop(db, "scanned"), WALRUS_OK);
	ck_assert_int_eq(space_files(), before);
	ck_assert_int_eq(step_until_failure(it, 100), WALRUS_ENOTFOUND);
	ck_assert_msg(strstr(walrus_errmsg(), "\"scanned\" was dropped") != NULL, "%s",
	              walrus_errmsg());
	ck_assert_int_eq(step_until_failure(it2, 100), WALRUS_ENOTFOUND);
	ck_assert_msg(strstr(walrus_errmsg(), "\"scanned\" was dropped") != NULL, "%s",
	              walrus_errmsg());
	kv_test_iter_ahead_always(false);
	walrus_iter_close(it);
	walrus_iter_close(it2);
	/* Closing a handle reports pins it still holds: none. */
	ck_assert_int_eq(walrus_close(db2), WALRUS_OK);
	tu_close_and_wait(db);
}
END_TEST
#endif

/* ---------------------------------------------------------------- many spaces */

START_TEST(thousands_of_spaces_keep_fds_bounded)
{
	walrus_opts *o = tu_instance_opts("100ms", "8MB");
	ck_assert_int_eq(walrus_opts_set(o, "max_open_files", "32"), WALRUS_OK);
	walrus *db = tu_open(dir, o);
	enum { N = 2000 };
	int fds0 = 0;
	for (int i = 0; i < N; i++) {
		if (i == 1) /* the WAL, the sockets: what a process opens besides data files */
			fds0 = tu_count_fds();
		char name[16], key[16];
		snprintf(name, sizeof(name), "s%04d", i);
		walrus_space *sp = space(db, name);
		int kl = snprintf(key, sizeof(key), "key%d", i);
		ck_assert_int_eq(walrus_put_in(db, sp, key, (size_t)kl, name, strlen(name), 0),
		                 WALRUS_OK);
	}
	ck_assert_int_eq(walrus_checkpoint(db), WALRUS_OK);
	for (int i = 0; i < N; i++) {
		char name[16], key[16], v[16];
		snprintf(name, sizeof(name), "s%04d", i);
		walrus_space *sp;
		ck_assert_int_eq(walrus_space_open(db, name, 0, &sp), WALRUS_OK);
		snprintf(key, sizeof(key), "key%d", i);
		ck_assert_str_eq(get_in(db, sp, key, v, sizeof(v)), name);
	}
	/* This process's fd cache stayed within its limit, and so did the
	 * checkpointer's, which synced every file. */
	int fds = tu_count_fds();
	ck_assert_msg(fds <= fds0 + 32, "%d fds open, %d before", fds, fds0);
	pid_t ckpt;
	ck_assert_int_eq(tu_children(walrus_supervisor_pid(db), "walrus-ckpt", &ckpt, 1), 1);
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)ckpt);
	DIR *d = opendir(path);
	ck_assert_ptr_nonnull(d);
	int n = 0;
	while (readdir(d) != NULL)
		n++;
	closedir(d);
	ck_assert_msg(n < 200, "the checkpointer holds %d fds", n);
	ck_assert_int_eq(tu_stat(db, "\"spaces\"", "count"), N);
	ck_assert_int_eq(tu_stat(db, "\"spaces\"", "keys"), N);
	ck_assert_int_eq(space_files(), N);
	tu_close_and_wait(db);
}
END_TEST

/* ---------------------------------------------------------------- compaction, orphans */

START_TEST(compaction_covers_spaces)
{
	walrus *db = tu_open(dir, opts());
	walrus_space *sp = space(db, "big");
	char v[400];
	memset(v, 'x', sizeof(v));
	for (int i = 0; i < 3000; i++) {
		char key[16];
		int kl = snprintf(key, sizeof(key), "k%05d", i);
		ck_assert_int_eq(walrus_put_in(db, sp, key, (size_t)kl, v, sizeof(v), 0),
		                 WALRUS_OK);
	}
	for (int i = 0; i < 3000; i++) {
		char key[16];
		int kl = snprintf(key, sizeof(key), "k%05d", i);
		if (i % 10 != 0)
			ck_assert_int_eq(walrus_delete_in(db, sp, key, (size_t)kl, 0), WALRUS_OK);
	}
	long pages = tu_stat(db, "\"spaces\"", "pages");
	walrus_compact_stats cs;
	ck_assert_int_eq(walrus_compact(db, &cs), WALRUS_OK);
	ck_assert_uint_gt(cs.leaves_merged + cs.leaves_poured, 0);
	ck_assert_int_lt(tu_stat(db, "\"spaces\"", "pages"), pages);
	ck_assert_int_eq(walrus_verify(db, NULL, NULL), WALRUS_OK);
	void *val;
	size_t vl;
	ck_assert_int_eq(walrus_get_in(db, sp, "k00010", 6, &val, &vl), WALRUS_OK);
	ck_assert_int_eq((int)vl, (int)sizeof(v));
	walrus_free(val);
	ck_assert_int_eq(walrus_get_in(db, sp, "k00011", 6, &val, &vl), WALRUS_ENOTFOUND);
	tu_close_and_wait(db);
}
END_TEST

START_TEST(orphan_files_removed_at_start)
{
	walrus *db = tu_open(dir, opts());
	walrus_space *keep = space(db, "keep");
	put_in(db, keep, "k", "v");
	tu_close_and_wait(db);
	char path[4096];
	snprintf(path, sizeof(path), "%s/base/90000", dir);
	ck_assert_int_eq(tu_write_file(path, "", 0), 0);
	db = tu_open(dir, opts());
	struct stat st;
	ck_assert_int_eq(stat(path, &st), -1);
	char b[8];
	ck_assert_int_eq(walrus_space_open(db, "keep", 0, &keep), WALRUS_OK);
	ck_assert_str_eq(get_in(db, keep, "k", b, sizeof(b)), "v");
	/* A new space takes a number no file ever had. */
	walrus_space *fresh = space(db, "fresh");
	put_in(db, fresh, "f", "1");
	ck_assert_int_eq(space_files(), 2);
	tu_close_and_wait(db);
}
END_TEST

#ifdef WALRUS_TEST_HOOKS /* failpoints */
/* Creates space "cut" in this process with failpoints @arg (testsupport.h). */
static int create_with_failpoint(void *arg)
{
	walrus_opts *o = opts();
	walrus *db;
	int rc = walrus_open(dir, o, &db);
	walrus_opts_free(o);
	if (rc != WALRUS_OK || ts_failpoint_set(arg) != WALRUS_OK)
		return 2;
	rc = walrus_space_create(db, "cut");
	walrus_close(db);
	return rc == WALRUS_ENOSPC ? 0 : 3;
}

START_TEST(failed_creations_leave_nothing)
{
	walrus *db = tu_open(dir, opts());
	int files = space_files();
	/* The space's file cannot be made (every open of it fails): nothing
	 * named, nothing left. */
	ck_assert_int_eq(tu_wait(tu_fork(create_with_failpoint, "open:ENOSPC:/base/16*0")), 0);
	ck_assert_int_eq(space_files(), files);
	walrus_space *sp;
	ck_assert_int_eq(walrus_space_open(db, "cut", 0, &sp), WALRUS_ENOTFOUND);
	char **names;
	size_t n;
	ck_assert_int_eq(walrus_space_list(db, &names, &n), WALRUS_OK);
	ck_assert_uint_eq(n, 0);
	walrus_free(names);
	/* A process killed between the file and the commit: an orphan, gone at
	 * the next start, and the name still free. */
	pid_t child = tu_fork(create_with_failpoint, "fsync:KILL:/base/1");
	ck_assert_int_eq(waitpid(child, NULL, 0), child);
	ck_assert_int_gt(space_files(), files);
	tu_close_and_wait(db);
	db = tu_open(dir, opts());
	ck_assert_int_eq(space_files(), files);
	ck_assert_int_eq(walrus_space_open(db, "cut", 0, &sp), WALRUS_ENOTFOUND);
	sp = space(db, "cut");
	put_in(db, sp, "k", "v");
	ck_assert_int_eq(walrus_verify(db, NULL, NULL), WALRUS_OK);
	tu_close_and_wait(db);
}
END_TEST
#endif

static Suite *spaces_suite(void)
{
	Suite *s = suite_create("spaces");
	TCase *tc = tcase_create("spaces");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, spaces_are_isolated);
	tcase_add_test(tc, bad_names_and_missing_spaces);
	tcase_add_test(tc, batch_and_txn_span_spaces);
	tcase_add_test(tc, batch_across_spaces_atomic_across_crash);
	tcase_add_test(tc, drop_under_concurrent_readers);
#ifdef WALRUS_TEST_HOOKS
	tcase_add_loop_test(tc, drop_with_iterators_looking_ahead, 0, 2);
#endif
	tcase_add_test(tc, thousands_of_spaces_keep_fds_bounded);
	tcase_add_test(tc, compaction_covers_spaces);
	tcase_add_test(tc, orphan_files_removed_at_start);
#ifdef WALRUS_TEST_HOOKS
	tcase_add_test(tc, failed_creations_leave_nothing);
#endif
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(spaces_suite());
}
