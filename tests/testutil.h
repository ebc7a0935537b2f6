/*
 * testutil.h - helpers shared by the libcheck suites.
 *
 * Temporary directories are created 0700 under $TMPDIR (or /tmp) and
 * removed at exit, so a suite leaves nothing behind even when a case fails
 * (libcheck forks each case; the parent removes what children created).
 */
#ifndef WALRUS_TESTUTIL_H
#define WALRUS_TESTUTIL_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "common/common.h"

/* The build's page size as a string literal, for expected messages. */
#define TU_STR_(x)          #x
#define TU_STR(x)           TU_STR_(x)
#define TU_PAGE_SIZE_STRING TU_STR(WALRUS_PAGE_SIZE)

/* A new empty directory, mode 0700; removed (recursively) at process exit. */
const char *tu_tmpdir(const char *prefix);
/* rm -rf */
void tu_rmtree(const char *path);
/* Number of fds open in this process. */
int tu_count_fds(void);
/* True when WALRUS_LONG is set: suites run their long mode. */
bool tu_long_mode(void);
/* Forks; the child runs fn(arg) and _exits with its return value. */
pid_t tu_fork(int (*fn)(void *), void *arg);
/* Waits for pid; returns its exit status, or 128+signal. */
int tu_wait(pid_t pid);
/* A process is gone when it does not exist or is a zombie nobody reaped yet. */
bool tu_proc_gone(pid_t pid);
/* Waits up to 20 s for tu_proc_gone (fails the test otherwise). */
void tu_wait_gone(pid_t pid);
/*
 * Whether process @pid sleeps in system call @nr (a SYS_ number) whose first
 * argument is @arg0 (any when NULL), from /proc/PID/syscall.  Waits up to
 * 20 s for it (fails the test otherwise).  @arg0: a futex word, say, at the
 * same address in a forked child.
 */
bool tu_in_syscall(pid_t pid, long nr, const void *arg0);
void tu_wait_in_syscall(pid_t pid, long nr, const void *arg0);
/* The living children of @parent named @comm (any name when NULL): their
 * number, and the first @max of their pids in @out. */
int tu_children(pid_t parent, const char *comm, pid_t *out, int max);
/* Writes/reads a whole small file; return 0 on success. */
int tu_write_file(const char *path, const void *buf, size_t len);
/* Flips one bit of a file in place. */
void tu_flip_bit(const char *path, off_t byte, int bit);
/* Runs an SRunner over @s, returns EXIT_SUCCESS/FAILURE (for main()). */
int tu_run(Suite *s);
/* @fd is an fd of @path: the same inode on the same device. */
bool tu_same_file(int fd, const char *path);

/*
 * Children forked by a case.  ck_assert reports only from the case's own
 * process, so a child checks with TU_CHILD_CHECK: a failed check is named on
 * stderr and the child's function returns 1, which the case sees as the
 * child's exit status.  A child that must PANIC installs tu_panic_exit as
 * its panic handler: without one a PANIC aborts, which the case could not
 * tell from a crash.
 */
#define TU_PANIC_EXIT 77
#define TU_CHILD_CHECK(c)                                                                          \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "child check failed at line %d: %s (%s)\n", __LINE__, #c,  \
			        walrus_errmsg());                                                  \
			return 1;                                                                  \
		}                                                                                  \
	} while (0)
/* A panic handler: _exits with TU_PANIC_EXIT. */
void tu_panic_exit(void);
/* In a forked child: logs to @log (appended) and PANICs through tu_panic_exit. */
void tu_child_log_to(const char *log);
/* The log file @log holds a PANIC, @what and @path. */
void tu_check_panic_log(const char *log, const char *what, const char *path);
/*
 * Runs @child(log) in a forked process, log being DIR/TU_PANIC_LOG, and
 * checks that it exited through tu_panic_exit with @what and @path in the
 * log (the child calls tu_child_log_to(log) first).
 */
#define TU_PANIC_LOG "panic.log"
void tu_expect_panic(const char *dir, int (*child)(void *), const char *what, const char *path);

/*
 * Instances, for the engine's suites.  The supervisor of a closed instance
 * lingers (supervisor_linger): a case done with one waits for it to exit, so
 * that the suite leaves no process behind.
 */
/* Options of a test instance: create_if_missing=on, the linger and pool given. */
walrus_opts *tu_instance_opts(const char *linger, const char *shared_buffers);
/* Opens @dir with @o (then freed); fails the test unless the open succeeds. */
walrus *tu_open(const char *dir, walrus_opts *o);
/* walrus_open(@dir, @o) fails with @code, and the error message holds @what. */
void tu_open_fails(const char *dir, const walrus_opts *o, int code, const char *what);
/* Closes @db and waits for its supervisor to exit. */
void tu_close_and_wait(walrus *db);
/* The integer "@name": N after the first @section (a quoted "name" of
 * walrus_stats' JSON); fails the test when absent. */
long tu_stat(walrus *db, const char *section, const char *name);

/*
 * Shared memory as an instance has it, without an instance (for suites of
 * the WAL and the buffer pool): initialises the fd cache (200 fds), makes
 * DIR/wal and a segment with the "wal" region (@nslots inserter slots; a
 * fresh WAL whose first record starts right after the long header of its
 * first segment, system id TU_SYSID), the "buffers" region when @buffers
 * (then storage is initialised in @dir too), and a zeroed region "tutest"
 * of @extra bytes when @extra > 0, whose address is returned (else NULL).
 * Forked children inherit the segment, as the supervisor's children do.
 * Attaches nothing: call wal_attach(slot) and buf_attach() after it.
 */
#define TU_SYSID 0x1234567890abcdefULL
void *tu_shm_wal_buffers_setup(const wr_options *o, const char *dir, int nslots, bool buffers,
                               size_t extra);

#endif
