/*
 * testutil.c - helpers shared by the libcheck suites.  See testutil.h.
 */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "buffer/buffer.h"
#include "fdcache/fdcache.h"
#include "ipc/ipc.h"
#include "wal/wal.h"

#define TU_MAX_DIRS 64
static char *tu_dirs[TU_MAX_DIRS];
static pid_t tu_dirs_owner[TU_MAX_DIRS];
static int tu_ndirs;

static void tu_cleanup(void)
{
	if (getenv("WALRUS_KEEP_TMP"))
		return; /* for post-mortems of a failing case */
	for (int i = 0; i < tu_ndirs; i++)
		if (tu_dirs_owner[i] == getpid())
			tu_rmtree(tu_dirs[i]);
}

const char *tu_tmpdir(const char *prefix)
{
	const char *base = getenv("TMPDIR");
	char tmpl[4096];
	snprintf(tmpl, sizeof(tmpl), "%s/%s-XXXXXX", base && *base ? base : "/tmp",
	         prefix ? prefix : "walrus-test");
	char *d = mkdtemp(tmpl);
	ck_assert_msg(d != NULL, "mkdtemp: %s", strerror(errno));
	if (tu_ndirs == 0)
		atexit(tu_cleanup);
	ck_assert(tu_ndirs < TU_MAX_DIRS);
	tu_dirs_owner[tu_ndirs] = getpid();
	tu_dirs[tu_ndirs] = strdup(d);
	return tu_dirs[tu_ndirs++];
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	if (remove(p) != 0 && errno != ENOENT)
		fprintf(stderr, "testutil: could not remove %s: %s\n", p, strerror(errno));
	return 0;
}

void tu_rmtree(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int tu_count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	struct dirent *e;
	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the DIR's own fd */
}

bool tu_long_mode(void)
{
	const char *v = getenv("WALRUS_LONG");
	return v && *v && strcmp(v, "0") != 0;
}

pid_t tu_fork(int (*fn)(void *), void *arg)
{
	pid_t pid = fork();
	ck_assert_msg(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0)
		_exit(fn(arg));
	return pid;
}

int tu_wait(pid_t pid)
{
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	return 128 + WTERMSIG(st);
}

bool tu_proc_gone(pid_t pid)
{
	char path[64], buf[256];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return true;
	bool ok = fgets(buf, sizeof(buf), f) != NULL;
	fclose(f);
	char *p = strrchr(buf, ')');
	return !ok || p == NULL || p[2] == 'Z' || p[2] == 'X';
}

void tu_wait_gone(pid_t pid)
{
	for (int i = 0; i < 2000 && !tu_proc_gone(pid); i++)
		usleep(10000);
	ck_assert_msg(tu_proc_gone(pid), "process %d still running", (int)pid);
}

bool tu_in_syscall(pid_t pid, long nr, const void *arg0)
{
	char path[64], line[256], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)pid);
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return false;
	bool ok = fgets(line, sizeof(line), f) != NULL;
	fclose(f);
	char *end;
	if (!ok || strtol(line, &end, 10) != nr || end == line)
		return false;
	if (arg0 != NULL && strtoull(end, NULL, 16) != (uintptr_t)arg0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (f == NULL)
		return false;
	ok = fgets(buf, sizeof(buf), f) != NULL;
	fclose(f);
	char *p = strrchr(buf, ')');
	return ok && p != NULL && p[2] == 'S';
}

/*
 * The living children of @parent named @comm (any name when NULL): their
 * number, and the first @max of their pids in @out.
 */
int tu_children(pid_t parent, const char *comm, pid_t *out, int max)
{
	DIR *d = opendir("/proc");
	ck_assert_ptr_nonnull(d);
	struct dirent *e;
	int n = 0;
	while ((e = readdir(d)) != NULL) {
		char path[300], buf[512];
		snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
		FILE *f = fopen(path, "r");
		if (f == NULL)
			continue;
		bool ok = fgets(buf, sizeof(buf), f) != NULL;
		fclose(f);
		char *open = strchr(buf, '('), *close = strrchr(buf, ')');
		if (!ok || !open || !close || close[2] == 'Z')
			continue;
		long ppid = strtol(close + 4, NULL, 10);
		if (ppid != parent ||
		    (comm != NULL && ((int)strlen(comm) != close - open - 1 ||
		                      strncmp(open + 1, comm, (size_t)(close - open - 1)) != 0)))
			continue;
		if (n < max)
			out[n] = (pid_t)strtol(e->d_name, NULL, 10);
		n++;
	}
	closedir(d);
	return n;
}

