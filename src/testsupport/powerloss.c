/*
 * powerloss.c - the power-loss journal (test builds only).
 *
 * Interface: ts_pl_* (testsupport.h), called by the fd cache around each
 * change it makes to a file.
 */
#ifndef WALRUS_TEST_HOOKS
#error "test builds only: meson -Dtest_hooks=true (src/testsupport/meson.build)"
#endif
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/common.h"
#include "testsupport/testsupport.h"

/*
 * The power-loss simulation (test support, docs/durability.md).  With
 * WALRUS_POWERLOSS=DIR in its environment, every process's fd cache appends
 * to DIR/journal, before each change it makes to a file, an "intent" record
 * holding what the change destroys (the old bytes of a pwrite's range, the
 * old size, a hard link DIR/saved-PID-N to a file about to be unlinked or
 * replaced by a rename), a "done" record once the change returned, and a
 * "sync" record after each successful fsync/fdatasync of a file or a
 * directory, naming the journal's size when that sync began.  A write or a
 * name change is durable if its done record lies before the start of a
 * later sync of its file (or of its directory, for names).  Everything else
 * is what a power cut may lose: tests/durability/powerloss.py SIGKILLs the
 * instance and rolls those changes back from the journal (all of them, or
 * a random subset of 4 KiB pages or 512-byte sectors, leaving torn pages),
 * then recovers.  Files are identified by device and inode, so a renamed or
 * recycled WAL segment keeps its history.  The journal is a single file
 * opened O_APPEND by each process: one write() per record keeps the
 * records of all processes whole and in one order.
 *
 * I/O submitted through io_uring is journaled by its submitters through
 * the fd cache (fdc_io_write_intent, fdc_io_write_done, fdc_io_synced):
 * intents before submission, DONE and SYNC records as completions are
 * reaped.
 */
enum {
	PL_WRITE = 1,   /* intent: pwrite [off, off+len); data = old bytes inside the old size */
	PL_TRUNC = 2,   /* intent: ftruncate to off; data = old bytes [off, size) when shrinking */
	PL_FALLOC = 3,  /* intent: posix_fallocate [off, off+len) */
	PL_CREATE = 4,  /* intent: open(O_CREAT) of a path that does not exist */
	PL_RENAME = 5,  /* intent: path = "from\0to"; data = saved link of the old target, if any */
	PL_UNLINK = 6,  /* intent: path; data = saved link of the file */
	PL_DONE = 10,   /* the intent at journal offset ref completed */
	PL_SYNC = 20,   /* fsync/fdatasync of (dev, ino) succeeded; it began at journal size ref */
	PL_DIRSYNC = 21 /* the same for a directory (dirdev, dirino) */
};

_Static_assert(PL_WRITE == TS_PL_WRITE && PL_TRUNC == TS_PL_TRUNC && PL_FALLOC == TS_PL_FALLOC,
               "the fd cache names data changes by the journal's record types");

#define PL_MAGIC 0x314a4c50u /* "PLJ1" */

typedef struct pl_rec {
	uint32_t magic;
	uint16_t type;
	uint16_t flags;
	uint32_t pid;
	uint32_t pathlen;
	uint64_t dev, ino;       /* the file */
	uint64_t dirdev, dirino; /* the directory of a name change */
	uint64_t off, len;
	uint64_t size; /* the file's size before the change */
	uint64_t ref;
	uint32_t datalen;
	uint32_t check; /* CRC-32 (zlib's) of the 84 bytes before it */
} pl_rec;               /* 88 bytes: tests/durability/powerloss.py reads it */
_Static_assert(sizeof(pl_rec) == 88, "the journal record layout is fixed");

static char *pl_dir;   /* NULL: the simulation is off */
static int pl_fd = -1; /* this process's fd of DIR/journal */
static pid_t pl_pid;   /* the process pl_fd belongs to (reopened after fork) */
static dev_t pl_dev;   /* the journal's identity, to know pl_fd is still it */
static ino_t pl_ino;
static uint64_t pl_saved; /* counter for saved links */
static bool pl_checked;

