/*
 * cmd_doctor.c - `walrus doctor [DIR]`: can durable writes be trusted in
 * this directory?  Without an instance, it reports the file system and its
 * mount options, the block device and its write cache, whether O_DIRECT and
 * sync_file_range work, how fast 8 KiB writes become durable with each sync
 * method, and the -o settings that are unsafe here; then it recommends a
 * wal_sync_method.  docs/durability.md ("walrus doctor") explains the checks.
 *
 * It never touches walrus's files: all I/O goes to one scratch file it
 * creates with O_EXCL under a unique name in DIR and removes on every path,
 * SIGINT/SIGTERM/SIGHUP/SIGQUIT/SIGPIPE included.  Only SIGKILL (or a crash)
 * can leave a ".walrus-doctor-*.tmp" behind, which is safe to delete.
 *
 * A failed sync is reported as an error and never retried: a second fsync
 * can succeed although the data is lost (docs/durability.md, "fsyncgate").
 */
#include "tool.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define DOC_IO       8192 /* one page: what walrus writes to its WAL and data files */
#define DOC_FAST_US  20.0 /* a cache flush to stable media takes longer than this */
#define DOC_MAX_MSGS 24
#define DOC_MSG_LEN  400
#define DOC_OPT_LEN  1024

/* What a file system type means for durability. */
enum fs_kind {
	FS_LOCAL,    /* a journalled or copy-on-write local file system */
	FS_VOLATILE, /* memory only: fsync is a no-op and a power cut loses everything */
	FS_NETWORK,  /* fsync goes to a server: durable only if the server says so truthfully */
	FS_FUSE,     /* fsync goes to a user-space daemon */
	FS_OVERLAY,  /* fsync goes to the upper layer's file system */
	FS_NOJOURNAL /* a crash can leave the metadata inconsistent */
};

/* statfs f_type values (linux/magic.h; spelled out because not every header has them). */
static const struct {
	unsigned long magic;
	const char *name;
	enum fs_kind kind;
} fs_types[] = {
    {0xEF53, "ext4", FS_LOCAL},            /* EXT4_SUPER_MAGIC: ext2/3 too; mountinfo says which */
    {0x58465342, "xfs", FS_LOCAL},         /* XFS_SUPER_MAGIC */
    {0x9123683E, "btrfs", FS_LOCAL},       /* BTRFS_SUPER_MAGIC */
    {0x2FC12FC1, "zfs", FS_LOCAL},         /* ZFS (out of tree) */
    {0xF2F52010, "f2fs", FS_LOCAL},        /* F2FS_SUPER_MAGIC */
    {0xCA451A4E, "bcachefs", FS_LOCAL},    /* BCACHEFS_STATFS_MAGIC */
    {0x01021994, "tmpfs", FS_VOLATILE},    /* TMPFS_MAGIC */
    {0x858458F6, "ramfs", FS_VOLATILE},    /* RAMFS_MAGIC */
    {0x6969, "nfs", FS_NETWORK},           /* NFS_SUPER_MAGIC */
    {0xFF534D42, "cifs", FS_NETWORK},      /* CIFS_SUPER_MAGIC */
    {0xFE534D42, "smb2", FS_NETWORK},      /* SMB2_SUPER_MAGIC */
    {0x01021997, "9p", FS_NETWORK},        /* V9FS_MAGIC */
    {0x00C36400, "ceph", FS_NETWORK},      /* CEPH_SUPER_MAGIC */
    {0x65735546, "fuse", FS_FUSE},         /* FUSE_SUPER_MAGIC */
    {0x794C7630, "overlayfs", FS_OVERLAY}, /* OVERLAYFS_SUPER_MAGIC */
    {0x4D44, "vfat", FS_NOJOURNAL},        /* MSDOS_SUPER_MAGIC */
    {0x2011BAB0, "exfat", FS_NOJOURNAL},   /* EXFAT_SUPER_MAGIC */
};

/* The timed operations, each on 8 KiB pages of the scratch file. */
enum {
	SP_APPEND,           /* write past the end + fdatasync: allocation and size change */
	SP_OVER_FDATASYNC,   /* overwrite + fdatasync: wal_sync_method=fdatasync */
	SP_OVER_FSYNC,       /* overwrite + fsync: wal_sync_method=fsync */
	SP_ODSYNC,           /* overwrite through an O_DSYNC fd: open_datasync */
	SP_DIRECT_FDATASYNC, /* O_DIRECT overwrite + fdatasync: wal_direct_io=on */
	SP_DIRECT_ODSYNC,    /* O_DIRECT|O_DSYNC overwrite: both */
	SP_DIR_FSYNC,        /* fsync of DIR: what a new WAL segment or control file costs */
	SP_N
};

static const struct {
	const char *key, *label;
} sp_names[SP_N] = {
    {"append_fdatasync", "append + fdatasync"},
    {"overwrite_fdatasync", "overwrite + fdatasync"},
    {"overwrite_fsync", "overwrite + fsync"},
    {"odsync_write", "O_DSYNC write"},
    {"direct_fdatasync", "O_DIRECT write + fdatasync"},
    {"direct_odsync", "O_DIRECT|O_DSYNC write"},
    {"dir_fsync", "fsync of the directory"},
};

enum sync_kind { SYNC_NONE, SYNC_FDATASYNC, SYNC_FSYNC };

typedef struct doc_speed {
	bool ran;
	int ops;
	double median_us, p99_us, ops_per_s;
} doc_speed;

typedef struct doctor {
	bool json, quick;
	const wr_options *opts;
	char dir[PATH_MAX]; /* absolute, symlinks resolved */
	bool is_datadir;
	/* file system */
	unsigned long magic;
	const char *fs_name; /* from the magic; NULL if unknown */
	enum fs_kind kind;
	bool have_mount;
	unsigned mnt_major, mnt_minor;
	char mnt_point[PATH_MAX], mnt_type[64], mnt_source[PATH_MAX];
	char mnt_opts[DOC_OPT_LEN], super_opts[DOC_OPT_LEN];
	/* the block device under it */
	bool have_device;
	unsigned blk_major, blk_minor;
	char dev_name[64], write_cache[32];
	int rotational, logical_block; /* -1: unknown */
	/* probes; *_run false: not reached (the scratch file could not be made) */
	bool odirect_run, odirect_ok;
	int odirect_align; /* smallest accepted alignment of offset, length, memory */
	long dio_mem_align, dio_off_align; /* statx STATX_DIOALIGN; -1 unknown */
	char odirect_err[160];
	bool sfr_run, sfr_ok;
	char sfr_err[160];
	bool dirsync_ok;
	char dirsync_err[160];
	doc_speed sp[SP_N];
	/* findings */
	int nwarn, nnote;
	char warn[DOC_MAX_MSGS][DOC_MSG_LEN], note[DOC_MAX_MSGS][DOC_MSG_LEN];
	char recommendation[DOC_MSG_LEN];
	char error[DOC_MSG_LEN]; /* the first error: the checks after it did not run */
} doctor;

