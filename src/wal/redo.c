/*
 * redo.c - the redo framework: the table of resource managers, the built-in
 * ones (XLOG, and TEST for the test suites), the page source that redo
 * functions read and write blocks through, and crash recovery itself.
 *
 * Recovery (wal_recover) follows PostgreSQL's: the control file names the
 * last checkpoint record; that record names its redo point; every record
 * from the redo point to the end of the WAL is handed to its resource
 * manager.  A page's LSN is the end LSN of the last record that changed it,
 * so replaying a record again is skipped for pages that already hold it,
 * and running recovery twice is harmless.  Full-page images are always
 * restored: they repair pages torn by a crash in the middle of a write.
 *
 * A redo function cannot return an error (its signature is void, as in
 * PostgreSQL), so the page source records the first error it meets and
 * recovery checks it after every record: the error comes back from
 * wal_recover with the record's LSN, instead of a half-applied record.
 *
 * Interface: see wal.h.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wal/wal_int.h"

/* ---------------------------------------------------------------- rmgr table */

static wal_rmgr rmgr_table[RM_MAX];
static bool rmgr_present[RM_MAX];
static bool rmgr_builtins_done;

static void rmgr_ensure_builtins(void)
{
	if (!rmgr_builtins_done)
		wal_register_builtin_rmgrs();
}

void wal_rmgr_register(int rmid, const wal_rmgr *rm)
{
	/* Built-ins first, so that a later registration can replace one. */
	rmgr_ensure_builtins();
	if (rmid < 0 || rmid >= RM_MAX)
		wr_panic("resource manager id %d out of range (0..%d)", rmid, RM_MAX - 1);
	rmgr_table[rmid] = *rm;
	rmgr_present[rmid] = true;
}

const wal_rmgr *wal_rmgr_get(int rmid)
{
	rmgr_ensure_builtins();
	if (rmid < 0 || rmid >= RM_MAX || !rmgr_present[rmid])
		return NULL;
	return &rmgr_table[rmid];
}

/* ---------------------------------------------------------------- redo errors */

/* The first error of the current record's redo (0 = none), with its message. */
static int redo_err;
static char redo_errmsg[1024];

static void redo_fail(int rc)
{
	if (redo_err != 0)
		return;
	redo_err = rc;
	wr_snprintf(redo_errmsg, sizeof(redo_errmsg), "%s", walrus_errmsg());
}

static const wal_decoded_block *redo_find_block(const wal_decoded *rec, int id)
{
	for (int i = 0; i < rec->nblocks; i++)
		if (rec->blocks[i].id == id)
			return &rec->blocks[i];
	return NULL;
}

/* ---------------------------------------------------------------- default page source */

/*
 * Redo straight on the storage layer: one page buffer per block id, the
 * block read (or built from its image, or zeroed) on get and written back
 * on release.  Every relation written is fsynced at the end of recovery,
 * because the checkpoint that follows recovery will not know about them.
 */
typedef struct smgr_slot {
	char page[WR_PAGE_SIZE];
	smgr_rel *rel;
	bool restored; /* image applied: write back even if redo changed nothing */
	bool beyond;   /* past the relation's end: written by extending it */
} smgr_slot;

static smgr_slot smgr_slots[WAL_MAX_BLOCKS];
static wr_relid *touched;
static size_t ntouched, touched_cap;

static int touch_rel(wr_relid rel)
{
	for (size_t i = 0; i < ntouched; i++)
		if (touched[i] == rel)
			return 0;
	if (wr_grow(&touched, &touched_cap, ntouched + 1, sizeof(*touched), 16) != WALRUS_OK)
		return wr_error(WALRUS_ENOMEM, "out of memory");
	touched[ntouched++] = rel;
	return 0;
}

/* Opens the block's relation, creating it when a record refers to one not on disk. */
static int smgr_src_open(const wal_decoded_block *b, smgr_rel **r)
{
	int rc = touch_rel(b->rel);
	if (rc == 0 && !smgr_exists(b->rel))
		rc = smgr_create(b->rel);
	if (rc == 0)
		rc = smgr_open(b->rel, r);
	return rc;
}

/*
 * Where the block is: past the relation's end it starts as a zero page (the
 * relation grows when it is written back).
 */
static int smgr_src_locate(const wal_decoded_block *b, smgr_slot *s)
{
	wr_blkno nblocks;
	int rc = smgr_nblocks(s->rel, &nblocks);
	if (rc == 0)
		s->beyond = b->blkno >= nblocks;
	return rc;
}

/*
 * The page to redo on.  An image or an init flag means the block is not
 * read at all: it may be torn (bad checksum), which is why the image is
 * there.
 */
static int smgr_src_page(const wal_decoded *rec, const wal_decoded_block *b, smgr_slot *s,
                         int *action)
{
	if (b->flags & WAL_BLK_HAS_IMAGE) {
		int rc = wal_fpi_decode(b->image, &b->ih, b->flags, s->page);
		s->restored = rc == 0;
		*action = REDO_RESTORED_IMAGE;
		return rc;
	}
	*action = REDO_NEEDED;
	if ((b->flags & WAL_BLK_WILL_INIT) || s->beyond) {
		memset(s->page, 0, WR_PAGE_SIZE);
		return 0;
	}
	int rc = smgr_read(s->rel, b->blkno, s->page);
	if (rc == 0 && page_get_lsn(s->page) >= rec->end)
		*action = REDO_DONE_ALREADY;
	return rc;
}