bool ts_pl_enabled(void)
{
	if (WR_UNLIKELY(!pl_checked)) {
		pl_checked = true;
		const char *d = getenv("WALRUS_POWERLOSS");
		if (d != NULL && *d != '\0')
			pl_dir = strdup(d);
	}
	return pl_dir != NULL;
}

static int pl_journal(void)
{
	pid_t me = getpid();
	if (pl_fd >= 0 && pl_pid == me)
		return pl_fd;
	/* Inherited across fork: a position of its own for each process.  The
	 * child may have closed every inherited fd already (the supervisor
	 * does) and reused the number (for its log): close only the journal. */
	struct stat st;
	if (pl_fd >= 0 && fstat(pl_fd, &st) == 0 && st.st_dev == pl_dev && st.st_ino == pl_ino)
		close(pl_fd);
	char path[4096];
	snprintf(path, sizeof(path), "%s/journal", pl_dir);
	pl_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (pl_fd < 0 || fstat(pl_fd, &st) != 0)
		wr_panic("power-loss journal: could not open \"%s\": %m", path);
	pl_dev = st.st_dev;
	pl_ino = st.st_ino;
	pl_pid = me;
	return pl_fd;
}

/* zlib's CRC-32, which Python has: bitwise, over 84 bytes per record. */
static uint32_t pl_check(const pl_rec *r)
{
	const unsigned char *b = (const unsigned char *)r;
	uint32_t c = 0xffffffffu;
	for (size_t i = 0; i < offsetof(pl_rec, check); i++) {
		c ^= b[i];
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
	}
	return ~c;
}

/*
 * Appends one record in one write(); returns its offset in the journal.
 * A process SIGKILLed inside the write (the supervisor kills the others
 * after a PANIC) may leave a torn record that the next append follows
 * directly: the header's check lets powerloss.py find the next whole
 * record, and drop the torn one.
 */
static uint64_t pl_append(pl_rec *r, const char *path, size_t pathlen, const void *data)
{
	int fd = pl_journal();
	r->magic = PL_MAGIC;
	r->pid = (uint32_t)pl_pid;
	r->pathlen = (uint32_t)pathlen;
	r->check = pl_check(r);
	struct iovec iov[3] = {
	    {r, sizeof(*r)}, {(void *)path, pathlen}, {(void *)data, r->datalen}};
	size_t total = sizeof(*r) + pathlen + r->datalen;
	ssize_t n;
	do
		n = writev(fd, iov, 3);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)total)
		wr_panic("power-loss journal: could not append a record: %m");
	off_t end = lseek(fd, 0, SEEK_CUR); /* O_APPEND: just past our record */
	return (uint64_t)end - total;
}

static uint64_t pl_journal_size(void)
{
	struct stat st;
	if (fstat(pl_journal(), &st) != 0)
		wr_panic("power-loss journal: could not stat it: %m");
	return (uint64_t)st.st_size;
}

/* Reads [off, off+len) of the file behind @fd (which may be write-only). */
static void pl_read_old(int fd, void *buf, size_t len, off_t off)
{
	ssize_t n = pread(fd, buf, len, off);
	/* Write-only, or O_DIRECT (whose reads need aligned buffers): read through a plain fd. */
	if (n < 0 && (errno == EBADF || errno == EINVAL)) {
		char p[64];
		snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
		int rfd = open(p, O_RDONLY | O_CLOEXEC);
		if (rfd >= 0) {
			n = pread(rfd, buf, len, off);
			close(rfd);
		}
	}
	if (n != (ssize_t)len)
		wr_panic("power-loss journal: could not read the old contents of fd %d: %m", fd);
}

/* Intent record of a change to the data or size of the file behind @fd. */
uint64_t ts_pl_data_intent(int type, int fd, const char *path, off_t off, off_t len)
{
	struct stat st;
	if (fstat(fd, &st) != 0)
		wr_panic("power-loss journal: could not stat \"%s\": %m", path);
	pl_rec r = {.type = (uint16_t)type,
	            .dev = st.st_dev,
	            .ino = st.st_ino,
	            .off = (uint64_t)off,
	            .len = (uint64_t)len,
	            .size = (uint64_t)st.st_size};
	/* The bytes the change may destroy: inside the old size only. */
	uint64_t from = (uint64_t)off, to = (uint64_t)off + (uint64_t)len;
	if (type == PL_TRUNC) {
		from = (uint64_t)off;
		to = (uint64_t)st.st_size;
	}
	if (to > (uint64_t)st.st_size)
		to = (uint64_t)st.st_size;
	void *old = NULL;
	if (to > from) {
		r.datalen = (uint32_t)(to - from);
		old = malloc(r.datalen);
		if (old == NULL)
			wr_panic("power-loss journal: out of memory");
		pl_read_old(fd, old, r.datalen, (off_t)from);
	}
	uint64_t at = pl_append(&r, path, strlen(path), old);
	free(old);
	return at;
}

