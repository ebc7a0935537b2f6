/*
 * datadir.c - the data directory: resolution, checks, initialisation and
 * the instance and attach locks in walrus.pid.
 *
 * Initialisation is atomic by a marker written first.  It runs in the
 * supervisor under the instance lock, so two processes creating the same
 * directory never both initialise it: the loser of the lock gets
 * WALRUS_EBUSY and its opener retries until the winner listens.  Building
 * the directory elsewhere and renaming it into place would not do: DIR may
 * exist already, empty (a mount point, a directory made by the user, with
 * wal/ as a symbolic link to another file system, log/ or walrus.conf in
 * it), and nothing can be renamed over it; and the lock that serialises
 * creators lives inside DIR.  So the supervisor makes DIR/walrus.bootstrap
 * durable (file and directory fsynced) before it writes anything else,
 * then base/, wal/, the WAL's bootstrap (first segment, control file),
 * then WALRUS_VERSION (temp file, fsync, rename, directory fsync), and
 * removes the marker last.  After a crash or power cut:
 *   - no marker and no WALRUS_VERSION: nothing of the bootstrap reached the
 *     disk (everything else follows the durable marker): DIR is initialised
 *     as a new one;
 *   - marker and no WALRUS_VERSION: an interrupted bootstrap.  Its WAL files
 *     and control file are removed (they cannot be finished: a new system
 *     identifier is in both) and it is done again, with a log line; any
 *     other unexpected file refuses the start;
 *   - WALRUS_VERSION and the marker: complete; the marker is removed, with
 *     a log line.
 * A directory without WALRUS_VERSION is never used as a data directory, and
 * one holding files that are not ours is never touched.  When DIR itself is
 * missing, datadir_resolve creates it (and its missing parents) and fsyncs
 * each new directory's parent, so that its name outlives a power cut; the
 * bootstrap fsyncs DIR's parent again before its marker, for a DIR made by
 * a creator that died before that fsync, or by the user.
 *
 * The locks are open-file-description (OFD) locks: unlike POSIX record
 * locks they are not dropped when some other fd of the same file is closed
 * in the process, and they are shared by children that inherit the fd, so
 * the auxiliary processes keep the instance locked while any of them lives.
 * The kernel releases them when the last holder dies: a stale walrus.pid
 * after a kill -9 is detected by simply being able to lock it.
 */
#include "engine/engine.h"
#include "engine/backup_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdcache/fdcache.h"
#include "wal/wal.h"

/* mkdir, and when it made @path, an fsync of its parent: the name is durable. */
static int mkdir_durable(const char *path)
{
	if (mkdir(path, 0700) != 0)
		return errno == EEXIST ? WALRUS_OK
		                       : wr_error(wr_errno_code(errno),
		                                  "could not create directory \"%s\": %m", path);
	return fdc_fsync_parent(path);
}

static int mkdir_p(const char *path)
{
	char buf[PATH_MAX];
	if (!wr_snprintf(buf, sizeof(buf), "%s", path))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		int rc = mkdir_durable(buf);
		if (rc != WALRUS_OK)
			return rc;
		*p = '/';
	}
	return mkdir_durable(buf);
}

int datadir_resolve(const char *dir, bool create, char *out)
{
	struct stat st;

	if (dir == NULL || *dir == '\0')
		return wr_error(WALRUS_EINVAL,
		                "no data directory given (use -D DIR or WALRUS_DATA)");
	if (stat(dir, &st) != 0) {
		if (errno != ENOENT)
			return wr_error(wr_errno_code(errno), "could not access \"%s\": %m", dir);
		if (!create)
			return wr_error(
			    WALRUS_ENOENT,
			    "data directory \"%s\" does not exist (create_if_missing=on "
			    "creates it)",
			    dir);
		int rc = mkdir_p(dir);
		if (rc != WALRUS_OK)
			return rc;
	} else if (!S_ISDIR(st.st_mode)) {
		return wr_error(WALRUS_ENOTWALRUS, "\"%s\" is not a directory", dir);
	}
	if (realpath(dir, out) == NULL)
		return wr_error(wr_errno_code(errno), "could not resolve \"%s\": %m", dir);
	return WALRUS_OK;
}

