/*
 * testsupport.h - fault injection for the test suites: failpoints and the
 * power-loss journal, plugged into the fd cache's system calls.
 *
 * Contract: compiled only into test builds (meson -Dtest_hooks=true, which
 * defines WALRUS_TEST_HOOKS).  Without it every call below is a static
 * inline no-op (no failpoint fires, the journal is off) and neither
 * WALRUS_FAILPOINTS nor WALRUS_POWERLOSS is read: an environment variable
 * cannot inject faults into a user's process, nor make it _exit().
 *
 * Failpoints make a syscall of the fd cache fail with an errno as if the
 * kernel had returned it.  A spec is a ';'-separated list of entries
 *     OP:ERRNO[:PATH_SUBSTRING][@SKIP][*COUNT]
 * OP is open, open_direct (an open with O_DIRECT; "open" matches those
 * too), stat (the data directory walk's lstat), pread, pwrite, fsync,
 * fdatasync, sync_range, truncate,
 * fallocate, punch (FALLOC_FL_PUNCH_HOLE), mmap (smgr_map_block's), rename,
 * unlink, close,
 * fsync_dir, mkdir, any, or backup (no
 * syscall: the steps of a base backup, whose path is "start DEST",
 * "copy-data FILE", "copy-wal SEGMENT", "before-label DEST" or
 * "before-done DEST": "backup:KILL:copy-wal"), or step (no syscall: the
 * named steps of multi-step changes, fdc_step's "POINT PATH": "serve
 * listen" before the RESP server opens its listeners, "supervisor listen"
 * before the supervisor opens its sockets, the checkpointer's
 * "promotion-decided DIR" and "promotion-record-written DIR"); ERRNO is a name
 * (EIO, ENOSPC, EACCES, EMFILE, ...); the entry matches calls whose path
 * contains PATH_SUBSTRING, lets SKIP matching calls pass, then fails COUNT of
 * them (default 1; 0 = forever).  Example: "fsync:EIO:/base/@2*1".  A pwrite
 * failpoint with ERRNO "short" performs a short write of half the length (to
 * exercise the retry loop) instead of failing.  ERRNO "KILL" makes the
 * process SIGKILL itself before the call (any OP): with the power-loss
 * journal, "any:KILL@N" cuts the power after the process's N first calls
 * through the seam.  ERRNO "STOP" makes the process SIGSTOP itself before
 * the call, which it then makes normally: a test holds a process between
 * two steps.  An entry whose OP is fsync_dir also matches the path of the
 * file whose directory is synced (fdc_fsync_parent): one creation's sync can
 * be picked.  The environment variable WALRUS_FAILPOINTS is read by
 * fdc_init().
 *
 * WALRUS_TEST_STANDBY_NAP_MS sets how long a standby's startup process
 * sleeps between looks when no WAL comes (ts_standby_nap_ns), so that a
 * test can make any wait that relies on the nap's end hang.
 *
 * The power-loss journal (WALRUS_POWERLOSS=DIR, powerloss.c explains it)
 * records each change the fd cache makes to a file, so that
 * tests/durability/powerloss.py can undo what a power cut may lose.
 *
 * Locking: the ts_fp_* and ts_pl_* calls are made by the fd cache with its
 * lock (fdc_lock) held; ts_failpoint_set and ts_failpoint_hits take it.
 */
#ifndef WALRUS_TESTSUPPORT_H
#define WALRUS_TESTSUPPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Returned by ts_fp_check for a pwrite failpoint whose ERRNO is "short". */
#define TS_FP_SHORT (-1)
/* ERRNO "KILL": the process SIGKILLs itself before the call, as a power cut
 * stops it (ts_fp_check does not return). */
#define TS_FP_KILL (-2)
/* ERRNO "STOP": the process SIGSTOPs itself before the call, then makes it
 * (ts_fp_check returns 0 after SIGCONT). */
#define TS_FP_STOP (-3)
/* No intent recorded (0 is the offset of the journal's first record). */
#define TS_PL_NONE UINT64_MAX

/* Kinds of data change for ts_pl_data_intent. */
#define TS_PL_WRITE  1
#define TS_PL_TRUNC  2
#define TS_PL_FALLOC 3

#ifdef WALRUS_TEST_HOOKS

int ts_failpoint_set(const char *spec); /* replaces all; NULL or "" clears */
uint64_t ts_failpoint_hits(void);       /* how many times failpoints fired here */
/* Sets the failpoints of WALRUS_FAILPOINTS, if set; an error if malformed. */
int ts_failpoints_from_env(void);

/*
 * Should the syscall @op on @path (and @path2, for rename) fail?  Returns 0
 * to let it run, an errno to inject, or TS_FP_SHORT.  Counts the call
 * against the matching entries' SKIP and COUNT.
 */
int ts_fp_check(const char *op, const char *path, const char *path2);

/* The standby's nap: WALRUS_TEST_STANDBY_NAP_MS if set, else @dflt. */
uint64_t ts_standby_nap_ns(uint64_t dflt);

/* Is the journal on (WALRUS_POWERLOSS set)?  One getenv per process. */
bool ts_pl_enabled(void);
/* Intent records, before a change; each returns the record's offset for ts_pl_done. */
uint64_t ts_pl_data_intent(int type, int fd, const char *path, off_t off, off_t len);
uint64_t ts_pl_create_intent(const char *path); /* TS_PL_NONE: the file exists already */
uint64_t ts_pl_rename_intent(const char *from, const char *to);
uint64_t ts_pl_unlink_intent(const char *path);
void ts_pl_done(uint64_t intent);
/* Before a sync call; pass its result to ts_pl_synced once the call succeeded. */
uint64_t ts_pl_sync_begin(void);
void ts_pl_synced(int fd, const char *path, uint64_t began);

#else /* no test hooks: nothing fires, nothing is journaled */

static inline int ts_failpoints_from_env(void)
{
	return 0;
}
static inline int ts_fp_check(const char *op, const char *path, const char *path2)
{
	(void)op, (void)path, (void)path2;
	return 0;
}
static inline uint64_t ts_standby_nap_ns(uint64_t dflt)
{
	return dflt;
}
static inline bool ts_pl_enabled(void)
{
	return false;
}
static inline uint64_t ts_pl_data_intent(int type, int fd, const char *path, off_t off, off_t len)
{
	(void)type, (void)fd, (void)path, (void)off, (void)len;
	return 0;
}
static inline uint64_t ts_pl_create_intent(const char *path)
{
	(void)path;
	return TS_PL_NONE;
}
static inline uint64_t ts_pl_rename_intent(const char *from, const char *to)
{
	(void)from, (void)to;
	return 0;
}
static inline uint64_t ts_pl_unlink_intent(const char *path)
{
	(void)path;
	return 0;
}
static inline void ts_pl_done(uint64_t intent)
{
	(void)intent;
}
static inline uint64_t ts_pl_sync_begin(void)
{
	return 0;
}
static inline void ts_pl_synced(int fd, const char *path, uint64_t began)
{
	(void)fd, (void)path, (void)began;
}

#endif /* WALRUS_TEST_HOOKS */

#endif /* WALRUS_TESTSUPPORT_H */
