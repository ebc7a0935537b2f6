/*
 * basebackup.c - a standby's base backup received from its primary
 * (BASE_BACKUP over the replication connection; the sender's side is
 * repl/bbsend.c), so that `walrus standby --primary` can make a standby of
 * a missing or empty directory in one command.
 *
 * The result is what walrus_backup writes locally (backup.c): the data
 * files, the WAL from the backup's start to its end (the last segment
 * zero-filled past the end), the control file with the backup's start and
 * end, backup_label, all fsynced, DIR/walrus.backup-incomplete removed
 * last.  The control file is the primary's, as its checkpoint left it,
 * checked with the engine's own decoding (magic, version, CRC) before it is
 * used.  Every file is checked against its FILE_END (size, CRC32C).  On
 * failure the directory is removed if this call created it, emptied again
 * if it was given empty.
 */
#include "engine/backup_int.h"
#include "engine/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "repl/repl_int.h"

#define BB_RETRY_MIN_NS (100ULL * 1000 * 1000)
#define BB_RETRY_MAX_NS (5ULL * 1000 * 1000 * 1000)
#define BB_RETRY_FOR_NS (60ULL * 1000 * 1000 * 1000)

typedef struct bb_recv {
	const char *dir;
	int sock;
	uint8_t *buf; /* REPL_MAX_PAYLOAD */
	uint64_t seg_size;
	wr_lsn start, end, checkpoint;
	uint64_t sysid;
	uint32_t timeline;
	/* The file being received: fd -1 for the control file (kept in memory). */
	char path[REPL_PATH_MAX + 1];
	int out;
	bool in_file;
	uint64_t bytes;
	uint32_t crc;
	uint8_t control[WAL_CONTROL_SIZE];
	bool have_control, have_version;
	bool prepared; /* DIR holds the marker: anything in it is ours to remove */
	wal_control ctl;
	fc_progress p;
	/* WAL segments received: start LSN and bytes, to check the backup's range */
	struct bb_seg {
		wr_lsn start;
		uint64_t bytes;
	} * segs;
	size_t nsegs, segcap;
} bb_recv;

static bool is_control(const char *path)
{
	return strcmp(path, REPL_BB_CONTROL_FILE) == 0;
}

/* A WAL segment (not a history file): padded to the segment size. */
static bool is_segment(const char *path)
{
	return strncmp(path, "wal/", 4) == 0 && strchr(path, '.') == NULL;
}

