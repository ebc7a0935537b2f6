/*
 * test_crash_state.c - shared state after a crash.  Spin waits on a holder
 * that was killed, or that never lets go.  A child process attaches and takes one of the words
 * other backends spin on (the WAL insert spinlock, every buffer header lock, its WAL insertion slot
 * marked busy), then waits.  A thread of the parent starts a call that needs it; once that thread
 * is seen spinning, the child is SIGKILLed: the supervisor marks the instance CRASHED, and the
 * spinning call must return WALRUS_ERESTART instead of spinning forever.  The instance then
 * recovers on the next open.  A holder that stays alive makes the wait PANIC as a stuck spinlock
 * once the (shortened) limit passes.  The supervisor never waits on such a word: a backend killed
 * holding the snapshot table's lock is a crash restart, and the snapshots of a process that exits
 * with handles open are given back by that process.  And the I/O guard, which a crash restart waits
 * on: it nests, so an inner bracket (a short write finished inside an io_uring batch) does not end
 * the outer one while the batch is still in flight.  And the WAL's io_uring ring: a supervisor
 * forked from the application after a restart must set up rings of its own, not use the
 * application's (whose fd it closed).
 */
#include "testutil.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "buffer/buf_int.h"
#include "fdcache/fdcache.h"
#include "engine/engine.h"
#include "ipc/ipc.h"
#include "kv/kv.h"
#include "wal/wal_int.h"

#define WAIT_LIMIT_NS (60ULL * 1000 * 1000 * 1000)

static const char *dir;

static walrus_opts *test_opts(void)
{
	walrus_opts *o = tu_instance_opts("100ms", "2MB");
	/* The committing thread must do its own WAL flush, not find the WAL
	 * writer doing it (which would wait on a futex, not spin). */
	ck_assert_int_eq(walrus_opts_set(o, "wal_writer_delay", "10s"), WALRUS_OK);
	return o;
}

static long stat_of(walrus *db, const char *name);

static void setup(void)
{
	dir = tu_tmpdir("crash-state");
}

typedef enum hold_kind {
	HOLD_SPINLOCK,
	HOLD_BUF_HEADERS,
	HOLD_WAL_SLOT,
	HOLD_SNAPSHOT_LOCK
} hold_kind;

/* The child: attach, take the word, say so on @fd, and wait to be killed. */
static _Noreturn void child_hold(hold_kind kind, int fd)
{
	walrus_opts *o = test_opts();
	walrus *db = NULL;
	if (walrus_open(dir, o, &db) != WALRUS_OK)
		_exit(2);
	walrus_opts_free(o);
	void *v = NULL;
	size_t vl = 0;
	/* A call makes this handle the thread's current backend. */
	if (walrus_get(db, "k", 1, &v, &vl) != WALRUS_OK)
		_exit(3);
	walrus_free(v);
	switch (kind) {
	case HOLD_SPINLOCK:
		spin_lock(&wal_sh->insert_lock);
		break;
	case HOLD_BUF_HEADERS:
		for (uint32_t b = 1; b <= buf_l.r->nbuffers; b++)
			(void)buf_hdr_lock(buf_get_desc((int)b));
		break;
	case HOLD_WAL_SLOT:
		atomic_store(&wal_slots[wal_me->slot].done_upto, WAL_SLOT_BUSY);
		break;
	case HOLD_SNAPSHOT_LOCK:
#ifdef WALRUS_TEST_HOOKS
		kv_test_snap_lock_hold();
		break;
#else
		_exit(5);
#endif
	}
	char c = 'h';
	if (write(fd, &c, 1) != 1)
		_exit(4);
	for (;;)
		pause();
}

typedef struct spinner {
	walrus *db;
	hold_kind kind;
	int rc;
} spinner;

