/*
 * waltest.h - helpers shared by the WAL suites that insert records through
 * shared memory (test_insert.c, test_groupcommit.c).
 *
 * Their WAL is set up without an instance: a shared memory segment with the
 * WAL region, inherited by forked children.  Every record is an XLOG_NOOP
 * whose data is a wt_payload followed by bytes derived from it, so that the
 * stream read back can be checked record by record.
 */
#ifndef WALRUS_WALTEST_H
#define WALRUS_WALTEST_H

#include <stdbool.h>
#include <stdint.h>

#include "testutil.h"
#include "wal/wal.h"

/* Inserter slots of the WAL region: one per process that inserts. */
#define WT_NSLOTS 16

/* Who wrote the record, its number in that writer's order, its length, and a check. */
typedef struct wt_payload {
	uint32_t who, seq, len;
	uint32_t check;
} wt_payload;

/* The options of the WAL under test, and its directory (DIR/wal). */
extern wr_options wt_opts;
extern char wt_waldir[4200];

/*
 * Small WAL for stress: 64 kB segments, 8 buffer pages, 1 MB max_wal_size,
 * 128 kB min_wal_size; then @name = @value when @name is not NULL.
 */
void wt_base_opts(const char *name, const char *value);
/* A fresh WAL in @dir (see tu_shm_wal_buffers_setup); returns the zeroed
 * region of @extra bytes the children share, or NULL when @extra is 0. */
void *wt_setup_wal(const char *dir, size_t extra);
/* Inserts the record of (@who, @seq) with @len bytes of data (at least a
 * wt_payload, at most 40000); returns its end, and its start in @start
 * when not NULL. */
wr_lsn wt_insert(uint32_t who, uint32_t seq, uint32_t len, wr_lsn *start);
/*
 * Reads the whole stream from the first record and checks every payload:
 * writers below @nwho, each one's records once and in its order
 * (per_who_next[who] is the next seq expected, counted on).  Returns the
 * number of records.
 */
int wt_read_all(uint32_t *per_who_next, int nwho);

#endif
