/*
 * record.c - building WAL records from registered parts, and decoding them.
 *
 * A caller registers the blocks it changes and its data (wal_begin,
 * wal_register_*), then wal_assemble lays them out in the format described
 * in wal.h, deciding for each block whether a full-page image is needed.
 * The registration is the backend's own (wal_me) and survives wal_assemble, because the
 * inserter assembles again when a checkpoint moves the redo pointer between
 * assembling and reserving space.
 *
 * Registration functions return nothing (like PostgreSQL's XLogRegister*),
 * so misuse is remembered and reported by wal_assemble as WALRUS_EINVAL.
 *
 * wal_decode checks everything a damaged record could get wrong, so that
 * redo never follows a bad length or offset: it is the last line of defence
 * after the CRC.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wal/wal_int.h"

#define WAL_MAIN_OWNER       (-1)
#define WAL_BLOCK_DATA_MAX   65535u
#define WAL_MAIN_HDR         5u /* WAL_MAIN_DATA_ID + uint32 length */
#define WAL_BLK_CALLER_FLAGS (WAL_BLK_HAS_IMAGE | WAL_BLK_WILL_INIT)
#define WAL_BLK_ALL_FLAGS                                                                          \
	(WAL_BLK_HAS_IMAGE | WAL_BLK_HAS_DATA | WAL_BLK_WILL_INIT | WAL_BLK_IMAGE_ZSTD |           \
	 WAL_BLK_IMAGE_HOLE)

_Static_assert(sizeof(wal_record) == 24, "the record header is part of the WAL format");
_Static_assert(sizeof(wal_block_header) == 12, "the block header is part of the WAL format");
_Static_assert(sizeof(wal_image_header) == 8, "the image header is part of the WAL format");

static void wal_reg_fail(int code, const char *why)
{
	wal_reg_state *const reg = &wal_me->reg; /* the calling backend's */
	if (reg->error != 0)
		return;
	reg->error = code;
	snprintf(reg->why, sizeof(reg->why), "%s", why);
}

void wal_begin(void)
{
	wal_reg_state *const reg = &wal_me->reg; /* the calling backend's */
	memset(reg->blocks, 0, sizeof(reg->blocks));
	reg->nchunks = 0;
	reg->main_len = 0;
	reg->error = 0;
	reg->why[0] = '\0';
}

void wal_register_block(int id, wr_relid rel, wr_blkno blk, const void *page, uint8_t flags)
{
	wal_reg_state *const reg = &wal_me->reg; /* the calling backend's */
	if (id < 0 || id >= WAL_MAX_BLOCKS) {
		wal_reg_fail(WALRUS_EINVAL, "block id out of range");
		return;
	}
	wal_reg_block *b = &reg->blocks[id];
	if (b->used) {
		wal_reg_fail(WALRUS_EINVAL, "block id registered twice");
		return;
	}
	b->used = true;
	b->rel = rel;
	b->blk = blk;
	b->page = page;
	b->flags = flags & WAL_BLK_CALLER_FLAGS; /* the others describe what assembly stored */
	b->data_len = 0;
}

static void wal_add_chunk(int owner, const void *data, size_t len)
{
	wal_reg_state *const reg = &wal_me->reg; /* the calling backend's */
	if (len == 0)
		return;
	if (reg->nchunks == reg->cap) {
		size_t cap = reg->cap * 2;
		wal_chunk *c = malloc(cap * sizeof(*c));
		if (c == NULL) {
			wal_reg_fail(WALRUS_ENOMEM, "out of memory registering WAL data");
			return;
		}
		memcpy(c, reg->chunks, reg->nchunks * sizeof(*c));
		if (reg->chunks != reg->fixed)
			free(reg->chunks);
		reg->chunks = c;
		reg->cap = cap;
	}
	reg->chunks[reg->nchunks++] = (wal_chunk){.data = data, .len = len, .owner = owner};
}

