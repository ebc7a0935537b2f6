/*
 * reader.c - reading WAL records back from the segment files: recovery,
 * waldump and tests.
 *
 * Every page header the reader crosses is checked (magic, pageaddr, the
 * long header on a segment's first page, the continuation flag and length),
 * then the record header, the CRC, and the record's structure
 * (wal_decode).  Positions follow the convention in filewriter.c.
 *
 * End of WAL versus damage.  After a crash the WAL ends with a torn or
 * zeroed record, or with stale bytes of a recycled segment; that is the
 * normal end of WAL (WALRUS_ENOTFOUND, with PostgreSQL's wording of the
 * reason).  But a record that was flushed and fails a check now is damage:
 * replay would silently stop early and lose committed work.
 *
 * Valid WAL after a bad record does not prove it was flushed: at a power
 * cut the page cache may have written back a later page of an unfinished
 * flush and not an earlier one.  Proof comes from the page headers: each
 * carries the position before which all WAL was durable when the page was
 * written (wal_page_header.durable).  So on a failure at X with a plausible
 * length, the reader follows the chain of valid records after X (the first
 * one's prev-link must be X); if one of them lies on a page written when
 * X's end was already durable, X was flushed and is damaged:
 * WALRUS_ECORRUPT.  Otherwise the WAL ends at X, a torn tail.
 *
 * A page at its own address whose magic names a WAL format this walrus
 * does not read (wal.h, "WAL formats") is neither end nor damage: the
 * stream goes on in a format a newer walrus wrote.  The reader says so
 * (WALRUS_EVERSION, naming the segment, the format and the walrus it
 * needs); ending the WAL there would let new WAL overwrite it.
 *
 * An empty segment file (0 bytes) reads like a zero-filled one: the WAL
 * ends where the stream enters it.  Whether it may end there is for the
 * caller to say (recovery: not before the checkpoint record).  A segment of
 * any other wrong size is damage.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wal/wal.h"

#define WAL_BAD     1 /* a check failed: r->why says which */
#define WAL_WHY_LEN 512

struct wal_reader {
	char waldir[PATH_MAX];
	uint64_t seg_size;
	uint64_t sysid;
	fdc_file fd; /* the segment at fd_seg, or FDC_INVALID */
	wr_lsn fd_seg;
	char page[WAL_PAGE_SIZE];
	wr_lsn page_start; /* of the page in memory, checked; 0 = none */
	char *buf;         /* the record being read, reassembled */
	size_t cap;
	wr_lsn next;         /* where the record after the last one read starts; 0 = none */
	wr_lsn page_durable; /* of the page in memory */
	wr_lsn rec_durable;  /* highest of the pages of the record fetched last */
	wr_lsn last;         /* start of the last record read */
	wr_lsn limit;        /* a standby's: bytes from here on are not durable yet (0: none) */
	wr_lsn page_limit;   /* the limit when r->page was read: bytes past it may be stale */
	char why[WAL_WHY_LEN];
	wal_decoded dec;
};

/* Progress through the pages of one record. */
typedef struct wal_cursor {
	wr_lsn start;      /* of the record */
	wr_lsn pos;        /* next byte to read */
	uint32_t done;     /* record bytes read */
	uint32_t tot_len;  /* 0 until the header is read */
	uint32_t pend_rem; /* a continuation page crossed inside the header: checked later */
	uint32_t pend_done;
	wr_lsn pend_page;
} wal_cursor;

static int wal_rd_bad(wal_reader *r, const char *fmt, ...) WR_PRINTF(2, 3);
static int wal_rd_bad(wal_reader *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->why, sizeof(r->why), fmt, ap);
	va_end(ap);
	return WAL_BAD;
}

static wr_lsn wal_rd_next_start(wr_lsn end, uint64_t seg_size)
{
	wr_lsn n = wal_align(end);
	if (n % WAL_PAGE_SIZE == 0)
		n += wal_page_header_size(n, seg_size);
	return n;
}

/* Where the record after the one just fetched (r->dec, ending at @end) starts. */
static wr_lsn wal_rd_after(const wal_reader *r, wr_lsn end)
{
	return wal_rd_next_start(wal_record_next_end(&r->dec, end, r->seg_size), r->seg_size);
}

