/*
 * sender.c - the WAL sender (walrus-wsnd): one process per standby, forked
 * by the supervisor for an accepted replication connection.
 *
 * It authenticates the peer (nothing but AUTH is read before, within
 * REPL_AUTH_TIMEOUT_MS) before it takes a sender slot, so peers that never
 * authenticate cannot lock a standby out (the supervisor bounds how many
 * may be authenticating at once, and their WARNINGs share one per
 * second), checks its START against this instance (system
 * identifier, timeline, start LSN, the segment still in DIR/wal), then
 * streams the flushed WAL from DIR/wal's segment files, the bytes exactly
 * as they are there.  Files rather than the WAL buffers: the page cache
 * holds recent WAL anyway, and reading files takes no lock the inserters
 * and the flusher use, so a sender can die anywhere without harm to the
 * instance (its death never needs a crash restart).
 *
 * Sleeping for WAL: see repl.h (waiting, nwaiting, SIGUSR1 through ppoll).
 * An asynchronous standby's sender sends in rounds at most every
 * wal_sender_delay (repl.h): a wake-up costs the primary's CPU a context
 * switch, which a busy primary pays at each flush otherwise.
 */
#include "repl/repl_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KEEPALIVE_NS (1000ULL * 1000 * 1000) /* an idle sender says it is alive this often */

/* The handshake's secret, set by the supervisor before it forks senders:
 * the MAC key PBKDF2 made of replication_password with this salt. */
static struct {
	uint8_t salt[REPL_SALT_LEN];
	uint32_t iterations;
	uint8_t key[WR_SHA256_LEN];
} auth;

/* The slot of a sender that has not authenticated yet: its peer, for log lines. */
static repl_sender_slot unclaimed;

int repl_server_setup(const char *password, const wr_options *o, const char *datadir)
{
	/* A new salt at each start: a recorded handshake is no help against
	 * the next start's, and nothing about the key is kept on disk. */
	auth.iterations = REPL_KDF_ITERATIONS;
	int rc = repl_random(auth.salt, sizeof(auth.salt));
	if (rc == WALRUS_OK)
		rc = repl_auth_key(password, auth.salt, auth.iterations, auth.key);
	if (rc == WALRUS_OK)
		rc = repl_tls_server_setup(o, datadir);
	return rc;
}

typedef struct sender {
	int fd;
	repl_sender_slot *slot;
	repl_state *r;
	const char *datadir;
	uint64_t seg_size;
	uint64_t timeout_ns; /* wal_sender_timeout */
	wal_control ctl;
	wr_lsn sent;
	uint64_t last_send_ns, last_reply_ns;
	uint64_t delay_ns;       /* wal_sender_delay; 0 for a synchronous standby */
	uint64_t round_ns;       /* when the last round of sends began */
	bool slept;              /* since the last round began */
	uint64_t wakeups, sends; /* published in the slot (stats) */
	int seg_fd;
	wr_lsn seg_start;
	uint8_t *buf;
	sigset_t wake_mask;            /* the mask ppoll sleeps with: SIGUSR1 unblocked */
	char slot_name[REPL_NAME_LEN]; /* the replication slot it moves, or "" */
	char history[PATH_MAX];        /* a following standby's new timeline history, or "" */
	bool sync;                     /* its standby is the synchronous_standby */
	bool sync_apply;               /* ... confirming what it replayed, not flushed */
	const wr_options *opts;
	repl_lag lag; /* lag.c */
} sender;

static void on_usr1(int sig)
{
	(void)sig; /* only ends ppoll */
}

/* Lines about peers that have not authenticated share a budget a second; a
 * standby's refusal is logged once per REPL_REFUSAL_LOG_US (it retries). */
