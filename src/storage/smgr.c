/*
 * smgr.c - relations as segment files, and the client side of sync requests.
 *
 * A relation is stored as DIR/base/<rel>, DIR/base/<rel>.1, ... so that no
 * file grows beyond data_segment_size.  Every segment is a handle of the fd
 * cache, opened on first use; this module turns block numbers into
 * (segment, offset), keeps checksums on every page it writes, refuses to
 * return a page that fails them, and tells the checkpointer which files it
 * must fsync (design rule 4): the first write through a segment's fd in a
 * checkpoint cycle hands that fd over, and so does closing a written fd.
 *
 * Interface: see storage.h.
 *
 * Notes:
 * - A relation's size is the sum of its segments: every segment but the last
 *   is full, so the size is found by walking them until one is not full.
 *   Extending into a new segment first makes the earlier ones full.
 * - The cache of relations is per process and nothing tells it that another
 *   process truncated or removed a relation; the layers above must (as
 *   PostgreSQL's shared invalidation does).
 * - Every failed fsync, fdatasync or sync_file_range ends in
 *   data_sync_failed(), which PANICs.
 * - Threads: the tables here are the process's, shared by its threads under
 *   the fd cache's lock (fdc_lock), which the before-close hook is called
 *   with.  Page reads and writes let it go for the system call.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/storage.h"
#include "testsupport/testsupport.h"

#define SMGR_BUCKETS 256

struct smgr_rel {
	wr_relid relid;
	fdc_file *segs; /* by segment number; FDC_INVALID while not open here */
	uint32_t nsegs; /* length of segs */
	smgr_rel *next; /* hash chain */
};

/* What a fd cache handle is, for the before-close hook. */
typedef struct smgr_handle_owner {
	bool used;
	wr_relid rel;
	uint32_t seg;
} smgr_handle_owner;

static char *smgr_datadir;
static char *smgr_basedir;
static int64_t smgr_segsize;
static uint32_t smgr_bps; /* blocks per segment */
static smgr_rel *smgr_buckets[SMGR_BUCKETS];
static smgr_handle_owner *smgr_owners;
static int smgr_nowners;

static smgr_sync_hook_fn smgr_reg_hook;
static smgr_forget_hook_fn smgr_forget_hook;
static smgr_cycle_fn smgr_cycle_hook;

/* The process's storage lock (fdcache.h) until the enclosing block ends. */
#define SMGR_LOCKED() FDC_LOCKED()

/* ---------------------------------------------------------------- PANIC */

/*
 * Why a failed fsync is never retried (PostgreSQL's "fsyncgate", 2018): when
 * write-back of a dirty page fails, Linux reports the error to the next fsync
 * and may then mark the page clean (or drop it) and clear the error.  A retry
 * of the fsync then succeeds, although the data never reached the disk, and
 * the checkpoint would claim durability it does not have.  The only copy we
 * can trust is in the WAL, so the instance must stop and replay it from the
 * last completed checkpoint.
 */
_Noreturn void data_sync_failed(const char *what, const char *path, int err)
{
	char eb[128];
	wr_panic("could not %s file \"%s\": %s", what, path, strerror_r(err, eb, sizeof(eb)));
}

/* ---------------------------------------------------------------- paths */

void smgr_segment_path(wr_relid rel, uint32_t seg, char *buf, size_t len)
{
	const char *dir = smgr_datadir ? smgr_datadir : ".";
	if (seg == 0)
		wr_snprintf(buf, len, "%s/base/%u", dir, rel);
	else
		wr_snprintf(buf, len, "%s/base/%u.%u", dir, rel, seg);
}

uint32_t smgr_blocks_per_segment(void)
{
	return smgr_bps;
}

/* Makes the directory entry of a file created or removed in DIR/base durable. */
static void smgr_sync_basedir(void)
{
	if (fdc_fsync_path(smgr_basedir) != 0)
		data_sync_failed("fsync", smgr_basedir, errno);
}

/* How segments are opened: O_DIRECT while data_direct_io is on here (direct.c). */
static int smgr_open_flags(void)
{
	return O_RDWR | (smgr_direct() ? O_DIRECT : 0);
}

/* True when @rc is the fd cache's report of a file that does not exist. */
static bool smgr_missing(int rc)
{
	return rc == WALRUS_ENOENT && errno == ENOENT;
}

/* ---------------------------------------------------------------- handle owners */

static int smgr_owner_set(fdc_file f, wr_relid rel, uint32_t seg)
{
	if (f >= smgr_nowners) {
		int n = WR_MAX(f + 1, smgr_nowners * 2);
		n = WR_MAX(n, 64);
		smgr_handle_owner *o = realloc(smgr_owners, sizeof(*o) * (size_t)n);
		if (o == NULL)
			return wr_error(WALRUS_ENOMEM, "out of memory");
		memset(o + smgr_nowners, 0, sizeof(*o) * (size_t)(n - smgr_nowners));
		smgr_owners = o;
		smgr_nowners = n;
	}
	smgr_owners[f] = (smgr_handle_owner){.used = true, .rel = rel, .seg = seg};
	return 0;
}

/* True if handle @f is still the fd cache's handle of segment @seg of @rel. */
static bool smgr_handle_is(fdc_file f, wr_relid rel, uint32_t seg)
{
	char path[4096];
	const char *have = fdc_path(f);
	smgr_segment_path(rel, seg, path, sizeof(path));
	return have != NULL && strcmp(have, path) == 0;
}

