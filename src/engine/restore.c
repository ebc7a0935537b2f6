/*
 * restore.c - walrus_restore: a base backup (backup.c) copied into a new
 * data directory, the WAL that follows it gathered from an archive, and the
 * instance started once on it so that the startup process replays to the
 * target (DIR/walrus.recovery, whose format wal.h gives) and ends recovery
 * on a new timeline.
 *
 * NEWDIR carries walrus.restore-incomplete while it is copied; the marker
 * goes once the copy and walrus.recovery are durable.  From then on the
 * directory is "being recovered": opening it (again, after a kill) runs
 * the same recovery, which is correct.  A recovery that fails marks it
 * incomplete again, so that nobody mistakes it for a usable directory.
 */
#include "engine/backup_int.h"
#include "engine/engine.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "wal/wal.h"

typedef struct backup_label {
	wr_lsn start, end;
	uint32_t tli;
	uint64_t seg_size;
} backup_label;

/* What came from the archive: segments [first, last] (none when last < first). */
typedef struct gathered {
	wr_lsn first, last;
	uint64_t seg_size;
	wal_history h;
	char missing[WAL_ARCHIVE_NAME_LEN + 1]; /* the first one it lacked, at missing_lsn */
	wr_lsn missing_lsn;
} gathered;

typedef struct restore_target {
	const char *kind; /* "end", "lsn", "time", "name" */
	wr_lsn lsn;
	uint64_t time_us;
	const char *name;
	/* The timeline to follow: 0 the latest that descends from the backup's,
	 * else this one (current: the backup's own). */
	uint32_t tli;
	bool current;
} restore_target;

/* ---------------------------------------------------------------- target times */

static bool parse_fraction_us(const char **s, uint64_t *us)
{
	*us = 0;
	if (**s != '.')
		return true;
	(*s)++;
	uint64_t scale = 100000;
	if (!isdigit((unsigned char)**s))
		return false;
	for (; isdigit((unsigned char)**s); (*s)++) {
		*us += (uint64_t)(**s - '0') * scale;
		scale /= 10;
	}
	return true;
}

/* "@SECONDS[.FRACTION]" since the epoch. */
static bool parse_epoch(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long secs = strtoull(s, &end, 10);
	if (end == s || errno != 0 || !isdigit((unsigned char)*s))
		return false;
	const char *p = end;
	uint64_t us;
	if (!parse_fraction_us(&p, &us) || *p != '\0')
		return false;
	*out = (uint64_t)secs * 1000000 + us;
	return true;
}

/* "Z", "+HH:MM", "+HHMM", "+HH" (or '-') into seconds east of UTC. */
static bool parse_zone(const char *s, long *east)
{
	if (strcmp(s, "Z") == 0 || strcmp(s, "z") == 0) {
		*east = 0;
		return true;
	}
	int hh = 0, mm = 0, n = 0;
	if ((s[0] != '+' && s[0] != '-') ||
	    (sscanf(s + 1, "%2d:%2d%n", &hh, &mm, &n) != 2 &&
	     sscanf(s + 1, "%2d%2d%n", &hh, &mm, &n) != 2 &&
	     sscanf(s + 1, "%2d%n", &hh, &n) != 1) ||
	    s[1 + n] != '\0' || hh > 23 || mm > 59)
		return false;
	*east = (hh * 3600L + mm * 60L) * (s[0] == '-' ? -1 : 1);
	return true;
}