static void finding(doctor *d, bool warning, const char *fmt, ...) WR_PRINTF(3, 4);
static void finding(doctor *d, bool warning, const char *fmt, ...)
{
	int *n = warning ? &d->nwarn : &d->nnote;
	if (*n >= DOC_MAX_MSGS)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(warning ? d->warn[*n] : d->note[*n], DOC_MSG_LEN, fmt, ap);
	va_end(ap);
	(*n)++;
}

/* Records the first error only: later ones are consequences of it. */
static void fail(doctor *d, const char *fmt, ...) WR_PRINTF(2, 3);
static void fail(doctor *d, const char *fmt, ...)
{
	if (d->error[0])
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(d->error, sizeof(d->error), fmt, ap);
	va_end(ap);
}

/* Is the errno of an fd operation "this file system does not do that"? */
static bool unsupported(int err)
{
	return err == EINVAL || err == ENOSYS || err == EOPNOTSUPP || err == ENOTTY;
}

/* ---------------------------------------------------------------- the scratch file */

/*
 * The signal handler's view of the scratch file.  scratch_live is set and
 * cleared with the signals blocked, so the handler never unlinks a name we
 * did not create (O_EXCL lost a race) or one already removed.
 */
static char scratch_path[PATH_MAX];
static volatile sig_atomic_t scratch_live;
static const int doc_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE};
static struct sigaction doc_old_actions[WR_ARRAY_LEN(doc_signals)];

static void on_signal(int sig)
{
	int saved = errno;
	if (scratch_live)
		unlink(scratch_path); /* async-signal-safe; nothing to do if it fails */
	errno = saved;
	/* SA_RESETHAND restored the default action; the signal is blocked while we run, so
	 * the process dies of it on return, and the parent sees the usual status. */
	raise(sig);
}

/* Blocks our signals (saving the mask in @old), or restores @old; fails only on a bad argument. */
static bool block_signals(bool block, sigset_t *old)
{
	sigset_t set;
	sigemptyset(&set);
	for (size_t i = 0; i < WR_ARRAY_LEN(doc_signals); i++)
		sigaddset(&set, doc_signals[i]);
	return sigprocmask(block ? SIG_BLOCK : SIG_SETMASK, block ? &set : old,
	                   block ? old : NULL) == 0;
}

/* Without the handlers a signal could leave the scratch file behind: no file then. */
static bool install_handlers(doctor *d)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESETHAND;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < WR_ARRAY_LEN(doc_signals); i++)
		if (sigaction(doc_signals[i], &sa, &doc_old_actions[i]) != 0) {
			fail(d, "sigaction: %s", strerror(errno));
			return false;
		}
	return true;
}

static void restore_handlers(void)
{
	for (size_t i = 0; i < WR_ARRAY_LEN(doc_signals); i++)
		sigaction(doc_signals[i], &doc_old_actions[i], NULL);
}

/* Creates DIR/.walrus-doctor-XXXXXX.tmp (mode 0600, O_EXCL); -1 on failure (d->error set). */
static int scratch_create(doctor *d)
{
	sigset_t old;
	if (!wr_snprintf(scratch_path, sizeof(scratch_path), "%s/.walrus-doctor-XXXXXX.tmp",
	                 d->dir)) {
		fail(d, "path too long: \"%s\"", d->dir);
		return -1;
	}
	if (!block_signals(true, &old)) {
		fail(d, "sigprocmask: %s", strerror(errno));
		return -1;
	}
	int fd;
	do /* mkostemps opens with O_CREAT|O_EXCL: it never reuses an existing name */
		fd = mkostemps(scratch_path, 4, O_CLOEXEC);
	while (fd < 0 && errno == EINTR);
	int err = errno;
	scratch_live = fd >= 0;
	(void)block_signals(false, &old); /* restores a mask just read: cannot fail */
	if (fd < 0)
		fail(d, "cannot create a scratch file in \"%s\": %s", d->dir, strerror(err));
	return fd;
}

/* Removes the scratch file and makes the removal durable (a power cut must not bring it back). */
static void scratch_remove(doctor *d, int dirfd)
{
	sigset_t old;
	if (!scratch_live)
		return;
	bool blocked = block_signals(true, &old); /* if not, the handler may unlink too: harmless */
	int rc = unlink(scratch_path), err = errno;
	if (rc == 0 || err == ENOENT)
		scratch_live = 0;
	if (blocked)
		(void)block_signals(false, &old);
	if (rc != 0) {
		fail(d, "cannot remove the scratch file \"%s\": %s", scratch_path, strerror(err));
		return;
	}
	/* A directory that refuses fsync (EINVAL) is reported by its own check. */
	if (fsync(dirfd) != 0 && !unsupported(errno))
		fail(d, "fsync of \"%s\" after removing the scratch file failed: %s", d->dir,
		     strerror(errno));
}

/* Opens the scratch file again with other flags, checking it is still our inode. */
static int scratch_reopen(doctor *d, int flags, const struct stat *ours, int *err)
{
	int fd;
	do
		fd = open(scratch_path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | flags);
	while (fd < 0 && errno == EINTR);
	if (fd < 0) {
		*err = errno;
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) != 0 || st.st_dev != ours->st_dev || st.st_ino != ours->st_ino) {
		fail(d, "the scratch file \"%s\" was replaced while doctor ran", scratch_path);
		close(fd);
		*err = 0;
		return -1;
	}
	return fd;
}

/* Closes an fd that was written through: close can report write-back errors (NFS, FUSE). */
static void close_written(doctor *d, int fd)
{
	if (fd >= 0 && close(fd) != 0) /* never retried: Linux has closed the fd anyway */
		fail(d, "close of the scratch file failed: %s", strerror(errno));
}

/* ---------------------------------------------------------------- I/O with checked results */

