/*
 * segment.c - WAL segment files: names, creation, recycling.
 *
 * A segment is created whole and zero-filled before any WAL goes into it,
 * and made durable (file, then directory) before use, so that writing WAL
 * later never allocates blocks or changes the file size: an fdatasync of a
 * segment then only has to flush data, and a crash can never leave a
 * segment shorter than expected.  PostgreSQL writes zeros for the same
 * reason; fallocate would leave unwritten extents that still need a
 * metadata update when first written.
 *
 * Old segments (wholly before the checkpoint's redo segment) are recycled
 * by renaming them to future names instead of creating new files, which
 * saves the zero-filling.  A recycled segment still holds old WAL; readers
 * tell it from new WAL by the pageaddr of its page headers.
 *
 * Segments are installed by several processes at once (the WAL writer
 * ahead of the commits, a backend on demand, the checkpointer recycling):
 * every rename is RENAME_NOREPLACE, so none replaces a segment another one
 * installed and may have written WAL into.  A name is durable only once the
 * WAL directory is fsynced after the rename, and the installer does that
 * right after it, but a process that finds a segment there cannot know
 * whether that has happened yet: it fsyncs the directory before using it.
 */
#include <dirent.h>
#include <stdatomic.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wal/wal_int.h"

#define WAL_ZERO_CHUNK ((size_t)1 << 20)

void wal_segment_path(const char *waldir, uint64_t seg_size, wr_lsn lsn, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%016llX", waldir, (unsigned long long)(lsn - lsn % seg_size));
}

bool wal_segment_parse_name(const char *name, uint64_t seg_size, wr_lsn *start)
{
	uint64_t v = 0;
	for (int i = 0; i < WAL_SEGMENT_NAME_LEN; i++) {
		char c = name[i];
		if (c >= '0' && c <= '9')
			v = v * 16 + (uint64_t)(c - '0');
		else if (c >= 'A' && c <= 'F')
			v = v * 16 + (uint64_t)(c - 'A' + 10);
		else
			return false;
	}
	if (name[WAL_SEGMENT_NAME_LEN] != '\0' || seg_size == 0 || v % seg_size != 0)
		return false;
	*start = v;
	return true;
}

/* ---------------------------------------------------------------- creation */

/* The size of an existing file; WALRUS_ENOENT (errno ENOENT) when missing. */
static int wal_file_size(const char *path, off_t *size)
{
	fdc_file f;
	int rc = fdc_open(path, O_RDONLY | O_CLOEXEC, 0, &f);
	if (rc != WALRUS_OK)
		return rc;
	rc = fdc_size(f, size);
	int rc2 = fdc_close(f);
	return rc != WALRUS_OK ? rc : rc2;
}

static int wal_write_zeros(fdc_file f, uint64_t size)
{
	/* Aligned for O_DIRECT, which wants the memory aligned too. */
	static const char zeros[WAL_ZERO_CHUNK] __attribute__((aligned(4096)));
	for (uint64_t off = 0; off < size; off += WAL_ZERO_CHUNK) {
		size_t n = (size_t)WR_MIN((uint64_t)WAL_ZERO_CHUNK, size - off);
		int rc = fdc_pwrite(f, zeros, n, (off_t)off);
		if (rc != WALRUS_OK)
			return rc;
	}
	return WALRUS_OK;
}

/*
 * Writes a zero-filled file at @tmp and makes its content durable.  With
 * @direct (the WAL is written O_DIRECT) the zeros bypass the page cache too:
 * 16 MiB of page cache per segment that nothing would read.  A file system
 * that refuses O_DIRECT gets them through the page cache (flush.c then
 * finds out for the WAL's writes).
 */
static int wal_write_zero_file(const char *tmp, uint64_t size, bool direct)
{
	fdc_file f;
	int fl = O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC;
	int rc = fdc_open(tmp, fl | (direct ? O_DIRECT : 0), 0600, &f);
	if (rc == WALRUS_EINVAL && direct)
		rc = fdc_open(tmp, fl, 0600, &f);
	if (rc != WALRUS_OK)
		return rc;
	rc = wal_write_zeros(f, size);
	if (rc == WALRUS_OK)
		rc = fdc_fdatasync(f);
	int rc2 = fdc_close(f);
	return rc != WALRUS_OK ? rc : rc2;
}

