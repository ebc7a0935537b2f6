/*
 * hotstandby.c - a standby's startup process (PostgreSQL's hot standby).
 *
 * A directory holding DIR/walrus.standby starts as a standby: the
 * supervisor runs the checkpointer and the background writer beside this
 * process from the start (restartpoints keep the standby's own restart
 * short), and accepts readers once replay is consistent.  This process
 * replays the local WAL to its end, then whatever its sources make durable
 * in DIR/wal: the WAL receiver's stream, and segments copied from the
 * archive (`wal_archive` in walrus.standby) when nothing streams.  It never
 * reads WAL past what a source made durable (standby_shared.wal_end), so
 * replay never runs ahead of what a crash would keep.
 *
 * Consistent: once the local WAL is replayed and, for a copy made by a base
 * backup, replay has passed the backup's end (before that, the copied files
 * may mix pages of different moments).  A restarted standby is consistent
 * at the end of its local WAL: every page its processes wrote carries an
 * LSN of WAL that was durable here before replay reached it.
 *
 * Restartpoints: a replayed checkpoint record is handed to the checkpointer
 * only when no key-value batch begun before its redo point is held back
 * (kv_redo_batch_start): such a batch is not in the pages yet, and a
 * restart from that redo point would never see its first records.
 *
 * Promotion (`walrus promote`): the supervisor stops the sources and sets
 * `promote`; what they made durable is replayed, the WAL after the last
 * record is cut off and a new timeline begins (redo.c); insertion starts,
 * the checkpointer's end-of-recovery checkpoint records the timeline (and
 * that the promotion is decided) in the control file before its record,
 * then removes DIR/walrus.standby; a start that finds both completes the
 * promotion (standby_promotion_decided).  Until this process
 * exits the instance refuses writes; the supervisor then starts the WAL
 * writer and accepts them.
 */
#include "engine/engine.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buffer/buffer.h"
#include "checkpointer/checkpointer.h"
#include "engine/backup_int.h"
#include "fdcache/fdcache.h"
#include "kv/kv.h"
#include "repl/repl.h"
#include "testsupport/testsupport.h"
#include "wal/wal.h"

#define HS_ARCHIVE_POLL_NS (1000ULL * 1000000ULL) /* look in the archive again after 1 s */
#define HS_IDLE_NS         (10000ULL * 1000000ULL)

static struct {
	engine_shared *e;
	wal_control c;
	char waldir[PATH_MAX];
	char archive[PATH_MAX]; /* wal_archive of walrus.standby, or "" */
	bool local_done, consistent;
	bool ckpt_pending; /* a checkpoint record replayed, not handed on yet */
	wr_lsn ckpt_lsn;
	wal_checkpoint_rec ckpt;
	repl_state *rs;
} hs;

bool standby_configured(const char *abs)
{
	char path[PATH_MAX];
	return wr_snprintf(path, sizeof(path), "%s/%s", abs, WR_STANDBY_FILE) &&
	       access(path, F_OK) == 0;
}

int standby_refuse(const char *fn)
{
	return wr_error(WALRUS_EREADONLY,
	                "%s: \"%s\" is a standby in recovery and takes reads only: write to its "
	                "primary, or promote it (walrus promote)",
	                fn, engine_sh()->datadir);
}

/* ---------------------------------------------------------------- consistency */

static void become_consistent(wr_lsn at)
{
	hs.consistent = true;
	wr_log(WR_LOG,
	       "consistent recovery state reached at " WAL_LSN_FMT ": the standby accepts "
	       "reads",
	       WAL_LSN_ARGS(at));
	atomic_store(&hs.e->sb.consistent, 1);
	if (kill((pid_t)hs.e->supervisor_pid, SIGUSR1) != 0)
		wr_log(WR_WARNING, "could not tell the supervisor (pid %u): %m",
		       hs.e->supervisor_pid);
}

static void check_consistent(wr_lsn end)
{
	if (!hs.consistent && hs.local_done && end >= hs.c.backup_end_lsn)
		become_consistent(end);
}

/* ---------------------------------------------------------------- the archive */

/* The timeline whose archived copy of the segment at @start follows the
 * history of the timeline streamed now (the receiver may have moved on). */
static uint32_t archive_timeline(wr_lsn start)
{
	uint32_t tli =
	    wal_follow_timeline() != 0 ? wal_follow_timeline() : wal_control_timeline(&hs.c);
	char name[32], path[PATH_MAX];
	wal_history h;
	wal_history_name(tli, name, sizeof(name));
	if (!wr_snprintf(path, sizeof(path), "%s/%s", hs.waldir, name) ||
	    wal_history_read(path, tli, &h) != WALRUS_OK) {
		wr_error_clear();
		return tli;
	}
	return wal_history_tli_for(&h, start, hs.c.wal_seg_size);
}