/* ISO 8601 "YYYY-MM-DD HH:MM:SS[.fff]" (or 'T'), local time or with a zone; "@SECONDS". */
static bool restore_parse_time(const char *s, uint64_t *out)
{
	if (s[0] == '@')
		return parse_epoch(s + 1, out);
	struct tm tm = {0};
	int n = 0;
	char sep;
	if (sscanf(s, "%4d-%2d-%2d%c%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &sep,
	           &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 7 ||
	    (sep != ' ' && sep != 'T'))
		return false;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	const char *p = s + n;
	uint64_t us;
	if (!parse_fraction_us(&p, &us))
		return false;
	time_t t;
	if (*p == '\0') {
		tm.tm_isdst = -1;
		t = mktime(&tm);
	} else {
		long east;
		if (!parse_zone(p, &east))
			return false;
		t = timegm(&tm) - east;
	}
	if (t == (time_t)-1 || t < 0)
		return false;
	*out = (uint64_t)t * 1000000 + us;
	return true;
}

static int check_timeline(const char *tl, restore_target *t)
{
	if (tl == NULL || strcmp(tl, "latest") == 0)
		return WALRUS_OK;
	if (strcmp(tl, "current") == 0) {
		t->current = true;
		return WALRUS_OK;
	}
	char *end;
	errno = 0;
	unsigned long long n = strtoull(tl, &end, 10);
	if (errno != 0 || end == tl || *end != '\0' || n == 0 || n > UINT32_MAX || tl[0] == '-')
		return wr_error(WALRUS_EINVAL,
		                "walrus_restore: bad target timeline \"%s\" (latest, current, or a "
		                "number from 1)",
		                tl);
	t->tli = (uint32_t)n;
	return WALRUS_OK;
}

static int check_target(const char *kind, const char *value, restore_target *t)
{
	memset(t, 0, sizeof(*t));
	t->kind = kind == NULL ? "end" : kind;
	if (strcmp(t->kind, "end") == 0)
		return WALRUS_OK;
	if (value == NULL || value[0] == '\0')
		return wr_error(WALRUS_EINVAL, "walrus_restore: target %s needs a value", t->kind);
	if (strcmp(t->kind, "lsn") == 0) {
		if (!wal_parse_lsn(value, &t->lsn))
			return wr_error(WALRUS_EINVAL,
			                "walrus_restore: bad target LSN \"%s\" (X/Y, hex)", value);
	} else if (strcmp(t->kind, "time") == 0) {
		if (!restore_parse_time(value, &t->time_us))
			return wr_error(WALRUS_EINVAL,
			                "walrus_restore: bad target time \"%s\" (\"YYYY-MM-DD "
			                "HH:MM:SS[.fff][Z|+HH:MM]\" or \"@SECONDS\")",
			                value);
	} else if (strcmp(t->kind, "name") == 0) {
		size_t len = strlen(value);
		if (len >= WAL_RESTORE_POINT_NAME || strchr(value, '\n') != NULL)
			return wr_error(WALRUS_EINVAL, "walrus_restore: bad restore point name");
		t->name = value;
	} else {
		return wr_error(WALRUS_EINVAL,
		                "walrus_restore: unknown target kind \"%s\" (end, lsn, time, name)",
		                t->kind);
	}
	return WALRUS_OK;
}

/* ---------------------------------------------------------------- the backup */

static bool label_value(const char *text, const char *key, char *buf, size_t len)
{
	size_t klen = strlen(key);
	for (const char *l = text; l != NULL && *l != '\0';
	     l = strchr(l, '\n'), l = l ? l + 1 : l) {
		if (strncmp(l, key, klen) != 0 || strncmp(l + klen, " = ", 3) != 0)
			continue;
		const char *v = l + klen + 3, *e = strchr(v, '\n');
		size_t n = e == NULL ? strlen(v) : (size_t)(e - v);
		if (n >= len)
			return false;
		memcpy(buf, v, n);
		buf[n] = '\0';
		return true;
	}
	return false;
}

static int read_small_file(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return wr_error(wr_errno_code(errno), "could not open \"%s\": %m", path);
	size_t n = fread(buf, 1, len - 1, f);
	int bad = ferror(f);
	fclose(f);
	if (bad)
		return wr_error(WALRUS_EIO, "could not read \"%s\"", path);
	buf[n] = '\0';
	return WALRUS_OK;
}

static int read_label(const char *backup, backup_label *l)
{
	char path[PATH_MAX], text[4096], v[64];
	if (!wr_snprintf(path, sizeof(path), "%s/%s", backup, BACKUP_INCOMPLETE))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", backup);
	if (access(path, F_OK) == 0)
		return wr_error(WALRUS_EINVAL,
		                "\"%s\" is an interrupted base backup (it holds %s): it cannot "
		                "be restored",
		                backup, BACKUP_INCOMPLETE);
	if (!wr_snprintf(path, sizeof(path), "%s/%s", backup, WAL_BACKUP_LABEL))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", backup);
	if (access(path, F_OK) != 0)
		return wr_error(WALRUS_EINVAL, "\"%s\" is not a base backup: it has no %s", backup,
		                WAL_BACKUP_LABEL);
	int rc = read_small_file(path, text, sizeof(text));
	if (rc != WALRUS_OK)
		return rc;
	bool ok = label_value(text, "start_lsn", v, sizeof(v)) && wal_parse_lsn(v, &l->start) &&
	          label_value(text, "end_lsn", v, sizeof(v)) && wal_parse_lsn(v, &l->end);
	ok = ok && label_value(text, "timeline", v, sizeof(v)) && sscanf(v, "%u", &l->tli) == 1 &&
	     l->tli > 0;
	unsigned long long seg = 0;
	ok = ok && label_value(text, "wal_segment_size", v, sizeof(v)) &&
	     sscanf(v, "%llu", &seg) == 1 && seg >= WAL_PAGE_SIZE && l->end > l->start;
	l->seg_size = seg;
	if (!ok)
		return wr_error(WALRUS_ECORRUPT, "\"%s\" is malformed", path);
	return WALRUS_OK;
}

static wr_lsn seg_of(const backup_label *l, wr_lsn lsn)
{
	return lsn - lsn % l->seg_size;
}

/* Every segment from the start's to the end's must have come with the backup. */
static int check_backup_wal(const char *newdir, const backup_label *l)
{
	char waldir[PATH_MAX], path[PATH_MAX];
	if (!wr_snprintf(waldir, sizeof(waldir), "%s/wal", newdir))
		return wr_error(WALRUS_EINVAL, "path too long");
	for (wr_lsn s = seg_of(l, l->start); s <= seg_of(l, l->end - 1); s += l->seg_size) {
		wal_segment_path(waldir, l->seg_size, s, path, sizeof(path));
		struct stat st;
		if (stat(path, &st) != 0 || (uint64_t)st.st_size != l->seg_size)
			return wr_error(WALRUS_ECORRUPT,
			                "the base backup lacks WAL segment %s (" WAL_LSN_FMT
			                "): a backup needs its WAL from " WAL_LSN_FMT
			                " to " WAL_LSN_FMT,
			                strrchr(path, '/') + 1, WAL_LSN_ARGS(s),
			                WAL_LSN_ARGS(l->start), WAL_LSN_ARGS(l->end));
	}
	return WALRUS_OK;
}

static bool skip_marker(const char *rel)
{
	return strcmp(rel, BACKUP_INCOMPLETE) == 0 || strcmp(rel, RESTORE_INCOMPLETE) == 0;
}

/* ---------------------------------------------------------------- the archive */

static int read_history(const char *newdir, const char *archive, uint32_t tli, wal_history *h)
{
	char name[32], path[PATH_MAX];
	wal_history_name(tli, name, sizeof(name));
	if (!wr_snprintf(path, sizeof(path), "%s/wal/%s", newdir, name))
		return wr_error(WALRUS_EINVAL, "path too long");
	if (tli > 1 && access(path, F_OK) != 0 && archive != NULL &&
	    !wr_snprintf(path, sizeof(path), "%s/%s", archive, name))
		return wr_error(WALRUS_EINVAL, "path too long");
	return wal_history_read(path, tli, h);
}

/* Why timeline @h cannot be followed from the backup (NULL: it can). */
static const char *unfollowable(const backup_label *l, const wal_history *h)
{
	if (wal_history_contains(h, l->tli, l->end))
		return NULL;
	for (int i = 0; i < h->n; i++)
		if (h->e[i].tli == l->tli)
			return "it branched off the backup's timeline before the backup's end";
	return "the backup's timeline is not in its history";
}

/*
 * The timeline the restore follows (PostgreSQL's recovery_target_timeline):
 * the backup's own (current), a given one, or the highest the archive
 * holds whose history passes through the backup (latest, the default):
 * a backup taken before a failover recovers the writes made after it.
 */
static int pick_timeline(const char *newdir, const char *archive, const backup_label *l,
                         const restore_target *t, wal_history *h)
{
	if (t->current || (t->tli == 0 && archive == NULL))
		return read_history(newdir, archive, l->tli, h);
	if (t->tli != 0) {
		int rc = read_history(newdir, archive, t->tli, h);
		const char *why = rc == WALRUS_OK ? unfollowable(l, h) : NULL;
		if (rc != WALRUS_OK || why == NULL)
			return rc;
		return wr_error(
		    WALRUS_EINVAL,
		    "cannot restore the backup (timeline %u, consistent from " WAL_LSN_FMT
		    ") onto timeline %u: %s",
		    l->tli, WAL_LSN_ARGS(l->end), t->tli, why);
	}
	for (uint32_t tli = wal_history_highest(archive, l->tli); tli > l->tli; tli--) {
		char name[32], path[PATH_MAX];
		wal_history_name(tli, name, sizeof(name));
		if (!wr_snprintf(path, sizeof(path), "%s/%s", archive, name))
			return wr_error(WALRUS_EINVAL, "path too long");
		if (access(path, F_OK) != 0 || wal_history_read(path, tli, h) != WALRUS_OK)
			continue;
		const char *why = unfollowable(l, h);
		if (why == NULL) {
			wr_log(WR_LOG,
			       "restore: following timeline %u, the latest in the archive that "
			       "descends from the backup's timeline %u",
			       tli, l->tli);
			return WALRUS_OK;
		}
		wr_log(WR_LOG, "restore: timeline %u in the archive is not followed: %s", tli, why);
	}
	return read_history(newdir, archive, l->tli, h);
}

/* NEWDIR/wal gets the followed timeline's history file: the new one branches off it. */
static int copy_history(const char *newdir, const char *archive, uint32_t tli)
{
	char name[32], from[PATH_MAX], to[PATH_MAX];
	wal_history_name(tli, name, sizeof(name));
	if (tli <= 1 || !wr_snprintf(to, sizeof(to), "%s/wal/%s", newdir, name) ||
	    access(to, F_OK) == 0 || archive == NULL ||
	    !wr_snprintf(from, sizeof(from), "%s/%s", archive, name))
		return WALRUS_OK;
	return fc_copy_file(from, to, UINT64_MAX, 0, NULL, NULL);
}

/* 1: the same bytes in [off, off + len) of both files, 0: not, else an error code (set). */
static int same_range(int a, int b, const char *an, const char *bn, uint64_t off, uint64_t len,
                      char *buf)
{
	while (len > 0) {
		size_t n = (size_t)WR_MIN(len, (uint64_t)1 << 20);
		ssize_t ga = pread(a, buf, n, (off_t)off),
		        gb = pread(b, buf + (1 << 20), n, (off_t)off);
		if (ga < 0 || gb < 0)
			return wr_error(WALRUS_EIO, "could not read \"%s\": %m", ga < 0 ? an : bn);
		if ((size_t)ga != n || (size_t)gb != n || memcmp(buf, buf + (1 << 20), n) != 0)
			return 0;
		off += n;
		len -= n;
	}
	return 1;
}

/*
 * The archive's copy of the backup's last segment replaces the backup's,
 * which stops at the backup's end: up to there both must hold the same WAL,
 * or the archive's belongs to another history.  The page holding the end
 * was written again since (its header says how much WAL was durable then):
 * there only the WAL after the header counts.
 */
static int same_prefix(const char *archived, const char *local, uint64_t seg_size, wr_lsn seg_start,
                       wr_lsn end)
{
	int a = open(archived, O_RDONLY | O_CLOEXEC), b = open(local, O_RDONLY | O_CLOEXEC);
	char *buf = malloc(2 << 20);
	int rc = WALRUS_OK, same = 1;
	uint64_t last = (end - seg_start) - (end - seg_start) % WAL_PAGE_SIZE;
	uint64_t hdr = wal_page_header_size(seg_start + last, seg_size);
	if (a < 0 || b < 0 || buf == NULL)
		rc = buf == NULL ? wr_error(WALRUS_ENOMEM, "out of memory")
		                 : wr_error(wr_errno_code(errno), "could not open \"%s\": %m",
		                            a < 0 ? archived : local);
	if (rc == WALRUS_OK)
		same = same_range(a, b, archived, local, 0, last, buf);
	if (rc == WALRUS_OK && same == 1 && end - seg_start > last + hdr)
		same = same_range(a, b, archived, local, last + hdr, end - seg_start - last - hdr,
		                  buf);
	if (same < 0)
		rc = same;
	else if (rc == WALRUS_OK && same == 0)
		rc = wr_error(
		    WALRUS_ECORRUPT,
		    "archived WAL segment \"%s\" differs from the backup's copy \"%s\" "
		    "before the backup's end: it belongs to another history (another "
		    "instance, or a timeline that reused this number); nothing was replaced",
		    archived, local);
	free(buf);
	if (a >= 0)
		close(a);
	if (b >= 0)
		close(b);
	return rc;
}

/* Copies ARCHIVE/NAME over NEWDIR/wal/<segment> (a temporary name first). */
static int fetch_segment(const char *src, const char *newdir, const backup_label *l, wr_lsn s)
{
	char waldir[PATH_MAX], to[PATH_MAX], tmp[PATH_MAX + 8];
	if (!wr_snprintf(waldir, sizeof(waldir), "%s/wal", newdir))
		return wr_error(WALRUS_EINVAL, "path too long");
	wal_segment_path(waldir, l->seg_size, s, to, sizeof(to));
	if (!wr_snprintf(tmp, sizeof(tmp), "%s.tmp", to))
		return wr_error(WALRUS_EINVAL, "path too long");
	int rc = fc_unlink(tmp);
	if (rc == WALRUS_OK)
		rc = fc_copy_file(src, tmp, UINT64_MAX, 0, NULL, NULL);
	if (rc == WALRUS_OK && rename(tmp, to) != 0)
		rc = wr_error(wr_errno_code(errno), "could not rename \"%s\": %m", tmp);
	return rc;
}

static int gather_wal(const char *newdir, const char *archive, const backup_label *l,
                      const restore_target *t, gathered *g)
{
	int rc = pick_timeline(newdir, archive, l, t, &g->h);
	if (rc == WALRUS_OK)
		rc = copy_history(newdir, archive, g->h.tli);
	if (rc != WALRUS_OK)
		return rc;
	uint64_t n = 0;
	g->seg_size = l->seg_size;
	g->first = seg_of(l, l->end - 1);
	for (wr_lsn s = g->first;; s += l->seg_size) {
		char name[WAL_ARCHIVE_NAME_LEN + 1], src[PATH_MAX];
		wal_archive_name(wal_history_tli_for(&g->h, s, l->seg_size), s, name, sizeof(name));
		if (!wr_snprintf(src, sizeof(src), "%s/%s", archive, name))
			return wr_error(WALRUS_EINVAL, "path too long");
		struct stat st;
		if (stat(src, &st) != 0) {
			if (errno != ENOENT)
				return wr_error(wr_errno_code(errno), "could not stat \"%s\": %m",
				                src);
			wr_snprintf(g->missing, sizeof(g->missing), "%s", name);
			g->missing_lsn = s;
			break;
		}
		if ((uint64_t)st.st_size != l->seg_size)
			return wr_error(
			    WALRUS_ECORRUPT,
			    "archived WAL segment \"%s\" has %llu bytes, not the segment "
			    "size %llu",
			    src, (unsigned long long)st.st_size, (unsigned long long)l->seg_size);
		if (s == g->first) {
			char local[PATH_MAX], waldir[PATH_MAX];
			if (!wr_snprintf(waldir, sizeof(waldir), "%s/wal", newdir))
				return wr_error(WALRUS_EINVAL, "path too long");
			wal_segment_path(waldir, l->seg_size, s, local, sizeof(local));
			if ((rc = same_prefix(src, local, l->seg_size, s, l->end)) != WALRUS_OK)
				return rc;
		}
		if ((rc = fetch_segment(src, newdir, l, s)) != WALRUS_OK)
			return rc;
		g->last = s;
		n++;
	}
	wr_log(WR_LOG, "restore: %llu WAL segments from the archive \"%s\"", (unsigned long long)n,
	       archive);
	return WALRUS_OK;
}

static int write_recovery(const char *newdir, const backup_label *l, const restore_target *t,
                          uint32_t follow_tli, uint32_t new_tli)
{
	char text[512], extra[160] = "", path[PATH_MAX];
	if (strcmp(t->kind, "lsn") == 0)
		wr_snprintf(extra, sizeof(extra), "target_lsn = " WAL_LSN_FMT "\n",
		            WAL_LSN_ARGS(t->lsn));
	else if (strcmp(t->kind, "time") == 0)
		wr_snprintf(extra, sizeof(extra), "target_time = %llu\n",
		            (unsigned long long)t->time_us);
	else if (strcmp(t->kind, "name") == 0)
		wr_snprintf(extra, sizeof(extra), "target_name = %s\n", t->name);
	if (!wr_snprintf(text, sizeof(text),
	                 "# written by walrus restore\nbackup_end_lsn = " WAL_LSN_FMT
	                 "\ntarget = %s\n%snew_timeline = %u\ntimeline = %u\n",
	                 WAL_LSN_ARGS(l->end), t->kind, extra, new_tli, follow_tli) ||
	    !wr_snprintf(path, sizeof(path), "%s/%s", newdir, WAL_RECOVERY_FILE))
		return wr_error(WALRUS_EINVAL, "path too long");
	return fc_write_text(path, text, true);
}

/* ---------------------------------------------------------------- the steps */

static int mark(const char *newdir, bool incomplete)
{
	char path[PATH_MAX];
	if (!wr_snprintf(path, sizeof(path), "%s/%s", newdir, RESTORE_INCOMPLETE))
		return wr_error(WALRUS_EINVAL, "path too long");
	int rc = incomplete ? fc_write_text(path, "", true) : fc_unlink(path);
	if (rc == WALRUS_OK)
		rc = fc_fsync_path(newdir);
	return rc;
}

/* Copy, gather, write walrus.recovery: everything before the start. */
static int prepare(const char *backup, const char *archive, const restore_target *t,
                   const char *newdir, gathered *g, bool *made)
{
	backup_label l;
	int rc = read_label(backup, &l);
	if (rc == WALRUS_OK)
		rc = fc_prepare_dest(newdir, RESTORE_INCOMPLETE, "restore directory");
	*made = rc == WALRUS_OK;
	if (rc == WALRUS_OK)
		rc = fc_copy_tree(backup, newdir, skip_marker, NULL, NULL);
	if (rc == WALRUS_OK)
		rc = fc_failpoint("restore-copied", newdir);
	if (rc == WALRUS_OK)
		rc = check_backup_wal(newdir, &l);
	if (rc == WALRUS_OK && archive != NULL)
		rc = gather_wal(newdir, archive, &l, t, g);
	else if (rc == WALRUS_OK)
		rc = read_history(newdir, NULL, l.tli, &g->h);
	if (rc == WALRUS_OK)
		rc = fc_failpoint("restore-gathered", newdir);
	if (rc != WALRUS_OK)
		return rc;
	char waldir[PATH_MAX];
	if (!wr_snprintf(waldir, sizeof(waldir), "%s/wal", newdir))
		return wr_error(WALRUS_EINVAL, "path too long");
	uint32_t tli = wal_history_highest(archive, wal_history_highest(waldir, l.tli)) + 1;
	rc = write_recovery(newdir, &l, t, g->h.tli, tli);
	if (rc == WALRUS_OK)
		rc = fc_sync_tree(newdir);
	if (rc == WALRUS_OK)
		rc = mark(newdir, false);
	return rc;
}

/*
 * A recovery error names the segment in NEWDIR/wal: when that one came from
 * the archive, its archive name too; when the WAL ran out, the segment the
 * archive lacks.
 */
static int recovery_error(int rc, const char *msg, const gathered *g)
{
	char note[128] = "";
	const char *w = strstr(msg, "/wal/");
	unsigned long long seg = 0;
	int n = 0;
	if (w == NULL || sscanf(w + 5, "%16llx%n", &seg, &n) != 1 || n != 16)
		return wr_error(rc, "%s", msg);
	if (g->last >= g->first && seg >= g->first && seg <= g->last) {
		char name[WAL_ARCHIVE_NAME_LEN + 1];
		wal_archive_name(wal_history_tli_for(&g->h, seg, g->seg_size), seg, name,
		                 sizeof(name));
		wr_snprintf(note, sizeof(note), " (archived segment %s)", name);
	} else if (g->missing[0] != '\0' && seg == g->missing_lsn) {
		wr_snprintf(note, sizeof(note), " (the WAL archive has no segment %s)", g->missing);
	}
	return wr_error(rc, "%s%s", msg, note);
}

/* Starts the instance once: the startup process replays to the target. */
static int recover(const char *newdir, const gathered *g)
{
	walrus_opts *o = walrus_opts_new();
	if (o == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory");
	walrus *db = NULL;
	int rc = walrus_opts_set(o, "supervisor_linger", "0");
	if (rc == WALRUS_OK)
		rc = walrus_open(newdir, o, &db);
	walrus_opts_free(o);
	if (rc == WALRUS_OK) {
		rc = walrus_close(db);
		int src = walrus_stop(newdir, WALRUS_STOP_FAST, 1);
		if (rc == WALRUS_OK && src != WALRUS_OK && src != WALRUS_ENOTRUNNING)
			rc = src;
		return rc;
	}
	char msg[1024];
	wr_snprintf(msg, sizeof(msg), "%s", walrus_errmsg());
	/* a supervisor may be left: gone either way */
	(void)walrus_stop(newdir, WALRUS_STOP_FAST, 1);
	return recovery_error(rc, msg, g);
}

int walrus_restore(const char *backup, const char *wal_archive, const char *target_kind,
                   const char *target_value, const char *newdir)
{
	return walrus_restore_timeline(backup, wal_archive, target_kind, target_value, NULL,
	                               newdir);
}

int walrus_restore_timeline(const char *backup, const char *wal_archive, const char *target_kind,
                            const char *target_value, const char *target_timeline,
                            const char *newdir)
{
	wr_error_clear();
	if (backup == NULL || newdir == NULL || newdir[0] == '\0')
		return wr_error(WALRUS_EINVAL, "walrus_restore: backup and newdir are required");
	restore_target t;
	int rc = check_target(target_kind, target_value, &t);
	if (rc == WALRUS_OK)
		rc = check_timeline(target_timeline, &t);
	if (rc != WALRUS_OK)
		return rc;
	gathered *g = calloc(1, sizeof(*g));
	if (g == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory");
	g->first = 1; /* nothing gathered: last < first */
	bool made = false;
	rc = prepare(backup, wal_archive, &t, newdir, g, &made);
	if (rc == WALRUS_OK)
		rc = recover(newdir, g);
	free(g);
	if (rc != WALRUS_OK) {
		char msg[1024];
		wr_snprintf(msg, sizeof(msg), "%s", walrus_errmsg());
		if (made) /* not a directory that was refused */
			(void)mark(newdir, true);
		wr_error(rc, "%s", msg);
		return rc;
	}
	char path[PATH_MAX];
	if (wr_snprintf(path, sizeof(path), "%s/%s", newdir, WAL_BACKUP_LABEL) &&
	    fc_unlink(path) == WALRUS_OK)
		(void)fc_fsync_path(newdir);
	return WALRUS_OK;
}