static void wal_count(_Atomic uint64_t *counter, uint64_t n)
{
	if (n > 0)
		atomic_fetch_add_explicit(counter, n, memory_order_relaxed);
}

/* Whether the segment at @path exists; WALRUS_ECORRUPT when it has the wrong size. */
static int wal_segment_exists(const char *path, uint64_t seg_size, bool *exists)
{
	off_t size;
	int rc = wal_file_size(path, &size);
	*exists = rc == WALRUS_OK;
	if (rc != WALRUS_OK)
		return errno == ENOENT ? WALRUS_OK : rc;
	if ((uint64_t)size != seg_size)
		return wr_error(WALRUS_ECORRUPT, "WAL segment \"%s\" has size %lld, expected %llu",
		                path, (long long)size, (unsigned long long)seg_size);
	return WALRUS_OK;
}

/* Removes a temp segment; the caller's error (message and errno) is the one returned. */
static int wal_drop_tmp(const char *tmp, int rc)
{
	int err = errno;
	char msg[512];
	wr_snprintf(msg, sizeof(msg), "%s", walrus_errmsg());
	if (fdc_unlink(tmp) != WALRUS_OK && errno != ENOENT)
		wr_log(WR_WARNING, "could not remove temporary WAL segment: %s (left for later)",
		       walrus_errmsg());
	if (rc != WALRUS_OK)
		wr_error(rc, "%s", msg);
	errno = err;
	return rc;
}

int wal_segment_create(const char *waldir, uint64_t seg_size, wr_lsn start)
{
	bool filled;
	return wal_segment_make(waldir, seg_size, start, false, &filled);
}

/*
 * The name must be durable before any commit in the segment is
 * acknowledged.  A failed directory fsync is a PANIC like any other (rule
 * 5): a retry would find the file and could not tell that its name never
 * reached the disk.
 */
static void wal_sync_name(const char *path, const char *why)
{
	if (fdc_fsync_parent(path) != WALRUS_OK)
		wr_panic("could not fsync the WAL directory after %s \"%s\": %s", why, path,
		         walrus_errmsg());
}

/*
 * A segment someone else installed.  Its name is visible as soon as the
 * rename returns, but durable only once the installer has fsynced the
 * directory, which it may not have done yet (or ever, if it is stopped or
 * dies in between): a user of the segment fsyncs the directory itself.
 * PostgreSQL's XLogFileInit opens an existing segment as it is found.
 */
static int wal_segment_found(const char *path, uint64_t seg_size, bool *exists)
{
	int rc = wal_segment_exists(path, seg_size, exists);
	if (rc == WALRUS_OK && *exists)
		wal_sync_name(path, "finding");
	return rc;
}

int wal_segment_make(const char *waldir, uint64_t seg_size, wr_lsn start, bool direct, bool *filled)
{
	char path[PATH_MAX], tmp[PATH_MAX + 32];
	bool exists;
	*filled = false;
	wal_segment_path(waldir, seg_size, start, path, sizeof(path));
	int rc = wal_segment_found(path, seg_size, &exists);
	if (rc != WALRUS_OK || exists)
		return rc;
	/* The pid keeps two processes' temp files apart. */
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	rc = wal_write_zero_file(tmp, seg_size, direct);
	*filled = true;
	if (rc != WALRUS_OK)
		return wal_drop_tmp(tmp, rc);
	/* Someone may have installed it meanwhile (the WAL writer preallocates
	 * while backends create on demand) and written WAL into it: the rename
	 * must never replace it. */
	rc = fdc_rename_noreplace(tmp, path);
	if (rc != WALRUS_OK && errno == EEXIST) {
		(void)wal_drop_tmp(tmp, rc);
		return wal_segment_found(path, seg_size, &exists);
	}
	if (rc != WALRUS_OK)
		return wal_drop_tmp(tmp, rc);
	wal_sync_name(path, "creating");
	if (wal_sh != NULL)
		wal_count(&wal_sh->st_seg_created, 1);
	return WALRUS_OK;
}

