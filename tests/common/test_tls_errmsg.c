/*
 * test_tls_errmsg.c - the last-error message is per thread (error.c).
 *
 * Eight threads set and read back their own messages at the same time; each
 * must only ever read its own text.  In the `threads` suite, which `make
 * tsan` runs under ThreadSanitizer.
 */
#include "common/common.h"
#include "testutil.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#define NTHREADS 8
#define ROUNDS   2000

typedef struct worker {
	pthread_t tid;
	int id;
	int bad;           /* reads that were not this thread's last message */
	char first[128];   /* the first bad read */
	const char *where; /* walrus_errmsg() of this thread: its own buffer */
} worker;

static pthread_barrier_t start, all_set;

static void check_own(worker *w, const char *want)
{
	const char *got = walrus_errmsg();
	if (strcmp(got, want) != 0 && w->bad++ == 0)
		snprintf(w->first, sizeof(w->first), "wanted \"%s\", read \"%s\"", want, got);
}

static void *run(void *arg)
{
	worker *w = arg;
	char want[64];
	pthread_barrier_wait(&start);
	for (int i = 0; i < ROUNDS; i++) {
		snprintf(want, sizeof(want), "thread %d message %d", w->id, i);
		if (wr_error(WALRUS_EIO, "thread %d message %d", w->id, i) != WALRUS_EIO)
			w->bad++;
		if (i % 16 == 0)
			sched_yield(); /* let the others write theirs in between */
		check_own(w, want);
	}
	/* Every thread has written its last message: still ours. */
	pthread_barrier_wait(&all_set);
	check_own(w, want);
	w->where = walrus_errmsg();
	wr_error_clear();
	check_own(w, "");
	return NULL;
}

START_TEST(test_errmsg_per_thread)
{
	worker ws[NTHREADS];
	ck_assert_int_eq(pthread_barrier_init(&start, NULL, NTHREADS), 0);
	ck_assert_int_eq(pthread_barrier_init(&all_set, NULL, NTHREADS), 0);
	wr_error(WALRUS_EINVAL, "main thread's message");
	for (int i = 0; i < NTHREADS; i++) {
		ws[i] = (worker){.id = i};
		ck_assert_int_eq(pthread_create(&ws[i].tid, NULL, run, &ws[i]), 0);
	}
	for (int i = 0; i < NTHREADS; i++)
		ck_assert_int_eq(pthread_join(ws[i].tid, NULL), 0);
	for (int i = 0; i < NTHREADS; i++) {
		ck_assert_msg(ws[i].bad == 0, "thread %d: %d bad reads, first: %s", i, ws[i].bad,
		              ws[i].first);
		for (int j = 0; j < i; j++)
			ck_assert_ptr_ne(ws[i].where, ws[j].where);
		ck_assert_ptr_ne(ws[i].where, walrus_errmsg());
	}
	ck_assert_str_eq(walrus_errmsg(), "main thread's message");
	pthread_barrier_destroy(&start);
	pthread_barrier_destroy(&all_set);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tls-errmsg");
	TCase *tc = tcase_create("tls-errmsg");

	tcase_add_test(tc, test_errmsg_per_thread);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