int datadir_check(const char *abs)
{
	struct stat st;

	if (stat(abs, &st) != 0)
		return wr_error(wr_errno_code(errno), "could not access \"%s\": %m", abs);
	if (st.st_uid != geteuid())
		return wr_error(WALRUS_EPERM,
		                "data directory \"%s\" has wrong ownership (owned by uid %u, this "
		                "process runs as uid %u)",
		                abs, (unsigned)st.st_uid, (unsigned)geteuid());
	/* Like PostgreSQL: the data may hold anything, so nobody else may read it. */
	if ((st.st_mode & 077) != 0)
		return wr_error(
		    WALRUS_EPERM,
		    "data directory \"%s\" has invalid permissions %04o: it must not be "
		    "accessible by group or others (chmod 0700 \"%s\")",
		    abs, (unsigned)(st.st_mode & 07777), abs);
	if (access(abs, R_OK | W_OK | X_OK) != 0)
		return wr_error(WALRUS_EPERM, "data directory \"%s\" is not writable: %m", abs);
	return WALRUS_OK;
}

/* The first entry of directory @path other than "." and ".." into @name ("" if none). */
static int first_entry(const char *path, const char *const *skip, size_t nskip, char *name,
                       size_t len)
{
	name[0] = '\0';
	DIR *d = opendir(path);
	if (d == NULL)
		return errno == ENOENT ? WALRUS_OK
		                       : wr_error(wr_errno_code(errno),
		                                  "could not open directory \"%s\": %m", path);
	struct dirent *e;
	while (name[0] == '\0' && (e = readdir(d)) != NULL) {
		bool ok = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
		for (size_t i = 0; i < nskip; i++)
			ok |= strcmp(e->d_name, skip[i]) == 0;
		if (!ok)
			wr_snprintf(name, len, "%s", e->d_name);
	}
	closedir(d);
	return WALRUS_OK;
}

/*
 * What may be in a directory that is initialised: a user may prepare wal/
 * (a symlink elsewhere, holding no WAL), log/ and walrus.conf first; an
 * interrupted bootstrap (@resuming) also leaves its marker and an empty
 * base/.  Into @extra the first other entry (an empty string when none).
 */
static int find_foreign(const char *abs, bool resuming, char *extra, size_t len)
{
	static const char *const allowed[] = {
	    "wal",         "log",        "lost+found",      WR_PID_FILE,
	    WR_SERVE_FILE, WR_CONF_FILE, WR_BOOTSTRAP_FILE, "base"};
	char path[PATH_MAX], name[NAME_MAX + 1];
	size_t nallowed = WR_ARRAY_LEN(allowed) - (resuming ? 0 : 2);
	int rc = first_entry(abs, allowed, nallowed, name, sizeof(name));
	if (rc != WALRUS_OK || name[0] != '\0') {
		wr_snprintf(extra, len, "%s", name);
		return rc;
	}
	if (!wr_snprintf(path, sizeof(path), "%s/base", abs))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", abs);
	rc = first_entry(path, NULL, 0, name, sizeof(name));
	if (rc == WALRUS_OK && name[0] == '\0') {
		wr_snprintf(path, sizeof(path), "%s/wal", abs);
		rc = wal_dir_first_file(path, name, sizeof(name));
		wr_snprintf(extra, len, "%s%s", name[0] ? "wal/" : "", name);
	} else {
		wr_snprintf(extra, len, "base/%s", name);
	}
	return rc;
}

/* write temp + fsync + rename + fsync directory: the file appears whole or not at all. */
int datadir_write_file(const char *dir, const char *name, const char *text)
{
	return wal_write_file(dir, name, text);
}

/*
 * A subdirectory may be a symbolic link to another file system (wal/ above
 * all).  When its target is missing (a file system not mounted, a directory
 * moved), mkdir says only "File exists": name the link and its target
 * instead.  Never create the target: an unmounted file system's mount point
 * would then silently take the WAL.
 */
