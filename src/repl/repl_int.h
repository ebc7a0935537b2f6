/*
 * repl_int.h - what the sender, the receiver, their tests and the fuzz
 * target share inside src/repl: the messages, their encoding and
 * decoding, socket I/O with timeouts, and the standby's client steps
 * (connect + authenticate, start, receive into a directory), exposed so a
 * test can stream from a primary as the receiver does.
 */
#ifndef WALRUS_REPL_INT_H
#define WALRUS_REPL_INT_H

#include "repl/repl.h"

#include <stddef.h>
#include <stdint.h>

#include "wal/wal.h"

#define REPL_MAGIC 0x50525257u /* "WRRP" as bytes W R R P, read LE */
/*
 * The protocol's version.  From version 3 on, the handshake (CHALLENGE,
 * AUTH, AUTH_OK) keeps its layout in every version, so that a standby
 * learns which WAL format the primary writes (AUTH_OK) and refuses one its
 * binary does not read with the walrus version it needs, before it looks
 * at the version of the messages after the handshake.  Version 3 added the
 * key derivation and TLS to the CHALLENGE; a standby of version 3 still
 * authenticates to a primary of version 2 (the upgrade goes standbys
 * first), without TLS and with the MAC keyed by the password itself.
 */
#define REPL_VERSION         3
#define REPL_VERSION_FORMATS 2 /* the first whose AUTH_OK names the WAL format */
#define REPL_VERSION_KDF     3 /* the first with the key derivation and TLS */
#define REPL_NONCE_LEN       32
#define REPL_SALT_LEN        16
#define REPL_CHALLENGE_V2    40   /* version 2's CHALLENGE: magic, version, nonce */
#define REPL_CHALLENGE_LEN   64   /* ... then salt, iterations, flags */
#define REPL_CH_TLS          0x1u /* CHALLENGE flag: TLS starts after this message */
/* PBKDF2 iterations the primary asks for, and what a standby accepts (an
 * impostor must not make offline guessing cheap, nor a standby spin). */
#define REPL_KDF_ITERATIONS     100000u
#define REPL_KDF_MIN_ITERATIONS 4096u
#define REPL_KDF_MAX_ITERATIONS 2000000u
#define REPL_BINDING_LEN        32 /* TLS exporter bytes the MACs cover */
#define REPL_HEADER_LEN         5  /* u8 type, u32 length */
#define REPL_MAX_PAYLOAD        ((1u << 20) + 64)
#define REPL_WAL_HEADER         24      /* start_lsn, primary_flush, send_time_us */
#define REPL_WAL_CHUNK          131072u /* bytes of WAL per message at most (128 KiB) */
#define REPL_ERROR_TEXT_MAX     512
#define REPL_AUTH_TIMEOUT_MS    10000 /* a peer must authenticate within this */
#define REPL_PATH_MAX           255   /* a base backup's relative path, in bytes */
#define REPL_BB_FAST            0x1   /* BASE_BACKUP: an immediate checkpoint */

/*
 * The top-level files a base backup carries besides base/ and wal/: the
 * engine's WR_VERSION_FILE and WR_CONF_FILE (engine.h; the standby checks
 * that the first arrived), and the control file, which the standby decodes
 * and rewrites rather than copies.
 */
#define REPL_BB_VERSION_FILE "WALRUS_VERSION"
#define REPL_BB_CONF_FILE    "walrus.conf"
#define REPL_BB_CONTROL_FILE WAL_CONTROL_FILE

enum repl_msg_type {
	REPL_MSG_CHALLENGE = 1, /* primary -> standby */
	REPL_MSG_AUTH,          /* standby -> primary */
	REPL_MSG_AUTH_OK,       /* primary -> standby */
	REPL_MSG_START,         /* standby -> primary */
	REPL_MSG_STREAMING,     /* primary -> standby */
	REPL_MSG_WAL,           /* primary -> standby */
	REPL_MSG_KEEPALIVE,     /* primary -> standby */
	REPL_MSG_FEEDBACK,      /* standby -> primary */
	REPL_MSG_ERROR,         /* either way, then close */
	/* A base backup (src/engine/basebackup.c asks, the sender answers): */
	REPL_MSG_BASE_BACKUP,  /* standby -> primary, instead of START */
	REPL_MSG_BACKUP_BEGIN, /* primary -> standby */
	REPL_MSG_FILE,         /* primary -> standby: a file's path, then DATA... FILE_END */
	REPL_MSG_DATA,         /* primary -> standby */
	REPL_MSG_FILE_END,     /* primary -> standby */
	REPL_MSG_BACKUP_END,   /* primary -> standby: the backup's end; then close */
	REPL_MSG_NTYPES
};