/* A call that needs the held word: a get pins pages, a durable put reserves and flushes WAL. */
static void *spinner_main(void *arg)
{
	spinner *s = arg;
	if (s->kind == HOLD_BUF_HEADERS) {
		void *v = NULL;
		size_t vl = 0;
		s->rc = walrus_get(s->db, "k", 1, &v, &vl);
		walrus_free(v);
	} else {
		s->rc = walrus_put(s->db, "k2", 2, "v2", 2, WALRUS_SYNC);
	}
	return NULL;
}

static pid_t start_holder(hold_kind kind)
{
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(p[0]);
		child_hold(kind, p[1]);
	}
	close(p[1]);
	char c = 0;
	ck_assert_int_eq(read(p[0], &c, 1), 1);
	close(p[0]);
	ck_assert_int_eq(c, 'h');
	return pid;
}

/* Waits until this process has a spin wait past its pause phase beyond @before. */
static void wait_spinning(uint64_t before)
{
	uint64_t t0 = wr_now_ns();
	while (ipc_spin_delays() == before) {
		if (wr_now_ns() - t0 > WAIT_LIMIT_NS)
			ck_abort_msg("the call never started to spin");
		wr_sleep_us(1000);
	}
}

/* The instance's log holds @what. */
static bool log_has(const char *what)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/log/walrus.log", dir);
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	char line[1024];
	bool found = false;
	while (!found && fgets(line, sizeof(line), f) != NULL)
		found = strstr(line, what) != NULL;
	fclose(f);
	return found;
}

static void kill_and_reap(pid_t pid)
{
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	int st = 0;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

/* After the restart: a new handle reads what was committed before. */
static void check_recovered(void)
{
	walrus *db = tu_open(dir, test_opts());
	void *v = NULL;
	size_t vl = 0;
	ck_assert_int_eq(walrus_get(db, "k", 1, &v, &vl), WALRUS_OK);
	ck_assert_uint_eq(vl, 1);
	ck_assert_int_eq(((char *)v)[0], 'v');
	walrus_free(v);
	char *json = NULL;
	ck_assert_int_eq(walrus_stats(db, &json), WALRUS_OK);
	ck_assert_ptr_nonnull(strstr(json, "\"crash_restarts\":1,"));
	walrus_free(json);
	tu_close_and_wait(db);
}

static void killed_holder(hold_kind kind)
{
	walrus *db = tu_open(dir, test_opts());
	ck_assert_int_eq(walrus_put(db, "k", 1, "v", 1, WALRUS_SYNC), WALRUS_OK);
	pid_t pid = start_holder(kind);
	spinner s = {.db = db, .kind = kind, .rc = WALRUS_OK};
	uint64_t before = ipc_spin_delays();
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, spinner_main, &s), 0);
	wait_spinning(before);
	kill_and_reap(pid);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_msg(s.rc == WALRUS_ERESTART, "the spinning call returned %d (%s)", s.rc,
	              walrus_errmsg());
	ck_assert_int_eq(walrus_close(db), WALRUS_OK);
	check_recovered();
}

START_TEST(test_killed_spinlock_holder)
{
	killed_holder(HOLD_SPINLOCK);
}
END_TEST

START_TEST(test_killed_buffer_header_holder)
{
	killed_holder(HOLD_BUF_HEADERS);
}
END_TEST

START_TEST(test_killed_wal_inserter)
{
	killed_holder(HOLD_WAL_SLOT);
}
END_TEST

#ifdef WALRUS_TEST_HOOKS
/* The instance's log holds @a or @b: true for @a. */
static bool wait_log_either(const char *a, const char *b)
{
	for (;;) {
		if (log_has(a))
			return true;
		if (log_has(b))
			return false;
		wr_sleep_us(10000);
	}
}

/*
 * A backend killed while it holds the snapshot table's lock: its death is a
 * crash restart.  The supervisor used to give back the snapshots of a
 * departed process itself, under that lock, and so spun on it until its own
 * stuck-spinlock PANIC: the crash it alone can declare never came.
 */