static int check_link(const char *path)
{
	struct stat st;
	char target[PATH_MAX];
	if (lstat(path, &st) != 0 || !S_ISLNK(st.st_mode) || stat(path, &st) == 0)
		return WALRUS_OK; /* mkdir reports what else may be wrong */
	int err = errno;
	ssize_t n = readlink(path, target, sizeof(target) - 1);
	if (n < 0)
		return wr_error(wr_errno_code(errno), "could not read symbolic link \"%s\": %m",
		                path);
	target[n] = '\0';
	errno = err;
	if (err == ENOENT)
		return wr_error(WALRUS_ENOENT,
		                "\"%s\" is a symbolic link to \"%s\", which does not exist (is its "
		                "file system mounted?)",
		                path, target);
	return wr_error(wr_errno_code(err),
	                "\"%s\" is a symbolic link to \"%s\", which cannot be reached: %m", path,
	                target);
}

static const char *const subdirs[] = {"base", "wal", WR_LOG_DIR};

/* Before anything is written: a bootstrap must not start on a broken link. */
static int check_links(const char *abs)
{
	char path[PATH_MAX];
	for (size_t i = 0; i < WR_ARRAY_LEN(subdirs); i++) {
		if (!wr_snprintf(path, sizeof(path), "%s/%s", abs, subdirs[i]))
			return wr_error(WALRUS_EINVAL, "path too long in \"%s\"", abs);
		int rc = check_link(path);
		if (rc != WALRUS_OK)
			return rc;
	}
	return WALRUS_OK;
}

static int make_subdirs(const char *abs)
{
	char path[PATH_MAX];
	for (size_t i = 0; i < WR_ARRAY_LEN(subdirs); i++) {
		if (!wr_snprintf(path, sizeof(path), "%s/%s", abs, subdirs[i]))
			return wr_error(WALRUS_EINVAL, "path too long in \"%s\"", abs);
		int rc = fdc_mkdir(path, 0700);
		if (rc != WALRUS_OK)
			return rc;
	}
	return WALRUS_OK;
}

/*
 * Creates DIR/walrus.bootstrap (empty: its name is the message) and makes it
 * durable.  DIR's own name first: whoever made DIR (a creator that died
 * before its fsync, the user) may not have made it durable.
 */
static int mark_bootstrap(const char *abs)
{
	char path[PATH_MAX];
	fdc_file f;
	if (!wr_snprintf(path, sizeof(path), "%s/%s", abs, WR_BOOTSTRAP_FILE))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", abs);
	int rc = fdc_fsync_parent(abs);
	if (rc != WALRUS_OK)
		return rc;
	rc = fdc_open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600, &f);
	if (rc != WALRUS_OK)
		return rc;
	rc = fdc_fsync(f);
	int rc2 = fdc_close(f);
	if (rc == WALRUS_OK)
		rc = rc2;
	return rc == WALRUS_OK ? fdc_fsync_path(abs) : rc;
}

static int unmark_bootstrap(const char *abs)
{
	char path[PATH_MAX];
	if (!wr_snprintf(path, sizeof(path), "%s/%s", abs, WR_BOOTSTRAP_FILE))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", abs);
	int rc = fdc_unlink(path);
	return rc == WALRUS_OK ? fdc_fsync_path(abs) : rc;
}

/* The order is the whole point: see the comment at the top. */
static int initialise(const char *abs, const wr_options *opts)
{
	char text[32];
	int rc = mark_bootstrap(abs);
	if (rc == WALRUS_OK)
		rc = make_subdirs(abs);
	if (rc == WALRUS_OK)
		rc = wal_bootstrap(abs, opts);
	snprintf(text, sizeof(text), "%d\n", WR_FORMAT_VERSION);
	if (rc == WALRUS_OK)
		rc = datadir_write_file(abs, WR_VERSION_FILE, text);
	if (rc == WALRUS_OK)
		rc = unmark_bootstrap(abs);
	if (rc == WALRUS_OK)
		wr_log(WR_LOG, "initialised data directory \"%s\" (format %d)", abs,
		       WR_FORMAT_VERSION);
	return rc;
}

