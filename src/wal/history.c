/*
 * history.c - archive names and timeline history files.
 *
 * A point-in-time recovery ends replay before the end of the WAL it was
 * given, so the WAL written afterwards reuses LSNs that the old history also
 * used.  PostgreSQL's answer, kept here: a timeline number in every archived
 * name, and a small history file per timeline that says where it branched
 * from its parent.  A restore follows the history of the timeline it
 * recovers and so never mixes segments of two histories.  The file is
 * written once (temp file, fsync, rename, fsync the directory) and never
 * changed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fdcache/fdcache.h"
#include "wal/wal.h"

void wal_archive_name(uint32_t tli, wr_lsn seg_start, char *buf, size_t len)
{
	wr_snprintf(buf, len, "%08" PRIX32 "%016" PRIX64, tli, (uint64_t)seg_start);
}

static bool parse_hex(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (d < 0)
			return false;
		v = v << 4 | (uint64_t)d;
	}
	*out = v;
	return true;
}

bool wal_archive_parse_name(const char *name, uint32_t *tli, wr_lsn *seg_start)
{
	uint64_t t, s;
	if (strlen(name) != WAL_ARCHIVE_NAME_LEN || !parse_hex(name, 8, &t) ||
	    !parse_hex(name + 8, 16, &s) || t == 0)
		return false;
	*tli = (uint32_t)t;
	*seg_start = s;
	return true;
}

void wal_history_name(uint32_t tli, char *buf, size_t len)
{
	wr_snprintf(buf, len, "%08" PRIX32 ".history", tli);
}

bool wal_history_parse_name(const char *name, uint32_t *tli)
{
	uint64_t t;
	if (strlen(name) != 16 || strcmp(name + 8, ".history") != 0 || !parse_hex(name, 8, &t) ||
	    t == 0)
		return false;
	*tli = (uint32_t)t;
	return true;
}

uint32_t wal_history_highest(const char *dir, uint32_t tli)
{
	DIR *d = dir == NULL || dir[0] == '\0' ? NULL : opendir(dir);
	if (d == NULL)
		return tli;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		uint32_t t = 0;
		wr_lsn s;
		if (wal_archive_parse_name(de->d_name, &t, &s) ||
		    wal_history_parse_name(de->d_name, &t))
			tli = t > tli ? t : tli;
	}
	closedir(d);
	return tli;
}

bool wal_parse_lsn(const char *s, wr_lsn *out)
{
	unsigned hi, lo;
	int used = 0;
	if (sscanf(s, "%X/%X%n", &hi, &lo, &used) != 2 || s[used] != '\0')
		return false;
	*out = (uint64_t)hi << 32 | lo;
	return true;
}

static int history_line(wal_history *h, const char *path, int lineno, char *line)
{
	char *tab1 = strchr(line, '\t');
	char *tab2 = tab1 ? strchr(tab1 + 1, '\t') : NULL;
	char *end;
	if (tab2 == NULL)
		return wr_error(WALRUS_ECORRUPT,
		                "timeline history \"%s\", line %d: expected "
		                "\"PARENT<TAB>X/Y<TAB>reason\"",
		                path, lineno);
	*tab1 = *tab2 = '\0';
	errno = 0;
	unsigned long parent = strtoul(line, &end, 10);
	wr_lsn at;
	if (errno != 0 || *end != '\0' || parent == 0 || parent >= h->tli ||
	    !wal_parse_lsn(tab1 + 1, &at))
		return wr_error(WALRUS_ECORRUPT,
		                "timeline history \"%s\", line %d: bad timeline "
		                "or LSN",
		                path, lineno);
	if (h->n > 0 && (parent <= h->e[h->n - 1].tli || at < h->e[h->n - 1].end))
		return wr_error(WALRUS_ECORRUPT,
		                "timeline history \"%s\", line %d: timelines "
		                "and LSNs must increase",
		                path, lineno);
	if (h->n == WAL_HISTORY_MAX)
		return wr_error(WALRUS_ECORRUPT, "timeline history \"%s\": more than %d ancestors",
		                path, WAL_HISTORY_MAX);
	h->e[h->n].tli = (uint32_t)parent;
	h->e[h->n].end = at;
	h->n++;
	return WALRUS_OK;
}

int wal_history_read(const char *path, uint32_t tli, wal_history *h)
{
	memset(h, 0, sizeof(*h));
	h->tli = tli;
	if (tli <= 1)
		return WALRUS_OK;
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return wr_error(wr_errno_code(errno), "could not open timeline history \"%s\": %m",
		                path);
	char line[512];
	int lineno = 0, rc = WALRUS_OK;
	while (rc == WALRUS_OK && fgets(line, sizeof(line), f) != NULL) {
		lineno++;
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '\0' || line[0] == '#')
			continue;
		rc = history_line(h, path, lineno, line);
	}
	if (rc == WALRUS_OK && ferror(f))
		rc = wr_error(WALRUS_EIO, "could not read timeline history \"%s\"", path);
	fclose(f);
	return rc;
}

uint32_t wal_history_tli_for(const wal_history *h, wr_lsn seg_start, uint64_t seg_size)
{
	/* The segment holding a branch point belongs to the child: it carries the
	 * parent's WAL up to the branch and the child's after it. */
	for (int i = 0; i < h->n; i++)
		if (seg_start + seg_size <= h->e[i].end)
			return h->e[i].tli;
	return h->tli;
}

