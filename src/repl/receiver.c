/*
 * receiver.c - the WAL receiver (walrus-wrcv) of a standby: follows the
 * primary named in DIR/walrus.standby from the position the startup
 * process asks for (start_lsn), writes and syncs the stream into DIR/wal
 * and publishes how far it is durable (flushed, flush_seq) for the startup
 * process's replay.
 *
 * A connection that fails or breaks is told apart (stops_standby):
 * transient (the network, a primary starting, stopping or at its limits)
 * is retried from what is flushed (never backwards) after a back-off that
 * doubles from RETRY_MIN_NS to RETRY_MAX_NS and starts again after each
 * stream, with a log line at the first failure, at each new reason, and
 * at most every RETRY_LOG_NS meanwhile (with the count of attempts);
 * permanent (the primary refused this standby for good: repl_error_permanent)
 * ends the receiver with REPL_RCV_EXIT_STOP and the reason in its shared
 * state, and the supervisor stops the standby with it: a standby that can
 * never catch up must not go on serving reads that only get staler.
 */
#include "repl/repl_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <limits.h>
#include <unistd.h>

#include "checkpointer/checkpointer.h"
#include "ipc/ipc.h"

#define WAIT_START_NS (1000ULL * 1000 * 1000)      /* a look at shutdown while waiting */
#define RETRY_MIN_NS  (100ULL * 1000 * 1000)       /* the first retry */
#define RETRY_MAX_NS  (5ULL * 1000 * 1000 * 1000)  /* the back-off's ceiling */
#define RETRY_LOG_NS  (30ULL * 1000 * 1000 * 1000) /* the same failure, logged again */

typedef struct receiver {
	repl_receiver *rcv;
	const repl_instance *e;
	repl_standby_conf conf;
	wal_control ctl;
	uint32_t tli; /* the timeline streamed: the control file's, until one is followed */
	char waldir[PATH_MAX];
	char last_error[256]; /* as last logged */
	uint64_t logged_ns;   /* when */
	uint32_t failures;    /* attempts that failed since the last stream */
	uint64_t failing_ns;  /* when the first of them failed */
} receiver;

static bool shutting_down(receiver *w)
{
	return atomic_load(w->e->shutdown) != 0 || getppid() != w->e->supervisor;
}

/* Published for stats (receiver.error), and for the supervisor when the standby stops. */
static void set_error(receiver *w, const char *text)
{
	repl_receiver *r = w->rcv;
	atomic_fetch_add(&r->error_seq, 1);
	wr_snprintf(r->error, sizeof(r->error), "%s", text);
	atomic_fetch_add(&r->error_seq, 1);
}

/* A failed attempt, logged at the first, at a new reason, and every RETRY_LOG_NS. */
static void note_failure(receiver *w, const char *text, uint64_t retry_ns)
{
	uint64_t now = wr_now_ns();
	set_error(w, text);
	if (w->failures++ == 0)
		w->failing_ns = now;
	atomic_store(&w->rcv->failed_attempts, w->failures);
	bool same = strncmp(text, w->last_error, sizeof(w->last_error) - 1) == 0;
	if (same && w->failures > 1 && now - w->logged_ns < RETRY_LOG_NS)
		return;
	if (w->failures == 1 || !same)
		wr_log(WR_LOG, "%s; retrying in %.1f s", text, (double)retry_ns / 1e9);
	else
		wr_log(WR_LOG, "%s; still retrying (%u attempts in %.0f s, every %.1f s at most)",
		       text, w->failures, (double)(now - w->failing_ns) / 1e9,
		       (double)RETRY_MAX_NS / 1e9);
	wr_snprintf(w->last_error, sizeof(w->last_error), "%s", text);
	w->logged_ns = now;
}

/*
 * What the operator must do about a refusal that retrying cannot cure,
 * when the primary's own text (@why) does not say it already.
 */
