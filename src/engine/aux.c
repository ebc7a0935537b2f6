/*
 * aux.c - the auxiliary processes' common frame: naming, dying with the
 * supervisor, the PANIC exit, and their main loops.
 *
 * Each auxiliary process is forked by the supervisor and must not outlive
 * it: PR_SET_PDEATHSIG delivers SIGKILL when the supervisor dies, and the
 * getppid() check right after closes the race where it died before the
 * prctl.  The loops sleep on a futex word in shared memory (their latch)
 * with a timeout, so they wake on requests, on shutdown and periodically.
 */
#include "engine/backup_int.h"
#include "engine/engine.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <stdlib.h>

#include "buffer/buffer.h"
#include "checkpointer/checkpointer.h"
#include "fdcache/fdcache.h"
#include "kv/kv.h"
#include "repl/repl.h"
#include "storage/storage.h"
#include "wal/wal.h"

static const char *const aux_names[WR_AUX_NKINDS] = {
    [WR_AUX_CKPT] = "walrus-ckpt", [WR_AUX_BGWR] = "walrus-bgwr",
    [WR_AUX_WALW] = "walrus-walw", [WR_AUX_STARTUP] = "walrus-startup",
    [WR_AUX_ARCH] = "walrus-arch", [WR_AUX_WRCV] = "walrus-wrcv",
};

_Static_assert(WR_ARRAY_LEN(((engine_shared *)0)->aux_wakeup) >= WR_AUX_NKINDS,
               "a latch per auxiliary process kind");

const char *aux_name(int kind)
{
	return kind >= 0 && kind < WR_AUX_NKINDS ? aux_names[kind] : "walrus-aux";
}

static void aux_panic_handler(void)
{
	shm_header *h = shm_hdr();
	if (h != NULL) {
		atomic_store(&h->panic_pid, (uint32_t)getpid());
		atomic_store(&h->state, SHM_STATE_CRASHED);
	}
	_exit(WR_PANIC_EXIT);
}

/* What every process the supervisor forks does first. */
static void aux_frame(const char *name, pid_t supervisor)
{
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGINT, SIG_IGN); /* a terminal's ^C goes to the supervisor, which decides */
	prctl(PR_SET_NAME, name, 0, 0, 0);
	wr_log_set_process_name(name);
	wr_set_panic_handler(aux_panic_handler);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
		wr_log(WR_WARNING, "could not arrange to die with the supervisor: %m");
	if (getppid() != supervisor)
		_exit(1);
	/* File descriptors opened by the supervisor's fd cache are not ours to use. */
	fdc_reset();
}

static void aux_setup(int kind, pid_t supervisor)
{
	aux_frame(aux_name(kind), supervisor);
	engine_my_proc_set(kind);
	engine_shared *e = engine_sh();
	if (smgr_init(e->datadir, e->opts.data_segment_size) != WALRUS_OK ||
	    wal_attach(kind) != WALRUS_OK || buf_attach() != WALRUS_OK ||
	    ckpt_attach() != WALRUS_OK || ckpt_sync_attach() != WALRUS_OK ||
	    ckpt_sync_install_hooks(e->datadir) != WALRUS_OK || kv_attach() != WALRUS_OK ||
	    repl_attach() != WALRUS_OK)
		wr_panic("%s could not start: %s", aux_name(kind), walrus_errmsg());
}

/*
 * A WAL sender reads WAL files and shared atomics (wal_flushed_lsn); for a
 * base backup it also requests a checkpoint and inserts one record, so it
 * has the checkpointer's request word and a WAL insertion slot (the WAL's
 * slots cover the senders' procs), but no buffer pool and no sync hooks:
 * it dirties no page.  Its proc slot is at the end of the table, after the
 * backends'.
 */
/* An authenticated sender took sender slot @slot: its process entry and WAL insertion slot. */
static int sender_attach(int slot)
{
	engine_shared *e = engine_sh();
	int proc = (int)(e->nprocs + (uint32_t)slot);
	atomic_store(&engine_procs()[proc].pid, (uint32_t)getpid());
	engine_my_proc_set(proc);
	return wal_attach(proc);
}

_Noreturn void aux_sender_main(int sock, const char *peer)
{
	/* SIGUSR1 (the flusher's wake-up) must not kill it before its handler is set. */
	signal(SIGUSR1, SIG_IGN);
	engine_shared *e = engine_sh();
	aux_frame("walrus-wsnd", (pid_t)e->supervisor_pid);
	if (ckpt_attach() != WALRUS_OK || repl_attach() != WALRUS_OK)
		wr_panic("walrus-wsnd could not start: %s", walrus_errmsg());
	repl_set_instance(&(repl_instance){.datadir = e->datadir,
	                                   .opts = &e->opts,
	                                   .shutdown = &e->shutdown_requested,
	                                   .supervisor = (pid_t)e->supervisor_pid,
	                                   .backup = backup_sender_ops()});
	repl_sender_main(sock, peer, sender_attach);
}