/* Removes what an interrupted bootstrap wrote, so that it can run again. */
static int undo_bootstrap(const char *abs)
{
	char path[PATH_MAX];
	wr_log(WR_WARNING,
	       "the initialisation of \"%s\" was interrupted (%s is there, %s is not): "
	       "doing it again",
	       abs, WR_BOOTSTRAP_FILE, WR_VERSION_FILE);
	if (!wr_snprintf(path, sizeof(path), "%s/%s.tmp", abs, WR_VERSION_FILE))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", abs);
	int rc = access(path, F_OK) == 0 ? fdc_unlink(path) : WALRUS_OK;
	return rc == WALRUS_OK ? wal_bootstrap_undo(abs) : rc;
}

static int refuse_foreign(const char *abs, bool resuming)
{
	char extra[NAME_MAX + 16];
	int rc = find_foreign(abs, resuming, extra, sizeof(extra));
	if (rc != WALRUS_OK || extra[0] == '\0')
		return rc;
	return wr_error(WALRUS_ENOTWALRUS,
	                "\"%s\" is not a walrus data directory (no %s file, and it holds "
	                "\"%s\"%s)",
	                abs, WR_VERSION_FILE, extra,
	                resuming ? ", which an interrupted initialisation does not write" : "");
}

/* No WALRUS_VERSION: a new directory, an interrupted bootstrap, or not ours. */
static int init_new(const char *abs, const wr_options *opts)
{
	char path[PATH_MAX];
	if (!wr_snprintf(path, sizeof(path), "%s/%s", abs, WR_BOOTSTRAP_FILE))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", abs);
	bool resuming = access(path, F_OK) == 0;
	int rc = resuming ? WALRUS_OK : refuse_foreign(abs, false);
	if (rc != WALRUS_OK)
		return rc;
	if (!opts->create_if_missing)
		return wr_error(WALRUS_ENOTWALRUS,
		                "\"%s\" is not a walrus data directory (%s: create_if_missing=on "
		                "%s)",
		                abs,
		                resuming ? "its initialisation was interrupted" : "it is empty",
		                resuming ? "initialises it again" : "initialises it");
	/* The marker proves that the files the undo removes are the bootstrap's. */
	if (resuming)
		rc = undo_bootstrap(abs);
	if (resuming && rc == WALRUS_OK)
		rc = refuse_foreign(abs, true);
	return rc == WALRUS_OK ? initialise(abs, opts) : rc;
}

static int read_version(const char *path, int *version)
{
	char buf[64];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return wr_error(wr_errno_code(errno), "could not open \"%s\": %m", path);
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	int err = errno;
	close(fd);
	if (n < 0) {
		errno = err;
		return wr_error(WALRUS_EIO, "could not read \"%s\": %m", path);
	}
	buf[n] = '\0';
	char *end;
	long v = strtol(buf, &end, 10);
	if (end == buf || (*end != '\n' && *end != '\0') || v <= 0 || v > 1000000)
		return wr_error(WALRUS_ECORRUPT, "file \"%s\" does not hold a format version",
		                path);
	*version = (int)v;
	return WALRUS_OK;
}

/*
 * A base backup or a restore that did not finish leaves its marker: such a
 * directory may miss files or WAL, and starting it could look like success.
 */
static int refuse_incomplete_copy(const char *abs)
{
	static const char *const markers[] = {BACKUP_INCOMPLETE, RESTORE_INCOMPLETE};
	static const char *const what[] = {"backup", "restore"};
	char path[PATH_MAX];
	for (size_t i = 0; i < WR_ARRAY_LEN(markers); i++) {
		if (!wr_snprintf(path, sizeof(path), "%s/%s", abs, markers[i]))
			return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", abs);
		if (access(path, F_OK) == 0)
			return wr_error(WALRUS_ENOTWALRUS,
			                "\"%s\" holds an interrupted %s (%s): it is not a usable "
			                "data directory; take the %s again into a new directory",
			                abs, what[i], markers[i], what[i]);
	}
	return WALRUS_OK;
}

