/*
 * direct.c - data files with O_DIRECT (option data_direct_io): whether this
 * process opens them so, and whether the file system of DIR/base takes it.
 *
 * Interface: smgr_set_direct, smgr_direct, smgr_direct_probe (storage.h).
 *
 * Notes:
 * - The decision is the instance's: the supervisor probes once per start
 *   (the buffer pool's buf_direct_io_init) and keeps the answer in the
 *   pool's shared region; each process that attaches the pool sets it here
 *   before it opens a data file, and it holds until the next attach.
 * - The probe opens a file in DIR/base with O_DIRECT, as every segment is
 *   opened then: an unnamed one (O_TMPFILE), so that nothing is left behind
 *   for a backup to copy or a crash to strand; where the file system has no
 *   unnamed files, a named one removed at once.  A file system without
 *   direct I/O refuses the open with EINVAL (ramfs; tmpfs before Linux
 *   6.6).  statx then says which alignment direct I/O needs there
 *   (STATX_DIOALIGN): walrus moves 8 KiB pages at multiples of 8 KiB from
 *   memory aligned to SMGR_DIRECT_ALIGN, so a larger requirement is a
 *   refusal too.
 * - Only a refusal (EINVAL) makes `auto` go through the page cache quietly
 *   (one LOG line) and `on` fail the start.  Any other failure of the probe
 *   (a full disk, say: a read-only start must still work) says nothing
 *   about O_DIRECT: `on` keeps it (the segments' own opens will report),
 *   `auto` takes the page cache, each with a WARNING.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include "storage/storage.h"

static _Atomic bool smgr_direct_on;

void smgr_set_direct(bool on)
{
	atomic_store_explicit(&smgr_direct_on, on, memory_order_relaxed);
}

bool smgr_direct(void)
{
	return atomic_load_explicit(&smgr_direct_on, memory_order_relaxed);
}

/* statfs f_type values of file systems people put data on (linux/magic.h). */
static const struct {
	unsigned long magic;
	const char *name;
} direct_fs_names[] = {
    {0xEF53, "ext4"},      {0x58465342, "xfs"},       {0x9123683E, "btrfs"},
    {0x2FC12FC1, "zfs"},   {0xF2F52010, "f2fs"},      {0xCA451A4E, "bcachefs"},
    {0x01021994, "tmpfs"}, {0x858458F6, "ramfs"},     {0x6969, "nfs"},
    {0x65735546, "fuse"},  {0x794C7630, "overlayfs"}, {0x01021997, "9p"},
};

/* "ext4", "tmpfs", ... or "file system type 0x..." into @buf. */
static const char *direct_fs_name(const char *dir, char *buf, size_t len)
{
	struct statfs sfs;
	if (statfs(dir, &sfs) != 0) {
		wr_snprintf(buf, len, "unknown file system");
		return buf;
	}
	for (size_t i = 0; i < WR_ARRAY_LEN(direct_fs_names); i++)
		if (direct_fs_names[i].magic == (unsigned long)sfs.f_type)
			return direct_fs_names[i].name;
	wr_snprintf(buf, len, "file system type 0x%lx", (unsigned long)sfs.f_type);
	return buf;
}

/* Whether direct I/O on @fd takes walrus's alignment; EINVAL if not. */
static int direct_check_align(int fd)
{
#ifdef STATX_DIOALIGN
	struct statx sx;
	if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) != 0 ||
	    !(sx.stx_mask & STATX_DIOALIGN))
		return WALRUS_OK; /* not told: the open's answer stands */
	int rc = WALRUS_OK;
	if (sx.stx_dio_offset_align == 0)
		rc = wr_error(WALRUS_EINVAL, "statx says direct I/O is not supported there");
	else if (sx.stx_dio_mem_align > SMGR_DIRECT_ALIGN ||
	         sx.stx_dio_offset_align > SMGR_DIRECT_ALIGN)
		rc = wr_error(WALRUS_EINVAL,
		              "direct I/O there needs memory aligned to %u bytes and offsets to "
		              "%u, more than walrus's %d",
		              sx.stx_dio_mem_align, sx.stx_dio_offset_align, SMGR_DIRECT_ALIGN);
	if (rc != WALRUS_OK)
		errno = EINVAL; /* a refusal, as the open's would be */
	return rc;
#else
	(void)fd;
	return WALRUS_OK;
#endif
}

/* Opens a file in @base with O_DIRECT and checks its alignment; errno kept on error. */
static int direct_try(const char *base)
{
	fdc_file f;
	char path[PATH_MAX] = "";
	int rc = fdc_open(base, O_TMPFILE | O_RDWR | O_DIRECT, 0600, &f);
	if (rc != WALRUS_OK && (errno == EOPNOTSUPP || errno == EISDIR)) {
		wr_error_clear(); /* no unnamed files here: a named one */
		wr_snprintf(path, sizeof(path), "%s/direct_io.probe", base);
		rc = fdc_open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600, &f);
	}
	if (rc == WALRUS_OK) {
		int fd;
		rc = fdc_fd(f, &fd);
		if (rc == WALRUS_OK)
			rc = direct_check_align(fd);
		int err = errno;
		(void)fdc_close(f); /* never written: nothing to lose */
		errno = err;
	}
	/* A refused O_DIRECT open may have created the file before refusing. */
	if (path[0] != '\0') {
		int err = errno;
		char msg[512];
		wr_snprintf(msg, sizeof(msg), "%s", rc != WALRUS_OK ? walrus_errmsg() : "");
		if (fdc_unlink(path) != WALRUS_OK && errno != ENOENT)
			wr_log(WR_WARNING, "%s", walrus_errmsg());
		wr_error_clear();
		if (rc != WALRUS_OK)
			rc = wr_error(rc, "%s", msg);
		errno = err;
	}
	return rc;
}

int smgr_direct_probe(const char *datadir, int mode, bool mmap_reads, bool *use)
{
	*use = false;
	if (mode == WR_DIRECT_OFF)
		return WALRUS_OK;
	if (mode == WR_DIRECT_AUTO && mmap_reads) {
		wr_log(WR_LOG, "data files go through the page cache: mmap_reads is on "
		               "(data_direct_io=auto)");
		return WALRUS_OK;
	}
	char base[PATH_MAX], fsbuf[64];
	if (!wr_snprintf(base, sizeof(base), "%s/base", datadir))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s/base\"", datadir);
	if (direct_try(base) == WALRUS_OK) {
		*use = true;
		return WALRUS_OK;
	}
	bool refused = errno == EINVAL;
	char why[512]; /* the message's own buffer is the one wr_error writes */
	wr_snprintf(why, sizeof(why), "%s", walrus_errmsg());
	const char *fs = direct_fs_name(base, fsbuf, sizeof(fsbuf));
	if (refused && mode == WR_DIRECT_ON)
		return wr_error(WALRUS_EINVAL,
		                "data_direct_io=on, but the file system of \"%s\" (%s) refuses "
		                "O_DIRECT: %s",
		                base, fs, why);
	if (refused)
		wr_log(
		    WR_LOG,
		    "the file system of \"%s\" (%s) refuses O_DIRECT (%s): data files go through "
		    "the page cache (data_direct_io=auto)",
		    base, fs, why);
	else
		wr_log(WR_WARNING, "could not test O_DIRECT in \"%s\" (%s): %s; data files %s",
		       base, fs, why,
		       mode == WR_DIRECT_ON ? "are opened with O_DIRECT (data_direct_io=on)"
		                            : "go through the page cache (data_direct_io=auto)");
	*use = !refused && mode == WR_DIRECT_ON;
	wr_error_clear();
	return WALRUS_OK;
}
