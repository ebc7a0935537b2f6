/*
 * client.c - the standby's side of a replication connection, as steps the
 * receiver (receiver.c) and the tests share: connect and authenticate,
 * START, then receive WAL into a directory.
 *
 * Received WAL is written at its own position in its own segment (the
 * primary's bytes, page headers included), through the fd cache (the
 * engine's I/O seam), and fdatasynced through the same handle before
 * `flushed` moves: the standby never reports, nor lets anyone replay, WAL
 * that a power cut could take back.
 */
#include "repl/repl_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fdcache/fdcache.h"

#define APPLY_POLL_MS 2 /* replay behind the flushed WAL: report it this often */
#define FEEDBACK_NS   (1000ULL * 1000 * 1000) /* FEEDBACK at least this often */

/*
 * After AUTH_OK proved the primary: the WAL format it writes must be one
 * this standby reads (checked before the protocol's version, so that the
 * refusal names the walrus to run), then the version of what follows.
 */
static int check_primary(const char *addr, const repl_msg *auth_ok, uint32_t version)
{
	uint32_t f = auth_ok->u.auth_ok.wal_format;
	const char *needs = auth_ok->u.auth_ok.needs_walrus;
	if (f == 0)
		return wr_error(WALRUS_EPROTO, "the primary at \"%s\" names no WAL format", addr);
	char walrus[WAL_NEEDS_LEN + 16] = "a newer walrus";
	if (needs[0] != '\0')
		snprintf(walrus, sizeof(walrus), "walrus >= %s", needs);
	if (f > WAL_FORMAT)
		return wr_error(WALRUS_EVERSION,
		                "the primary at \"%s\" writes WAL format %u, which needs %s; this "
		                "standby runs walrus %s: upgrade the standby first",
		                addr, f, walrus, WR_WALRUS_VERSION);
	if (!wal_format_readable(f))
		return wr_error(WALRUS_EVERSION,
		                "the primary at \"%s\" writes WAL format %u, which this standby's "
		                "walrus %s no longer reads (formats %u to %u)",
		                addr, f, WR_WALRUS_VERSION, WAL_FORMAT_OLDEST, WAL_FORMAT);
	if (version < REPL_VERSION_FORMATS || version > REPL_VERSION)
		return wr_error(
		    WALRUS_EPROTO,
		    "the primary at \"%s\" speaks replication protocol %u, this standby "
		    "%u",
		    addr, version, REPL_VERSION);
	return WALRUS_OK;
}

bool repl_error_permanent(int code)
{
	switch (code) {
	case WALRUS_EPERM:     /* authentication, either way */
	case WALRUS_EINVAL:    /* system, timeline, start position, an invalidated slot */
	case WALRUS_ENOTFOUND: /* no such replication slot */
	case WALRUS_ENOENT:    /* the WAL asked for was removed */
	case WALRUS_EREADONLY: /* the "primary" is a standby */
	case WALRUS_EVERSION:  /* a protocol or WAL format this side cannot read */
	case WALRUS_EPROTO:    /* not a walrus primary, or one that breaks the protocol */
		return true;
	default: /* EIO (network), ELIMIT, EBUSY, ESHUTDOWN, ENOMEM */
		return false;
	}
}

/* The CHALLENGE (or the ERROR a primary sends instead: too many connections). */
static int receive_challenge(int fd, const char *addr, uint8_t *buf, repl_msg *m)
{
	int rc = repl_set_timeout(fd, REPL_AUTH_TIMEOUT_MS);
	if (rc == WALRUS_OK)
		rc = repl_recv(fd, buf, m);
	if (rc == WALRUS_OK && m->type == REPL_MSG_ERROR)
		return repl_error_from(m);
	if (rc == WALRUS_OK &&
	    (m->type != REPL_MSG_CHALLENGE || m->u.challenge.version < REPL_VERSION_FORMATS))
		return wr_error(WALRUS_EPROTO, "\"%s\" is not a walrus primary of this version",
		                addr);
	if (rc == WALRUS_OK && m->u.challenge.version >= REPL_VERSION_KDF &&
	    (m->u.challenge.iterations < REPL_KDF_MIN_ITERATIONS ||
	     m->u.challenge.iterations > REPL_KDF_MAX_ITERATIONS))
		return wr_error(WALRUS_EPROTO,
		                "the primary at \"%s\" asks for %u key derivation iterations "
		                "(%u to %u are accepted)",
		                addr, m->u.challenge.iterations, REPL_KDF_MIN_ITERATIONS,
		                REPL_KDF_MAX_ITERATIONS);
	return rc;
}

