/*
 * test_engine.c - the instance skeleton: opening data directories (and every
 * way that can go wrong), the supervisor and its processes, shared memory
 * between backends, crash restart after a backend's kill -9, recovery of a
 * directory whose supervisor was killed, PANIC in a backend, limits.
 *
 * Every case waits for the supervisors it started to exit (short linger), so
 * the suite leaves no walrus process behind.
 */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine/engine.h"
#include "fdcache/fdcache.h"

static walrus_opts *test_opts(void)
{
	return tu_instance_opts("50ms", "1MB");
}

static walrus *open_ok(const char *dir)
{
	return tu_open(dir, test_opts());
}

static int count_children_named(pid_t parent, const char *comm)
{
	return tu_children(parent, comm, NULL, 0);
}

/* Aux processes name themselves just after fork: give them a moment. */
static int wait_children_named(pid_t parent, const char *comm, int want)
{
	int n = 0;
	for (int i = 0; i < 500; i++) {
		n = count_children_named(parent, comm);
		if (n == want)
			break;
		usleep(10000);
	}
	return n;
}

/* Waits until client_check() reports @code (the supervisor works asynchronously). */
static void wait_check(int code)
{
	int rc = WALRUS_OK;
	for (int i = 0; i < 2000; i++) {
		rc = client_check();
		if (rc == code)
			return;
		usleep(10000);
	}
	ck_abort_msg("client_check() stayed %d, wanted %d", rc, code);
}

START_TEST(open_missing_dir)
{
	const char *base = tu_tmpdir("walrus-eng");
	char dir[4096];
	walrus *db = NULL;
	snprintf(dir, sizeof(dir), "%s/nope", base);
	ck_assert_int_eq(walrus_open(dir, NULL, &db), WALRUS_ENOENT);
	ck_assert_ptr_null(db);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "does not exist"));
}
END_TEST

START_TEST(open_creates_and_starts_processes)
{
	const char *base = tu_tmpdir("walrus-eng");
	char dir[4096], path[4200];
	snprintf(dir, sizeof(dir), "%s/a/b/data", base);
	walrus *db = open_ok(dir);
	pid_t sup = walrus_supervisor_pid(db);
	ck_assert_int_gt(sup, 0);
	char comm[64] = "";
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)sup);
	FILE *cf = fopen(path, "r");
	ck_assert_ptr_nonnull(cf);
	ck_assert_ptr_nonnull(fgets(comm, sizeof(comm), cf));
	fclose(cf);
	ck_assert_str_eq(comm, "walrus-super\n");
	ck_assert_int_eq(wait_children_named(sup, "walrus-ckpt", 1), 1);
	ck_assert_int_eq(wait_children_named(sup, "walrus-bgwr", 1), 1);
	ck_assert_int_eq(wait_children_named(sup, "walrus-walw", 1), 1);
	struct stat st;
	ck_assert_int_eq(stat(dir, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0700);
	const char *expect[] = {WR_VERSION_FILE, WR_PID_FILE, WR_SOCKET_NAME,
	                        "base",          "wal",       WR_LOG_FILE};
	for (size_t i = 0; i < WR_ARRAY_LEN(expect); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, expect[i]);
		ck_assert_msg(access(path, F_OK) == 0, "missing %s", path);
	}
	ck_assert_int_eq(client_check(), WALRUS_OK);
	tu_close_and_wait(db);
	/* A clean exit removes the socket and the pid file. */
	snprintf(path, sizeof(path), "%s/%s", dir, WR_SOCKET_NAME);
	ck_assert_int_ne(access(path, F_OK), 0);
	snprintf(path, sizeof(path), "%s/%s", dir, WR_PID_FILE);
	ck_assert_int_ne(access(path, F_OK), 0);
	/* And the directory opens again. */
	db = open_ok(dir);
	tu_close_and_wait(db);
}
END_TEST