void wal_history_at(wal_history *h, wr_lsn lsn)
{
	/* WAL before e[i].end is e[i].tli's (or an older ancestor's): a point at
	 * or before the last branch lies on the parent. */
	while (h->n > 0 && lsn <= h->e[h->n - 1].end) {
		h->tli = h->e[h->n - 1].tli;
		h->n--;
	}
}

bool wal_history_contains(const wal_history *h, uint32_t tli, wr_lsn upto)
{
	if (h->tli == tli)
		return true;
	for (int i = 0; i < h->n; i++)
		if (h->e[i].tli == tli)
			return upto <= h->e[i].end;
	return false;
}

int wal_write_file(const char *dir, const char *name, const char *text)
{
	char tmp[PATH_MAX], path[PATH_MAX];
	fdc_file f;
	if (!wr_snprintf(path, sizeof(path), "%s/%s", dir, name) ||
	    !wr_snprintf(tmp, sizeof(tmp), "%s/%s.tmp", dir, name))
		return wr_error(WALRUS_EINVAL, "path too long in \"%s\"", dir);
	int rc = fdc_open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600, &f);
	if (rc != WALRUS_OK)
		return rc;
	rc = fdc_pwrite(f, text, strlen(text), 0);
	if (rc == WALRUS_OK)
		rc = fdc_fsync(f);
	fdc_clear_dirty(f); /* synced (or failed and we give up the file) */
	int rc2 = fdc_close(f);
	if (rc == WALRUS_OK)
		rc = rc2;
	if (rc == WALRUS_OK)
		rc = fdc_rename(tmp, path);
	if (rc == WALRUS_OK)
		rc = fdc_fsync_path(dir);
	return rc;
}

int wal_history_write(const char *waldir, const wal_history *parent, uint32_t child, wr_lsn branch,
                      const char *reason)
{
	char name[32], text[WAL_HISTORY_MAX * 96 + 256];
	size_t used = 0;
	for (int i = 0; i < parent->n; i++)
		used += (size_t)snprintf(text + used, sizeof(text) - used,
		                         "%" PRIu32 "\t" WAL_LSN_FMT "\tfrom an earlier history\n",
		                         parent->e[i].tli, WAL_LSN_ARGS(parent->e[i].end));
	if (!wr_snprintf(text + used, sizeof(text) - used, "%" PRIu32 "\t" WAL_LSN_FMT "\t%s\n",
	                 parent->tli, WAL_LSN_ARGS(branch), reason))
		return wr_error(WALRUS_EINVAL, "timeline history too long");
	wal_history_name(child, name, sizeof(name));
	return wal_write_file(waldir, name, text);
}