static const char *stop_hint(int code, const char *why)
{
	switch (code) {
	case WALRUS_EPERM:
		return "the password in DIR/walrus.standby (WALRUS_REPLICATION_PASSWORD when "
		       "`walrus standby --primary` wrote it) must be the primary's "
		       "replication_password";
	case WALRUS_ENOTFOUND:
		return "create the slot on the primary (walrus -D PRIMARY slot create NAME), or "
		       "remove slot from DIR/walrus.standby";
	case WALRUS_ENOENT:
		return "give the standby the primary's WAL archive (walrus standby --wal-archive), "
		       "or make a new standby from a base backup of the primary (walrus -D "
		       "NEWDIR standby --primary ADDR)";
	case WALRUS_EREADONLY:
		return "";
	default:
		return strstr(why, "base backup") != NULL
		           ? ""
		           : "this standby cannot follow that primary: make a new one from a base "
		             "backup of it (walrus -D NEWDIR standby --primary ADDR)";
	}
}

/*
 * Whether what ended an attempt stops the standby: a refusal retrying cannot
 * cure (repl_error_permanent), but for WAL the primary no longer has when a
 * WAL archive can bring it instead (the startup process restores it from
 * there, and streaming resumes after it).
 */
static bool stops_standby(const receiver *w, int code)
{
	if (code == WALRUS_ENOENT && w->conf.wal_archive[0] != '\0')
		return false;
	return repl_error_permanent(code);
}

static _Noreturn void stop_standby(receiver *w, int code, const char *why)
{
	char text[1024];
	const char *hint = stop_hint(code, why);
	wr_snprintf(text, sizeof(text), "%s%s%s%s", why, hint[0] ? " (" : "", hint,
	            hint[0] ? ")" : "");
	set_error(w, text);
	wr_log(WR_FATAL, "the standby cannot follow its primary: %s", text);
	_exit(REPL_RCV_EXIT_STOP);
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
		(void)ipc_wait_u32(&w->rcv->start_seq, seq, WAIT_START_NS);
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

/* One connection: until it breaks (its error is returned) or shutdown (WALRUS_OK).
 * *streamed: the primary accepted it (START answered). */
static int follow(receiver *w, repl_stream *st, bool *streamed)
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
	*streamed = rc == WALRUS_OK;
	if (rc == WALRUS_OK && tli != w->tli)
		rc = switch_timeline(w, tli, st->flushed);
	if (rc == WALRUS_OK) {
		set_error(w, "");
		w->failures = 0;
		w->last_error[0] = '\0';
		atomic_store(&w->rcv->failed_attempts, 0);
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
		char text[512];
		wr_snprintf(text, sizeof(text), "the WAL receiver cannot start: %s",
		            walrus_errmsg());
		set_error(&w, text);
		wr_log(WR_FATAL, "%s", text);
		_exit(REPL_RCV_EXIT_STOP);
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
	uint64_t retry_ns = RETRY_MIN_NS;
	for (;;) {
		bool streamed = false;
		int rc = follow(&w, &st, &streamed);
		if (shutting_down(&w))
			_exit(0);
		char why[1024];
		snprintf(why, sizeof(why), "replication from %s stopped: %s", w.conf.primary,
		         rc == WALRUS_OK ? "the primary ended the stream" : walrus_errmsg());
		if (rc != WALRUS_OK && stops_standby(&w, rc))
			stop_standby(&w, rc, why);
		if (streamed)
			retry_ns = RETRY_MIN_NS;
		note_failure(&w, why, retry_ns);
		/* Retry from what is durable: it never goes backwards. */
		repl_stream_init(&st, w.waldir, (uint64_t)w.e->opts->wal_segment_size, st.flushed);
		st.progress = progress;
		st.arg = &w;
		if (atomic_load(w.e->shutdown) == 0)
			(void)ipc_wait_u32(w.e->shutdown, 0, retry_ns);
		retry_ns = WR_MIN(retry_ns * 2, RETRY_MAX_NS);
	}
}