/* Copies the archived segment holding @need into DIR/wal; false when the
 * archive does not have it (or the receiver writes DIR/wal now). */
static bool restore_segment(wr_lsn need)
{
	uint64_t seg = hs.c.wal_seg_size;
	wr_lsn start = need - need % seg;
	char name[WAL_ARCHIVE_NAME_LEN + 1], from[PATH_MAX], to[PATH_MAX], tmp[PATH_MAX + 32];
	wal_archive_name(archive_timeline(start), start, name, sizeof(name));
	if (!wr_snprintf(from, sizeof(from), "%s/%s", hs.archive, name) || access(from, R_OK) != 0)
		return false;
	uint32_t none = SB_SOURCE_NONE;
	if (!atomic_compare_exchange_strong(&hs.e->sb.source, &none, SB_SOURCE_ARCHIVE))
		return false;
	wal_segment_path(hs.waldir, seg, start, to, sizeof(to));
	wr_snprintf(tmp, sizeof(tmp), "%s.restore.tmp", to);
	(void)fc_unlink(tmp);
	int rc = fc_copy_file(from, tmp, seg, 0, NULL, NULL);
	if (rc == WALRUS_OK && rename(tmp, to) != 0)
		rc = wr_error(wr_errno_code(errno), "could not rename \"%s\": %m", tmp);
	if (rc == WALRUS_OK && fc_fsync_parent(to) != WALRUS_OK)
		wr_panic("could not fsync \"%s\": %s", hs.waldir, walrus_errmsg());
	atomic_store(&hs.e->sb.source, SB_SOURCE_NONE);
	if (rc != WALRUS_OK) {
		wr_log(WR_WARNING, "could not restore WAL segment %s from the archive: %s", name,
		       walrus_errmsg());
		(void)fc_unlink(tmp);
		return false;
	}
	atomic_fetch_add(&hs.e->sb.restored, 1);
	wr_log(WR_LOG, "restored WAL segment %s from the archive", name);
	wr_lsn end = start + seg, cur = atomic_load(&hs.e->sb.wal_end);
	while (cur < end && !atomic_compare_exchange_weak(&hs.e->sb.wal_end, &cur, end))
		;
	atomic_fetch_add(&hs.e->sb.wal_seq, 1); /* the receiver may go on from there */
	return true;
}

/* ---------------------------------------------------------------- redo hooks */

static void hs_local_end(wr_lsn end)
{
	standby_shared *sb = &hs.e->sb;
	hs.local_done = true;
	atomic_store(&sb->local_end, end);
	wr_lsn cur = atomic_load(&sb->wal_end);
	while (cur < end && !atomic_compare_exchange_weak(&sb->wal_end, &cur, end))
		;
	atomic_fetch_add(&sb->wal_seq, 1);
	ipc_wake_all(&sb->wal_seq);
	/* The WAL receiver streams from here (repl/receiver.c). */
	repl_state *rs = repl_shared();
	if (rs != NULL) {
		atomic_store(&rs->receiver.start_lsn, end);
		atomic_fetch_add(&rs->receiver.start_seq, 1);
		ipc_wake_all(&rs->receiver.start_seq);
	}
	check_consistent(end);
}

static wr_lsn hs_wait(wr_lsn limit, bool *promote, bool *replaced)
{
	standby_shared *sb = &hs.e->sb;
	pid_t supervisor = (pid_t)hs.e->supervisor_pid;
	for (;;) {
		uint32_t seen = atomic_load(&sb->wal_seq);
		wr_lsn end = atomic_load(&sb->wal_end);
		if (end > limit)
			return end;
		if (atomic_load(&hs.e->shutdown_requested))
			_exit(0); /* between records: nothing held; the checkpointer ends the
			             standby */
		if (getppid() != supervisor)
			_exit(1);
		if (hs.archive[0] != '\0' && restore_segment(limit)) {
			*replaced = true;
			continue;
		}
		if (atomic_load(&sb->promote) && atomic_load(&sb->no_stream)) {
			*promote = true;
			return limit;
		}
		/* The nap only bounds how late a dead supervisor is noticed: new
		 * WAL, a promotion and a stop all move wal_seq. */
		(void)ipc_wait_u32(&sb->wal_seq, seen,
		                   hs.archive[0] != '\0' ? HS_ARCHIVE_POLL_NS
		                                         : ts_standby_nap_ns(HS_IDLE_NS));
	}
}

static bool is_checkpoint(const wal_decoded *rec)
{
	return rec->hdr.rmid == RM_XLOG &&
	       (rec->hdr.info == XLOG_CHECKPOINT_SHUTDOWN ||
	        rec->hdr.info == XLOG_CHECKPOINT_ONLINE) &&
	       rec->main_len == sizeof(wal_checkpoint_rec);
}

