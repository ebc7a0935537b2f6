/*
 * backup.c - walrus_backup: an online base backup, as pg_basebackup takes
 * one, in the calling process.
 *
 * The copy of the data files may hold torn or stale pages: it is repaired by
 * replaying the WAL from the redo point of a checkpoint requested at the
 * start up to the XLOG_BACKUP_END record inserted at the end, because every
 * page changed in between carries a full image (wal_backup_begin forces
 * them).  The WAL of that range is copied after that record is flushed, the
 * last segment only up to the record's end (zeros after it: a page being
 * written past it could look like damage followed by valid WAL).
 *
 * The steps that touch the instance (begin, the end record, end) run inside
 * the handle's public-call bracket; the copying runs between them, so a
 * crash restart meanwhile makes the end fail with WALRUS_ERESTART (the
 * restart also forgot the forced full-page images).  DEST carries
 * walrus.backup-incomplete until everything in it is durable.
 */
#include "engine/backup_int.h"
#include "engine/engine.h"

#include <dirent.h>
#include <signal.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpointer/checkpointer.h"
#include "repl/repl.h"
#include "wal/wal.h"

typedef struct backup_state {
	char src[PATH_MAX], dest[PATH_MAX];
	wal_control ctl; /* as the backup's checkpoint left it */
	wr_lsn start, end;
	uint64_t start_time_us;
	fc_progress p;
	bool begun;
	bool fast; /* WALRUS_BACKUP_FAST */
} backup_state;

typedef int (*backup_step)(backup_state *b);

/* One step inside the handle's call and PANIC boundary (api_kv.c's API_CALL). */
static int in_call(walrus *db, backup_step step, backup_state *b)
{
	int rc = api_call_begin(db, "walrus_backup");
	if (rc != WALRUS_OK)
		return rc;
	jmp_buf jb;
	if (setjmp(jb)) {
		client_leave();
		int prc = client_panicked();
		api_call_end(db);
		return prc;
	}
	client_enter(&jb);
	rc = step(b);
	client_leave();
	api_call_end(db);
	return rc;
}

/*
 * The supervisor ends the backup of a process that exits, once it has seen
 * its connection close; a backup begun right after that exit (a script's
 * next try) may come first.  A holder that no longer exists cannot finish
 * its backup: end it here, as the supervisor would.  A holder whose pid was
 * reused looks alive: EBUSY then, until the supervisor ends it.
 */
static bool end_dead_holders_backup(void)
{
	uint32_t holder = wal_backup_holder();
	if (holder == 0 || holder == (uint32_t)getpid())
		return false;
	if (kill((pid_t)holder, 0) == 0 || errno != ESRCH)
		return false;
	if (!wal_backup_end_for(holder))
		return false;
	wr_log(WR_LOG, "process %d ended during a base backup: the backup is cancelled",
	       (int)holder);
	return true;
}

static int step_begin(backup_state *b)
{
	engine_shared *e = engine_sh();
	if (atomic_load(&e->sb.active)) /* its WAL is its primary's: back up the primary */
		return standby_refuse("walrus_backup");
	if (atomic_load(&e->read_only))
		return reserve_refuse("walrus_backup");
	if (!wr_snprintf(b->src, sizeof(b->src), "%s", e->datadir))
		return wr_error(WALRUS_EINVAL, "path too long");
	int rc = wal_backup_begin(wal_redo_lsn(), (uint32_t)getpid());
	if (rc == WALRUS_EBUSY && end_dead_holders_backup())
		rc = wal_backup_begin(wal_redo_lsn(), (uint32_t)getpid());
	if (rc != WALRUS_OK)
		return rc;
	b->begun = true;
	rc = ckpt_request((b->fast ? CKPT_IMMEDIATE : 0) | CKPT_FORCE, true);
	if (rc == WALRUS_OK)
		rc = wal_control_read(b->src, &b->ctl);
	if (rc != WALRUS_OK) {
		(void)wal_backup_end_for((uint32_t)getpid());
		b->begun = false;
		return rc;
	}
	b->start = b->ctl.redo_lsn;
	return WALRUS_OK;
}