static int smgr_src_get(const wal_decoded *rec, int id, void **page, int *action)
{
	const wal_decoded_block *b = redo_find_block(rec, id);
	smgr_slot *s = &smgr_slots[id];
	s->restored = false;
	int rc = smgr_src_open(b, &s->rel);
	if (rc == 0)
		rc = smgr_src_locate(b, s);
	if (rc == 0)
		rc = smgr_src_page(rec, b, s, action);
	if (rc == 0)
		*page = s->page;
	return rc;
}

static void smgr_src_release(const wal_decoded *rec, int id, void *page, bool changed)
{
	const wal_decoded_block *b = redo_find_block(rec, id);
	smgr_slot *s = &smgr_slots[id];
	if (!changed && !s->restored)
		return;
	page_set_lsn(page, rec->end);
	int rc =
	    s->beyond ? smgr_extend(s->rel, b->blkno, page) : smgr_write(s->rel, b->blkno, page);
	if (rc != 0)
		redo_fail(rc);
	s->beyond = false;
	s->restored = false;
}

static void smgr_src_finish(void)
{
	for (size_t i = 0; i < ntouched; i++) {
		smgr_rel *r;
		if (smgr_open(touched[i], &r) != 0)
			wr_panic("could not open relation %u to fsync it: %s", touched[i],
			         walrus_errmsg());
		smgr_immedsync(r); /* PANICs on error */
	}
	ntouched = 0;
}

static const wal_redo_pages smgr_pages = {
    .get = smgr_src_get,
    .release = smgr_src_release,
    .finish = smgr_src_finish,
};

/* ---------------------------------------------------------------- page source plumbing */

static const wal_redo_pages *redo_pages = &smgr_pages;

void wal_redo_set_pages(const wal_redo_pages *p)
{
	redo_pages = p != NULL ? p : &smgr_pages;
}

int wal_redo_get_block(const wal_decoded *rec, int id, void **page, int *action)
{
	*page = NULL;
	*action = REDO_DONE_ALREADY;
	if (redo_err != 0)
		return redo_err; /* the record already failed: change nothing more */
	int rc;
	if (id < 0 || id >= WAL_MAX_BLOCKS || redo_find_block(rec, id) == NULL)
		rc =
		    wr_error(WALRUS_ECORRUPT, "record at " WAL_LSN_FMT " has no block reference %d",
		             WAL_LSN_ARGS(rec->lsn), id);
	else
		rc = redo_pages->get(rec, id, page, action);
	if (rc != 0) {
		*page = NULL;
		redo_fail(rc);
	}
	return rc;
}

void wal_redo_hold(bool on)
{
	if (redo_pages->hold != NULL)
		redo_pages->hold(on);
}

uint32_t wal_redo_hold_limit(void)
{
	return redo_pages->hold_limit != NULL ? redo_pages->hold_limit() : 0;
}

void wal_redo_fail(int rc)
{
	redo_fail(rc);
}

void wal_redo_release_block(const wal_decoded *rec, int id, void *page, bool changed)
{
	if (page != NULL)
		redo_pages->release(rec, id, page, changed);
}

/* ---------------------------------------------------------------- RM_XLOG */

static bool xlog_is_checkpoint(uint8_t info)
{
	return info == XLOG_CHECKPOINT_SHUTDOWN || info == XLOG_CHECKPOINT_ONLINE;
}

/* The checkpoint record's main data; false if it has the wrong size. */
static bool xlog_checkpoint_data(const wal_decoded *rec, wal_checkpoint_rec *ck)
{
	if (rec->main_len != sizeof(*ck))
		return false;
	memcpy(ck, rec->main_data, sizeof(*ck));
	return true;
}

static void xlog_redo(const wal_decoded *rec)
{
	/* Checkpoints and no-ops change no page; recovery reads checkpoints itself. */
	if (rec->hdr.info != XLOG_FPI)
		return;
	for (int i = 0; i < rec->nblocks; i++) {
		void *page;
		int action;
		if (wal_redo_get_block(rec, rec->blocks[i].id, &page, &action) != 0)
			return;
		wal_redo_release_block(rec, rec->blocks[i].id, page, false);
	}
}

static const char *xlog_info_name(uint8_t info)
{
	switch (info) {
	case XLOG_CHECKPOINT_SHUTDOWN:
		return "CHECKPOINT_SHUTDOWN";
	case XLOG_CHECKPOINT_ONLINE:
		return "CHECKPOINT_ONLINE";
	case XLOG_NOOP:
		return "NOOP";
	case XLOG_FPI:
		return "FPI";
	case XLOG_SWITCH:
		return "SWITCH";
	case XLOG_RESTORE_POINT:
		return "RESTORE_POINT";
	case XLOG_BACKUP_END:
		return "BACKUP_END";
	default:
		return NULL;
	}
}

