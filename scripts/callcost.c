/*
 * callcost.c - the cost of one walrus call in one thread, in wall time and in
 * the thread's CPU time (CLOCK_THREAD_CPUTIME_ID, which on a shared machine
 * does not count the time other processes ran instead): N asynchronous puts
 * of keys 0..N-1 in order (fillseq's), then N gets of random keys (readrandom's
 * stream), on a new data directory DIR. Compiled by scripts/bench_threads.py
 * against two builds' libwalrus_core.a and include/, to compare them.
 *
 * usage: callcost DIR N    (prints one JSON line; exit 1 on any error)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "walrus.h"

static uint64_t clock_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void fail(const char *what, int rc)
{
	fprintf(stderr, "callcost: %s: %s (%s)\n", what, walrus_errmsg(), walrus_strerror(rc));
	exit(1);
}

static void make_key(uint64_t i, char *k)
{
	for (int j = 15; j >= 0; j--) {
		k[j] = (char)('0' + i % 10);
		i /= 10;
	}
}

int main(int argc, char **argv)
{
	walrus_opts *o = walrus_opts_new();
	walrus *db;
	char k[16], v[100], buf[128];
	uint64_t n, x = 0x9E3779B97F4A7C15ull, w0, c0, w1, c1, w2, c2;
	int rc;

	if (argc != 3 || (n = strtoull(argv[2], NULL, 10)) == 0) {
		fprintf(stderr, "usage: callcost DIR N\n");
		return 1;
	}
	if (o == NULL || walrus_opts_set(o, "create_if_missing", "on") != WALRUS_OK ||
	    walrus_opts_set(o, "shared_buffers", "256MB") != WALRUS_OK)
		fail("options", WALRUS_EINVAL);
	if ((rc = walrus_open(argv[1], o, &db)) != WALRUS_OK)
		fail("walrus_open", rc);
	for (int j = 0; j < 100; j++)
		v[j] = (char)(' ' + (j * 7) % 95);
	w0 = clock_ns(CLOCK_MONOTONIC);
	c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	for (uint64_t i = 0; i < n; i++) {
		make_key(i, k);
		if ((rc = walrus_put(db, k, sizeof(k), v, sizeof(v), WALRUS_ASYNC)) != WALRUS_OK)
			fail("walrus_put", rc);
	}
	w1 = clock_ns(CLOCK_MONOTONIC);
	c1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	for (uint64_t i = 0; i < n; i++) {
		size_t vlen = 0;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		make_key(x % n, k);
		rc = walrus_get_into(db, k, sizeof(k), buf, sizeof(buf), &vlen);
		if (rc != WALRUS_OK || vlen != sizeof(v))
			fail("walrus_get_into", rc);
	}
	w2 = clock_ns(CLOCK_MONOTONIC);
	c2 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	if ((rc = walrus_close(db)) != WALRUS_OK)
		fail("walrus_close", rc);
	walrus_opts_free(o);
	printf("{\"n\":%" PRIu64 ",\"put_wall_ns\":%.1f,\"put_cpu_ns\":%.1f,\"get_wall_ns\":%.1f,"
	       "\"get_cpu_ns\":%.1f}\n",
	       n, (double)(w1 - w0) / (double)n, (double)(c1 - c0) / (double)n,
	       (double)(w2 - w1) / (double)n, (double)(c2 - c1) / (double)n);
	return 0;
}
