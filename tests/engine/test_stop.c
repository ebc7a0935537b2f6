/*
 * test_stop.c - walrus_stop(): each mode with and without attached
 * processes, waiting (the supervisor and its auxiliary processes gone, the
 * directory lock free when it returns), escalation, no instance, bad
 * arguments, the signals that request the same stops.  Every write
 * acknowledged before a stop is read back after it.
 *
 * Instances linger 20 s after their last handle, so what ends them is the
 * stop under test; a case that fails half-way leaves them to that linger,
 * which ends before the runner's own wait for orphans does.
 */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/engine.h"

#define MAX_PIDS 16

static walrus_opts *stop_opts(void)
{
	return tu_instance_opts("20s", "1MB");
}

/* The supervisor and its children, as they are now (the aux processes exist once open returned). */
static int instance_pids(pid_t sup, pid_t *pids)
{
	pids[0] = sup;
	int n = 1 + tu_children(sup, NULL, pids + 1, MAX_PIDS - 1);
	ck_assert_int_ge(n, 4); /* walrus-ckpt, walrus-bgwr, walrus-walw */
	return n < MAX_PIDS ? n : MAX_PIDS;
}

/* Right after walrus_stop(.., wait) returned: nothing of the instance is left. */
static void assert_gone(const char *dir, const pid_t *pids, int n)
{
	char abs[PATH_MAX];
	for (int i = 0; i < n; i++)
		ck_assert_msg(tu_proc_gone(pids[i]), "process %d still running", (int)pids[i]);
	ck_assert_ptr_nonnull(realpath(dir, abs));
	ck_assert_int_eq(datadir_instance_pid(abs), 0); /* the directory lock is free */
}

static bool log_has(const char *dir, const char *what)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", dir, WR_LOG_FILE);
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return false;
	char line[4096];
	bool found = false;
	while (!found && fgets(line, sizeof(line), f) != NULL)
		found = strstr(line, what) != NULL;
	fclose(f);
	return found;
}

/* Waits (up to 20 s) for a line of the instance's log. */
static void wait_log(const char *dir, const char *what)
{
	for (int i = 0; i < 2000 && !log_has(dir, what); i++)
		usleep(10000);
	ck_assert_msg(log_has(dir, what), "no \"%s\" in the log", what);
}

static void put_key(walrus *db, int i)
{
	char k[32];
	int kl = snprintf(k, sizeof(k), "w%06d", i);
	ck_assert_int_eq(walrus_put(db, k, (size_t)kl, k, (size_t)kl, WALRUS_SYNC), WALRUS_OK);
}

/* Keys 0..n-1 are there; key n is not when @absent_after. */
static void check_keys(const char *dir, int n, bool absent_after)
{
	walrus *db = tu_open(dir, stop_opts());
	for (int i = 0; i < n + (absent_after ? 1 : 0); i++) {
		char k[32], v[32];
		size_t vl = 0;
		int kl = snprintf(k, sizeof(k), "w%06d", i);
		int rc = walrus_get_into(db, k, (size_t)kl, v, sizeof(v), &vl);
		ck_assert_msg(rc == (i < n ? WALRUS_OK : WALRUS_ENOTFOUND), "key %s: %d", k, rc);
	}
	pid_t pids[MAX_PIDS];
	int np = instance_pids(walrus_supervisor_pid(db), pids);
	ck_assert_int_eq(walrus_close(db), WALRUS_OK);
	ck_assert_int_eq(walrus_stop(dir, WALRUS_STOP_FAST, 1), WALRUS_OK);
	assert_gone(dir, pids, np);
}

/* ---------------------------------------------------------------- no instance, bad arguments */