/* pwrite of all of @len; a short O_DIRECT write is an error (the rest would be unaligned). */
static int write_all(doctor *d, int fd, const char *buf, size_t len, off_t off, bool direct)
{
	size_t done = 0;
	while (done < len) {
		ssize_t w = pwrite(fd, buf + done, len - done, off + (off_t)done);
		if (w < 0 && errno == EINTR)
			continue; /* nothing was written: the same call again is correct */
		if (w < 0)
			return errno;
		if (w == 0 || (direct && (size_t)w != len)) {
			fail(d, "short write to the scratch file (%zd of %zu bytes)", w, len);
			return -1;
		}
		done += (size_t)w;
	}
	return 0;
}

/*
 * fsync/fdatasync, once.  EINTR is an error too: whether the write-back
 * completed is unknown, and a second call could report success for data
 * the first one lost.
 */
static bool sync_once(doctor *d, int fd, enum sync_kind kind, const char *what)
{
	if (kind == SYNC_NONE)
		return true;
	int rc = kind == SYNC_FSYNC ? fsync(fd) : fdatasync(fd);
	if (rc == 0)
		return true;
	fail(d, "%s of %s failed: %s (written data may be lost; not retried)",
	     kind == SYNC_FSYNC ? "fsync" : "fdatasync", what, strerror(errno));
	return false;
}

/* ---------------------------------------------------------------- measurements */

typedef struct doc_bench {
	char *buf;       /* DOC_IO bytes, 4096-aligned (O_DIRECT) */
	uint64_t *lat;   /* max_ops latencies */
	int max_ops;     /* per test */
	int min_ops;     /* even when slower than the budget */
	uint64_t budget; /* ns per test */
	int npages;      /* pages written by the append test: the overwrite region */
} doc_bench;

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/*
 * Times up to max_ops operations: a write of page i (past the end when
 * @append, else over page i % npages) to @wfd unless it is -1, then @sync
 * of @sfd.  Stops after the budget once min_ops are done.  False on error.
 */
static bool measure(doctor *d, doc_bench *b, int which, int wfd, bool append, bool direct,
                    enum sync_kind sync, int sfd)
{
	uint64_t start = wr_now_ns(), total = 0;
	int n = 0;
	while (n < b->max_ops && (n < b->min_ops || wr_now_ns() - start < b->budget)) {
		memcpy(b->buf, &n, sizeof(n)); /* every write differs: no dedup, no skipping */
		off_t off = (off_t)(append ? n : n % b->npages) * DOC_IO;
		uint64_t t0 = wr_now_ns();
		if (wfd >= 0) {
			int err = write_all(d, wfd, b->buf, DOC_IO, off, direct);
			if (err != 0) {
				if (err > 0)
					fail(d, "write to the scratch file failed (%s): %s",
					     sp_names[which].label, strerror(err));
				return false;
			}
		}
		if (!sync_once(d, sfd, sync,
		               which == SP_DIR_FSYNC ? "the directory" : "the scratch file"))
			return false;
		b->lat[n] = wr_now_ns() - t0;
		total += b->lat[n];
		n++;
	}
	doc_speed *s = &d->sp[which];
	qsort(b->lat, (size_t)n, sizeof(*b->lat), cmp_u64);
	s->ran = true;
	s->ops = n;
	size_t mid = (size_t)n / 2, p99 = ((size_t)n * 99 + 99) / 100 - 1; /* ceil(0.99 n)-th */
	s->median_us = (double)b->lat[mid] / 1e3;
	s->p99_us = (double)b->lat[p99] / 1e3;
	s->ops_per_s = total > 0 ? (double)n * 1e9 / (double)total : 0;
	if (append)
		b->npages = n;
	return true;
}

/* sync_file_range(SYNC_FILE_RANGE_WRITE) on a dirty page: walrus's write-back hint. */
static bool probe_sync_file_range(doctor *d, doc_bench *b, int fd)
{
	d->sfr_run = true;
	int err = write_all(d, fd, b->buf, DOC_IO, 0, false);
	if (err != 0) {
		if (err > 0)
			fail(d, "write to the scratch file failed: %s", strerror(err));
		return false;
	}
	if (sync_file_range(fd, 0, DOC_IO, SYNC_FILE_RANGE_WRITE) == 0) {
		d->sfr_ok = true;
	} else if (unsupported(errno) || errno == ESPIPE) {
		snprintf(d->sfr_err, sizeof(d->sfr_err), "%s", strerror(errno));
	} else {
		/* A failed write-back, like a failed fsync: walrus PANICs on it. */
		fail(d, "sync_file_range of the scratch file failed: %s (not retried)",
		     strerror(errno));
		return false;
	}
	return sync_once(d, fd, SYNC_FDATASYNC, "the scratch file");
}

/*
 * O_DIRECT: open, an aligned 8 KiB write, then the smallest alignment of
 * offset, length and memory accepted (512, else 4096).  Returns the O_DIRECT
 * fd for the timed tests, or -1 (unsupported, or d->error set).
 */
static int probe_odirect(doctor *d, doc_bench *b, const struct stat *ours)
{
	int err, fd;
	d->odirect_run = true;
	d->dio_mem_align = d->dio_off_align = -1;
#ifdef STATX_DIOALIGN
	struct statx sx;
	if (statx(AT_FDCWD, scratch_path, AT_SYMLINK_NOFOLLOW, STATX_DIOALIGN, &sx) == 0 &&
	    (sx.stx_mask & STATX_DIOALIGN) && sx.stx_dio_offset_align != 0) {
		d->dio_mem_align = sx.stx_dio_mem_align;
		d->dio_off_align = sx.stx_dio_offset_align;
	}
#endif
	fd = scratch_reopen(d, O_DIRECT, ours, &err);
	if (fd < 0) {
		if (err != 0)
			snprintf(d->odirect_err, sizeof(d->odirect_err), "open with O_DIRECT: %s",
			         strerror(err));
		return -1;
	}
	err = write_all(d, fd, b->buf, DOC_IO, 0, true);
	if (err > 0 && unsupported(err)) {
		snprintf(d->odirect_err, sizeof(d->odirect_err),
		         "a 4096-aligned 8 KiB O_DIRECT write: %s", strerror(err));
		close_written(d, fd);
		return -1;
	}
	if (err != 0) {
		if (err > 0)
			fail(d, "O_DIRECT write to the scratch file failed: %s", strerror(err));
		close_written(d, fd);
		return -1;
	}
	d->odirect_ok = true;
	d->odirect_align = DOC_IO;
	static const int aligns[] = {512, 4096};
	for (size_t i = 0; i < WR_ARRAY_LEN(aligns); i++) {
		int a = aligns[i];
		err = write_all(d, fd, b->buf + a, (size_t)a, a, true);
		if (err == 0) {
			d->odirect_align = a;
			break;
		}
		if (err < 0 || !unsupported(err)) {
			if (err > 0)
				fail(d, "O_DIRECT write to the scratch file failed: %s",
				     strerror(err));
			close_written(d, fd);
			return -1;
		}
	}
	if (!sync_once(d, fd, SYNC_FDATASYNC, "the scratch file")) {
		close_written(d, fd);
		return -1;
	}
	return fd;
}