/* Appends "rel R blk B" for each block: what an FPI record holds. */
static void describe_blocks(const wal_decoded *rec, char *buf, size_t len)
{
	size_t used = strlen(buf);
	for (int i = 0; i < rec->nblocks && used < len; i++) {
		const wal_decoded_block *b = &rec->blocks[i];
		snprintf(buf + used, len - used, "%srel %u blk %u%s", used ? "; " : "", b->rel,
		         b->blkno, (b->flags & WAL_BLK_HAS_IMAGE) ? " FPW" : "");
		used += strlen(buf + used);
	}
}

static void xlog_describe(const wal_decoded *rec, char *buf, size_t len)
{
	wal_checkpoint_rec ck;
	buf[0] = '\0';
	if (xlog_is_checkpoint(rec->hdr.info)) {
		if (!xlog_checkpoint_data(rec, &ck)) {
			snprintf(buf, len, "malformed checkpoint (%u bytes of main data)",
			         rec->main_len);
			return;
		}
		snprintf(buf, len, "redo " WAL_LSN_FMT ", next relid %llu, %s",
		         WAL_LSN_ARGS(ck.redo), (unsigned long long)ck.next_relid,
		         rec->hdr.info == XLOG_CHECKPOINT_SHUTDOWN ? "shutdown" : "online");
	} else if (rec->hdr.info == XLOG_FPI) {
		describe_blocks(rec, buf, len);
	} else if (rec->hdr.info == XLOG_RESTORE_POINT &&
	           rec->main_len == sizeof(wal_restore_point_rec)) {
		wal_restore_point_rec rp;
		memcpy(&rp, rec->main_data, sizeof(rp));
		rp.name[sizeof(rp.name) - 1] = '\0';
		snprintf(buf, len, "name \"%s\"", rp.name);
	} else if (rec->hdr.info == XLOG_BACKUP_END && rec->main_len == sizeof(wr_lsn)) {
		wr_lsn start;
		memcpy(&start, rec->main_data, sizeof(start));
		snprintf(buf, len, "backup started at " WAL_LSN_FMT, WAL_LSN_ARGS(start));
	}
}

static const wal_rmgr xlog_rmgr = {
    .name = "XLOG",
    .redo = xlog_redo,
    .describe = xlog_describe,
    .info_name = xlog_info_name,
};

/* ---------------------------------------------------------------- RM_TEST */

/*
 * A resource manager for the test suites: "set bytes" writes
 * {uint16 offset, uint16 len, bytes} (the main data) into block 0's page.
 * A new page is initialised first, so that it verifies when read, with
 * everything after the header as special space: a page with no hole between
 * lower and upper, so that a full-page image keeps every byte set.
 */
#define TEST_SET_BYTES 0x10

typedef struct test_set {
	uint16_t off, len;
	const char *bytes;
} test_set;

static bool test_parse(const wal_decoded *rec, test_set *t)
{
	if (rec->hdr.info != TEST_SET_BYTES || rec->main_len < 4)
		return false;
	memcpy(&t->off, rec->main_data, 2);
	memcpy(&t->len, rec->main_data + 2, 2);
	t->bytes = rec->main_data + 4;
	return (uint32_t)t->len + 4 <= rec->main_len && t->off >= WR_PAGE_HEADER_SIZE &&
	       (uint32_t)t->off + t->len <= WR_PAGE_SIZE;
}

static void test_redo(const wal_decoded *rec)
{
	test_set t;
	void *page;
	int action;
	if (!test_parse(rec, &t)) {
		redo_fail(wr_error(WALRUS_ECORRUPT, "malformed TEST record at " WAL_LSN_FMT,
		                   WAL_LSN_ARGS(rec->lsn)));
		return;
	}
	if (wal_redo_get_block(rec, 0, &page, &action) != 0)
		return;
	bool apply = action == REDO_NEEDED;
	if (apply) {
		if (page_is_new(page))
			page_init(page, WR_PAGE_SIZE - WR_PAGE_HEADER_SIZE, 0);
		memcpy((char *)page + t.off, t.bytes, t.len);
	}
	wal_redo_release_block(rec, 0, page, apply);
}

static void test_describe(const wal_decoded *rec, char *buf, size_t len)
{
	test_set t;
	if (!test_parse(rec, &t)) {
		snprintf(buf, len, "malformed");
		return;
	}
	const wal_decoded_block *b = redo_find_block(rec, 0);
	snprintf(buf, len, "set %u bytes at offset %u of rel %u blk %u%s", t.len, t.off,
	         b ? b->rel : 0, b ? b->blkno : 0,
	         b && (b->flags & WAL_BLK_HAS_IMAGE) ? " FPW" : "");
}

static const char *test_info_name(uint8_t info)
{
	return info == TEST_SET_BYTES ? "SET_BYTES" : NULL;
}

static const wal_rmgr test_rmgr = {
    .name = "TEST",
    .redo = test_redo,
    .describe = test_describe,
    .info_name = test_info_name,
};

void wal_register_builtin_rmgrs(void)
{
	rmgr_builtins_done = true;
	wal_rmgr_register(RM_XLOG, &xlog_rmgr);
	wal_rmgr_register(RM_TEST, &test_rmgr);
}

/* ---------------------------------------------------------------- recovery */

