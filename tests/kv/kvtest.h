/*
 * kvtest.h - an instance without a supervisor, for the kv suites.
 *
 * As in tests/buffer/test_buffer.c, the test process creates the shared
 * memory itself (regions "wal", "buffers", "kv" and "kvtest"), runs
 * recovery with RM_KV registered and redo through the buffer pool, starts
 * WAL insertion and creates the tree.  Forked children attach to it as
 * backends.  A crash restart throws the segment away with whatever dirty
 * pages it held (the children that wrote them are gone) and recovers from
 * the WAL; a clean restart writes the pool out first.  A checkpoint writes
 * every dirty page and moves the control file's redo point.
 */
#ifndef WALRUS_KVTEST_H
#define WALRUS_KVTEST_H

#include <stdatomic.h>
#include <stdint.h>

#include "buffer/buffer.h"
#include "kv/kv.h"
#include "testutil.h"
#include "wal/wal.h"

#define KT_SLOTS 16

typedef struct kt_shared {
	_Atomic uint32_t go;      /* start barrier */
	_Atomic uint32_t writers; /* writers still running */
	_Atomic uint64_t counter; /* free for tests */
	_Atomic uint64_t lsn[KT_SLOTS];
} kt_shared;

extern wr_options kt_opts;
extern const char *kt_dir;
extern kt_shared *kt_sh;
/* Recovery leaves out kv_redo_end (RM_KV must cope on its own). */
extern bool kt_skip_redo_end;
/* Redo writes pages straight to storage instead of through the pool. */
extern bool kt_redo_via_storage;

/* A new data directory and instance with @nbuffers pages of shared buffers. */
void kt_init(const char *prefix, int64_t nbuffers);
/* Builds shared memory, recovers, attaches this process, creates the tree. */
void kt_start(void);
/* Detaches this process (no pins may be held) and drops shared memory. */
void kt_stop(void);
void kt_crash_restart(void);
void kt_clean_restart(void);
void kt_checkpoint(void);
/* In a forked child: attach as a backend with WAL slot @slot (1..KT_SLOTS-1). */
int kt_child_attach(int slot);
/* In a child at its end: pins must all be released; returns an exit code. */
int kt_child_done(void);

/* kv_verify with every problem printed; returns the result code. */
int kt_verify(kv_verify_result *r);
/* Asserts kv_verify is clean. */
void kt_verify_clean(void);

/* xorshift64* */
static inline uint64_t kt_rand(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

#endif
