/*
 * archive.c - the archive status of WAL segments (DIR/wal/archive_status):
 * what decides whether a segment may be recycled when archive_mode is on.
 *
 * As PostgreSQL keeps it: a completed segment gets NAME.ready, and the
 * archiver renames it to NAME.done once the archive holds the segment
 * durably.  A segment without .done is never recycled or removed, so an
 * archive that fails for a while holds WAL back instead of losing it.
 * The status of a history file is kept the same way under its own name.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <stdio.h>
#include <unistd.h>

#include "fdcache/fdcache.h"
#include "wal/wal.h"

bool wal_archive_status_path(const char *waldir, const char *name, const char *suffix, char *buf,
                             size_t len)
{
	return wr_snprintf(buf, len, "%s/%s/%s%s", waldir, WAL_ARCHIVE_STATUS_DIR, name, suffix);
}

void wal_segment_name(uint64_t seg_size, wr_lsn seg_start, char *buf, size_t len)
{
	wr_snprintf(buf, len, "%016llX", (unsigned long long)(seg_start - seg_start % seg_size));
}

bool wal_archive_may_remove(const char *waldir, const wr_options *o, wr_lsn seg_start)
{
	char name[WAL_SEGMENT_NAME_LEN + 1], path[PATH_MAX];
	if (!o->archive_mode)
		return true;
	wal_segment_name((uint64_t)o->wal_segment_size, seg_start, name, sizeof(name));
	if (!wal_archive_status_path(waldir, name, WAL_ARCHIVE_DONE, path, sizeof(path)))
		return false;
	/* Any doubt (EIO, EACCES) keeps the segment: space is cheaper than a gap. */
	return access(path, F_OK) == 0;
}

int wal_archive_mark_done_before(const char *waldir, uint64_t seg_size, wr_lsn upto)
{
	char dir[PATH_MAX], path[PATH_MAX], name[WAL_SEGMENT_NAME_LEN + 1];
	if (!wr_snprintf(dir, sizeof(dir), "%s/%s", waldir, WAL_ARCHIVE_STATUS_DIR))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", waldir);
	int rc = fdc_mkdir(dir, 0700);
	DIR *d = rc == WALRUS_OK ? opendir(waldir) : NULL;
	if (rc == WALRUS_OK && d == NULL)
		rc = wr_error(wr_errno_code(errno), "could not open directory \"%s\": %m", waldir);
	struct dirent *e;
	while (rc == WALRUS_OK && (e = readdir(d)) != NULL) {
		wr_lsn start;
		if (!wal_segment_parse_name(e->d_name, seg_size, &start) || start + seg_size > upto)
			continue;
		wal_segment_name(seg_size, start, name, sizeof(name));
		if (!wal_archive_status_path(waldir, name, WAL_ARCHIVE_DONE, path, sizeof(path)))
			continue;
		int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0)
			rc = wr_error(wr_errno_code(errno), "could not create \"%s\": %m", path);
		else if (close(fd) != 0)
			rc = wr_error(wr_errno_code(errno), "could not close \"%s\": %m", path);
	}
	if (d != NULL)
		closedir(d);
	if (rc == WALRUS_OK)
		rc = fdc_fsync_path(dir);
	return rc;
}

/* WALDIR/archive_status/NAME.done, durably made by the caller's directory fsync. */
static int touch_done(const char *waldir, const char *name)
{
	char path[PATH_MAX];
	if (!wal_archive_status_path(waldir, name, WAL_ARCHIVE_DONE, path, sizeof(path)))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", waldir);
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return wr_error(wr_errno_code(errno), "could not create \"%s\": %m", path);
	if (close(fd) != 0)
		return wr_error(wr_errno_code(errno), "could not close \"%s\": %m", path);
	return WALRUS_OK;
}

int wal_archive_mark_present(const char *waldir, const char *archive_dir, uint32_t tli,
                             uint64_t seg_size)
{
	char dir[PATH_MAX], hist[PATH_MAX], name[WAL_SEGMENT_NAME_LEN + 1];
	wal_history h;
	wal_history_name(tli, name, sizeof(name));
	if (!wr_snprintf(dir, sizeof(dir), "%s/%s", waldir, WAL_ARCHIVE_STATUS_DIR) ||
	    !wr_snprintf(hist, sizeof(hist), "%s/%s", waldir, name))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", waldir);
	int rc = wal_history_read(hist, tli, &h);
	if (rc == WALRUS_OK)
		rc = fdc_mkdir(dir, 0700);
	DIR *d = rc == WALRUS_OK ? opendir(waldir) : NULL;
	if (rc == WALRUS_OK && d == NULL)
		rc = wr_error(wr_errno_code(errno), "could not open directory \"%s\": %m", waldir);
	struct dirent *e;
	int marked = 0;
	while (rc == WALRUS_OK && (e = readdir(d)) != NULL) {
		wr_lsn start;
		char aname[WAL_ARCHIVE_NAME_LEN + 1], apath[PATH_MAX], done[PATH_MAX];
		struct stat st;
		if (!wal_segment_parse_name(e->d_name, seg_size, &start))
			continue;
		wal_segment_name(seg_size, start, name, sizeof(name));
		wal_archive_name(wal_history_tli_for(&h, start, seg_size), start, aname,
		                 sizeof(aname));
		if (!wal_archive_status_path(waldir, name, WAL_ARCHIVE_DONE, done, sizeof(done)) ||
		    access(done, F_OK) == 0 ||
		    !wr_snprintf(apath, sizeof(apath), "%s/%s", archive_dir, aname) ||
		    stat(apath, &st) != 0 || (uint64_t)st.st_size != seg_size)
			continue;
		rc = touch_done(waldir, name);
		marked++;
	}
	if (d != NULL)
		closedir(d);
	if (rc == WALRUS_OK && marked > 0)
		rc = fdc_fsync_path(dir);
	return rc;
}

void wal_archive_forget(const char *waldir, uint64_t seg_size, wr_lsn seg_start)
{
	static const char *const suffixes[] = {WAL_ARCHIVE_DONE, WAL_ARCHIVE_READY};
	char name[WAL_SEGMENT_NAME_LEN + 1], path[PATH_MAX];
	wal_segment_name(seg_size, seg_start, name, sizeof(name));
	for (size_t i = 0; i < WR_ARRAY_LEN(suffixes); i++) {
		if (!wal_archive_status_path(waldir, name, suffixes[i], path, sizeof(path)) ||
		    (access(path, F_OK) != 0 && errno == ENOENT))
			continue;
		/* A stale status file only takes an inode: the name is never reused. */
		if (fdc_unlink(path) != WALRUS_OK && errno != ENOENT)
			wr_log(WR_WARNING, "could not remove \"%s\": %s", path, walrus_errmsg());
	}
}
