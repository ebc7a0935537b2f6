/*
 * failpoint.h - internal interface between the fd cache and its failpoints.
 *
 * Not part of the module's contract (see fdcache.h for the spec syntax):
 * only fdcache.c asks, before each syscall, whether it should fail.
 */
#ifndef WALRUS_FDCACHE_FAILPOINT_H
#define WALRUS_FDCACHE_FAILPOINT_H

/* Returned by fdc_fp_check for a pwrite failpoint whose ERRNO is "short". */
#define FDC_FP_SHORT (-1)
/* ERRNO "KILL": the process SIGKILLs itself before the call, as a power cut
 * stops it (fdc_fp_check does not return). */
#define FDC_FP_KILL (-2)

/*
 * Should the syscall @op on @path (and @path2, for rename) fail?  Returns 0
 * to let it run, an errno to inject, or FDC_FP_SHORT.  Counts the call
 * against the matching entries' SKIP and COUNT.  Called with fdc_lock held.
 */
int fdc_fp_check(const char *op, const char *path, const char *path2);

#endif /* WALRUS_FDCACHE_FAILPOINT_H */