START_TEST(stop_without_instance)
{
	const char *dir = tu_tmpdir("walrus-stop");
	char missing[4200];
	ck_assert_int_eq(walrus_stop(dir, WALRUS_STOP_FAST, 1), WALRUS_ENOTRUNNING);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "no instance is running"));
	snprintf(missing, sizeof(missing), "%s/nope", dir);
	ck_assert_int_eq(walrus_stop(missing, WALRUS_STOP_FAST, 0), WALRUS_ENOENT);
	ck_assert_int_eq(walrus_stop(dir, 0, 0), WALRUS_EINVAL);
	ck_assert_int_eq(walrus_stop(dir, 4, 0), WALRUS_EINVAL);
	ck_assert_int_eq(walrus_stop(NULL, WALRUS_STOP_FAST, 0), WALRUS_EINVAL);
	/* An instance that was there and stopped. */
	walrus *db = tu_open(dir, stop_opts());
	ck_assert_int_eq(walrus_close(db), WALRUS_OK);
	ck_assert_int_eq(walrus_stop(dir, WALRUS_STOP_SMART, 1), WALRUS_OK);
	ck_assert_int_eq(walrus_stop(dir, WALRUS_STOP_SMART, 1), WALRUS_ENOTRUNNING);
}
END_TEST

/* ---------------------------------------------------------------- each mode, nobody attached */

static const int modes[] = {WALRUS_STOP_SMART, WALRUS_STOP_FAST, WALRUS_STOP_IMMEDIATE};

START_TEST(stop_idle_instance)
{
	int mode = modes[_i];
	const char *dir = tu_tmpdir("walrus-stop");
	walrus *db = tu_open(dir, stop_opts());
	for (int i = 0; i < 20; i++)
		put_key(db, i);
	pid_t pids[MAX_PIDS];
	int np = instance_pids(walrus_supervisor_pid(db), pids);
	ck_assert_int_eq(walrus_close(db), WALRUS_OK);
	ck_assert_int_eq(walrus_stop(dir, mode, 1), WALRUS_OK);
	assert_gone(dir, pids, np);
	if (mode == WALRUS_STOP_IMMEDIATE) {
		ck_assert(log_has(dir, "immediate shutdown"));
	} else {
		ck_assert(log_has(dir, "checkpoint complete (shutdown)"));
		ck_assert(log_has(dir, "supervisor shut down"));
	}
	check_keys(dir, 20, true);
	/* Only after an immediate stop does the next start recover. */
	ck_assert(log_has(dir, "before crash recovery") == (mode == WALRUS_STOP_IMMEDIATE));
}
END_TEST

/* ---------------------------------------------------------------- smart waits for attached
 * processes */

struct holder_arg {
	const char *dir;
	int up, down; /* pipes: to and from the case */
};

/* Holds a handle until told to go on; then writes once more (smart lets it) and closes. */
static int holder_child(void *p)
{
	struct holder_arg *a = p;
	walrus *db = NULL;
	char c;
	walrus_opts *o = walrus_opts_new();
	TU_CHILD_CHECK(walrus_opts_set(o, "supervisor_linger", "20s") == WALRUS_OK);
	TU_CHILD_CHECK(walrus_open(a->dir, o, &db) == WALRUS_OK);
	walrus_opts_free(o);
	TU_CHILD_CHECK(walrus_put(db, "w000000", 7, "w000000", 7, WALRUS_SYNC) == WALRUS_OK);
	TU_CHILD_CHECK(write(a->up, "r", 1) == 1);
	TU_CHILD_CHECK(read(a->down, &c, 1) == 1);
	TU_CHILD_CHECK(walrus_put(db, "w000001", 7, "w000001", 7, WALRUS_SYNC) == WALRUS_OK);
	TU_CHILD_CHECK(walrus_close(db) == WALRUS_OK);
	return 0;
}

static int smart_stopper(void *dir)
{
	return walrus_stop(dir, WALRUS_STOP_SMART, 1) == WALRUS_OK ? 0 : 1;
}

