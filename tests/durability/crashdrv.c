/*
 * crashdrv.c - a client of the durability suites: writes through the public
 * API (include/walrus.h) in one of several modes and tells, on stdout, what
 * it is about to commit and what was acknowledged, so that a test that
 * kills it (or the instance, or the power) can check the state recovered.
 *
 *   crashdrv -D DIR [-o name=value ...] --client NAME --mode sync|batch|async
 *            [--keyspace SPACE] [--seed S] [--keys K] [--large PERCENT] [--rate N]
 *
 * Keys are SPACE/kNNNN (K of them, default 200; SPACE defaults to NAME):
 * each client owns its key space (a later client may take it over, with a
 * new NAME, once the test knows what it holds), so
 * so that what the recovered store holds for them must be the state after
 * a prefix of this client's commits (the WAL is one ordered stream, and
 * recovery replays a prefix of it).  Modes:
 *   sync   one put or delete per commit, WALRUS_SYNC
 *   batch  atomic batches of 2..16 distinct keys (puts and a few deletes),
 *          WALRUS_SYNC
 *   async  batches of 1..16, WALRUS_ASYNC (a crash may lose the last ones,
 *          never half of one); every 8th is followed by walrus_sync, which
 *          acknowledges it and all before it
 * Values: "NAME:SEQ:KEYINDEX:" then LEN - that many copies of one letter
 * ('a' + SEQ % 26); LEN is on the line, so the test can rebuild every value.
 * PERCENT of the puts (default 5) are 3..20 kB, stored in overflow pages.
 *
 * Output, one line per commit, flushed before the call:
 *   B SEQ OP OP ...      OP = P:KEYINDEX:LEN or D:KEYINDEX
 * and after it returned:
 *   A SEQ                (sync modes: durable, acknowledged)
 *   R SEQ                (async: returned, not yet durable)
 *   S SEQ                (async: walrus_sync returned: SEQ and all before it durable)
 *   E SEQ CODE MESSAGE   an error; the driver exits with status 3
 * A delete of an absent key returns WALRUS_ENOTFOUND (nothing written):
 * that is an acknowledgement too.  --rate N sleeps 1/N s between commits
 * (0, the default: as fast as it can).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "walrus.h"

static uint64_t rng_state;

static uint64_t rnd(void)
{
	/* splitmix64 */
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static unsigned below(unsigned n)
{
	return (unsigned)(rnd() % n);
}

static void usage(void)
{
	fprintf(stderr, "usage: crashdrv -D DIR [-o name=value ...] --client NAME "
	                "--mode sync|batch|async [--keyspace SPACE] [--seed S] [--keys K] "
	                "[--large PCT] [--rate N]\n");
	exit(2);
}

typedef struct op {
	char kind; /* 'P' or 'D' */
	unsigned key;
	unsigned len;
} op;

static size_t make_value(char *buf, const char *name, unsigned long long seq, unsigned key,
                         unsigned len)
{
	int n = snprintf(buf, 64, "%s:%llu:%u:", name, seq, key);
	size_t total = (size_t)n + len;
	memset(buf + n, 'a' + (int)(seq % 26), len);
	return total;
}

