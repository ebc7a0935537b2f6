/*
 * filecopy.c - durable file and tree copies for base backups and restores
 * (backup_int.h says why they bypass the fd cache).
 */
#include "engine/backup_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdcache/fdcache.h"
#include "testsupport/testsupport.h"

int fc_failpoint(const char *point, const char *path)
{
	char what[PATH_MAX + 64];
	if (!wr_snprintf(what, sizeof(what), "%s %s", point, path ? path : ""))
		return WALRUS_OK;
	int injected;
	/* The failpoints come with the fd cache's setup: a restore has none yet. */
	if (fdc_bound() == 0 && fdc_init(1000) != WALRUS_OK)
		return WALRUS_OK;
	{
		FDC_LOCKED();
		injected = ts_fp_check("backup", what, NULL);
	}
	if (injected > 0) {
		errno = injected;
		return wr_error(wr_errno_code(injected), "backup failpoint at %s: %m", point);
	}
	return WALRUS_OK;
}

static int open_retry(const char *path, int flags, mode_t mode)
{
	int fd;
	do
		fd = open(path, flags | O_CLOEXEC, mode);
	while (fd < 0 && errno == EINTR);
	return fd;
}

static int write_all(int fd, const char *buf, size_t len, const char *path)
{
	if (wr_write_full(fd, buf, len) != 0)
		return wr_error(wr_errno_code(errno), "could not write \"%s\": %m", path);
	return WALRUS_OK;
}

/* Reads up to @want bytes (short only at the end of the file). */
static int read_chunk(int fd, char *buf, size_t want, size_t *got, const char *path)
{
	ssize_t n = wr_read_full(fd, buf, want);
	*got = n < 0 ? 0 : (size_t)n;
	if (n < 0)
		return wr_error(wr_errno_code(errno), "could not read \"%s\": %m", path);
	return WALRUS_OK;
}

/* fsync then close; an fsync error is reported, never retried. */
static int sync_close(int fd, const char *path)
{
	int rc = WALRUS_OK;
	if (fsync(fd) != 0)
		rc = wr_error(wr_errno_code(errno), "could not fsync \"%s\": %m", path);
	if (close(fd) != 0 && rc == WALRUS_OK)
		rc = wr_error(wr_errno_code(errno), "could not close \"%s\": %m", path);
	return rc;
}

static _Atomic unsigned interrupts;

/* A lock-free atomic add: async-signal-safe. */
void walrus_interrupt(void)
{
	atomic_fetch_add(&interrupts, 1);
}

unsigned fc_interrupts(void)
{
	return atomic_load(&interrupts);
}

int fc_interrupted(const fc_progress *p)
{
	if (p == NULL || !p->interruptible || atomic_load(&interrupts) == p->interrupts0)
		return WALRUS_OK;
	return wr_error(WALRUS_EINTR, "interrupted (walrus_interrupt)");
}

static void progress_add(fc_progress *p, uint64_t n)
{
	if (p == NULL)
		return;
	p->done += n;
	if (p->done > p->total)
		p->total = p->done;
	if (p->fn != NULL)
		p->fn(p->done, p->total, p->arg);
}

