/*
 * filewriter.c - WAL position arithmetic, and appending records straight
 * into segment files (bootstrap, tools, tests).
 *
 * Positions, the one convention every writer and the reader share:
 *   - a record's bytes (header included) fill the usable part of each page,
 *     the part after its page header, and may split at any page boundary;
 *   - the "end" of a record is the position just after its last byte.  When
 *     the last byte is the last of a page, end is the next page's start:
 *     the next page's header is not counted until a byte lands there;
 *   - the next record starts at wal_align(end), or, if that is a page
 *     start, just after that page's header;
 *   - a page whose first data byte continues a record carries WAL_PAGE_CONT
 *     and rem_len = the bytes of that record from there to its end
 *     (including those on later pages).  A record ending exactly at a page
 *     boundary does not continue onto the next page.
 *
 * The writer keeps the page being filled in memory and writes each page
 * whole (a partial last page with zeros after the data, as the shared WAL
 * buffers do).  It fdatasyncs a segment before leaving it, as PostgreSQL
 * does, so that a later wal_fw_flush(sync) covers everything written.
 */
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "wal/wal.h"

struct wal_file_writer {
	char waldir[PATH_MAX];
	uint64_t seg_size;
	uint64_t sysid;
	wr_lsn next;       /* where the next record starts */
	wr_lsn prev;       /* start of the last record */
	wr_lsn page_start; /* the page in memory */
	bool page_dirty;   /* it has bytes not yet written */
	wr_lsn durable;    /* all WAL before it is synced: stamped on each page written */
	fdc_file fd;       /* the segment holding page_start, or FDC_INVALID */
	wr_lsn fd_seg;
	char page[WAL_PAGE_SIZE];
};

uint32_t wal_page_header_size(wr_lsn page_start, uint64_t seg_size)
{
	wr_lsn page = page_start - page_start % WAL_PAGE_SIZE;
	return page % seg_size == 0 ? WAL_LONG_PHD : WAL_SHORT_PHD;
}

wr_lsn wal_lsn_advance(wr_lsn lsn, uint64_t len, uint64_t seg_size)
{
	while (len > 0) {
		uint64_t off = lsn % WAL_PAGE_SIZE;
		if (off == 0) {
			off = wal_page_header_size(lsn, seg_size);
			lsn += off;
		}
		uint64_t n = WR_MIN(WAL_PAGE_SIZE - off, len);
		lsn += n;
		len -= n;
	}
	return lsn;
}

/* Where the record after one ending at @end starts. */
static wr_lsn wal_fw_next_start(wr_lsn end, uint64_t seg_size)
{
	wr_lsn n = wal_align(end);
	if (n % WAL_PAGE_SIZE == 0)
		n += wal_page_header_size(n, seg_size);
	return n;
}

static void wal_fw_init_page(wal_file_writer *w, wr_lsn page_start)
{
	memset(w->page, 0, WAL_PAGE_SIZE);
	wal_long_page_header lh = {.std = {.magic = WAL_PAGE_MAGIC, .pageaddr = page_start}};
	size_t n = WAL_SHORT_PHD;
	if (page_start % w->seg_size == 0) {
		lh.std.info = WAL_PAGE_LONG;
		lh.sysid = w->sysid;
		lh.seg_size = (uint32_t)w->seg_size;
		lh.page_size = WAL_PAGE_SIZE;
		n = WAL_LONG_PHD;
	}
	memcpy(w->page, &lh, n);
	w->page_start = page_start;
	w->page_dirty = true;
}

/* The segment file holding @lsn, open for writing (created when missing). */
static int wal_fw_segment(wal_file_writer *w, wr_lsn lsn)
{
	wr_lsn seg = lsn - lsn % w->seg_size;
	if (w->fd != FDC_INVALID && w->fd_seg == seg)
		return WALRUS_OK;
	if (w->fd != FDC_INVALID) {
		/* Leaving a segment: make it durable now, later flushes won't see it. */
		int rc = fdc_fdatasync(w->fd);
		int rc2 = fdc_close(w->fd);
		w->fd = FDC_INVALID;
		if (rc != WALRUS_OK || rc2 != WALRUS_OK)
			return rc != WALRUS_OK ? rc : rc2;
		/* Pages are written in order: everything before @seg is written. */
		w->durable = WR_MAX(w->durable, seg);
	}
	char path[PATH_MAX];
	wal_segment_path(w->waldir, w->seg_size, seg, path, sizeof(path));
	int rc = wal_segment_create(w->waldir, w->seg_size, seg);
	if (rc == WALRUS_OK)
		rc = fdc_open(path, O_RDWR | O_CLOEXEC, 0, &w->fd);
	if (rc == WALRUS_OK)
		w->fd_seg = seg;
	return rc;
}

static int wal_fw_write_page(wal_file_writer *w)
{
	if (!w->page_dirty)
		return WALRUS_OK;
	int rc = wal_fw_segment(w, w->page_start);
	if (rc != WALRUS_OK)
		return rc;
	wal_page_header h;
	memcpy(&h, w->page, sizeof(h));
	h.durable = w->durable;
	memcpy(w->page, &h, sizeof(h));
	rc = fdc_pwrite(w->fd, w->page, WAL_PAGE_SIZE, (off_t)(w->page_start % w->seg_size));
	if (rc == WALRUS_OK)
		w->page_dirty = false;
	return rc;
}