/*
 * The segment behind handle @f, or NULL.  The path is compared too: after
 * fdc_reset (crash restart) handle numbers are reused for other files.
 */
static const smgr_handle_owner *smgr_owner_get(fdc_file f)
{
	if (f < 0 || f >= smgr_nowners || !smgr_owners[f].used)
		return NULL;
	if (!smgr_handle_is(f, smgr_owners[f].rel, smgr_owners[f].seg))
		return NULL;
	return &smgr_owners[f];
}

/* ---------------------------------------------------------------- sync requests */

/* Hands @fd (of segment @seg, handle @f) to the checkpointer unless it already has one this cycle.
 */
static int smgr_hand_off(wr_relid rel, uint32_t seg, fdc_file f, int fd)
{
	uint64_t cycle = smgr_cycle_hook ? smgr_cycle_hook() : 0;
	/* The tag stores cycle + 1 so that 0 means "never handed off". */
	if (fdc_get_tag(f) == cycle + 1)
		return 0;
	smgr_sync_req req = {.rel = rel, .seg = seg, .open_seq = fdc_open_seq(f), .cycle = cycle};
	int rc = smgr_reg_hook(&req, fd);
	if (rc != 0)
		return rc;
	fdc_set_tag(f, cycle + 1);
	return 0;
}

/*
 * After a write through @f: the checkpointer must hold an fd opened no later
 * than the write.  Once it does, every write through @f so far is covered
 * (its fsync sees their write-back errors), so the handle is no longer
 * dirty.  Without a sync hook, or if the hand-off fails, it stays dirty and
 * the before-close hook deals with it.
 */
static int smgr_register_write(wr_relid rel, uint32_t seg, fdc_file f)
{
	if (smgr_reg_hook == NULL)
		return 0;
	int fd;
	int rc = fdc_fd(f, &fd);
	if (rc == 0)
		rc = smgr_hand_off(rel, seg, f, fd);
	if (rc == 0)
		fdc_clear_dirty(f);
	return rc;
}

/*
 * The fd cache is about to close a written fd.  Its write-back errors must
 * still reach someone: the checkpointer, if it already holds an fd of the
 * file from this cycle (which sees every later error) or gets this one;
 * otherwise ourselves, by an fsync now.
 */
static int smgr_before_close(fdc_file f, int fd, const char *path)
{
	const smgr_handle_owner *o = smgr_owner_get(f);
	if (o == NULL)
		return 0; /* not a data file: its owner syncs it */
	if (smgr_reg_hook != NULL) {
		int rc = smgr_hand_off(o->rel, o->seg, f, fd);
		if (rc != 0)
			return rc;
	} else if (fdc_fsync(f) != 0) {
		data_sync_failed("fsync", path, errno);
	}
	fdc_clear_dirty(f);
	return 0;
}

void smgr_set_sync_hooks(smgr_sync_hook_fn reg, smgr_forget_hook_fn forget, smgr_cycle_fn cycle)
{
	SMGR_LOCKED();
	smgr_reg_hook = reg;
	smgr_forget_hook = forget;
	smgr_cycle_hook = cycle;
}

static void smgr_forget(wr_relid rel, uint32_t from_seg)
{
	if (smgr_forget_hook != NULL)
		smgr_forget_hook(rel, from_seg);
}

/* ---------------------------------------------------------------- init and shutdown */

static int smgr_ensure_basedir(void)
{
	fdc_file f;
	int rc = fdc_open(smgr_basedir, O_RDONLY | O_DIRECTORY, 0, &f);
	if (rc == 0)
		return fdc_close(f);
	if (errno != ENOENT)
		return rc;
	rc = fdc_mkdir(smgr_basedir, 0700);
	if (rc != 0)
		return rc;
	if (fdc_fsync_path(smgr_datadir) != 0)
		data_sync_failed("fsync", smgr_datadir, errno);
	return 0;
}

int smgr_init(const char *datadir, int64_t segment_size)
{
	SMGR_LOCKED();
	if (segment_size < WR_PAGE_SIZE || segment_size % WR_PAGE_SIZE != 0 ||
	    segment_size / WR_PAGE_SIZE > UINT32_MAX)
		return wr_error(
		    WALRUS_EINVAL,
		    "data_segment_size must be a positive multiple of %d bytes, not %lld",
		    WR_PAGE_SIZE, (long long)segment_size);
	if (smgr_datadir != NULL)
		smgr_shutdown();
	size_t len = strlen(datadir) + sizeof("/base");
	smgr_datadir = strdup(datadir);
	smgr_basedir = malloc(len);
	if (smgr_datadir == NULL || smgr_basedir == NULL) {
		smgr_shutdown();
		return wr_error(WALRUS_ENOMEM, "out of memory");
	}
	wr_snprintf(smgr_basedir, len, "%s/base", datadir);
	smgr_segsize = segment_size;
	smgr_bps = (uint32_t)(segment_size / WR_PAGE_SIZE);
	fdc_set_before_close(smgr_before_close);
	int rc = smgr_ensure_basedir();
	if (rc != 0)
		smgr_shutdown();
	return rc;
}