static int copy_fd(int in, int out, const char *from, const char *to, uint64_t limit, uint64_t pad,
                   fc_progress *p, const char *fp_point)
{
	char *buf = malloc(BACKUP_CHUNK);
	if (buf == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory");
	uint64_t copied = 0;
	int rc = WALRUS_OK;
	while (rc == WALRUS_OK && copied < limit) {
		if (fp_point != NULL && (rc = fc_failpoint(fp_point, from)) != WALRUS_OK)
			break;
		if ((rc = fc_interrupted(p)) != WALRUS_OK)
			break;
		size_t want =
		    limit - copied < BACKUP_CHUNK ? (size_t)(limit - copied) : BACKUP_CHUNK;
		size_t got;
		rc = read_chunk(in, buf, want, &got, from);
		if (rc != WALRUS_OK || got == 0)
			break;
		rc = write_all(out, buf, got, to);
		copied += got;
		progress_add(p, got);
	}
	memset(buf, 0, BACKUP_CHUNK);
	while (rc == WALRUS_OK && copied < pad) {
		size_t n = pad - copied < BACKUP_CHUNK ? (size_t)(pad - copied) : BACKUP_CHUNK;
		rc = write_all(out, buf, n, to);
		copied += n;
	}
	free(buf);
	return rc;
}

int fc_copy_file(const char *from, const char *to, uint64_t limit, uint64_t pad, fc_progress *p,
                 const char *fp_point)
{
	int in = open_retry(from, O_RDONLY, 0);
	if (in < 0 && errno == ENOENT)
		return WALRUS_ENOENT;
	if (in < 0)
		return wr_error(wr_errno_code(errno), "could not open \"%s\": %m", from);
	int out = open_retry(to, O_WRONLY | O_CREAT | O_EXCL, 0600);
	if (out < 0) {
		int rc = wr_error(wr_errno_code(errno), "could not create \"%s\": %m", to);
		close(in);
		return rc;
	}
	int rc = copy_fd(in, out, from, to, limit, pad, p, fp_point);
	close(in); /* read-only: nothing to report */
	if (rc != WALRUS_OK) {
		close(out);
		return rc;
	}
	return sync_close(out, to);
}

int fc_write_text(const char *path, const char *text, bool replace)
{
	int fd = open_retry(path, O_WRONLY | O_CREAT | (replace ? O_TRUNC : O_EXCL), 0600);
	if (fd < 0)
		return wr_error(wr_errno_code(errno), "could not create \"%s\": %m", path);
	int rc = write_all(fd, text, strlen(text), path);
	if (rc != WALRUS_OK) {
		close(fd);
		return rc;
	}
	return sync_close(fd, path);
}

int fc_fsync_path(const char *path)
{
	int fd = open_retry(path, O_RDONLY, 0);
	if (fd < 0)
		return wr_error(wr_errno_code(errno), "could not open \"%s\": %m", path);
	return sync_close(fd, path);
}

int fc_fsync_parent(const char *path)
{
	char parent[PATH_MAX];
	if (!wr_snprintf(parent, sizeof(parent), "%s", path))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", path);
	char *slash = strrchr(parent, '/');
	while (slash != NULL && slash > parent && slash[1] == '\0') { /* trailing slashes */
		*slash = '\0';
		slash = strrchr(parent, '/');
	}
	if (slash == NULL)
		return fc_fsync_path(".");
	if (slash == parent)
		slash[1] = '\0';
	else
		*slash = '\0';
	return fc_fsync_path(parent);
}

int fc_unlink(const char *path)
{
	if (unlink(path) != 0 && errno != ENOENT)
		return wr_error(wr_errno_code(errno), "could not remove \"%s\": %m", path);
	return WALRUS_OK;
}

static int dir_is_empty(const char *dir, bool *empty)
{
	DIR *d = opendir(dir);
	if (d == NULL)
		return wr_error(wr_errno_code(errno), "could not open directory \"%s\": %m", dir);
	*empty = true;
	struct dirent *de;
	errno = 0;
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			*empty = false;
	int err = errno;
	closedir(d);
	if (err != 0) {
		errno = err;
		return wr_error(wr_errno_code(err), "could not read directory \"%s\": %m", dir);
	}
	return WALRUS_OK;
}

int fc_prepare_dest(const char *dir, const char *marker, const char *what)
{
	struct stat st;
	if (stat(dir, &st) == 0) {
		bool empty = false;
		if (!S_ISDIR(st.st_mode))
			return wr_error(WALRUS_EINVAL, "%s \"%s\" exists and is not a directory",
			                what, dir);
		int rc = dir_is_empty(dir, &empty);
		if (rc != WALRUS_OK)
			return rc;
		if (!empty)
			return wr_error(WALRUS_EINVAL,
			                "%s \"%s\" exists and is not empty: give a new or empty "
			                "directory",
			                what, dir);
	} else if (errno != ENOENT) {
		return wr_error(wr_errno_code(errno), "could not stat \"%s\": %m", dir);
	} else if (mkdir(dir, 0700) != 0) {
		return wr_error(wr_errno_code(errno), "could not create %s \"%s\": %m", what, dir);
	}
	char path[PATH_MAX];
	if (!wr_snprintf(path, sizeof(path), "%s/%s", dir, marker))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", dir);
	int rc = fc_write_text(path, "", false);
	if (rc == WALRUS_OK)
		rc = fc_fsync_path(dir);
	if (rc == WALRUS_OK)
		rc = fc_fsync_parent(dir);
	return rc;
}

typedef int (*walk_fn)(const char *path, const char *rel, bool is_dir, void *arg);

/* Depth first, a directory after its contents; entries that vanish are skipped. */
static int walk(const char *path, const char *rel, walk_fn fn, void *arg)
{
	DIR *d = opendir(path);
	if (d == NULL && errno == ENOENT)
		return WALRUS_OK;
	if (d == NULL)
		return wr_error(wr_errno_code(errno), "could not open directory \"%s\": %m", path);
	int rc = WALRUS_OK;
	struct dirent *de;
	for (errno = 0; rc == WALRUS_OK && (de = readdir(d)) != NULL; errno = 0) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		char sub[PATH_MAX], subrel[PATH_MAX];
		if (!wr_snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name) ||
		    !wr_snprintf(subrel, sizeof(subrel), "%s%s%s", rel, rel[0] ? "/" : "",
		                 de->d_name)) {
			rc = wr_error(WALRUS_EINVAL, "path too long in \"%s\"", path);
			break;
		}
		struct stat st;
		if (lstat(sub, &st) != 0) {
			if (errno != ENOENT)
				rc = wr_error(wr_errno_code(errno), "could not stat \"%s\": %m",
				              sub);
			continue;
		}
		if (S_ISDIR(st.st_mode))
			rc = walk(sub, subrel, fn, arg);
		if (rc == WALRUS_OK && (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)))
			rc = fn(sub, subrel, S_ISDIR(st.st_mode), arg);
	}
	if (rc == WALRUS_OK && errno != 0)
		rc = wr_error(wr_errno_code(errno), "could not read directory \"%s\": %m", path);
	closedir(d);
	return rc;
}