START_TEST(smart_waits_for_attached_process)
{
	const char *dir = tu_tmpdir("walrus-stop");
	walrus *db = tu_open(dir, stop_opts());
	pid_t pids[MAX_PIDS];
	int np = instance_pids(walrus_supervisor_pid(db), pids);
	ck_assert_int_eq(walrus_close(db), WALRUS_OK);
	int up[2], down[2];
	char c, line[64];
	ck_assert_int_eq(pipe(up), 0);
	ck_assert_int_eq(pipe(down), 0);
	struct holder_arg a = {dir, up[1], down[0]};
	pid_t holder = tu_fork(holder_child, &a);
	ck_assert_int_eq(read(up[0], &c, 1), 1);
	pid_t stopper = tu_fork(smart_stopper, (void *)dir);
	snprintf(line, sizeof(line), "smart shutdown requested by process %d", (int)stopper);
	wait_log(dir, line);
	/* New processes are refused at once (not retried until the instance is gone)... */
	walrus *late = NULL;
	walrus_opts *o = stop_opts();
	ck_assert_int_eq(walrus_open(dir, o, &late), WALRUS_ESHUTDOWN);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "being stopped (smart shutdown)"));
	walrus_opts_free(o);
	/* ...while the instance goes on serving the attached one. */
	for (int i = 0; i < np; i++)
		ck_assert_msg(!tu_proc_gone(pids[i]), "process %d exited", (int)pids[i]);
	ck_assert_int_eq(waitpid(stopper, NULL, WNOHANG), 0);
	ck_assert_int_eq(write(down[1], "g", 1), 1);
	ck_assert_int_eq(tu_wait(holder), 0);
	ck_assert_int_eq(tu_wait(stopper), 0);
	assert_gone(dir, pids, np);
	ck_assert(log_has(dir, "checkpoint complete (shutdown)"));
	check_keys(dir, 2, true);
}
END_TEST

/* ---------------------------------------------------------------- fast and immediate under writes
 */

struct writer_arg {
	const char *dir;
	int up;   /* 'r' after the first acknowledged write, then the count */
	int mode; /* what the writes may fail with depends on the stop */
};

/* Writes w000000, w000001, ... durably until a write fails; reports how many were acknowledged. */
static int writer_child(void *p)
{
	struct writer_arg *a = p;
	walrus *db = NULL;
	walrus_opts *o = walrus_opts_new();
	TU_CHILD_CHECK(walrus_opts_set(o, "supervisor_linger", "20s") == WALRUS_OK);
	TU_CHILD_CHECK(walrus_open(a->dir, o, &db) == WALRUS_OK);
	walrus_opts_free(o);
	int n = 0, rc;
	for (;; n++) {
		char k[32];
		int kl = snprintf(k, sizeof(k), "w%06d", n);
		rc = walrus_put(db, k, (size_t)kl, k, (size_t)kl, WALRUS_SYNC);
		if (rc != WALRUS_OK)
			break;
		if (n == 0)
			TU_CHILD_CHECK(write(a->up, "r", 1) == 1);
	}
	TU_CHILD_CHECK(write(a->up, &n, sizeof(n)) == (ssize_t)sizeof(n));
	/* A fast stop lets every call under way finish: the next one is refused. */
	if (a->mode != WALRUS_STOP_IMMEDIATE)
		TU_CHILD_CHECK(rc == WALRUS_ESHUTDOWN);
	else
		TU_CHILD_CHECK(rc == WALRUS_ESHUTDOWN || rc == WALRUS_EPANIC ||
		               rc == WALRUS_ERESTART);
	(void)walrus_close(db); /* the instance is gone: nothing to detach from */
	return 0;
}

