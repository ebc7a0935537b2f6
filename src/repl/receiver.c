/*
 * receiver.c - the WAL receiver (walrus-wrcv) of a standby: follows the
 * primary named in DIR/walrus.standby from the position the startup
 * process asks for (start_lsn), writes and syncs the stream into DIR/wal
 * and publishes how far it is durable (flushed, flush_seq) for the startup
 * process's replay.  A broken connection is retried every
 * wal_retrieve_retry_interval, from what is flushed (never backwards);
 * each new reason for failing is logged once.
 */
#include "repl/repl_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <limits.h>
#include <unistd.h>

#include "checkpointer/checkpointer.h"
#include "ipc/ipc.h"

#define RETRY_INTERVAL_NS (1000ULL * 1000 * 1000) /* wal_retrieve_retry_interval */

typedef struct receiver {
	repl_receiver *rcv;
	const repl_instance *e;
	repl_standby_conf conf;
	wal_control ctl;
	uint32_t tli; /* the timeline streamed: the control file's, until one is followed */
	char waldir[PATH_MAX];
	char last_error[256];
} receiver;

static bool shutting_down(receiver *w)
{
	return atomic_load(w->e->shutdown) != 0 || getppid() != w->e->supervisor;
}

/* Published for stats; logged once per change of reason. */
static void set_error(receiver *w, const char *text)
{
	repl_receiver *r = w->rcv;
	atomic_fetch_add(&r->error_seq, 1);
	wr_snprintf(r->error, sizeof(r->error), "%s", text);
	atomic_fetch_add(&r->error_seq, 1);
	if (strncmp(text, w->last_error, sizeof(w->last_error) - 1) != 0 && text[0] != '\0')
		wr_log(WR_LOG, "%s", text);
	wr_snprintf(w->last_error, sizeof(w->last_error), "%s", text);
}

/* The startup process says where to stream from once it replayed the local WAL. */
static wr_lsn wait_start(receiver *w)
{
	atomic_store(&w->rcv->state, REPL_RCV_WAITING_START);
	for (;;) {
		uint32_t seq = atomic_load(&w->rcv->start_seq);
		wr_lsn start = atomic_load(&w->rcv->start_lsn);
		if (start != 0)
			return start;
		if (shutting_down(w))
			_exit(0);
		(void)ipc_wait_u32(&w->rcv->start_seq, seq, RETRY_INTERVAL_NS);
	}
}

/* The standby's replay may go up to @lsn: it is durable here. */
static void publish_wal_end(receiver *w, wr_lsn lsn)
{
	if (w->e->wal_end == NULL)
		return;
	wr_lsn cur = atomic_load(w->e->wal_end);
	while (cur < lsn && !atomic_compare_exchange_weak(w->e->wal_end, &cur, lsn))
		;
	atomic_fetch_add(w->e->wal_seq, 1);
	ipc_wake_all(w->e->wal_seq);
}

/* Only one source writes DIR/wal at a time: the startup process may be
 * copying a segment from the archive (briefly). */
static bool take_source(receiver *w)
{
	if (w->e->source == NULL)
		return true;
	uint32_t none = 0;
	return atomic_compare_exchange_strong(w->e->source, &none, 1);
}

static void give_source(receiver *w)
{
	if (w->e->source != NULL)
		atomic_store(w->e->source, 0);
}

/* After each durable advance: publish it, wake the startup process, say whether to go on. */
static bool progress(repl_stream *st, void *arg)
{
	receiver *w = arg;
	repl_receiver *r = w->rcv;
	atomic_store(&r->written, st->written);
	if (atomic_load(&r->flushed) != st->flushed) {
		atomic_store(&r->flushed, st->flushed);
		atomic_fetch_add(&r->flush_seq, 1);
		ipc_wake_all(&r->flush_seq);
		publish_wal_end(w, st->flushed);
	}
	atomic_store(&r->primary_flush, st->primary_flush);
	atomic_store(&r->last_msg_us, st->last_msg_us);
	st->applied = atomic_load(&r->applied);
	return !shutting_down(w);
}

/*
 * The primary streams a newer timeline (its history file is in DIR/wal
 * already): the control file names it before any of its WAL is written
 * here (a restartpoint with the new timeline, asked of the checkpointer,
 * the control file's only writer), so that a restart asks for it again
 * instead of the old one, and a promotion branches off it.
 */
static int switch_timeline(receiver *w, uint32_t tli, wr_lsn at)
{
	wr_log(WR_LOG, "following the primary's timeline %u from " WAL_LSN_FMT " (was timeline %u)",
	       tli, WAL_LSN_ARGS(at), w->tli);
	wal_set_follow_timeline(tli);
	int rc = ckpt_request(CKPT_IMMEDIATE | CKPT_FORCE, true);
	if (rc != WALRUS_OK)
		return wr_error(rc, "could not record timeline %u in the control file: %s", tli,
		                walrus_errmsg());
	w->tli = tli;
	return WALRUS_OK;
}