typedef struct recovery {
	const char *datadir;
	char waldir[4096];
	wal_control c;
	wal_reader *r;
	wr_lsn ckpt_end; /* the WAL must reach this far: the checkpoint was durable */
	wal_recovery_result *res;
	wal_target t;                /* archive recovery: where to stop */
	const wal_standby_hooks *sb; /* a standby: replay goes on as WAL arrives */
	const wr_options *o;
} recovery;

static int bad_checkpoint(const recovery *rv, const char *why)
{
	return wr_error(WALRUS_ECORRUPT,
	                "could not locate a valid checkpoint record at LSN " WAL_LSN_FMT ": %s",
	                WAL_LSN_ARGS(rv->c.checkpoint_lsn), why);
}

/* Reads the checkpoint record the control file names and checks it against the file. */
static int read_checkpoint(recovery *rv)
{
	wal_decoded *rec;
	wal_checkpoint_rec ck;
	char why[1024];

	int rc = wal_read_record(rv->r, rv->c.checkpoint_lsn, &rec);
	if (rc == WALRUS_EVERSION)
		return rc; /* a newer walrus wrote it: not damage */
	if (rc != 0) {
		wr_snprintf(why, sizeof(why), "%s", walrus_errmsg());
		return bad_checkpoint(rv, why);
	}
	if (rec->hdr.rmid != RM_XLOG || !xlog_is_checkpoint(rec->hdr.info))
		return bad_checkpoint(rv, "the record there is not a checkpoint");
	if (!xlog_checkpoint_data(rec, &ck))
		return bad_checkpoint(rv, "its main data has the wrong size");
	if (ck.redo != rv->c.redo_lsn || ck.redo > rv->c.checkpoint_lsn) {
		wr_snprintf(why, sizeof(why),
		            "its redo point " WAL_LSN_FMT
		            " differs from the control file's " WAL_LSN_FMT,
		            WAL_LSN_ARGS(ck.redo), WAL_LSN_ARGS(rv->c.redo_lsn));
		return bad_checkpoint(rv, why);
	}
	rv->ckpt_end = rec->end;
	rv->res->next_relid = ck.next_relid;
	rv->res->last_redo = ck.redo;
	return 0;
}

/*
 * A record this walrus cannot replay passed its CRC: a newer walrus wrote
 * it.  Replay stops there, before any of it is applied (wal.h, "WAL formats").
 */
static int unknown_record(const wal_decoded *rec, const wal_rmgr *rm)
{
	char what[64];
	if (rm == NULL)
		snprintf(what, sizeof(what), "resource manager id %u", rec->hdr.rmid);
	else
		snprintf(what, sizeof(what), "%s record type 0x%02X", rm->name, rec->hdr.info);
	return wr_error(WALRUS_EVERSION,
	                "record at " WAL_LSN_FMT " has %s, which walrus %s does not know: a newer "
	                "walrus wrote it (this one writes WAL format %u)",
	                WAL_LSN_ARGS(rec->lsn), what, WR_WALRUS_VERSION, WAL_FORMAT);
}

/* Replays one record; checkpoint records also carry the state recovery reports. */
static int replay(recovery *rv, const wal_decoded *rec)
{
	const wal_rmgr *rm = wal_rmgr_get(rec->hdr.rmid);
	if (rm == NULL || rm->redo == NULL)
		return unknown_record(rec, NULL);
	if (rm->info_name != NULL && rm->info_name(rec->hdr.info) == NULL)
		return unknown_record(rec, rm);
	redo_err = 0;
	rm->redo(rec);
	if (redo_err != 0)
		return wr_error(redo_err, "redo of record at " WAL_LSN_FMT " (%s) failed: %s",
		                WAL_LSN_ARGS(rec->lsn), rm->name, redo_errmsg);
	wal_checkpoint_rec ck;
	if (rec->hdr.rmid == RM_XLOG && xlog_is_checkpoint(rec->hdr.info) &&
	    xlog_checkpoint_data(rec, &ck)) {
		rv->res->next_relid = ck.next_relid;
		rv->res->last_redo = ck.redo;
	}
	rv->res->records++;
	rv->res->last_lsn = rec->lsn;
	rv->res->end = wal_record_next_end(rec, rec->end, rv->c.wal_seg_size);
	return 0;
}

/* ---------------------------------------------------------------- the end of WAL */

/* The segment file names in DIR/wal at or after @from, as start LSNs (sorted not needed). */
static int list_segments(const recovery *rv, wr_lsn from, wr_lsn **out, size_t *n)
{
	DIR *d = opendir(rv->waldir);
	if (d == NULL)
		return wr_error(wr_errno_code(errno), "could not open directory \"%s\": %m",
		                rv->waldir);
	size_t cap = 0;
	struct dirent *e;
	*out = NULL;
	*n = 0;
	while ((e = readdir(d)) != NULL) {
		wr_lsn start;
		if (!wal_segment_parse_name(e->d_name, rv->c.wal_seg_size, &start) || start < from)
			continue;
		if (wr_grow(out, &cap, *n + 1, sizeof(**out), 16) != WALRUS_OK) {
			closedir(d);
			return wr_error(WALRUS_ENOMEM, "out of memory");
		}
		(*out)[(*n)++] = start;
	}
	closedir(d);
	return 0;
}