/* XLOG_BACKUP_END: replay of the backup is consistent once past it. */
static wr_lsn backup_end_record(wr_lsn start)
{
	wal_begin();
	wal_register_data(&start, sizeof(start));
	wr_lsn end = wal_insert(RM_XLOG, XLOG_BACKUP_END);
	wal_flush_to(end);
	return end;
}

static int step_end_record(backup_state *b)
{
	if (!wal_backup_held_by((uint32_t)getpid()))
		return wr_error(WALRUS_ERESTART,
		                "walrus_backup: the backup was cancelled by the instance (a "
		                "restart, or this process detached): full-page images were not "
		                "forced throughout");
	b->end = backup_end_record(b->start);
	return WALRUS_OK;
}

static int step_release(backup_state *b)
{
	(void)wal_backup_end_for((uint32_t)getpid()); /* not one begun by another since */
	b->begun = false;
	return WALRUS_OK;
}

static int copy_top_file(const backup_state *b, const char *name, bool optional)
{
	char from[PATH_MAX], to[PATH_MAX];
	if (!wr_snprintf(from, sizeof(from), "%s/%s", b->src, name) ||
	    !wr_snprintf(to, sizeof(to), "%s/%s", b->dest, name))
		return wr_error(WALRUS_EINVAL, "path too long");
	int rc = fc_copy_file(from, to, UINT64_MAX, 0, NULL, NULL);
	if (rc == WALRUS_ENOENT)
		return optional ? WALRUS_OK : wr_error(WALRUS_ENOENT, "\"%s\" is missing", from);
	return rc;
}

/* DEST/walrus.conf: the source's, without what a copy must not carry
 * (conf_backup_text); none when the source has none. */
static int copy_conf(const char *src, const char *dest)
{
	char *text, path[PATH_MAX];
	int rc = conf_backup_text(src, &text);
	if (rc == WALRUS_ENOENT)
		return WALRUS_OK;
	if (rc != WALRUS_OK)
		return rc;
	rc = wr_snprintf(path, sizeof(path), "%s/%s", dest, WR_CONF_FILE)
	         ? fc_write_text(path, text, false)
	         : wr_error(WALRUS_EINVAL, "path too long");
	free(text);
	return rc;
}

static int copy_data(backup_state *b)
{
	char from[PATH_MAX], to[PATH_MAX];
	if (!wr_snprintf(from, sizeof(from), "%s/base", b->src) ||
	    !wr_snprintf(to, sizeof(to), "%s/base", b->dest))
		return wr_error(WALRUS_EINVAL, "path too long");
	b->p.total = fc_tree_size(from);
	int rc = fc_copy_tree(from, to, NULL, &b->p, "copy-data");
	if (rc == WALRUS_OK)
		rc = copy_top_file(b, WR_VERSION_FILE, false);
	if (rc == WALRUS_OK)
		rc = copy_conf(b->src, b->dest);
	return rc;
}

static int copy_histories(const backup_state *b, const char *from, const char *to)
{
	DIR *d = opendir(from);
	if (d == NULL)
		return wr_error(wr_errno_code(errno), "could not open directory \"%s\": %m", from);
	int rc = WALRUS_OK;
	struct dirent *de;
	(void)b;
	while (rc == WALRUS_OK && (de = readdir(d)) != NULL) {
		size_t n = strlen(de->d_name);
		if (n < 8 || strcmp(de->d_name + n - 8, ".history") != 0)
			continue;
		char f[PATH_MAX], t[PATH_MAX];
		if (!wr_snprintf(f, sizeof(f), "%s/%s", from, de->d_name) ||
		    !wr_snprintf(t, sizeof(t), "%s/%s", to, de->d_name))
			rc = wr_error(WALRUS_EINVAL, "path too long");
		else if ((rc = fc_copy_file(f, t, UINT64_MAX, 0, NULL, NULL)) == WALRUS_ENOENT)
			rc = WALRUS_OK;
	}
	closedir(d);
	return rc;
}