int wal_remove_temp_segments(const char *waldir)
{
	DIR *d = opendir(waldir);
	if (d == NULL) {
		wr_log(WR_WARNING, "could not open WAL directory \"%s\": %m", waldir);
		return 0;
	}
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		const char *t = strstr(e->d_name, ".tmp.");
		if (t == NULL || t - e->d_name != WAL_SEGMENT_NAME_LEN)
			continue;
		char path[PATH_MAX];
		if (!wr_snprintf(path, sizeof(path), "%s/%s", waldir, e->d_name))
			continue;
		if (fdc_unlink(path) == WALRUS_OK)
			n++;
		else
			wr_log(WR_WARNING, "could not remove temporary WAL segment: %s",
			       walrus_errmsg());
	}
	if (closedir(d) != 0)
		wr_log(WR_WARNING, "could not close WAL directory \"%s\": %m", waldir);
	if (n > 0)
		wr_log(WR_LOG, "removed %d temporary WAL segment(s) left by a crash", n);
	return n;
}

/* ---------------------------------------------------------------- recycling */

typedef struct wal_seglist {
	wr_lsn *v;
	size_t n, cap;
} wal_seglist;

static int wal_cmp_lsn(const void *a, const void *b)
{
	wr_lsn x = *(const wr_lsn *)a, y = *(const wr_lsn *)b;
	return (x > y) - (x < y);
}

static int wal_seglist_add(wal_seglist *l, wr_lsn start)
{
	if (wr_grow(&l->v, &l->cap, l->n + 1, sizeof(*l->v), 64) != WALRUS_OK)
		return wr_error(WALRUS_ENOMEM, "out of memory listing WAL segments");
	l->v[l->n++] = start;
	return WALRUS_OK;
}

/* Every segment in @waldir, sorted by start. */
static int wal_list_segments(const char *waldir, uint64_t seg_size, wal_seglist *l)
{
	DIR *d = opendir(waldir);
	if (d == NULL)
		return wr_error(wr_errno_code(errno), "could not open WAL directory \"%s\": %m",
		                waldir);
	struct dirent *e;
	int rc = WALRUS_OK;
	wr_lsn start;
	errno = 0;
	while (rc == WALRUS_OK && (e = readdir(d)) != NULL)
		if (wal_segment_parse_name(e->d_name, seg_size, &start))
			rc = wal_seglist_add(l, start);
	if (rc == WALRUS_OK && errno != 0)
		rc = wr_error(WALRUS_EIO, "could not read WAL directory \"%s\": %m", waldir);
	closedir(d);
	qsort(l->v, l->n, sizeof(*l->v), wal_cmp_lsn);
	return rc;
}

static bool wal_seglist_has(const wal_seglist *l, wr_lsn start)
{
	return bsearch(&start, l->v, l->n, sizeof(*l->v), wal_cmp_lsn) != NULL;
}

/*
 * How far past the redo segment segments may exist: the WAL of the last
 * checkpoint cycle (what the old segments held, plus what came since the
 * redo point) is the guess for the next one, bounded by min_wal_size and
 * max_wal_size as in PostgreSQL.
 */
static uint64_t wal_keep_bytes(const wr_options *o, const wal_seglist *l, wr_lsn redo_seg,
                               wr_lsn redo, wr_lsn insert)
{
	uint64_t est = (l->n > 0 && l->v[0] < redo_seg) ? redo_seg - l->v[0] : 0;
	est += insert > redo ? insert - redo : 0;
	est += est / 10;
	est = WR_MIN(est, (uint64_t)o->max_wal_size);
	return WR_MAX(est, (uint64_t)o->min_wal_size);
}

/* True when @start's name is in use: listed, or a file created since the listing. */
static bool wal_name_taken(const wal_seglist *l, const char *path, wr_lsn start)
{
	off_t size;
	if (wal_seglist_has(l, start))
		return true;
	return wal_file_size(path, &size) == WALRUS_OK || errno != ENOENT;
}

