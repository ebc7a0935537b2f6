/*
 * test_log.c - log line format, sinks and levels, %m and errno, PANIC and
 * critical sections.
 */
#include "common/common.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <regex.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The file sink goes to a non-blocking pipe, so "nothing was written" is checkable. */
static int sink[2];

static void sink_open(int min_level)
{
	ck_assert_int_eq(pipe2(sink, O_NONBLOCK | O_CLOEXEC), 0);
	wr_log_set_file(sink[1], min_level);
}

/* Everything written so far ("" if nothing). */
static const char *sink_read(void)
{
	static char buf[16384];
	size_t used = 0;
	ssize_t n;

	while ((n = read(sink[0], buf + used, sizeof(buf) - 1 - used)) > 0)
		used += (size_t)n;
	ck_assert(n == 0 || errno == EAGAIN);
	buf[used] = '\0';
	return buf;
}

static void assert_matches(const char *text, const char *pattern)
{
	regex_t re;

	ck_assert_int_eq(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0);
	int rc = regexec(&re, text, 0, NULL, 0);
	regfree(&re);
	ck_assert_msg(rc == 0, "\"%s\" does not match /%s/", text, pattern);
}

#define STAMP "[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3} UTC"

START_TEST(test_line_format)
{
	char pattern[256];

	sink_open(WR_DEBUG);
	ck_assert_str_eq(wr_log_process_name(), "walrus");
	wr_log_set_process_name("walrus-ckpt");
	ck_assert_str_eq(wr_log_process_name(), "walrus-ckpt");
	wr_log(WR_LOG, "checkpoint complete: wrote %d buffers", 42);
	snprintf(pattern, sizeof(pattern),
	         "^" STAMP " \\[%d\\] walrus-ckpt LOG:  checkpoint complete: wrote 42 buffers\n$",
	         (int)getpid());
	assert_matches(sink_read(), pattern);
}
END_TEST

START_TEST(test_default_name_and_levels)
{
	static const char *const names[] = {"DEBUG", "LOG", "WARNING", "ERROR", "FATAL", "PANIC"};

	wr_log_set_stderr(WR_PANIC + 1);
	sink_open(WR_DEBUG);
	for (int l = WR_DEBUG; l <= WR_FATAL; l++) {
		char pattern[128];
		wr_log(l, "at %s", names[l]);
		snprintf(pattern, sizeof(pattern), "^" STAMP " \\[[0-9]+\\] walrus %s:  at %s\n$",
		         names[l], names[l]);
		assert_matches(sink_read(), pattern);
	}
	for (int l = WR_DEBUG; l <= WR_PANIC; l++) {
		ck_assert_str_eq(wr_level_name(l), names[l]);
		ck_assert_int_eq(wr_level_parse(names[l]), l);
	}
	ck_assert_int_eq(wr_level_parse("warning"), WR_WARNING);
	ck_assert_int_eq(wr_level_parse("NOTICE"), -1);
	ck_assert_int_eq(wr_level_parse(NULL), -1);
}
END_TEST

START_TEST(test_file_level_filter)
{
	wr_log_set_stderr(WR_PANIC + 1);
	sink_open(WR_WARNING);
	wr_log(WR_DEBUG, "debug");
	wr_log(WR_LOG, "log");
	ck_assert_str_eq(sink_read(), "");
	wr_log(WR_WARNING, "warn");
	ck_assert_ptr_nonnull(strstr(sink_read(), "WARNING:  warn\n"));
	wr_log(WR_ERROR, "err");
	ck_assert_ptr_nonnull(strstr(sink_read(), "ERROR:  err\n"));
	wr_log_set_file(-1, WR_DEBUG);
	wr_log(WR_ERROR, "gone");
	ck_assert_str_eq(sink_read(), "");
}
END_TEST