START_TEST(bad_permissions)
{
	const char *dir = tu_tmpdir("walrus-eng");
	ck_assert_int_eq(chmod(dir, 0750), 0);
	walrus_opts *o = test_opts();
	tu_open_fails(dir, o, WALRUS_EPERM, "invalid permissions");
	ck_assert_int_eq(chmod(dir, 0700), 0);
	if (geteuid() == 0) {
		ck_assert_int_eq(chown(dir, 12345, 12345), 0);
		tu_open_fails(dir, o, WALRUS_EPERM, "ownership");
		ck_assert_int_eq(chown(dir, 0, 0), 0);
	}
	walrus_opts_free(o);
}
END_TEST

static int open_as_nobody(void *dir)
{
	walrus *db = NULL;
	if (setgid(65534) != 0 || setuid(65534) != 0)
		return 20;
	int rc = walrus_open(dir, NULL, &db);
	if (rc != WALRUS_EPERM)
		return 21;
	return strstr(walrus_errmsg(), "not writable") ? 0 : 22;
}

START_TEST(unwritable_dir)
{
	if (geteuid() != 0)
		return; /* needs root to act as another user; the check itself is covered */
	const char *base = tu_tmpdir("walrus-eng");
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/ro", base);
	ck_assert_int_eq(mkdir(dir, 0500), 0);
	ck_assert_int_eq(chown(dir, 65534, 65534), 0);
	ck_assert_int_eq(chmod(base, 0711), 0); /* let the other user reach it */
	pid_t pid = tu_fork(open_as_nobody, dir);
	ck_assert_int_eq(tu_wait(pid), 0);
}
END_TEST

START_TEST(not_a_walrus_dir)
{
	const char *dir = tu_tmpdir("walrus-eng");
	char path[4200];
	walrus *db = NULL;
	snprintf(path, sizeof(path), "%s/precious.txt", dir);
	ck_assert_int_eq(tu_write_file(path, "keep me\n", 8), 0);
	walrus_opts *o = test_opts();
	tu_open_fails(dir, o, WALRUS_ENOTWALRUS, "not a walrus data directory");
	ck_assert_int_eq(access(path, F_OK), 0); /* nothing touched */
	/* A file where the directory should be. */
	ck_assert_int_eq(walrus_open(path, o, &db), WALRUS_ENOTWALRUS);
	walrus_opts_free(o);
}
END_TEST

START_TEST(empty_dir_needs_create)
{
	tu_open_fails(tu_tmpdir("walrus-eng"), NULL, WALRUS_ENOTWALRUS, "create_if_missing");
}
END_TEST

START_TEST(incompatible_version)
{
	const char *dir = tu_tmpdir("walrus-eng");
	walrus *db = open_ok(dir);
	tu_close_and_wait(db);
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", dir, WR_VERSION_FILE);
	ck_assert_int_eq(tu_write_file(path, "99\n", 3), 0);
	walrus_opts *o = test_opts();
	tu_open_fails(dir, o, WALRUS_EVERSION, "format version 99");
	ck_assert_int_eq(tu_write_file(path, "garbage", 7), 0);
	ck_assert_int_eq(walrus_open(dir, o, &db), WALRUS_ECORRUPT);
	walrus_opts_free(o);
}
END_TEST

START_TEST(bad_option_values)
{
	walrus_opts *o = walrus_opts_new();
	ck_assert_int_eq(walrus_opts_set(o, "shared_buffers", "lots"), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "shared_buffers"));
	ck_assert_int_eq(walrus_opts_set(o, "no_such_option", "1"), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "no_such_option"));
	ck_assert_int_eq(walrus_opts_set(o, "max_connections", "0"), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "max_connections"));
	walrus_opts_free(o);
}
END_TEST

START_TEST(second_supervisor_refused)
{
	const char *dir = tu_tmpdir("walrus-eng");
	walrus *db = open_ok(dir);
	char abs[PATH_MAX];
	ck_assert_ptr_nonnull(realpath(dir, abs));
	wr_options o;
	wr_opts_defaults(&o);
	ck_assert_int_eq(supervisor_launch(abs, &o), WALRUS_EBUSY);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "in use by another instance"));
	/* The running instance is unaffected. */
	ck_assert_int_eq(client_check(), WALRUS_OK);
	tu_close_and_wait(db);
}
END_TEST