/* Everything that needs the scratch file; stops at the first error. */
static void run_io(doctor *d, int dirfd)
{
	doc_bench b = {.max_ops = d->quick ? 20 : 200,
	               .min_ops = d->quick ? 3 : 10,
	               .budget = d->quick ? 100000000u : 1000000000u};
	int fd = -1, dfd = -1, xfd = -1, err;
	struct stat ours;

	if (!install_handlers(d))
		goto out;
	b.buf = aligned_alloc(4096, 2 * (size_t)DOC_IO);
	b.lat = malloc(sizeof(*b.lat) * (size_t)b.max_ops);
	if (b.buf == NULL || b.lat == NULL) {
		fail(d, "out of memory");
		goto out;
	}
	/* Incompressible bytes: a compressing file system (zfs, btrfs) must write them all. */
	uint64_t x = 0x9E3779B97F4A7C15u ^ (uint64_t)getpid();
	for (size_t i = 0; i < 2 * (size_t)DOC_IO; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		b.buf[i] = (char)(x >> 32);
	}
	fd = scratch_create(d);
	if (fd < 0)
		goto out;
	if (fstat(fd, &ours) != 0) {
		fail(d, "fstat of the scratch file: %s", strerror(errno));
		goto out;
	}
	if (!measure(d, &b, SP_APPEND, fd, true, false, SYNC_FDATASYNC, fd) ||
	    !measure(d, &b, SP_OVER_FDATASYNC, fd, false, false, SYNC_FDATASYNC, fd) ||
	    !measure(d, &b, SP_OVER_FSYNC, fd, false, false, SYNC_FSYNC, fd))
		goto out;
	xfd = scratch_reopen(d, O_DSYNC, &ours, &err);
	if (xfd < 0) {
		if (err != 0)
			fail(d, "cannot open the scratch file with O_DSYNC: %s", strerror(err));
		goto out;
	}
	if (!measure(d, &b, SP_ODSYNC, xfd, false, false, SYNC_NONE, xfd))
		goto out;
	close_written(d, xfd);
	xfd = -1;
	if (d->error[0] || !probe_sync_file_range(d, &b, fd))
		goto out;
	dfd = probe_odirect(d, &b, &ours);
	if (d->error[0])
		goto out;
	if (dfd >= 0) {
		if (!measure(d, &b, SP_DIRECT_FDATASYNC, dfd, false, true, SYNC_FDATASYNC, dfd))
			goto out;
		xfd = scratch_reopen(d, O_DIRECT | O_DSYNC, &ours, &err);
		if (xfd < 0) {
			if (err != 0)
				fail(d, "cannot open the scratch file with O_DIRECT|O_DSYNC: %s",
				     strerror(err));
			goto out;
		}
		if (!measure(d, &b, SP_DIRECT_ODSYNC, xfd, false, true, SYNC_NONE, xfd))
			goto out;
	}
	/* A directory fsync some file systems refuse (EINVAL): walrus needs it for new files. */
	if (fsync(dirfd) != 0) {
		if (!unsupported(errno)) {
			fail(d, "fsync of \"%s\" failed: %s (not retried)", d->dir,
			     strerror(errno));
			goto out;
		}
		snprintf(d->dirsync_err, sizeof(d->dirsync_err), "%s", strerror(errno));
	} else {
		d->dirsync_ok = true;
		measure(d, &b, SP_DIR_FSYNC, -1, false, false, SYNC_FSYNC, dirfd);
	}
out:
	close_written(d, xfd);
	close_written(d, dfd);
	close_written(d, fd);
	scratch_remove(d, dirfd);
	restore_handlers();
	free(b.buf);
	free(b.lat);
}

/* ---------------------------------------------------------------- file system and device */

/* Undoes mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
	char *o = s;
	for (char *p = s; *p; o++) {
		if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' &&
		    p[3] >= '0' && p[3] <= '7') {
			*o = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
			p += 4;
		} else {
			*o = *p++;
		}
	}
	*o = '\0';
}

/* Is @opt ("nobarrier", "data=writeback") one of the comma-separated @list? */
static bool has_opt(const char *list, const char *opt)
{
	size_t n = strlen(opt);
	for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (strncmp(p, opt, n) == 0 && (p[n] == ',' || p[n] == '\0'))
			return true;
	return false;
}