typedef struct each_file {
	fc_file_fn fn;
	void *arg;
} each_file;

static int each_one(const char *path, const char *rel, bool is_dir, void *arg)
{
	each_file *e = arg;
	return is_dir ? WALRUS_OK : e->fn(path, rel, e->arg);
}

int fc_each_file(const char *dir, fc_file_fn fn, void *arg)
{
	each_file e = {fn, arg};
	return walk(dir, "", each_one, &e);
}

static int sync_one(const char *path, const char *rel, bool is_dir, void *arg)
{
	(void)rel, (void)is_dir, (void)arg;
	return fc_fsync_path(path);
}

int fc_sync_tree(const char *dir)
{
	int rc = walk(dir, "", sync_one, NULL);
	if (rc == WALRUS_OK)
		rc = fc_fsync_path(dir);
	if (rc == WALRUS_OK)
		rc = fc_fsync_parent(dir);
	return rc;
}

static int add_size(const char *path, const char *rel, bool is_dir, void *arg)
{
	(void)rel;
	struct stat st;
	if (!is_dir && stat(path, &st) == 0)
		*(uint64_t *)arg += (uint64_t)st.st_size;
	return WALRUS_OK;
}

uint64_t fc_tree_size(const char *dir)
{
	uint64_t total = 0;
	if (walk(dir, "", add_size, &total) != WALRUS_OK)
		wr_error_clear();
	return total;
}

typedef struct tree_copy {
	const char *to;
	fc_skip_fn skip;
	fc_progress *p;
	const char *fp_point;
} tree_copy;

int fc_make_parents(const char *root, const char *rel)
{
	char path[PATH_MAX];
	if (!wr_snprintf(path, sizeof(path), "%s/%s", root, rel))
		return wr_error(WALRUS_EINVAL, "path too long in \"%s\"", root);
	size_t skip = strlen(root) + 1;
	for (char *s = path + skip; (s = strchr(s, '/')) != NULL; s++) {
		*s = '\0';
		if (mkdir(path, 0700) != 0 && errno != EEXIST)
			return wr_error(wr_errno_code(errno), "could not create \"%s\": %m", path);
		*s = '/';
	}
	return WALRUS_OK;
}

static int copy_one(const char *path, const char *rel, bool is_dir, void *arg)
{
	tree_copy *t = arg;
	if (t->skip != NULL && t->skip(rel))
		return WALRUS_OK;
	int rc = fc_make_parents(t->to, rel);
	char to[PATH_MAX];
	if (rc == WALRUS_OK && !wr_snprintf(to, sizeof(to), "%s/%s", t->to, rel))
		rc = wr_error(WALRUS_EINVAL, "path too long in \"%s\"", t->to);
	if (rc != WALRUS_OK)
		return rc;
	if (is_dir) {
		if (mkdir(to, 0700) != 0 && errno != EEXIST)
			return wr_error(wr_errno_code(errno), "could not create \"%s\": %m", to);
		return WALRUS_OK;
	}
	rc = fc_copy_file(path, to, UINT64_MAX, 0, t->p, t->fp_point);
	return rc == WALRUS_ENOENT ? WALRUS_OK : rc; /* dropped while we copied */
}

int fc_copy_tree(const char *from, const char *to, fc_skip_fn skip, fc_progress *p,
                 const char *fp_point)
{
	if (mkdir(to, 0700) != 0 && errno != EEXIST)
		return wr_error(wr_errno_code(errno), "could not create \"%s\": %m", to);
	tree_copy t = {to, skip, p, fp_point};
	return walk(from, "", copy_one, &t);
}

static int remove_one(const char *path, const char *rel, bool is_dir, void *arg)
{
	(void)rel, (void)arg;
	if ((is_dir ? rmdir(path) : unlink(path)) != 0 && errno != ENOENT)
		return wr_error(wr_errno_code(errno), "could not remove \"%s\": %m", path);
	return WALRUS_OK;
}

int fc_remove_tree(const char *dir, bool remove_dir)
{
	int rc = walk(dir, "", remove_one, NULL);
	if (rc == WALRUS_OK && remove_dir && rmdir(dir) != 0 && errno != ENOENT)
		rc = wr_error(wr_errno_code(errno), "could not remove \"%s\": %m", dir);
	if (rc == WALRUS_OK)
		rc = remove_dir ? fc_fsync_parent(dir) : fc_fsync_path(dir);
	return rc;
}