void wal_register_block_data(int id, const void *data, size_t len)
{
	wal_reg_state *const reg = &wal_me->reg; /* the calling backend's */
	if (id < 0 || id >= WAL_MAX_BLOCKS || !reg->blocks[id].used) {
		wal_reg_fail(WALRUS_EINVAL, "block data for a block that is not registered");
		return;
	}
	reg->blocks[id].data_len += len;
	wal_add_chunk(id, data, len);
}

void wal_register_data(const void *data, size_t len)
{
	wal_reg_state *const reg = &wal_me->reg; /* the calling backend's */
	reg->main_len += len;
	wal_add_chunk(WAL_MAIN_OWNER, data, len);
}

/* ---------------------------------------------------------------- assembly */

static int wal_reserve(wal_assembled *a, size_t need)
{
	if (wr_grow(&a->buf, &a->cap, need, 1, 8192) != WALRUS_OK)
		return wr_error(WALRUS_ENOMEM, "out of memory assembling a WAL record of %zu bytes",
		                need);
	return WALRUS_OK;
}

static bool wal_wants_image(const wal_reg_block *b, wr_lsn redo, bool fpw)
{
	if (b->flags & WAL_BLK_HAS_IMAGE)
		return true; /* forced by the caller */
	if (b->flags & WAL_BLK_WILL_INIT)
		return false; /* redo rebuilds the page from the record alone: nothing can be torn
		               */
	return fpw && b->page != NULL && page_get_lsn(b->page) <= redo;
}

/* Copies the chunks of @owner to @dst. */
static void wal_copy_chunks(int owner, char *dst)
{
	wal_reg_state *const reg = &wal_me->reg; /* the calling backend's */
	for (size_t i = 0; i < reg->nchunks; i++) {
		const wal_chunk *c = &reg->chunks[i];
		if (c->owner != owner)
			continue;
		memcpy(dst, c->data, c->len);
		dst += c->len;
	}
}

/* Bytes of block and image headers plus the main-data header. */
static size_t wal_headers_size(wr_lsn redo, bool fpw)
{
	wal_reg_state *const reg = &wal_me->reg; /* the calling backend's */
	size_t n = WAL_RECORD_HEADER + WAL_MAIN_HDR;
	for (int id = 0; id < WAL_MAX_BLOCKS; id++) {
		const wal_reg_block *b = &reg->blocks[id];
		if (!b->used)
			continue;
		n += sizeof(wal_block_header);
		if (wal_wants_image(b, redo, fpw))
			n += sizeof(wal_image_header);
	}
	return n;
}

static int wal_check_registration(void)
{
	wal_reg_state *const reg = &wal_me->reg; /* the calling backend's */
	if (reg->error != 0)
		return wr_error(reg->error, "invalid WAL record registration: %s", reg->why);
	for (int id = 0; id < WAL_MAX_BLOCKS; id++)
		if (reg->blocks[id].data_len > WAL_BLOCK_DATA_MAX)
			return wr_error(WALRUS_EINVAL,
			                "block %d data of %zu bytes is over the limit of %u", id,
			                reg->blocks[id].data_len, WAL_BLOCK_DATA_MAX);
	return WALRUS_OK;
}

/*
 * Lays out images and block data after the headers, filling the headers at
 * *@hp as it goes; *@pos ends after the last block's data.
 */