/*
 * The primary writes WAL this binary cannot read: no retry can help (the
 * standby must be upgraded, which restarts it).  The receiver stops, saying
 * so in the log and in its stats; the supervisor does not start it again,
 * and the standby keeps serving what it replayed.
 */
static _Noreturn void stop_for_good(receiver *w, const char *why)
{
	wr_log(WR_FATAL, "WAL receiver stops: %s", why);
	wr_snprintf(w->last_error, sizeof(w->last_error), "%s", why); /* logged: once */
	set_error(w, why);
	atomic_store(&w->rcv->state, REPL_RCV_STOPPED);
	atomic_store(&w->rcv->pid, 0);
	_exit(1);
}

/* One connection: until it breaks (its error is returned) or shutdown (WALRUS_OK). */
static int follow(receiver *w, repl_stream *st)
{
	int fd;
	wr_lsn pflush;
	atomic_store(&w->rcv->state, REPL_RCV_CONNECTING);
	int rc = repl_client_connect_tls(w->conf.primary, w->conf.password, &w->conf.ssl, &fd);
	if (rc != WALRUS_OK)
		return rc;
	if (!take_source(w)) {
		repl_close(fd);
		return wr_error(WALRUS_EBUSY, "WAL is being restored from the archive");
	}
	/* From what is durable here, whoever wrote it (the archive may have). */
	if (w->e->wal_end != NULL && atomic_load(w->e->wal_end) > st->flushed) {
		repl_stream_init(st, w->waldir, (uint64_t)w->e->opts->wal_segment_size,
		                 atomic_load(w->e->wal_end));
		st->progress = progress;
		st->arg = w;
	}
	uint32_t tli;
	rc = repl_client_follow(fd, w->ctl.sysid, w->tli, st->flushed, w->conf.application_name,
	                        w->conf.slot, w->waldir, &pflush, &tli);
	if (rc == WALRUS_OK && tli != w->tli)
		rc = switch_timeline(w, tli, st->flushed);
	if (rc == WALRUS_OK) {
		set_error(w, "");
		atomic_store(&w->rcv->state, REPL_RCV_STREAMING);
		atomic_store(&w->rcv->timeline, w->tli);
		wr_log(WR_LOG,
		       "streaming WAL from %s at " WAL_LSN_FMT " (primary flushed to " WAL_LSN_FMT
		       ")",
		       w->conf.primary, WAL_LSN_ARGS(st->flushed), WAL_LSN_ARGS(pflush));
		st->primary_flush = pflush;
		rc = repl_client_stream(fd, st);
	}
	/* What was written is durable before anyone is told. */
	repl_stream_close(st);
	progress(st, w);
	give_source(w);
	repl_close(fd);
	return rc;
}

_Noreturn void repl_receiver_main(void)
{
	receiver w = {.e = repl_instance_get()};
	w.rcv = &repl_shared()->receiver;
	atomic_store(&w.rcv->pid, (uint32_t)getpid());
	if (repl_standby_read(w.e->datadir, &w.conf) != WALRUS_OK ||
	    wal_control_read(w.e->datadir, &w.ctl) != WALRUS_OK) {
		set_error(&w, walrus_errmsg());
		wr_log(WR_FATAL, "WAL receiver cannot start: %s", walrus_errmsg());
		_exit(1);
	}
	w.tli = wal_control_timeline(&w.ctl);
	wr_snprintf(w.rcv->primary, sizeof(w.rcv->primary), "%s", w.conf.primary);
	if (!wr_snprintf(w.waldir, sizeof(w.waldir), "%s/wal", w.e->datadir))
		wr_panic("path too long: \"%s\"", w.e->datadir);
	wr_lsn start = wait_start(&w);
	repl_stream st;
	repl_stream_init(&st, w.waldir, (uint64_t)w.e->opts->wal_segment_size, start);
	st.progress = progress;
	st.arg = &w;
	atomic_store(&w.rcv->flushed, start);
	for (;;) {
		int rc = follow(&w, &st);
		if (shutting_down(&w))
			_exit(0);
		if (rc == WALRUS_EVERSION)
			stop_for_good(&w, walrus_errmsg());
		char why[1024];
		snprintf(why, sizeof(why), "replication from %s stopped: %s", w.conf.primary,
		         rc == WALRUS_OK ? "the primary ended the stream" : walrus_errmsg());
		set_error(&w, why);
		/* Retry from what is durable: it never goes backwards. */
		repl_stream_init(&st, w.waldir, (uint64_t)w.e->opts->wal_segment_size, st.flushed);
		st.progress = progress;
		st.arg = &w;
		if (atomic_load(w.e->shutdown) == 0)
			(void)ipc_wait_u32(w.e->shutdown, 0, RETRY_INTERVAL_NS);
	}
}