static void log_end(sender *w, int level, const char *how, const char *why)
{
	uint32_t suppressed = 0;
	if (w->slot == &unclaimed && !repl_auth_warn_ok(&suppressed))
		return;
	if (w->slot != &unclaimed && strcmp(how, "refused") == 0 &&
	    !repl_refusal_log_ok(w->slot->name, why, &suppressed))
		return;
	char more[96] = "";
	if (suppressed > 0)
		wr_snprintf(more, sizeof(more), " (%u such messages suppressed before)",
		            suppressed);
	wr_log(level, "replication connection from %s%s%s%s %s: %s%s", w->slot->peer,
	       w->slot->name[0] ? " (standby \"" : "", w->slot->name, w->slot->name[0] ? "\")" : "",
	       how, why, more);
}

/* An ERROR to the peer, the reason in our log, and the end of this sender. */
static _Noreturn void refuse(sender *w, int level, int code, const char *text)
{
	repl_msg m = {.type = REPL_MSG_ERROR};
	m.u.error.code = code;
	wr_snprintf(m.u.error.text, sizeof(m.u.error.text), "%s", text);
	(void)repl_send(w->fd, &m);
	log_end(w, level, "refused", text);
	_exit(0);
}

static _Noreturn void drop(sender *w, const char *why)
{
	log_end(w, WR_WARNING, "dropped", why);
	_exit(0);
}

/* ---------------------------------------------------------------- authentication */

/* Authenticated: a sender slot, or the refusal the peer waits for instead of AUTH_OK. */
static void claim_slot(sender *w, int (*attach)(int slot))
{
	int slot = repl_sender_claim(w->slot->peer);
	if (slot < 0) {
		char text[96];
		wr_snprintf(text, sizeof(text), "too many standbys (max_wal_senders = %u)",
		            w->r->nsenders);
		refuse(w, WR_WARNING, WALRUS_ELIMIT, text);
	}
	w->slot = &w->r->senders[slot];
	if (attach(slot) != WALRUS_OK)
		wr_panic("walrus-wsnd could not attach: %s", walrus_errmsg());
}

/* Reads @len bytes before @deadline_ns, or drops the peer. */
static void read_by(sender *w, uint8_t *buf, size_t len, uint64_t deadline_ns)
{
	size_t got = 0;
	short wait_for = POLLIN;
	while (got < len) {
		uint64_t now = wr_now_ns();
		if (now >= deadline_ns)
			drop(w, "it did not authenticate in time");
		if (!repl_io_pending(w->fd)) {
			struct pollfd p = {.fd = w->fd, .events = wait_for};
			int r = poll(&p, 1, (int)((deadline_ns - now) / 1000000 + 1));
			if (r < 0 && errno != EINTR)
				drop(w, "poll failed");
			if (r <= 0)
				continue;
		}
		ssize_t n = repl_io_read(w->fd, buf + got, len - got, &wait_for);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0 && repl_is_tls(w->fd))
			drop(w, walrus_errmsg()); /* TLS's reason: a damaged or forged record */
		if (n <= 0)
			_exit(0); /* gone before authenticating: nothing to say */
		got += (size_t)n;
	}
}

/* The CHALLENGE, in clear: this primary's nonce, the key's salt and
 * iterations, and whether TLS begins after it. */
static repl_msg challenge(sender *w)
{
	repl_msg ch = {.type = REPL_MSG_CHALLENGE};
	ch.u.challenge.magic = REPL_MAGIC;
	ch.u.challenge.version = REPL_VERSION;
	if (repl_random(ch.u.challenge.nonce, REPL_NONCE_LEN) != WALRUS_OK)
		drop(w, walrus_errmsg());
	memcpy(ch.u.challenge.salt, auth.salt, REPL_SALT_LEN);
	ch.u.challenge.iterations = auth.iterations;
	ch.u.challenge.flags = repl_tls_serving() ? REPL_CH_TLS : 0;
	if (repl_send(w->fd, &ch) != WALRUS_OK)
		_exit(0);
	return ch;
}