static void hs_replayed(const wal_decoded *rec, wr_lsn end)
{
	/* A stop does not wait for a backlog: between records nothing is held
	 * (a batch's pages are locked only inside the redo of its last record),
	 * and the next start replays on from the last restartpoint. */
	if (atomic_load_explicit(&hs.e->shutdown_requested, memory_order_relaxed))
		_exit(0);
	if (hs.rs != NULL) /* the receiver reports it to the primary */
		atomic_store_explicit(&hs.rs->receiver.applied, end, memory_order_relaxed);
	if (is_checkpoint(rec)) {
		memcpy(&hs.ckpt, rec->main_data, sizeof(hs.ckpt));
		hs.ckpt_lsn = rec->lsn;
		hs.ckpt_pending = true;
	}
	wr_lsn batch = kv_redo_batch_start();
	if (hs.ckpt_pending && (batch == 0 || batch >= hs.ckpt.redo)) {
		wal_note_replayed_checkpoint(hs.ckpt_lsn, &hs.ckpt);
		hs.ckpt_pending = false;
	}
	check_consistent(end);
}

static wal_standby_hooks hs_hooks = {
    .local_end = hs_local_end,
    .wait = hs_wait,
    .replayed = hs_replayed,
};

/* ---------------------------------------------------------------- promotion */

static _Noreturn void fail(const char *what)
{
	wr_snprintf(hs.e->startup_error, sizeof(hs.e->startup_error), "%s%s", what,
	            walrus_errmsg());
	wr_log(WR_FATAL, "standby: %s", hs.e->startup_error);
	_exit(1);
}

static void remove_settings(const char *dir)
{
	char path[PATH_MAX];
	if (!wr_snprintf(path, sizeof(path), "%s/%s", dir, WR_STANDBY_FILE))
		wr_panic("data directory path too long");
	if (fdc_unlink(path) != WALRUS_OK && errno != ENOENT)
		wr_panic("could not remove the standby's settings \"%s\": %s", path,
		         walrus_errmsg());
	if (fdc_fsync_path(dir) != WALRUS_OK)
		wr_panic("could not fsync \"%s\": %s", dir, walrus_errmsg());
}

void standby_settings_remove(void)
{
	remove_settings(engine_sh()->datadir);
}

bool standby_promotion_decided(const char *abs)
{
	wal_control c;
	if (!standby_configured(abs) || wal_control_read(abs, &c) != WALRUS_OK || c.promoted == 0)
		return false;
	wr_log(WR_LOG,
	       "the promotion to timeline %u was decided before the instance stopped: "
	       "completing it (%s goes, the instance starts as a primary)",
	       wal_control_timeline(&c), WR_STANDBY_FILE);
	remove_settings(abs);
	return true;
}

static _Noreturn void promoted(const wal_recovery_result *res)
{
	kv_redo_end();
	wal_set_timeline(res->new_timeline);
	wal_start_insert_at(res->end, res->last_lsn, res->last_redo, hs.c.sysid, res->last_page);
	wal_set_in_recovery(false);
	/* The checkpointer writes the pages replay dirtied, records the new
	 * timeline and removes the standby's settings (ckpt_set_promote_hook):
	 * from then on a crash recovers on the new timeline. */
	if (ckpt_request(CKPT_IMMEDIATE | CKPT_FORCE, true) != WALRUS_OK)
		fail("the end-of-recovery checkpoint failed: ");
	wr_log(WR_LOG, "promotion complete: timeline %u", res->new_timeline);
	_exit(0);
}

_Noreturn void standby_startup_main(void)
{
	hs.e = engine_sh();
	wal_recovery_result *res = startup_begin();
	if (wal_control_read(hs.e->datadir, &hs.c) != WALRUS_OK)
		fail("");
	wr_snprintf(hs.waldir, sizeof(hs.waldir), "%s/wal", hs.e->datadir);
	hs.rs = repl_shared();
	repl_standby_conf conf;
	if (repl_standby_read(hs.e->datadir, &conf) != WALRUS_OK)
		fail("");
	wr_snprintf(hs.archive, sizeof(hs.archive), "%s", conf.wal_archive);
	startup_prepare(hs.e->datadir, &hs.c);
	wr_log(WR_LOG, "starting as a standby on timeline %u%s%s", wal_control_timeline(&hs.c),
	       hs.archive[0] ? "; WAL archive " : "", hs.archive);
	hs_hooks.archive = hs.archive;
	if (wal_recover_standby(hs.e->datadir, &hs.e->opts, &hs_hooks, res) != WALRUS_OK)
		fail("recovery failed: ");
	promoted(res);
}