START_TEST(one_directory_per_process)
{
	const char *a = tu_tmpdir("walrus-eng"), *b = tu_tmpdir("walrus-eng");
	walrus *db = open_ok(a), *db2 = NULL, *db3 = NULL;
	walrus_opts *o = test_opts();
	ck_assert_int_eq(walrus_open(b, o, &db2), WALRUS_EBUSY);
	ck_assert_int_eq(walrus_open(a, o, &db3), WALRUS_OK); /* same dir: shares the attachment */
	ck_assert_int_eq(walrus_close(db3), WALRUS_OK);
	ck_assert_int_eq(client_check(), WALRUS_OK);
	walrus_opts_free(o);
	tu_close_and_wait(db);
}
END_TEST

struct share_arg {
	const char *dir;
	int to_parent, from_parent;
};

static int share_child(void *p)
{
	struct share_arg *a = p;
	char c;
	walrus *db = NULL;
	walrus_opts *o = walrus_opts_new();
	walrus_opts_set(o, "supervisor_linger", "50ms");
	if (walrus_open(a->dir, o, &db) != WALRUS_OK)
		return 10;
	uint32_t *scratch = client_scratch();
	if (scratch[0] != 0xC0FFEE)
		return 11;
	scratch[1] = 0xBEEF;
	if (write(a->to_parent, "x", 1) != 1 || read(a->from_parent, &c, 1) != 1)
		return 12;
	return walrus_close(db) == WALRUS_OK ? 0 : 13;
}

START_TEST(two_processes_share_memory)
{
	const char *dir = tu_tmpdir("walrus-eng");
	walrus *db = open_ok(dir);
	uint32_t *scratch = client_scratch();
	scratch[0] = 0xC0FFEE;
	int up[2], down[2];
	ck_assert_int_eq(pipe(up), 0);
	ck_assert_int_eq(pipe(down), 0);
	struct share_arg a = {dir, up[1], down[0]};
	pid_t child = tu_fork(share_child, &a);
	char c;
	ck_assert_int_eq(read(up[0], &c, 1), 1);
	ck_assert_uint_eq(scratch[1], 0xBEEF);
	ck_assert_int_eq(write(down[1], "y", 1), 1);
	ck_assert_int_eq(tu_wait(child), 0);
	ck_assert_int_eq(client_check(), WALRUS_OK); /* a clean detach is no crash */
	tu_close_and_wait(db);
}
END_TEST

static int attach_and_wait(void *p)
{
	struct share_arg *a = p;
	char c;
	walrus *db = NULL;
	if (walrus_open(a->dir, NULL, &db) != WALRUS_OK)
		return 10;
	if (write(a->to_parent, "x", 1) != 1)
		return 11;
	(void)read(a->from_parent, &c, 1);
	return 0;
}

START_TEST(kill9_backend_crash_restart)
{
	const char *dir = tu_tmpdir("walrus-eng");
	walrus *db = open_ok(dir);
	uint64_t gen = client_generation();
	pid_t sup = walrus_supervisor_pid(db);
	int up[2], down[2];
	ck_assert_int_eq(pipe(up), 0);
	ck_assert_int_eq(pipe(down), 0);
	struct share_arg a = {dir, up[1], down[0]};
	pid_t child = tu_fork(attach_and_wait, &a);
	char c;
	ck_assert_int_eq(read(up[0], &c, 1), 1);
	ck_assert_int_eq(kill(child, SIGKILL), 0);
	ck_assert_int_eq(tu_wait(child), 128 + SIGKILL);
	wait_check(WALRUS_ERESTART);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "reopen"));
	/* The I/O guard refuses writes to the old instance's files. */
	char path[4200];
	fdc_file f;
	snprintf(path, sizeof(path), "%s/base/guard-test", dir);
	ck_assert_int_eq(fdc_open(path, O_RDWR | O_CREAT, 0600, &f), WALRUS_OK);
	ck_assert_int_eq(fdc_pwrite(f, "x", 1, 0), WALRUS_ERESTART);
	ck_assert_int_eq(walrus_close(db), WALRUS_OK);
	db = open_ok(dir);
	ck_assert_uint_eq(client_generation(), gen + 1);
	ck_assert_int_eq(walrus_supervisor_pid(db), sup); /* the same supervisor restarted it */
	ck_assert_int_eq(wait_children_named(sup, "walrus-ckpt", 1), 1);
	ck_assert_int_eq(client_check(), WALRUS_OK);
	tu_close_and_wait(db);
}
END_TEST

