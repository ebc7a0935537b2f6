/*
 * repro_reopen_race.c - regression test of an engine bug that
 * test_history.py --case crash found (fixed by commit 228e311), run by
 * test_reopen_race.py.
 *
 * After a crash restart every handle of a process is dead, and each thread
 * closes its own and opens again.  include/walrus.h: a call on a dead
 * handle returns WALRUS_ERESTART; src/engine/client.c drop_dead_attachment:
 * "the old handles keep their memory and report WALRUS_ERESTART until
 * closed".  But walrus_txn_begin, walrus_snapshot_take and walrus_backup
 * first checked the process's attachment (api_handle_check: C.attached,
 * then shm_hdr()->state) outside the call bracket that drop_dead_attachment
 * waits for (calls_drained).  So while another thread of the process
 * reopened (drop_dead_attachment: shm_detach unmaps the old shared memory,
 * C.attached = false, then a new attach):
 *   - walrus_txn_begin on a dead handle returned WALRUS_EINVAL ("the
 *     database handle is not open") instead of WALRUS_ERESTART, and
 *   - it could read shm_hdr()->state after the munmap: SIGSEGV in the
 *     caller's process (instance_check, src/engine/client.c, beside another
 *     thread in drop_dead_attachment -> shm_detach -> munmap).
 *
 * Thread A calls walrus_txn_begin on its handle in a loop; thread B kills
 * the instance's supervisor (SIGKILL), waits until its own handle reports
 * WALRUS_ERESTART, closes it and opens again, while A goes on calling on
 * its dead handle; then A closes and reopens too.  Each round, every result
 * A saw other than WALRUS_OK (before the crash) and WALRUS_ERESTART is
 * counted.  Exit 0 if there were none, 1 otherwise (before the fix: about
 * 400,000 EINVAL per round, or a SIGSEGV).
 *
 *   repro_reopen_race DIR [ROUNDS]     (DIR: a new or scratch data directory)
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "walrus.h"

static const char *dir;
static atomic_int phase; /* 0 run, 1 B reopened: A stops and reopens, 2 A done */
static walrus_opts *opts;

static int open_retry(walrus **db)
{
	for (int i = 0; i < 500; i++) {
		int rc = walrus_open(dir, opts, db);
		if (rc != WALRUS_ERESTART && rc != WALRUS_ESHUTDOWN && rc != WALRUS_EPANIC)
			return rc;
		struct timespec ts = {0, 10 * 1000000L};
		nanosleep(&ts, NULL);
	}
	return WALRUS_ERESTART;
}

typedef struct counts {
	atomic_long ok, restart, other;
	int other_rc;
	char other_msg[256];
} counts;

static void *thread_a(void *arg)
{
	counts *c = arg;
	walrus *db;
	int rc = open_retry(&db);
	if (rc != WALRUS_OK) {
		fprintf(stderr, "A: open: %s\n", walrus_errmsg());
		exit(2);
	}
	while (atomic_load(&phase) == 0) {
		walrus_txn *t;
		rc = walrus_txn_begin(db, 0, &t);
		if (rc == WALRUS_OK) {
			c->ok++;
			walrus_txn_free(t);
		} else if (rc == WALRUS_ERESTART) {
			c->restart++;
		} else {
			if (c->other++ == 0) {
				c->other_rc = rc;
				snprintf(c->other_msg, sizeof(c->other_msg), "%s", walrus_errmsg());
			}
		}
	}
	(void)walrus_close(db); /* a dead handle */
	atomic_store(&phase, 2);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: repro_reopen_race DIR [ROUNDS]\n");
		return 2;
	}
	dir = argv[1];
	int rounds = argc > 2 ? atoi(argv[2]) : 5;
	opts = walrus_opts_new();
	if (opts == NULL || walrus_opts_set(opts, "create_if_missing", "on") != WALRUS_OK)
		return 2;
	int bad = 0;
	for (int r = 0; r < rounds; r++) {
		walrus *db;
		int rc = open_retry(&db);
		if (rc != WALRUS_OK) {
			fprintf(stderr, "B: open: %s\n", walrus_errmsg());
			return 2;
		}
		static counts c;
		memset(&c, 0, sizeof(c));
		atomic_store(&phase, 0);
		pthread_t a;
		if (pthread_create(&a, NULL, thread_a, &c) != 0)
			return 2;
		/* Let A run on a live instance first: its first success. */
		while (c.ok == 0 && c.restart == 0 && c.other == 0) {
			struct timespec ts = {0, 1000000L};
			nanosleep(&ts, NULL);
		}
		pid_t sup = (pid_t)walrus_supervisor_pid(db);
		if (sup <= 0 || kill(sup, SIGKILL) != 0) {
			fprintf(stderr, "B: kill supervisor %d: %s\n", (int)sup, strerror(errno));
			return 2;
		}
		/* B's handle learns of the death, then B reopens beside A's dead handle. */
		walrus_txn *t;
		while ((rc = walrus_txn_begin(db, 0, &t)) == WALRUS_OK)
			walrus_txn_free(t);
		(void)walrus_close(db);
		rc = open_retry(&db);
		if (rc != WALRUS_OK) {
			fprintf(stderr, "B: reopen: %s\n", walrus_errmsg());
			return 2;
		}
		atomic_store(&phase, 1);
		if (pthread_join(a, NULL) != 0)
			return 2;
		(void)walrus_close(db);
		printf("round %d: A saw %ld OK, %ld ERESTART, %ld other", r, atomic_load(&c.ok),
		       atomic_load(&c.restart), atomic_load(&c.other));
		if (c.other)
			printf(" (first: %d %s: \"%s\")", c.other_rc, walrus_strerror(c.other_rc),
			       c.other_msg);
		printf("\n");
		fflush(stdout);
		bad += c.other > 0;
	}
	walrus_opts_free(opts);
	printf("%s\n", bad ? "BUG: calls on a dead handle returned something else than "
	                     "WALRUS_ERESTART while another thread reopened"
	                   : "no wrong result seen");
	return bad ? 1 : 0;
}