typedef struct repl_msg {
	uint8_t type;
	union {
		struct {
			uint32_t magic, version;
			uint8_t nonce[REPL_NONCE_LEN];
			/* version >= REPL_VERSION_KDF: */
			uint8_t salt[REPL_SALT_LEN];
			uint32_t iterations, flags; /* flags: REPL_CH_TLS */
		} challenge;
		struct {
			uint8_t nonce[REPL_NONCE_LEN], mac[WR_SHA256_LEN];
		} auth;
		struct {
			uint8_t mac[WR_SHA256_LEN];
			uint32_t wal_format;              /* the WAL format the primary writes */
			char needs_walrus[WAL_NEEDS_LEN]; /* the first walrus that reads it */
		} auth_ok;
		struct {
			uint64_t sysid;
			uint32_t timeline;
			uint64_t start_lsn;
			char app[REPL_NAME_LEN], slot[REPL_NAME_LEN]; /* terminated */
		} start;
		struct {
			uint32_t timeline;
			uint64_t flush_lsn;
		} streaming;
		struct {
			uint64_t start_lsn, primary_flush, send_time_us;
			const uint8_t *data; /* into the buffer decoded from */
			uint32_t len;
		} wal;
		struct {
			uint64_t primary_flush, send_time_us;
			uint8_t reply_requested;
		} keepalive;
		struct {
			uint64_t written, flushed, applied, time_us;
		} feedback;
		struct {
			int32_t code;
			char text[REPL_ERROR_TEXT_MAX]; /* terminated, cut if longer */
		} error;
		struct {
			uint8_t flags; /* REPL_BB_FAST */
		} base_backup;
		struct {
			uint64_t sysid;
			uint32_t timeline;
			uint64_t wal_seg_size, start_lsn, checkpoint_lsn;
			uint64_t total_bytes; /* an estimate, for progress */
		} backup_begin;
		struct {
			char path[REPL_PATH_MAX + 1]; /* terminated; repl_check_backup_path holds */
		} file;
		struct {
			const uint8_t *data; /* into the buffer decoded from */
			uint32_t len;        /* 1..REPL_WAL_CHUNK */
		} data;
		struct {
			uint64_t bytes;
			uint32_t crc; /* CRC32C of the file's bytes */
		} file_end;
		struct {
			uint64_t end_lsn;
		} backup_end;
	} u;
} repl_msg;

/* The type's name for messages ("WAL"), "unknown" otherwise. */
const char *repl_msg_name(int type);
/* Header: WALRUS_EPROTO for an unknown type or a length over REPL_MAX_PAYLOAD. */
int repl_decode_header(const uint8_t h[REPL_HEADER_LEN], uint8_t *type, uint32_t *len);
/* Payload of @type: WALRUS_EPROTO unless exactly well formed. */
int repl_decode(uint8_t type, const uint8_t *p, uint32_t len, repl_msg *m);
/* One whole message at the start of @buf: WALRUS_OK with *used, WALRUS_ENOTFOUND when
 * @n bytes do not hold it all yet, WALRUS_EPROTO when it is malformed. */
int repl_decode_buf(const uint8_t *buf, size_t n, repl_msg *m, size_t *used);
/* Header + payload into @out; the bytes written, 0 when it does not fit in @cap. */
size_t repl_encode(const repl_msg *m, uint8_t *out, size_t cap);

/* The 29 bytes before a WAL message's data (so the data can be read in place after them). */
void repl_encode_wal_header(uint8_t *out, wr_lsn start, wr_lsn primary_flush, uint64_t time_us,
                            uint32_t len);

/*
 * A path a base backup may carry, relative to the data directory: 1 to
 * REPL_PATH_MAX bytes, no NUL or control character, no leading '/', no
 * empty, "." or ".." component; under base/ (any depth), wal/ (a segment
 * name or a TLI.history file, no subdirectory), or one of the REPL_BB_*
 * top-level files.  WALRUS_EPROTO otherwise, naming it.
 */
int repl_check_backup_path(const char *path, size_t len);

/* The 5 bytes before a DATA message's @len bytes (read in place after them). */
void repl_encode_data_header(uint8_t *out, uint32_t len);

/*
 * The sender's answer to BASE_BACKUP (bbsend.c): the engine's steps
 * (repl_instance.backup) and the files, until BACKUP_END.  On an error
 * the backup is released; *peer_gone says whether an ERROR can still
 * reach the standby.
 */
int repl_send_base_backup(int fd, uint8_t *buf, bool fast, repl_sender_slot *slot, bool *peer_gone);

/* What repl_set_instance was given. */
const repl_instance *repl_instance_get(void);

/* ---------------------------------------------------------------- sockets */

/* Bounds every later read and write on @fd (SO_RCVTIMEO/SO_SNDTIMEO): a stalled peer
 * makes them fail with EAGAIN. */
