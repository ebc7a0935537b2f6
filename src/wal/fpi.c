/*
 * fpi.c - full-page images: the protection against torn data pages.
 *
 * The first change to a page after a checkpoint logs the whole page, so
 * that redo can rebuild it even if a crash tore its last write.  To keep
 * the WAL small, the unused gap between a slotted page's lower and upper
 * offsets (all zeros by construction) is left out, and with
 * wal_compression=zstd the rest is compressed when that saves space.
 *
 * A backend's compression context is created on its first image: creating
 * one costs far more than compressing a page.
 */
#include <string.h>
#include <zstd.h>

#include "wal/wal_int.h"

/* Decoding runs in the startup process (redo) and tools: one thread. */
static ZSTD_DCtx *wal_dctx;

/* The hole [lower, upper) of a page with a sane header, else none. */
static void wal_page_hole(const void *page, uint16_t *off, uint16_t *len)
{
	wr_page_header h;
	memcpy(&h, page, sizeof(h));
	*off = *len = 0;
	if (h.lower >= WR_PAGE_HEADER_SIZE && h.lower < h.upper && h.upper <= WR_PAGE_SIZE) {
		*off = h.lower;
		*len = (uint16_t)(h.upper - h.lower);
	}
}

/* Compresses @raw into @out when that makes it smaller; returns the size, or 0. */
static size_t wal_fpi_compress(const char *raw, size_t raw_len, int level, void *out)
{
	char scratch[ZSTD_COMPRESSBOUND(WR_PAGE_SIZE)];
	if (wal_me->cctx == NULL && (wal_me->cctx = ZSTD_createCCtx()) == NULL)
		return 0; /* out of memory: an uncompressed image is still correct */
	size_t n = ZSTD_compressCCtx(wal_me->cctx, scratch, sizeof(scratch), raw, raw_len, level);
	if (ZSTD_isError(n) || n >= raw_len)
		return 0;
	memcpy(out, scratch, n);
	return n;
}

uint8_t wal_fpi_encode(const void *page, int zstd_level, void *out, wal_image_header *ih)
{
	char raw[WR_PAGE_SIZE];
	uint16_t hole_off, hole_len;
	wal_page_hole(page, &hole_off, &hole_len);
	size_t raw_len = WR_PAGE_SIZE - hole_len;
	memcpy(raw, page, hole_off);
	memcpy(raw + hole_off, (const char *)page + hole_off + hole_len,
	       WR_PAGE_SIZE - hole_off - hole_len);

	uint8_t flags = WAL_BLK_HAS_IMAGE | (hole_len ? WAL_BLK_IMAGE_HOLE : 0);
	size_t stored = zstd_level > 0 ? wal_fpi_compress(raw, raw_len, zstd_level, out) : 0;
	if (stored > 0) {
		flags |= WAL_BLK_IMAGE_ZSTD;
	} else {
		memcpy(out, raw, raw_len);
		stored = raw_len;
	}
	*ih = (wal_image_header){
	    .length = (uint16_t)stored, .hole_off = hole_off, .hole_len = hole_len};
	return flags;
}

static int wal_fpi_bad(const wal_image_header *ih, const char *why)
{
	return wr_error(WALRUS_ECORRUPT, "could not restore page image (length %u, hole %u+%u): %s",
	                ih->length, ih->hole_off, ih->hole_len, why);
}

/* Decompresses exactly @raw_len bytes into @page. */
static int wal_fpi_decompress(const void *img, const wal_image_header *ih, size_t raw_len,
                              void *page)
{
	if (wal_dctx == NULL && (wal_dctx = ZSTD_createDCtx()) == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory creating a zstd context");
	size_t n = ZSTD_decompressDCtx(wal_dctx, page, raw_len, img, ih->length);
	if (ZSTD_isError(n))
		return wal_fpi_bad(ih, ZSTD_getErrorName(n));
	if (n != raw_len)
		return wal_fpi_bad(ih, "decompressed to the wrong size");
	return WALRUS_OK;
}

int wal_fpi_decode(const void *img, const wal_image_header *ih, uint8_t flags, void *page)
{
	bool hole = (flags & WAL_BLK_IMAGE_HOLE) != 0;
	if (!(flags & WAL_BLK_HAS_IMAGE))
		return wal_fpi_bad(ih, "block has no image");
	if ((uint32_t)ih->hole_off + ih->hole_len > WR_PAGE_SIZE || hole != (ih->hole_len > 0))
		return wal_fpi_bad(ih, "hole outside the page");
	size_t raw_len = WR_PAGE_SIZE - ih->hole_len;
	if (flags & WAL_BLK_IMAGE_ZSTD) {
		int rc = wal_fpi_decompress(img, ih, raw_len, page);
		if (rc != WALRUS_OK)
			return rc;
	} else {
		if (ih->length != raw_len)
			return wal_fpi_bad(ih, "length does not match the hole");
		memcpy(page, img, raw_len);
	}
	/* Put the zero hole back: the bytes after it move up. */
	char *p = page;
	memmove(p + ih->hole_off + ih->hole_len, p + ih->hole_off, raw_len - ih->hole_off);
	memset(p + ih->hole_off, 0, ih->hole_len);
	return WALRUS_OK;
}