static bool is_under(const char *path, const char *mp)
{
	size_t n = strlen(mp);
	if (strcmp(mp, "/") == 0)
		return true;
	return strncmp(path, mp, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

/*
 * The mount holding d->dir: among /proc/self/mountinfo's entries whose
 * mount point is a prefix of it, the longest, preferring those with the
 * directory's device number; a later entry of the same mount point is
 * mounted over the earlier one.
 */
static void mount_lookup(doctor *d, dev_t dev)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (f == NULL)
		return;
	char line[4 * PATH_MAX + 2 * DOC_OPT_LEN];
	size_t best_len = 0;
	bool best_dev = false;
	while (fgets(line, sizeof(line), f) != NULL) {
		char *fld[64], *save = NULL;
		int n = 0, sep = -1;
		line[strcspn(line, "\n")] = '\0';
		for (char *t = strtok_r(line, " ", &save); t && n < 64;
		     t = strtok_r(NULL, " ", &save)) {
			if (sep < 0 && n >= 6 && strcmp(t, "-") == 0)
				sep = n;
			fld[n++] = t;
		}
		/* id parent major:minor root mountpoint options [optional...] - type source super
		 */
		unsigned ma, mi;
		if (sep < 0 || n < sep + 4 || sscanf(fld[2], "%u:%u", &ma, &mi) != 2)
			continue;
		unescape(fld[4]);
		if (!is_under(d->dir, fld[4]))
			continue;
		size_t len = strlen(fld[4]);
		bool same_dev = ma == major(dev) && mi == minor(dev);
		if ((best_dev && !same_dev) || (same_dev == best_dev && len < best_len))
			continue;
		best_dev = same_dev;
		best_len = len;
		d->have_mount = true;
		d->mnt_major = ma;
		d->mnt_minor = mi;
		unescape(fld[sep + 2]);
		snprintf(d->mnt_point, sizeof(d->mnt_point), "%s", fld[4]);
		snprintf(d->mnt_type, sizeof(d->mnt_type), "%s", fld[sep + 1]);
		snprintf(d->mnt_source, sizeof(d->mnt_source), "%s", fld[sep + 2]);
		snprintf(d->mnt_opts, sizeof(d->mnt_opts), "%s", fld[5]);
		snprintf(d->super_opts, sizeof(d->super_opts), "%s", fld[sep + 3]);
	}
	fclose(f);
}

/* The first line of a sysfs file, without its newline; false if unreadable. */
static bool read_sys(const char *dir, const char *name, char *buf, size_t len)
{
	char path[PATH_MAX];
	if (!wr_snprintf(path, sizeof(path), "%s/%s", dir, name))
		return false;
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return false;
	bool ok = fgets(buf, (int)len, f) != NULL;
	fclose(f);
	if (ok)
		buf[strcspn(buf, "\n")] = '\0';
	return ok;
}

/* The block device under the mount: /sys/dev/block/M:m, its queue (a partition's is its disk's). */
static void device_lookup(doctor *d)
{
	unsigned ma = d->mnt_major, mi = d->mnt_minor;
	struct stat st;
	/* btrfs (and others) report an anonymous 0:N device; the source names the real one. */
	if (ma == 0 && strncmp(d->mnt_source, "/dev/", 5) == 0 && stat(d->mnt_source, &st) == 0 &&
	    S_ISBLK(st.st_mode)) {
		ma = major(st.st_rdev);
		mi = minor(st.st_rdev);
	}
	if (ma == 0)
		return; /* tmpfs, overlayfs, nfs, fuse: no block device of their own */
	char link[64], sys[PATH_MAX], queue[PATH_MAX + 16], buf[64];
	snprintf(link, sizeof(link), "/sys/dev/block/%u:%u", ma, mi);
	if (realpath(link, sys) == NULL)
		return;
	const char *base = strrchr(sys, '/');
	base = base ? base + 1 : sys;
	if (strlen(base) >= sizeof(d->dev_name))
		return; /* no kernel block device has such a name */
	memcpy(d->dev_name, base, strlen(base) + 1);
	d->have_device = true;
	d->blk_major = ma;
	d->blk_minor = mi;
	snprintf(queue, sizeof(queue), "%s/%s", sys,
	         read_sys(sys, "partition", buf, sizeof(buf)) ? "../queue" : "queue");
	if (!read_sys(queue, "write_cache", d->write_cache, sizeof(d->write_cache)))
		d->write_cache[0] = '\0';
	d->rotational = read_sys(queue, "rotational", buf, sizeof(buf)) ? atoi(buf) : -1;
	d->logical_block = read_sys(queue, "logical_block_size", buf, sizeof(buf)) ? atoi(buf) : -1;
}

static void fs_lookup(doctor *d, const struct statfs *sfs)
{
	d->magic = (unsigned long)sfs->f_type;
	d->kind = FS_LOCAL;
	for (size_t i = 0; i < WR_ARRAY_LEN(fs_types); i++)
		if (fs_types[i].magic == d->magic) {
			d->fs_name = fs_types[i].name;
			d->kind = fs_types[i].kind;
		}
	/* An unknown magic: the mount type still tells a network or FUSE file system. */
	if (d->fs_name == NULL && d->have_mount) {
		if (strncmp(d->mnt_type, "fuse", 4) == 0)
			d->kind = FS_FUSE;
		else if (strncmp(d->mnt_type, "nfs", 3) == 0 || strcmp(d->mnt_type, "cifs") == 0 ||
		         strcmp(d->mnt_type, "smb3") == 0 || strcmp(d->mnt_type, "9p") == 0 ||
		         strcmp(d->mnt_type, "ceph") == 0 || strcmp(d->mnt_type, "glusterfs") == 0)
			d->kind = FS_NETWORK;
	}
}

static const char *fs_display(const doctor *d)
{
	if (d->have_mount && d->mnt_type[0])
		return d->mnt_type; /* "ext4" rather than ext2/3/4's shared magic, "fuse.sshfs" */
	return d->fs_name ? d->fs_name : "unknown";
}

/* ---------------------------------------------------------------- findings */

static bool mount_has(const doctor *d, const char *opt)
{
	return d->have_mount && (has_opt(d->mnt_opts, opt) || has_opt(d->super_opts, opt));
}

static void check_fs(doctor *d)
{
	const char *t = fs_display(d);
	switch (d->kind) {
	case FS_VOLATILE:
		finding(
		    d, true,
		    "%s keeps files in memory only: fsync is a no-op and nothing here survives a "
		    "power loss or reboot",
		    t);
		break;
	case FS_NETWORK:
		finding(
		    d, true,
		    "%s is a network file system: fsync is durable only if the server makes it so "
		    "(NFS: export with sync, not async), and write-back errors may surface only at "
		    "close",
		    t);
		break;
	case FS_FUSE:
		finding(
		    d, true,
		    "%s is a FUSE file system: whether fsync reaches stable storage depends on its "
		    "daemon",
		    t);
		break;
	case FS_OVERLAY:
		finding(
		    d, true,
		    "overlayfs (a container's root file system?): fsync reaches the upper layer's "
		    "file system, whose settings are not visible from here; put the data directory "
		    "on a volume or bind mount instead");
		break;
	case FS_NOJOURNAL:
		finding(
		    d, true,
		    "%s has no journal: a crash can leave its metadata inconsistent and lose files "
		    "that were fsynced",
		    t);
		break;
	case FS_LOCAL:
		break;
	}
	if (mount_has(d, "ro"))
		finding(d, true, "the file system is mounted read-only: walrus cannot write here");
	if (mount_has(d, "nobarrier") || mount_has(d, "barrier=0"))
		finding(d, true,
		        "mounted with nobarrier: fsync does not flush the device's write cache, so "
		        "data it reported durable can be lost at a power cut");
	if (mount_has(d, "data=writeback"))
		finding(
		    d, true,
		    "mounted with data=writeback: no ordering between data and metadata, so after "
		    "a crash files can hold stale blocks; use data=ordered (the default)");
	if (mount_has(d, "errors=continue"))
		finding(
		    d, true,
		    "mounted with errors=continue: after a metadata error the file system keeps "
		    "writing on possibly corrupt metadata; prefer errors=remount-ro");
	if (mount_has(d, "sync") || mount_has(d, "dirsync"))
		finding(d, false, "mounted sync/dirsync: safe, but every write waits for the disk");
	if (!d->have_mount)
		finding(d, false, "no entry in /proc/self/mountinfo: mount options not checked");
}

/* The fastest durable flush of an allocated page; 0 if none measured. */
static double flush_median(const doctor *d)
{
	double m = 0;
	static const int flushes[] = {SP_OVER_FDATASYNC, SP_OVER_FSYNC, SP_DIRECT_FDATASYNC};
	for (size_t i = 0; i < WR_ARRAY_LEN(flushes); i++)
		if (d->sp[flushes[i]].ran && (m == 0 || d->sp[flushes[i]].median_us < m))
			m = d->sp[flushes[i]].median_us;
	return m;
}

/* O_DSYNC writes far faster than write + fdatasync: the flag is probably not honoured. */
static bool odsync_doubtful(const doctor *d)
{
	const doc_speed *o = &d->sp[SP_ODSYNC], *f = &d->sp[SP_OVER_FDATASYNC];
	if (!o->ran || !f->ran || d->kind == FS_VOLATILE)
		return false;
	return o->median_us < DOC_FAST_US ||
	       (f->median_us >= 100.0 && o->median_us * 5.0 < f->median_us);
}

static void check_io(doctor *d)
{
	if (d->odirect_run && !d->odirect_ok && d->odirect_err[0])
		finding(d, false,
		        "O_DIRECT does not work here (%s): wal_direct_io=on cannot be used",
		        d->odirect_err);
	if (d->sfr_run && !d->sfr_ok)
		finding(d, false,
		        "sync_file_range is not supported (%s): checkpoint_flush_after and "
		        "bgwriter_flush_after write-back hints do nothing here",
		        d->sfr_err);
	if (!d->dirsync_ok && d->dirsync_err[0])
		finding(d, true,
		        "fsync of the directory is refused (%s): a new or renamed file may be lost "
		        "at a crash, and walrus fails when it syncs one",
		        d->dirsync_err);
	double m = flush_median(d);
	if (m > 0 && m < DOC_FAST_US && d->kind != FS_VOLATILE) {
		if (strcmp(d->write_cache, "write through") == 0)
			finding(d, false,
			        "fsync takes %.1f us: plausible, as the device reports no volatile "
			        "write cache (\"write through\", e.g. power-loss protection)",
			        m);
		else
			finding(
			    d, true,
			    "fsync faster than any durable device (median %.1f us): a volatile "
			    "write cache may acknowledge before data is durable; check `hdparm -W`/"
			    "the device's cache settings (in a VM: the hypervisor's disk cache "
			    "mode)",
			    m);
	}
	const doc_speed *f = &d->sp[SP_OVER_FDATASYNC];
	if (f->ran && d->kind != FS_VOLATILE && f->p99_us > 10.0 * f->median_us)
		finding(
		    d, false,
		    "flush latencies vary a lot (overwrite + fdatasync: p99 %.0f us, median %.0f "
		    "us): the device or machine is busy; re-run when idle before choosing a "
		    "wal_sync_method",
		    f->p99_us, f->median_us);
	if (odsync_doubtful(d))
		finding(
		    d, false,
		    "O_DSYNC writes (%.1f us) are much faster than write + fdatasync (%.1f us): "
		    "O_DSYNC is probably not honoured here; avoid wal_sync_method=open_datasync",
		    d->sp[SP_ODSYNC].median_us, d->sp[SP_OVER_FDATASYNC].median_us);
}

static void check_settings(doctor *d)
{
	const wr_options *o = d->opts;
	if (!o->synchronous_commit)
		finding(d, true,
		        "synchronous_commit=off: acknowledged writes can be lost at a crash (those "
		        "of the last wal_writer_delay)");
	if (!o->full_page_writes)
		finding(
		    d, true,
		    "full_page_writes=off: a page torn by a crash (a partial 8 KiB write) cannot "
		    "be restored from the WAL; safe only if the storage writes 8 KiB atomically");
	if (o->wal_direct_io == WR_DIRECT_ON && d->odirect_run && !d->odirect_ok)
		finding(d, true,
		        "wal_direct_io=on, but O_DIRECT failed here: walrus cannot open its WAL");
	if (o->wal_sync_method == WR_SYNC_OPEN_DATASYNC &&
	    (odsync_doubtful(d) || d->kind == FS_NETWORK || d->kind == FS_FUSE))
		finding(d, true,
		        "wal_sync_method=open_datasync on a file system where O_DSYNC may not be "
		        "honoured: commits may be acknowledged before they are durable");
	if (o->mmap_reads)
		finding(
		    d, false,
		    "mmap_reads=on: a process with data files mapped has walrus's SIGBUS handler, "
		    "which turns a disk read error under a get into an error code; a SIGBUS "
		    "handler the application installs after it replaces it, and such an error "
		    "then kills the process");
	if ((o->checkpoint_flush_after > 0 || o->bgwriter_flush_after > 0) && d->sfr_run &&
	    !d->sfr_ok)
		finding(d, false, "the *_flush_after settings have no effect here (see above)");
}

/* Which WAL sync method was fastest among those that are durable here. */
static void recommend(doctor *d)
{
	static const struct {
		int sp;
		const char *setting;
	} cand[] = {
	    {SP_OVER_FDATASYNC, "wal_sync_method=fdatasync"}, /* the default: first */
	    {SP_OVER_FSYNC, "wal_sync_method=fsync"},
	    {SP_ODSYNC, "wal_sync_method=open_datasync"},
	    {SP_DIRECT_FDATASYNC, "wal_sync_method=fdatasync -o wal_direct_io=on"},
	    {SP_DIRECT_ODSYNC, "wal_sync_method=open_datasync -o wal_direct_io=on"},
	};
	if (d->error[0])
		return;
	if (d->kind == FS_VOLATILE) {
		snprintf(
		    d->recommendation, sizeof(d->recommendation),
		    "none: no setting makes %s durable; put the data directory on a persistent "
		    "file system",
		    fs_display(d));
		return;
	}
	int best = -1;
	for (size_t i = 0; i < WR_ARRAY_LEN(cand); i++) {
		const doc_speed *s = &d->sp[cand[i].sp];
		if (!s->ran || ((cand[i].sp == SP_ODSYNC || cand[i].sp == SP_DIRECT_ODSYNC) &&
		                odsync_doubtful(d)))
			continue;
		/* Leave the default only for a clear gain (20%), not for noise. */
		if (best < 0 || s->median_us < d->sp[cand[best].sp].median_us * 0.8)
			best = (int)i;
	}
	if (best < 0)
		return;
	const doc_speed *s = &d->sp[cand[best].sp];
	const char *first = d->nwarn > 0 ? "after fixing the warnings above, " : "";
	if (best == 0)
		snprintf(d->recommendation, sizeof(d->recommendation),
		         "%skeep the default -o %s (median %.1f us per 8 KiB WAL flush, %.0f/s; no "
		         "other durable method was more than 20%% faster)",
		         first, cand[0].setting, s->median_us, s->ops_per_s);
	else
		snprintf(d->recommendation, sizeof(d->recommendation),
		         "%s-o %s (the fastest durable WAL flush here: median %.1f us, %.0f/s; the "
		         "default fdatasync: %.1f us)",
		         first, cand[best].setting, s->median_us, s->ops_per_s,
		         d->sp[SP_OVER_FDATASYNC].median_us);
}

/* ---------------------------------------------------------------- output */

static const char *const shown_opts[] = {
    "wal_sync_method",        "wal_direct_io",        "full_page_writes", "synchronous_commit",
    "checkpoint_flush_after", "bgwriter_flush_after", "mmap_reads"};

static void json_str(const char *s)
{
	if (s == NULL) {
		fputs("null", stdout);
		return;
	}
	putchar('"');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if (*p < 0x20)
			printf("\\u%04x", *p);
		else
			putchar(*p);
	}
	putchar('"');
}