/* Segments from the start's to the end's; the last one cut at the end LSN. */
static int copy_wal(backup_state *b)
{
	char from[PATH_MAX], to[PATH_MAX];
	if (!wr_snprintf(from, sizeof(from), "%s/wal", b->src) ||
	    !wr_snprintf(to, sizeof(to), "%s/wal", b->dest))
		return wr_error(WALRUS_EINVAL, "path too long");
	if (mkdir(to, 0700) != 0 && errno != EEXIST)
		return wr_error(wr_errno_code(errno), "could not create \"%s\": %m", to);
	uint64_t seg = b->ctl.wal_seg_size;
	wr_lsn first = b->start - b->start % seg, last = (b->end - 1) - (b->end - 1) % seg;
	b->p.total += b->end - first;
	for (wr_lsn s = first; s <= last; s += seg) {
		char f[PATH_MAX], t[PATH_MAX];
		wal_segment_path(from, seg, s, f, sizeof(f));
		wal_segment_path(to, seg, s, t, sizeof(t));
		uint64_t limit = s == last ? b->end - s : seg;
		int rc = fc_copy_file(f, t, limit, seg, &b->p, "copy-wal");
		if (rc == WALRUS_ENOENT)
			return wr_error(WALRUS_EINTERNAL,
			                "WAL segment \"%s\" of the backup's range was removed "
			                "while the backup ran",
			                f);
		if (rc != WALRUS_OK)
			return rc;
	}
	return copy_histories(b, from, to);
}

static void format_time(uint64_t us, char *buf, size_t len)
{
	time_t t = (time_t)(us / 1000000);
	struct tm tm;
	if (gmtime_r(&t, &tm) == NULL || strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm) == 0)
		wr_snprintf(buf, len, "@%llu", (unsigned long long)t);
	else
		wr_snprintf(buf + strlen(buf), len - strlen(buf), ".%03uZ",
		            (unsigned)(us / 1000 % 1000));
}

int backup_write_label(const char *dest, const wal_control *ctl, wr_lsn start, wr_lsn end,
                       uint64_t start_time_us)
{
	int rc = fc_failpoint("before-label", dest);
	if (rc != WALRUS_OK)
		return rc;
	wal_control c = *ctl;
	c.state = WAL_DB_IN_PRODUCTION;
	c.backup_start_lsn = start;
	c.backup_end_lsn = end;
	c.promoted = 0; /* a copy is never the promotion of its source */
	rc = wal_control_write(dest, &c);
	if (rc != WALRUS_OK)
		return rc;
	char when[64], text[1024], path[PATH_MAX];
	format_time(start_time_us, when, sizeof(when));
	if (!wr_snprintf(text, sizeof(text),
	                 "start_lsn = " WAL_LSN_FMT "\ncheckpoint_lsn = " WAL_LSN_FMT
	                 "\nend_lsn = " WAL_LSN_FMT "\nstart_time = %s\n"
	                 "system_identifier = %llu\ntimeline = %u\nwal_segment_size = %llu\n",
	                 WAL_LSN_ARGS(start), WAL_LSN_ARGS(ctl->checkpoint_lsn), WAL_LSN_ARGS(end),
	                 when, (unsigned long long)ctl->sysid, wal_control_timeline(ctl),
	                 (unsigned long long)ctl->wal_seg_size) ||
	    !wr_snprintf(path, sizeof(path), "%s/%s", dest, WAL_BACKUP_LABEL))
		return wr_error(WALRUS_EINVAL, "path too long");
	return fc_write_text(path, text, false);
}

int backup_finish_dest(const char *dest)
{
	int rc = fc_sync_tree(dest);
	if (rc == WALRUS_OK)
		rc = fc_failpoint("before-done", dest);
	char path[PATH_MAX];
	if (rc == WALRUS_OK && !wr_snprintf(path, sizeof(path), "%s/%s", dest, BACKUP_INCOMPLETE))
		rc = wr_error(WALRUS_EINVAL, "path too long");
	if (rc == WALRUS_OK)
		rc = fc_unlink(path);
	if (rc == WALRUS_OK)
		rc = fc_fsync_path(dest);
	return rc;
}

