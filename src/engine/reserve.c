/*
 * reserve.c - a full disk: the space kept for the end-of-recovery
 * checkpoint (DIR/walrus.reserve), and the read-only start.
 *
 * Recovery only reads, but the checkpoint that ends it writes: a WAL
 * record (perhaps into a new segment), the control file (temp file and
 * rename), the log.  On a full disk it failed, the startup process
 * PANICked, and the instance could not start at all: nothing acknowledged
 * was lost (the WAL holds it), but nothing could be read either until
 * space was freed.
 *
 * So the instance keeps a reserve, a file of reserve_size() bytes
 * allocated with posix_fallocate, and accepts writes only while it holds
 * it and as much is free beside it.  A start on a full disk cannot even
 * write its pid file: the supervisor releases the reserve first thing
 * (reserve_release_if_full), and the instance will be read-only.  Then in
 * the startup process, after redo and before the end-of-recovery
 * checkpoint (reserve_startup):
 *   - reserve in place and room beside it: a normal start;
 *   - reserve in place, no room (the disk filled up, the instance
 *     PANICked): the reserve is removed, the checkpoint runs in the room it
 *     leaves, and the instance starts read-only;
 *   - no reserve (the first start, or released before): it is made when
 *     there is room for it and for the checkpoint; otherwise read-only, and
 *     without the checkpoint when even that room is missing (nothing is
 *     written; the next start recovers from the same WAL).
 * If the checkpoint still fails on a full disk (or one found short of room
 * already), the supervisor runs the startup again, in fresh shared memory,
 * with skip_end_ckpt: read-only without the checkpoint.
 *
 * Read-only: no WAL is written, so no acknowledgement can be given for
 * what could not be made durable; puts, deletes, batches and checkpoints
 * fail with WALRUS_ENOSPC naming the file system and the space needed; no
 * auxiliary process runs (the WAL writer would make segments, the
 * checkpointer would write a shutdown checkpoint).  The next start that
 * finds room makes the reserve again and accepts writes.
 */
#include "engine/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "fdcache/fdcache.h"

#define RESERVE_EXTRA (1ULL << 20) /* the control file, walrus.settings, the log, pages */

typedef struct fs_room {
	const char *path;
	uint64_t avail; /* bytes an unprivileged writer may still allocate */
	dev_t dev;
} fs_room;

uint64_t reserve_size(const wr_options *o)
{
	/* The checkpoint record may need the next WAL segment. */
	return (uint64_t)o->wal_segment_size + RESERVE_EXTRA;
}

static int room_of(const char *path, fs_room *r)
{
	struct statvfs v;
	struct stat st;
	if (statvfs(path, &v) != 0 || stat(path, &st) != 0)
		return wr_error(wr_errno_code(errno), "could not look at the space of \"%s\": %m",
		                path);
	r->path = path;
	r->avail = (uint64_t)v.f_bavail * v.f_frsize;
	r->dev = st.st_dev;
	return WALRUS_OK;
}

/* The mount point of @path's file system: the last directory up with its st_dev. */
static void mount_point(const char *path, char *out, size_t len)
{
	char cur[PATH_MAX], up[PATH_MAX];
	struct stat st, pst;
	if (realpath(path, cur) == NULL || stat(cur, &st) != 0) {
		wr_snprintf(out, len, "?");
		return;
	}
	while (strcmp(cur, "/") != 0) {
		wr_snprintf(up, sizeof(up), "%s", cur);
		char *parent = dirname(up);
		if (stat(parent, &pst) != 0 || pst.st_dev != st.st_dev)
			break;
		memmove(cur, parent, strlen(parent) + 1);
	}
	wr_snprintf(out, len, "%s", cur);
}

static uint64_t reserve_held(const char *path)
{
	struct stat st;
	if (stat(path, &st) != 0)
		return 0;
	uint64_t allocated = (uint64_t)st.st_blocks * 512;
	return WR_MIN((uint64_t)st.st_size, allocated);
}

static int reserve_make(const char *path, const char *abs, uint64_t size)
{
	fdc_file f;
	int rc = fdc_open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600, &f);
	if (rc != WALRUS_OK)
		return rc;
	rc = fdc_fallocate(f, 0, (off_t)size);
	if (rc == WALRUS_OK)
		rc = fdc_fsync(f);
	/* Synced, or given up: the file is removed below and nothing relies on it. */
	fdc_clear_dirty(f);
	int rc2 = fdc_close(f);
	if (rc == WALRUS_OK)
		rc = rc2;
	if (rc == WALRUS_OK)
		rc = fdc_fsync_path(abs);
	if (rc != WALRUS_OK && fdc_unlink(path) != WALRUS_OK && errno != ENOENT)
		wr_log(WR_WARNING, "could not remove \"%s\": %s", path, walrus_errmsg());
	return rc;
}