int datadir_init_or_verify(const char *abs, const wr_options *opts)
{
	char path[PATH_MAX];
	int version = 0;

	int rc = check_links(abs);
	if (rc == WALRUS_OK)
		rc = refuse_incomplete_copy(abs);
	if (rc != WALRUS_OK)
		return rc;
	if (!wr_snprintf(path, sizeof(path), "%s/%s", abs, WR_VERSION_FILE))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", abs);
	if (access(path, F_OK) != 0)
		return init_new(abs, opts);
	rc = read_version(path, &version);
	if (rc != WALRUS_OK)
		return rc;
	if (version != WR_FORMAT_VERSION)
		return wr_error(WALRUS_EVERSION,
		                "data directory \"%s\" has format version %d, but this walrus "
		                "reads format %d",
		                abs, version, WR_FORMAT_VERSION);
	if (!wr_snprintf(path, sizeof(path), "%s/%s", abs, WR_BOOTSTRAP_FILE))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", abs);
	if (access(path, F_OK) == 0) {
		/* A cut between the version file and the marker's removal. */
		wr_log(WR_LOG, "removing \"%s\": the initialisation it marks was complete", path);
		if ((rc = unmark_bootstrap(abs)) != WALRUS_OK)
			return rc;
	}
	return make_subdirs(abs); /* a lost log/ or base/ is recreated, not an error */
}

static int ofd_lock(int fd, short type, off_t byte, bool wait)
{
	struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = byte, .l_len = 1};
	for (;;) {
		if (fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl) == 0)
			return 0;
		if (errno != EINTR)
			return errno;
	}
}

static int open_pid_file(const char *abs, int *fd)
{
	char path[PATH_MAX];
	if (!wr_snprintf(path, sizeof(path), "%s/%s", abs, WR_PID_FILE))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", abs);
	*fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (*fd < 0)
		return wr_error(wr_errno_code(errno), "could not open lock file \"%s\": %m", path);
	return WALRUS_OK;
}

static long pid_in_file(int fd)
{
	char buf[32];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	return strtol(buf, NULL, 10);
}

int datadir_lock_instance(const char *abs, int *lock_fd)
{
	int fd;
	int rc = open_pid_file(abs, &fd);
	if (rc != WALRUS_OK)
		return rc;
	int err = ofd_lock(fd, F_WRLCK, 0, false);
	if (err == 0) {
		*lock_fd = fd;
		return WALRUS_OK;
	}
	long owner = pid_in_file(fd);
	close(fd);
	if ((err == EAGAIN || err == EACCES) && owner <= 0)
		return wr_error(WALRUS_EBUSY,
		                "data directory \"%s\" is in use by another instance, which is "
		                "starting (its supervisor has not written its pid into %s yet)",
		                abs, WR_PID_FILE);
	if (err == EAGAIN || err == EACCES)
		return wr_error(WALRUS_EBUSY,
		                "data directory \"%s\" is in use by another instance (supervisor "
		                "pid %ld)",
		                abs, owner);
	errno = err;
	return wr_error(wr_errno_code(err), "could not lock \"%s/%s\": %m", abs, WR_PID_FILE);
}

int datadir_wait_old_backends(int lock_fd, const char *abs, uint64_t timeout_us)
{
	uint64_t start = wr_now_ns(), next_note = 0;
	for (;;) {
		int err = ofd_lock(lock_fd, F_WRLCK, 1, false);
		if (err == 0) {
			/* Only a probe: backends of this instance take read locks on it. */
			struct flock fl = {
			    .l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 1, .l_len = 1};
			if (fcntl(lock_fd, F_OFD_SETLK, &fl) != 0)
				return wr_error(WALRUS_EIO, "could not unlock \"%s/%s\": %m", abs,
				                WR_PID_FILE);
			return WALRUS_OK;
		}
		if (err != EAGAIN && err != EACCES) {
			errno = err;
			return wr_error(WALRUS_EIO, "could not lock \"%s/%s\": %m", abs,
			                WR_PID_FILE);
		}
		uint64_t waited_us = (wr_now_ns() - start) / 1000;
		if (waited_us >= timeout_us)
			return wr_error(
			    WALRUS_EBUSY,
			    "processes attached to a previous instance of \"%s\" are still "
			    "running; they must close the database first",
			    abs);
		if (waited_us >= next_note) {
			wr_log(WR_LOG, "waiting for processes of a previous instance to detach");
			next_note = waited_us + 5000000;
		}
		wr_sleep_us(10000);
	}
}

static int pid_file_put(int lock_fd, const char *abs, const char *text, size_t n);