static int run_backup(walrus *db, backup_state *b)
{
	int rc = fc_prepare_dest(b->dest, BACKUP_INCOMPLETE, "backup destination");
	if (rc == WALRUS_OK)
		rc = fc_failpoint("start", b->dest);
	if (rc == WALRUS_OK)
		rc = in_call(db, step_begin, b);
	if (rc != WALRUS_OK)
		return rc;
	wr_log(WR_LOG, "base backup into \"%s\" started at " WAL_LSN_FMT, b->dest,
	       WAL_LSN_ARGS(b->start));
	rc = copy_data(b);
	if (rc == WALRUS_OK)
		rc = fc_interrupted(&b->p);
	if (rc == WALRUS_OK)
		rc = in_call(db, step_end_record, b);
	if (rc == WALRUS_OK)
		rc = copy_wal(b);
	if (rc == WALRUS_OK)
		rc = fc_interrupted(&b->p);
	if (rc == WALRUS_OK)
		rc = backup_write_label(b->dest, &b->ctl, b->start, b->end, b->start_time_us);
	if (rc == WALRUS_OK)
		rc = backup_finish_dest(b->dest);
	if (rc == WALRUS_OK)
		wr_log(WR_LOG, "base backup into \"%s\" complete: " WAL_LSN_FMT " to " WAL_LSN_FMT,
		       b->dest, WAL_LSN_ARGS(b->start), WAL_LSN_ARGS(b->end));
	return rc;
}