static const char *opt_or_null(const char *s)
{
	return s[0] ? s : NULL;
}

static void print_json(const doctor *d, int exit_code)
{
	char val[64];
	printf("{\"dir\":");
	json_str(d->dir);
	printf(",\"data_directory\":%s,\"fs\":{\"type\":", d->is_datadir ? "true" : "false");
	json_str(fs_display(d));
	printf(",\"magic\":\"0x%lx\",\"mount_point\":", d->magic);
	json_str(d->have_mount ? d->mnt_point : NULL);
	printf(",\"source\":");
	json_str(d->have_mount ? d->mnt_source : NULL);
	printf(",\"mount_options\":");
	json_str(d->have_mount ? d->mnt_opts : NULL);
	printf(",\"super_options\":");
	json_str(d->have_mount ? d->super_opts : NULL);
	printf("},\"device\":");
	if (d->have_device) {
		printf("{\"name\":");
		json_str(d->dev_name);
		printf(",\"dev\":\"%u:%u\",\"write_cache\":", d->blk_major, d->blk_minor);
		json_str(opt_or_null(d->write_cache));
		if (d->rotational >= 0)
			printf(",\"rotational\":%s", d->rotational ? "true" : "false");
		else
			printf(",\"rotational\":null");
		if (d->logical_block >= 0)
			printf(",\"logical_block_size\":%d}", d->logical_block);
		else
			printf(",\"logical_block_size\":null}");
	} else {
		printf("null");
	}
	printf(",\"o_direct\":");
	if (d->odirect_run) {
		printf("{\"supported\":%s,\"align\":%d", d->odirect_ok ? "true" : "false",
		       d->odirect_ok ? d->odirect_align : 0);
		if (d->dio_off_align >= 0)
			printf(",\"dio_mem_align\":%ld,\"dio_offset_align\":%ld", d->dio_mem_align,
			       d->dio_off_align);
		else
			printf(",\"dio_mem_align\":null,\"dio_offset_align\":null");
		printf(",\"error\":");
		json_str(opt_or_null(d->odirect_err));
		putchar('}');
	} else {
		printf("null");
	}
	printf(",\"sync_file_range\":");
	if (d->sfr_run) {
		printf("{\"supported\":%s,\"error\":", d->sfr_ok ? "true" : "false");
		json_str(opt_or_null(d->sfr_err));
		putchar('}');
	} else {
		printf("null");
	}
	printf(",\"speed\":{");
	for (int i = 0; i < SP_N; i++) {
		const doc_speed *s = &d->sp[i];
		printf("%s\"%s\":", i ? "," : "", sp_names[i].key);
		if (s->ran)
			printf("{\"ops\":%d,\"median_us\":%.1f,\"p99_us\":%.1f,\"ops_per_s\":%.0f}",
			       s->ops, s->median_us, s->p99_us, s->ops_per_s);
		else
			printf("null");
	}
	printf("},\"options\":{");
	for (size_t i = 0; i < WR_ARRAY_LEN(shown_opts); i++) {
		if (wr_opts_get(d->opts, shown_opts[i], val, sizeof(val)) != WALRUS_OK)
			snprintf(val, sizeof(val), "?");
		printf("%s\"%s\":", i ? "," : "", shown_opts[i]);
		json_str(val);
	}
	printf("},\"warnings\":[");
	for (int i = 0; i < d->nwarn; i++) {
		if (i)
			putchar(',');
		json_str(d->warn[i]);
	}
	printf("],\"notes\":[");
	for (int i = 0; i < d->nnote; i++) {
		if (i)
			putchar(',');
		json_str(d->note[i]);
	}
	printf("],\"recommendation\":");
	json_str(opt_or_null(d->recommendation));
	printf(",\"error\":");
	json_str(opt_or_null(d->error));
	printf(",\"exit\":%d}\n", exit_code);
}