int datadir_write_pid(int lock_fd, const char *abs)
{
	char text[PATH_MAX + 64];
	int n = snprintf(text, sizeof(text), "%d\n%s\n%llu\n", (int)getpid(), abs,
	                 (unsigned long long)(wr_wall_us() / 1000000));
	if (n < 0 || (size_t)n >= sizeof(text))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", abs);
	return pid_file_put(lock_fd, abs, text, (size_t)n);
}

/*
 * Overwrites, then cuts to length: truncating first would free the file's
 * block, and on a full disk another writer could take it before ours.
 */
static int pid_file_put(int lock_fd, const char *abs, const char *text, size_t n)
{
	size_t done = 0;
	while (done < n) {
		ssize_t w = pwrite(lock_fd, text + done, n - done, (off_t)done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return wr_error(wr_errno_code(errno), "could not write \"%s/%s\": %m", abs,
			                WR_PID_FILE);
		done += (size_t)w;
	}
	if (ftruncate(lock_fd, (off_t)n) != 0)
		return wr_error(wr_errno_code(errno), "could not truncate \"%s/%s\": %m", abs,
		                WR_PID_FILE);
	return WALRUS_OK;
}

/* Where the status line begins: after "pid\ndir\nstart\n". */
static size_t pid_status_offset(const char *text)
{
	const char *p = text;
	for (int line = 0; line < 3 && p != NULL; line++)
		if ((p = strchr(p, '\n')) != NULL)
			p++;
	return p == NULL ? strlen(text) : (size_t)(p - text);
}

static ssize_t pid_file_read(int fd, char *buf, size_t len)
{
	ssize_t n;
	do
		n = pread(fd, buf, len - 1, 0);
	while (n < 0 && errno == EINTR);
	buf[n > 0 ? n : 0] = '\0';
	return n;
}

int datadir_set_pid_status(int lock_fd, const char *abs, const char *status)
{
	char text[PATH_MAX + 2048];
	if (pid_file_read(lock_fd, text, sizeof(text)) < 0)
		return wr_error(wr_errno_code(errno), "could not read \"%s/%s\": %m", abs,
		                WR_PID_FILE);
	size_t off = pid_status_offset(text);
	int n = snprintf(text + off, sizeof(text) - off, "%s\n", status);
	if (n < 0 || (size_t)n >= sizeof(text) - off)
		return wr_error(WALRUS_EINVAL, "status too long for \"%s/%s\"", abs, WR_PID_FILE);
	return pid_file_put(lock_fd, abs, text, off + (size_t)n);
}

void datadir_pid_status(const char *abs, char *buf, size_t len)
{
	char path[PATH_MAX], text[PATH_MAX + 2048];
	buf[0] = '\0';
	if (!wr_snprintf(path, sizeof(path), "%s/%s", abs, WR_PID_FILE))
		return;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = pid_file_read(fd, text, sizeof(text));
	close(fd);
	if (n <= 0)
		return;
	const char *st = text + pid_status_offset(text);
	wr_snprintf(buf, len, "%.*s", (int)strcspn(st, "\n"), st);
}

int datadir_lock_attach(const char *abs, int *fd_out)
{
	int fd;
	int rc = open_pid_file(abs, &fd);
	if (rc != WALRUS_OK)
		return rc;
	int err = ofd_lock(fd, F_RDLCK, 1, true);
	if (err != 0) {
		close(fd);
		errno = err;
		return wr_error(WALRUS_EIO, "could not lock \"%s/%s\": %m", abs, WR_PID_FILE);
	}
	*fd_out = fd;
	return WALRUS_OK;
}

pid_t datadir_instance_pid(const char *abs)
{
	char path[PATH_MAX], buf[32];
	if (!wr_snprintf(path, sizeof(path), "%s/%s", abs, WR_PID_FILE))
		return 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	/* Asking, not taking: a lock taken here would keep a new supervisor out. */
	struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
	pid_t pid = 0;
	if (fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK) {
		ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
		buf[n > 0 ? n : 0] = '\0';
		pid = (pid_t)strtol(buf, NULL, 10);
		if (pid <= 0)
			pid = -1;
	}
	close(fd);
	return pid;
}