/* The process state letter of @pid from /proc (0 when it is gone). */
static char proc_state(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return 0;
	bool ok = fgets(buf, sizeof(buf), f) != NULL;
	fclose(f);
	char *p = strrchr(buf, ')');
	if (!ok || p == NULL)
		return 0;
	return p[2];
}

/* Waits up to 20 s for auxiliary process @pid to end; fails the test otherwise. */
static void wait_aux_gone(pid_t pid, pid_t sup)
{
	for (int i = 0; i < 2000 && !tu_proc_gone(pid); i++)
		usleep(10000);
	ck_assert_msg(tu_proc_gone(pid),
	              "auxiliary process %d still runs (state %c) 20 s after its supervisor %d "
	              "was killed: it must exit with its supervisor",
	              (int)pid, proc_state(pid), (int)sup);
}

/* SIGKILL of the supervisor; returns once its auxiliary processes are gone too. */
static void kill_supervisor(walrus *db)
{
	pid_t sup = walrus_supervisor_pid(db);
	/* The checkpointer, background writer and WAL writer at least. */
	ck_assert_int_eq(wait_children_named(sup, "walrus-ckpt", 1), 1);
	ck_assert_int_eq(wait_children_named(sup, "walrus-bgwr", 1), 1);
	ck_assert_int_eq(wait_children_named(sup, "walrus-walw", 1), 1);
	pid_t aux[16];
	int naux = tu_children(sup, NULL, aux, (int)WR_ARRAY_LEN(aux));
	ck_assert_int_ge(naux, 3);
	ck_assert_int_le(naux, (int)WR_ARRAY_LEN(aux));
	ck_assert_int_eq(kill(sup, SIGKILL), 0);
	tu_wait_gone(sup);
	wait_check(WALRUS_ERESTART);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "supervisor"));
	for (int i = 0; i < naux; i++)
		wait_aux_gone(aux[i], sup);
}

/* Waits up to 20 s until @pid is in state @want ('T' stopped); fails the test otherwise. */
static void wait_state(pid_t pid, char want)
{
	for (int i = 0; i < 2000 && proc_state(pid) != want; i++)
		usleep(10000);
	ck_assert_msg(proc_state(pid) == want, "process %d is in state %c, not %c", (int)pid,
	              proc_state(pid), want);
}

struct guard_arg {
	pid_t sup, parent;
};

/* Resumes the stopped supervisor when the test process ends without doing it. */
static int resume_guard(void *p)
{
	const struct guard_arg *a = p;
	while (getppid() == a->parent)
		usleep(10000);
	return kill(a->sup, SIGCONT) == 0 ? 0 : 1;
}

static int open_and_close(void *p)
{
	walrus *db = NULL;
	if (walrus_open(p, NULL, &db) != WALRUS_OK)
		return 10;
	return walrus_close(db) == WALRUS_OK ? 0 : 11;
}

static int open_forever(void *p)
{
	walrus *db = NULL;
	(void)walrus_open(p, NULL, &db);
	return 12; /* never reached: killed while its attach waits */
}

/*
 * A process killed while its ATTACH waits for the supervisor (here:
 * stopped; in the crash suites: busy restarting the instance) is not
 * attached: its end restarts nothing.  It once got a slot, and its end of
 * file then crash-restarted the instance under everybody attached since.
 */