/* A reserve that comes back after a crash is harmless: no fsync error is fatal here. */
static void reserve_release(const char *path, const char *abs)
{
	if (fdc_unlink(path) != WALRUS_OK) {
		wr_log(WR_WARNING, "could not release the reserve \"%s\": %s", path,
		       walrus_errmsg());
		return;
	}
	if (fdc_fsync_path(abs) != WALRUS_OK)
		wr_log(WR_WARNING, "could not sync \"%s\" after releasing the reserve: %s", abs,
		       walrus_errmsg());
}

/* Marks the instance read-only, naming the file system short of room and the reserve's @state. */
static void go_read_only(const fs_room *tight, uint64_t want, const char *path, const char *state)
{
	engine_shared *e = engine_sh();
	char mnt[PATH_MAX];
	mount_point(tight->path, mnt, sizeof(mnt));
	wr_snprintf(e->read_only_why, sizeof(e->read_only_why),
	            "no space left on device: the file system of \"%s\" (mounted on \"%s\") has "
	            "%llu kB free; accepting writes needs %llu kB free there: a reserve of %llu kB "
	            "for the end-of-recovery checkpoint (\"%s\", %s) and as much beside it. Free "
	            "space, then restart the instance",
	            tight->path, mnt, (unsigned long long)(tight->avail >> 10),
	            (unsigned long long)(want >> 10),
	            (unsigned long long)(reserve_size(&e->opts) >> 10), path, state);
	atomic_store(&e->read_only, 1);
	wr_log(WR_WARNING, "the instance starts read-only: %s", e->read_only_why);
}

bool reserve_startup(const char *abs, const wr_options *o)
{
	char path[PATH_MAX], wal[PATH_MAX];
	fs_room d = {0}, w = {0};
	uint64_t need = reserve_size(o);
	if (!wr_snprintf(path, sizeof(path), "%s/%s", abs, WR_RESERVE_FILE) ||
	    !wr_snprintf(wal, sizeof(wal), "%s/wal", abs))
		return true;
	if (room_of(abs, &d) != WALRUS_OK || room_of(wal, &w) != WALRUS_OK) {
		wr_log(WR_WARNING, "%s; starting as if there were room", walrus_errmsg());
		return true;
	}
	/* DIR/wal on another file system needs room there, not a reserve. */
	bool same = d.dev == w.dev, wal_short = !same && w.avail < need;
	const fs_room *tight = wal_short ? &w : &d;
	uint64_t want = wal_short ? need : 2 * need;
	bool room = d.avail >= need && !wal_short;
	if (engine_sh()->skip_end_ckpt) {
		go_read_only(tight, want, path, "the checkpoint failed nonetheless");
		return false;
	}
	bool held = reserve_held(path) >= need;
	const char *missing = engine_sh()->reserve_released ? "released for this start" : "missing";
	if (held && room)
		return true;
	if (held) {
		reserve_release(path, abs);
		wr_log(WR_LOG, "released the reserve \"%s\" for the end-of-recovery checkpoint",
		       path);
		go_read_only(tight, want, path, "released for this start's checkpoint");
		return !wal_short;
	}
	if (room && d.avail >= 2 * need) {
		if (reserve_make(path, abs, need) == WALRUS_OK)
			return true;
		wr_log(WR_WARNING, "could not make the reserve \"%s\": %s", path, walrus_errmsg());
		(void)room_of(abs, &d);
	}
	go_read_only(tight, want, path, missing);
	return room;
}

bool reserve_release_if_full(const char *abs, const wr_options *o)
{
	char path[PATH_MAX];
	uint64_t need = reserve_size(o);
	if (!reserve_disk_full(abs, o) ||
	    !wr_snprintf(path, sizeof(path), "%s/%s", abs, WR_RESERVE_FILE) ||
	    reserve_held(path) < need)
		return false;
	reserve_release(path, abs);
	wr_log(WR_WARNING, "the disk is full: released the reserve \"%s\" (%llu kB) for this start",
	       path, (unsigned long long)(need >> 10));
	return true;
}

bool reserve_disk_full(const char *abs, const wr_options *o)
{
	char wal[PATH_MAX];
	fs_room d = {0}, w = {0};
	if (!wr_snprintf(wal, sizeof(wal), "%s/wal", abs) || room_of(abs, &d) != WALRUS_OK ||
	    room_of(wal, &w) != WALRUS_OK)
		return false;
	return d.avail < reserve_size(o) || w.avail < reserve_size(o);
}

int reserve_refuse(const char *fn)
{
	return wr_error(WALRUS_ENOSPC, "%s: the instance is read-only: %s", fn,
	                engine_sh()->read_only_why);
}