static bool supervisor_gone(pid_t supervisor)
{
	return getppid() != supervisor;
}

/*
 * After a crash, what the dead processes wrote (data pages, WAL being
 * flushed) may be in the page cache only.  Replay reads it and builds on
 * it: a page found newer than a record is skipped, and the end-of-recovery
 * checkpoint then moves the redo point past that record without having
 * written or synced the page.  So everything is made durable first, as
 * PostgreSQL does before crash recovery (recovery_init_sync_method=fsync).
 * A sync error is a PANIC like any other: the start fails, and the next
 * one tries again.
 */
static void sync_data_directory(const char *datadir)
{
	uint64_t t0 = wr_now_ns(), nfiles;
	if (fdc_sync_tree(datadir, &nfiles) != WALRUS_OK)
		wr_panic("could not sync the data directory before crash recovery: %s",
		         walrus_errmsg());
	wr_log(WR_LOG, "synced the data directory before crash recovery: %llu files, %.3f s",
	       (unsigned long long)nfiles, (double)(wr_now_ns() - t0) / 1e9);
}

void startup_prepare(const char *datadir, const wal_control *c)
{
	if (c->state == WAL_DB_SHUTDOWN)
		return;
	sync_data_directory(datadir);
	char waldir[PATH_MAX];
	if (wr_snprintf(waldir, sizeof(waldir), "%s/wal", datadir))
		(void)wal_remove_temp_segments(waldir);
}

/* Archive recovery ended: the new timeline goes into the control file
 * before the end-of-recovery checkpoint writes anything on it. */
static void startup_set_timeline(const char *datadir, uint32_t tli)
{
	wal_control c;
	if (wal_control_read(datadir, &c) != WALRUS_OK)
		wr_panic("startup process: %s", walrus_errmsg());
	c.timeline = tli;
	c.backup_start_lsn = c.backup_end_lsn = 0; /* consistent now */
	if (wal_control_write(datadir, &c) != WALRUS_OK)
		wr_panic("startup process: could not record timeline %u: %s", tli, walrus_errmsg());
}

/* After the end-of-recovery checkpoint: the directory is an ordinary one again. */
static void startup_archive_done(const char *datadir)
{
	static const char *const names[] = {WAL_RECOVERY_FILE, WAL_BACKUP_LABEL};
	char path[PATH_MAX];
	for (size_t i = 0; i < WR_ARRAY_LEN(names); i++) {
		if (!wr_snprintf(path, sizeof(path), "%s/%s", datadir, names[i]) ||
		    (access(path, F_OK) != 0 && errno == ENOENT))
			continue;
		if (fdc_unlink(path) != WALRUS_OK)
			wr_panic("startup process: %s", walrus_errmsg());
	}
	if (fdc_fsync_path(datadir) != WALRUS_OK)
		wr_panic("startup process: could not fsync \"%s\": %s", datadir, walrus_errmsg());
	wr_log(WR_LOG, "archive recovery complete");
}

wal_recovery_result *startup_begin(void)
{
	wal_recovery_result *res = calloc(1, sizeof(*res));
	if (res == NULL)
		wr_panic("out of memory in the startup process");
	wal_register_builtin_rmgrs();
	kv_register_rmgr();
	kv_set_drop_wait(engine_space_drop_wait); /* redo of a dropped key space */
	wal_redo_set_pages(&buf_redo_pages);
	return res;
}