/* AUTH, before @deadline (nothing else is read from a peer not yet authenticated). */
static repl_msg receive_auth(sender *w, uint64_t deadline)
{
	repl_msg m;
	uint8_t h[REPL_HEADER_LEN], type;
	uint32_t len;
	read_by(w, h, sizeof(h), deadline);
	if (repl_decode_header(h, &type, &len) != WALRUS_OK)
		drop(w, walrus_errmsg());
	if (type != REPL_MSG_AUTH)
		drop(w, "it sent something else than AUTH before authenticating");
	read_by(w, w->buf, len, deadline);
	if (repl_decode(type, w->buf, len, &m) != WALRUS_OK)
		drop(w, walrus_errmsg());
	return m;
}

static void authenticate(sender *w, int (*attach)(int slot))
{
	repl_msg ch = challenge(w), m;
	uint64_t deadline = wr_now_ns() + repl_auth_timeout_ms() * 1000000ULL;
	uint8_t binding[REPL_BINDING_LEN], *bound = NULL;
	char why[REPL_ERROR_TEXT_MAX];
	if (repl_tls_serving()) {
		if (repl_tls_accept(w->fd, deadline) != WALRUS_OK) {
			wr_snprintf(why, sizeof(why), "%s", walrus_errmsg());
			drop(w, why);
		}
		if (repl_tls_binding(w->fd, binding) != WALRUS_OK)
			drop(w, walrus_errmsg());
		bound = binding;
	}
	m = receive_auth(w, deadline);
	/* What follows is sent with the blocking socket's timeouts. */
	if (repl_set_blocking(w->fd, true) != WALRUS_OK)
		drop(w, walrus_errmsg());
	uint8_t want[WR_SHA256_LEN], nonce_s[REPL_NONCE_LEN];
	memcpy(nonce_s, m.u.auth.nonce, sizeof(nonce_s));
	if (repl_proof(auth.key, "walrus-standby", &ch, nonce_s, bound, want) != WALRUS_OK)
		drop(w, walrus_errmsg());
	if (!wr_mac_equal(want, m.u.auth.mac, sizeof(want)))
		refuse(w, WR_WARNING, WALRUS_EPERM, "authentication failed");
	claim_slot(w, attach);
	m = (repl_msg){.type = REPL_MSG_AUTH_OK};
	repl_announced_format(&m.u.auth_ok.wal_format, m.u.auth_ok.needs_walrus);
	if (repl_proof(auth.key, "walrus-primary", &ch, nonce_s, bound, m.u.auth_ok.mac) !=
	    WALRUS_OK)
		drop(w, walrus_errmsg());
	if (repl_send(w->fd, &m) != WALRUS_OK)
		_exit(0);
}

/* ---------------------------------------------------------------- START */

/*
 * A standby on another timeline follows this one when its timeline is an
 * ancestor of ours and its WAL ends at or before the point where ours
 * branched off it (a sibling of a promoted standby, say): what it has is
 * then WAL of our history too.  One whose WAL goes past that point holds
 * WAL of another history (the former primary, or a standby that received
 * more than the promoted one did) and can never follow: refused, naming
 * both positions.  The history file goes to it first (history_to_send).
 */
