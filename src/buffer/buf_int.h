/*
 * buf_int.h - shared layout and internal interfaces of the buffer pool
 * (between bufmgr.c, buf_table.c, freelist.c and stream.c; not for other
 * modules).
 */
#ifndef WALRUS_BUF_INT_H
#define WALRUS_BUF_INT_H

#include <liburing.h>
#include <stdatomic.h>

#include "buffer/buffer.h"
#include "ipc/ipc.h"
#include "wal/wal.h"

/*
 * The state word, as PostgreSQL's: refcount in the low 18 bits, usage count
 * in the next 4, flags above.  Everyone but the header-lock holder changes
 * it by CAS only while BM_LOCKED is clear, so the holder can write the whole
 * word back at unlock without losing an update.
 */
#define BUF_REFCOUNT_ONE     1u
#define BUF_REFCOUNT_MASK    ((1u << 18) - 1)
#define BUF_USAGE_SHIFT      18
#define BUF_USAGE_ONE        (1u << BUF_USAGE_SHIFT)
#define BUF_USAGE_MASK       (0xfu << BUF_USAGE_SHIFT)
#define BUF_MAX_USAGE        5
#define BM_LOCKED            (1u << 22) /* header lock */
#define BM_DIRTY             (1u << 23)
#define BM_VALID             (1u << 24) /* page content is the block's */
#define BM_TAG_VALID         (1u << 25) /* tag is set and in the mapping table */
#define BM_IO_IN_PROGRESS    (1u << 26)
#define BM_IO_ERROR          (1u << 27) /* the last I/O failed */
#define BM_CHECKPOINT_NEEDED (1u << 28) /* dirty before the current checkpoint began */
#define BM_IO_WAITER         (1u << 29) /* someone sleeps until the I/O in progress ends */
#define BM_CHECKED           (1u << 30) /* the access method checked the page (buf_set_checked) */

#define BUF_REFCOUNT(s) ((s)&BUF_REFCOUNT_MASK)
#define BUF_USAGE(s)    (((s)&BUF_USAGE_MASK) >> BUF_USAGE_SHIFT)

#define BUF_PARTITIONS  16 /* power of two */
#define BUF_HIT_STRIPES 16
#define BUF_EXT_LOCKS   16
#define BUF_TAG_SEQS    1024 /* power of two, at most the buckets: buf_absent */

typedef struct buf_desc {
	wr_relid rel; /* tag: changed only with refcount 1, header and partition locks held */
	wr_blkno blk;
	_Atomic uint32_t state;
	_Atomic uint32_t io_seq; /* futex word: bumped when an I/O on the buffer ends */
	wr_rwlock content;
	/* Seqlock for buf_peek: odd while the content lock is held exclusive or
	 * the buffer is being retagged; written only by that holder. */
	_Atomic uint32_t version;
	char pad[64 - 20 - sizeof(wr_rwlock)];
} buf_desc;

typedef struct buf_shared_stats {
	_Atomic uint64_t hits, reads, extends, backend_writes, flush_writes, evictions;
	_Atomic uint64_t content_wait_ns, io_wait_ns, io_wakeups;
	_Atomic uint64_t ckpt_writes, bgwriter_writes, bgwriter_stops, allocs, writebacks;
} buf_shared_stats;

/* A mapping table entry: entry i belongs to buffer i + 1 (a buffer has at most one tag). */
typedef struct buf_entry {
	wr_relid rel;
	wr_blkno blk;
	int32_t next; /* next buffer number in the bucket chain, 0 = end */
} buf_entry;

typedef struct buf_region {
	uint32_t nbuffers;
	uint32_t nbuckets;                                  /* power of two >= 2 * nbuffers */
	uint64_t desc_off, bucket_off, entry_off, page_off; /* from the region start */
	int io_method;                                      /* enum wr_io_method: read streams */
	bool data_direct; /* data files O_DIRECT: the start's decision (buf_direct_io_init) */
	_Atomic uint64_t clock_hand;
	wr_rwlock partition[BUF_PARTITIONS];
	wr_rwlock ext_lock[BUF_EXT_LOCKS];
	buf_shared_stats stats;
	/*
	 * Hits of buf_read, counted apart from stats.hits in one of these lines
	 * per process (buf_l.hit_stripe): every page visit counts one, and
	 * readers on different CPUs bumping one word took the line from each
	 * other at every visit.  buf_get_stats adds them up.
	 */
	struct {
		_Alignas(64) _Atomic uint64_t n;
	} hits[BUF_HIT_STRIPES];
	/* Tag changes (a delete or an insert in the mapping table), counted per
	 * tag hash's low bits under the partition lock held exclusive:
	 * buf_absent's tickets. */
	_Atomic uint32_t tag_seq[BUF_TAG_SEQS];
} buf_region;

/*
 * Where this process last found a tag: a direct-mapped private cache in front
 * of the mapping table.  Only a hint: the buffer is pinned and its tag
 * checked before use (see buf_get).
 */
typedef struct buf_hint {
	wr_relid rel;
	wr_blkno blk;
	int32_t buf; /* 0 = empty */
} buf_hint;