static _Noreturn void startup_main(void)
{
	engine_shared *e = engine_sh();
	wal_control c;
	wal_recovery_result *res = startup_begin();
	/* Until the checkpointer starts, this process is it: redo's evictions
	 * and the end-of-recovery checkpoint hand their fds to itself. */
	if (ckpt_sync_listen(e->datadir) != WALRUS_OK)
		wr_panic("startup process: %s", walrus_errmsg());
	int rc = wal_control_read(e->datadir, &c);
	/* The first start's end-of-recovery checkpoint follows the tree's
	 * creation: from then on there is a prior checkpoint. */
	bool tree_created = rc == WALRUS_OK && c.prev_checkpoint_lsn != 0;
	if (rc == WALRUS_OK)
		startup_prepare(e->datadir, &c);
	if (rc == WALRUS_OK && tree_created)
		rc = kv_check_file();
	if (rc == WALRUS_OK)
		rc = wal_recover(e->datadir, &e->opts, res);
	if (rc != WALRUS_OK) {
		wr_snprintf(e->startup_error, sizeof(e->startup_error), "%s", walrus_errmsg());
		e->startup_code = rc;
		wr_log(WR_FATAL, "recovery failed: %s", walrus_errmsg());
		_exit(1);
	}
	kv_redo_end(); /* a batch cut short by the crash is dropped */
	if (res->new_timeline != 0)
		startup_set_timeline(e->datadir, res->new_timeline);
	wal_start_insert_at(res->end, res->last_lsn, res->last_redo, c.sysid, res->last_page);
	if ((tree_created ? kv_check_tree() : kv_create_if_missing()) != WALRUS_OK) {
		wr_snprintf(
		    e->startup_error, sizeof(e->startup_error), "%s%s",
		    tree_created ? "" : "could not create the key-value tree: ", walrus_errmsg());
		wr_log(WR_FATAL, "%s", e->startup_error);
		_exit(1);
	}
	/* Orphans only cost space: a catalog that cannot be read is verify's
	 * to report, not a reason to refuse the start. */
	if (kv_space_cleanup() != WALRUS_OK) {
		wr_log(WR_WARNING, "files no key space uses were not looked for: %s",
		       walrus_errmsg());
		wr_error_clear();
	}
	/* On a full disk: read-only, and perhaps no room for the checkpoint
	 * (the pages stay dirty in the pool; the next start replays again). */
	if (!reserve_startup(e->datadir, &e->opts)) {
		wr_log(WR_LOG, "no end-of-recovery checkpoint: the next start recovers from the "
		               "same WAL");
		ckpt_sync_shutdown();
		free(res);
		_exit(0);
	}
	/* Redo left its pages dirty in the pool and nothing else runs yet: the
	 * checkpoint writes and syncs them, so the next crash replays only what
	 * follows. */
	e->end_ckpt_started = 1;
	ckpt_result r;
	if (ckpt_perform(e->datadir, &e->opts, CKPT_END_OF_RECOVERY, "end-of-recovery",
	                 res->next_relid, &r) != WALRUS_OK) {
		wr_snprintf(e->startup_error, sizeof(e->startup_error),
		            "end-of-recovery checkpoint failed: %s", walrus_errmsg());
		_exit(1);
	}
	if (res->archive_done)
		startup_archive_done(e->datadir);
	ckpt_sync_shutdown();
	free(res);
	_exit(0);
}

static _Noreturn void walwriter_main(pid_t supervisor)
{
	engine_shared *e = engine_sh();
	_Atomic uint32_t *latch = wal_writer_latch();
	for (;;) {
		uint32_t seen = atomic_load(latch);
		wal_writer_round();
		if (atomic_load(&e->shutdown_requested)) {
			wal_writer_round();
			_exit(0);
		}
		if (supervisor_gone(supervisor))
			_exit(1);
		ipc_wait_u32(latch, seen, (uint64_t)e->opts.wal_writer_delay_us * 1000);
	}
}

static _Noreturn void bgwriter_main(pid_t supervisor)
{
	engine_shared *e = engine_sh();
	const wr_options *o = &e->opts;
	buf_bgw st = {0};
	buf_wb wb;
	if (buf_wb_init(&wb, (uint32_t)(o->bgwriter_flush_after / WR_PAGE_SIZE)) != WALRUS_OK)
		wr_panic("background writer could not start: %s", walrus_errmsg());
	for (;;) {
		if (atomic_load(&e->shutdown_requested))
			_exit(0);
		if (supervisor_gone(supervisor))
			_exit(1);
		uint32_t seen = atomic_load(&e->aux_wakeup[WR_AUX_BGWR]);
		bool idle = buf_bgwriter_round(&st, o->bgwriter_lru_maxpages,
		                               o->bgwriter_lru_multiplier, &wb);
		/* Idle: sleep 50 rounds (as PostgreSQL's hibernation); a shutdown wakes us. */
		uint64_t us = (uint64_t)o->bgwriter_delay_us * (idle ? 50 : 1);
		(void)ipc_wait_u32(&e->aux_wakeup[WR_AUX_BGWR], seen, us * 1000);
	}
}

_Noreturn void aux_main(int kind, int keep_fd)
{
	(void)keep_fd;
	pid_t supervisor = (pid_t)engine_sh()->supervisor_pid;
	aux_setup(kind, supervisor);
	if (kind == WR_AUX_STARTUP && atomic_load(&engine_sh()->sb.active))
		standby_startup_main();
	if (kind == WR_AUX_STARTUP)
		startup_main();
	if (kind == WR_AUX_WALW)
		walwriter_main(supervisor);
	if (kind == WR_AUX_BGWR)
		bgwriter_main(supervisor);
	if (kind == WR_AUX_ARCH)
		archiver_main(supervisor);
	if (kind == WR_AUX_WRCV) {
		engine_shared *e = engine_sh();
		repl_set_instance(&(repl_instance){.datadir = e->datadir,
		                                   .opts = &e->opts,
		                                   .shutdown = &e->shutdown_requested,
		                                   .supervisor = supervisor,
		                                   .wal_end = &e->sb.wal_end,
		                                   .wal_seq = &e->sb.wal_seq,
		                                   .source = &e->sb.source});
		repl_receiver_main();
	}
	if (kind == WR_AUX_CKPT) {
		ckpt_set_promote_hook(standby_settings_remove);
		ckpt_main(engine_sh()->datadir, &engine_sh()->opts,
		          &engine_sh()->shutdown_requested, supervisor);
	}
	wr_panic("unknown auxiliary process kind %d", kind);
}