/* TLS when the CHALLENGE says it begins, if sslmode allows; none otherwise, if sslmode allows. */
static int start_tls(int fd, const char *addr, const repl_msg *ch, const repl_ssl_conf *ssl)
{
	bool offered = ch->u.challenge.version >= REPL_VERSION_KDF &&
	               (ch->u.challenge.flags & REPL_CH_TLS) != 0;
	if (offered && ssl->mode == REPL_SSL_DISABLE)
		return wr_error(WALRUS_EPERM,
		                "the primary at \"%s\" requires TLS (ssl = on there) and this "
		                "standby's sslmode is disable: set sslmode (require, verify-ca or "
		                "verify-full) in %s",
		                addr, REPL_STANDBY_FILE);
	if (!offered && ssl->mode >= REPL_SSL_REQUIRE)
		return wr_error(WALRUS_EPERM,
		                "the primary at \"%s\" does not use TLS (%s) and this standby's "
		                "sslmode is %s",
		                addr,
		                ch->u.challenge.version < REPL_VERSION_KDF
		                    ? "its walrus is too old for it"
		                    : "ssl = off there",
		                repl_sslmode_name(ssl->mode));
	return offered ? repl_tls_connect(fd, addr, ssl) : WALRUS_OK;
}

/*
 * The standby's proof (@mine) and the one it expects of the primary: keyed
 * by PBKDF2 of the password and bound to the challenge and the TLS
 * session, or, for a primary of version 2, keyed by the password itself.
 */
static int proofs(int fd, const char *addr, const char *password, const repl_msg *ch,
                  const uint8_t nonce_s[REPL_NONCE_LEN], uint8_t mine[WR_SHA256_LEN],
                  uint8_t theirs[WR_SHA256_LEN])
{
	if (ch->u.challenge.version < REPL_VERSION_KDF) {
		wr_log(WR_WARNING,
		       "the primary at \"%s\" speaks replication protocol %u: no TLS, and its "
		       "handshake's MACs are keyed by the password itself (upgrade it)",
		       addr, ch->u.challenge.version);
		int rc = repl_mac(password, "walrus-standby", ch->u.challenge.nonce, nonce_s, mine);
		return rc == WALRUS_OK ? repl_mac(password, "walrus-primary", nonce_s,
		                                  ch->u.challenge.nonce, theirs)
		                       : rc;
	}
	uint8_t key[WR_SHA256_LEN], binding[REPL_BINDING_LEN], *bound = NULL;
	int rc = repl_auth_key(password, ch->u.challenge.salt, ch->u.challenge.iterations, key);
	if (rc == WALRUS_OK && repl_is_tls(fd)) {
		rc = repl_tls_binding(fd, binding);
		bound = binding;
	}
	if (rc == WALRUS_OK)
		rc = repl_proof(key, "walrus-standby", ch, nonce_s, bound, mine);
	if (rc == WALRUS_OK)
		rc = repl_proof(key, "walrus-primary", ch, nonce_s, bound, theirs);
	explicit_bzero(key, sizeof(key));
	return rc;
}

/* AUTH, then AUTH_OK checked: the primary proved the password too. */
static int authenticate(int fd, const char *addr, const char *password, const repl_msg *ch,
                        uint8_t *buf, repl_msg *m)
{
	uint8_t nonce_s[REPL_NONCE_LEN], want[WR_SHA256_LEN];
	*m = (repl_msg){.type = REPL_MSG_AUTH};
	int rc = repl_random(nonce_s, sizeof(nonce_s));
	if (rc == WALRUS_OK)
		rc = proofs(fd, addr, password, ch, nonce_s, m->u.auth.mac, want);
	memcpy(m->u.auth.nonce, nonce_s, sizeof(nonce_s));
	if (rc == WALRUS_OK)
		rc = repl_send(fd, m);
	if (rc == WALRUS_OK)
		rc = repl_recv(fd, buf, m);
	if (rc == WALRUS_OK && m->type == REPL_MSG_ERROR)
		return repl_error_from(m);
	if (rc == WALRUS_OK && m->type != REPL_MSG_AUTH_OK)
		return wr_error(WALRUS_EPROTO, "the primary at \"%s\" answered AUTH with %s", addr,
		                repl_msg_name(m->type));
	/* A fake primary does not know the password either. */
	if (rc == WALRUS_OK && !wr_mac_equal(want, m->u.auth_ok.mac, sizeof(want)))
		return wr_error(WALRUS_EPERM,
		                "the primary at \"%s\" failed to prove it knows the password",
		                addr);
	return rc;
}