START_TEST(attach_of_a_dead_process_restarts_nothing)
{
	const char *dir = tu_tmpdir("walrus-eng");
	walrus *db = open_ok(dir);
	pid_t sup = walrus_supervisor_pid(db);
	struct guard_arg ga = {sup, getpid()};
	pid_t guard = tu_fork(resume_guard, &ga);
	ck_assert_int_eq(kill(sup, SIGSTOP), 0);
	wait_state(sup, 'T');
	pid_t child = tu_fork(open_forever, (void *)dir);
	/* Connected (the listen queue takes it), ATTACH sent, waiting for the answer. */
	tu_wait_in_syscall(child, SYS_recvmsg, NULL);
	ck_assert_int_eq(kill(child, SIGKILL), 0);
	ck_assert_int_eq(tu_wait(child), 128 + SIGKILL);
	ck_assert_int_eq(kill(sup, SIGCONT), 0);
	ck_assert_int_eq(kill(guard, SIGKILL), 0);
	ck_assert_int_eq(tu_wait(guard), 128 + SIGKILL);
	/* The second open is answered after the supervisor has read the dead
	 * process's ATTACH and its end of file (one message per connection and
	 * one accept per round of its loop): any restart they caused is done. */
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(tu_wait(tu_fork(open_and_close, (void *)dir)), 0);
	ck_assert_int_eq(client_check(), WALRUS_OK); /* not crashed */
	tu_close_and_wait(db);
}
END_TEST

START_TEST(kill9_supervisor_then_reopen)
{
	const char *dir = tu_tmpdir("walrus-eng");
	walrus *db = open_ok(dir);
	pid_t sup = walrus_supervisor_pid(db);
	kill_supervisor(db);
	ck_assert_int_eq(walrus_close(db), WALRUS_OK);
	/* The stale pid file and socket are still there; the next open copes. */
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", dir, WR_PID_FILE);
	ck_assert_int_eq(access(path, F_OK), 0);
	db = open_ok(dir);
	ck_assert_int_ne(walrus_supervisor_pid(db), sup);
	ck_assert_int_eq(client_check(), WALRUS_OK);
	tu_close_and_wait(db);
}
END_TEST

/*
 * walrus_sync makes the asynchronous writes before it durable: with the WAL
 * writer asleep for 10 s, they are in the WAL buffers only, which die with
 * the instance (its processes are killed; this one's handle is then dead).
 */
START_TEST(sync_makes_async_writes_durable)
{
	const char *dir = tu_tmpdir("walrus-eng");
	walrus_opts *o = test_opts();
	ck_assert_int_eq(walrus_opts_set(o, "wal_writer_delay", "10s"), WALRUS_OK);
	walrus *db = NULL;
	ck_assert_int_eq(walrus_open(dir, o, &db), WALRUS_OK);
	ck_assert_int_eq(walrus_sync(NULL), WALRUS_EINVAL);
	for (int i = 0; i < 100; i++) {
		char k[32];
		int kl = snprintf(k, sizeof(k), "synced-%03d", i);
		ck_assert_int_eq(walrus_put(db, k, (size_t)kl, k, (size_t)kl, WALRUS_ASYNC),
		                 WALRUS_OK);
	}
	ck_assert_int_eq(walrus_sync(db), WALRUS_OK);
	ck_assert_int_eq(walrus_put(db, "later", 5, "x", 1, WALRUS_ASYNC), WALRUS_OK);
	kill_supervisor(db);
	ck_assert_int_eq(walrus_sync(db), WALRUS_ERESTART);
	ck_assert_int_eq(walrus_close(db), WALRUS_OK);
	ck_assert_int_eq(walrus_open(dir, o, &db), WALRUS_OK);
	walrus_opts_free(o);
	for (int i = 0; i < 100; i++) {
		char k[32], v[32];
		int kl = snprintf(k, sizeof(k), "synced-%03d", i);
		size_t vl = 0;
		ck_assert_int_eq(walrus_get_into(db, k, (size_t)kl, v, sizeof(v), &vl), WALRUS_OK);
		ck_assert_mem_eq(v, k, (size_t)kl);
	}
	tu_close_and_wait(db);
}
END_TEST