static void check_follow(sender *w, uint32_t theirs, wr_lsn start)
{
	char text[REPL_ERROR_TEXT_MAX], name[32], path[PATH_MAX];
	uint32_t tli = wal_control_timeline(&w->ctl);
	wal_history h;
	wal_history_name(tli, name, sizeof(name));
	if (!wr_snprintf(path, sizeof(path), "%s/wal/%s", w->datadir, name) ||
	    wal_history_read(path, tli, &h) != WALRUS_OK) {
		snprintf(text, sizeof(text), "cannot read this primary's timeline history: %s",
		         walrus_errmsg());
		refuse(w, WR_WARNING, WALRUS_EIO, text);
	}
	int i = 0;
	while (i < h.n && h.e[i].tli != theirs)
		i++;
	if (i == h.n) {
		snprintf(text, sizeof(text),
		         "cannot follow timeline %u: the standby's timeline %u is not in its "
		         "history; make it anew from a base backup of this primary",
		         tli, theirs);
		refuse(w, WR_LOG, WALRUS_EINVAL, text);
	}
	if (start > h.e[i].end) {
		snprintf(text, sizeof(text),
		         "cannot follow timeline %u: the standby's WAL reaches " WAL_LSN_FMT
		         ", past " WAL_LSN_FMT " where it branched off timeline %u (WAL of another "
		         "history: a former primary, or a standby that received more than the "
		         "promoted one); make it anew from a base backup of this primary",
		         tli, WAL_LSN_ARGS(start), WAL_LSN_ARGS(h.e[i].end), theirs);
		refuse(w, WR_LOG, WALRUS_EINVAL, text);
	}
	wr_snprintf(w->history, sizeof(w->history), "%s", path);
	wr_log(WR_LOG,
	       "standby on timeline %u at " WAL_LSN_FMT
	       " follows timeline %u (branched off at " WAL_LSN_FMT ")",
	       theirs, WAL_LSN_ARGS(start), tli, WAL_LSN_ARGS(h.e[i].end));
}

/* The history file of the timeline a following standby switches to: FILE, DATA, FILE_END. */
static void send_history(sender *w)
{
	char text[WAL_HISTORY_MAX * 96 + 256];
	const char *base = strrchr(w->history, '/') + 1;
	FILE *f = fopen(w->history, "re");
	size_t n = f != NULL ? fread(text, 1, sizeof(text), f) : 0;
	if (f == NULL || ferror(f) || n == 0 || n == sizeof(text)) {
		if (f != NULL)
			fclose(f);
		drop(w, "could not read the timeline history to send");
	}
	fclose(f);
	repl_msg m = {.type = REPL_MSG_FILE};
	wr_snprintf(m.u.file.path, sizeof(m.u.file.path), "wal/%s", base);
	int rc = repl_send(w->fd, &m);
	m = (repl_msg){.type = REPL_MSG_DATA};
	m.u.data.data = (const uint8_t *)text;
	m.u.data.len = (uint32_t)n;
	if (rc == WALRUS_OK)
		rc = repl_send(w->fd, &m);
	m = (repl_msg){.type = REPL_MSG_FILE_END};
	m.u.file_end.bytes = n;
	m.u.file_end.crc = crc32c(0, text, n);
	if (rc == WALRUS_OK)
		rc = repl_send(w->fd, &m);
	if (rc != WALRUS_OK)
		drop(w, walrus_errmsg());
}

static wr_lsn check_start(sender *w, const repl_msg *m)
{
	char text[REPL_ERROR_TEXT_MAX];
	uint32_t tli = wal_control_timeline(&w->ctl);
	wr_lsn flush = wal_flushed_lsn(), start = m->u.start.start_lsn;
	if (m->u.start.sysid != w->ctl.sysid) {
		snprintf(text, sizeof(text),
		         "the standby's system identifier %llu differs from the primary's %llu",
		         (unsigned long long)m->u.start.sysid, (unsigned long long)w->ctl.sysid);
		refuse(w, WR_LOG, WALRUS_EINVAL, text);
	}
	if (start == 0)
		refuse(w, WR_LOG, WALRUS_EINVAL,
		       "requested start 0/00000000 is no WAL position: a standby streams from "
		       "where its own WAL ends");
	if (m->u.start.timeline != tli)
		check_follow(w, m->u.start.timeline, start);
	if (start > flush) {
		snprintf(text, sizeof(text),
		         "requested start " WAL_LSN_FMT
		         " is ahead of the primary's flush position " WAL_LSN_FMT,
		         WAL_LSN_ARGS(start), WAL_LSN_ARGS(flush));
		refuse(w, WR_LOG, WALRUS_EINVAL, text);
	}
	/* At the flush position on a segment's start, that segment may not be
	 * made yet: nothing to send, and not a removed segment (which is a
	 * refusal for good: repl_error_permanent). */
	char name[64], path[PATH_MAX];
	wal_segment_name(w->seg_size, start - start % w->seg_size, name, sizeof(name));
	if (start < flush && (!wr_snprintf(path, sizeof(path), "%s/wal/%s", w->datadir, name) ||
	                      access(path, F_OK) != 0)) {
		snprintf(text, sizeof(text), "requested WAL segment %s has already been removed",
		         name);
		refuse(w, WR_LOG, WALRUS_ENOENT, text);
	}
	return start;
}