/* Closes segment @s of @r here (the file stays); a written fd goes through the hook. */
static int smgr_close_seg(smgr_rel *r, uint32_t s)
{
	fdc_file f = r->segs[s];
	if (f == FDC_INVALID)
		return 0;
	/* A handle forgotten by fdc_reset may belong to another file now: not ours to close. */
	if (smgr_handle_is(f, r->relid, s)) {
		int rc = fdc_close(f);
		if (rc != 0)
			return rc;
	}
	if (f < smgr_nowners && smgr_owners[f].rel == r->relid && smgr_owners[f].seg == s)
		smgr_owners[f].used = false;
	r->segs[s] = FDC_INVALID;
	return 0;
}

/* Closes segment @s of @r whose file is being removed: its dirty data needs no sync. */
static int smgr_drop_seg(smgr_rel *r, uint32_t s)
{
	if (s < r->nsegs && r->segs[s] != FDC_INVALID && smgr_handle_is(r->segs[s], r->relid, s))
		fdc_clear_dirty(r->segs[s]);
	return s < r->nsegs ? smgr_close_seg(r, s) : 0;
}

static void smgr_free_rel(smgr_rel *r)
{
	for (uint32_t s = 0; s < r->nsegs; s++)
		if (smgr_close_seg(r, s) != 0)
			wr_log(WR_WARNING, "%s", walrus_errmsg());
	free(r->segs);
	free(r);
}

static void smgr_unmap_all(void);

void smgr_shutdown(void)
{
	SMGR_LOCKED();
	smgr_unmap_all();
	for (int b = 0; b < SMGR_BUCKETS; b++) {
		while (smgr_buckets[b] != NULL) {
			smgr_rel *r = smgr_buckets[b];
			smgr_buckets[b] = r->next;
			smgr_free_rel(r);
		}
	}
	free(smgr_datadir);
	free(smgr_basedir);
	smgr_datadir = smgr_basedir = NULL;
}

/* ---------------------------------------------------------------- relation cache */

