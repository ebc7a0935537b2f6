/*
 * bbsend.c - the WAL sender's base backup (BASE_BACKUP): a standby made in
 * one command (`walrus standby` on a missing or empty directory) gets the
 * primary's copy over the replication connection it would stream on.
 *
 * The engine's backup steps (repl_backup_ops, engine/backup.c) do what
 * touches the instance; this file sends: BACKUP_BEGIN, the control file as
 * the checkpoint left it, the data files, then, once the end record is
 * flushed, the WAL from the start's segment to the end (the last segment
 * cut at the end: the standby pads it with zeros) and the history files,
 * and BACKUP_END.  Every file is FILE, DATA..., FILE_END {bytes, CRC32C}.
 * Files are read with read(2), not through the fd cache: as the local
 * backup (engine/filecopy.c), a sender takes no part in the instance's I/O.
 */
#include "repl/repl_int.h"

#include "fdcache/fdcache.h"
#include "testsupport/testsupport.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct bb_send {
	int fd;
	uint8_t *buf; /* REPL_HEADER_LEN + REPL_MAX_PAYLOAD */
	const char *datadir;
	bool peer_gone; /* a send failed: no ERROR can reach the standby */
} bb_send;

static int send_msg(bb_send *s, const repl_msg *m)
{
	int rc = repl_send(s->fd, m);
	s->peer_gone = s->peer_gone || rc != WALRUS_OK;
	return rc;
}

/* DATA messages straight from the file: the bytes are read in place after the header. */
static int send_contents(bb_send *s, int in, const char *abs, uint64_t limit, uint64_t *bytes,
                         uint32_t *crc)
{
	uint8_t *data = s->buf + REPL_HEADER_LEN;
	while (*bytes < limit) {
		size_t want = (size_t)WR_MIN(limit - *bytes, (uint64_t)REPL_WAL_CHUNK);
		ssize_t n = wr_read_full(in, data, want);
		if (n < 0)
			return wr_error(wr_errno_code(errno), "could not read \"%s\": %m", abs);
		if (n == 0)
			break; /* shorter than the limit: a data file being written, or the WAL's
			          last */
		repl_encode_data_header(s->buf, (uint32_t)n);
		if (repl_io_write_full(s->fd, s->buf, REPL_HEADER_LEN + (size_t)n) != 0) {
			s->peer_gone = true;
			return wr_error(WALRUS_EIO, "could not send \"%s\" to the standby: %s", abs,
			                errno == EAGAIN ? "timed out" : strerror(errno));
		}
		*crc = crc32c(*crc, data, (size_t)n);
		*bytes += (uint64_t)n;
	}
	return WALRUS_OK;
}

/* One file, at most @limit bytes: WALRUS_ENOENT (no message) when it is gone. */
static int send_file(bb_send *s, const char *rel, const char *abs, uint64_t limit)
{
	int in;
	do
		in = open(abs, O_RDONLY | O_CLOEXEC);
	while (in < 0 && errno == EINTR);
	if (in < 0 && errno == ENOENT)
		return WALRUS_ENOENT;
	if (in < 0)
		return wr_error(wr_errno_code(errno), "could not open \"%s\": %m", abs);
	repl_msg m = {.type = REPL_MSG_FILE};
	wr_snprintf(m.u.file.path, sizeof(m.u.file.path), "%s", rel);
	uint64_t bytes = 0;
	uint32_t crc = 0;
	int rc = strlen(rel) <= REPL_PATH_MAX ? send_msg(s, &m)
	                                      : wr_error(WALRUS_EINVAL, "path too long: %s", rel);
	if (rc == WALRUS_OK)
		rc = send_contents(s, in, abs, limit, &bytes, &crc);
	close(in); /* read-only: nothing to report */
	if (rc != WALRUS_OK)
		return rc;
	m = (repl_msg){.type = REPL_MSG_FILE_END};
	m.u.file_end.bytes = bytes;
	m.u.file_end.crc = crc;
	return send_msg(s, &m);
}