static int wal_assemble_blocks(wal_assembled *a, size_t *hp, size_t *pos, wr_lsn redo, bool fpw,
                               int zstd_level)
{
	wal_reg_state *const reg = &wal_me->reg; /* the calling backend's */
	for (int id = 0; id < WAL_MAX_BLOCKS; id++) {
		const wal_reg_block *b = &reg->blocks[id];
		if (!b->used)
			continue;
		wal_block_header bh = {.id = (uint8_t)id,
		                       .flags = b->flags & WAL_BLK_WILL_INIT,
		                       .data_len = (uint16_t)b->data_len,
		                       .rel = b->rel,
		                       .blkno = b->blk};
		int rc = wal_reserve(a, *pos + WR_PAGE_SIZE + b->data_len);
		if (rc != WALRUS_OK)
			return rc;
		if (wal_wants_image(b, redo, fpw)) {
			if (b->page == NULL)
				return wr_error(WALRUS_EINVAL,
				                "block %d needs an image but has no page", id);
			wal_image_header ih;
			bh.flags |= wal_fpi_encode(b->page, zstd_level, a->buf + *pos, &ih);
			*pos += ih.length;
			a->fpi_count++;
			a->fpi_bytes_raw += WR_PAGE_SIZE;
			a->fpi_bytes_stored += ih.length;
			memcpy(a->buf + *hp + sizeof(bh), &ih, sizeof(ih));
		}
		if (b->data_len > 0)
			bh.flags |= WAL_BLK_HAS_DATA;
		wal_copy_chunks(id, a->buf + *pos);
		*pos += b->data_len;
		memcpy(a->buf + *hp, &bh, sizeof(bh));
		*hp += sizeof(bh) + ((bh.flags & WAL_BLK_HAS_IMAGE) ? sizeof(wal_image_header) : 0);
	}
	return WALRUS_OK;
}

int wal_assemble(wal_assembled *a, uint8_t rmid, uint8_t info, wr_lsn redo, bool fpw,
                 int zstd_level)
{
	wal_reg_state *const reg = &wal_me->reg; /* the calling backend's */
	a->len = 0;
	a->fpi_count = 0;
	a->fpi_bytes_raw = a->fpi_bytes_stored = 0;
	int rc = wal_check_registration();
	if (rc != WALRUS_OK)
		return rc;
	size_t hp = WAL_RECORD_HEADER;
	size_t pos = wal_headers_size(redo, fpw);
	rc = wal_reserve(a, pos);
	if (rc == WALRUS_OK)
		rc = wal_assemble_blocks(a, &hp, &pos, redo, fpw, zstd_level);
	if (rc != WALRUS_OK)
		return rc;
	uint64_t total = pos + reg->main_len;
	if (total > WAL_MAX_RECORD)
		return wr_error(WALRUS_ETOOBIG, "WAL record of %llu bytes is over the limit of %u",
		                (unsigned long long)total, WAL_MAX_RECORD);
	rc = wal_reserve(a, total);
	if (rc != WALRUS_OK)
		return rc;
	uint32_t main_len = (uint32_t)reg->main_len;
	a->buf[hp] = (char)WAL_MAIN_DATA_ID;
	memcpy(a->buf + hp + 1, &main_len, sizeof(main_len));
	wal_copy_chunks(WAL_MAIN_OWNER, a->buf + pos);

	wal_record h = {.tot_len = (uint32_t)total, .rmid = rmid, .info = info};
	memcpy(a->buf, &h, sizeof(h));
	a->len = (uint32_t)total;
	a->payload_crc = crc32c(0, a->buf + WAL_RECORD_HEADER, total - WAL_RECORD_HEADER);
	return WALRUS_OK;
}

static uint64_t (*record_clock)(void);

void wal_set_clock(uint64_t (*now_ms)(void))
{
	record_clock = now_ms;
}

