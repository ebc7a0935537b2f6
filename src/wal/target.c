/*
 * target.c - archive recovery: where replay of a restored base backup stops,
 * and what happens there.
 *
 * `walrus restore` leaves DIR/walrus.recovery (format in wal.h).  Replay
 * must get at least to the backup's end (before it the copied data files
 * may mix pages of different moments) and stops at the target.  The WAL
 * after the stopping point belongs to a history that is being abandoned:
 * it is cut off (the rest of its segment zeroed, later segments removed) so
 * that nothing of it can be read as part of the new timeline, which starts
 * there.  The cut point is written into the recovery file before anything
 * is cut, so a crash at any step repeats the same cut.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fdcache/fdcache.h"
#include "wal/wal_int.h"

static int target_bad(const char *path, int lineno, const char *why)
{
	return wr_error(WALRUS_ECORRUPT, "recovery file \"%s\", line %d: %s", path, lineno, why);
}

static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	size_t n = strlen(s);
	while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
		s[--n] = '\0';
	if (n >= 2 && s[0] == '\'' && s[n - 1] == '\'') {
		s[n - 1] = '\0';
		s++;
	}
	return s;
}

static bool parse_u64(const char *v, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long x = strtoull(v, &end, 10);
	if (errno != 0 || end == v || *end != '\0' || v[0] == '-')
		return false;
	*out = x;
	return true;
}

static int target_kind(const char *v, enum wal_target_kind *k)
{
	static const char *names[] = {"end", "lsn", "time", "name"};
	for (int i = 0; i < 4; i++)
		if (strcmp(v, names[i]) == 0) {
			*k = (enum wal_target_kind)i;
			return 0;
		}
	return -1;
}

static int target_line(wal_target *t, const char *path, int lineno, char *name, char *value)
{
	uint64_t n;
	if (strcmp(name, "backup_end_lsn") == 0 && wal_parse_lsn(value, &t->backup_end))
		return 0;
	if (strcmp(name, "target") == 0 && target_kind(value, &t->kind) == 0)
		return 0;
	if (strcmp(name, "target_lsn") == 0 && wal_parse_lsn(value, &t->lsn))
		return 0;
	if (strcmp(name, "target_time") == 0 && parse_u64(value, &t->time_us))
		return 0;
	if (strcmp(name, "cut_lsn") == 0 && wal_parse_lsn(value, &t->cut))
		return 0;
	if (strcmp(name, "target_name") == 0 && strlen(value) > 0 &&
	    strlen(value) < sizeof(t->name)) {
		memcpy(t->name, value, strlen(value) + 1);
		return 0;
	}
	if (strcmp(name, "new_timeline") == 0 && parse_u64(value, &n) && n >= 2 &&
	    n <= UINT32_MAX) {
		t->new_tli = (uint32_t)n;
		return 0;
	}
	if (strcmp(name, "timeline") == 0 && parse_u64(value, &n) && n >= 1 && n <= UINT32_MAX) {
		t->follow_tli = (uint32_t)n;
		return 0;
	}
	char why[256];
	wr_snprintf(why, sizeof(why), "bad setting \"%s\" = \"%s\"", name, value);
	return target_bad(path, lineno, why);
}

static int target_check(const wal_target *t, const char *path)
{
	const char *missing = t->new_tli == 0                                    ? "new_timeline"
	                      : t->backup_end == 0                               ? "backup_end_lsn"
	                      : t->kind == WAL_TARGET_LSN && t->lsn == 0         ? "target_lsn"
	                      : t->kind == WAL_TARGET_TIME && t->time_us == 0    ? "target_time"
	                      : t->kind == WAL_TARGET_NAME && t->name[0] == '\0' ? "target_name"
	                                                                         : NULL;
	if (missing != NULL)
		return wr_error(WALRUS_ECORRUPT, "recovery file \"%s\" has no %s", path, missing);
	return 0;
}

int wal_target_read(const char *datadir, wal_target *t)
{
	char path[4096], line[1024];
	memset(t, 0, sizeof(*t));
	if (!wr_snprintf(path, sizeof(path), "%s/%s", datadir, WAL_RECOVERY_FILE))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", datadir);
	FILE *f = fopen(path, "re");
	if (f == NULL && errno == ENOENT)
		return 0;
	if (f == NULL)
		return wr_error(wr_errno_code(errno), "could not open \"%s\": %m", path);
	t->active = true;
	int rc = 0, lineno = 0;
	while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
		lineno++;
		line[strcspn(line, "\n#")] = '\0';
		char *eq = strchr(line, '=');
		if (eq == NULL) {
			if (trim(line)[0] != '\0')
				rc = target_bad(path, lineno, "expected \"name = value\"");
			continue;
		}
		*eq = '\0';
		rc = target_line(t, path, lineno, trim(line), trim(eq + 1));
	}
	if (rc == 0 && ferror(f))
		rc = wr_error(WALRUS_EIO, "could not read \"%s\"", path);
	fclose(f);
	return rc == 0 ? target_check(t, path) : rc;
}

void wal_target_describe(const wal_target *t, char *buf, size_t len)
{
	switch (t->kind) {
	case WAL_TARGET_LSN:
		wr_snprintf(buf, len, "LSN " WAL_LSN_FMT, WAL_LSN_ARGS(t->lsn));
		break;
	case WAL_TARGET_TIME: {
		time_t s = (time_t)(t->time_us / 1000000);
		struct tm tm;
		char when[64] = "?";
		if (gmtime_r(&s, &tm) != NULL)
			strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
		wr_snprintf(buf, len, "time %s.%06" PRIu64 " UTC", when, t->time_us % 1000000);
		break;
	}
	case WAL_TARGET_NAME:
		wr_snprintf(buf, len, "restore point \"%s\"", t->name);
		break;
	default:
		wr_snprintf(buf, len, "the end of the WAL");
	}
}

bool wal_target_stop_before(const wal_target *t, const wal_decoded *rec)
{
	if (t->cut != 0)
		return rec->end > t->cut;
	if (t->kind == WAL_TARGET_LSN)
		return rec->end > t->lsn;
	if (t->kind == WAL_TARGET_TIME) {
		uint64_t ms = wal_record_time_ms(&rec->hdr);
		return ms != 0 && ms * 1000 > t->time_us;
	}
	return false;
}

/* Whether @rec is a restore point; its name into @rp. */
static bool restore_point(const wal_decoded *rec, wal_restore_point_rec *rp)
{
	if (rec->hdr.rmid != RM_XLOG || rec->hdr.info != XLOG_RESTORE_POINT ||
	    rec->main_len != sizeof(wal_restore_point_rec))
		return false;
	memcpy(rp, rec->main_data, sizeof(*rp));
	rp->name[sizeof(rp->name) - 1] = '\0';
	return true;
}

