/*
 * test_quiet.c - the library never writes to its caller's stdout or stderr:
 * a child with both pointed at files runs calls that make the engine speak
 * (a new directory, bad key sizes, a missing key, an instance option that
 * differs from the running instance's, a PANIC in a backend, a stop of no
 * instance), and both files stay empty, while the application's log
 * handler receives the messages.
 */
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"

/* What the handler received; one thread logs here, the buffer needs no lock. */
typedef struct heard {
	char text[16384];
	size_t used;
	int panics;
} heard;

static void record(void *arg, int level, const char *line)
{
	heard *h = arg;
	int n = snprintf(h->text + h->used, sizeof(h->text) - h->used, "%d %s\n", level, line);
	if (n > 0)
		h->used = WR_MIN(h->used + (size_t)n, sizeof(h->text) - 1);
	h->panics += level == WALRUS_LOG_PANIC;
}

static walrus_opts *quiet_opts(const char *shared_buffers)
{
	walrus_opts *o = walrus_opts_new();
	if (o == NULL || walrus_opts_set(o, "create_if_missing", "on") != WALRUS_OK ||
	    walrus_opts_set(o, "supervisor_linger", "5s") != WALRUS_OK ||
	    walrus_opts_set(o, "shared_buffers", shared_buffers) != WALRUS_OK)
		return NULL;
	return o;
}

static int panic_now(void)
{
	jmp_buf jb;
	if (setjmp(jb)) {
		client_leave();
		return client_panicked();
	}
	client_enter(&jb);
	wr_panic("test PANIC for the quiet library");
}

/* Calls that make the engine speak; returns 1 (and says why on stderr) on a surprise. */
static int speak(const char *dir)
{
	walrus *db = NULL;
	void *v = NULL;
	size_t vl = 0;
	char big[WALRUS_MAX_KEY + 1] = {0};
	walrus_opts *o = quiet_opts("1MB"), *o2 = quiet_opts("2MB");
	TU_CHILD_CHECK(o != NULL && o2 != NULL);
	TU_CHILD_CHECK(walrus_stop(dir, WALRUS_STOP_FAST, 1) == WALRUS_ENOENT);
	TU_CHILD_CHECK(walrus_open(dir, o, &db) == WALRUS_OK);
	TU_CHILD_CHECK(walrus_put(db, "", 0, "v", 1, WALRUS_SYNC) == WALRUS_EINVAL);
	TU_CHILD_CHECK(walrus_put(db, big, sizeof(big), "v", 1, WALRUS_SYNC) == WALRUS_ETOOBIG);
	TU_CHILD_CHECK(walrus_get(db, "absent", 6, &v, &vl) == WALRUS_ENOTFOUND);
	TU_CHILD_CHECK(walrus_close(db) == WALRUS_OK);
	/* The instance lingers with 1MB: this open is warned (a WARNING in the log). */
	TU_CHILD_CHECK(walrus_open(dir, o2, &db) == WALRUS_OK);
	TU_CHILD_CHECK(panic_now() == WALRUS_EPANIC);
	(void)walrus_close(db);
	TU_CHILD_CHECK(walrus_open(dir, o, &db) == WALRUS_OK); /* after the restart */
	pid_t sup = walrus_supervisor_pid(db);
	TU_CHILD_CHECK(walrus_close(db) == WALRUS_OK);
	TU_CHILD_CHECK(walrus_stop(dir, WALRUS_STOP_FAST, 1) == WALRUS_OK);
	TU_CHILD_CHECK(tu_proc_gone(sup));
	TU_CHILD_CHECK(walrus_stop(dir, WALRUS_STOP_FAST, 1) == WALRUS_ENOTRUNNING);
	walrus_opts_free(o);
	walrus_opts_free(o2);
	return 0;
}

struct quiet_arg {
	const char *dir, *out, *err;
};

static int quiet_child(void *p)
{
	struct quiet_arg *a = p;
	heard h = {.used = 0};
	int out = open(a->out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	int err = open(a->err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (out < 0 || err < 0 || dup2(out, STDOUT_FILENO) < 0 || dup2(err, STDERR_FILENO) < 0)
		return 2;
	close(out);
	close(err);
	walrus_set_log_handler(record, &h, WALRUS_LOG_LOG);
	int rc = speak(a->dir);
	walrus_set_log_handler(NULL, NULL, 0);
	fflush(stdout);
	fflush(stderr);
	if (rc != 0)
		return rc;
	/* Said elsewhere, then: the handler heard the option note and the PANIC. */
	TU_CHILD_CHECK(strstr(h.text, "2 instance options not applied: shared_buffers=2MB") !=
	               NULL);
	TU_CHILD_CHECK(strstr(h.text, "5 test PANIC for the quiet library") != NULL);
	TU_CHILD_CHECK(h.panics == 1);
	return 0;
}

static void assert_empty(const char *path)
{
	char buf[2048] = "";
	struct stat st;
	ck_assert_int_eq(stat(path, &st), 0);
	if (st.st_size != 0) {
		int fd = open(path, O_RDONLY);
		ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
		buf[n > 0 ? n : 0] = '\0';
		if (fd >= 0)
			close(fd);
	}
	ck_assert_msg(st.st_size == 0, "%s holds %lld bytes: %s", path, (long long)st.st_size, buf);
}

START_TEST(library_is_quiet)
{
	const char *base = tu_tmpdir("walrus-quiet");
	char dir[4200], out[4200], err[4200];
	snprintf(dir, sizeof(dir), "%s/data", base);
	snprintf(out, sizeof(out), "%s/stdout", base);
	snprintf(err, sizeof(err), "%s/stderr", base);
	struct quiet_arg a = {dir, out, err};
	int st = tu_wait(tu_fork(quiet_child, &a));
	assert_empty(err); /* first: a failed child check is written there */
	assert_empty(out);
	ck_assert_int_eq(st, 0);
	/* The instance's log has the lines too. */
	char log[4400], buf[1 << 16];
	snprintf(log, sizeof(log), "%s/%s", dir, WR_LOG_FILE);
	int fd = open(log, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	ck_assert_int_eq(close(fd), 0);
	ck_assert_int_gt(n, 0);
	buf[n] = '\0';
	ck_assert_ptr_nonnull(
	    strstr(buf, "walrus-backend PANIC:  test PANIC for the quiet library"));
	ck_assert_ptr_nonnull(strstr(buf, "instance options not applied: shared_buffers=2MB"));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("quiet");
	TCase *t = tcase_create("quiet");
	tcase_set_timeout(t, 120);
	tcase_add_test(t, library_is_quiet);
	suite_add_tcase(s, t);
	return tu_run(s);
}