static int send_data_file(const char *rel, const char *abs, void *arg)
{
	int rc = send_file(arg, rel, abs, UINT64_MAX);
	return rc == WALRUS_ENOENT ? WALRUS_OK : rc; /* dropped while we copied */
}

/* The control file's bytes as the checkpoint left them (the standby decodes them). */
static int send_control(bb_send *s, const wal_control *ctl)
{
	repl_msg m = {.type = REPL_MSG_FILE};
	uint8_t bytes[WAL_CONTROL_SIZE];
	wal_control_encode(ctl, bytes);
	wr_snprintf(m.u.file.path, sizeof(m.u.file.path), "%s", REPL_BB_CONTROL_FILE);
	int rc = send_msg(s, &m);
	m = (repl_msg){.type = REPL_MSG_DATA};
	m.u.data.data = bytes;
	m.u.data.len = sizeof(bytes);
	if (rc == WALRUS_OK)
		rc = send_msg(s, &m);
	m = (repl_msg){.type = REPL_MSG_FILE_END};
	m.u.file_end.bytes = sizeof(bytes);
	m.u.file_end.crc = crc32c(0, bytes, sizeof(bytes));
	return rc == WALRUS_OK ? send_msg(s, &m) : rc;
}

static bool history_name(const char *name)
{
	return strlen(name) == 16 && strspn(name, "0123456789ABCDEF") == 8 &&
	       strcmp(name + 8, ".history") == 0;
}

static int send_histories(bb_send *s)
{
	char waldir[PATH_MAX];
	if (!wr_snprintf(waldir, sizeof(waldir), "%s/wal", s->datadir))
		return wr_error(WALRUS_EINVAL, "path too long");
	DIR *d = opendir(waldir);
	if (d == NULL)
		return wr_error(wr_errno_code(errno), "could not open directory \"%s\": %m",
		                waldir);
	int rc = WALRUS_OK;
	struct dirent *de;
	while (rc == WALRUS_OK && (de = readdir(d)) != NULL) {
		char rel[64], abs[PATH_MAX];
		if (!history_name(de->d_name))
			continue;
		wr_snprintf(rel, sizeof(rel), "wal/%s", de->d_name);
		if (!wr_snprintf(abs, sizeof(abs), "%s/%s", waldir, de->d_name))
			rc = wr_error(WALRUS_EINVAL, "path too long");
		else if ((rc = send_file(s, rel, abs, UINT64_MAX)) == WALRUS_ENOENT)
			rc = WALRUS_OK;
	}
	closedir(d);
	return rc;
}

/* Test builds: failpoint "backup:ENODATA:send-wal SEGMENT" leaves the
 * segment out, as a faulty primary or a relay would (the standby must see
 * it: basebackup.c, check_wal_range). */
static bool left_out(const char *name)
{
	char what[96];
	snprintf(what, sizeof(what), "send-wal %s", name);
	int injected;
	{
		FDC_LOCKED();
		injected = ts_fp_check("backup", what, NULL);
	}
	return injected == ENODATA;
}

/* Segments from the start's to the end's, the last one only up to @end. */
static int send_wal(bb_send *s, uint64_t seg, wr_lsn start, wr_lsn end)
{
	wr_lsn first = start - start % seg, last = (end - 1) - (end - 1) % seg;
	for (wr_lsn at = first; at <= last; at += seg) {
		char name[64], rel[80], abs[PATH_MAX];
		wal_segment_name(seg, at, name, sizeof(name));
		wr_snprintf(rel, sizeof(rel), "wal/%s", name);
		if (!wr_snprintf(abs, sizeof(abs), "%s/%s", s->datadir, rel))
			return wr_error(WALRUS_EINVAL, "path too long");
		if (left_out(name))
			continue;
		int rc = send_file(s, rel, abs, at == last ? end - at : seg);
		if (rc == WALRUS_ENOENT)
			return wr_error(
			    WALRUS_EINTERNAL,
			    "WAL segment %s of the backup's range was removed while the "
			    "backup ran",
			    name);
		if (rc != WALRUS_OK)
			return rc;
	}
	return send_histories(s);
}