/* @escalate: a smart stop first, which the writer does not notice, then @mode. */
static void stop_under_writes(int mode, bool escalate)
{
	const char *dir = tu_tmpdir("walrus-stop");
	walrus *db = tu_open(dir, stop_opts());
	pid_t pids[MAX_PIDS];
	int np = instance_pids(walrus_supervisor_pid(db), pids);
	ck_assert_int_eq(walrus_close(db), WALRUS_OK);
	int up[2], n = -1;
	char c;
	ck_assert_int_eq(pipe(up), 0);
	struct writer_arg a = {dir, up[1], mode};
	pid_t writer = tu_fork(writer_child, &a);
	ck_assert_int_eq(read(up[0], &c, 1), 1);
	if (escalate)
		ck_assert_int_eq(walrus_stop(dir, WALRUS_STOP_SMART, 0), WALRUS_OK);
	ck_assert_int_eq(walrus_stop(dir, mode, 1), WALRUS_OK);
	assert_gone(dir, pids, np);
	ck_assert_int_eq(read(up[0], &n, sizeof(n)), (ssize_t)sizeof(n));
	ck_assert_int_eq(tu_wait(writer), 0);
	ck_assert_int_gt(n, 0);
	if (mode == WALRUS_STOP_FAST)
		ck_assert(log_has(dir, "checkpoint complete (shutdown)"));
	/* Every acknowledged write is there; after a fast stop the refused one is not. */
	check_keys(dir, n, mode == WALRUS_STOP_FAST);
}

START_TEST(fast_stop_under_writes)
{
	stop_under_writes(WALRUS_STOP_FAST, false);
}
END_TEST

START_TEST(immediate_stop_under_writes)
{
	stop_under_writes(WALRUS_STOP_IMMEDIATE, false);
}
END_TEST

START_TEST(smart_escalated_to_fast)
{
	stop_under_writes(WALRUS_STOP_FAST, true);
}
END_TEST

/* ---------------------------------------------------------------- from a process with the
 * directory open */

START_TEST(stop_from_attached_process)
{
	const char *dir = tu_tmpdir("walrus-stop");
	walrus *db = tu_open(dir, stop_opts());
	put_key(db, 0);
	pid_t pids[MAX_PIDS];
	int np = instance_pids(walrus_supervisor_pid(db), pids);
	/* Smart would wait for this very handle. */
	ck_assert_int_eq(walrus_stop(dir, WALRUS_STOP_SMART, 1), WALRUS_EBUSY);
	ck_assert_int_eq(walrus_stop(dir, WALRUS_STOP_FAST, 1), WALRUS_OK);
	assert_gone(dir, pids, np);
	ck_assert_int_eq(walrus_put(db, "x", 1, "y", 1, WALRUS_SYNC), WALRUS_ESHUTDOWN);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "fast shutdown"));
	(void)walrus_close(db);
	check_keys(dir, 1, true);
}
END_TEST

/* ---------------------------------------------------------------- signals are the same requests */

static const int stop_signals[] = {SIGTERM, SIGINT, SIGQUIT};
static const char *const signal_lines[] = {"smart shutdown requested by SIGTERM",
                                           "fast shutdown requested by SIGINT",
                                           "immediate shutdown requested by SIGQUIT"};

START_TEST(signals_request_stops)
{
	const char *dir = tu_tmpdir("walrus-stop");
	walrus *db = tu_open(dir, stop_opts());
	put_key(db, 0);
	pid_t pids[MAX_PIDS];
	int np = instance_pids(walrus_supervisor_pid(db), pids);
	ck_assert_int_eq(walrus_close(db), WALRUS_OK);
	ck_assert_int_eq(kill(pids[0], stop_signals[_i]), 0);
	for (int i = 0; i < np; i++)
		tu_wait_gone(pids[i]);
	ck_assert(log_has(dir, signal_lines[_i]));
	check_keys(dir, 1, true);
}
END_TEST

static Suite *stop_suite(void)
{
	Suite *s = suite_create("stop");
	TCase *t = tcase_create("stop");
	tcase_set_timeout(t, 120);
	tcase_add_test(t, stop_without_instance);
	tcase_add_loop_test(t, stop_idle_instance, 0, (int)WR_ARRAY_LEN(modes));
	tcase_add_test(t, smart_waits_for_attached_process);
	tcase_add_test(t, fast_stop_under_writes);
	tcase_add_test(t, immediate_stop_under_writes);
	tcase_add_test(t, smart_escalated_to_fast);
	tcase_add_test(t, stop_from_attached_process);
	tcase_add_loop_test(t, signals_request_stops, 0, (int)WR_ARRAY_LEN(stop_signals));
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	return tu_run(stop_suite());
}
