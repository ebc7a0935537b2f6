/*
 * failpoint.c - make the fd cache's syscalls fail on purpose (test builds only).
 *
 * The fault-injection suites need real error paths (an fsync that returns
 * EIO, a disk that fills up) without a broken disk.  Every syscall of the
 * I/O seam asks ts_fp_check() first; an entry of the spec set with
 * ts_failpoint_set() (or WALRUS_FAILPOINTS, read by fdc_init) decides
 * whether it fails and with which errno.  Spec syntax: see testsupport.h.
 *
 * Interface: ts_failpoint_set, ts_failpoint_hits, ts_failpoints_from_env,
 * ts_fp_check.
 * Notes: the state is per process; a forked child inherits the entries and
 * their counters as they were at fork time.
 */
#ifndef WALRUS_TEST_HOOKS
#error "test builds only: meson -Dtest_hooks=true (src/testsupport/meson.build)"
#endif
#include "testsupport/testsupport.h"

#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "fdcache/fdcache.h"

#define FP_MAX_ENTRIES 32

typedef struct fp_entry {
	char op[16];
	int err;    /* errno, or TS_FP_SHORT */
	char *path; /* substring filter; NULL matches every path */
	uint64_t skip;
	uint64_t count; /* 0 = forever */
	uint64_t seen;  /* matching calls so far */
	uint64_t fired;
} fp_entry;

static fp_entry fp_entries[FP_MAX_ENTRIES];
static int fp_nentries;
static uint64_t fp_hits;

static const char *const fp_ops[] = {
    "open",      "pread",       "pwrite", "fsync", "fdatasync", "sync_range", "truncate",
    "fallocate", "rename",      "unlink", "close", "fsync_dir", "mkdir",      "any",
    "backup",    "open_direct", "stat",   "punch", "mmap",      "step",
};

static const struct {
	const char *name;
	int err;
} fp_errnos[] = {
    {"EIO", EIO},         {"ENOSPC", ENOSPC},         {"EACCES", EACCES},
    {"EPERM", EPERM},     {"EROFS", EROFS},           {"EMFILE", EMFILE},
    {"ENFILE", ENFILE},   {"ENOENT", ENOENT},         {"EEXIST", EEXIST},
    {"EINTR", EINTR},     {"EAGAIN", EAGAIN},         {"EDQUOT", EDQUOT},
    {"EFBIG", EFBIG},     {"EBADF", EBADF},           {"EINVAL", EINVAL},
    {"ENOMEM", ENOMEM},   {"EOPNOTSUPP", EOPNOTSUPP}, {"short", TS_FP_SHORT},
    {"KILL", TS_FP_KILL}, {"STOP", TS_FP_STOP},       {"ENODATA", ENODATA},
};

static void fp_free_entries(fp_entry *e, int n)
{
	for (int i = 0; i < n; i++)
		free(e[i].path);
}

static bool fp_known_op(const char *op)
{
	for (size_t i = 0; i < WR_ARRAY_LEN(fp_ops); i++)
		if (strcmp(fp_ops[i], op) == 0)
			return true;
	return false;
}

static int fp_errno_parse(const char *name)
{
	for (size_t i = 0; i < WR_ARRAY_LEN(fp_errnos); i++)
		if (strcmp(fp_errnos[i].name, name) == 0)
			return fp_errnos[i].err;
	return 0;
}

static const char *fp_errno_name(int err)
{
	for (size_t i = 0; i < WR_ARRAY_LEN(fp_errnos); i++)
		if (fp_errnos[i].err == err)
			return fp_errnos[i].name;
	return "?";
}

/* Parses the decimal number after @mark at the end of @s and cuts it off; false if malformed. */
static bool fp_take_suffix(char *s, char mark, uint64_t *out)
{
	char *m = strrchr(s, mark);
	if (m == NULL)
		return true;
	char *end;
	if (m[1] == '\0' || !isdigit((unsigned char)m[1]))
		return false;
	errno = 0;
	unsigned long long v = strtoull(m + 1, &end, 10);
	if (*end != '\0' || errno != 0)
		return false;
	*out = v;
	*m = '\0';
	return true;
}

static char *fp_trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	char *end = s + strlen(s);
	while (end > s && isspace((unsigned char)end[-1]))
		*--end = '\0';
	return s;
}

/* One entry "OP:ERRNO[:PATH][@SKIP][*COUNT]" (modified in place). */
static int fp_parse_entry(char *text, fp_entry *e)
{
	memset(e, 0, sizeof(*e));
	e->count = 1;
	char *colon = strchr(text, ':');
	if (colon == NULL)
		return wr_error(WALRUS_EINVAL, "invalid failpoint \"%s\": expected OP:ERRNO", text);
	*colon = '\0';
	char *op = text, *rest = colon + 1;
	if (!fp_known_op(op) || strlen(op) >= sizeof(e->op))
		return wr_error(WALRUS_EINVAL, "invalid failpoint: unknown operation \"%s\"", op);
	strcpy(e->op, op);
	if (!fp_take_suffix(rest, '*', &e->count) || !fp_take_suffix(rest, '@', &e->skip))
		return wr_error(WALRUS_EINVAL,
		                "invalid failpoint for \"%s\": @SKIP and *COUNT take a number", op);
	char *path = strchr(rest, ':');
	if (path != NULL)
		*path++ = '\0';
	e->err = fp_errno_parse(rest);
	if (e->err == 0)
		return wr_error(WALRUS_EINVAL, "invalid failpoint for \"%s\": unknown errno \"%s\"",
		                op, rest);
	if (e->err == TS_FP_SHORT && strcmp(op, "pwrite") != 0)
		return wr_error(WALRUS_EINVAL,
		                "invalid failpoint: \"short\" applies to pwrite only");
	if (path != NULL && *path != '\0') {
		e->path = strdup(path);
		if (e->path == NULL)
			return wr_error(WALRUS_ENOMEM, "out of memory");
	}
	return 0;
}