int repl_set_timeout(int fd, uint64_t ms);
/* Sends one message whole. */
int repl_send(int fd, const repl_msg *m);
/* Receives one message into @m; @buf holds REPL_MAX_PAYLOAD bytes and keeps a WAL
 * message's data.  WALRUS_EIO when the peer closed or timed out, WALRUS_EPROTO when
 * it broke the protocol. */
int repl_recv(int fd, uint8_t *buf, repl_msg *m);
/* An ERROR message's code and text as this side's error (wr_error). */
int repl_error_from(const repl_msg *m);
/* Connects to "HOST:PORT" or a socket path (blocking, close-on-exec). */
int repl_connect(const char *addr, int *fd_out);

/* ---------------------------------------------------------------- TLS (tls.c) */

/*
 * A connection's bytes, through TLS when it has it: read(2)-like (one
 * call: bytes, 0 at the end, -1 with errno, EAGAIN for a timeout or, on a
 * non-blocking socket, a wait for *@wait_for, POLLIN or POLLOUT), and whole
 * reads and writes (wr_read_full, wr_write_full).
 */
ssize_t repl_io_read(int fd, void *buf, size_t len, short *wait_for);
ssize_t repl_io_read_full(int fd, void *buf, size_t len);
int repl_io_write_full(int fd, const void *buf, size_t len);
/*
 * After a write that failed because the peer closed (errno ECONNRESET or
 * EPIPE): the alert it sent before closing, if one is there to read, into
 * @why.  A primary checks a standby's certificate after the standby's
 * side of the TLS 1.3 handshake has ended, and says why it refuses it so.
 */
bool repl_tls_alert(int fd, char *why, size_t len);
/* Bytes TLS decrypted that the socket's readiness no longer shows. */
bool repl_io_pending(int fd);
/* Something to read within @ms (pending bytes, or the socket readable). */
bool repl_readable(int fd, int ms);
bool repl_is_tls(int fd);
/* Ends a connection: TLS's close_notify if it has TLS, then close(2). */
void repl_close(int fd);
/* A new socket got @fd's number: any TLS state left under it goes. */
void repl_forget(int fd);
int repl_set_blocking(int fd, bool blocking);
/* The primary's context from ssl, ssl_cert_file, ssl_key_file, ssl_ca_file
 * (relative to @datadir); none when ssl is off.  In the supervisor. */
int repl_tls_server_setup(const wr_options *o, const char *datadir);
/* Whether this primary's connections use TLS (its CHALLENGE says so). */
bool repl_tls_serving(void);
/* The sender's TLS handshake, its socket made non-blocking, before @deadline_ns. */
int repl_tls_accept(int fd, uint64_t deadline_ns);
/* The standby's TLS handshake with @addr, checking the certificate as @c's mode says. */
int repl_tls_connect(int fd, const char *addr, const repl_ssl_conf *c);
/* The session's channel binding (RFC 5705 exporter): the same at both ends of one session. */
int repl_tls_binding(int fd, uint8_t out[REPL_BINDING_LEN]);

/* ---------------------------------------------------------------- the handshake's MACs */

/* Version 2's MACs (label "walrus-standby" or "walrus-primary"), keyed by the password. */
int repl_mac(const char *password, const char *label, const uint8_t *n1, const uint8_t *n2,
             uint8_t out[WR_SHA256_LEN]);
/* The key of version 3's MACs: PBKDF2-HMAC-SHA256(password, salt, iterations). */
int repl_auth_key(const char *password, const uint8_t salt[REPL_SALT_LEN], uint32_t iterations,
                  uint8_t key[WR_SHA256_LEN]);
/*
 * Version 3's MACs: HMAC(key, label || the CHALLENGE's payload || the
 * standby's nonce || TLS or not (one byte) || the channel binding), so a
 * proof is good for one challenge, one standby nonce and one TLS session.
 * @binding is NULL without TLS.
 */
int repl_proof(const uint8_t key[WR_SHA256_LEN], const char *label, const repl_msg *challenge,
               const uint8_t nonce_s[REPL_NONCE_LEN], const uint8_t *binding,
               uint8_t out[WR_SHA256_LEN]);
/* Fills @buf with random bytes (getrandom). */
int repl_random(uint8_t *buf, size_t len);

/* ---------------------------------------------------------------- lag in time (lag.c) */

enum { REPL_LAG_WRITE, REPL_LAG_FLUSH, REPL_LAG_APPLY, REPL_LAG_KINDS };
#define REPL_LAG_SAMPLES 128