/* What a segment file past the end of WAL holds. */
enum seg_kind {
	SEG_UNUSED,  /* zeros, or old WAL of a recycled segment */
	SEG_WRITTEN, /* WAL written for its own place in this system's stream */
	SEG_EMPTY,   /* 0 bytes: truncated while the instance was stopped */
};

/*
 * Whether the segment at @start holds WAL written for its own place in this
 * system's stream: a preallocated segment is zero, a recycled one carries
 * its old page address.  Also checks its size: a segment file of another
 * size is never left by a crash (they are created whole, then renamed);
 * an empty one can only have been truncated by someone else.
 */
static int probe_segment(const recovery *rv, wr_lsn start, enum seg_kind *kind)
{
	char path[4096];
	wal_long_page_header h;
	fdc_file f;
	off_t size;

	wal_segment_path(rv->waldir, rv->c.wal_seg_size, start, path, sizeof(path));
	int rc = fdc_open(path, O_RDONLY, 0, &f);
	if (rc != 0)
		return rc;
	rc = fdc_size(f, &size);
	ssize_t got = rc == 0 ? fdc_pread(f, &h, sizeof(h), 0) : 0;
	fdc_close(f);
	if (rc != 0 || got < 0)
		return rc != 0 ? rc : (int)got;
	*kind = SEG_EMPTY;
	if (size == 0)
		return 0;
	if ((uint64_t)size != rv->c.wal_seg_size)
		return wr_error(WALRUS_ECORRUPT,
		                "WAL segment \"%s\" has size %lld, expected %llu bytes", path,
		                (long long)size, (unsigned long long)rv->c.wal_seg_size);
	/* Any format: WAL this walrus cannot read is still this system's WAL. */
	bool written = got == (ssize_t)sizeof(h) && wal_magic_format(h.std.magic) != 0 &&
	               (h.std.info & WAL_PAGE_LONG) && h.std.pageaddr == start &&
	               h.sysid == rv->c.sysid;
	*kind = written ? SEG_WRITTEN : SEG_UNUSED;
	return 0;
}

static bool segment_listed(const wr_lsn *segs, size_t n, wr_lsn start)
{
	for (size_t i = 0; i < n; i++)
		if (segs[i] == start)
			return true;
	return false;
}

/* Whether the segment at @start holds no WAL at all: missing, or empty. */
static bool segment_holds_nothing(const wr_lsn *segs, const enum seg_kind *kinds, size_t n,
                                  wr_lsn start)
{
	for (size_t i = 0; i < n; i++)
		if (segs[i] == start)
			return kinds[i] == SEG_EMPTY;
	return true;
}

/*
 * An empty segment at or past the end of WAL held no WAL recovery needs
 * (none of it was read, and no later segment holds any): most likely one
 * made ahead of use and truncated while the instance was stopped.  It goes,
 * with a warning; the WAL writer makes a new one when the stream gets there.
 */
static int remove_empty_segment(const recovery *rv, wr_lsn start, wr_lsn end)
{
	char path[4096];
	wal_segment_path(rv->waldir, rv->c.wal_seg_size, start, path, sizeof(path));
	wr_log(WR_WARNING,
	       "WAL segment \"%s\" is empty (0 bytes) but lies past the end of WAL at " WAL_LSN_FMT
	       ": removing it (a new one is made when the WAL reaches it)",
	       path, WAL_LSN_ARGS(end));
	int rc = fdc_unlink(path);
	if (rc != 0)
		return rc;
	/* Rule 5 holds for directories too: a failed fsync is never retried. */
	if (fdc_fsync_parent(path) != 0)
		wr_panic("could not fsync the WAL directory after removing \"%s\": %s", path,
		         walrus_errmsg());
	return 0;
}

/*
 * At the end of WAL: a crash leaves a torn or zero tail, but never a missing
 * segment file in the middle (segments are created durably before they are
 * written), nor one of the wrong size.  If a later segment holds this
 * system's WAL and a segment between is missing or empty, WAL was lost:
 * corruption.  Otherwise empty segments past the end are removed.
 */
static int check_after_end(const recovery *rv, wr_lsn end)
{
	uint64_t seg = rv->c.wal_seg_size;
	wr_lsn end_seg = end - end % seg;
	wr_lsn *segs = NULL, later = 0;
	enum seg_kind *kinds = NULL;
	size_t n = 0;
	int rc = list_segments(rv, end_seg, &segs, &n);
	if (rc == 0 && n > 0 && (kinds = calloc(n, sizeof(*kinds))) == NULL)
		rc = wr_error(WALRUS_ENOMEM, "out of memory");
	for (size_t i = 0; rc == 0 && i < n; i++) {
		rc = probe_segment(rv, segs[i], &kinds[i]);
		if (rc == 0 && kinds[i] == SEG_WRITTEN && segs[i] > end_seg &&
		    (later == 0 || segs[i] < later))
			later = segs[i];
	}
	for (wr_lsn s = end_seg + seg; rc == 0 && later != 0 && s < later; s += seg) {
		if (!segment_holds_nothing(segs, kinds, n, s))
			continue;
		char missing[4096], found[4096];
		wal_segment_path(rv->waldir, seg, s, missing, sizeof(missing));
		wal_segment_path(rv->waldir, seg, later, found, sizeof(found));
		rc = wr_error(WALRUS_ECORRUPT,
		              "WAL segment \"%s\" is %s, but the later segment \"%s\" holds WAL "
		              "of this system (WAL ends at " WAL_LSN_FMT ")",
		              missing, segment_listed(segs, n, s) ? "empty (0 bytes)" : "missing",
		              found, WAL_LSN_ARGS(end));
	}
	for (size_t i = 0; rc == 0 && i < n; i++)
		if (kinds[i] == SEG_EMPTY)
			rc = remove_empty_segment(rv, segs[i], end);
	free(kinds);
	free(segs);
	return rc;
}

