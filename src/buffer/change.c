/*
 * change.c - logged page changes: the WAL record and the buffers it
 * describes move together (see buffer.h, "Logged changes").
 */
#include <string.h>

#include "buffer/buf_int.h"
#include "wal/wal.h"

void buf_change_begin(void)
{
	buf_change_state *const c = &buf_me->chg; /* the calling backend's */
	if (c->active)
		wr_panic("buf_change_begin: a change is already in progress");
	c->active = true;
	c->nbufs = 0;
	memset(c->used, 0, sizeof(c->used));
	wal_begin();
}

void buf_change_register(int id, int buf, uint8_t flags)
{
	buf_change_state *const c = &buf_me->chg; /* the calling backend's */
	if (!c->active)
		wr_panic("buf_change_register outside a change");
	if (id < 0 || id >= WAL_MAX_BLOCKS || c->used[id])
		wr_panic("buf_change_register: block id %d invalid or registered twice", id);
	if (buf < 1 || (uint32_t)buf > buf_l.r->nbuffers ||
	    buf_me->locked[buf - 1] != BUF_LOCK_EXCL)
		wr_panic("buf_change_register: buffer %d is not exclusively locked by this process",
		         buf);
	wr_relid rel;
	wr_blkno blk;
	buf_tag(buf, &rel, &blk);
	wal_register_block(id, rel, blk, buf_page(buf), flags);
	c->used[id] = true;
	c->bufs[c->nbufs++] = buf;
}

void buf_change_data(int id, const void *data, size_t len)
{
	wal_register_block_data(id, data, len);
}

void buf_change_main(const void *data, size_t len)
{
	wal_register_data(data, len);
}

wr_lsn buf_change_insert(uint8_t rmid, uint8_t info)
{
	buf_change_state *const c = &buf_me->chg; /* the calling backend's */
	if (!c->active)
		wr_panic("buf_change_insert outside a change");
	/* Dirty first: a checkpoint that sets its redo pointer after this
	 * record must find these pages dirty and write them. */
	for (int i = 0; i < c->nbufs; i++)
		buf_mark_dirty(c->bufs[i]);
	wr_lsn end = wal_insert(rmid, info);
	for (int i = 0; i < c->nbufs; i++)
		page_set_lsn(buf_page(c->bufs[i]), end);
	return end;
}

void buf_change_reset(void)
{
	buf_change_state *const c = &buf_me->chg; /* the calling backend's */
	c->active = false;
	c->nbufs = 0;
}

void buf_change_end(void)
{
	buf_change_state *const c = &buf_me->chg; /* the calling backend's */
	c->active = false;
	c->nbufs = 0;
}