static void print_human(const doctor *d, int exit_code)
{
	char val[64];
	printf("walrus doctor: \"%s\"%s\n", d->dir,
	       d->is_datadir ? " (a walrus data directory)" : "");
	printf("  file system      %s (statfs magic 0x%lx)", fs_display(d), d->magic);
	if (d->have_mount)
		printf(", %s mounted at %s\n  mount options    %s; super block: %s\n",
		       d->mnt_source, d->mnt_point, d->mnt_opts, d->super_opts);
	else
		printf("\n");
	if (d->have_device) {
		printf("  device           %s (%u:%u): write cache \"%s\", %s, logical block ",
		       d->dev_name, d->blk_major, d->blk_minor,
		       d->write_cache[0] ? d->write_cache : "unknown",
		       d->rotational < 0 ? "rotational unknown"
		       : d->rotational   ? "rotational"
		                         : "not rotational");
		if (d->logical_block >= 0)
			printf("%d B\n", d->logical_block);
		else
			printf("unknown\n");
	} else {
		printf(
		    "  device           none found (no block device of its own, or not in /sys)\n");
	}
	if (d->odirect_run && d->odirect_ok) {
		printf("  O_DIRECT         yes: 8 KiB aligned writes work, %d B alignment accepted",
		       d->odirect_align);
		if (d->dio_off_align >= 0)
			printf(" (statx: memory %ld B, offset %ld B)", d->dio_mem_align,
			       d->dio_off_align);
		printf("\n");
	} else if (d->odirect_run) {
		printf("  O_DIRECT         no: %s\n", d->odirect_err[0] ? d->odirect_err : "error");
	}
	if (d->sfr_run)
		printf("  sync_file_range  %s%s\n",
		       d->sfr_ok ? "yes: SYNC_FILE_RANGE_WRITE accepted" : "no: ",
		       d->sfr_ok ? "" : d->sfr_err);
	bool any = false;
	for (int i = 0; i < SP_N; i++)
		any |= d->sp[i].ran;
	if (any) {
		printf("  speed, 8 KiB per operation      ops    median       p99      ops/s\n");
		for (int i = 0; i < SP_N; i++) {
			const doc_speed *s = &d->sp[i];
			if (s->ran)
				printf("    %-28s %5d %9.1f us %9.1f us %8.0f\n", sp_names[i].label,
				       s->ops, s->median_us, s->p99_us, s->ops_per_s);
		}
	}
	printf("  settings        ");
	for (size_t i = 0; i < WR_ARRAY_LEN(shown_opts); i++)
		if (wr_opts_get(d->opts, shown_opts[i], val, sizeof(val)) == WALRUS_OK)
			printf(" %s=%s", shown_opts[i], val);
	printf("\n");
	for (int i = 0; i < d->nwarn; i++)
		printf("WARNING: %s\n", d->warn[i]);
	for (int i = 0; i < d->nnote; i++)
		printf("note: %s\n", d->note[i]);
	if (d->error[0])
		printf("ERROR: %s\n", d->error);
	if (d->recommendation[0])
		printf("recommendation: %s\n", d->recommendation);
	printf("result: %d warning%s, %d note%s%s (exit %d)\n", d->nwarn, d->nwarn == 1 ? "" : "s",
	       d->nnote, d->nnote == 1 ? "" : "s",
	       d->error[0] ? ", checks stopped by an error" : "", exit_code);
}