bool wal_target_stop_after(const wal_target *t, const wal_decoded *rec)
{
	wal_restore_point_rec rp;
	if (t->cut != 0 || t->kind != WAL_TARGET_NAME || !restore_point(rec, &rp))
		return false;
	return strncmp(rp.name, t->name, sizeof(rp.name)) == 0;
}

void wal_target_note(wal_target *t, const wal_decoded *rec)
{
	wal_restore_point_rec rp;
	size_t used = strlen(t->passed);
	if (t->kind != WAL_TARGET_NAME || !restore_point(rec, &rp) ||
	    used + strlen(rp.name) + 8 >= sizeof(t->passed))
		return; /* the first ones are enough to show what names look like */
	wr_snprintf(t->passed + used, sizeof(t->passed) - used, "%s\"%s\"", used ? ", " : "",
	            rp.name);
}

int wal_target_missed(const wal_target *t, wr_lsn from, wr_lsn end, const char *why)
{
	char desc[160];
	wal_target_describe(t, desc, sizeof(desc));
	if (t->kind == WAL_TARGET_NAME)
		return wr_error(WALRUS_ENOTFOUND,
		                "restore point \"%s\" not found in the WAL from " WAL_LSN_FMT
		                " to " WAL_LSN_FMT " (restore points there: %s); the WAL ends "
		                "there: %s",
		                t->name, WAL_LSN_ARGS(from), WAL_LSN_ARGS(end),
		                t->passed[0] ? t->passed : "none", why);
	return wr_error(
	    WALRUS_ENOTFOUND,
	    "the recovery target (%s) lies past the end of the WAL, which goes from " WAL_LSN_FMT
	    " to " WAL_LSN_FMT ": %s",
	    desc, WAL_LSN_ARGS(from), WAL_LSN_ARGS(end), why);
}