/* The standby's replication slot (wal/slot.c): taken for the connection, its
 * WAL kept until the standby flushed it; the supervisor frees it when the
 * sender is gone, however it ended. */
static void take_slot(sender *w, const char *name)
{
	wr_lsn restart;
	if (name[0] == '\0')
		return;
	int rc = wal_slot_acquire(name, (uint32_t)getpid(), &restart);
	if (rc != WALRUS_OK) {
		/* Its code tells the standby whether to retry (a slot still held by
		 * its previous connection) or to stop (missing, invalidated). */
		char text[REPL_ERROR_TEXT_MAX];
		wr_snprintf(text, sizeof(text), "%s", walrus_errmsg());
		refuse(w, WR_LOG, rc, text);
	}
	wr_snprintf(w->slot_name, sizeof(w->slot_name), "%s", name);
}

/* BASE_BACKUP (bbsend.c): the whole connection's work, then the end of this sender. */
static _Noreturn void base_backup(sender *w, uint8_t flags)
{
	bool gone;
	atomic_store(&w->slot->state, REPL_SND_BACKUP);
	wr_snprintf(w->slot->name, sizeof(w->slot->name), "%s", "base backup");
	if (repl_set_timeout(w->fd, w->timeout_ns / 1000000) != WALRUS_OK)
		drop(w, walrus_errmsg());
	int rc = repl_send_base_backup(w->fd, w->buf, (flags & REPL_BB_FAST) != 0, w->slot, &gone);
	if (rc == WALRUS_OK)
		_exit(0);
	char text[REPL_ERROR_TEXT_MAX];
	wr_snprintf(text, sizeof(text), "base backup failed: %s", walrus_errmsg());
	if (gone)
		drop(w, text);
	refuse(w, WR_WARNING, rc, text);
}

static void receive_start(sender *w)
{
	repl_msg m;
	atomic_store(&w->slot->state, REPL_SND_START);
	if (repl_set_timeout(w->fd, w->timeout_ns / 1000000) != WALRUS_OK ||
	    repl_recv(w->fd, w->buf, &m) != WALRUS_OK)
		drop(w, walrus_errmsg());
	if (m.type == REPL_MSG_BASE_BACKUP)
		base_backup(w, m.u.base_backup.flags);
	if (m.type == REPL_MSG_ERROR) { /* it cannot follow this primary: why, in our log too */
		log_end(w, WR_WARNING, "ended by the standby", m.u.error.text);
		_exit(0);
	}
	if (m.type != REPL_MSG_START)
		drop(w, "it sent something else than START or BASE_BACKUP");
	wr_snprintf(w->slot->name, sizeof(w->slot->name), "%s", m.u.start.app);
	take_slot(w, m.u.start.slot);
	w->sent = check_start(w, &m);
	w->sync = w->opts->synchronous_standby[0] != '\0' &&
	          strcmp(w->opts->synchronous_standby, w->slot->name) == 0;
	w->sync_apply = w->opts->synchronous_standby_level == WR_SYNC_LEVEL_APPLY;
	/* A synchronous standby's commits wait for it: never held back. */
	w->delay_ns = w->sync ? 0 : (uint64_t)w->opts->wal_sender_delay_us * 1000;
	atomic_store(&w->slot->sent, w->sent);
	if (w->history[0] != '\0')
		send_history(w);
	m = (repl_msg){.type = REPL_MSG_STREAMING};
	m.u.streaming.timeline = wal_control_timeline(&w->ctl);
	m.u.streaming.flush_lsn = wal_flushed_lsn();
	if (repl_send(w->fd, &m) != WALRUS_OK)
		drop(w, walrus_errmsg());
	atomic_store(&w->slot->state, REPL_SND_STREAMING);
	wr_log(WR_LOG, "standby \"%s\" (%s) connected: streaming WAL from " WAL_LSN_FMT,
	       w->slot->name, w->slot->peer, WAL_LSN_ARGS(w->sent));
}