/* stderr is captured through a pipe too; libcheck runs each case in its own child. */
START_TEST(test_stderr_sink)
{
	int err[2];

	ck_assert_int_eq(pipe2(err, O_NONBLOCK), 0);
	ck_assert_int_eq(dup2(err[1], STDERR_FILENO), STDERR_FILENO);
	sink[0] = err[0];

	/* A library stays off its caller's terminal unless the program asks. */
	wr_log(WR_PANIC, "not by default");
	ck_assert_str_eq(sink_read(), "");
	wr_log_set_stderr(WR_WARNING);
	wr_log(WR_LOG, "below the level");
	ck_assert_str_eq(sink_read(), "");
	wr_log(WR_WARNING, "asked for");
	ck_assert_ptr_nonnull(strstr(sink_read(), "walrus WARNING:  asked for\n"));
	wr_log_set_stderr(WR_DEBUG);
	wr_log(WR_DEBUG, "now yes");
	ck_assert_ptr_nonnull(strstr(sink_read(), "DEBUG:  now yes\n"));
	wr_log_set_stderr(WR_PANIC + 1);
	wr_log(WR_FATAL, "silenced");
	ck_assert_str_eq(sink_read(), "");
}
END_TEST

START_TEST(test_percent_m_and_errno)
{
	sink_open(WR_LOG);
	errno = EACCES;
	wr_log(WR_LOG, "could not open \"%s\": %m", "x");
	ck_assert_int_eq(errno, EACCES);
	ck_assert_ptr_nonnull(
	    strstr(sink_read(), "LOG:  could not open \"x\": Permission denied\n"));
	/* %m after an argument whose formatting could itself disturb errno. */
	errno = ENOSPC;
	wr_log(WR_LOG, "%s %d %m", "a", 1);
	ck_assert_int_eq(errno, ENOSPC);
	ck_assert_ptr_nonnull(strstr(sink_read(), "LOG:  a 1 No space left on device\n"));
	/* Filtered out: errno untouched as well. */
	errno = EIO;
	wr_log(WR_DEBUG, "quiet");
	ck_assert_int_eq(errno, EIO);
}
END_TEST

START_TEST(test_long_line_truncated)
{
	static char big[10000];

	memset(big, 'y', sizeof(big) - 1);
	sink_open(WR_LOG);
	wr_log(WR_LOG, "%s", big);
	const char *out = sink_read();
	size_t len = strlen(out);
	ck_assert_uint_le(len, 4096);
	ck_assert_uint_gt(len, 4000);
	ck_assert_str_eq(out + len - 5, "y...\n");
	ck_assert_ptr_eq(strchr(out, '\n'), out + len - 1);
}
END_TEST

START_TEST(test_trailing_newline)
{
	sink_open(WR_LOG);
	wr_log(WR_LOG, "ends in newline\n");
	const char *out = sink_read();
	ck_assert_ptr_nonnull(strstr(out, "LOG:  ends in newline\n"));
	ck_assert_ptr_eq(strchr(out, '\n'), out + strlen(out) - 1);
}
END_TEST

START_TEST(test_name_truncated)
{
	wr_log_set_process_name("a-process-name-that-is-much-longer-than-any-sane-one");
	ck_assert_uint_lt(strlen(wr_log_process_name()), 32);
	wr_log_set_process_name(NULL);
	ck_assert_str_eq(wr_log_process_name(), "walrus");
}
END_TEST

START_TEST(test_crit_nesting)
{
	ck_assert(!wr_in_crit());
	wr_crit_enter();
	ck_assert(wr_in_crit());
	wr_crit_enter();
	wr_crit_exit();
	ck_assert(wr_in_crit());
	wr_crit_exit();
	ck_assert(!wr_in_crit());
}
END_TEST

/* ------------------------------------------------------------ the application's handler */

typedef struct seen {
	int calls;
	int last_level;
	char last[256];
} seen;

static void record_handler(void *arg, int level, const char *line)
{
	seen *s = arg;
	s->calls++;
	s->last_level = level;
	snprintf(s->last, sizeof(s->last), "%s", line);
}