void ts_pl_done(uint64_t intent)
{
	pl_rec r = {.type = PL_DONE, .ref = intent};
	pl_append(&r, "", 0, NULL);
}

/* Journal size before a sync call: the changes done before it are what it covers. */
uint64_t ts_pl_sync_begin(void)
{
	return pl_journal_size();
}

void ts_pl_synced(int fd, const char *path, uint64_t began)
{
	struct stat st;
	if (fstat(fd, &st) != 0)
		wr_panic("power-loss journal: could not stat \"%s\": %m", path);
	pl_rec r = {.ref = began};
	if (S_ISDIR(st.st_mode)) {
		r.type = PL_DIRSYNC;
		r.dirdev = st.st_dev;
		r.dirino = st.st_ino;
	} else {
		r.type = PL_SYNC;
		r.dev = st.st_dev;
		r.ino = st.st_ino;
	}
	pl_append(&r, path, strlen(path), NULL);
}

static void pl_dir_of(const char *path, pl_rec *r)
{
	char *copy = strdup(path);
	if (copy == NULL)
		wr_panic("power-loss journal: out of memory");
	struct stat st;
	if (stat(dirname(copy), &st) == 0) {
		r->dirdev = st.st_dev;
		r->dirino = st.st_ino;
	}
	free(copy);
}

/* A hard link to @path in the journal's directory, so that a removal can be undone. */
static bool pl_save(const char *path, char *saved, size_t len)
{
	snprintf(saved, len, "%s/saved-%d-%llu", pl_dir, (int)getpid(),
	         (unsigned long long)++pl_saved);
	return link(path, saved) == 0;
}

/* Intent of an open(O_CREAT) of @path: TS_PL_NONE when the file exists already. */
uint64_t ts_pl_create_intent(const char *path)
{
	struct stat st;
	if (stat(path, &st) == 0)
		return TS_PL_NONE;
	pl_rec r = {.type = PL_CREATE};
	pl_dir_of(path, &r);
	return pl_append(&r, path, strlen(path), NULL);
}

uint64_t ts_pl_rename_intent(const char *from, const char *to)
{
	pl_rec r = {.type = PL_RENAME};
	struct stat st;
	if (stat(from, &st) == 0) {
		r.dev = st.st_dev;
		r.ino = st.st_ino;
	}
	pl_dir_of(to, &r);
	char saved[4096] = "";
	if (stat(to, &st) == 0 && !pl_save(to, saved, sizeof(saved)))
		saved[0] = '\0';
	size_t fl = strlen(from), tl = strlen(to);
	char *both = malloc(fl + tl + 1);
	if (both == NULL)
		wr_panic("power-loss journal: out of memory");
	/* "from\0to": two names, the second without its NUL (the record has the length). */
	memcpy(both, from, fl + 1);
	memcpy(both + fl + 1, to, tl); // NOLINT(bugprone-not-null-terminated-result)
	r.datalen = (uint32_t)strlen(saved);
	uint64_t at = pl_append(&r, both, fl + tl + 1, saved);
	free(both);
	return at;
}

uint64_t ts_pl_unlink_intent(const char *path)
{
	pl_rec r = {.type = PL_UNLINK};
	struct stat st;
	if (stat(path, &st) == 0) {
		r.dev = st.st_dev;
		r.ino = st.st_ino;
	}
	pl_dir_of(path, &r);
	char saved[4096] = "";
	if (!pl_save(path, saved, sizeof(saved)))
		saved[0] = '\0';
	r.datalen = (uint32_t)strlen(saved);
	return pl_append(&r, path, strlen(path), saved);
}