/* A sender's (end LSN, time sent) samples and the lags they gave; zeroed to start. */
typedef struct repl_lag {
	struct repl_lag_sample {
		wr_lsn lsn;
		uint64_t ns; /* wr_now_ns() */
	} samples[REPL_LAG_SAMPLES];
	uint64_t recorded;               /* samples taken, ever (the ring's write count) */
	uint64_t passed[REPL_LAG_KINDS]; /* samples each kind of position has passed */
	uint64_t lag_ns[REPL_LAG_KINDS];
} repl_lag;
/* WAL up to @end was sent at @now_ns. */
void repl_lag_sent(repl_lag *l, wr_lsn end, uint64_t now_ns);
/* The standby confirmed @pos for @kind (REPL_LAG_*) at @now_ns, of the @sent
 * sent so far: updates l->lag_ns[kind]. */
void repl_lag_confirmed(repl_lag *l, int kind, wr_lsn pos, wr_lsn sent, uint64_t now_ns);

/* ---------------------------------------------------------------- the standby's client steps */

/*
 * Whether an error of the standby's client steps (connect, authenticate,
 * START or BASE_BACKUP, stream) is one that retrying cannot cure: the
 * primary refused this standby for good (a wrong password, another system,
 * a timeline or a start it cannot serve, a replication slot missing or
 * invalidated, WAL it removed, a primary that is a standby itself) or it
 * does not speak this protocol.  The network, a primary starting or
 * stopping, and its limits (too many standbys, a slot still held) are
 * transient.  The primary's refusals choose their codes for this.
 */
bool repl_error_permanent(int code);

/*
 * Connects to @addr and authenticates with @password (checks the primary's
 * proof too), with TLS as @ssl says and the primary asks; NULL: sslmode
 * prefer without certificates.  Close the connection with repl_close.
 */
int repl_client_connect_tls(const char *addr, const char *password, const repl_ssl_conf *ssl,
                            int *fd_out);
int repl_client_connect(const char *addr, const char *password, int *fd_out);
/* Sends START and waits for STREAMING: the primary's timeline and flush LSN. */
int repl_client_start(int fd, uint64_t sysid, uint32_t timeline, wr_lsn start, const char *app,
                      const char *slot, wr_lsn *primary_flush);
/*
 * START as a standby that can follow a new timeline: the primary may send
 * its timeline's history file first (a standby of its parent timeline whose
 * WAL ends before the branch), kept in @waldir durably before this returns;
 * *stream_tli is the timeline then streamed.
 */
int repl_client_follow(int fd, uint64_t sysid, uint32_t timeline, wr_lsn start, const char *app,
                       const char *slot, const char *waldir, wr_lsn *primary_flush,
                       uint32_t *stream_tli);

/* Receiving into a WAL directory: everything but the socket. */
typedef struct repl_stream {
	const char *waldir;
	uint64_t seg_size;
	wr_lsn written, flushed, applied, primary_flush; /* applied: reported in FEEDBACK */
	uint64_t last_msg_us;
	/* Called after each turn of the stream (a message, or a second, or a few
	 * ms while replay is behind): publishes `flushed`, sets `applied`;
	 * returning false ends repl_client_stream with WALRUS_OK. */
	bool (*progress)(struct repl_stream *st, void *arg);
	void *arg;
	int seg_fd;       /* -1: none open */
	wr_lsn seg_start; /* of seg_fd's segment */
	uint8_t *buf;     /* REPL_MAX_PAYLOAD bytes, allocated by repl_client_stream */
} repl_stream;
/* Initialises @st to receive from @start into @waldir. */
void repl_stream_init(repl_stream *st, const char *waldir, uint64_t seg_size, wr_lsn start);
/*
 * Receives WAL messages, writes each at its place in its segment (creating
 * a missing one zero-filled), fdatasyncs before `flushed` advances, and
 * answers with FEEDBACK after each sync, every second and when asked.
 * Returns when progress() says stop (WALRUS_OK), or with the error that
 * ended the stream (the primary's ERROR, a broken connection, a protocol
 * error).  Write and sync errors PANIC.
 */
int repl_client_stream(int fd, repl_stream *st);
void repl_stream_close(repl_stream *st);

/* REPL_AUTH_TIMEOUT_MS; with the test hooks, WALRUS_REPL_AUTH_TIMEOUT_MS in the
 * environment shortens it (the auth timeout test need not wait 10 s). */
uint64_t repl_auth_timeout_ms(void);
/* The WAL format a sender announces in AUTH_OK: WAL_FORMAT and its first
 * walrus; with the test hooks, WALRUS_TEST_ANNOUNCE_WAL_FORMAT=N:VERSION in
 * the environment announces another (a primary newer than its standby). */
void repl_announced_format(uint32_t *format, char needs[WAL_NEEDS_LEN]);

#endif /* WALRUS_REPL_INT_H */