/* ---------------------------------------------------------------- the command */

static void usage(void)
{
	printf(
	    "usage: walrus [-D DIR] [-o name=value ...] doctor [--quick] [--json] [DIR]\n\n"
	    "Checks whether durable writes can be trusted in DIR (default: -D or\n"
	    "$WALRUS_DATA; it need not be a data directory yet, and no instance is\n"
	    "needed): file system type and mount options, the block device's write\n"
	    "cache, O_DIRECT and its alignment, sync_file_range, and the latency of\n"
	    "8 KiB writes made durable with fdatasync, fsync, O_DSYNC and O_DIRECT, plus\n"
	    "fsync of DIR.  Warns about unsafe file systems, mount options, a fsync too\n"
	    "fast to be durable, and unsafe -o settings; recommends a wal_sync_method.\n"
	    "All I/O goes to a scratch file DIR/.walrus-doctor-XXXXXX.tmp that it\n"
	    "creates (O_EXCL) and always removes; it adds I/O load while it runs.\n\n"
	    "  --quick   a few operations per test (under a second in all)\n"
	    "  --json    one JSON object on one line\n\n"
	    "exit codes: 0 nothing unsafe found, 1 DIR does not exist,\n"
	    "            2 warnings (something unsafe) or usage error (DIR not a directory),\n"
	    "            3 an error stopped the checks (scratch file not creatable, I/O error)\n");
}

int cmd_doctor(tool_ctx *ctx, int argc, char **argv)
{
	static doctor dr; /* large (messages, paths): not on the stack */
	doctor *d = &dr;
	const char *arg = NULL;

	memset(d, 0, sizeof(*d));
	if (tool_wants_help(argc, argv)) {
		usage();
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0) {
			d->json = true;
		} else if (strcmp(argv[i], "--quick") == 0) {
			d->quick = true;
		} else if (argv[i][0] == '-' || arg != NULL) {
			fprintf(stderr, "walrus doctor: unexpected argument \"%s\"\n", argv[i]);
			return TOOL_EXIT_USAGE;
		} else {
			arg = argv[i];
		}
	}
	if (arg == NULL)
		arg = ctx->datadir;
	if (arg == NULL || arg[0] == '\0') {
		fprintf(stderr, "walrus doctor: no directory: give DIR, use -D DIR or set "
		                "WALRUS_DATA\n");
		return TOOL_EXIT_USAGE;
	}
	d->opts = &ctx->opts->o;
	struct stat st;
	if (stat(arg, &st) != 0) {
		fprintf(stderr, "walrus doctor: \"%s\": %s\n", arg, strerror(errno));
		return errno == ENOENT ? TOOL_EXIT_NOTFOUND : TOOL_EXIT_ENGINE;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "walrus doctor: \"%s\" is not a directory\n", arg);
		return TOOL_EXIT_USAGE;
	}
	struct statfs sfs;
	if (realpath(arg, d->dir) == NULL || statfs(d->dir, &sfs) != 0) {
		fprintf(stderr, "walrus doctor: \"%s\": %s\n", arg, strerror(errno));
		return TOOL_EXIT_ENGINE;
	}
	mount_lookup(d, st.st_dev);
	fs_lookup(d, &sfs);
	device_lookup(d);

	char path[PATH_MAX];
	struct stat wst;
	d->is_datadir =
	    wr_snprintf(path, sizeof(path), "%s/WALRUS_VERSION", d->dir) && access(path, F_OK) == 0;
	/* A prepared or moved WAL (DIR/wal a symlink elsewhere) is flushed on another file system.
	 */
	if (wr_snprintf(path, sizeof(path), "%s/wal", d->dir) && stat(path, &wst) == 0 &&
	    S_ISDIR(wst.st_mode) && wst.st_dev != st.st_dev)
		finding(d, false,
		        "DIR/wal is on another file system: run `walrus doctor %s` for the WAL's",
		        path);

	int dirfd;
	do
		dirfd = open(d->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	while (dirfd < 0 && errno == EINTR);
	if (dirfd < 0)
		fail(d, "cannot open \"%s\": %s", d->dir, strerror(errno));
	else
		run_io(d, dirfd);
	if (dirfd >= 0)
		close(dirfd); /* opened read-only: nothing to report */

	check_fs(d);
	check_io(d);
	check_settings(d);
	recommend(d);
	int ex = d->error[0] ? TOOL_EXIT_ENGINE : d->nwarn > 0 ? TOOL_EXIT_DAMAGE : TOOL_EXIT_OK;
	if (d->json)
		print_json(d, ex);
	else
		print_human(d, ex);
	if (d->error[0])
		fprintf(stderr, "walrus doctor: %s\n", d->error);
	return ex;
}