static int do_panic(void)
{
	jmp_buf jb;
	if (setjmp(jb)) {
		client_leave();
		return client_panicked();
	}
	client_enter(&jb);
	wr_panic("test PANIC from a backend");
}

START_TEST(panic_in_backend_restarts_instance)
{
	const char *dir = tu_tmpdir("walrus-eng");
	walrus *db = open_ok(dir);
	uint64_t gen = client_generation();
	ck_assert_int_eq(do_panic(), WALRUS_EPANIC);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "PANIC"));
	ck_assert_int_eq(client_check(), WALRUS_ERESTART);
	ck_assert_int_eq(walrus_close(db), WALRUS_OK);
	db = open_ok(dir);
	ck_assert_uint_eq(client_generation(), gen + 1);
	tu_close_and_wait(db);
	char path[4200], log[65536];
	snprintf(path, sizeof(path), "%s/%s", dir, WR_LOG_FILE);
	int fd = open(path, O_RDONLY);
	ssize_t n = read(fd, log, sizeof(log) - 1);
	close(fd);
	ck_assert_int_gt(n, 0);
	log[n] = '\0';
	ck_assert_ptr_nonnull(strstr(log, "PANIC:  test PANIC from a backend"));
}
END_TEST

START_TEST(max_connections_limit)
{
	const char *dir = tu_tmpdir("walrus-eng");
	walrus_opts *o = test_opts();
	ck_assert_int_eq(walrus_opts_set(o, "max_connections", "1"), WALRUS_OK);
	walrus *db = NULL;
	ck_assert_int_eq(walrus_open(dir, o, &db), WALRUS_OK);
	walrus_opts_free(o);
	int up[2], down[2];
	ck_assert_int_eq(pipe(up), 0);
	ck_assert_int_eq(pipe(down), 0);
	struct share_arg a = {dir, up[1], down[0]};
	pid_t child = tu_fork(attach_and_wait, &a);
	ck_assert_int_eq(tu_wait(child), 10); /* its open failed: limit */
	ck_assert_int_eq(client_check(), WALRUS_OK);
	tu_close_and_wait(db);
}
END_TEST

START_TEST(no_fd_leaks)
{
	const char *dir = tu_tmpdir("walrus-eng");
	walrus *db = open_ok(dir);
	tu_close_and_wait(db);
	int before = tu_count_fds();
	for (int i = 0; i < 3; i++) {
		db = open_ok(dir);
		tu_close_and_wait(db);
	}
	ck_assert_int_eq(tu_count_fds(), before);
}
END_TEST

static Suite *engine_suite(void)
{
	Suite *s = suite_create("engine");
	TCase *t = tcase_create("open");
	tcase_set_timeout(t, 120);
	tcase_add_test(t, open_missing_dir);
	tcase_add_test(t, open_creates_and_starts_processes);
	tcase_add_test(t, bad_permissions);
	tcase_add_test(t, not_a_walrus_dir);
	tcase_add_test(t, unwritable_dir);
	tcase_add_test(t, empty_dir_needs_create);
	tcase_add_test(t, incompatible_version);
	tcase_add_test(t, bad_option_values);
	tcase_add_test(t, second_supervisor_refused);
	tcase_add_test(t, one_directory_per_process);
	tcase_add_test(t, no_fd_leaks);
	suite_add_tcase(s, t);
	TCase *m = tcase_create("processes");
	tcase_set_timeout(m, 120);
	tcase_add_test(m, two_processes_share_memory);
	tcase_add_test(m, kill9_backend_crash_restart);
	tcase_add_test(m, kill9_supervisor_then_reopen);
	tcase_add_test(m, attach_of_a_dead_process_restarts_nothing);
	tcase_add_test(m, sync_makes_async_writes_durable);
	tcase_add_test(m, panic_in_backend_restarts_instance);
	tcase_add_test(m, max_connections_limit);
	suite_add_tcase(s, m);
	return s;
}

int main(void)
{
	return tu_run(engine_suite());
}