static uint64_t record_time_ms(void)
{
	struct timespec now;
	if (record_clock != NULL)
		return record_clock();
	if (clock_gettime(CLOCK_REALTIME, &now) != 0)
		return 0;
	return (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
}

void wal_finish_record(wal_assembled *a, wr_lsn prev)
{
	wal_record h;
	memcpy(&h, a->buf, sizeof(h));
	h.prev = prev;
	uint64_t ms = record_time_ms();
	h.time_hi = (uint16_t)(ms >> 32);
	h.time_lo = (uint32_t)ms;
	h.crc = crc32c(a->payload_crc, &h, offsetof(wal_record, crc));
	memcpy(a->buf, &h, sizeof(h));
}

/* ---------------------------------------------------------------- decoding */

/* Checks an image header against the page geometry. */
static int wal_check_image(const wal_decoded_block *b, wr_lsn lsn)
{
	const wal_image_header *ih = &b->ih;
	bool hole = (b->flags & WAL_BLK_IMAGE_HOLE) != 0;
	uint32_t raw = WR_PAGE_SIZE - ih->hole_len;
	if (ih->length == 0 || ih->length > WR_PAGE_SIZE)
		return wr_error(WALRUS_ECORRUPT,
		                "invalid image length %u for block %u in record at " WAL_LSN_FMT,
		                ih->length, b->id, WAL_LSN_ARGS(lsn));
	if ((uint32_t)ih->hole_off + ih->hole_len > WR_PAGE_SIZE || hole != (ih->hole_len > 0) ||
	    (!hole && ih->hole_off != 0))
		return wr_error(
		    WALRUS_ECORRUPT,
		    "invalid image hole at %u length %u for block %u in record at " WAL_LSN_FMT,
		    ih->hole_off, ih->hole_len, b->id, WAL_LSN_ARGS(lsn));
	bool zstd = (b->flags & WAL_BLK_IMAGE_ZSTD) != 0;
	if ((!zstd && ih->length != raw) || (zstd && ih->length >= raw))
		return wr_error(
		    WALRUS_ECORRUPT,
		    "invalid image length %u (hole %u) for block %u in record at " WAL_LSN_FMT,
		    ih->length, ih->hole_len, b->id, WAL_LSN_ARGS(lsn));
	return WALRUS_OK;
}

/* Reads one block header (and image header) at *@p, bounded by @hend. */
static int wal_decode_block(const char *raw, uint32_t *p, uint32_t hend, int last_id,
                            wal_decoded_block *b, wr_lsn lsn)
{
	wal_block_header bh;
	if (*p + sizeof(bh) > hend)
		return wr_error(WALRUS_ECORRUPT, "truncated block header in record at " WAL_LSN_FMT,
		                WAL_LSN_ARGS(lsn));
	memcpy(&bh, raw + *p, sizeof(bh));
	*p += sizeof(bh);
	if (bh.id >= WAL_MAX_BLOCKS || (int)bh.id <= last_id)
		return wr_error(WALRUS_ECORRUPT,
		                "out-of-order block_id %u in record at " WAL_LSN_FMT, bh.id,
		                WAL_LSN_ARGS(lsn));
	if ((bh.flags & ~WAL_BLK_ALL_FLAGS) != 0 ||
	    ((bh.flags & WAL_BLK_HAS_DATA) != 0) != (bh.data_len > 0) ||
	    (!(bh.flags & WAL_BLK_HAS_IMAGE) &&
	     (bh.flags & (WAL_BLK_IMAGE_ZSTD | WAL_BLK_IMAGE_HOLE))))
		return wr_error(WALRUS_ECORRUPT,
		                "invalid flags 0x%02X for block %u in record at " WAL_LSN_FMT,
		                bh.flags, bh.id, WAL_LSN_ARGS(lsn));
	memset(b, 0, sizeof(*b));
	b->id = bh.id;
	b->flags = bh.flags;
	b->rel = bh.rel;
	b->blkno = bh.blkno;
	b->data_len = bh.data_len;
	if (!(bh.flags & WAL_BLK_HAS_IMAGE))
		return WALRUS_OK;
	if (*p + sizeof(b->ih) > hend)
		return wr_error(WALRUS_ECORRUPT, "truncated image header in record at " WAL_LSN_FMT,
		                WAL_LSN_ARGS(lsn));
	memcpy(&b->ih, raw + *p, sizeof(b->ih));
	*p += sizeof(b->ih);
	return wal_check_image(b, lsn);
}

/* Parses the headers part of the payload; *@p ends after the main-data header. */
static int wal_decode_headers(const char *raw, uint32_t len, uint32_t *p, wal_decoded *out)
{
	int last_id = -1;
	for (;;) {
		if (*p >= len)
			return wr_error(WALRUS_ECORRUPT,
			                "missing main data header in record at " WAL_LSN_FMT,
			                WAL_LSN_ARGS(out->lsn));
		if ((uint8_t)raw[*p] == WAL_MAIN_DATA_ID)
			break;
		if (out->nblocks == WAL_MAX_BLOCKS)
			return wr_error(WALRUS_ECORRUPT,
			                "too many blocks in record at " WAL_LSN_FMT,
			                WAL_LSN_ARGS(out->lsn));
		wal_decoded_block *b = &out->blocks[out->nblocks];
		int rc = wal_decode_block(raw, p, len, last_id, b, out->lsn);
		if (rc != WALRUS_OK)
			return rc;
		last_id = b->id;
		out->nblocks++;
	}
	if (*p + WAL_MAIN_HDR > len)
		return wr_error(WALRUS_ECORRUPT,
		                "truncated main data header in record at " WAL_LSN_FMT,
		                WAL_LSN_ARGS(out->lsn));
	memcpy(&out->main_len, raw + *p + 1, sizeof(out->main_len));
	*p += WAL_MAIN_HDR;
	return WALRUS_OK;
}

/* Points the blocks' images and data, then the main data, into the record. */
static int wal_decode_data(const char *raw, uint32_t len, uint32_t p, wal_decoded *out)
{
	uint64_t pos = p;
	for (int i = 0; i < out->nblocks; i++) {
		wal_decoded_block *b = &out->blocks[i];
		uint32_t img = (b->flags & WAL_BLK_HAS_IMAGE) ? b->ih.length : 0;
		if (pos + img + b->data_len > len)
			return wr_error(WALRUS_ECORRUPT,
			                "block %u data overruns record at " WAL_LSN_FMT
			                " (length %u)",
			                b->id, WAL_LSN_ARGS(out->lsn), len);
		b->image = img ? raw + pos : NULL;
		pos += img;
		b->data = b->data_len ? raw + pos : NULL;
		pos += b->data_len;
	}
	if (pos + out->main_len != len)
		return wr_error(
		    WALRUS_ECORRUPT,
		    "main data length %u does not match record length %u at " WAL_LSN_FMT,
		    out->main_len, len, WAL_LSN_ARGS(out->lsn));
	out->main_data = out->main_len ? raw + pos : NULL;
	return WALRUS_OK;
}

int wal_decode(const char *raw, uint32_t len, wr_lsn lsn, wal_decoded *out)
{
	out->lsn = lsn;
	out->end = 0;
	out->nblocks = 0;
	out->main_data = NULL;
	out->main_len = 0;
	out->raw = raw;
	if (len < WAL_RECORD_HEADER)
		return wr_error(WALRUS_ECORRUPT,
		                "invalid record length at " WAL_LSN_FMT
		                ": expected at least %u, got %u",
		                WAL_LSN_ARGS(lsn), WAL_RECORD_HEADER, len);
	memcpy(&out->hdr, raw, sizeof(out->hdr));
	if (out->hdr.tot_len != len)
		return wr_error(WALRUS_ECORRUPT,
		                "record length %u at " WAL_LSN_FMT
		                " does not match the %u bytes read",
		                out->hdr.tot_len, WAL_LSN_ARGS(lsn), len);
	uint32_t crc = crc32c(0, raw + WAL_RECORD_HEADER, len - WAL_RECORD_HEADER);
	crc = crc32c(crc, raw, offsetof(wal_record, crc));
	if (crc != out->hdr.crc)
		return wr_error(
		    WALRUS_ECORRUPT,
		    "incorrect resource manager data checksum in record at " WAL_LSN_FMT,
		    WAL_LSN_ARGS(lsn));
	uint32_t p = WAL_RECORD_HEADER;
	int rc = wal_decode_headers(raw, len, &p, out);
	if (rc == WALRUS_OK)
		rc = wal_decode_data(raw, len, p, out);
	return rc;
}