/*
 * The WAL page holding @end, up to @end (zeros after), so that insertion can
 * continue that page.  A page not yet on disk (its segment not created, the
 * stream ending at a page's header) reads as zeros.
 */
static int read_last_page(const recovery *rv, wr_lsn end, char *page)
{
	uint64_t seg = rv->c.wal_seg_size;
	wr_lsn page_start = end - end % WAL_PAGE_SIZE;
	uint32_t used = (uint32_t)(end - page_start);
	char path[4096];
	fdc_file f;

	memset(page, 0, WAL_PAGE_SIZE);
	if (used == 0)
		return 0;
	wal_segment_path(rv->waldir, seg, page_start, path, sizeof(path));
	int rc = fdc_open(path, O_RDONLY, 0, &f);
	bool header_only = used <= wal_page_header_size(page_start, seg);
	if (rc != 0 && errno == ENOENT && header_only) {
		wr_error_clear();
		return 0;
	}
	if (rc != 0)
		return rc;
	ssize_t got = fdc_pread(f, page, used, (off_t)(page_start % seg));
	int err = errno;
	fdc_close(f);
	if (got < 0) {
		errno = err;
		return (int)got;
	}
	if ((uint32_t)got < used && !header_only)
		return wr_error(WALRUS_ECORRUPT,
		                "could not read the last WAL page at " WAL_LSN_FMT
		                " from \"%s\": read only %zd of %u bytes",
		                WAL_LSN_ARGS(page_start), path, got, used);
	return 0;
}

/* The reader said "end of WAL": fine after the checkpoint record, corruption before it. */
static int end_of_wal(recovery *rv, wr_lsn at)
{
	char why[1024];
	wr_snprintf(why, sizeof(why), "%s", walrus_errmsg());
	if (rv->res->end < rv->ckpt_end)
		return wr_error(WALRUS_ECORRUPT,
		                "WAL ends at " WAL_LSN_FMT " before the end of the checkpoint "
		                "record at " WAL_LSN_FMT ": %s",
		                WAL_LSN_ARGS(at), WAL_LSN_ARGS(rv->c.checkpoint_lsn), why);
	wr_log(WR_LOG, "end of WAL at " WAL_LSN_FMT ": %s", WAL_LSN_ARGS(rv->res->end), why);
	wr_error_clear();
	int rc = check_after_end(rv, rv->res->end);
	if (rc == 0)
		rc = read_last_page(rv, rv->res->end, rv->res->last_page);
	return rc;
}

/* ---------------------------------------------------------------- archive recovery */

/* The WAL segment file that holds @lsn, for messages. */
static void segment_named(const recovery *rv, wr_lsn lsn, char *buf, size_t len)
{
	wal_segment_path(rv->waldir, rv->c.wal_seg_size, lsn - lsn % rv->c.wal_seg_size, buf, len);
}

/* Replay stopped at the target: the new timeline starts at the end of what was replayed. */
static int target_reached(recovery *rv)
{
	wr_lsn cut = rv->res->end;
	char desc[160], why[1024];
	wal_target_describe(&rv->t, desc, sizeof(desc));
	if (cut < rv->t.backup_end)
		return wr_error(WALRUS_EINVAL,
		                "the recovery target (%s) lies before the end of the base backup "
		                "at " WAL_LSN_FMT ": the copy is consistent only from there",
		                desc, WAL_LSN_ARGS(rv->t.backup_end));
	wal_history parent;
	char hist[4096], name[32];
	uint32_t tli = rv->t.follow_tli != 0 ? rv->t.follow_tli : wal_control_timeline(&rv->c);
	wal_history_name(tli, name, sizeof(name));
	wr_snprintf(hist, sizeof(hist), "%s/%s", rv->waldir, name);
	int rc = wal_history_read(hist, tli, &parent);
	/* Stopped before the followed timeline branched: the new one branches
	 * off the ancestor that holds the cut. */
	wal_history_at(&parent, cut);
	if (rc == 0)
		rc = wal_target_cut(rv->datadir, &rv->t, cut, rv->c.wal_seg_size);
	wr_snprintf(why, sizeof(why), "recovery to %s", desc);
	if (rc == 0)
		rc = wal_history_write(rv->waldir, &parent, rv->t.new_tli, cut, why);
	if (rc == 0)
		rc = wal_archive_mark_done_before(rv->waldir, rv->c.wal_seg_size,
		                                  cut - cut % rv->c.wal_seg_size);
	if (rc == 0)
		rc = check_after_end(rv, cut);
	if (rc == 0)
		rc = read_last_page(rv, cut, rv->res->last_page);
	if (rc == 0) {
		wr_log(WR_LOG,
		       "archive recovery stopped at " WAL_LSN_FMT " (%s): timeline %u begins",
		       WAL_LSN_ARGS(cut), desc, rv->t.new_tli);
		rv->res->new_timeline = rv->t.new_tli;
		rv->res->archive_done = true;
	}
	return rc;
}

