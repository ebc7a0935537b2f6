/*
 * test_backup_hold.c - a base backup never outlives its process, and
 * walrus_interrupt stops one: the instance's hold (forced full-page images,
 * WAL kept) ends when the process that took the backup exits during the
 * copy (the next backup ends it when it comes before the supervisor has
 * seen the exit), and an interrupted backup ends it itself.  Either way the
 * next backup is not refused as "already running", and nothing restarts.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *dir;
static char dest[4200];

static void setup(void)
{
	dir = tu_tmpdir("bkhold");
}

static walrus *open_db(void)
{
	return tu_open(dir, tu_instance_opts("100ms", "2MB"));
}

static long stat_number(walrus *db, const char *name)
{
	char *json = NULL, pat[64];
	ck_assert_int_eq(walrus_stats(db, &json), WALRUS_OK);
	snprintf(pat, sizeof(pat), "\"%s\":", name);
	const char *p = strstr(json, pat);
	ck_assert_ptr_nonnull(p);
	long n = strtol(p + strlen(pat), NULL, 10);
	walrus_free(json);
	return n;
}

/* A backup into a new directory under the test's: must succeed (no hold left). */
static void backup_works(walrus *db, const char *name)
{
	char d[4200];
	snprintf(d, sizeof(d), "%s/%s", dir, name);
	int rc = walrus_backup(db, d, WALRUS_BACKUP_FAST, NULL, NULL);
	ck_assert_msg(rc == WALRUS_OK, "backup %s: %d %s", name, rc, walrus_errmsg());
}

static bool log_has(const char *text)
{
	char path[4200], line[1024];
	snprintf(path, sizeof(path), "%s/log/walrus.log", dir);
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	bool found = false;
	while (!found && fgets(line, sizeof(line), f) != NULL)
		found = strstr(line, text) != NULL;
	fclose(f);
	return found;
}

static void exit_now(uint64_t done, uint64_t total, void *arg)
{
	(void)done, (void)total, (void)arg;
	exit(0); /* inside the copy: between the backup's calls */
}

/* A child's backup into dest; @arg, its progress callback, ends the child. */
static int backup_then_end(void *arg)
{
	walrus_opts *o = walrus_opts_new();
	TU_CHILD_CHECK(o != NULL);
	walrus *db = NULL;
	TU_CHILD_CHECK(walrus_open(dir, o, &db) == WALRUS_OK);
	walrus_opts_free(o);
	(void)walrus_backup(db, dest, WALRUS_BACKUP_FAST, *(walrus_progress_fn *)arg, NULL);
	return 1; /* not reached: the first chunk's progress ends the process */
}

START_TEST(exit_during_the_copy_ends_the_backup)
{
	walrus *db = open_db();
	ck_assert_int_eq(walrus_put(db, "k", 1, "v", 1, 0), WALRUS_OK);
	long restarts = stat_number(db, "crash_restarts");
	snprintf(dest, sizeof(dest), "%s/exited", dir);
	ck_assert_int_eq(tu_wait(tu_fork(backup_then_end, &(walrus_progress_fn){exit_now})), 0);
	struct stat st;
	char mark[4300];
	snprintf(mark, sizeof(mark), "%s/walrus.backup-incomplete", dest);
	ck_assert_int_eq(stat(mark, &st), 0);
	backup_works(db, "after-exit");
	/* The supervisor ("detached") or, when it had not seen the detach yet,
	 * the backup just made ("ended") cancelled it. */
	ck_assert(log_has("during a base backup: the backup is cancelled"));
	ck_assert_int_eq(stat_number(db, "crash_restarts"), restarts);
	tu_close_and_wait(db);
}
END_TEST

/* The child's side of the handshake below: [0] child -> parent, [1] parent -> child. */
static int hs[2][2];

static void tell_then_die(uint64_t done, uint64_t total, void *arg)
{
	(void)done, (void)total, (void)arg;
	char c = 'c';
	if (write(hs[0][1], &c, 1) != 1 || read(hs[1][0], &c, 1) != 1)
		_exit(2);
	_exit(0); /* as a SIGKILL: nothing detaches */
}

/* The holder is gone but the supervisor (stopped here) has not noticed:
 * the next backup ends the dead one's instead of answering EBUSY. */
START_TEST(backup_after_an_unnoticed_death_ends_the_dead_ones)
{
	walrus *db = open_db();
	ck_assert_int_eq(walrus_put(db, "k", 1, "v", 1, 0), WALRUS_OK);
	pid_t sup = walrus_supervisor_pid(db);
	ck_assert_int_gt(sup, 0);
	ck_assert_int_eq(pipe(hs[0]), 0);
	ck_assert_int_eq(pipe(hs[1]), 0);
	snprintf(dest, sizeof(dest), "%s/died", dir);
	pid_t child = tu_fork(backup_then_end, &(walrus_progress_fn){tell_then_die});
	char c;
	ck_assert_int_eq(read(hs[0][0], &c, 1), 1); /* the child holds the backup */
	ck_assert_int_eq(kill(sup, SIGSTOP), 0);
	ck_assert_int_eq(write(hs[1][1], &c, 1), 1);
	int child_rc = tu_wait(child);
	char d[4200];
	snprintf(d, sizeof(d), "%s/after-death", dir);
	int rc = walrus_backup(db, d, WALRUS_BACKUP_FAST, NULL, NULL);
	ck_assert_int_eq(kill(sup, SIGCONT), 0);
	ck_assert_int_eq(child_rc, 0);
	ck_assert_msg(rc == WALRUS_OK, "backup after the holder died: %d %s", rc, walrus_errmsg());
	char line[64];
	snprintf(line, sizeof(line), "process %d ended during a base backup", (int)child);
	ck_assert(log_has(line));
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 2; j++)
			close(hs[i][j]);
	tu_close_and_wait(db);
}
END_TEST

static void interrupt_once(uint64_t done, uint64_t total, void *arg)
{
	(void)done, (void)total;
	int *n = arg;
	if ((*n)++ == 0)
		walrus_interrupt();
}

START_TEST(interrupt_stops_a_backup)
{
	walrus *db = open_db();
	ck_assert_int_eq(walrus_put(db, "k", 1, "v", 1, 0), WALRUS_OK);
	/* One before the backup begins does not stop it. */
	walrus_interrupt();
	backup_works(db, "before");
	char d[4200], mark[4300];
	snprintf(d, sizeof(d), "%s/stopped", dir);
	int calls = 0;
	ck_assert_int_eq(walrus_backup(db, d, WALRUS_BACKUP_FAST, interrupt_once, &calls),
	                 WALRUS_EINTR);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "interrupted"));
	ck_assert_int_eq(calls, 1); /* stopped at the next chunk */
	struct stat st;
	snprintf(mark, sizeof(mark), "%s/walrus.backup-incomplete", d);
	ck_assert_int_eq(stat(mark, &st), 0);
	backup_works(db, "after");
	tu_close_and_wait(db);
}
END_TEST

static Suite *hold_suite(void)
{
	Suite *s = suite_create("backup-hold");
	TCase *tc = tcase_create("backup-hold");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, exit_during_the_copy_ends_the_backup);
	tcase_add_test(tc, interrupt_stops_a_backup);
	tcase_add_test(tc, backup_after_an_unnoticed_death_ends_the_dead_ones);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(hold_suite());
}