START_TEST(test_killed_snapshot_lock_holder)
{
	walrus *db = tu_open(dir, test_opts());
	ck_assert_int_eq(walrus_put(db, "k", 1, "v", 1, WALRUS_SYNC), WALRUS_OK);
	pid_t pid = start_holder(HOLD_SNAPSHOT_LOCK);
	kill_and_reap(pid);
	char ended[128];
	snprintf(ended, sizeof(ended), "backend process %d ended without detaching", (int)pid);
	ck_assert_msg(wait_log_either(ended, "stuck spinlock detected"),
	              "the supervisor spun on the dead backend's lock");
	ck_assert_int_eq(walrus_close(db), WALRUS_OK);
	check_recovered();
}
END_TEST
#endif

/* The child: a snapshot on a handle it never closes, then exit(). */
static int child_exit_with_snapshot(void *arg)
{
	(void)arg;
	walrus_opts *o = test_opts();
	walrus *db = NULL;
	if (walrus_open(dir, o, &db) != WALRUS_OK)
		return 2;
	walrus_opts_free(o);
	walrus_snapshot *snap = NULL;
	if (walrus_snapshot_take(db, &snap) != WALRUS_OK)
		return 3;
	exit(0);
}

/*
 * A process that exits with a snapshot still taken gives it back as it
 * detaches (its exit hook), before it is gone: a live snapshot would hold
 * back the pruning of every version after it for the instance's lifetime.
 */
START_TEST(test_exit_releases_snapshots)
{
	walrus *db = tu_open(dir, test_opts());
	ck_assert_int_eq(walrus_put(db, "k", 1, "v", 1, WALRUS_SYNC), WALRUS_OK);
	pid_t pid = tu_fork(child_exit_with_snapshot, NULL);
	ck_assert_int_eq(tu_wait(pid), 0);
	ck_assert_int_eq(tu_stat(db, "snapshots", "live"), 0);
	ck_assert_int_eq(stat_of(db, "crash_restarts"), 0);
	tu_close_and_wait(db);
}
END_TEST

/* A live holder that never lets go: the waiter PANICs once the stuck limit passes. */
START_TEST(test_stuck_spinlock_panics)
{
	walrus *db = tu_open(dir, test_opts());
	ck_assert_int_eq(walrus_put(db, "k", 1, "v", 1, WALRUS_SYNC), WALRUS_OK);
	pid_t pid = start_holder(HOLD_SPINLOCK);
	ipc_set_stuck_ns(200ULL * 1000 * 1000);
	int rc = walrus_put(db, "k2", 2, "v2", 2, WALRUS_SYNC);
	ipc_set_stuck_ns(0);
	ck_assert_msg(rc == WALRUS_EPANIC, "the stuck call returned %d (%s)", rc, walrus_errmsg());
	ck_assert_msg(log_has("PANIC:  stuck spinlock detected"),
	              "no stuck-spinlock PANIC in the log");
	kill_and_reap(pid);
	ck_assert_int_eq(walrus_close(db), WALRUS_OK);
	check_recovered();
}
END_TEST

/* Two brackets, one ended: the supervisor must still see I/O under way. */
START_TEST(test_io_guard_nests)
{
	walrus *db = tu_open(dir, test_opts());
	ck_assert_int_eq(walrus_put(db, "k", 1, "v", 1, WALRUS_SYNC), WALRUS_OK);
	char path[4096];
	snprintf(path, sizeof(path), "%s/guard-probe", dir);
	fdc_file f;
	ck_assert_int_eq(fdc_open(path, O_RDWR | O_CREAT, 0600, &f), WALRUS_OK);
	wr_proc *me = engine_my_proc();
	ck_assert_ptr_nonnull(me);
	int injected = 0;
	ck_assert_int_eq(atomic_load(&me->in_io), 0);
	ck_assert_int_eq(fdc_io_begin(f, "pwrite", &injected), WALRUS_OK);
	ck_assert_int_eq(fdc_io_begin(f, "fdatasync", &injected), WALRUS_OK);
	fdc_io_end();
	ck_assert_int_ne(atomic_load(&me->in_io), 0);
	fdc_io_end();
	ck_assert_int_eq(atomic_load(&me->in_io), 0);
	ck_assert_int_eq(fdc_close(f), WALRUS_OK);
	ck_assert_int_eq(unlink(path), 0);
	tu_close_and_wait(db);
}
END_TEST

