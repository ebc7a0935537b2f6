/*
 * log.c - the engine's log: levels DEBUG..PANIC, three sinks, and PANIC.
 *
 * Interface: wr_log()/wr_vlog() hand one line to the log file, to stderr
 * and to the application's handler (walrus_set_log_handler), each sink with
 * its own minimum level; wr_panic() logs and brings the process down
 * through the installed handler; wr_crit_*() count critical-section nesting.
 *
 * Notes: a line is formatted completely in a local buffer and handed to the
 * kernel with a single write(2) per sink.  With the log file opened O_APPEND,
 * the lines of the several processes of an instance never interleave.  Lines
 * longer than the buffer are cut and end in "...".  errno is saved on entry,
 * put back before formatting (so "%m" names the caller's error) and again on
 * return, so logging never disturbs an error path.
 *
 * A library must not write on its caller's terminal: the stderr sink is off
 * unless a program turns it on (the `walrus` command does).  The
 * application's handler is called under handler_mu, so its calls never
 * overlap and, once walrus_set_log_handler() returns, the previous handler
 * is not running and will not be called again (its argument may be freed).
 * Sink settings are atomics: any thread may log while another changes them.
 */
#include "common/common.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define LOG_LINE_MAX 4096
#define LOG_NAME_MAX 32

static const char *const level_names[] = {"DEBUG", "LOG", "WARNING", "ERROR", "FATAL", "PANIC"};

#define LEVEL_NONE (WR_PANIC + 1) /* a sink's level that lets nothing through */

static _Atomic int log_fd = -1;
static _Atomic int log_file_level = WR_LOG;
static _Atomic int log_stderr_level = LEVEL_NONE;
static char log_name[LOG_NAME_MAX] = "walrus";

/* The application's handler; its level is also read without the lock, as a filter. */
static pthread_mutex_t handler_mu = PTHREAD_MUTEX_INITIALIZER;
static walrus_log_fn handler_fn; /* under handler_mu */
static void *handler_arg;        /* under handler_mu */
static _Atomic int handler_level = LEVEL_NONE;
static pthread_once_t handler_fork_once = PTHREAD_ONCE_INIT;
/* A handler that logs (it must not) would wait for itself: its lines are dropped. */
static _Thread_local bool in_handler;

_Static_assert((int)WALRUS_LOG_DEBUG == (int)WR_DEBUG && (int)WALRUS_LOG_LOG == (int)WR_LOG &&
                   (int)WALRUS_LOG_WARNING == (int)WR_WARNING &&
                   (int)WALRUS_LOG_ERROR == (int)WR_ERROR &&
                   (int)WALRUS_LOG_FATAL == (int)WR_FATAL && (int)WALRUS_LOG_PANIC == (int)WR_PANIC,
               "the public log levels are the engine's");

/* Set while the process has no other thread in the library (attach, detach). */
static wr_panic_handler panic_handler;
/* A PANIC and a critical section belong to the thread that is in them. */
static _Thread_local volatile sig_atomic_t panic_running;
static _Thread_local int crit_depth;

const char *wr_level_name(int level)
{
	if (level < WR_DEBUG || level > WR_PANIC)
		return "UNKNOWN";
	return level_names[level];
}

int wr_level_parse(const char *name)
{
	if (name == NULL)
		return -1;
	for (size_t i = 0; i < WR_ARRAY_LEN(level_names); i++)
		if (strcasecmp(name, level_names[i]) == 0)
			return (int)i;
	return -1;
}

void wr_log_set_file(int fd, int min_level)
{
	log_fd = fd;
	log_file_level = min_level;
}

void wr_log_set_stderr(int min_level)
{
	log_stderr_level = min_level;
}

void wr_log_set_process_name(const char *name)
{
	if (name == NULL || name[0] == '\0')
		name = "walrus";
	/* Silently shortened: a name is a label, not worth failing for. */
	snprintf(log_name, sizeof(log_name), "%s", name);
}

const char *wr_log_process_name(void)
{
	return log_name;
}

static bool file_wants(int fd, int level)
{
	return fd >= 0 && level >= log_file_level;
}

static bool stderr_wants(int fd, int level)
{
	/* When the log file is stderr itself, the file sink alone writes the line. */
	return level >= log_stderr_level && !(file_wants(fd, level) && fd == STDERR_FILENO);
}

/* ---------------------------------------------------------------- the application's handler */

/*
 * A fork() while another thread is inside the handler would leave the
 * child's copy of handler_mu locked for ever: hold it across fork.
 */
static void handler_lock(void)
{
	(void)pthread_mutex_lock(&handler_mu);
}

static void handler_unlock(void)
{
	(void)pthread_mutex_unlock(&handler_mu);
}

static void handler_fork_hooks(void)
{
	(void)pthread_atfork(handler_lock, handler_unlock, handler_unlock);
}

