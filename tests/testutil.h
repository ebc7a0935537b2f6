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
#include <sys/types.h>

#include "common/common.h"

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
/* Writes/reads a whole small file; return 0 on success. */
int tu_write_file(const char *path, const void *buf, size_t len);
/* Flips one bit of a file in place. */
void tu_flip_bit(const char *path, off_t byte, int bit);
/* Runs an SRunner over @s, returns EXIT_SUCCESS/FAILURE (for main()). */
int tu_run(Suite *s);

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