static int fp_parse(const char *spec, fp_entry *out, int *n)
{
	char *copy = strdup(spec);
	if (copy == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory");
	int rc = 0;
	char *save = NULL;
	*n = 0;
	for (char *tok = strtok_r(copy, ";", &save); tok != NULL;
	     tok = strtok_r(NULL, ";", &save)) {
		char *t = fp_trim(tok);
		if (*t == '\0')
			continue;
		if (*n == FP_MAX_ENTRIES) {
			rc = wr_error(WALRUS_EINVAL, "invalid failpoints: more than %d entries",
			              FP_MAX_ENTRIES);
			break;
		}
		rc = fp_parse_entry(t, &out[*n]);
		if (rc != 0) {
			free(out[*n].path);
			break;
		}
		(*n)++;
	}
	free(copy);
	if (rc != 0) {
		fp_free_entries(out, *n);
		*n = 0;
	}
	return rc;
}

int ts_failpoint_set(const char *spec)
{
	fp_entry parsed[FP_MAX_ENTRIES];
	int n = 0;
	if (spec != NULL && *spec != '\0') {
		int rc = fp_parse(spec, parsed, &n);
		if (rc != 0)
			return rc; /* the failpoints in force stay as they were */
	}
	fdc_lock(); /* the table is the process's, read by every thread's I/O */
	fp_free_entries(fp_entries, fp_nentries);
	memcpy(fp_entries, parsed, sizeof(fp_entry) * (size_t)n);
	fp_nentries = n;
	fdc_unlock();
	return 0;
}

uint64_t ts_failpoint_hits(void)
{
	fdc_lock();
	uint64_t n = fp_hits;
	fdc_unlock();
	return n;
}

static bool fp_matches(const fp_entry *e, const char *op, const char *path, const char *path2)
{
	bool open_match = strcmp(e->op, "open") == 0 && strcmp(op, "open_direct") == 0;
	if (strcmp(e->op, op) != 0 && strcmp(e->op, "any") != 0 && !open_match)
		return false;
	if (e->path == NULL)
		return true;
	/* A directory fsync's second path is the file it is for: only an entry
	 * naming fsync_dir looks at it ("any:KILL:DIR" must not stop at the
	 * fsync of DIR's parent that makes DIR's own name durable). */
	bool second = path2 != NULL && (strcmp(op, "fsync_dir") != 0 || strcmp(e->op, op) == 0);
	return (path != NULL && strstr(path, e->path) != NULL) ||
	       (second && strstr(path2, e->path) != NULL);
}

int ts_fp_check(const char *op, const char *path, const char *path2)
{
	if (WR_LIKELY(fp_nentries == 0))
		return 0;
	for (int i = 0; i < fp_nentries; i++) {
		fp_entry *e = &fp_entries[i];
		if (!fp_matches(e, op, path, path2))
			continue;
		if (e->seen++ < e->skip)
			continue;
		if (e->count != 0 && e->fired >= e->count)
			continue;
		e->fired++;
		fp_hits++;
		if (e->err == TS_FP_KILL) {
			/* A power cut at this call: the tests roll back what was not durable. */
			wr_log(WR_LOG, "failpoint: killing the process at %s of \"%s\"", op,
			       path ? path : "");
			raise(SIGKILL);
		}
		if (e->err == TS_FP_STOP) {
			/* Frozen just before the call, which runs once SIGCONT comes. */
			wr_log(WR_LOG, "failpoint: stopping the process at %s of \"%s\"", op,
			       path ? path : "");
			raise(SIGSTOP);
			return 0;
		}
		wr_log(WR_LOG, "failpoint: injecting %s into %s of \"%s\"", fp_errno_name(e->err),
		       op, path ? path : "");
		return e->err;
	}
	return 0;
}

int ts_failpoints_from_env(void)
{
	const char *spec = getenv("WALRUS_FAILPOINTS");
	if (spec == NULL || *spec == '\0')
		return 0;
	return ts_failpoint_set(spec);
}

uint64_t ts_standby_nap_ns(uint64_t dflt)
{
	const char *s = getenv("WALRUS_TEST_STANDBY_NAP_MS");
	char *end;
	if (s == NULL || *s == '\0')
		return dflt;
	errno = 0;
	unsigned long long ms = strtoull(s, &end, 10);
	return errno == 0 && *end == '\0' && ms < UINT64_MAX / 1000000ULL ? ms * 1000000ULL : dflt;
}
