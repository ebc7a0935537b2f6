/*
 * control.c - the control file (DIR/walrus.control) and bootstrapping a new
 * instance.
 *
 * The control file says where recovery must start: the last checkpoint
 * record and its redo point, with the sizes the data directory was made
 * with.  It is the one piece of state that is overwritten in place, so it is
 * always replaced as a whole (design rule 6): write a temp file, fsync it,
 * rename it over the old one, fsync the directory.  A crash at any point
 * leaves either the old or the new file, never a mix.  It is 512 bytes on
 * disk (the struct then zeros), well under a sector, and carries a CRC32C so
 * that damage is detected rather than trusted.
 *
 * Interface: see wal.h.  Errors are returned, never PANICed: the caller
 * decides (a failed fsync of the control file during a checkpoint is a
 * PANIC there; at bootstrap it is just a failed command).
 *
 * A bootstrap interrupted by a crash or power cut may leave a control file
 * pointing at a half-written segment, or a segment and no control file.  It
 * cannot be finished (its system identifier lives in both), so
 * wal_bootstrap_undo removes what it wrote and the engine bootstraps again;
 * the engine knows a bootstrap was interrupted by the marker it writes
 * first (engine/datadir.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "wal/wal.h"

#define CONTROL_DISK_SIZE WAL_CONTROL_SIZE
#define CONTROL_CRC_LEN   offsetof(wal_control, crc)

_Static_assert(sizeof(wal_control) <= CONTROL_DISK_SIZE, "the control file fits in 512 bytes");

static void control_path(const char *datadir, const char *suffix, char *buf, size_t len)
{
	wr_snprintf(buf, len, "%s/%s%s", datadir, WAL_CONTROL_FILE, suffix);
}

/* ---------------------------------------------------------------- reading */

/* Reads the whole file into @buf (CONTROL_DISK_SIZE + 1 bytes, to see an overlong file). */
static int control_load(const char *path, char *buf, ssize_t *got)
{
	fdc_file f;
	int rc = fdc_open(path, O_RDONLY, 0, &f);
	if (rc != 0 && errno == ENOENT)
		return wr_error(WALRUS_ENOENT, "control file \"%s\" is missing", path);
	if (rc != 0)
		return rc;
	*got = fdc_pread(f, buf, CONTROL_DISK_SIZE + 1, 0);
	int err = errno;
	int crc = fdc_close(f);
	if (*got < 0) {
		errno = err;
		return (int)*got;
	}
	return crc;
}

static int control_check(const char *path, const wal_control *c)
{
	if (c->magic != WAL_CONTROL_MAGIC)
		return wr_error(WALRUS_ECORRUPT,
		                "control file \"%s\" has a bad magic number (0x%08x, expected "
		                "0x%08x)",
		                path, c->magic, WAL_CONTROL_MAGIC);
	/* Before the CRC: another version may lay the file out differently. */
	if (c->version != WAL_CONTROL_VERSION)
		return wr_error(WALRUS_EVERSION,
		                "control file \"%s\" has version %u, but this walrus reads "
		                "version %u",
		                path, c->version, WAL_CONTROL_VERSION);
	uint32_t crc = crc32c(0, c, CONTROL_CRC_LEN);
	if (crc != c->crc)
		return wr_error(WALRUS_ECORRUPT,
		                "incorrect checksum in control file \"%s\" (stored 0x%08x, "
		                "computed 0x%08x)",
		                path, c->crc, crc);
	if (c->page_size != WR_PAGE_SIZE)
		return wr_error(WALRUS_EVERSION,
		                "control file \"%s\" was made with page size %u, but this walrus "
		                "uses %d",
		                path, c->page_size, WR_PAGE_SIZE);
	return 0;
}

int wal_control_decode(const uint8_t *buf, size_t len, const char *what, wal_control *c)
{
	if (len != CONTROL_DISK_SIZE)
		return wr_error(WALRUS_ECORRUPT,
		                "control file \"%s\" has %zu bytes, expected %d (truncated or "
		                "damaged)",
		                what, len, CONTROL_DISK_SIZE);
	memcpy(c, buf, sizeof(*c));
	return control_check(what, c);
}

int wal_control_read(const char *datadir, wal_control *c)
{
	char path[4096], buf[CONTROL_DISK_SIZE + 1];
	ssize_t got = 0;

	control_path(datadir, "", path, sizeof(path));
	int rc = control_load(path, buf, &got);
	if (rc != 0)
		return rc;
	return wal_control_decode((const uint8_t *)buf, (size_t)got, path, c);
}

/* ---------------------------------------------------------------- writing */