int walrus_backup(walrus *db, const char *dest, int flags, walrus_progress_fn progress, void *arg)
{
	wr_error_clear();
	if (dest == NULL || dest[0] == '\0')
		return wr_error(WALRUS_EINVAL, "walrus_backup: no destination");
	if (flags & ~WALRUS_BACKUP_FAST)
		return wr_error(WALRUS_EINVAL, "walrus_backup: unknown flags 0x%x",
		                (unsigned)flags);
	int rc = api_handle_valid(db, "walrus_backup");
	if (rc != WALRUS_OK)
		return rc;
	backup_state *b = calloc(1, sizeof(*b));
	if (b == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory");
	b->fast = (flags & WALRUS_BACKUP_FAST) != 0;
	b->p.fn = progress;
	b->p.arg = arg;
	b->p.interruptible = true;
	b->p.interrupts0 = fc_interrupts();
	b->start_time_us = wr_wall_us();
	if (!wr_snprintf(b->dest, sizeof(b->dest), "%s", dest)) {
		free(b);
		return wr_error(WALRUS_EINVAL, "walrus_backup: destination path too long");
	}
	rc = run_backup(db, b);
	if (b->begun) {
		/* The error of the backup is the one to report, not the release's. */
		char msg[1024];
		wr_snprintf(msg, sizeof(msg), "%s", walrus_errmsg());
		if (in_call(db, step_release, b) != WALRUS_OK && rc == WALRUS_OK)
			rc = WALRUS_ERESTART;
		if (rc != WALRUS_OK && msg[0] != '\0')
			wr_error(rc, "%s", msg);
	}
	/* For the instance's log: the caller has the error (a WARNING would also
	 * reach the stderr of a program that shows warnings, which then prints
	 * the error it got: the same line twice). */
	if (rc != WALRUS_OK && rc != WALRUS_EINVAL)
		wr_log(WR_LOG, "base backup into \"%s\" failed: %s", dest, walrus_errmsg());
	free(b);
	return rc;
}

/* ---------------------------------------------------------------- sent by a WAL sender */

/*
 * The same steps in a WAL sender (repl_backup_ops, repl/bbsend.c sends the
 * files): a sender runs no public call, so no handle bracket; a PANIC in
 * it exits the process and restarts the instance.  One backup per sender
 * process, hence one state.
 */
static backup_state sender_backup;

static int sender_begin(bool fast, repl_backup_info *info, void (*tick)(void *), void *arg)
{
	backup_state *b = &sender_backup;
	memset(b, 0, sizeof(*b));
	b->fast = fast;
	ckpt_set_wait_tick(tick, arg);
	int rc = step_begin(b);
	ckpt_set_wait_tick(NULL, NULL);
	if (rc != WALRUS_OK)
		return rc;
	char base[PATH_MAX];
	if (wr_snprintf(base, sizeof(base), "%s/base", b->src))
		info->data_bytes = fc_tree_size(base);
	info->ctl = b->ctl;
	info->start = b->start;
	wr_log(WR_LOG, "base backup for a standby started at " WAL_LSN_FMT, WAL_LSN_ARGS(b->start));
	return WALRUS_OK;
}

typedef struct each_file {
	repl_file_fn fn;
	void *arg;
	const char *src;
} each_file;

static int each_base_file(const char *abs, const char *rel, void *arg)
{
	each_file *e = arg;
	char r[PATH_MAX];
	int rc = fc_failpoint("send-data", abs);
	if (rc != WALRUS_OK)
		return rc;
	if (!wr_snprintf(r, sizeof(r), "base/%s", rel))
		return wr_error(WALRUS_EINVAL, "path too long");
	return e->fn(r, abs, e->arg);
}

/*
 * walrus.conf as the standby gets it (conf_backup_text), from a private
 * file beside the real one, sent under the real one's name then removed:
 * the password never goes over the wire.
 */
static int send_conf(const char *src, repl_file_fn fn, void *arg)
{
	char *text, tmp[PATH_MAX];
	int rc = conf_backup_text(src, &text);
	if (rc == WALRUS_ENOENT)
		return WALRUS_OK;
	if (rc != WALRUS_OK)
		return rc;
	if (!wr_snprintf(tmp, sizeof(tmp), "%s/%s.sent-%d", src, WR_CONF_FILE, (int)getpid())) {
		free(text);
		return wr_error(WALRUS_EINVAL, "path too long");
	}
	(void)unlink(tmp); /* left by a sender killed while sending it */
	rc = fc_write_text(tmp, text, false);
	free(text);
	if (rc == WALRUS_OK)
		rc = fn(WR_CONF_FILE, tmp, arg);
	if (unlink(tmp) != 0 && errno != ENOENT && rc == WALRUS_OK)
		rc = wr_error(wr_errno_code(errno), "could not remove \"%s\": %m", tmp);
	return rc;
}

/* What copy_data copies: base/, the version file, walrus.conf. */
static int sender_each_data_file(repl_file_fn fn, void *arg)
{
	each_file e = {fn, arg, sender_backup.src};
	char base[PATH_MAX], ver[PATH_MAX];
	if (!wr_snprintf(base, sizeof(base), "%s/base", e.src) ||
	    !wr_snprintf(ver, sizeof(ver), "%s/%s", e.src, WR_VERSION_FILE))
		return wr_error(WALRUS_EINVAL, "path too long");
	int rc = fc_each_file(base, each_base_file, &e);
	if (rc == WALRUS_OK)
		rc = fn(WR_VERSION_FILE, ver, arg);
	if (rc == WALRUS_OK)
		rc = send_conf(e.src, fn, arg);
	return rc;
}

static int sender_end_record(wr_lsn start, wr_lsn *end)
{
	int rc = step_end_record(&sender_backup);
	(void)start;
	*end = sender_backup.end;
	return rc;
}

static void sender_release(void)
{
	if (sender_backup.begun)
		(void)step_release(&sender_backup);
}

const repl_backup_ops *backup_sender_ops(void)
{
	static const repl_backup_ops ops = {.begin = sender_begin,
	                                    .each_data_file = sender_each_data_file,
	                                    .end_record = sender_end_record,
	                                    .release = sender_release};
	return &ops;
}