int main(int argc, char **argv)
{
	const char *dir = NULL, *name = NULL, *mode = NULL, *space = NULL;
	unsigned keys = 200, large = 5;
	unsigned long long seed = 1;
	double rate = 0;
	walrus_opts *opts = walrus_opts_new();
	if (opts == NULL)
		return 3;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (i + 1 >= argc)
			usage();
		const char *v = argv[++i];
		if (strcmp(a, "-D") == 0)
			dir = v;
		else if (strcmp(a, "-o") == 0) {
			char *eq = strchr(v, '=');
			if (eq == NULL)
				usage();
			char key[128];
			snprintf(key, sizeof(key), "%.*s", (int)(eq - v), v);
			if (walrus_opts_set(opts, key, eq + 1) != WALRUS_OK) {
				fprintf(stderr, "crashdrv: -o %s: %s\n", v, walrus_errmsg());
				return 2;
			}
		} else if (strcmp(a, "--client") == 0)
			name = v;
		else if (strcmp(a, "--keyspace") == 0)
			space = v;
		else if (strcmp(a, "--mode") == 0)
			mode = v;
		else if (strcmp(a, "--seed") == 0)
			seed = strtoull(v, NULL, 10);
		else if (strcmp(a, "--keys") == 0)
			keys = (unsigned)strtoul(v, NULL, 10);
		else if (strcmp(a, "--large") == 0)
			large = (unsigned)strtoul(v, NULL, 10);
		else if (strcmp(a, "--rate") == 0)
			rate = strtod(v, NULL);
		else
			usage();
	}
	if (dir == NULL || name == NULL || mode == NULL || keys < 16 || keys > 100000)
		usage();
	if (space == NULL)
		space = name;
	bool sync = strcmp(mode, "async") != 0;
	int minb = 1, maxb = 1;
	if (strcmp(mode, "batch") == 0)
		minb = 2, maxb = 16;
	else if (strcmp(mode, "async") == 0)
		minb = 1, maxb = 16;
	else if (strcmp(mode, "sync") != 0)
		usage();
	rng_state = seed;

	walrus *db;
	int rc = walrus_open(dir, opts, &db);
	if (rc != WALRUS_OK) {
		printf("E 0 %d open: %s\n", rc, walrus_errmsg());
		fflush(stdout);
		return 3;
	}
	walrus_batch *b = walrus_batch_new();
	char *val = malloc(64 + 20480);
	unsigned char *used = calloc(keys, 1);
	if (b == NULL || val == NULL || used == NULL)
		return 3;
	op ops[16];
	char line[16 * 32 + 64];
	for (unsigned long long seq = 1;; seq++) {
		int n = minb + (int)below((unsigned)(maxb - minb + 1));
		int len = snprintf(line, sizeof(line), "B %llu", seq);
		walrus_batch_clear(b);
		for (int i = 0; i < n; i++) {
			unsigned k;
			do
				k = below(keys);
			while (used[k]);
			used[k] = 1;
			ops[i].key = k;
			ops[i].kind = below(100) < 15 ? 'D' : 'P';
			ops[i].len = below(100) < large ? 3000 + below(17000) : 1 + below(200);
			if (ops[i].kind == 'P')
				len += snprintf(line + len, sizeof(line) - (size_t)len, " P:%u:%u",
				                k, ops[i].len);
			else
				len += snprintf(line + len, sizeof(line) - (size_t)len, " D:%u", k);
		}
		for (int i = 0; i < n; i++)
			used[ops[i].key] = 0;
		puts(line);
		fflush(stdout);

		char key[128];
		if (n == 1 && sync) {
			/* the single-write calls, not a batch */
			int kl = snprintf(key, sizeof(key), "%s/k%04u", space, ops[0].key);
			if (ops[0].kind == 'P') {
				size_t vl = make_value(val, name, seq, ops[0].key, ops[0].len);
				rc = walrus_put(db, key, (size_t)kl, val, vl, WALRUS_SYNC);
			} else {
				rc = walrus_delete(db, key, (size_t)kl, WALRUS_SYNC);
				if (rc == WALRUS_ENOTFOUND)
					rc = WALRUS_OK;
			}
		} else {
			for (int i = 0; i < n; i++) {
				int kl = snprintf(key, sizeof(key), "%s/k%04u", space, ops[i].key);
				if (ops[i].kind == 'P') {
					size_t vl =
					    make_value(val, name, seq, ops[i].key, ops[i].len);
					rc = walrus_batch_put(b, key, (size_t)kl, val, vl);
				} else {
					rc = walrus_batch_delete(b, key, (size_t)kl);
				}
				if (rc != WALRUS_OK)
					break;
			}
			if (rc == WALRUS_OK)
				rc = walrus_batch_commit(db, b, sync ? WALRUS_SYNC : WALRUS_ASYNC);
		}
		if (rc != WALRUS_OK) {
			printf("E %llu %d %s\n", seq, rc, walrus_errmsg());
			fflush(stdout);
			return 3;
		}
		printf("%c %llu\n", sync ? 'A' : 'R', seq);
		fflush(stdout);
		if (!sync && seq % 8 == 0) {
			rc = walrus_sync(db);
			if (rc != WALRUS_OK) {
				printf("E %llu %d walrus_sync: %s\n", seq, rc, walrus_errmsg());
				fflush(stdout);
				return 3;
			}
			printf("S %llu\n", seq);
			fflush(stdout);
		}
		if (rate > 0) {
			struct timespec ts = {0, (long)(1e9 / rate)};
			nanosleep(&ts, NULL);
		}
	}
}