static long stat_of(walrus *db, const char *name)
{
	char *json = NULL;
	ck_assert_int_eq(walrus_stats(db, &json), WALRUS_OK);
	char key[128];
	snprintf(key, sizeof(key), "\"%s\":", name);
	const char *p = strstr(json, key);
	ck_assert_ptr_nonnull(p);
	long n = strtol(p + strlen(key), NULL, 10);
	walrus_free(json);
	return n;
}

/*
 * This process writes WAL through io_uring, its instance's supervisor dies,
 * and the next open forks a new supervisor from this process: the new
 * instance's processes must flush WAL without a restart.
 */
START_TEST(test_wal_ring_not_inherited)
{
	walrus_opts *o = test_opts();
	ck_assert_int_eq(walrus_opts_set(o, "io_method", "io_uring"), WALRUS_OK);
	ck_assert_int_eq(walrus_opts_set(o, "wal_writer_delay", "10ms"), WALRUS_OK);
	walrus *db = tu_open(dir, o);
	ck_assert_int_eq(walrus_put(db, "k", 1, "v", 1, WALRUS_SYNC), WALRUS_OK);
	pid_t sup = walrus_supervisor_pid(db);
	ck_assert_int_gt(sup, 0);
	ck_assert_int_eq(kill(sup, SIGKILL), 0);
	/* The handle learns that its instance is gone. */
	while (walrus_put(db, "k", 1, "v", 1, WALRUS_SYNC) == WALRUS_OK)
		wr_sleep_us(1000);
	(void)walrus_close(db);
	o = test_opts();
	ck_assert_int_eq(walrus_opts_set(o, "io_method", "io_uring"), WALRUS_OK);
	ck_assert_int_eq(walrus_opts_set(o, "wal_writer_delay", "10ms"), WALRUS_OK);
	db = tu_open(dir, o);
	ck_assert_int_ne(walrus_supervisor_pid(db), sup);
	for (int i = 0; i < 200; i++) {
		char k[16];
		snprintf(k, sizeof(k), "a%d", i);
		ck_assert_int_eq(walrus_put(db, k, strlen(k), "v", 1, WALRUS_ASYNC), WALRUS_OK);
	}
	ck_assert_int_eq(walrus_checkpoint(db), WALRUS_OK);
	ck_assert_int_eq(stat_of(db, "crash_restarts"), 0);
	tu_close_and_wait(db);
}
END_TEST

static Suite *crash_state_suite(void)
{
	Suite *s = suite_create("crash-state");
	TCase *tc = tcase_create("holders");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_killed_spinlock_holder);
	tcase_add_test(tc, test_killed_buffer_header_holder);
	tcase_add_test(tc, test_killed_wal_inserter);
	tcase_add_test(tc, test_stuck_spinlock_panics);
#ifdef WALRUS_TEST_HOOKS
	tcase_add_test(tc, test_killed_snapshot_lock_holder);
#endif
	tcase_add_test(tc, test_exit_releases_snapshots);
	suite_add_tcase(s, tc);
	TCase *tg = tcase_create("guard");
	tcase_add_checked_fixture(tg, setup, NULL);
	tcase_add_test(tg, test_io_guard_nests);
	tcase_add_test(tg, test_wal_ring_not_inherited);
	suite_add_tcase(s, tg);
	return s;
}

int main(void)
{
	return tu_run(crash_state_suite());
}