static int open_file(bb_recv *r, const char *rel)
{
	if (r->in_file)
		return wr_error(WALRUS_EPROTO, "the primary began \"%s\" before ending \"%s\"", rel,
		                r->path);
	wr_snprintf(r->path, sizeof(r->path), "%s", rel);
	r->in_file = true;
	r->bytes = 0;
	r->crc = 0;
	r->out = -1;
	if (is_control(rel)) {
		if (r->have_control)
			return wr_error(WALRUS_EPROTO, "the primary sent the control file twice");
		return WALRUS_OK;
	}
	char abs[PATH_MAX];
	int rc = fc_make_parents(r->dir, rel);
	if (rc == WALRUS_OK && !wr_snprintf(abs, sizeof(abs), "%s/%s", r->dir, rel))
		rc = wr_error(WALRUS_EINVAL, "path too long in \"%s\"", r->dir);
	if (rc != WALRUS_OK)
		return rc;
	do
		r->out = open(abs, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	while (r->out < 0 && errno == EINTR);
	if (r->out < 0)
		return wr_error(wr_errno_code(errno), "could not create \"%s\": %m", abs);
	return WALRUS_OK;
}

static int write_out(bb_recv *r, const void *data, size_t len)
{
	if (wr_write_full(r->out, data, len) != 0)
		return wr_error(wr_errno_code(errno), "could not write \"%s/%s\": %m", r->dir,
		                r->path);
	return WALRUS_OK;
}

static int add_data(bb_recv *r, const uint8_t *data, uint32_t len)
{
	if (!r->in_file)
		return wr_error(WALRUS_EPROTO, "the primary sent DATA outside a file");
	uint64_t limit = is_control(r->path)   ? WAL_CONTROL_SIZE
	                 : is_segment(r->path) ? r->seg_size
	                                       : UINT64_MAX;
	if (len > limit - r->bytes)
		return wr_error(WALRUS_EPROTO, "the primary sent more of \"%s\" than it may hold",
		                r->path);
	if (is_control(r->path))
		memcpy(r->control + r->bytes, data, len);
	else {
		int rc = write_out(r, data, len);
		if (rc != WALRUS_OK)
			return rc;
	}
	r->crc = crc32c(r->crc, data, len);
	r->bytes += len;
	r->p.done += len;
	if (r->p.done > r->p.total)
		r->p.total = r->p.done;
	if (r->p.fn != NULL)
		r->p.fn(r->p.done, r->p.total, r->p.arg);
	return WALRUS_OK;
}

/* The control file: the engine's own checks, then it must be the backup's. */
static int take_control(bb_recv *r)
{
	char what[64];
	wr_snprintf(what, sizeof(what), "%s (from the primary)", REPL_BB_CONTROL_FILE);
	int rc = wal_control_decode(r->control, (size_t)r->bytes, what, &r->ctl);
	if (rc != WALRUS_OK)
		return rc;
	if (r->ctl.sysid != r->sysid || wal_control_timeline(&r->ctl) != r->timeline ||
	    r->ctl.wal_seg_size != r->seg_size || r->ctl.redo_lsn != r->start ||
	    r->ctl.checkpoint_lsn != r->checkpoint)
		return wr_error(WALRUS_EPROTO,
		                "the primary's control file does not match the backup it began");
	r->have_control = true;
	return WALRUS_OK;
}

static int end_file(bb_recv *r, const repl_msg *m)
{
	if (!r->in_file)
		return wr_error(WALRUS_EPROTO, "the primary ended a file it did not begin");
	r->in_file = false;
	if (m->u.file_end.bytes != r->bytes || m->u.file_end.crc != r->crc)
		return wr_error(WALRUS_ECORRUPT,
		                "\"%s\" arrived damaged: %llu bytes with CRC 0x%08x, the primary "
		                "sent %llu with 0x%08x",
		                r->path, (unsigned long long)r->bytes, r->crc,
		                (unsigned long long)m->u.file_end.bytes, m->u.file_end.crc);
	if (is_control(r->path))
		return take_control(r);
	r->have_version = r->have_version || strcmp(r->path, WR_VERSION_FILE) == 0;
	int rc = WALRUS_OK;
	wr_lsn seg_start;
	if (is_segment(r->path) && r->seg_size != 0 &&
	    wal_segment_parse_name(r->path + 4, r->seg_size, &seg_start)) {
		if (wr_grow(&r->segs, &r->segcap, r->nsegs + 1, sizeof(*r->segs), 16) != WALRUS_OK)
			return wr_error(WALRUS_ENOMEM, "out of memory");
		r->segs[r->nsegs++] = (struct bb_seg){seg_start, r->bytes};
	}
	if (is_segment(r->path) && r->bytes < r->seg_size) {
		/* As copy_wal: zeros past the end, never what the primary wrote later. */
		uint8_t zeros[8192] = {0};
		for (uint64_t at = r->bytes; rc == WALRUS_OK && at < r->seg_size;
		     at += sizeof(zeros))
			rc = write_out(r, zeros, (size_t)WR_MIN(sizeof(zeros), r->seg_size - at));
	}
	if (rc == WALRUS_OK && fsync(r->out) != 0)
		rc = wr_error(wr_errno_code(errno), "could not fsync \"%s/%s\": %m", r->dir,
		              r->path);
	if (close(r->out) != 0 && rc == WALRUS_OK)
		rc = wr_error(wr_errno_code(errno), "could not close \"%s/%s\": %m", r->dir,
		              r->path);
	r->out = -1;
	return rc;
}

static int recv_msg(bb_recv *r, repl_msg *m)
{
	int rc = repl_recv(r->sock, r->buf, m);
	if (rc == WALRUS_OK && m->type == REPL_MSG_ERROR)
		return repl_error_from(m);
	return rc;
}

static int begin(bb_recv *r, bool fast, uint64_t begin_timeout_ms)
{
	repl_msg m = {.type = REPL_MSG_BASE_BACKUP};
	m.u.base_backup.flags = fast ? REPL_BB_FAST : 0;
	int rc = repl_send(r->sock, &m);
	/* The primary's checkpoint comes first: a spread one takes its time, and
	 * the primary sends KEEPALIVEs four times a second meanwhile (each renews the
	 * wait; every few seconds the wait is reported). */
	if (rc == WALRUS_OK)
		rc = repl_set_timeout(r->sock, begin_timeout_ms);
	uint64_t since = wr_now_ns(), said = since;
	while (rc == WALRUS_OK && (rc = recv_msg(r, &m)) == WALRUS_OK &&
	       m.type == REPL_MSG_KEEPALIVE) {
		uint64_t now = wr_now_ns();
		if (now - said >= 5ULL * 1000000000ULL) {
			said = now;
			wr_log(WR_LOG,
			       "base backup: still waiting for the primary's checkpoint (%.0f s)",
			       (double)(now - since) / 1e9);
		}
	}
	if (rc != WALRUS_OK)
		return rc;
	if (m.type != REPL_MSG_BACKUP_BEGIN)
		return wr_error(WALRUS_EPROTO, "the primary answered BASE_BACKUP with %s",
		                repl_msg_name(m.type));
	r->sysid = m.u.backup_begin.sysid;
	r->timeline = m.u.backup_begin.timeline;
	r->seg_size = m.u.backup_begin.wal_seg_size;
	r->start = m.u.backup_begin.start_lsn;
	r->checkpoint = m.u.backup_begin.checkpoint_lsn;
	r->p.total = m.u.backup_begin.total_bytes;
	wr_log(WR_LOG, "base backup from the primary started at " WAL_LSN_FMT " (timeline %u)",
	       WAL_LSN_ARGS(r->start), r->timeline);
	return WALRUS_OK;
}

/*
 * Every WAL segment of [start, end) arrived, the last one up to end at
 * least: replay of the backup needs all of it, and a primary (or a relay)
 * that ends the transfer early must not leave a standby that looks whole.
 */
static int check_wal_range(const bb_recv *r)
{
	if (r->seg_size == 0)
		return wr_error(WALRUS_EPROTO, "the primary sent no WAL segment size");
	wr_lsn first = r->start - r->start % r->seg_size;
	wr_lsn last = (r->end - 1) - (r->end - 1) % r->seg_size;
	for (wr_lsn s = first; s <= last; s += r->seg_size) {
		uint64_t need = s == last ? r->end - s : r->seg_size;
		bool have = false;
		for (size_t i = 0; i < r->nsegs && !have; i++)
			have = r->segs[i].start == s && r->segs[i].bytes >= need;
		if (!have)
			return wr_error(
			    WALRUS_EPROTO,
			    "the primary ended the base backup without the WAL it needs "
			    "(the segment at " WAL_LSN_FMT " of " WAL_LSN_FMT " to " WAL_LSN_FMT
			    ")",
			    WAL_LSN_ARGS(s), WAL_LSN_ARGS(r->start), WAL_LSN_ARGS(r->end));
	}
	return WALRUS_OK;
}

/* FILE, DATA..., FILE_END until BACKUP_END. */
static int receive(bb_recv *r)
{
	for (;;) {
		repl_msg m;
		int rc = recv_msg(r, &m);
		if (rc != WALRUS_OK)
			return rc;
		switch (m.type) {
		case REPL_MSG_FILE:
			rc = open_file(r, m.u.file.path);
			break;
		case REPL_MSG_DATA:
			rc = add_data(r, m.u.data.data, m.u.data.len);
			break;
		case REPL_MSG_FILE_END:
			rc = end_file(r, &m);
			break;
		case REPL_MSG_BACKUP_END:
			r->end = m.u.backup_end.end_lsn;
			if (r->in_file || !r->have_control || !r->have_version ||
			    r->end <= r->start)
				return wr_error(
				    WALRUS_EPROTO,
				    "the primary ended the base backup before sending all "
				    "of it");
			return check_wal_range(r);
		default:
			rc = wr_error(WALRUS_EPROTO, "the primary sent %s during a base backup",
			              repl_msg_name(m.type));
		}
		if (rc != WALRUS_OK)
			return rc;
	}
}

/*
 * A primary started a moment ago may not listen yet: a failure retrying can
 * cure (repl_error_permanent) is retried after a back-off that doubles from
 * BB_RETRY_MIN_NS to BB_RETRY_MAX_NS, for BB_RETRY_FOR_NS at most, each
 * retry said in the log; a refusal for good (a wrong password, a standby
 * as the primary) ends the backup at once.
 */
static int connect_primary(bb_recv *r, const standby_backup_args *a)
{
	uint64_t start = wr_now_ns(), delay = BB_RETRY_MIN_NS;
	for (unsigned attempt = 1;; attempt++) {
		int rc = repl_client_connect_tls(a->primary, a->password, a->ssl, &r->sock);
		if (rc == WALRUS_OK || repl_error_permanent(rc))
			return rc;
		uint64_t spent = wr_now_ns() - start;
		char why[1024];
		wr_snprintf(why, sizeof(why), "%s", walrus_errmsg()); /* wr_error writes there */
		if (spent + delay > BB_RETRY_FOR_NS)
			return wr_error(rc, "%s (gave up after %u attempts in %.0f s)", why,
			                attempt, (double)spent / 1e9);
		wr_log(WR_LOG, "base backup: %s; retrying in %.1f s (attempt %u)", why,
		       (double)delay / 1e9, attempt);
		wr_sleep_us(delay / 1000);
		delay = WR_MIN(delay * 2, BB_RETRY_MAX_NS);
	}
}

static int run(bb_recv *r, const standby_backup_args *a)
{
	uint64_t start_us = wr_wall_us();
	/* Connected first: a directory given missing stays missing when the primary refuses. */
	int rc = connect_primary(r, a);
	if (rc != WALRUS_OK)
		return rc;
	rc = fc_prepare_dest(r->dir, BACKUP_INCOMPLETE, "standby directory");
	if (rc != WALRUS_OK)
		return rc;
	r->prepared = true;
	uint64_t timeout_ms = (uint64_t)a->opts->wal_sender_timeout_us / 1000;
	rc = begin(r, a->fast, timeout_ms); /* the primary's keepalives cover its checkpoint */
	if (rc == WALRUS_OK)
		rc = repl_set_timeout(r->sock, timeout_ms);
	if (rc == WALRUS_OK)
		rc = receive(r);
	if (rc == WALRUS_OK)
		rc = backup_write_label(r->dir, &r->ctl, r->start, r->end, start_us);
	if (rc == WALRUS_OK)
		rc = backup_finish_dest(r->dir);
	if (rc == WALRUS_OK)
		wr_log(WR_LOG,
		       "base backup from the primary complete in \"%s\": " WAL_LSN_FMT
		       " to " WAL_LSN_FMT,
		       r->dir, WAL_LSN_ARGS(r->start), WAL_LSN_ARGS(r->end));
	return rc;
}

int standby_base_backup(const standby_backup_args *a)
{
	struct stat st;
	bool existed = stat(a->dir, &st) == 0;
	bb_recv r = {.dir = a->dir, .sock = -1, .out = -1};
	r.p.fn = a->progress;
	r.p.arg = a->arg;
	if ((r.buf = malloc(REPL_MAX_PAYLOAD)) == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory");
	int rc = run(&r, a);
	if (r.out >= 0)
		close(r.out); /* failing anyway: removed below */
	if (r.sock >= 0)
		repl_close(r.sock);
	free(r.buf);
	free(r.segs);
	if (rc == WALRUS_OK || !r.prepared)
		return rc; /* DIR not usable: untouched */
	char msg[1024];
	wr_snprintf(msg, sizeof(msg), "base backup from \"%s\" failed: %s", a->primary,
	            walrus_errmsg());
	/* Nothing that looks like a standby stays behind. */
	if (fc_remove_tree(a->dir, !existed) != WALRUS_OK)
		wr_log(WR_WARNING, "could not clean \"%s\" up: %s", a->dir, walrus_errmsg());
	return wr_error(rc, "%s", msg);
}