/* ---------------------------------------------------------------- streaming */

static void open_segment(sender *w, wr_lsn seg_start)
{
	char name[64], path[PATH_MAX], text[REPL_ERROR_TEXT_MAX];
	if (w->seg_fd >= 0)
		close(w->seg_fd);
	w->seg_fd = -1;
	wal_segment_name(w->seg_size, seg_start, name, sizeof(name));
	if (!wr_snprintf(path, sizeof(path), "%s/wal/%s", w->datadir, name))
		drop(w, "path too long");
	w->seg_fd = open(path, O_RDONLY | O_CLOEXEC);
	if (w->seg_fd < 0 && errno == ENOENT) {
		snprintf(text, sizeof(text), "requested WAL segment %s has already been removed",
		         name);
		refuse(w, WR_LOG, WALRUS_ENOENT, text);
	}
	if (w->seg_fd < 0) {
		snprintf(text, sizeof(text), "could not open WAL segment %s: %s", name,
		         strerror(errno));
		refuse(w, WR_WARNING, WALRUS_EIO, text);
	}
	w->seg_start = seg_start;
}

/* A page whose header names another address: the segment was recycled under us. */
static void check_pages(sender *w, const uint8_t *data, wr_lsn start, uint32_t len)
{
	wr_lsn page = WR_ALIGN_UP(start, WAL_PAGE_SIZE);
	for (; page + WAL_SHORT_PHD <= start + len; page += WAL_PAGE_SIZE) {
		wal_page_header ph;
		memcpy(&ph, data + (page - start), sizeof(ph));
		if (!wal_format_readable(wal_magic_format(ph.magic)) || ph.pageaddr != page) {
			char name[64], text[256];
			wal_segment_name(w->seg_size, w->seg_start, name, sizeof(name));
			snprintf(text, sizeof(text),
			         "requested WAL segment %s has already been removed (recycled)",
			         name);
			refuse(w, WR_LOG, WALRUS_ENOENT, text);
		}
	}
}