/* The WAL ended (the reader said why) during archive recovery. */
static int target_end_of_wal(recovery *rv, wr_lsn at)
{
	char why[1024], seg[4096];
	wr_snprintf(why, sizeof(why), "%s", walrus_errmsg());
	segment_named(rv, at, seg, sizeof(seg));
	if (rv->res->end < rv->t.backup_end)
		return wr_error(WALRUS_ENOTFOUND,
		                "the WAL ends at " WAL_LSN_FMT " in \"%s\", before the end of the "
		                "base backup at " WAL_LSN_FMT ": %s",
		                WAL_LSN_ARGS(at), seg, WAL_LSN_ARGS(rv->t.backup_end), why);
	if (!wal_target_reached_at_end(&rv->t, rv->res->end))
		return wal_target_missed(&rv->t, rv->c.redo_lsn, at, why);
	wr_error_clear();
	return target_reached(rv);
}

static int redo_loop(recovery *rv)
{
	wal_decoded *rec;
	wr_lsn next = rv->c.redo_lsn;
	uint64_t t0 = wr_now_ns();

	wr_log(WR_LOG, "redo starts at " WAL_LSN_FMT, WAL_LSN_ARGS(next));
	for (;;) {
		int rc = wal_read_record(rv->r, next, &rec);
		if (rc == WALRUS_ENOTFOUND && rv->t.active)
			return target_end_of_wal(rv, rv->res->end ? rv->res->end : rv->c.redo_lsn);
		if (rc == 0 && rv->t.active && wal_target_stop_before(&rv->t, rec))
			return target_reached(rv);
		if (rc == WALRUS_ENOTFOUND) {
			rc = end_of_wal(rv, rv->res->end ? rv->res->end : rv->c.redo_lsn);
			if (rc == 0)
				wr_log(WR_LOG,
				       "redo done at " WAL_LSN_FMT " (%llu records, %.3f s)",
				       WAL_LSN_ARGS(rv->res->last_lsn),
				       (unsigned long long)rv->res->records,
				       (double)(wr_now_ns() - t0) / 1e9);
			return rc;
		}
		if (rc == 0)
			rc = replay(rv, rec);
		if (rc != 0)
			return rc;
		if (rv->t.active && wal_target_stop_after(&rv->t, rec))
			return target_reached(rv);
		if (rv->t.active)
			wal_target_note(&rv->t, rec);
		next = 0;
	}
}

/* ---------------------------------------------------------------- a standby */

/* Promotion: the WAL after the last record replayed (a record cut short, say)
 * is cut off, and the new timeline begins there. */
static int standby_promoted(recovery *rv)
{
	wr_lsn cut = rv->res->end;
	/* The timeline followed now: the WAL receiver may have moved to a newer one. */
	uint32_t tli =
	    wal_follow_timeline() != 0 ? wal_follow_timeline() : wal_control_timeline(&rv->c);
	uint32_t seen = wal_history_highest(rv->waldir, tli);
	seen = wal_history_highest(rv->sb->archive, seen);
	seen = wal_history_highest(rv->o->archive_dir, seen);
	uint32_t child = seen + 1;
	wal_history parent;
	char hist[4096], name[32];
	int removed = 0;
	wal_history_name(tli, name, sizeof(name));
	wr_snprintf(hist, sizeof(hist), "%s/%s", rv->waldir, name);
	int rc = wal_history_read(hist, tli, &parent);
	wal_history_at(&parent, cut); /* promoted before reaching the followed branch */
	if (rc == 0)
		rc = wal_cut_after(rv->waldir, cut, rv->c.wal_seg_size, &removed);
	/* The old timeline's segments stay as they are: those not archived
	 * (.done) yet, the new primary archives under that timeline. */
	if (rc == 0)
		rc = wal_history_write(rv->waldir, &parent, child, cut, "promotion of a standby");
	if (rc == 0)
		rc = read_last_page(rv, cut, rv->res->last_page);
	if (rc == 0) {
		wr_log(WR_LOG,
		       "standby promoted at " WAL_LSN_FMT " (%llu records replayed): timeline %u "
		       "begins (after timeline %u%s)",
		       WAL_LSN_ARGS(cut), (unsigned long long)rv->res->records, child, tli,
		       child > tli + 1 ? "; the timelines between are in use elsewhere" : "");
		rv->res->new_timeline = child;
	}
	return rc;
}

/* The local WAL ended (the reader said why): from here on, only WAL the
 * standby's sources made durable is read. */