void tu_wait_in_syscall(pid_t pid, long nr, const void *arg0)
{
	for (int i = 0; i < 20000; i++) {
		if (tu_in_syscall(pid, nr, arg0))
			return;
		ck_assert_msg(!tu_proc_gone(pid), "process %d ended", (int)pid);
		usleep(1000);
	}
	char path[64], line[256] = "";
	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)pid);
	FILE *f = fopen(path, "r");
	if (f != NULL) {
		if (fgets(line, sizeof(line), f) == NULL)
			line[0] = '\0';
		fclose(f);
	}
	ck_abort_msg("process %d never slept in system call %ld (first argument %p) within 20 s; "
	             "/proc/PID/syscall: %s",
	             (int)pid, nr, arg0, line);
}

int tu_write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, buf, len);
	close(fd);
	return n == (ssize_t)len ? 0 : -1;
}

void tu_flip_bit(const char *path, off_t byte, int bit)
{
	int fd = open(path, O_RDWR);
	ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
	unsigned char c;
	ck_assert_int_eq(pread(fd, &c, 1, byte), 1);
	c ^= (unsigned char)(1u << bit);
	ck_assert_int_eq(pwrite(fd, &c, 1, byte), 1);
	ck_assert_int_eq(fsync(fd), 0);
	close(fd);
}

/*
 * Supervisors are orphans by design (double fork); here they reparent to
 * this process instead of to an init that may never reap them, and the
 * suite waits for every one to exit, so nothing is left behind.
 */
static void reap_orphans(void)
{
	for (int i = 0; i < 3000; i++) {
		pid_t p = waitpid(-1, NULL, WNOHANG);
		if (p < 0 && errno == ECHILD)
			return;
		if (p == 0)
			usleep(10000);
	}
	fprintf(stderr, "testutil: children still running after 30 s\n");
}

/*
 * The directory every case's tu_tmpdir goes under (TMPDIR for the forked
 * cases), made and removed by the runner: a case that fails leaves libcheck's
 * child through _exit, so its own atexit cleanup never runs.
 */
static char *run_dir(void)
{
	const char *base = getenv("TMPDIR");
	char tmpl[4096];
	snprintf(tmpl, sizeof(tmpl), "%s/walrus-run-XXXXXX", base && *base ? base : "/tmp");
	char *d = mkdtemp(tmpl);
	if (d == NULL) {
		perror("testutil: mkdtemp");
		return NULL;
	}
	if (chmod(d, 0711) != 0) /* cases that act as another user reach their dirs */
		perror("testutil: chmod");
	d = strdup(d);
	if (d != NULL && setenv("TMPDIR", d, 1) != 0)
		perror("testutil: setenv TMPDIR");
	return d;
}

int tu_run(Suite *s)
{
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0)
		perror("testutil: PR_SET_CHILD_SUBREAPER");
	char *dir = run_dir();
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	reap_orphans();
	if (dir != NULL && getenv("WALRUS_KEEP_TMP") == NULL)
		tu_rmtree(dir);
	else if (dir != NULL)
		fprintf(stderr, "testutil: kept %s\n", dir);
	free(dir);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

bool tu_same_file(int fd, const char *path)
{
	struct stat a, b;
	return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_ino == b.st_ino &&
	       a.st_dev == b.st_dev;
}

void tu_panic_exit(void)
{
	_exit(TU_PANIC_EXIT);
}

void tu_child_log_to(const char *log)
{
	int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (fd < 0) {
		fprintf(stderr, "testutil: could not open %s: %s\n", log, strerror(errno));
		_exit(4); /* not TU_PANIC_EXIT: the case must not pass */
	}
	wr_log_set_file(fd, WR_LOG);
	wr_set_panic_handler(tu_panic_exit);
}

void tu_check_panic_log(const char *log, const char *what, const char *path)
{
	char buf[8192] = {0};
	int fd = open(log, O_RDONLY);
	ck_assert_msg(fd >= 0, "open %s: %s", log, strerror(errno));
	ck_assert_int_gt(read(fd, buf, sizeof(buf) - 1), 0);
	ck_assert_int_eq(close(fd), 0);
	ck_assert_msg(strstr(buf, "PANIC") != NULL, "log: %s", buf);
	ck_assert_msg(strstr(buf, what) != NULL, "log: %s", buf);
	ck_assert_msg(strstr(buf, path) != NULL, "log: %s", buf);
}