START_TEST(test_handler_gets_messages)
{
	seen a = {0}, b = {0};
	sink_open(WR_LOG);
	walrus_set_log_handler(record_handler, &a, WALRUS_LOG_WARNING);
	wr_log(WR_LOG, "below");
	ck_assert_int_eq(a.calls, 0);
	errno = ENOSPC;
	wr_log(WR_ERROR, "could not write \"%s\": %m\n", "x");
	ck_assert_int_eq(a.calls, 1);
	ck_assert_int_eq(a.last_level, WALRUS_LOG_ERROR);
	/* The message alone: no prefix, no newline. */
	ck_assert_str_eq(a.last, "could not write \"x\": No space left on device");
	ck_assert_int_eq(errno, ENOSPC);
	/* The file sink is independent of the handler. */
	ck_assert_ptr_nonnull(strstr(sink_read(), "LOG:  below\n"));
	walrus_set_log_handler(record_handler, &b, WALRUS_LOG_DEBUG);
	wr_log(WR_DEBUG, "to b");
	ck_assert_int_eq(a.calls, 1);
	ck_assert_int_eq(b.calls, 1);
	ck_assert_str_eq(b.last, "to b");
	walrus_set_log_handler(NULL, &b, WALRUS_LOG_DEBUG);
	wr_log(WR_PANIC, "nobody");
	ck_assert_int_eq(b.calls, 1);
}
END_TEST

static int reentered;

/* Breaks the rule (no calls back into walrus): must not deadlock. */
static void logging_handler(void *arg, int level, const char *line)
{
	(void)arg;
	(void)level;
	(void)line;
	reentered++;
	wr_log(WR_ERROR, "from inside the handler");
}

START_TEST(test_handler_that_logs_is_not_reentered)
{
	sink_open(WR_LOG);
	walrus_set_log_handler(logging_handler, NULL, WALRUS_LOG_LOG);
	wr_log(WR_LOG, "outer");
	ck_assert_int_eq(reentered, 1);
	/* The other sinks still get the inner line. */
	ck_assert_ptr_nonnull(strstr(sink_read(), "ERROR:  from inside the handler\n"));
	walrus_set_log_handler(NULL, NULL, 0);
}
END_TEST

/*
 * Threads log while the main thread swaps handlers: every call reaches the
 * handler installed at that moment, calls never overlap, and a replaced
 * handler's counter never moves once the swap returned.
 */
#define LOG_THREADS 4
#define LOG_LINES   2000

typedef struct counting {
	_Atomic int calls;
	_Atomic int inside;
	_Atomic int overlaps;
} counting;

static void counting_handler(void *arg, int level, const char *line)
{
	counting *c = arg;
	(void)level;
	(void)line;
	if (atomic_fetch_add(&c->inside, 1) != 0)
		atomic_fetch_add(&c->overlaps, 1);
	atomic_fetch_add(&c->calls, 1);
	atomic_fetch_sub(&c->inside, 1);
}

static void *log_thread(void *arg)
{
	(void)arg;
	for (int i = 0; i < LOG_LINES; i++)
		wr_log(WR_LOG, "line %d", i);
	return NULL;
}

START_TEST(test_handler_swapped_under_threads)
{
	static counting c[8];
	pthread_t t[LOG_THREADS];
	wr_log_set_file(-1, WR_PANIC);
	walrus_set_log_handler(counting_handler, &c[0], WALRUS_LOG_LOG);
	for (int i = 0; i < LOG_THREADS; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, log_thread, NULL), 0);
	for (int k = 1; k < 8; k++) {
		walrus_set_log_handler(counting_handler, &c[k], WALRUS_LOG_LOG);
		int frozen = atomic_load(&c[k - 1].calls);
		wr_log(WR_LOG, "swap %d", k); /* lets the other threads run a little */
		ck_assert_int_eq(atomic_load(&c[k - 1].calls), frozen);
	}
	for (int i = 0; i < LOG_THREADS; i++)
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
	walrus_set_log_handler(NULL, NULL, 0);
	int total = 0;
	for (int k = 0; k < 8; k++) {
		total += atomic_load(&c[k].calls);
		ck_assert_int_eq(atomic_load(&c[k].overlaps), 0);
	}
	ck_assert_int_eq(total, LOG_THREADS * LOG_LINES + 7);
}
END_TEST