/* Writes and fsyncs the temp file; on error it is removed (best effort). */
static int control_write_temp(const char *tmp, const char *buf)
{
	fdc_file f;
	int rc = fdc_open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600, &f);
	if (rc != 0)
		return rc;
	rc = fdc_pwrite(f, buf, CONTROL_DISK_SIZE, 0);
	if (rc == 0)
		rc = fdc_fsync(f);
	int err = errno;
	char msg[1024];
	wr_snprintf(msg, sizeof(msg), "%s", walrus_errmsg());
	int crc = fdc_close(f);
	if (rc == 0)
		return crc;
	/* The old control file is untouched; the temp file only holds garbage now. */
	fdc_unlink(tmp);
	errno = err;
	return wr_error(rc, "%s", msg);
}

void wal_control_encode(const wal_control *c, uint8_t out[WAL_CONTROL_SIZE])
{
	wal_control copy = *c;
	copy.magic = WAL_CONTROL_MAGIC;
	copy.version = WAL_CONTROL_VERSION;
	copy.page_size = WR_PAGE_SIZE;
	memset(out, 0, CONTROL_DISK_SIZE);
	memcpy(out, &copy, CONTROL_CRC_LEN); /* not the struct's padding: it is not ours to write */
	copy.crc = crc32c(0, out, CONTROL_CRC_LEN);
	memcpy(out + CONTROL_CRC_LEN, &copy.crc, sizeof(copy.crc));
}

int wal_control_write(const char *datadir, const wal_control *c)
{
	char path[4096], tmp[4096];
	uint8_t buf[CONTROL_DISK_SIZE];

	wal_control_encode(c, buf);
	control_path(datadir, "", path, sizeof(path));
	control_path(datadir, ".tmp", tmp, sizeof(tmp));
	int rc = control_write_temp(tmp, (const char *)buf);
	if (rc == 0)
		rc = fdc_rename(tmp, path);
	/* Until the directory is synced, a crash may bring the old file back. */
	if (rc == 0)
		rc = fdc_fsync_path(datadir);
	return rc;
}

/* ---------------------------------------------------------------- bootstrap */

/*
 * A system identifier tells this instance's WAL from another's (the reader
 * checks it in every segment's long header).  Time in microseconds, shifted,
 * plus the pid, as PostgreSQL's initdb; with random bits when available.
 */
static uint64_t new_sysid(void)
{
	uint64_t id = (wr_wall_us() << 20) | ((uint64_t)getpid() & 0xfffffu);
	uint32_t rnd;
	if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) == (ssize_t)sizeof(rnd))
		id ^= rnd & 0xfffffu;
	return id;
}

static int refuse_existing(const char *datadir)
{
	char path[4096];
	fdc_file f;
	control_path(datadir, "", path, sizeof(path));
	int rc = fdc_open(path, O_RDONLY, 0, &f);
	if (rc == 0) {
		fdc_close(f);
		return wr_error(WALRUS_EINVAL,
		                "control file \"%s\" already exists: \"%s\" holds an instance "
		                "already",
		                path, datadir);
	}
	if (errno != ENOENT)
		return rc;
	wr_error_clear();
	return 0;
}

static int make_waldir(const char *datadir, char *waldir, size_t len)
{
	wr_snprintf(waldir, len, "%s/wal", datadir);
	int rc = fdc_mkdir(waldir, 0700);
	if (rc == 0)
		rc = fdc_fsync_path(datadir);
	return rc;
}

/* Writes the first checkpoint record at @start; its redo point is itself. */
static int write_first_checkpoint(const char *waldir, uint64_t seg_size, uint64_t sysid,
                                  wr_lsn start, wal_checkpoint_rec *ck)
{
	wal_file_writer *w;
	wal_assembled a = {0};
	wr_lsn got, end;

	*ck = (wal_checkpoint_rec){.redo = start, .time_us = wr_wall_us(), .next_relid = 1};
	int rc = wal_fw_open(waldir, seg_size, sysid, start, 0, &w);
	if (rc != 0)
		return rc;
	wal_begin();
	wal_register_data(ck, sizeof(*ck));
	rc = wal_assemble(&a, RM_XLOG, XLOG_CHECKPOINT_SHUTDOWN, 0, false, 0);
	if (rc == 0)
		rc = wal_fw_append(w, &a, &got, &end);
	if (rc == 0 && got != start)
		rc = wr_error(WALRUS_EINTERNAL,
		              "bootstrap checkpoint record written at " WAL_LSN_FMT
		              ", expected " WAL_LSN_FMT,
		              WAL_LSN_ARGS(got), WAL_LSN_ARGS(start));
	if (rc == 0)
		rc = wal_fw_flush(w, true);
	wal_fw_close(w);
	free(a.buf);
	return rc;
}