/* One WAL message from `sent`, up to @flush, never across a segment's end. */
static void send_wal(sender *w, wr_lsn flush)
{
	wr_lsn seg = w->sent - w->sent % w->seg_size;
	if (w->seg_fd < 0 || w->seg_start != seg)
		open_segment(w, seg);
	uint64_t n = WR_MIN(flush - w->sent, seg + w->seg_size - w->sent);
	n = WR_MIN(n, REPL_WAL_CHUNK);
	uint8_t *data = w->buf + REPL_HEADER_LEN + REPL_WAL_HEADER;
	size_t got = 0;
	while (got < n) {
		ssize_t r = pread(w->seg_fd, data + got, n - got, (off_t)(w->sent - seg + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			char text[256];
			snprintf(text, sizeof(text), "could not read WAL at " WAL_LSN_FMT ": %s",
			         WAL_LSN_ARGS(w->sent + got),
			         r < 0 ? strerror(errno) : "end of file");
			refuse(w, WR_WARNING, WALRUS_EIO, text);
		}
		got += (size_t)r;
	}
	check_pages(w, data, w->sent, (uint32_t)n);
	repl_encode_wal_header(w->buf, w->sent, flush, wr_wall_us(), (uint32_t)n);
	if (repl_io_write_full(w->fd, w->buf, REPL_HEADER_LEN + REPL_WAL_HEADER + n) != 0)
		drop(w, errno == EAGAIN ? "the standby stopped reading (wal_sender_timeout)"
		                        : "the connection broke");
	w->sent += n;
	atomic_store(&w->slot->sent, w->sent);
	atomic_store(&w->slot->wal_messages, ++w->sends);
	w->last_send_ns = wr_now_ns();
	repl_lag_sent(&w->lag, w->sent, w->last_send_ns);
}

static void send_keepalive(sender *w, bool reply)
{
	repl_msg m = {.type = REPL_MSG_KEEPALIVE};
	m.u.keepalive.primary_flush = wal_flushed_lsn();
	m.u.keepalive.send_time_us = wr_wall_us();
	m.u.keepalive.reply_requested = reply;
	if (repl_send(w->fd, &m) != WALRUS_OK)
		drop(w, walrus_errmsg());
	w->last_send_ns = wr_now_ns();
}

/* The lags as of this FEEDBACK, for stats (lag.c). */
static void publish_lag(sender *w, wr_lsn written, wr_lsn flushed, wr_lsn applied)
{
	uint64_t now = wr_now_ns();
	repl_lag_confirmed(&w->lag, REPL_LAG_WRITE, written, w->sent, now);
	repl_lag_confirmed(&w->lag, REPL_LAG_FLUSH, flushed, w->sent, now);
	repl_lag_confirmed(&w->lag, REPL_LAG_APPLY, applied, w->sent, now);
	atomic_store(&w->slot->write_lag_us, w->lag.lag_ns[REPL_LAG_WRITE] / 1000);
	atomic_store(&w->slot->flush_lag_us, w->lag.lag_ns[REPL_LAG_FLUSH] / 1000);
	atomic_store(&w->slot->replay_lag_us, w->lag.lag_ns[REPL_LAG_APPLY] / 1000);
}

/* What the standby sent: FEEDBACK, or an ERROR that ends the stream. */
static void read_reply(sender *w)
{
	repl_msg m;
	if (repl_recv(w->fd, w->buf, &m) != WALRUS_OK) {
		if (atomic_load(&w->r->finishing)) /* the standby left first: fine now */
			_exit(0);
		drop(w, walrus_errmsg());
	}
	if (m.type == REPL_MSG_ERROR) {
		wr_log(WR_LOG, "standby \"%s\" (%s) ended replication: %s", w->slot->name,
		       w->slot->peer, m.u.error.text);
		_exit(0);
	}
	if (m.type != REPL_MSG_FEEDBACK)
		drop(w, "it sent something else than FEEDBACK while streaming");
	/* Nobody holds more than it was sent (and this sender sends only WAL
	 * flushed here): a FEEDBACK claiming more must not release synchronous
	 * commits nor let a replication slot give up WAL the standby lacks. */
	wr_lsn written = WR_MIN(m.u.feedback.written, w->sent);
	wr_lsn flushed = WR_MIN(m.u.feedback.flushed, w->sent);
	wr_lsn applied = WR_MIN(m.u.feedback.applied, w->sent);
	atomic_store(&w->slot->written, written);
	atomic_store(&w->slot->flushed, flushed);
	atomic_store(&w->slot->applied, applied);
	atomic_store(&w->slot->reply_time_us, wr_wall_us());
	publish_lag(w, written, flushed, applied);
	if (w->slot_name[0] != '\0')
		wal_slot_advance(w->slot_name, flushed);
	if (w->sync) /* commits waiting for this standby (wal/syncrep.c) */
		wal_sync_standby_confirm(w->sync_apply ? applied : flushed);
	w->last_reply_ns = wr_now_ns();
}

/*
 * Sleeps until the standby writes, a keepalive is due, SIGUSR1 (a stop, or
 * with @for_flush a flush past `sent`) or @until_ns.  Without @for_flush
 * no flush signals it: the nap of an asynchronous standby's sender.
 */
static void sleep_until(sender *w, uint64_t until_ns, bool for_flush)
{
	if (for_flush) {
		atomic_store(&w->slot->waiting, 1);
		atomic_fetch_add(&w->r->nwaiting, 1);
	}
	bool wake = (for_flush && wal_flushed_lsn() > w->sent) || atomic_load(&w->r->finishing);
	if (!wake && !repl_io_pending(w->fd)) { /* bytes TLS holds already: no sleep */
		uint64_t now = wr_now_ns(), due = WR_MIN(until_ns, w->last_send_ns + KEEPALIVE_NS);
		uint64_t ns = due > now ? due - now : 0;
		struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ULL),
		                      .tv_nsec = (long)(ns % 1000000000ULL)};
		struct pollfd p = {.fd = w->fd, .events = POLLIN};
		(void)ppoll(&p, 1, &ts, &w->wake_mask);
		atomic_store(&w->slot->wakeups, ++w->wakeups);
	}
	if (for_flush) {
		atomic_store(&w->slot->waiting, 0);
		atomic_fetch_sub(&w->r->nwaiting, 1);
	}
	w->slept = true;
}

