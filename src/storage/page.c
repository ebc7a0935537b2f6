/*
 * page.c - the 8 KiB page: header layout, free space, checksums.
 *
 * Every page on disk carries a CRC32C so that a torn write, a flipped bit or
 * a page written at the wrong offset is detected when it is read back,
 * instead of being served as data.
 *
 * Interface: page_init, page_is_new, page_get_lsn, page_set_lsn,
 * page_free_space, page_checksum, page_set_checksum, page_verify.
 *
 * Notes: an all-zero page is valid and keeps checksum 0 (a block extended
 * but never written, or a sparse gap); any other page has a non-zero
 * checksum, so a zero checksum can only mean "new".
 */
#include <stddef.h>
#include <string.h>

#include "storage/storage.h"

_Static_assert(sizeof(wr_page_header) == 24, "the page header is part of the on-disk format");
_Static_assert(WR_PAGE_SIZE % sizeof(uint64_t) == 0, "page_is_new compares 64-bit words");

#define PAGE_CKSUM_OFF offsetof(wr_page_header, checksum)
#define PAGE_CKSUM_END (PAGE_CKSUM_OFF + sizeof(uint32_t))

static wr_page_header page_header(const void *page)
{
	wr_page_header h;
	memcpy(&h, page, sizeof(h)); /* pages need not be aligned */
	return h;
}

void page_init(void *page, uint16_t special, uint8_t type)
{
	WR_ASSERT(special <= WR_PAGE_SIZE - WR_PAGE_HEADER_SIZE);
	memset(page, 0, WR_PAGE_SIZE);
	wr_page_header h = {0};
	h.lower = WR_PAGE_HEADER_SIZE;
	h.upper = (uint16_t)(WR_PAGE_SIZE - special);
	h.special = h.upper;
	h.type = type;
	h.version = WR_PAGE_VERSION;
	memcpy(page, &h, sizeof(h));
}

bool page_is_new(const void *page)
{
	const unsigned char *p = page;
	uint64_t acc = 0;
	/* OR-ing words without an early exit lets the compiler vectorise the loop. */
	for (size_t i = 0; i < WR_PAGE_SIZE; i += sizeof(uint64_t)) {
		uint64_t w;
		memcpy(&w, p + i, sizeof(w));
		acc |= w;
	}
	return acc == 0;
}

wr_lsn page_get_lsn(const void *page)
{
	return page_header(page).lsn;
}

void page_set_lsn(void *page, wr_lsn lsn)
{
	memcpy((char *)page + offsetof(wr_page_header, lsn), &lsn, sizeof(lsn));
}

uint16_t page_free_space(const void *page)
{
	wr_page_header h = page_header(page);
	return h.upper > h.lower ? (uint16_t)(h.upper - h.lower) : 0;
}

uint32_t page_checksum(const void *page, wr_blkno blkno)
{
	static const unsigned char zeros[sizeof(uint32_t)];
	const unsigned char *p = page;
	uint32_t crc = crc32c(0, p, PAGE_CKSUM_OFF);
	crc = crc32c(crc, zeros, sizeof(zeros)); /* the field itself counts as zero */
	crc = crc32c(crc, p + PAGE_CKSUM_END, WR_PAGE_SIZE - PAGE_CKSUM_END);
	unsigned char b[4] = {(unsigned char)blkno, (unsigned char)(blkno >> 8),
	                      (unsigned char)(blkno >> 16), (unsigned char)(blkno >> 24)};
	crc = crc32c(crc, b, sizeof(b)); /* a page copied to another block fails */
	return crc == 0 ? 1 : crc;       /* 0 is reserved for new pages */
}

void page_set_checksum(void *page, wr_blkno blkno)
{
	if (page_is_new(page))
		return; /* stays all zero, and so valid anywhere */
	uint32_t c = page_checksum(page, blkno);
	memcpy((char *)page + PAGE_CKSUM_OFF, &c, sizeof(c));
}

static bool page_header_sane(const wr_page_header *h)
{
	return h->version == WR_PAGE_VERSION && h->lower >= WR_PAGE_HEADER_SIZE &&
	       h->lower <= h->upper && h->upper <= h->special && h->special <= WR_PAGE_SIZE;
}

bool page_verify(const void *page, wr_blkno blkno)
{
	wr_page_header h = page_header(page);
	/* A written page never has checksum 0, so only a zero checksum calls
	 * for the all-zero scan: a read of a written page skips it. */
	if (h.checksum == 0)
		return page_is_new(page);
	return page_header_sane(&h) && h.checksum == page_checksum(page, blkno);
}