int repl_client_connect_tls(const char *addr, const char *password, const repl_ssl_conf *ssl,
                            int *fd_out)
{
	static const repl_ssl_conf prefer = {.mode = REPL_SSL_PREFER};
	int fd;
	repl_msg ch, m;
	uint8_t *buf = malloc(REPL_MAX_PAYLOAD);
	if (buf == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory");
	int rc = repl_connect(addr, &fd);
	if (rc != WALRUS_OK) {
		free(buf);
		return rc;
	}
	rc = receive_challenge(fd, addr, buf, &ch);
	if (rc == WALRUS_OK)
		rc = start_tls(fd, addr, &ch, ssl != NULL ? ssl : &prefer);
	if (rc == WALRUS_OK)
		rc = authenticate(fd, addr, password, &ch, buf, &m);
	if (rc == WALRUS_OK)
		rc = check_primary(addr, &m, ch.u.challenge.version);
	if (rc == WALRUS_EVERSION) { /* the primary's log says why too (best effort) */
		m = (repl_msg){.type = REPL_MSG_ERROR};
		m.u.error.code = rc;
		wr_snprintf(m.u.error.text, sizeof(m.u.error.text), "%s", walrus_errmsg());
		if (repl_send(fd, &m) != WALRUS_OK)
			rc = wr_error(WALRUS_EVERSION, "%s", m.u.error.text);
	}
	free(buf);
	if (rc != WALRUS_OK) {
		repl_close(fd);
		return rc;
	}
	*fd_out = fd;
	return WALRUS_OK;
}

int repl_client_connect(const char *addr, const char *password, int *fd_out)
{
	return repl_client_connect_tls(addr, password, NULL, fd_out);
}

/* A history file the primary sends before STREAMING: kept in @waldir, durably. */
typedef struct follow_file {
	char name[32];
	char text[WAL_HISTORY_MAX * 96 + 256];
	size_t len;
	uint32_t tli;
} follow_file;

static int follow_msg(const repl_msg *m, const char *waldir, follow_file *f)
{
	if (waldir == NULL)
		return wr_error(WALRUS_EPROTO, "the primary answered START with %s",
		                repl_msg_name(m->type));
	if (m->type == REPL_MSG_FILE) {
		const char *name = m->u.file.path + 4;
		if (strncmp(m->u.file.path, "wal/", 4) != 0 ||
		    !wal_history_parse_name(name, &f->tli))
			return wr_error(WALRUS_EPROTO,
			                "the primary sent \"%s\" before streaming, not a timeline "
			                "history",
			                m->u.file.path);
		wr_snprintf(f->name, sizeof(f->name), "%s", name);
		f->len = 0;
		return WALRUS_OK;
	}
	if (f->name[0] == '\0')
		return wr_error(WALRUS_EPROTO, "the primary sent %s outside a file",
		                repl_msg_name(m->type));
	if (m->type == REPL_MSG_DATA) {
		if (f->len + m->u.data.len >= sizeof(f->text))
			return wr_error(WALRUS_EPROTO,
			                "the primary's timeline history is too long");
		memcpy(f->text + f->len, m->u.data.data, m->u.data.len);
		f->len += m->u.data.len;
		return WALRUS_OK;
	}
	if (m->u.file_end.bytes != f->len || m->u.file_end.crc != crc32c(0, f->text, f->len))
		return wr_error(WALRUS_EPROTO,
		                "the primary's timeline history \"%s\" arrived damaged", f->name);
	f->text[f->len] = '\0';
	if (strlen(f->text) != f->len)
		return wr_error(WALRUS_EPROTO, "the primary's timeline history \"%s\" is not text",
		                f->name);
	/* Durable before any WAL of that timeline is written here. */
	return wal_write_file(waldir, f->name, f->text);
}

int repl_client_follow(int fd, uint64_t sysid, uint32_t timeline, wr_lsn start, const char *app,
                       const char *slot, const char *waldir, wr_lsn *primary_flush,
                       uint32_t *stream_tli)
{
	repl_msg m = {.type = REPL_MSG_START};
	m.u.start.sysid = sysid;
	m.u.start.timeline = timeline;
	m.u.start.start_lsn = start;
	wr_snprintf(m.u.start.app, sizeof(m.u.start.app), "%s", app);
	wr_snprintf(m.u.start.slot, sizeof(m.u.start.slot), "%s", slot);
	uint8_t *buf = malloc(REPL_MAX_PAYLOAD);
	follow_file *f = calloc(1, sizeof(*f));
	if (buf == NULL || f == NULL) {
		free(buf);
		free(f);
		return wr_error(WALRUS_ENOMEM, "out of memory");
	}
	int rc = repl_send(fd, &m);
	uint32_t want = timeline;
	while (rc == WALRUS_OK) {
		rc = repl_recv(fd, buf, &m);
		if (rc != WALRUS_OK || m.type == REPL_MSG_ERROR || m.type == REPL_MSG_STREAMING)
			break;
		if (m.type != REPL_MSG_FILE && m.type != REPL_MSG_DATA &&
		    m.type != REPL_MSG_FILE_END)
			rc = wr_error(WALRUS_EPROTO, "the primary answered START with %s",
			              repl_msg_name(m.type));
		else
			rc = follow_msg(&m, waldir, f);
		if (rc == WALRUS_OK && m.type == REPL_MSG_FILE_END)
			want = f->tli;
	}
	free(buf);
	free(f);
	if (rc == WALRUS_OK && m.type == REPL_MSG_ERROR)
		return repl_error_from(&m);
	if (rc == WALRUS_OK && m.u.streaming.timeline != want)
		return wr_error(WALRUS_EPROTO, "the primary streams timeline %u, not %u",
		                m.u.streaming.timeline, want);
	if (rc == WALRUS_OK) {
		*primary_flush = m.u.streaming.flush_lsn;
		*stream_tli = want;
	}
	return rc;
}

int repl_client_start(int fd, uint64_t sysid, uint32_t timeline, wr_lsn start, const char *app,
                      const char *slot, wr_lsn *primary_flush)
{
	uint32_t tli;
	return repl_client_follow(fd, sysid, timeline, start, app, slot, NULL, primary_flush, &tli);
}

/* ---------------------------------------------------------------- receiving */

void repl_stream_init(repl_stream *st, const char *waldir, uint64_t seg_size, wr_lsn start)
{
	*st = (repl_stream){.waldir = waldir, .seg_size = seg_size, .seg_fd = -1};
	st->written = st->flushed = start;
}

static fdc_file seg_handle(repl_stream *st)
{
	return (fdc_file)st->seg_fd;
}

/* Makes what was written durable, then publishes it (never the other way round). */
static void sync_written(repl_stream *st)
{
	if (st->flushed >= st->written)
		return;
	if (st->seg_fd >= 0 && fdc_fdatasync(seg_handle(st)) != WALRUS_OK)
		wr_panic("could not fdatasync received WAL: %s", walrus_errmsg());
	st->flushed = st->written;
}

static void close_segment(repl_stream *st)
{
	if (st->seg_fd < 0)
		return;
	sync_written(st);
	if (fdc_close(seg_handle(st)) != WALRUS_OK)
		wr_panic("could not close received WAL segment: %s", walrus_errmsg());
	st->seg_fd = -1;
}

static void open_segment(repl_stream *st, wr_lsn seg)
{
	char path[PATH_MAX];
	close_segment(st);
	if (wal_segment_create(st->waldir, st->seg_size, seg) != WALRUS_OK)
		wr_panic("could not create WAL segment for received WAL: %s", walrus_errmsg());
	wal_segment_path(st->waldir, st->seg_size, seg, path, sizeof(path));
	fdc_file f;
	if (fdc_open(path, O_WRONLY | O_CLOEXEC, 0600, &f) != WALRUS_OK)
		wr_panic("could not open received WAL segment: %s", walrus_errmsg());
	st->seg_fd = (int)f;
	st->seg_start = seg;
}

/*
 * A page header says all WAL before its `durable` stamp was durable when
 * the page was written (the reader tells damage from a torn tail by it).
 * That must hold here too: a page is written only once what its stamp
 * covers is synced.  One extra sync at most per message that starts pages.
 */
static void sync_before_new_pages(repl_stream *st, const repl_msg *m)
{
	wr_lsn start = m->u.wal.start_lsn, end = start + m->u.wal.len;
	for (wr_lsn pg = WR_ALIGN_UP(start, WAL_PAGE_SIZE); pg + WAL_SHORT_PHD <= end;
	     pg += WAL_PAGE_SIZE) {
		wal_page_header ph;
		memcpy(&ph, m->u.wal.data + (pg - start), sizeof(ph));
		if (ph.durable > st->flushed) {
			sync_written(st);
			return;
		}
	}
}

static int write_wal(repl_stream *st, const repl_msg *m)
{
	wr_lsn start = m->u.wal.start_lsn;
	uint32_t len = m->u.wal.len;
	wr_lsn seg = start - start % st->seg_size;
	if (start != st->written)
		return wr_error(WALRUS_EPROTO,
		                "the primary sent WAL from " WAL_LSN_FMT " where " WAL_LSN_FMT
		                " was expected",
		                WAL_LSN_ARGS(start), WAL_LSN_ARGS(st->written));
	if (start - seg + len > st->seg_size)
		return wr_error(WALRUS_EPROTO,
		                "the primary sent WAL across a segment's end at " WAL_LSN_FMT,
		                WAL_LSN_ARGS(start));
	if (st->seg_fd < 0 || st->seg_start != seg)
		open_segment(st, seg);
	sync_before_new_pages(st, m);
	if (fdc_pwrite(seg_handle(st), m->u.wal.data, len, (off_t)(start - seg)) != WALRUS_OK)
		wr_panic("could not write received WAL: %s", walrus_errmsg());
	st->written = start + len;
	if (st->written % st->seg_size == 0)
		close_segment(st); /* synced: the next message opens the next one */
	return WALRUS_OK;
}

static int send_feedback(int fd, repl_stream *st)
{
	repl_msg m = {.type = REPL_MSG_FEEDBACK};
	m.u.feedback.written = st->written;
	m.u.feedback.flushed = st->flushed;
	m.u.feedback.applied = st->applied;
	m.u.feedback.time_us = wr_wall_us();
	return repl_send(fd, &m);
}

/* One message; *reply when the primary asked for FEEDBACK now. */
static int handle(int fd, repl_stream *st, bool *reply)
{
	repl_msg m;
	int rc = repl_recv(fd, st->buf, &m);
	if (rc != WALRUS_OK)
		return rc;
	st->last_msg_us = wr_wall_us();
	switch (m.type) {
	case REPL_MSG_WAL:
		st->primary_flush = m.u.wal.primary_flush;
		return write_wal(st, &m);
	case REPL_MSG_KEEPALIVE:
		st->primary_flush = m.u.keepalive.primary_flush;
		*reply = *reply || m.u.keepalive.reply_requested;
		return WALRUS_OK;
	case REPL_MSG_ERROR:
		return repl_error_from(&m);
	default:
		return wr_error(WALRUS_EPROTO, "the primary sent %s while streaming",
		                repl_msg_name(m.type));
	}
}

int repl_client_stream(int fd, repl_stream *st)
{
	if (st->buf == NULL && (st->buf = malloc(REPL_MAX_PAYLOAD)) == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory");
	uint64_t last_feedback = 0;
	wr_lsn sent_applied = st->applied;
	for (;;) {
		bool reply = false;
		int rc = WALRUS_OK;
		/* While replay is behind what was flushed, look at it often: a
		 * primary with synchronous_standby_level = apply waits for it. */
		int wait_ms = st->applied < st->flushed ? APPLY_POLL_MS : 1000;
		/* Everything already here first: one sync covers it all. */
		if (repl_readable(fd, wait_ms)) {
			do
				rc = handle(fd, st, &reply);
			while (rc == WALRUS_OK && repl_readable(fd, 0) &&
			       st->written - st->flushed < (16u << 20));
		}
		bool advanced = st->flushed < st->written;
		sync_written(st);
		if (rc != WALRUS_OK)
			return rc;
		/* Publishes what is flushed and reads what is replayed; the
		 * feedback goes out before a stop. */
		bool go = st->progress == NULL || st->progress(st, st->arg);
		uint64_t now = wr_now_ns();
		if (advanced || reply || st->applied != sent_applied ||
		    now - last_feedback >= FEEDBACK_NS) {
			rc = send_feedback(fd, st);
			if (rc != WALRUS_OK)
				return rc;
			last_feedback = now;
			sent_applied = st->applied;
		}
		if (!go)
			return WALRUS_OK;
	}
}

void repl_stream_close(repl_stream *st)
{
	close_segment(st);
	free(st->buf);
	st->buf = NULL;
}
