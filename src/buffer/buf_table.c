/*
 * buf_table.c - the mapping table from (relation, block) to buffer number.
 *
 * A chained hash in shared memory: an array of bucket heads (a power of two,
 * at least twice the number of buffers, so chains stay short) and one entry
 * per buffer, because a buffer has at most one tag at a time.  Retagging a
 * buffer moves its entry from the old chain to the new one, so the table
 * never runs out of entries and needs no free list.
 *
 * Partitioning: the partition of a tag is the low bits of its hash, which
 * are also the low bits of its bucket, so every chain lies in exactly one
 * partition and its lock guards it.  Lookups take the partition shared;
 * insert and delete exclusive.  Callers take the locks (see bufmgr.c).
 */
#include "buffer/buf_int.h"

uint32_t buf_tag_hash(wr_relid rel, wr_blkno blk)
{
	/* A multiplicative mix of both halves: consecutive blocks of one
	 * relation spread over every partition. */
	uint64_t x = ((uint64_t)rel << 32) | blk;
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return (uint32_t)x;
}

wr_rwlock *buf_partition_lock(uint32_t hash)
{
	return &buf_l.r->partition[hash & (BUF_PARTITIONS - 1)];
}

static int32_t *buf_bucket(uint32_t hash)
{
	return &buf_l.buckets[hash & (buf_l.r->nbuckets - 1)];
}

int buf_table_lookup(uint32_t hash, wr_relid rel, wr_blkno blk)
{
	for (int32_t b = *buf_bucket(hash); b != 0; b = buf_l.entries[b - 1].next) {
		const buf_entry *e = &buf_l.entries[b - 1];
		if (e->rel == rel && e->blk == blk)
			return b;
	}
	return 0;
}

void buf_table_insert(uint32_t hash, int buf, wr_relid rel, wr_blkno blk)
{
	int32_t *head = buf_bucket(hash);
	buf_entry *e = &buf_l.entries[buf - 1];
	e->rel = rel;
	e->blk = blk;
	e->next = *head;
	*head = buf;
}

void buf_table_delete(uint32_t hash, int buf)
{
	int32_t *link = buf_bucket(hash);
	while (*link != 0 && *link != buf)
		link = &buf_l.entries[*link - 1].next;
	if (*link != buf)
		wr_panic("buffer %d is not in the mapping table under its tag", buf);
	*link = buf_l.entries[buf - 1].next;
	buf_l.entries[buf - 1].next = 0;
}

void buf_table_init(void)
{
	for (uint32_t i = 0; i < buf_l.r->nbuckets; i++)
		buf_l.buckets[i] = 0;
	for (uint32_t i = 0; i < buf_l.r->nbuffers; i++)
		buf_l.entries[i] = (buf_entry){0, WR_INVALID_BLKNO, 0};
}