static int send_backup(bb_send *s, const repl_backup_ops *ops, const repl_backup_info *info,
                       repl_sender_slot *slot)
{
	repl_msg m = {.type = REPL_MSG_BACKUP_BEGIN};
	m.u.backup_begin.sysid = info->ctl.sysid;
	m.u.backup_begin.timeline = wal_control_timeline(&info->ctl);
	m.u.backup_begin.wal_seg_size = info->ctl.wal_seg_size;
	m.u.backup_begin.start_lsn = info->start;
	m.u.backup_begin.checkpoint_lsn = info->ctl.checkpoint_lsn;
	m.u.backup_begin.total_bytes = info->data_bytes + (wal_flushed_lsn() - info->start);
	int rc = send_msg(s, &m);
	if (rc == WALRUS_OK)
		rc = send_control(s, &info->ctl);
	if (rc == WALRUS_OK)
		rc = ops->each_data_file(send_data_file, s);
	wr_lsn end = 0;
	if (rc == WALRUS_OK) {
		atomic_store(&slot->inserting, 1);
		rc = ops->end_record(info->start, &end);
		atomic_store(&slot->inserting, 0);
	}
	if (rc == WALRUS_OK)
		rc = send_wal(s, info->ctl.wal_seg_size, info->start, end);
	m = (repl_msg){.type = REPL_MSG_BACKUP_END};
	m.u.backup_end.end_lsn = end;
	if (rc == WALRUS_OK)
		rc = send_msg(s, &m);
	if (rc == WALRUS_OK)
		wr_log(WR_LOG,
		       "base backup sent to %s: " WAL_LSN_FMT " to " WAL_LSN_FMT " (timeline %u)",
		       slot->peer, WAL_LSN_ARGS(info->start), WAL_LSN_ARGS(end),
		       wal_control_timeline(&info->ctl));
	return rc;
}

/* While the checkpoint is awaited: KEEPALIVEs, so that the standby's wait
 * for BACKUP_BEGIN is bounded by its wal_sender_timeout and not by how long
 * this instance's checkpoint may take.  Four per second: the standby's
 * timeout is its own setting, as short as one second. */
#define BB_KEEPALIVE_NS (250ULL * 1000 * 1000)

typedef struct bb_tick {
	int fd;
	uint64_t last_ns;
} bb_tick;

static void keepalive_tick(void *arg)
{
	bb_tick *t = arg;
	uint64_t now = wr_now_ns();
	if (now - t->last_ns < BB_KEEPALIVE_NS)
		return;
	t->last_ns = now;
	repl_msg m = {.type = REPL_MSG_KEEPALIVE};
	m.u.keepalive.primary_flush = wal_flushed_lsn();
	m.u.keepalive.send_time_us = wr_wall_us();
	(void)repl_send(t->fd, &m); /* a peer gone fails the backup's next send */
}

int repl_send_base_backup(int fd, uint8_t *buf, bool fast, repl_sender_slot *slot, bool *peer_gone)
{
	const repl_instance *inst = repl_instance_get();
	bb_send s = {.fd = fd, .buf = buf, .datadir = inst->datadir};
	*peer_gone = false;
	if (inst->backup == NULL)
		return wr_error(WALRUS_EINVAL, "this instance does not send base backups");
	repl_backup_info info;
	memset(&info, 0, sizeof(info));
	wr_log(WR_LOG, "base backup requested by %s: waiting for a%s checkpoint", slot->peer,
	       fast ? "n immediate" : " spread");
	bb_tick tick = {.fd = fd, .last_ns = wr_now_ns()};
	int rc = inst->backup->begin(fast, &info, keepalive_tick, &tick);
	if (rc != WALRUS_OK)
		return rc;
	rc = send_backup(&s, inst->backup, &info, slot);
	/* The error of the backup is the one to report, not what the release says. */
	char msg[REPL_ERROR_TEXT_MAX];
	wr_snprintf(msg, sizeof(msg), "%s", walrus_errmsg());
	inst->backup->release();
	if (rc != WALRUS_OK)
		wr_error(rc, "%s", msg);
	*peer_gone = s.peer_gone;
	return rc;
}