/* Renames or removes the old segment at @old; *@next is the next future name to try. */
static int wal_recycle_one(const char *waldir, uint64_t seg, const wal_seglist *l, wr_lsn old,
                           wr_lsn *next, wr_lsn limit, int *recycled, int *removed)
{
	char from[PATH_MAX], to[PATH_MAX];
	off_t size;
	wal_segment_path(waldir, seg, old, from, sizeof(from));
	/* A truncated old segment (no longer needed) must not become a future
	 * one: it would be refused when the WAL reaches it. */
	if (wal_file_size(from, &size) == WALRUS_OK && (uint64_t)size != seg) {
		wr_log(WR_WARNING,
		       "WAL segment \"%s\" has size %lld, expected %llu: removed, not recycled",
		       from, (long long)size, (unsigned long long)seg);
		limit = 0;
	}
	while (*next + seg <= limit) {
		wal_segment_path(waldir, seg, *next, to, sizeof(to));
		if (!wal_name_taken(l, to, *next))
			break;
		*next += seg;
	}
	if (*next + seg <= limit) {
		/* Never over a segment created since we listed them. */
		int rc = fdc_rename_noreplace(from, to);
		if (rc != WALRUS_OK && errno == EEXIST) {
			*next += seg;
			return wal_recycle_one(waldir, seg, l, old, next, limit, recycled, removed);
		}
		if (rc != WALRUS_OK)
			return rc;
		*next += seg;
		(*recycled)++;
		return WALRUS_OK;
	}
	int rc = fdc_unlink(from);
	if (rc == WALRUS_OK)
		(*removed)++;
	return rc;
}

/*
 * Future segments (never written: recycled by busier cycles, or
 * preallocated) at or past @from.  Only when nothing writes WAL any more: a
 * writer may have opened a future segment, and would go on writing into the
 * removed file.
 */
static int wal_trim_future(const char *waldir, uint64_t seg, const wal_seglist *l, wr_lsn from,
                           int *removed)
{
	for (size_t i = 0; i < l->n; i++) {
		char path[PATH_MAX];
		if (l->v[i] < from)
			continue;
		wal_segment_path(waldir, seg, l->v[i], path, sizeof(path));
		int rc = fdc_unlink(path);
		if (rc != WALRUS_OK)
			return rc;
		(*removed)++;
	}
	return WALRUS_OK;
}

int wal_recycle(const char *waldir, const wr_options *o, wr_lsn redo, wr_lsn insert, bool settle,
                int *recycled, int *removed)
{
	uint64_t seg = (uint64_t)o->wal_segment_size;
	wal_seglist l = {0};
	*recycled = *removed = 0;
	int rc = wal_list_segments(waldir, seg, &l);
	wr_lsn redo_seg = redo - redo % seg;
	insert = WR_MAX(insert, redo);
	wr_lsn next = insert - insert % seg + seg;
	/* Settled, the next cycle's size is anyone's guess: min_wal_size. */
	wr_lsn limit = redo_seg + (settle ? (uint64_t)o->min_wal_size
	                                  : wal_keep_bytes(o, &l, redo_seg, redo, insert));
	/* A running base backup still has to copy its WAL. */
	wr_lsn keep = wal_backup_keep_lsn();
	wr_lsn upto = keep != 0 && keep - keep % seg < redo_seg ? keep - keep % seg : redo_seg;
	/* And the standbys away with a slot (slot.c). */
	char datadir[PATH_MAX];
	wr_snprintf(datadir, sizeof(datadir), "%s/..", waldir);
	wr_lsn slots =
	    wal_sh != NULL ? wal_slots_keep(datadir, redo, o->max_slot_wal_keep_size) : 0;
	if (slots != 0 && slots - slots % seg < upto)
		upto = slots - slots % seg;
	/* In order, stopping at the first segment not archived yet: the
	 * archiver works in order, so the later ones are not either. */
	for (size_t i = 0; rc == WALRUS_OK && i < l.n && l.v[i] + seg <= upto &&
	                   wal_archive_may_remove(waldir, o, l.v[i]);
	     i++) {
		rc = wal_recycle_one(waldir, seg, &l, l.v[i], &next, limit, recycled, removed);
		if (rc == WALRUS_OK)
			wal_archive_forget(waldir, seg, l.v[i]);
	}
	if (rc == WALRUS_OK && settle)
		rc = wal_trim_future(waldir, seg, &l, WR_MAX(limit, next), removed);
	free(l.v);
	if (*recycled + *removed > 0) {
		char any[PATH_MAX];
		wal_segment_path(waldir, seg, redo_seg, any, sizeof(any));
		/* Recycled names are used for WAL as soon as they exist: they must
		 * be durable first, and a failed directory fsync is a PANIC. */
		if (fdc_fsync_parent(any) != WALRUS_OK)
			wr_panic("could not fsync the WAL directory after recycling: %s",
			         walrus_errmsg());
		if (wal_sh != NULL) {
			wal_count(&wal_sh->st_seg_recycled, (uint64_t)*recycled);
			wal_count(&wal_sh->st_seg_removed, (uint64_t)*removed);
		}
	}
	return rc;
}