void tu_expect_panic(const char *dir, int (*child)(void *), const char *what, const char *path)
{
	char log[4096];
	snprintf(log, sizeof(log), "%s/%s", dir, TU_PANIC_LOG);
	ck_assert_int_eq(tu_wait(tu_fork(child, log)), TU_PANIC_EXIT);
	tu_check_panic_log(log, what, path);
}

walrus_opts *tu_instance_opts(const char *linger, const char *shared_buffers)
{
	walrus_opts *o = walrus_opts_new();
	ck_assert_ptr_nonnull(o);
	ck_assert_int_eq(walrus_opts_set(o, "create_if_missing", "on"), WALRUS_OK);
	ck_assert_int_eq(walrus_opts_set(o, "supervisor_linger", linger), WALRUS_OK);
	ck_assert_int_eq(walrus_opts_set(o, "shared_buffers", shared_buffers), WALRUS_OK);
	return o;
}

walrus *tu_open(const char *dir, walrus_opts *o)
{
	walrus *db = NULL;
	int rc = walrus_open(dir, o, &db);
	ck_assert_msg(rc == WALRUS_OK, "walrus_open(%s): %d %s", dir, rc, walrus_errmsg());
	walrus_opts_free(o);
	return db;
}

void tu_open_fails(const char *dir, const walrus_opts *o, int code, const char *what)
{
	walrus *db = NULL;
	ck_assert_int_eq(walrus_open(dir, o, &db), code);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), what));
}

void tu_close_and_wait(walrus *db)
{
	pid_t sup = walrus_supervisor_pid(db);
	ck_assert_int_eq(walrus_close(db), WALRUS_OK);
	tu_wait_gone(sup);
}

void *tu_shm_wal_buffers_setup(const wr_options *o, const char *dir, int nslots, bool buffers,
                               size_t extra)
{
	int fd;
	char waldir[4200];
	ck_assert_int_eq(fdc_init(200), WALRUS_OK);
	if (buffers)
		ck_assert_int_eq(smgr_init(dir, o->data_segment_size), WALRUS_OK);
	snprintf(waldir, sizeof(waldir), "%s/wal", dir);
	ck_assert_int_eq(mkdir(waldir, 0700), 0);
	size_t sizes[3];
	int n = 0;
	sizes[n++] = wal_shmem_size(o, nslots);
	if (buffers)
		sizes[n++] = buf_shmem_size(o);
	if (extra > 0)
		sizes[n++] = extra;
	ck_assert_int_eq(shm_create(shm_size_for(sizes, n), WR_HUGE_OFF, &fd), WALRUS_OK);
	ck_assert_int_eq(wal_shmem_init(o, dir, nslots), WALRUS_OK);
	if (buffers)
		ck_assert_int_eq(buf_shmem_init(o), WALRUS_OK);
	void *region = NULL;
	if (extra > 0) {
		region = shm_alloc("tutest", extra);
		ck_assert_ptr_nonnull(region);
	}
	char page[WAL_PAGE_SIZE] = {0};
	wal_long_page_header *lh = (wal_long_page_header *)page;
	lh->std.magic = WAL_PAGE_MAGIC;
	lh->std.info = WAL_PAGE_LONG;
	lh->sysid = TU_SYSID;
	lh->seg_size = (uint32_t)o->wal_segment_size;
	lh->page_size = WAL_PAGE_SIZE;
	ck_assert_int_eq(wal_start_insert_at(WAL_LONG_PHD, 0, WAL_LONG_PHD, TU_SYSID, page),
	                 WALRUS_OK);
	close(fd);
	return region;
}

long tu_stat(walrus *db, const char *section, const char *name)
{
	char *json = NULL, pat[128];
	ck_assert_int_eq(walrus_stats(db, &json), WALRUS_OK);
	const char *sec = strstr(json, section);
	ck_assert_ptr_nonnull(sec);
	snprintf(pat, sizeof(pat), "\"%s\":", name);
	const char *p = strstr(sec, pat);
	ck_assert_ptr_nonnull(p);
	long n = strtol(p + strlen(pat), NULL, 10);
	walrus_free(json);
	return n;
}