static wr_lsn standby_local_end(recovery *rv, wr_lsn at)
{
	wr_lsn end = rv->res->end ? rv->res->end : at;
	wr_log(WR_LOG, "end of local WAL at " WAL_LSN_FMT ": %s", WAL_LSN_ARGS(end),
	       walrus_errmsg());
	wr_error_clear();
	rv->sb->local_end(end);
	wal_reader_reopen(rv->r); /* its pages were read with no limit */
	wal_reader_set_limit(rv->r, end);
	return end;
}

static int standby_loop(recovery *rv)
{
	wal_decoded *rec;
	wr_lsn next = rv->c.redo_lsn, limit = 0;
	wr_log(WR_LOG, "standby: redo starts at " WAL_LSN_FMT, WAL_LSN_ARGS(next));
	for (;;) {
		int rc = wal_read_record(rv->r, next, &rec);
		if (rc == WALRUS_ENOTFOUND && limit == 0) {
			limit = standby_local_end(rv, next ? next : rv->c.redo_lsn);
			continue;
		}
		if (rc == WAL_NOT_YET) {
			bool promote = false, replaced = false;
			wr_lsn more = rv->sb->wait(limit, &promote, &replaced);
			if (promote)
				return standby_promoted(rv);
			limit = more;
			if (replaced)
				wal_reader_reopen(rv->r);
			wal_reader_set_limit(rv->r, limit);
			continue;
		}
		if (rc == WALRUS_ENOTFOUND) {
			char why[1024];
			wr_snprintf(why, sizeof(why), "%s", walrus_errmsg());
			return wr_error(WALRUS_ECORRUPT,
			                "invalid WAL received (durable up to " WAL_LSN_FMT "): %s",
			                WAL_LSN_ARGS(limit), why);
		}
		if (rc == 0)
			rc = replay(rv, rec);
		if (rc != 0)
			return rc;
		wal_note_replayed(rv->res->end, wal_record_time_ms(&rec->hdr));
		rv->sb->replayed(rec, rv->res->end);
		next = 0;
	}
}

static int recover(recovery *rv)
{
	int rc = wal_control_read(rv->datadir, &rv->c);
	if (rc != 0)
		return rc;
	wr_snprintf(rv->waldir, sizeof(rv->waldir), "%s/wal", rv->datadir);
	rc = wal_target_read(rv->datadir, &rv->t);
	if (rc != 0)
		return rc;
	/* An earlier run finished this recovery and checkpointed past its cut:
	 * only the file's removal was missing. */
	if (rv->t.active && rv->t.cut != 0 && wal_control_timeline(&rv->c) == rv->t.new_tli &&
	    rv->c.checkpoint_lsn >= rv->t.cut) {
		rv->t.active = false;
		rv->res->archive_done = true;
	}
	/* A base backup opened as it is would replay only the WAL it holds, and
	 * perhaps stop before it is consistent without noticing. */
	if (rv->sb != NULL && rv->t.active)
		return wr_error(WALRUS_EINVAL,
		                "\"%s\" holds both %s (archive recovery) and a standby's settings: "
		                "remove one",
		                rv->datadir, WAL_RECOVERY_FILE);
	if (rv->sb == NULL && !rv->t.active && rv->c.backup_end_lsn != 0)
		return wr_error(WALRUS_EINVAL,
		                "\"%s\" is a base backup (consistent from " WAL_LSN_FMT
		                "): restore it with `walrus restore --from %s NEWDIR`",
		                rv->datadir, WAL_LSN_ARGS(rv->c.backup_end_lsn), rv->datadir);
	if (rv->t.active) {
		char desc[160];
		wal_target_describe(&rv->t, desc, sizeof(desc));
		wr_log(WR_LOG,
		       "archive recovery to %s (the base backup is consistent from " WAL_LSN_FMT
		       ")",
		       desc, WAL_LSN_ARGS(rv->t.backup_end));
	}
	rc = wal_reader_open(rv->waldir, rv->c.wal_seg_size, rv->c.sysid, &rv->r);
	if (rc != 0)
		return rc;
	rc = read_checkpoint(rv);
	if (rc == 0)
		rc = rv->sb != NULL ? standby_loop(rv) : redo_loop(rv);
	wal_reader_close(rv->r);
	if (rc == 0)
		redo_pages->finish();
	return rc;
}

int wal_recover(const char *datadir, const wr_options *o, wal_recovery_result *res)
{
	return wal_recover_standby(datadir, o, NULL, res);
}

int wal_recover_standby(const char *datadir, const wr_options *o, const wal_standby_hooks *sb,
                        wal_recovery_result *res)
{
	recovery rv = {.datadir = datadir, .res = res, .sb = sb, .o = o};

	memset(res, 0, sizeof(*res));
	ntouched = 0;
	redo_err = 0;
	int rc = recover(&rv);
	/* The control file's sizes are the instance's: the options cannot change them. */
	if (rc == 0 && (uint64_t)o->wal_segment_size != rv.c.wal_seg_size)
		wr_log(WR_LOG,
		       "wal_segment_size is %llu bytes as set when the instance was created, not "
		       "%lld",
		       (unsigned long long)rv.c.wal_seg_size, (long long)o->wal_segment_size);
	return rc;
}