/* Per-process view (pointers are this process's, computed at attach). */
typedef struct buf_local {
	buf_region *r;
	buf_desc *desc;
	int32_t *buckets;
	buf_entry *entries;
	char *pages;
} buf_local;

/* A backend's io_uring for read streams, shared by its streams (stream.c). */
typedef struct buf_stream_ring {
	pid_t pid; /* whose state this is; another pid: inherited by fork */
	struct io_uring ring;
	bool ready, failed;
	unsigned entries;
	uint32_t inflight;    /* reads (SQEs) prepared and not yet completed */
	uint32_t unsubmitted; /* of which still in the submission queue */
	uint32_t *fpins;      /* reads in flight per fd cache handle */
	int nfpins;
} buf_stream_ring;

/* The logged change in progress (change.c). */
typedef struct buf_change_state {
	bool active;
	int nbufs;
	int bufs[WAL_MAX_BLOCKS];
	bool used[WAL_MAX_BLOCKS];
} buf_change_state;

/*
 * A backend's own part of the pool: its pins (one shared refcount per
 * buffer it pins, the rest counted here), the content locks it holds, where
 * it last found tags, its change in progress and its read-stream ring.  The
 * calling thread's current one is buf_me (buf_backend_set).
 */
struct buf_backend {
	int32_t *pins;   /* private pin counts, by buffer number - 1 */
	uint8_t *locked; /* 0, BUF_LOCK_SHARED or BUF_LOCK_EXCL */
	buf_hint *hints; /* hint_mask + 1 entries */
	uint32_t hint_mask;
	uint32_t hit_stripe; /* its line of buf_region.hits */
	buf_change_state chg;
	buf_stream_ring stream;
};
extern WR_TLS buf_backend *buf_me;

/* stream.c: releases a backend's ring (after its reads were drained). */
void buf_stream_ring_free(buf_stream_ring *su);

#define BUF_LOCK_SHARED 1
#define BUF_LOCK_EXCL   2

extern buf_local buf_l;

static inline buf_desc *buf_get_desc(int buf)
{
	return &buf_l.desc[buf - 1];
}

/* bufmgr.c: writes a pinned, content-locked buffer if dirty (WAL first); counts it in @counter */
int buf_write_page(int buf, _Atomic uint64_t *counter, bool *written);

/*
 * bufmgr.c: the steps of a read, for buf_read and the read streams.
 * buf_get: the buffer mapped to (rel, blk), pinned, valid or not: found, or
 * a victim retagged (written first if dirty); *valid (unless NULL) says it
 * was valid when pinned, which it stays while pinned.
 * buf_try_start_io: under the header lock, BUF_IO_DONE when there is nothing
 * to do (valid for input, clean for output), BUF_IO_MINE when the caller now
 * owns BM_IO_IN_PROGRESS and must end it with buf_end_io; while another I/O
 * is in progress it waits (@wait) or returns BUF_IO_BUSY.
 * buf_start_io: the waiting form; true for BUF_IO_MINE.
 * buf_end_io: clears the flag and @clear, sets @set, wakes the waiters.
 * buf_load: makes pinned @buf valid (a hit, another process's read waited
 * for, or a read of ours); on error it is unpinned and the error returned.
 */
#define BUF_IO_DONE 0
#define BUF_IO_MINE 1
#define BUF_IO_BUSY 2
int buf_get(wr_relid rel, wr_blkno blk, int *out, bool *valid);
int buf_try_start_io(buf_desc *d, bool for_input, bool wait);
bool buf_start_io(buf_desc *d, bool for_input);
void buf_end_io(buf_desc *d, uint32_t clear, uint32_t set);
char *buf_page_ptr(int buf);
int buf_load(int buf);

/*
 * stream.c: this process's stream reads in flight (io_uring), and
 * completing them all.  A process sleeping for another (an I/O flag, a
 * content lock) drains its own first: the other may be waiting for one of
 * those reads, which only this process can complete.
 */
uint32_t buf_stream_inflight(void);
void buf_stream_drain(void);

/* prefault.c: installs its fork handlers (at the pool's attach, before the
 * client's: see there). */
void buf_prefault_attach(void);

/* freelist.c: header lock, pins, clock sweep */
uint32_t buf_hdr_lock(buf_desc *d);
void buf_hdr_unlock(buf_desc *d, uint32_t state);
bool buf_pin(int buf);                         /* true if valid */
void buf_pin_locked(int buf, uint32_t *state); /* header locked: adds the shared pin */
void buf_unpin(int buf);
int buf_clock_victim(int *buf, uint32_t *state); /* pinned, header unlocked */

/* buf_table.c: the caller holds the tag's partition lock (shared for lookup) */
uint32_t buf_tag_hash(wr_relid rel, wr_blkno blk);
wr_rwlock *buf_partition_lock(uint32_t hash);
int buf_table_lookup(uint32_t hash, wr_relid rel, wr_blkno blk); /* 0 if absent */
void buf_table_insert(uint32_t hash, int buf, wr_relid rel, wr_blkno blk);
void buf_table_delete(uint32_t hash, int buf);
void buf_table_init(void);

/* bufmgr.c: the write observer (test hook), for every path that writes a page */
void buf_notify_write(wr_relid rel, wr_blkno blk, wr_lsn lsn);

#endif /* WALRUS_BUF_INT_H */