/*
 * Loads the page holding @pos, keeping what it holds before @pos when it is
 * already a valid page of this stream (appending to an existing stream).
 */
static int wal_fw_load_page(wal_file_writer *w, wr_lsn pos)
{
	wr_lsn page_start = pos - pos % WAL_PAGE_SIZE;
	wal_fw_init_page(w, page_start);
	int rc = wal_fw_segment(w, page_start);
	if (rc != WALRUS_OK)
		return rc;
	char old[WAL_PAGE_SIZE];
	ssize_t n = fdc_pread(w->fd, old, WAL_PAGE_SIZE, (off_t)(page_start % w->seg_size));
	if (n < 0)
		return (int)n;
	wal_page_header h;
	memcpy(&h, old, sizeof(h));
	if (n == WAL_PAGE_SIZE && wal_format_readable(wal_magic_format(h.magic)) &&
	    h.pageaddr == page_start) {
		memcpy(w->page, old, pos - page_start);
		/* What follows is in this walrus's format: the page says so (wal.h). */
		memcpy(&h, w->page, sizeof(h));
		h.magic = WAL_PAGE_MAGIC;
		memcpy(w->page, &h, sizeof(h));
	}
	return WALRUS_OK;
}

int wal_fw_open(const char *waldir, uint64_t seg_size, uint64_t sysid, wr_lsn start, wr_lsn prev,
                wal_file_writer **out)
{
	*out = NULL;
	if (seg_size < WAL_PAGE_SIZE || seg_size % WAL_PAGE_SIZE != 0 || seg_size > UINT32_MAX ||
	    start == 0)
		return wr_error(WALRUS_EINVAL,
		                "invalid WAL writer start " WAL_LSN_FMT " or segment size %llu",
		                WAL_LSN_ARGS(start), (unsigned long long)seg_size);
	wal_file_writer *w = calloc(1, sizeof(*w));
	if (w == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory opening a WAL writer");
	if (!wr_snprintf(w->waldir, sizeof(w->waldir), "%s", waldir)) {
		free(w);
		return wr_error(WALRUS_EINVAL, "WAL directory name too long: \"%s\"", waldir);
	}
	w->seg_size = seg_size;
	w->sysid = sysid;
	w->next = wal_fw_next_start(start, seg_size);
	w->prev = prev;
	w->durable = start; /* the caller's stream up to @start is durable (recovered, synced) */
	w->fd = FDC_INVALID;
	int rc = wal_fw_load_page(w, w->next);
	if (rc != WALRUS_OK) {
		wal_fw_close(w);
		return rc;
	}
	*out = w;
	return WALRUS_OK;
}

/* Copies record bytes from @pos on, moving through pages; returns the end. */
static int wal_fw_copy(wal_file_writer *w, wr_lsn pos, const char *rec, uint32_t len, wr_lsn *end)
{
	uint32_t done = 0;
	while (done < len) {
		wr_lsn page_start = pos - pos % WAL_PAGE_SIZE;
		if (page_start != w->page_start) {
			int rc = wal_fw_write_page(w);
			if (rc != WALRUS_OK)
				return rc;
			wal_fw_init_page(w, page_start);
			wal_page_header h;
			memcpy(&h, w->page, sizeof(h));
			h.info |= WAL_PAGE_CONT;
			h.rem_len = len - done;
			memcpy(w->page, &h, sizeof(h));
			pos += wal_page_header_size(page_start, w->seg_size);
		}
		uint32_t n =
		    (uint32_t)WR_MIN(page_start + WAL_PAGE_SIZE - pos, (uint64_t)(len - done));
		memcpy(w->page + (pos - page_start), rec + done, n);
		w->page_dirty = true;
		pos += n;
		done += n;
	}
	*end = pos;
	return WALRUS_OK;
}

int wal_fw_append(wal_file_writer *w, wal_assembled *a, wr_lsn *start, wr_lsn *end)
{
	wr_lsn s = w->next, e;
	wr_lsn page_start = s - s % WAL_PAGE_SIZE;
	if (page_start != w->page_start) {
		/* The previous record ended at a page boundary: a fresh page, no CONT. */
		int rc = wal_fw_write_page(w);
		if (rc != WALRUS_OK)
			return rc;
		wal_fw_init_page(w, page_start);
	}
	wal_finish_record(a, w->prev);
	int rc = wal_fw_copy(w, s, a->buf, a->len, &e);
	if (rc != WALRUS_OK)
		return rc;
	w->prev = s;
	w->next = wal_fw_next_start(e, w->seg_size);
	if (start)
		*start = s;
	if (end)
		*end = e;
	return WALRUS_OK;
}

int wal_fw_flush(wal_file_writer *w, bool sync)
{
	int rc = wal_fw_write_page(w);
	if (rc == WALRUS_OK && sync && w->fd != FDC_INVALID) {
		rc = fdc_fdatasync(w->fd);
		if (rc == WALRUS_OK)
			w->durable = w->next;
	}
	return rc;
}

/* Closes the segment; what was not flushed is dropped (callers flush first). */
void wal_fw_close(wal_file_writer *w)
{
	if (w == NULL)
		return;
	if (w->fd != FDC_INVALID)
		(void)fdc_close(w->fd); /* nothing to report to: flush returned the errors */
	free(w);
}