/* An asynchronous standby's sender within wal_sender_delay of its last round's start. */
static bool napping(const sender *w, uint64_t now, bool finishing)
{
	return w->delay_ns > 0 && !finishing && now - w->round_ns < w->delay_ns;
}

static _Noreturn void stream(sender *w)
{
	w->last_reply_ns = w->last_send_ns = wr_now_ns();
	w->slept = true;
	for (;;) {
		wr_lsn flush = wal_flushed_lsn();
		bool finishing = atomic_load(&w->r->finishing) != 0;
		if (finishing && w->sent >= flush) {
			atomic_store(&w->slot->state, REPL_SND_STOPPING);
			wr_log(WR_LOG,
			       "standby \"%s\" (%s): all WAL up to " WAL_LSN_FMT
			       " sent at shutdown",
			       w->slot->name, w->slot->peer, WAL_LSN_ARGS(w->sent));
			_exit(0);
		}
		if (repl_readable(w->fd, 0))
			read_reply(w);
		uint64_t now = wr_now_ns();
		if (now - w->last_reply_ns > w->timeout_ns)
			drop(w, "no reply within wal_sender_timeout");
		/* A round sends until it has caught up, however long that takes. */
		if (w->sent < flush && !(w->slept && napping(w, now, finishing))) {
			if (w->slept)
				w->round_ns = now;
			w->slept = false;
			send_wal(w, flush);
			continue;
		}
		if (now - w->last_send_ns >= KEEPALIVE_NS)
			send_keepalive(w, now - w->last_reply_ns > w->timeout_ns / 2);
		if (napping(w, now, finishing))
			sleep_until(w, w->round_ns + w->delay_ns, false);
		else
			sleep_until(w, UINT64_MAX, true);
	}
}

_Noreturn void repl_sender_main(int sock_fd, const char *peer, int (*attach)(int slot))
{
	const repl_instance *inst = repl_instance_get();
	sender w = {.fd = sock_fd, .seg_fd = -1, .datadir = inst->datadir};
	w.r = repl_shared();
	wr_snprintf(unclaimed.peer, sizeof(unclaimed.peer), "%s", peer);
	w.slot = &unclaimed;
	w.seg_size = (uint64_t)inst->opts->wal_segment_size;
	w.timeout_ns = (uint64_t)inst->opts->wal_sender_timeout_us * 1000;
	w.opts = inst->opts;
	w.buf = malloc(REPL_HEADER_LEN + REPL_MAX_PAYLOAD);
	if (w.buf == NULL)
		drop(&w, "out of memory");
	sigset_t usr1;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	sigprocmask(SIG_BLOCK, &usr1, &w.wake_mask);
	sigdelset(&w.wake_mask, SIGUSR1);
	struct sigaction sa = {.sa_handler = on_usr1};
	sigaction(SIGUSR1, &sa, NULL);
	if (wal_control_read(w.datadir, &w.ctl) != WALRUS_OK)
		drop(&w, walrus_errmsg());
	authenticate(&w, attach);
	receive_start(&w);
	stream(&w);
}