int wal_reader_open(const char *waldir, uint64_t seg_size, uint64_t sysid, wal_reader **out)
{
	*out = NULL;
	if (seg_size < WAL_PAGE_SIZE || seg_size % WAL_PAGE_SIZE != 0 || seg_size > UINT32_MAX)
		return wr_error(WALRUS_EINVAL, "invalid WAL segment size %llu",
		                (unsigned long long)seg_size);
	wal_reader *r = calloc(1, sizeof(*r));
	if (r == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory opening a WAL reader");
	if (!wr_snprintf(r->waldir, sizeof(r->waldir), "%s", waldir)) {
		free(r);
		return wr_error(WALRUS_EINVAL, "WAL directory name too long: \"%s\"", waldir);
	}
	r->seg_size = seg_size;
	r->sysid = sysid;
	r->fd = FDC_INVALID;
	*out = r;
	return WALRUS_OK;
}

void wal_reader_close(wal_reader *r)
{
	if (r == NULL)
		return;
	if (r->fd != FDC_INVALID)
		(void)fdc_close(r->fd); /* read-only: nothing can be lost */
	free(r->buf);
	free(r);
}

/* ---------------------------------------------------------------- pages */

static int wal_rd_segment(wal_reader *r, wr_lsn seg)
{
	if (r->fd != FDC_INVALID && r->fd_seg == seg)
		return WALRUS_OK;
	if (r->fd != FDC_INVALID)
		(void)fdc_close(r->fd);
	r->fd = FDC_INVALID;
	char path[PATH_MAX];
	wal_segment_path(r->waldir, r->seg_size, seg, path, sizeof(path));
	fdc_file f;
	int rc = fdc_open(path, O_RDONLY | O_CLOEXEC, 0, &f);
	if (rc != WALRUS_OK && errno == ENOENT)
		return wr_error(WALRUS_ENOTFOUND, "could not open WAL segment \"%s\": %m", path);
	if (rc != WALRUS_OK)
		return rc;
	off_t size;
	rc = fdc_size(f, &size);
	if (rc == WALRUS_OK && size == 0) {
		/* Holds no WAL: where the stream needs it, that is where WAL ends,
		 * and the caller decides whether the stream may end there. */
		(void)fdc_close(f);
		return wal_rd_bad(r, "WAL segment \"%s\" is empty (0 bytes)", path);
	}
	if (rc == WALRUS_OK && (uint64_t)size != r->seg_size)
		rc = wr_error(WALRUS_ECORRUPT, "WAL segment \"%s\" has size %lld, expected %llu",
		              path, (long long)size, (unsigned long long)r->seg_size);
	if (rc != WALRUS_OK) {
		(void)fdc_close(f);
		return rc;
	}
	r->fd = f;
	r->fd_seg = seg;
	return WALRUS_OK;
}

/* Checks the long header of a segment's first page. */
static int wal_rd_check_long(wal_reader *r, const char *page)
{
	wal_long_page_header lh;
	memcpy(&lh, page, sizeof(lh));
	if (r->sysid != 0 && lh.sysid != r->sysid)
		return wal_rd_bad(r,
		                  "WAL file is from different database system: WAL file database "
		                  "system identifier is %llu, expected %llu",
		                  (unsigned long long)lh.sysid, (unsigned long long)r->sysid);
	if (lh.seg_size != r->seg_size)
		return wal_rd_bad(r,
		                  "WAL file is from different database system: incorrect segment "
		                  "size %u in page header, expected %llu",
		                  lh.seg_size, (unsigned long long)r->seg_size);
	if (lh.page_size != WAL_PAGE_SIZE)
		return wal_rd_bad(r,
		                  "WAL file is from different database system: incorrect page "
		                  "size %u in page header",
		                  lh.page_size);
	return WALRUS_OK;
}

/*
 * The first walrus version that reads a later format, from the first page
 * of the segment (a format that changes the page layout keeps it there):
 * into @needs, or "" when that page does not say.
 */
static void wal_rd_needs(wal_reader *r, const char *page, wr_lsn page_start,
                         char needs[WAL_NEEDS_LEN])
{
	char first[WAL_NEEDS_OFF + WAL_NEEDS_LEN];
	wr_lsn seg = page_start - page_start % r->seg_size;
	needs[0] = '\0';
	if (page_start == seg)
		memcpy(first, page, sizeof(first));
	else if (fdc_pread(r->fd, first, sizeof(first), 0) != (ssize_t)sizeof(first))
		return;
	wal_page_header h;
	memcpy(&h, first, sizeof(h));
	if (wal_magic_format(h.magic) <= WAL_FORMAT || h.pageaddr != seg)
		return;
	/* Not a version: say nothing rather than garbage. */
	if (wal_walrus_version_ok(first + WAL_NEEDS_OFF))
		memcpy(needs, first + WAL_NEEDS_OFF, WAL_NEEDS_LEN);
}

/* A page of this stream in a format this walrus does not read: not the end of WAL. */
static int wal_rd_format(wal_reader *r, const char *page, wr_lsn page_start, uint32_t format)
{
	char path[PATH_MAX], needs[WAL_NEEDS_LEN], why[160];
	wal_segment_path(r->waldir, r->seg_size, page_start, path, sizeof(path));
	wal_rd_needs(r, page, page_start, needs);
	wal_format_why(format, needs, why, sizeof(why));
	return wr_error(WALRUS_EVERSION,
	                "WAL segment \"%s\" at " WAL_LSN_FMT " has WAL format %u, which %s", path,
	                WAL_LSN_ARGS(page_start), format, why);
}

static int wal_rd_check_page(wal_reader *r, const char *page, wr_lsn page_start)
{
	wal_page_header h;
	memcpy(&h, page, sizeof(h));
	char seg[17];
	snprintf(seg, sizeof(seg), "%016llX",
	         (unsigned long long)(page_start - page_start % r->seg_size));
	unsigned off = (unsigned)(page_start % r->seg_size);
	bool first = off == 0;
	uint32_t format = wal_magic_format(h.magic);
	if (format == 0)
		return wal_rd_bad(r,
		                  "invalid magic number %04X in WAL segment %s, LSN " WAL_LSN_FMT
		                  ", offset %u",
		                  h.magic, seg, WAL_LSN_ARGS(page_start), off);
	/* At another address it is stale, whatever wrote it (a recycled segment). */
	if (!wal_format_readable(format) && h.pageaddr == page_start)
		return wal_rd_format(r, page, page_start, format);
	if (!wal_format_readable(format))
		return wal_rd_bad(r,
		                  "WAL format %u of a page at unexpected pageaddr " WAL_LSN_FMT
		                  " in WAL segment %s, LSN " WAL_LSN_FMT ", offset %u",
		                  format, WAL_LSN_ARGS(h.pageaddr), seg, WAL_LSN_ARGS(page_start),
		                  off);
	if ((h.info & ~(WAL_PAGE_CONT | WAL_PAGE_LONG)) != 0 ||
	    first != ((h.info & WAL_PAGE_LONG) != 0))
		return wal_rd_bad(
		    r, "invalid info bits %04X in WAL segment %s, LSN " WAL_LSN_FMT ", offset %u",
		    h.info, seg, WAL_LSN_ARGS(page_start), off);
	if (h.pageaddr != page_start)
		return wal_rd_bad(r,
		                  "unexpected pageaddr " WAL_LSN_FMT
		                  " in WAL segment %s, LSN " WAL_LSN_FMT ", offset %u",
		                  WAL_LSN_ARGS(h.pageaddr), seg, WAL_LSN_ARGS(page_start), off);
	/* Written after a flush that ended on this page at the latest. */
	if (h.durable >= page_start + WAL_PAGE_SIZE)
		return wal_rd_bad(r,
		                  "invalid durable position " WAL_LSN_FMT
		                  " in WAL segment %s, LSN " WAL_LSN_FMT ", offset %u",
		                  WAL_LSN_ARGS(h.durable), seg, WAL_LSN_ARGS(page_start), off);
	return first ? wal_rd_check_long(r, page) : WALRUS_OK;
}

/* Makes the checked page starting at @page_start the one in r->page. */
static int wal_rd_page(wal_reader *r, wr_lsn page_start)
{
	if (r->page_start == page_start && page_start != 0)
		return WALRUS_OK;
	r->page_start = 0;
	int rc = wal_rd_segment(r, page_start - page_start % r->seg_size);
	if (rc != WALRUS_OK)
		return rc;
	ssize_t n = fdc_pread(r->fd, r->page, WAL_PAGE_SIZE, (off_t)(page_start % r->seg_size));
	if (n < 0)
		return (int)n;
	if (n != WAL_PAGE_SIZE)
		return wr_error(WALRUS_ECORRUPT, "short read of WAL segment \"%s\" at offset %llu",
		                fdc_path(r->fd), (unsigned long long)(page_start % r->seg_size));
	rc = wal_rd_check_page(r, r->page, page_start);
	if (rc == WALRUS_OK) {
		wal_page_header h;
		memcpy(&h, r->page, sizeof(h));
		r->page_start = page_start;
		r->page_durable = h.durable;
		r->page_limit = r->limit != 0 ? r->limit : UINT64_MAX;
	}
	return rc;
}

/*
 * A standby reads WAL while its receiver writes more: nothing at or past
 * the limit is read (WAL_NOT_YET), and a page read under an older limit
 * is read again for the bytes written since.
 */
static int wal_rd_need(wal_reader *r, wr_lsn upto)
{
	if (r->limit != 0 && upto > r->limit)
		return WAL_NOT_YET;
	if (r->page_start != 0 && upto > r->page_limit)
		r->page_start = 0;
	return WALRUS_OK;
}

void wal_reader_set_limit(wal_reader *r, wr_lsn limit)
{
	r->limit = limit; /* a page read under the old one is read again (wal_rd_need) */
}

void wal_reader_reopen(wal_reader *r)
{
	r->page_start = 0;
	if (r->fd != FDC_INVALID)
		(void)fdc_close(r->fd);
	r->fd = FDC_INVALID;
}

/* ---------------------------------------------------------------- records */

static int wal_rd_grow(wal_reader *r, size_t need)
{
	if (wr_grow(&r->buf, &r->cap, need, 1, 16384) != WALRUS_OK)
		return wr_error(WALRUS_ENOMEM, "out of memory reading a WAL record of %zu bytes",
		                need);
	return WALRUS_OK;
}

/* Enters the page at c->pos, which continues the record. */
static int wal_rd_enter_cont(wal_reader *r, wal_cursor *c)
{
	int rc = wal_rd_page(r, c->pos);
	if (rc != WALRUS_OK)
		return rc;
	wal_page_header h;
	memcpy(&h, r->page, sizeof(h));
	if (!(h.info & WAL_PAGE_CONT))
		return wal_rd_bad(r, "there is no contrecord flag at " WAL_LSN_FMT,
		                  WAL_LSN_ARGS(c->pos));
	if (c->tot_len != 0 && h.rem_len != c->tot_len - c->done)
		return wal_rd_bad(r, "invalid contrecord length %u (expected %u) at " WAL_LSN_FMT,
		                  h.rem_len, c->tot_len - c->done, WAL_LSN_ARGS(c->pos));
	if (c->tot_len == 0 && c->pend_page == 0) {
		c->pend_page = c->pos;
		c->pend_rem = h.rem_len;
		c->pend_done = c->done;
	}
	c->pos += wal_page_header_size(c->pos, r->seg_size);
	return WALRUS_OK;
}

/* Copies the record's next @n bytes into r->buf. */
static int wal_rd_copy(wal_reader *r, wal_cursor *c, uint32_t n)
{
	int rc = wal_rd_grow(r, (size_t)c->done + n);
	while (rc == WALRUS_OK && n > 0) {
		if (c->pos % WAL_PAGE_SIZE == 0) {
			rc = wal_rd_need(r, c->pos + wal_page_header_size(c->pos, r->seg_size));
			if (rc == WALRUS_OK)
				rc = wal_rd_enter_cont(r, c);
			if (rc != WALRUS_OK)
				break;
		}
		uint32_t off = (uint32_t)(c->pos % WAL_PAGE_SIZE);
		uint32_t k = WR_MIN(WAL_PAGE_SIZE - off, n);
		rc =
		    wal_rd_need(r, c->pos + k); /* before the page: its segment may not exist yet */
		if (rc == WALRUS_OK)
			rc = wal_rd_page(r, c->pos - off);
		if (rc != WALRUS_OK)
			break;
		r->rec_durable = WR_MAX(r->rec_durable, r->page_durable);
		memcpy(r->buf + c->done, r->page + off, k);
		c->pos += k;
		c->done += k;
		n -= k;
	}
	return rc;
}

/* The checks a record header can fail, before its body is read. */
static int wal_rd_check_header(wal_reader *r, wal_cursor *c, const wal_record *h, bool check_prev,
                               wr_lsn expect_prev)
{
	if (h->tot_len < WAL_RECORD_HEADER)
		return wal_rd_bad(
		    r, "invalid record length at " WAL_LSN_FMT ": expected at least %u, got %u",
		    WAL_LSN_ARGS(c->start), WAL_RECORD_HEADER, h->tot_len);
	if (h->tot_len > WAL_MAX_RECORD)
		return wal_rd_bad(r, "record length %u at " WAL_LSN_FMT " too long", h->tot_len,
		                  WAL_LSN_ARGS(c->start));
	if (h->rmid >= RM_MAX)
		return wal_rd_bad(r, "invalid resource manager ID %u at " WAL_LSN_FMT, h->rmid,
		                  WAL_LSN_ARGS(c->start));
	if (check_prev && h->prev != expect_prev)
		return wal_rd_bad(r,
		                  "record with incorrect prev-link " WAL_LSN_FMT " at " WAL_LSN_FMT,
		                  WAL_LSN_ARGS(h->prev), WAL_LSN_ARGS(c->start));
	if (c->pend_page != 0 && c->pend_rem != h->tot_len - c->pend_done)
		return wal_rd_bad(r, "invalid contrecord length %u (expected %u) at " WAL_LSN_FMT,
		                  c->pend_rem, h->tot_len - c->pend_done,
		                  WAL_LSN_ARGS(c->pend_page));
	return WALRUS_OK;
}

/*
 * Reads and decodes the record at @lsn into r->dec.  Returns WALRUS_OK,
 * WAL_BAD (a check failed; *@tot_len is the length from its header when
 * that was plausible, else 0) or an error code.
 */
static int wal_rd_fetch(wal_reader *r, wr_lsn lsn, bool check_prev, wr_lsn expect_prev,
                        uint32_t *tot_len, wr_lsn *end)
{
	wal_cursor c = {.start = lsn, .pos = lsn};
	*tot_len = 0;
	r->rec_durable = 0;
	int rc = wal_rd_copy(r, &c, WAL_RECORD_HEADER);
	if (rc != WALRUS_OK)
		return rc;
	wal_record h;
	memcpy(&h, r->buf, sizeof(h));
	if (h.tot_len >= WAL_RECORD_HEADER && h.tot_len <= WAL_MAX_RECORD)
		*tot_len = h.tot_len;
	rc = wal_rd_check_header(r, &c, &h, check_prev, expect_prev);
	if (rc != WALRUS_OK)
		return rc;
	c.tot_len = h.tot_len;
	rc = wal_rd_copy(r, &c, h.tot_len - WAL_RECORD_HEADER);
	if (rc != WALRUS_OK)
		return rc;
	rc = wal_decode(r->buf, h.tot_len, lsn, &r->dec);
	if (rc == WALRUS_ECORRUPT)
		return wal_rd_bad(r, "%s", walrus_errmsg());
	r->dec.end = c.pos;
	*end = c.pos;
	return rc;
}

static bool wal_rd_valid_start(wr_lsn lsn, uint64_t seg_size)
{
	return lsn != 0 && lsn % WAL_ALIGN == 0 &&
	       lsn % WAL_PAGE_SIZE >= wal_page_header_size(lsn, seg_size);
}

/*
 * The valid records that follow a bad one ending at @bad_end, from @next
 * (the first one's prev-link must be @prev): how many there are, and the
 * start of the first one written when @bad_end was durable (0: none).
 * *@stop: why the chain ended.
 */
static uint64_t wal_rd_follow(wal_reader *r, wr_lsn next, wr_lsn prev, wr_lsn bad_end,
                              wr_lsn *proof, int *stop)
{
	uint64_t n = 0;
	uint32_t len;
	wr_lsn end = 0;
	*proof = 0;
	while ((*stop = wal_rd_fetch(r, next, true, prev, &len, &end)) == WALRUS_OK) {
		n++;
		if (r->rec_durable >= bad_end) {
			*proof = next;
			break;
		}
		prev = next;
		next = wal_rd_after(r, end);
	}
	r->page_start = 0; /* read the tail again next time: it may have grown */
	return n;
}

/* A check failed at @lsn: end of WAL, unless the record was flushed (see the top). */
static int wal_rd_failed(wal_reader *r, wr_lsn lsn, uint32_t tot_len)
{
	char why[WAL_WHY_LEN], after[160] = "";
	memcpy(why, r->why, sizeof(why));
	if (tot_len != 0) {
		wr_lsn bad_end = wal_lsn_advance(lsn, tot_len, r->seg_size);
		wr_lsn proof;
		int stop;
		uint64_t n = wal_rd_follow(r, wal_rd_next_start(bad_end, r->seg_size), lsn, bad_end,
		                           &proof, &stop);
		/* The stream goes on in a format this walrus does not read: whatever
		 * the bad record is, ending the WAL here would drop that WAL. */
		if (stop == WALRUS_EVERSION) {
			r->page_start = 0;
			return stop;
		}
		if (proof != 0) {
			char path[PATH_MAX];
			wal_segment_path(r->waldir, r->seg_size, lsn - lsn % r->seg_size, path,
			                 sizeof(path));
			return wr_error(WALRUS_ECORRUPT,
			                "record at " WAL_LSN_FMT
			                " in WAL segment \"%s\" is damaged but "
			                "was flushed: the record at " WAL_LSN_FMT
			                " was written after it was durable: %s",
			                WAL_LSN_ARGS(lsn), path, WAL_LSN_ARGS(proof), why);
		}
		if (n > 0)
			snprintf(after, sizeof(after),
			         " (the %llu valid record(s) after it were never flushed: a torn "
			         "write)",
			         (unsigned long long)n);
	}
	r->page_start = 0; /* read the tail again next time: it may have grown */
	char at[32];
	snprintf(at, sizeof(at), WAL_LSN_FMT, WAL_LSN_ARGS(lsn));
	if (strstr(why, at) != NULL)
		return wr_error(WALRUS_ENOTFOUND, "%s%s", why, after);
	/* Page-level reasons name the page: say which record was being read. */
	return wr_error(WALRUS_ENOTFOUND, "%s, reading record at %s%s", why, at, after);
}

/* A missing segment ends the WAL too: say which record needed it. */
static int wal_rd_hard_error(int rc, wr_lsn lsn)
{
	if (rc != WALRUS_ENOTFOUND)
		return rc;
	char msg[WAL_WHY_LEN];
	snprintf(msg, sizeof(msg), "%s", walrus_errmsg());
	return wr_error(rc, "%s, reading record at " WAL_LSN_FMT, msg, WAL_LSN_ARGS(lsn));
}

int wal_read_record(wal_reader *r, wr_lsn lsn, wal_decoded **rec)
{
	*rec = NULL;
	bool sequential = lsn == 0;
	if (sequential && r->next == 0)
		return wr_error(WALRUS_EINVAL, "no WAL record was read before: give a start LSN");
	if (sequential)
		lsn = r->next;
	if (!wal_rd_valid_start(lsn, r->seg_size))
		return wr_error(WALRUS_EINVAL, "invalid record start LSN " WAL_LSN_FMT,
		                WAL_LSN_ARGS(lsn));
	uint32_t tot_len;
	wr_lsn end = 0;
	int rc = wal_rd_fetch(r, lsn, sequential, r->last, &tot_len, &end);
	if (rc == WAL_BAD)
		return wal_rd_failed(r, lsn, tot_len);
	if (rc != WALRUS_OK) {
		r->page_start = 0;
		return wal_rd_hard_error(rc, lsn);
	}
	r->last = lsn;
	r->next = wal_rd_after(r, end);
	*rec = &r->dec;
	return WALRUS_OK;
}

/* Where the first record starting on the page at @page_start begins. */
static int wal_rd_first_on_page(wal_reader *r, wr_lsn page_start, wr_lsn *first)
{
	int rc = wal_rd_page(r, page_start);
	if (rc == WAL_BAD)
		return wr_error(WALRUS_ENOTFOUND, "%s", r->why);
	if (rc != WALRUS_OK)
		return rc;
	wal_page_header h;
	memcpy(&h, r->page, sizeof(h));
	wr_lsn data = page_start + wal_page_header_size(page_start, r->seg_size);
	*first = data;
	if (h.info & WAL_PAGE_CONT)
		*first =
		    wal_rd_next_start(wal_lsn_advance(data, h.rem_len, r->seg_size), r->seg_size);
	return WALRUS_OK;
}

int wal_find_first(wal_reader *r, wr_lsn lsn, wr_lsn *found)
{
	wr_lsn cand = 0;
	int rc = wal_rd_first_on_page(r, lsn - lsn % WAL_PAGE_SIZE, &cand);
	wal_decoded *rec;
	for (bool first = true; rc == WALRUS_OK; first = false) {
		rc = wal_read_record(r, first ? cand : 0, &rec);
		if (rc == WALRUS_OK && rec->lsn >= lsn) {
			*found = rec->lsn;
			return WALRUS_OK;
		}
	}
	return rc;
}