/* ------------------------------------------------------------ PANIC */

static int marks[2]; /* the handler writes one byte per call here */
static bool handler_panics_again;

static void mark_handler(void)
{
	ssize_t n = write(marks[1], "H", 1);
	(void)n;
	if (handler_panics_again)
		wr_panic("second panic from the handler");
}

static int panic_child(void *arg)
{
	wr_log_set_stderr(WR_PANIC + 1);
	wr_log_set_process_name("walrus-test");
	if (arg != NULL)
		wr_set_panic_handler(mark_handler);
	wr_panic("could not fsync file \"%s\": %s", "base/1", "Input/output error");
}

static void run_panic(bool with_handler, bool again, int expect_marks)
{
	char buf[16];

	sink_open(WR_LOG);
	ck_assert_int_eq(pipe2(marks, O_NONBLOCK), 0);
	handler_panics_again = again;
	pid_t pid = tu_fork(panic_child, with_handler ? "h" : NULL);
	ck_assert_int_eq(tu_wait(pid), 128 + SIGABRT);
	ssize_t n = read(marks[0], buf, sizeof(buf));
	ck_assert_int_eq(n < 0 ? 0 : n, expect_marks);
	const char *out = sink_read();
	ck_assert_ptr_nonnull(strstr(
	    out, "walrus-test PANIC:  could not fsync file \"base/1\": Input/output error\n"));
	if (again)
		ck_assert_ptr_nonnull(strstr(out, "PANIC:  second panic from the handler\n"));
}

START_TEST(test_panic_calls_handler_then_aborts)
{
	run_panic(true, false, 1);
}
END_TEST

START_TEST(test_panic_without_handler_aborts)
{
	run_panic(false, false, 0);
}
END_TEST

START_TEST(test_panic_in_handler_aborts_at_once)
{
	run_panic(true, true, 1);
}
END_TEST

static int crit_underflow_child(void *arg)
{
	(void)arg;
	wr_log_set_stderr(WR_PANIC + 1);
	wr_crit_exit();
	return 0;
}

START_TEST(test_crit_underflow_panics)
{
	ck_assert_int_eq(tu_wait(tu_fork(crit_underflow_child, NULL)), 128 + SIGABRT);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("log");
	TCase *tc = tcase_create("log");
	TCase *panic = tcase_create("panic");

	tcase_add_test(tc, test_line_format);
	tcase_add_test(tc, test_default_name_and_levels);
	tcase_add_test(tc, test_file_level_filter);
	tcase_add_test(tc, test_stderr_sink);
	tcase_add_test(tc, test_percent_m_and_errno);
	tcase_add_test(tc, test_long_line_truncated);
	tcase_add_test(tc, test_trailing_newline);
	tcase_add_test(tc, test_name_truncated);
	tcase_add_test(tc, test_crit_nesting);
	tcase_add_test(tc, test_handler_gets_messages);
	tcase_add_test(tc, test_handler_that_logs_is_not_reentered);
	tcase_add_test(tc, test_handler_swapped_under_threads);
	tcase_add_test(panic, test_panic_calls_handler_then_aborts);
	tcase_add_test(panic, test_panic_without_handler_aborts);
	tcase_add_test(panic, test_panic_in_handler_aborts_at_once);
	tcase_add_test(panic, test_crit_underflow_panics);
	suite_add_tcase(s, tc);
	suite_add_tcase(s, panic);
	return tu_run(s);
}