int smgr_open(wr_relid rel, smgr_rel **out)
{
	SMGR_LOCKED();
	if (smgr_datadir == NULL)
		return wr_error(WALRUS_EINVAL, "storage is not initialised (smgr_init)");
	smgr_rel **bucket = &smgr_buckets[rel % SMGR_BUCKETS];
	for (smgr_rel *r = *bucket; r != NULL; r = r->next) {
		if (r->relid == rel) {
			*out = r;
			return 0;
		}
	}
	smgr_rel *r = calloc(1, sizeof(*r));
	if (r == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory");
	r->relid = rel;
	r->next = *bucket;
	*bucket = r;
	*out = r;
	return 0;
}

static void smgr_forget_rel(smgr_rel *r)
{
	smgr_rel **p = &smgr_buckets[r->relid % SMGR_BUCKETS];
	while (*p != r)
		p = &(*p)->next;
	*p = r->next;
	smgr_free_rel(r);
}

/* ---------------------------------------------------------------- segments */

static int smgr_grow_segs(smgr_rel *r, uint32_t seg)
{
	if (seg < r->nsegs)
		return 0;
	uint32_t n = WR_MAX(seg + 1, r->nsegs * 2);
	fdc_file *s = realloc(r->segs, sizeof(*s) * n);
	if (s == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory");
	for (uint32_t i = r->nsegs; i < n; i++)
		s[i] = FDC_INVALID;
	r->segs = s;
	r->nsegs = n;
	return 0;
}

/* Creates segment file @path; false with errno = EEXIST if another process was first. */
static int smgr_create_file(const char *path, fdc_file *f)
{
	int rc = fdc_open(path, smgr_open_flags() | O_CREAT | O_EXCL, 0600, f);
	if (rc != 0)
		return rc;
	/* The file must survive a crash before any write to it is reported done. */
	smgr_sync_basedir();
	return 0;
}

/*
 * The handle of segment @seg, opened here if needed.  A missing file is an
 * error (errno ENOENT) unless @create.
 */
static int smgr_seg(smgr_rel *r, uint32_t seg, bool create, fdc_file *out)
{
	int rc = smgr_grow_segs(r, seg);
	if (rc != 0)
		return rc;
	/* The path check costs far less than the syscall, and catches handles lost to fdc_reset. */
	if (r->segs[seg] != FDC_INVALID && smgr_handle_is(r->segs[seg], r->relid, seg)) {
		*out = r->segs[seg];
		return 0;
	}
	r->segs[seg] = FDC_INVALID;
	char path[4096];
	smgr_segment_path(r->relid, seg, path, sizeof(path));
	fdc_file f;
	rc = fdc_open(path, smgr_open_flags(), 0600, &f);
	if (smgr_missing(rc) && create) {
		rc = smgr_create_file(path, &f);
		if (rc != 0 && errno == EEXIST)
			rc = fdc_open(path, smgr_open_flags(), 0600, &f);
	}
	if (rc != 0)
		return rc;
	rc = smgr_owner_set(f, r->relid, seg);
	if (rc != 0) {
		fdc_close(f);
		return rc;
	}
	r->segs[seg] = f;
	*out = f;
	return 0;
}

/* Blocks in segment @seg (open through @f), checked against the segment size. */
static int smgr_seg_blocks(fdc_file f, uint32_t *blocks)
{
	off_t size;
	int rc = fdc_size(f, &size);
	if (rc != 0)
		return rc;
	if (size > smgr_segsize)
		return wr_error(WALRUS_ECORRUPT,
		                "file \"%s\" is larger than the segment size (%lld > %lld bytes)",
		                fdc_path(f), (long long)size, (long long)smgr_segsize);
	*blocks = (uint32_t)(size / WR_PAGE_SIZE); /* a torn last block does not count */
	return 0;
}

/*
 * Walks the segments: @nblocks of the relation, and @nsegs, the number of
 * segment files in the chain (0 .. nsegs-1 exist).  A missing first segment
 * is an error: the relation does not exist.
 */
static int smgr_scan(smgr_rel *r, wr_blkno *nblocks, uint32_t *nsegs)
{
	uint64_t total = 0;
	uint32_t seg = 0;
	for (;; seg++) {
		fdc_file f;
		int rc = smgr_seg(r, seg, false, &f);
		if (smgr_missing(rc) && seg > 0) {
			wr_error_clear();
			break;
		}
		if (rc != 0)
			return rc;
		uint32_t blocks = 0;
		rc = smgr_seg_blocks(f, &blocks);
		if (rc != 0)
			return rc;
		total += blocks;
		if (blocks < smgr_bps) {
			seg++;
			break;
		}
	}
	if (total > WR_INVALID_BLKNO - 1)
		return wr_error(WALRUS_ECORRUPT, "relation %u has too many blocks", r->relid);
	*nblocks = (wr_blkno)total;
	*nsegs = seg;
	return 0;
}

int smgr_nblocks(smgr_rel *r, wr_blkno *out)
{
	SMGR_LOCKED();
	uint32_t nsegs;
	return smgr_scan(r, out, &nsegs);
}

/* ---------------------------------------------------------------- create, exists, unlink */

int smgr_create(wr_relid rel)
{
	SMGR_LOCKED();
	smgr_rel *r;
	int rc = smgr_open(rel, &r);
	if (rc == 0)
		rc = smgr_grow_segs(r, 0);
	if (rc != 0)
		return rc;
	char path[4096];
	smgr_segment_path(rel, 0, path, sizeof(path));
	if (r->segs[0] != FDC_INVALID && smgr_handle_is(r->segs[0], rel, 0))
		return wr_error(WALRUS_EINVAL, "relation %u already exists (file \"%s\")", rel,
		                path);
	fdc_file f;
	rc = fdc_open(path, smgr_open_flags() | O_CREAT | O_EXCL, 0600, &f);
	if (rc != 0 && errno == EEXIST)
		return wr_error(WALRUS_EINVAL, "relation %u already exists (file \"%s\")", rel,
		                path);
	if (rc != 0)
		return rc;
	rc = smgr_owner_set(f, rel, 0);
	if (rc != 0) {
		fdc_close(f);
		return rc;
	}
	r->segs[0] = f;
	if (fdc_fsync(f) != 0)
		data_sync_failed("fsync", path, errno);
	fdc_clear_dirty(f);
	smgr_sync_basedir();
	return 0;
}

bool smgr_exists(wr_relid rel)
{
	SMGR_LOCKED();
	smgr_rel *r;
	fdc_file f;
	if (smgr_open(rel, &r) != 0)
		return false;
	if (smgr_seg(r, 0, false, &f) == 0)
		return true;
	wr_error_clear();
	return false;
}

int smgr_unlink(wr_relid rel)
{
	SMGR_LOCKED();
	smgr_rel *r;
	wr_blkno nblocks;
	uint32_t nsegs;
	int rc = smgr_open(rel, &r);
	if (rc == 0)
		rc = smgr_scan(r, &nblocks, &nsegs);
	if (rc != 0)
		return rc;
	smgr_forget(rel, 0);
	/* Last segment first: a crash half-way leaves a shorter relation, not a hole. */
	for (uint32_t s = nsegs; s-- > 0;) {
		char path[4096];
		smgr_segment_path(rel, s, path, sizeof(path));
		rc = smgr_drop_seg(r, s);
		if (rc != 0)
			return rc;
		rc = fdc_unlink(path);
		if (rc != 0 && !smgr_missing(rc))
			return rc;
	}
	smgr_forget_rel(r);
	smgr_sync_basedir();
	return 0;
}

/* ---------------------------------------------------------------- block I/O */

/* A read that returned fewer bytes than a page (@page NULL: nothing to zero). */
static int smgr_short_read(wr_blkno b, const char *path, ssize_t got, void *page)
{
	if (page != NULL)
		memset(page, 0, WR_PAGE_SIZE);
	return wr_error(WALRUS_EIO,
	                "could not read block %u in file \"%s\": read only %zd of %d bytes", b,
	                path, got, WR_PAGE_SIZE);
}

static int smgr_corrupt(wr_blkno b, const char *path, void *page)
{
	wr_page_header h;
	memcpy(&h, page, sizeof(h));
	uint32_t computed = page_checksum(page, b);
	memset(page, 0, WR_PAGE_SIZE); /* bad data never leaves this function */
	wr_log(WR_WARNING,
	       "invalid page in block %u of file \"%s\" (stored checksum 0x%08x, computed 0x%08x)",
	       b, path, h.checksum, computed);
	return wr_error(
	    WALRUS_ECORRUPT,
	    "invalid page in block %u of file \"%s\" (stored checksum 0x%08x, computed 0x%08x)", b,
	    path, h.checksum, computed);
}

int smgr_block_handle(smgr_rel *r, wr_blkno b, fdc_file *f, off_t *off)
{
	SMGR_LOCKED();
	uint32_t seg = b / smgr_bps;
	*off = (off_t)(b % smgr_bps) * WR_PAGE_SIZE;
	int rc = smgr_seg(r, seg, false, f);
	if (smgr_missing(rc)) {
		char path[4096];
		smgr_segment_path(r->relid, seg, path, sizeof(path));
		return smgr_short_read(b, path, 0, NULL);
	}
	return rc;
}

int smgr_check_read(smgr_rel *r, wr_blkno b, void *page, ssize_t got)
{
	if (got >= WR_PAGE_SIZE && page_verify(page, b))
		return 0;
	/* The segment's path, as the fd cache names it (the same string). */
	char path[4096];
	smgr_segment_path(r->relid, b / smgr_bps, path, sizeof(path));
	if (got < 0) {
		memset(page, 0, WR_PAGE_SIZE);
		errno = (int)-got;
		return wr_error(wr_errno_code((int)-got), "could not read file \"%s\": %m", path);
	}
	if (got < WR_PAGE_SIZE)
		return smgr_short_read(b, path, got, page);
	return smgr_corrupt(b, path, page);
}

/*
 * O_DIRECT moves a page between the device and the caller's memory, which
 * must then be aligned as the device's blocks are.  The pool's pages and
 * its writers' copies are; a caller's page that is not (redo's default page
 * source, tools) goes through an aligned copy.  Not inlined: the copy is
 * on the stack only for such a caller.
 */
static bool smgr_unaligned(const void *page)
{
	return smgr_direct() && (uintptr_t)page % SMGR_DIRECT_ALIGN != 0;
}

__attribute__((noinline)) static ssize_t smgr_pread_copy(fdc_file f, void *page, off_t off)
{
	_Alignas(SMGR_DIRECT_ALIGN) char copy[WR_PAGE_SIZE];
	ssize_t n = fdc_pread(f, copy, WR_PAGE_SIZE, off);
	if (n > 0)
		memcpy(page, copy, (size_t)n);
	return n;
}

__attribute__((noinline)) static int smgr_pwrite_copy(fdc_file f, const void *page, off_t off)
{
	_Alignas(SMGR_DIRECT_ALIGN) char copy[WR_PAGE_SIZE];
	memcpy(copy, page, WR_PAGE_SIZE);
	return fdc_pwrite(f, copy, WR_PAGE_SIZE, off);
}

int smgr_read(smgr_rel *r, wr_blkno b, void *page)
{
	fdc_file f;
	off_t off;
	int rc = smgr_block_handle(r, b, &f, &off); /* the lock only for the lookup */
	if (rc != 0) {
		memset(page, 0, WR_PAGE_SIZE);
		return rc;
	}
	ssize_t n = smgr_unaligned(page) ? smgr_pread_copy(f, page, off)
	                                 : fdc_pread(f, page, WR_PAGE_SIZE, off);
	if (n < 0) {
		memset(page, 0, WR_PAGE_SIZE);
		return (int)n; /* the fd cache's message names the file and errno */
	}
	return smgr_check_read(r, b, page, n);
}

/* Called without the lock: the write runs while other threads use the tables. */
static int smgr_write_at(smgr_rel *r, uint32_t seg, fdc_file f, wr_blkno b, void *page)
{
	page_set_checksum(page, b);
	off_t off = (off_t)(b % smgr_bps) * WR_PAGE_SIZE;
	int rc = smgr_unaligned(page) ? smgr_pwrite_copy(f, page, off)
	                              : fdc_pwrite(f, page, WR_PAGE_SIZE, off);
	if (rc != 0)
		return rc;
	fdc_lock();
	rc = smgr_register_write(r->relid, seg, f);
	fdc_unlock();
	return rc;
}

int smgr_written(smgr_rel *r, wr_blkno b)
{
	SMGR_LOCKED();
	uint32_t seg = b / smgr_bps;
	fdc_file f;
	int rc = smgr_seg(r, seg, false, &f);
	if (rc != 0)
		return rc;
	return smgr_register_write(r->relid, seg, f);
}

int smgr_write(smgr_rel *r, wr_blkno b, void *page)
{
	uint32_t seg = b / smgr_bps;
	fdc_file f;
	fdc_lock();
	int rc = smgr_seg(r, seg, false, &f);
	fdc_unlock();
	if (rc != 0)
		return rc;
	return smgr_write_at(r, seg, f, b, page);
}

/* Before segment @seg is created: every earlier segment must be full, or nblocks would stop early.
 */
static int smgr_fill_before(smgr_rel *r, uint32_t seg)
{
	for (uint32_t s = 0; s < seg; s++) {
		fdc_file f;
		uint32_t blocks = 0;
		int rc = smgr_seg(r, s, true, &f);
		if (rc == 0)
			rc = smgr_seg_blocks(f, &blocks);
		if (rc == 0 && blocks < smgr_bps) {
			rc = fdc_truncate(f, (off_t)smgr_segsize); /* a sparse, zero-filled gap */
			if (rc == 0)
				rc = smgr_register_write(r->relid, s, f);
		}
		if (rc != 0)
			return rc;
	}
	return 0;
}

int smgr_extend(smgr_rel *r, wr_blkno b, void *page)
{
	if (b == WR_INVALID_BLKNO)
		return wr_error(WALRUS_ETOOBIG, "cannot extend relation %u beyond %u blocks",
		                r->relid, WR_INVALID_BLKNO);
	uint32_t seg = b / smgr_bps;
	fdc_file f;
	fdc_lock();
	int rc = smgr_seg(r, seg, false, &f);
	if (smgr_missing(rc)) {
		rc = smgr_fill_before(r, seg);
		if (rc == 0)
			rc = smgr_seg(r, seg, true, &f);
	}
	fdc_unlock();
	if (rc != 0)
		return rc;
	return smgr_write_at(r, seg, f, b, page);
}

/* What smgr_pieces does with each segment's part of a block range. */
typedef int (*smgr_piece_fn)(smgr_rel *r, uint32_t seg, fdc_file f, off_t off, off_t len);

/*
 * Calls @fn on each segment's part of blocks [@b, @b + @n), under the fd
 * cache's lock.  A missing segment is created (with the ones before it)
 * when @create, else ends the range there (past the relation's end).
 */
static int smgr_pieces(smgr_rel *r, wr_blkno b, wr_blkno n, bool create, smgr_piece_fn fn)
{
	int rc = 0;
	fdc_lock();
	while (rc == 0 && n > 0) {
		uint32_t seg = b / smgr_bps;
		wr_blkno first = b % smgr_bps, cnt = WR_MIN(n, smgr_bps - first);
		fdc_file f;
		rc = smgr_seg(r, seg, false, &f);
		if (smgr_missing(rc) && !create) {
			wr_error_clear();
			rc = 0;
			break;
		}
		if (smgr_missing(rc)) {
			rc = smgr_fill_before(r, seg);
			if (rc == 0)
				rc = smgr_seg(r, seg, true, &f);
		}
		if (rc == 0)
			rc = fn(r, seg, f, (off_t)first * WR_PAGE_SIZE, (off_t)cnt * WR_PAGE_SIZE);
		b += cnt;
		n -= cnt;
	}
	fdc_unlock();
	return rc;
}

static int grow_piece(smgr_rel *r, uint32_t seg, fdc_file f, off_t off, off_t len)
{
	int rc = fdc_fallocate(f, off, len);
	return rc == 0 ? smgr_register_write(r->relid, seg, f) : rc;
}

/*
 * Blocks [@b, @b + @n) as zeroes, allocated without writing them: a writer
 * that extends a page at a time pays a write and a size check per page,
 * one call here serves a run of them.  The caller owns what lies past its
 * own end of the relation (blocks nobody logged are never read as data).
 */
int smgr_grow(smgr_rel *r, wr_blkno b, wr_blkno n)
{
	if ((uint64_t)b + n > WR_INVALID_BLKNO)
		return wr_error(WALRUS_ETOOBIG, "cannot extend relation %u beyond %u blocks",
		                r->relid, WR_INVALID_BLKNO);
	return smgr_pieces(r, b, n, true, grow_piece);
}

static int punch_piece(smgr_rel *r, uint32_t seg, fdc_file f, off_t off, off_t len)
{
	(void)r;
	(void)seg;
	return fdc_punch(f, off, len);
}

/*
 * Blocks [@b, @b + @n) given back to the file system as holes (they read as
 * zeroes), the file's size kept.  For blocks nobody uses: a reader that
 * still holds a stale block number reads a valid all-zero page, where a cut
 * file would fail its read.  Segments that do not exist are skipped.
 */
int smgr_punch(smgr_rel *r, wr_blkno b, wr_blkno n)
{
	return smgr_pieces(r, b, n, false, punch_piece);
}

/* Whether any segment of the relation has holes (smgr_punch's, say). */
int smgr_sparse(smgr_rel *r, bool *sparse)
{
	int rc = 0;
	*sparse = false;
	fdc_lock();
	for (uint32_t seg = 0; rc == 0 && !*sparse; seg++) {
		fdc_file f;
		rc = smgr_seg(r, seg, false, &f);
		if (smgr_missing(rc)) {
			wr_error_clear();
			rc = 0;
			break;
		}
		if (rc == 0)
			rc = fdc_sparse(f, sparse);
	}
	fdc_unlock();
	return rc;
}

/* ---------------------------------------------------------------- truncate */

int smgr_truncate(smgr_rel *r, wr_blkno nblocks)
{
	SMGR_LOCKED();
	wr_blkno cur;
	uint32_t nsegs;
	int rc = smgr_scan(r, &cur, &nsegs);
	if (rc != 0)
		return rc;
	if (nblocks > cur)
		return wr_error(WALRUS_EINVAL,
		                "cannot truncate relation %u to %u blocks: it has %u", r->relid,
		                nblocks, cur);
	if (nblocks == cur)
		return 0;
	uint32_t keep = nblocks == 0 ? 0 : (nblocks - 1) / smgr_bps;
	smgr_forget(r->relid, keep + 1);
	/* From the end: a crash half-way leaves a relation cut shorter, never one with a hole. */
	for (uint32_t s = nsegs; s-- > keep + 1;) {
		char path[4096];
		smgr_segment_path(r->relid, s, path, sizeof(path));
		rc = smgr_drop_seg(r, s);
		if (rc != 0)
			return rc;
		rc = fdc_unlink(path);
		if (rc != 0 && !smgr_missing(rc))
			return rc;
	}
	if (nsegs > keep + 1)
		smgr_sync_basedir();
	fdc_file f;
	rc = smgr_seg(r, keep, false, &f);
	if (rc == 0)
		rc = fdc_truncate(f, (off_t)(nblocks - (wr_blkno)keep * smgr_bps) * WR_PAGE_SIZE);
	if (rc == 0)
		rc = smgr_register_write(r->relid, keep, f);
	return rc;
}

/* ---------------------------------------------------------------- reading ahead */

void smgr_prefetch(smgr_rel *r, wr_blkno b, wr_blkno n)
{
	/* Advice fills the page cache, which direct reads do not look at: the
	 * blocks would be read twice. */
	if (smgr_direct())
		return;
	SMGR_LOCKED();
	while (n > 0) {
		uint32_t seg = b / smgr_bps;
		wr_blkno first = b % smgr_bps;
		wr_blkno cnt = WR_MIN(n, smgr_bps - first);
		fdc_file f;
		int rc = smgr_seg(r, seg, false, &f);
		if (rc == 0)
			rc = fdc_advise_willneed(f, (off_t)first * WR_PAGE_SIZE,
			                         (off_t)cnt * WR_PAGE_SIZE);
		if (rc != 0) {
			/* A hint: the read itself will report real trouble.  A missing
			 * segment is past the end, and so is every later one. */
			bool missing = smgr_missing(rc);
			if (!missing)
				wr_log(WR_DEBUG,
				       "could not prefetch blocks %u..%u of relation %u: %s", b,
				       b + cnt - 1, r->relid, walrus_errmsg());
			wr_error_clear();
			if (missing)
				return;
		}
		b += cnt;
		n -= cnt;
	}
}

/* ---------------------------------------------------------------- sync */

void smgr_writeback(smgr_rel *r, wr_blkno b, wr_blkno n)
{
	/* A direct write leaves no dirty page cache behind to start write-back
	 * of; the fsync at the checkpoint still runs (the device's cache). */
	if (smgr_direct())
		return;
	SMGR_LOCKED();
	while (n > 0) {
		uint32_t seg = b / smgr_bps;
		wr_blkno first = b % smgr_bps;
		wr_blkno cnt = WR_MIN(n, smgr_bps - first);
		fdc_file f;
		if (smgr_seg(r, seg, false, &f) != 0) {
			/* Only a hint: the fsync at the checkpoint will report real trouble. */
			wr_log(WR_WARNING, "could not start write-back: %s", walrus_errmsg());
			return;
		}
		if (fdc_sync_range(f, (off_t)first * WR_PAGE_SIZE, (off_t)cnt * WR_PAGE_SIZE,
		                   SYNC_FILE_RANGE_WRITE) != 0)
			data_sync_failed("sync_file_range", fdc_path(f), errno);
		b += cnt;
		n -= cnt;
	}
}

void smgr_immedsync(smgr_rel *r)
{
	SMGR_LOCKED();
	wr_blkno nblocks;
	uint32_t nsegs;
	if (smgr_scan(r, &nblocks, &nsegs) != 0)
		wr_panic("could not fsync relation %u: %s", r->relid, walrus_errmsg());
	for (uint32_t s = 0; s < nsegs; s++) {
		fdc_file f;
		if (smgr_seg(r, s, false, &f) != 0)
			wr_panic("could not fsync relation %u: %s", r->relid, walrus_errmsg());
		if (fdc_fsync(f) != 0)
			data_sync_failed("fsync", fdc_path(f), errno);
		fdc_clear_dirty(f); /* durable now: nothing left to hand off */
	}
}

/* ---------------------------------------------------------------- mapped reads */

/*
 * Segments mapped read-only for smgr_map_block, per process and shared by
 * its threads: mapped under fdc_lock (as smgr's other tables), published
 * with a release store, and never unmapped before smgr_shutdown (the last
 * handle of the process is gone).
 * The mapping covers a whole segment; only blocks below the file's size at
 * the last look are handed out (a read past the end of a file through a
 * mapping is SIGBUS; files only grow while an instance runs).  The first
 * mapping installs the SIGBUS handler (mapguard.c), the last one's unmap
 * removes it.
 */
#define SMAP_RELS 4
#define SMAP_SEGS 1024

typedef struct smap_rel {
	_Atomic uint32_t relid;  /* 0 = free (relation ids start at 1) */
	_Atomic bool unmappable; /* mmap failed, or a read faulted: not mapped again */
	_Atomic(char *) base[SMAP_SEGS];
	_Atomic uint32_t nblocks[SMAP_SEGS]; /* blocks of the file at the last look */
} smap_rel;

static smap_rel smap[SMAP_RELS];

static smap_rel *smap_find(wr_relid rel, bool add)
{
	for (int i = 0; i < SMAP_RELS; i++) {
		uint32_t id = atomic_load_explicit(&smap[i].relid, memory_order_acquire);
		if (id == rel)
			return &smap[i];
		if (id == 0 && add) {
			atomic_store_explicit(&smap[i].relid, rel, memory_order_release);
			return &smap[i];
		}
	}
	return NULL;
}

/* Maps segment @seg of @rel, or looks at its size again; under fdc_lock. */
static void smap_refresh(smap_rel *m, wr_relid rel, uint32_t seg)
{
	char path[PATH_MAX];
	smgr_segment_path(rel, seg, path, sizeof(path));
	struct stat st;
	char *base = atomic_load_explicit(&m->base[seg], memory_order_relaxed);
	if (base != NULL) {
		if (stat(path, &st) == 0)
			atomic_store_explicit(&m->nblocks[seg],
			                      (uint32_t)(st.st_size / WR_PAGE_SIZE),
			                      memory_order_release);
		return;
	}
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return; /* not there (yet): the caller reads the usual way */
	if (fstat(fd, &st) == 0) {
		int injected = ts_fp_check("mmap", path, NULL);
		void *p = MAP_FAILED;
		if (injected > 0)
			errno = injected;
		/* Unguarded, a read error would kill the process: no handler, no
		 * mapping (errno: sigaction's). */
		if (injected <= 0 && smgr_guard_install() == WALRUS_OK)
			p = mmap(NULL, (size_t)smgr_bps * WR_PAGE_SIZE, PROT_READ, MAP_SHARED, fd,
			         0);
		/* Without it a fault on data beyond memory reads read_ahead_kb around
		 * itself (8 MiB on some devices) for one page: 50x slower gets. */
		if (p != MAP_FAILED &&
		    madvise(p, (size_t)smgr_bps * WR_PAGE_SIZE, MADV_RANDOM) != 0) {
			int e = errno;
			if (munmap(p, (size_t)smgr_bps * WR_PAGE_SIZE) != 0)
				wr_log(WR_WARNING, "could not unmap \"%s\": %m", path);
			errno = e;
			p = MAP_FAILED;
		}
		if (p != MAP_FAILED) {
			atomic_store_explicit(&m->nblocks[seg],
			                      (uint32_t)(st.st_size / WR_PAGE_SIZE),
			                      memory_order_relaxed);
			atomic_store_explicit(&m->base[seg], (char *)p, memory_order_release);
		} else {
			wr_log(WR_WARNING,
			       "could not map \"%s\": %m (mmap_reads: reading it the usual "
			       "way from now on)",
			       path);
			atomic_store(&m->unmappable, true);
		}
	}
	(void)close(fd); /* read-only: the mapping keeps the file */
}

const char *smgr_map_block(wr_relid rel, wr_blkno b)
{
	/* The mapping shows the page cache, which direct writes bypass. */
	if (smgr_bps == 0 || rel == 0 || smgr_direct())
		return NULL;
	uint32_t seg = b / smgr_bps, off = b % smgr_bps;
	if (seg >= SMAP_SEGS)
		return NULL;
	smap_rel *m = smap_find(rel, false);
	if (m != NULL && atomic_load_explicit(&m->unmappable, memory_order_relaxed))
		return NULL;
	for (int look = 0; look < 2; look++) {
		if (m != NULL) {
			char *base = atomic_load_explicit(&m->base[seg], memory_order_acquire);
			if (base != NULL &&
			    off < atomic_load_explicit(&m->nblocks[seg], memory_order_acquire))
				return base + (size_t)off * WR_PAGE_SIZE;
		}
		if (look == 1)
			break;
		fdc_lock();
		m = smap_find(rel, true);
		if (m != NULL)
			smap_refresh(m, rel, seg);
		fdc_unlock();
	}
	return NULL;
}

void smgr_map_prefetch(const char *page)
{
	/* A hint: if it fails, the reader's loads fault the page in anyway. */
	(void)madvise((void *)page, WR_PAGE_SIZE, MADV_WILLNEED);
}

static void smgr_unmap_all(void)
{
	SMGR_LOCKED();
	for (int i = 0; i < SMAP_RELS; i++) {
		for (int s = 0; s < SMAP_SEGS; s++) {
			char *base = atomic_exchange(&smap[i].base[s], NULL);
			if (base != NULL && munmap(base, (size_t)smgr_bps * WR_PAGE_SIZE) != 0)
				wr_log(WR_WARNING, "could not unmap a data file segment: %m");
			atomic_store(&smap[i].nblocks[s], 0);
		}
		atomic_store(&smap[i].relid, 0);
		atomic_store(&smap[i].unmappable, false);
	}
	smgr_guard_remove();
}

bool smgr_map_read(wr_relid rel, wr_blkno b, const char *page, smgr_map_fn fn, void *arg)
{
	if (smgr_guard_call(page, WR_PAGE_SIZE, fn, arg))
		return true;
	smap_rel *m = smap_find(rel, false);
	if (m != NULL && !atomic_exchange(&m->unmappable, true)) {
		char path[PATH_MAX];
		smgr_segment_path(rel, b / smgr_bps, path, sizeof(path));
		wr_log(WR_WARNING,
		       "could not read block %u of \"%s\" through its mapping (SIGBUS: the device "
		       "failed the read, or the file was cut short); mmap_reads: reading the "
		       "relation the usual way from now on",
		       b, path);
	}
	return false;
}