int wal_bootstrap(const char *datadir, const wr_options *o)
{
	char waldir[4096];
	wal_checkpoint_rec ck;
	uint64_t seg_size = (uint64_t)o->wal_segment_size;

	int rc = refuse_existing(datadir);
	if (rc == 0)
		rc = make_waldir(datadir, waldir, sizeof(waldir));
	if (rc != 0)
		return rc;
	uint64_t sysid = new_sysid();
	/* LSN 0 is invalid, so the stream starts with the segment at seg_size. */
	wr_lsn start = seg_size + WAL_LONG_PHD;
	rc = write_first_checkpoint(waldir, seg_size, sysid, start, &ck);
	if (rc != 0)
		return rc;
	/* Only now: a control file must never point at WAL that is not durable. */
	wal_control c = {
	    .sysid = sysid,
	    .state = WAL_DB_SHUTDOWN,
	    .wal_seg_size = seg_size,
	    .data_seg_size = (uint64_t)o->data_segment_size,
	    .checkpoint_lsn = start,
	    .redo_lsn = start,
	    .checkpoint_time_us = ck.time_us,
	    .next_relid = ck.next_relid,
	};
	rc = wal_control_write(datadir, &c);
	if (rc == 0)
		wr_log(WR_LOG,
		       "bootstrapped \"%s\": system identifier %llu, checkpoint at " WAL_LSN_FMT,
		       datadir, (unsigned long long)sysid, WAL_LSN_ARGS(start));
	return rc;
}

/* A segment or a temporary segment (NAME.tmp.PID): a file only the WAL writes. */
static bool wal_file_name(const char *name)
{
	char head[17];
	wr_lsn start;
	if (strlen(name) < sizeof(head) - 1)
		return false;
	memcpy(head, name, sizeof(head) - 1);
	head[sizeof(head) - 1] = '\0';
	const char *rest = name + sizeof(head) - 1;
	return wal_segment_parse_name(head, 1, &start) &&
	       (*rest == '\0' || strncmp(rest, ".tmp.", 5) == 0);
}

/* The first WAL file in @waldir into @found (empty: none), or removes each when @remove. */
static int wal_files(const char *waldir, bool remove, char *found, size_t len)
{
	found[0] = '\0';
	DIR *d = opendir(waldir);
	if (d == NULL)
		return errno == ENOENT
		           ? 0
		           : wr_error(wr_errno_code(errno),
		                      "could not open WAL directory \"%s\": %m", waldir);
	int rc = 0;
	struct dirent *e;
	while (rc == 0 && (e = readdir(d)) != NULL) {
		char path[4096];
		if (!wal_file_name(e->d_name))
			continue;
		if (!remove) {
			wr_snprintf(found, len, "%s", e->d_name);
			break;
		}
		if (!wr_snprintf(path, sizeof(path), "%s/%s", waldir, e->d_name))
			rc = wr_error(WALRUS_EINVAL, "path too long in \"%s\"", waldir);
		else if ((rc = fdc_unlink(path)) == 0)
			wr_log(WR_LOG, "removed \"%s\", left by an interrupted bootstrap", path);
	}
	closedir(d);
	if (rc == 0 && remove)
		rc = fdc_fsync_path(waldir);
	return rc;
}

int wal_dir_first_file(const char *waldir, char *found, size_t len)
{
	return wal_files(waldir, false, found, len);
}

/* Removes DIR/@name when it exists. */
static int remove_if_there(const char *datadir, const char *name)
{
	char path[4096];
	if (!wr_snprintf(path, sizeof(path), "%s/%s", datadir, name))
		return wr_error(WALRUS_EINVAL, "path too long in \"%s\"", datadir);
	if (access(path, F_OK) != 0)
		return 0;
	int rc = fdc_unlink(path);
	if (rc == 0)
		wr_log(WR_LOG, "removed \"%s\", left by an interrupted bootstrap", path);
	return rc;
}

int wal_bootstrap_undo(const char *datadir)
{
	char waldir[4096], none[1];
	if (!wr_snprintf(waldir, sizeof(waldir), "%s/wal", datadir))
		return wr_error(WALRUS_EINVAL, "path too long in \"%s\"", datadir);
	int rc = remove_if_there(datadir, WAL_CONTROL_FILE);
	if (rc == 0)
		rc = remove_if_there(datadir, WAL_CONTROL_FILE ".tmp");
	if (rc == 0)
		rc = fdc_fsync_path(datadir);
	if (rc == 0)
		rc = wal_files(waldir, true, none, sizeof(none));
	return rc;
}
