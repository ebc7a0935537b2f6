/*
 * log.c - the engine's log: levels DEBUG..PANIC, two sinks, and PANIC.
 *
 * Interface: wr_log()/wr_vlog() write one line to the log file and/or
 * stderr, each sink with its own minimum level; wr_panic() logs and brings
 * the process down through the installed handler; wr_crit_*() count
 * critical-section nesting.
 *
 * Notes: a line is formatted completely in a local buffer and handed to the
 * kernel with a single write(2) per sink.  With the log file opened O_APPEND,
 * the lines of the several processes of an instance never interleave.  Lines
 * longer than the buffer are cut and end in "...".  errno is saved on entry,
 * put back before formatting (so "%m" names the caller's error) and again on
 * return, so logging never disturbs an error path.
 */
#include "common/common.h"

#include <errno.h>
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

static int log_fd = -1;
static int log_file_level = WR_LOG;
static int log_stderr_level = WR_WARNING;
static char log_name[LOG_NAME_MAX] = "walrus";

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

static bool file_wants(int level)
{
	return log_fd >= 0 && level >= log_file_level;
}

static bool stderr_wants(int level)
{
	/* When the log file is stderr itself, the file sink alone writes the line. */
	return level >= log_stderr_level && !(file_wants(level) && log_fd == STDERR_FILENO);
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

/* Formats one complete line, newline included; returns its length. */
static size_t format_line(char *buf, size_t size, int level, int saved_errno, const char *fmt,
                          va_list ap)
{
	size_t used = format_prefix(buf, size, level);
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
	bool to_file = file_wants(level);
	bool to_stderr = stderr_wants(level);
	char line[LOG_LINE_MAX];

	if (!to_file && !to_stderr)
		return;
	size_t len = format_line(line, sizeof(line), level, saved_errno, fmt, ap);
	if (to_file)
		write_all(log_fd, line, len);
	if (to_stderr)
		write_all(STDERR_FILENO, line, len);
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