void wr_log_set_handler(walrus_log_fn fn, void *arg, int min_level)
{
	(void)pthread_once(&handler_fork_once, handler_fork_hooks);
	handler_lock();
	handler_fn = fn;
	handler_arg = arg;
	handler_level = fn != NULL ? WR_MAX(min_level, WR_DEBUG) : LEVEL_NONE;
	handler_unlock();
}

void walrus_set_log_handler(walrus_log_fn fn, void *arg, int min_level)
{
	wr_log_set_handler(fn, arg, min_level);
}

static bool handler_wants(int level)
{
	return level >= handler_level && !in_handler;
}

/* @msg: the message alone, without prefix or newline. */
static void handler_call(int level, const char *msg)
{
	handler_lock();
	/* Checked again under the lock: the handler may have been replaced meanwhile. */
	if (handler_fn != NULL && level >= handler_level) {
		in_handler = true;
		handler_fn(handler_arg, level, msg);
		in_handler = false;
	}
	handler_unlock();
}

/*
 * Writes the whole line or gives up: there is nowhere left to report a
 * failing log sink, and blocking the engine on it would be worse.
 */
static void write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		if (n == 0)
			return;
		buf += n;
		len -= (size_t)n;
	}
}

/* "2026-12-03 09:30:00.123 UTC [4242] walrus-ckpt LOG:  "; returns its length. */
static size_t format_prefix(char *buf, size_t len, int level)
{
	struct timespec ts;
	struct tm tm;
	char stamp[32];

	if (clock_gettime(CLOCK_REALTIME, &ts) != 0 || gmtime_r(&ts.tv_sec, &tm) == NULL ||
	    strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm) == 0)
		snprintf(stamp, sizeof(stamp), "0000-00-00 00:00:00");
	int n = snprintf(buf, len, "%s.%03ld UTC [%ld] %s %s:  ", stamp, ts.tv_nsec / 1000000L,
	                 (long)getpid(), log_name, wr_level_name(level));
	if (n < 0)
		return 0;
	return WR_MIN((size_t)n, len - 1);
}

/*
 * Formats one complete line, newline included; returns its length.
 * *msg_off: where the message starts, after the prefix.
 */
static size_t format_line(char *buf, size_t size, int level, int saved_errno, size_t *msg_off,
                          const char *fmt, va_list ap)
{
	size_t used = format_prefix(buf, size, level);
	*msg_off = used;
	size_t room = size - used - 1; /* keep one byte for the '\n' */

	errno = saved_errno;
	int n = vsnprintf(buf + used, room + 1, fmt, ap);
	if (n < 0)
		n = 0;
	if ((size_t)n > room) {
		memcpy(buf + used + room - 3, "...", 4); /* and the terminator */
		n = (int)room;
	}
	used += (size_t)n;
	/* Callers sometimes end a message with '\n'; do not print an empty line after it. */
	if (used > 0 && buf[used - 1] == '\n')
		used--;
	buf[used++] = '\n';
	return used;
}

void wr_vlog(int level, const char *fmt, va_list ap)
{
	int saved_errno = errno;
	int fd = log_fd;
	bool to_file = file_wants(fd, level);
	bool to_stderr = stderr_wants(fd, level);
	bool to_handler = handler_wants(level);
	char line[LOG_LINE_MAX];
	size_t msg_off;

	if (!to_file && !to_stderr && !to_handler)
		return;
	size_t len = format_line(line, sizeof(line), level, saved_errno, &msg_off, fmt, ap);
	if (to_file)
		write_all(fd, line, len);
	if (to_stderr)
		write_all(STDERR_FILENO, line, len);
	if (to_handler) {
		line[len - 1] = '\0'; /* the newline: the handler gets the message alone */
		handler_call(level, line + msg_off);
	}
	errno = saved_errno;
}

void wr_log(int level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	wr_vlog(level, fmt, ap);
	va_end(ap);
}

/*
 * Installing a handler also re-arms the recursion guard below: a backend's
 * handler unwinds (longjmp) to the API boundary instead of returning, and
 * must be able to PANIC again later; reinstalling itself says so.
 */
void wr_set_panic_handler(wr_panic_handler fn)
{
	panic_handler = fn;
	panic_running = 0;
}

void wr_panic_rearm(void)
{
	panic_running = 0;
	crit_depth = 0; /* the unwound call left its critical sections by longjmp */
}

_Noreturn void wr_panic(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	wr_vlog(WR_PANIC, fmt, ap);
	va_end(ap);

	/* A PANIC raised while handling a PANIC cannot be handled any better. */
	if (panic_running)
		abort();
	panic_running = 1;

	if (panic_handler != NULL)
		panic_handler();
	/* Reached only in the instance's own processes: every public call of the
	 * library installs a handler that unwinds to its boundary. */
	abort();
}

void wr_crit_enter(void)
{
	crit_depth++;
}

void wr_crit_exit(void)
{
	if (WR_UNLIKELY(crit_depth <= 0))
		wr_panic("critical section exited more often than entered");
	crit_depth--;
}

bool wr_in_crit(void)
{
	return crit_depth > 0;
}