bool wal_target_reached_at_end(const wal_target *t, wr_lsn end)
{
	if (t->cut != 0)
		return end == t->cut;
	return t->kind == WAL_TARGET_END || (t->kind == WAL_TARGET_LSN && end == t->lsn);
}

/* ---------------------------------------------------------------- cutting the WAL */

/* Rewrites the recovery file with the cut point, durably (temp, fsync, rename, fsync DIR). */
static int target_save_cut(const char *datadir, const wal_target *t, wr_lsn cut)
{
	char text[512];
	wr_snprintf(text, sizeof(text),
	            "# the point where archive recovery stopped: recovery stops here again\n"
	            "backup_end_lsn = " WAL_LSN_FMT "\ntarget = lsn\ntarget_lsn = " WAL_LSN_FMT
	            "\ncut_lsn = " WAL_LSN_FMT "\nnew_timeline = %" PRIu32 "\ntimeline = %" PRIu32
	            "\n",
	            WAL_LSN_ARGS(t->backup_end), WAL_LSN_ARGS(cut), WAL_LSN_ARGS(cut), t->new_tli,
	            t->follow_tli != 0 ? t->follow_tli : 1);
	return wal_write_file(datadir, WAL_RECOVERY_FILE, text);
}

static int zero_tail(const char *path, uint64_t from, uint64_t seg_size)
{
	static const char zeros[64 * 1024];
	fdc_file f;
	int rc = fdc_open(path, O_RDWR, 0, &f);
	if (rc != 0)
		return rc;
	for (uint64_t off = from; rc == 0 && off < seg_size;) {
		size_t n = (size_t)WR_MIN(sizeof(zeros), seg_size - off);
		rc = fdc_pwrite(f, zeros, n, (off_t)off);
		off += n;
	}
	if (rc == 0)
		rc = fdc_fsync(f);
	int crc = fdc_close(f);
	return rc != 0 ? rc : crc;
}

/* Removes every segment that starts at or after @from. */
static int remove_later(const char *waldir, uint64_t seg_size, wr_lsn from, int *removed)
{
	DIR *d = opendir(waldir);
	if (d == NULL)
		return wr_error(wr_errno_code(errno), "could not open directory \"%s\": %m",
		                waldir);
	int rc = 0;
	struct dirent *e;
	while (rc == 0 && (e = readdir(d)) != NULL) {
		wr_lsn start;
		char path[4096];
		if (!wal_segment_parse_name(e->d_name, seg_size, &start) || start < from)
			continue;
		wal_segment_path(waldir, seg_size, start, path, sizeof(path));
		rc = fdc_unlink(path);
		(*removed)++;
	}
	closedir(d);
	return rc;
}

int wal_cut_after(const char *waldir, wr_lsn cut, uint64_t seg_size, int *removed)
{
	char path[4096];
	wr_lsn seg_start = cut - cut % seg_size;
	int rc = 0;
	*removed = 0;
	if (cut % seg_size != 0) {
		wal_segment_path(waldir, seg_size, seg_start, path, sizeof(path));
		rc = zero_tail(path, cut % seg_size, seg_size);
	}
	if (rc == 0)
		rc = remove_later(waldir, seg_size,
		                  cut % seg_size == 0 ? cut : seg_start + seg_size, removed);
	if (rc == 0 && *removed > 0 && fdc_fsync_path(waldir) != 0)
		wr_panic("could not fsync the WAL directory \"%s\": %s", waldir, walrus_errmsg());
	return rc;
}

int wal_target_cut(const char *datadir, const wal_target *t, wr_lsn cut, uint64_t seg_size)
{
	char waldir[4096];
	int removed = 0;
	wr_snprintf(waldir, sizeof(waldir), "%s/wal", datadir);
	int rc = target_save_cut(datadir, t, cut);
	if (rc == 0)
		rc = wal_cut_after(waldir, cut, seg_size, &removed);
	if (rc == 0)
		wr_log(WR_LOG,
		       "archive recovery: the WAL after " WAL_LSN_FMT
		       " was cut off (%d later segment(s) removed): timeline %" PRIu32
		       " starts there",
		       WAL_LSN_ARGS(cut), removed, t->new_tli);
	return rc;
}
