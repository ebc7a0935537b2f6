/*
 * proto.c - the replication protocol's messages on the wire: strict
 * encoding and decoding (every length checked before a byte is used: the
 * decoder faces unauthenticated peers and is fuzzed, tests/fuzz/fuzz_repl.c),
 * socket I/O with timeouts (through TLS when the connection has it,
 * tls.c), addresses, and the handshake's MACs.
 */
#include "repl/repl_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

/* Fixed payload sizes; 0 for the variable ones (CHALLENGE, WAL, ERROR, FILE, DATA). */
static const uint32_t fixed_len[REPL_MSG_NTYPES] = {
    [REPL_MSG_AUTH] = REPL_NONCE_LEN + WR_SHA256_LEN,
    [REPL_MSG_AUTH_OK] = WR_SHA256_LEN + 4 + WAL_NEEDS_LEN,
    [REPL_MSG_START] = 8 + 4 + 8 + 2 * REPL_NAME_LEN,
    [REPL_MSG_STREAMING] = 4 + 8,
    [REPL_MSG_KEEPALIVE] = 8 + 8 + 1,
    [REPL_MSG_FEEDBACK] = 4 * 8,
    [REPL_MSG_BASE_BACKUP] = 1,
    [REPL_MSG_BACKUP_BEGIN] = 8 + 4 + 4 * 8 + 8,
    [REPL_MSG_FILE_END] = 8 + 4,
    [REPL_MSG_BACKUP_END] = 8,
};

static const char *const msg_names[REPL_MSG_NTYPES] = {
    [REPL_MSG_CHALLENGE] = "CHALLENGE",
    [REPL_MSG_AUTH] = "AUTH",
    [REPL_MSG_AUTH_OK] = "AUTH_OK",
    [REPL_MSG_START] = "START",
    [REPL_MSG_STREAMING] = "STREAMING",
    [REPL_MSG_WAL] = "WAL",
    [REPL_MSG_KEEPALIVE] = "KEEPALIVE",
    [REPL_MSG_FEEDBACK] = "FEEDBACK",
    [REPL_MSG_ERROR] = "ERROR",
    [REPL_MSG_BASE_BACKUP] = "BASE_BACKUP",
    [REPL_MSG_BACKUP_BEGIN] = "BACKUP_BEGIN",
    [REPL_MSG_FILE] = "FILE",
    [REPL_MSG_DATA] = "DATA",
    [REPL_MSG_FILE_END] = "FILE_END",
    [REPL_MSG_BACKUP_END] = "BACKUP_END",
};

const char *repl_msg_name(int type)
{
	return type > 0 && type < REPL_MSG_NTYPES ? msg_names[type] : "unknown";
}

/* ---------------------------------------------------------------- little-endian fields */

typedef struct rd {
	const uint8_t *p;
	uint32_t left;
} rd;

static uint64_t get_le(rd *r, int n)
{
	uint64_t v = 0;
	for (int i = 0; i < n; i++)
		v |= (uint64_t)r->p[i] << (8 * i);
	r->p += n;
	r->left -= (uint32_t)n;
	return v;
}

static void get_bytes(rd *r, void *out, uint32_t n)
{
	memcpy(out, r->p, n);
	r->p += n;
	r->left -= n;
}

static uint8_t *put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
	return p + n;
}

static uint8_t *put_bytes(uint8_t *p, const void *b, size_t n)
{
	memcpy(p, b, n);
	return p + n;
}

/* A name field: terminated inside its 64 bytes, or the message is bad. */
static bool get_name(rd *r, char out[REPL_NAME_LEN])
{
	get_bytes(r, out, REPL_NAME_LEN);
	return memchr(out, '\0', REPL_NAME_LEN) != NULL;
}

/* ---------------------------------------------------------------- base backup paths */

static bool all_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'A' && s[i] <= 'F')))
			return false;
	return true;
}

/* wal/NAME: a segment (16 hex digits) or a history file (8 hex digits + ".history"). */
static bool wal_name_ok(const char *name, size_t n)
{
	if (n == 16 && all_hex(name, 16))
		return true;
	return n == 16 && all_hex(name, 8) && memcmp(name + 8, ".history", 8) == 0;
}

static bool component_ok(const char *c, size_t n)
{
	if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)c[i] < 0x20 || c[i] == 0x7f)
			return false;
	return true;
}

static bool backup_path_ok(const char *path, size_t len)
{
	if (len == 0 || len > REPL_PATH_MAX || memchr(path, '\0', len) != NULL)
		return false;
	size_t ncomp = 0, first_len = 0;
	const char *last = path;
	size_t last_len = 0;
	for (size_t i = 0; i <= len; ncomp++) {
		const char *c = path + i;
		const char *slash = memchr(c, '/', len - i);
		size_t n = slash != NULL ? (size_t)(slash - c) : len - i;
		if (!component_ok(c, n))
			return false; /* also a leading '/', "a//b" and a trailing '/' */
		if (ncomp == 0)
			first_len = n;
		last = c;
		last_len = n;
		i += n + 1;
	}
	if (ncomp == 1)
		return (len == strlen(REPL_BB_VERSION_FILE) &&
		        memcmp(path, REPL_BB_VERSION_FILE, len) == 0) ||
		       (len == strlen(REPL_BB_CONF_FILE) &&
		        memcmp(path, REPL_BB_CONF_FILE, len) == 0) ||
		       (len == strlen(REPL_BB_CONTROL_FILE) &&
		        memcmp(path, REPL_BB_CONTROL_FILE, len) == 0);
	if (first_len == 4 && memcmp(path, "base", 4) == 0)
		return true;
	return first_len == 3 && memcmp(path, "wal", 3) == 0 && ncomp == 2 &&
	       wal_name_ok(last, last_len);
}

int repl_check_backup_path(const char *path, size_t len)
{
	if (backup_path_ok(path, len))
		return WALRUS_OK;
	char shown[REPL_PATH_MAX + 1];
	size_t n = WR_MIN(len, (size_t)REPL_PATH_MAX);
	for (size_t i = 0; i < n; i++) {
		shown[i] = path[i];
		if ((unsigned char)path[i] < 0x20 || path[i] == 0x7f)
			shown[i] = '?'; /* it goes into messages and logs */
	}
	shown[n] = '\0';
	return wr_error(WALRUS_EPROTO,
	                "the primary sent a file path a base backup may not hold: \"%s\"%s "
	                "(%zu bytes)",
	                shown, len > n ? "..." : "", len);
}

/* ---------------------------------------------------------------- decoding */

int repl_decode_header(const uint8_t h[REPL_HEADER_LEN], uint8_t *type, uint32_t *len)
{
	rd r = {h + 1, 4};
	*type = h[0];
	*len = (uint32_t)get_le(&r, 4);
	if (*type == 0 || *type >= REPL_MSG_NTYPES)
		return wr_error(WALRUS_EPROTO, "unknown replication message type %u", *type);
	if (*len > REPL_MAX_PAYLOAD)
		return wr_error(WALRUS_EPROTO,
		                "replication message %s of %u bytes is over the limit of %u",
		                repl_msg_name(*type), *len, REPL_MAX_PAYLOAD);
	if (fixed_len[*type] != 0 && *len != fixed_len[*type])
		return wr_error(WALRUS_EPROTO, "replication message %s has %u bytes instead of %u",
		                repl_msg_name(*type), *len, fixed_len[*type]);
	return WALRUS_OK;
}

static int decode_backup_variable(uint8_t type, rd *r, repl_msg *m)
{
	if (type == REPL_MSG_FILE) {
		int rc = repl_check_backup_path((const char *)r->p, r->left);
		if (rc != WALRUS_OK)
			return rc;
		uint32_t n = r->left;
		get_bytes(r, m->u.file.path, n);
		m->u.file.path[n] = '\0';
		return WALRUS_OK;
	}
	/* DATA */
	if (r->left == 0 || r->left > REPL_WAL_CHUNK)
		return wr_error(WALRUS_EPROTO, "replication message DATA of %u bytes (1 to %u)",
		                r->left, REPL_WAL_CHUNK);
	m->u.data.data = r->p;
	m->u.data.len = r->left;
	return WALRUS_OK;
}

static int decode_variable(uint8_t type, rd *r, repl_msg *m)
{
	if (type == REPL_MSG_FILE || type == REPL_MSG_DATA)
		return decode_backup_variable(type, r, m);
	if (type == REPL_MSG_WAL) {
		if (r->left <= REPL_WAL_HEADER)
			return wr_error(WALRUS_EPROTO,
			                "replication message WAL of %u bytes is too short",
			                r->left);
		m->u.wal.start_lsn = get_le(r, 8);
		m->u.wal.primary_flush = get_le(r, 8);
		m->u.wal.send_time_us = get_le(r, 8);
		m->u.wal.data = r->p;
		m->u.wal.len = r->left;
		if (m->u.wal.start_lsn + m->u.wal.len < m->u.wal.start_lsn)
			return wr_error(WALRUS_EPROTO,
			                "replication message WAL past the end of LSNs");
		return WALRUS_OK;
	}
	/* ERROR: a code and a text, cut at the first NUL or at the limit. */
	if (r->left < 4)
		return wr_error(WALRUS_EPROTO, "replication message ERROR of %u bytes is too short",
		                r->left);
	m->u.error.code = (int32_t)(uint32_t)get_le(r, 4);
	uint32_t n = WR_MIN(r->left, (uint32_t)REPL_ERROR_TEXT_MAX - 1);
	get_bytes(r, m->u.error.text, n);
	m->u.error.text[n] = '\0';
	for (uint32_t i = 0; i < n; i++)
		if ((unsigned char)m->u.error.text[i] < 0x20 && m->u.error.text[i] != '\0')
			m->u.error.text[i] = '?'; /* it goes into our log */
	return WALRUS_OK;
}

/* Version 2's 40 bytes, or version 3's 64 (a salt, iterations, flags more). */
static int decode_challenge(rd *r, repl_msg *m)
{
	uint32_t len = r->left;
	if (len != REPL_CHALLENGE_V2 && len != REPL_CHALLENGE_LEN)
		return wr_error(WALRUS_EPROTO, "replication message CHALLENGE has %u bytes", len);
	m->u.challenge.magic = (uint32_t)get_le(r, 4);
	m->u.challenge.version = (uint32_t)get_le(r, 4);
	get_bytes(r, m->u.challenge.nonce, REPL_NONCE_LEN);
	if (m->u.challenge.magic != REPL_MAGIC)
		return wr_error(WALRUS_EPROTO, "the peer does not speak walrus replication "
		                               "(bad magic)");
	if ((len == REPL_CHALLENGE_LEN) != (m->u.challenge.version >= REPL_VERSION_KDF))
		return wr_error(WALRUS_EPROTO,
		                "replication message CHALLENGE of version %u has %u bytes",
		                m->u.challenge.version, len);
	if (len == REPL_CHALLENGE_V2)
		return WALRUS_OK;
	get_bytes(r, m->u.challenge.salt, REPL_SALT_LEN);
	m->u.challenge.iterations = (uint32_t)get_le(r, 4);
	m->u.challenge.flags = (uint32_t)get_le(r, 4);
	if (m->u.challenge.flags & ~REPL_CH_TLS)
		return wr_error(WALRUS_EPROTO, "replication message CHALLENGE has unknown flags");
	return WALRUS_OK;
}

static int decode_backup_begin(rd *r, repl_msg *m)
{
	m->u.backup_begin.sysid = get_le(r, 8);
	m->u.backup_begin.timeline = (uint32_t)get_le(r, 4);
	m->u.backup_begin.wal_seg_size = get_le(r, 8);
	m->u.backup_begin.start_lsn = get_le(r, 8);
	m->u.backup_begin.checkpoint_lsn = get_le(r, 8);
	m->u.backup_begin.total_bytes = get_le(r, 8);
	uint64_t seg = m->u.backup_begin.wal_seg_size;
	if (seg < WAL_PAGE_SIZE || (seg & (seg - 1)) != 0 || m->u.backup_begin.timeline == 0 ||
	    m->u.backup_begin.start_lsn == 0 ||
	    m->u.backup_begin.start_lsn > m->u.backup_begin.checkpoint_lsn)
		return wr_error(WALRUS_EPROTO, "replication message BACKUP_BEGIN is inconsistent");
	return WALRUS_OK;
}

int repl_decode(uint8_t type, const uint8_t *p, uint32_t len, repl_msg *m)
{
	uint8_t h[REPL_HEADER_LEN] = {type};
	uint32_t hlen;
	put_le(h + 1, len, 4);
	int rc = repl_decode_header(h, &m->type, &hlen);
	if (rc != WALRUS_OK)
		return rc;
	rd r = {p, len};
	switch (type) {
	case REPL_MSG_CHALLENGE:
		return decode_challenge(&r, m);
	case REPL_MSG_AUTH:
		get_bytes(&r, m->u.auth.nonce, REPL_NONCE_LEN);
		get_bytes(&r, m->u.auth.mac, WR_SHA256_LEN);
		return WALRUS_OK;
	case REPL_MSG_AUTH_OK:
		get_bytes(&r, m->u.auth_ok.mac, WR_SHA256_LEN);
		m->u.auth_ok.wal_format = (uint32_t)get_le(&r, 4);
		get_bytes(&r, m->u.auth_ok.needs_walrus, WAL_NEEDS_LEN);
		if (!wal_walrus_version_ok(m->u.auth_ok.needs_walrus)) /* it goes into our log */
			return wr_error(WALRUS_EPROTO,
			                "replication message AUTH_OK has a bad walrus version");
		return WALRUS_OK;
	case REPL_MSG_START:
		m->u.start.sysid = get_le(&r, 8);
		m->u.start.timeline = (uint32_t)get_le(&r, 4);
		m->u.start.start_lsn = get_le(&r, 8);
		if (!get_name(&r, m->u.start.app) || !get_name(&r, m->u.start.slot))
			return wr_error(WALRUS_EPROTO,
			                "replication message START has an unterminated "
			                "name");
		return WALRUS_OK;
	case REPL_MSG_STREAMING:
		m->u.streaming.timeline = (uint32_t)get_le(&r, 4);
		m->u.streaming.flush_lsn = get_le(&r, 8);
		return WALRUS_OK;
	case REPL_MSG_KEEPALIVE:
		m->u.keepalive.primary_flush = get_le(&r, 8);
		m->u.keepalive.send_time_us = get_le(&r, 8);
		m->u.keepalive.reply_requested = (uint8_t)get_le(&r, 1);
		if (m->u.keepalive.reply_requested > 1)
			return wr_error(WALRUS_EPROTO,
			                "replication message KEEPALIVE has a bad flag");
		return WALRUS_OK;
	case REPL_MSG_FEEDBACK:
		m->u.feedback.written = get_le(&r, 8);
		m->u.feedback.flushed = get_le(&r, 8);
		m->u.feedback.applied = get_le(&r, 8);
		m->u.feedback.time_us = get_le(&r, 8);
		return WALRUS_OK;
	case REPL_MSG_BASE_BACKUP:
		m->u.base_backup.flags = (uint8_t)get_le(&r, 1);
		if (m->u.base_backup.flags & ~REPL_BB_FAST)
			return wr_error(WALRUS_EPROTO,
			                "replication message BASE_BACKUP has unknown flags");
		return WALRUS_OK;
	case REPL_MSG_BACKUP_BEGIN:
		return decode_backup_begin(&r, m);
	case REPL_MSG_FILE_END:
		m->u.file_end.bytes = get_le(&r, 8);
		m->u.file_end.crc = (uint32_t)get_le(&r, 4);
		return WALRUS_OK;
	case REPL_MSG_BACKUP_END:
		m->u.backup_end.end_lsn = get_le(&r, 8);
		return WALRUS_OK;
	default:
		return decode_variable(type, &r, m);
	}
}

int repl_decode_buf(const uint8_t *buf, size_t n, repl_msg *m, size_t *used)
{
	uint8_t type;
	uint32_t len;
	if (n < REPL_HEADER_LEN)
		return WALRUS_ENOTFOUND;
	int rc = repl_decode_header(buf, &type, &len);
	if (rc != WALRUS_OK)
		return rc;
	if (n - REPL_HEADER_LEN < len)
		return WALRUS_ENOTFOUND;
	rc = repl_decode(type, buf + REPL_HEADER_LEN, len, m);
	if (rc == WALRUS_OK)
		*used = REPL_HEADER_LEN + (size_t)len;
	return rc;
}

/* ---------------------------------------------------------------- encoding */

static size_t payload_len(const repl_msg *m)
{
	if (m->type == 0 || m->type >= REPL_MSG_NTYPES)
		return SIZE_MAX;
	if (m->type == REPL_MSG_WAL)
		return REPL_WAL_HEADER + (size_t)m->u.wal.len;
	if (m->type == REPL_MSG_CHALLENGE)
		return m->u.challenge.version >= REPL_VERSION_KDF ? REPL_CHALLENGE_LEN
		                                                  : REPL_CHALLENGE_V2;
	if (m->type == REPL_MSG_ERROR)
		return 4 + strnlen(m->u.error.text, REPL_ERROR_TEXT_MAX - 1);
	if (m->type == REPL_MSG_FILE)
		return strnlen(m->u.file.path, REPL_PATH_MAX);
	if (m->type == REPL_MSG_DATA)
		return m->u.data.len;
	return fixed_len[m->type];
}

static void encode_backup_payload(const repl_msg *m, uint8_t *p)
{
	switch (m->type) {
	case REPL_MSG_BASE_BACKUP:
		put_le(p, m->u.base_backup.flags, 1);
		break;
	case REPL_MSG_BACKUP_BEGIN:
		p = put_le(p, m->u.backup_begin.sysid, 8);
		p = put_le(p, m->u.backup_begin.timeline, 4);
		p = put_le(p, m->u.backup_begin.wal_seg_size, 8);
		p = put_le(p, m->u.backup_begin.start_lsn, 8);
		p = put_le(p, m->u.backup_begin.checkpoint_lsn, 8);
		put_le(p, m->u.backup_begin.total_bytes, 8);
		break;
	case REPL_MSG_FILE:
		put_bytes(p, m->u.file.path, strnlen(m->u.file.path, REPL_PATH_MAX));
		break;
	case REPL_MSG_DATA:
		if (m->u.data.len > 0)
			put_bytes(p, m->u.data.data, m->u.data.len);
		break;
	case REPL_MSG_FILE_END:
		p = put_le(p, m->u.file_end.bytes, 8);
		put_le(p, m->u.file_end.crc, 4);
		break;
	case REPL_MSG_BACKUP_END:
		put_le(p, m->u.backup_end.end_lsn, 8);
		break;
	default:
		break;
	}
}

static void encode_payload(const repl_msg *m, uint8_t *p)
{
	switch (m->type) {
	case REPL_MSG_CHALLENGE:
		p = put_le(p, m->u.challenge.magic, 4);
		p = put_le(p, m->u.challenge.version, 4);
		p = put_bytes(p, m->u.challenge.nonce, REPL_NONCE_LEN);
		if (m->u.challenge.version < REPL_VERSION_KDF)
			break;
		p = put_bytes(p, m->u.challenge.salt, REPL_SALT_LEN);
		p = put_le(p, m->u.challenge.iterations, 4);
		put_le(p, m->u.challenge.flags, 4);
		break;
	case REPL_MSG_AUTH:
		p = put_bytes(p, m->u.auth.nonce, REPL_NONCE_LEN);
		put_bytes(p, m->u.auth.mac, WR_SHA256_LEN);
		break;
	case REPL_MSG_AUTH_OK: {
		char needs[WAL_NEEDS_LEN] = {0};
		memcpy(needs, m->u.auth_ok.needs_walrus,
		       strnlen(m->u.auth_ok.needs_walrus, WAL_NEEDS_LEN - 1));
		p = put_bytes(p, m->u.auth_ok.mac, WR_SHA256_LEN);
		p = put_le(p, m->u.auth_ok.wal_format, 4);
		put_bytes(p, needs, WAL_NEEDS_LEN);
		break;
	}
	case REPL_MSG_START: {
		char app[REPL_NAME_LEN] = {0}, slot[REPL_NAME_LEN] = {0};
		memcpy(app, m->u.start.app, strnlen(m->u.start.app, REPL_NAME_LEN - 1));
		memcpy(slot, m->u.start.slot, strnlen(m->u.start.slot, REPL_NAME_LEN - 1));
		p = put_le(p, m->u.start.sysid, 8);
		p = put_le(p, m->u.start.timeline, 4);
		p = put_le(p, m->u.start.start_lsn, 8);
		p = put_bytes(p, app, REPL_NAME_LEN);
		put_bytes(p, slot, REPL_NAME_LEN);
		break;
	}
	case REPL_MSG_STREAMING:
		p = put_le(p, m->u.streaming.timeline, 4);
		put_le(p, m->u.streaming.flush_lsn, 8);
		break;
	case REPL_MSG_WAL:
		p = put_le(p, m->u.wal.start_lsn, 8);
		p = put_le(p, m->u.wal.primary_flush, 8);
		p = put_le(p, m->u.wal.send_time_us, 8);
		if (m->u.wal.len > 0)
			put_bytes(p, m->u.wal.data, m->u.wal.len);
		break;
	case REPL_MSG_KEEPALIVE:
		p = put_le(p, m->u.keepalive.primary_flush, 8);
		p = put_le(p, m->u.keepalive.send_time_us, 8);
		put_le(p, m->u.keepalive.reply_requested, 1);
		break;
	case REPL_MSG_FEEDBACK:
		p = put_le(p, m->u.feedback.written, 8);
		p = put_le(p, m->u.feedback.flushed, 8);
		p = put_le(p, m->u.feedback.applied, 8);
		put_le(p, m->u.feedback.time_us, 8);
		break;
	case REPL_MSG_ERROR:
		p = put_le(p, (uint32_t)m->u.error.code, 4);
		put_bytes(p, m->u.error.text, strnlen(m->u.error.text, REPL_ERROR_TEXT_MAX - 1));
		break;
	default:
		encode_backup_payload(m, p);
		break;
	}
}

size_t repl_encode(const repl_msg *m, uint8_t *out, size_t cap)
{
	size_t len = payload_len(m);
	if (len > REPL_MAX_PAYLOAD || cap < REPL_HEADER_LEN || cap - REPL_HEADER_LEN < len)
		return 0;
	out[0] = m->type;
	put_le(out + 1, len, 4);
	encode_payload(m, out + REPL_HEADER_LEN);
	return REPL_HEADER_LEN + len;
}

void repl_encode_wal_header(uint8_t *out, wr_lsn start, wr_lsn primary_flush, uint64_t time_us,
                            uint32_t len)
{
	out[0] = REPL_MSG_WAL;
	uint8_t *p = put_le(out + 1, (uint64_t)REPL_WAL_HEADER + len, 4);
	p = put_le(p, start, 8);
	p = put_le(p, primary_flush, 8);
	put_le(p, time_us, 8);
}

void repl_encode_data_header(uint8_t *out, uint32_t len)
{
	out[0] = REPL_MSG_DATA;
	put_le(out + 1, len, 4);
}

/* ---------------------------------------------------------------- socket I/O */

int repl_set_timeout(int fd, uint64_t ms)
{
	struct timeval tv = {.tv_sec = (time_t)(ms / 1000),
	                     .tv_usec = (suseconds_t)(ms % 1000) * 1000};
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0)
		return wr_error(WALRUS_EIO, "could not set a socket timeout: %m");
	return WALRUS_OK;
}

/* Why a read or write failed: timed out, the system's errno, or TLS's reason. */
static const char *io_failure(int fd)
{
	if (errno == EAGAIN)
		return "timed out";
	if (repl_is_tls(fd) && errno == EPROTO)
		return walrus_errmsg(); /* wr_tls_* recorded libssl's reason */
	return strerror(errno);
}

int repl_send(int fd, const repl_msg *m)
{
	size_t cap = REPL_HEADER_LEN + payload_len(m);
	if (cap > REPL_HEADER_LEN + REPL_MAX_PAYLOAD)
		return wr_error(WALRUS_EINTERNAL, "replication message %s too large to send",
		                repl_msg_name(m->type));
	uint8_t small[1024], *buf = cap <= sizeof(small) ? small : malloc(cap);
	if (buf == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory sending a replication message");
	size_t n = repl_encode(m, buf, cap);
	int rc = WALRUS_OK;
	if (repl_io_write_full(fd, buf, n) != 0) {
		char why[512];
		if (!repl_tls_alert(fd, why, sizeof(why)))
			wr_snprintf(why, sizeof(why), "%s", io_failure(fd));
		rc = wr_error(WALRUS_EIO, "could not send replication message %s: %s",
		              repl_msg_name(m->type), why);
	}
	if (buf != small)
		free(buf);
	return rc;
}

static int recv_exact(int fd, void *buf, size_t len, const char *what)
{
	ssize_t n = repl_io_read_full(fd, buf, len);
	if (n == (ssize_t)len)
		return WALRUS_OK;
	if (n >= 0)
		return wr_error(WALRUS_EIO, "the peer closed the replication connection%s%s",
		                n > 0 || what[0] ? " in the middle of " : "", what);
	char why[512];
	wr_snprintf(why, sizeof(why), "%s", io_failure(fd));
	return wr_error(WALRUS_EIO, "could not receive %s on the replication connection: %s",
	                what[0] ? what : "a message", why);
}

int repl_recv(int fd, uint8_t *buf, repl_msg *m)
{
	uint8_t h[REPL_HEADER_LEN], type;
	uint32_t len;
	int rc = recv_exact(fd, h, sizeof(h), "");
	if (rc == WALRUS_OK)
		rc = repl_decode_header(h, &type, &len);
	if (rc == WALRUS_OK)
		rc = recv_exact(fd, buf, len, repl_msg_name(type));
	if (rc == WALRUS_OK)
		rc = repl_decode(type, buf, len, m);
	return rc;
}

int repl_error_from(const repl_msg *m)
{
	int code = m->u.error.code;
	if (code >= 0 || code < -100)
		code = WALRUS_EPROTO;
	return wr_error(code, "%s", m->u.error.text);
}

/* ---------------------------------------------------------------- addresses */

static int unix_addr(const char *path, struct sockaddr_un *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa->sun_path))
		return wr_error(WALRUS_EINVAL,
		                "replication socket path \"%s\" is longer than %zu bytes", path,
		                sizeof(sa->sun_path) - 1);
	memcpy(sa->sun_path, path, strlen(path));
	return WALRUS_OK;
}

/* "HOST:PORT" into its parts ("[::1]:5433" for IPv6). */
static int split_host_port(const char *addr, char *host, size_t hlen, char *port, size_t plen)
{
	const char *colon = strrchr(addr, ':');
	const char *h = addr;
	size_t n = colon ? (size_t)(colon - addr) : 0;
	if (colon != NULL && addr[0] == '[' && n >= 2 && addr[n - 1] == ']') {
		h++;
		n -= 2;
	}
	char *end;
	long p = colon ? strtol(colon + 1, &end, 10) : -1;
	if (colon == NULL || n == 0 || n >= hlen || colon[1] == '\0' || *end != '\0' || p < 0 ||
	    p > 65535 || strlen(colon + 1) >= plen)
		return wr_error(WALRUS_EINVAL,
		                "bad replication address \"%.200s\" (expected HOST:PORT or an "
		                "absolute socket path)",
		                addr);
	memcpy(host, h, n);
	host[n] = '\0';
	snprintf(port, plen, "%s", colon + 1);
	return WALRUS_OK;
}

int repl_check_address(const char *addr)
{
	char host[256], port[16];
	struct sockaddr_un sa;
	if (addr[0] == '/')
		return unix_addr(addr, &sa);
	return split_host_port(addr, host, sizeof(host), port, sizeof(port));
}

static int resolve(const char *addr, bool passive, struct addrinfo **res)
{
	char host[256], port[16];
	int rc = split_host_port(addr, host, sizeof(host), port, sizeof(port));
	if (rc != WALRUS_OK)
		return rc;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
	                         .ai_flags = passive ? AI_PASSIVE : 0,
	                         .ai_family = AF_UNSPEC};
	int g = getaddrinfo(host, port, &hints, res);
	/* Connecting, a name that does not resolve now may later (DNS): EIO, transient. */
	if (g != 0)
		return wr_error(passive ? WALRUS_EINVAL : WALRUS_EIO,
		                "could not resolve replication address \"%s\": %s", addr,
		                gai_strerror(g));
	return WALRUS_OK;
}

static int listen_unix(const char *path, int *fd_out)
{
	struct sockaddr_un sa;
	int rc = unix_addr(path, &sa);
	if (rc != WALRUS_OK)
		return rc;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return wr_error(WALRUS_EIO, "could not create a socket: %m");
	/* A socket file left by an instance that died: only ours to replace if
	 * nothing answers on it. */
	int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		close(probe);
		close(fd);
		return wr_error(WALRUS_EBUSY, "something already listens on \"%s\"", path);
	}
	if (probe >= 0)
		close(probe);
	if (unlink(path) != 0 && errno != ENOENT) {
		close(fd);
		return wr_error(WALRUS_EIO, "could not remove the old socket \"%s\": %m", path);
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 16) != 0) {
		rc = wr_error(wr_errno_code(errno), "could not listen on \"%s\": %m", path);
		close(fd);
		return rc;
	}
	*fd_out = fd;
	return WALRUS_OK;
}

int repl_listen(const char *addr, int *fd_out)
{
	if (addr[0] == '/')
		return listen_unix(addr, fd_out);
	struct addrinfo *res;
	int rc = resolve(addr, true, &res);
	if (rc != WALRUS_OK)
		return rc;
	rc = wr_error(WALRUS_EIO, "could not listen on \"%s\": no address", addr);
	for (struct addrinfo *a = res; a != NULL; a = a->ai_next) {
		int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		int one = 1;
		if (fd < 0)
			continue;
		if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
		    bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 16) == 0) {
			*fd_out = fd;
			freeaddrinfo(res);
			return WALRUS_OK;
		}
		rc = wr_error(wr_errno_code(errno), "could not listen on \"%s\": %m", addr);
		close(fd);
	}
	freeaddrinfo(res);
	return rc;
}

static void describe_peer(const struct sockaddr_storage *ss, char *peer, size_t len)
{
	char host[INET6_ADDRSTRLEN] = "?";
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		snprintf(peer, len, "%s:%u", host, (unsigned)ntohs(in->sin_port));
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		snprintf(peer, len, "[%s]:%u", host, (unsigned)ntohs(in6->sin6_port));
	} else {
		snprintf(peer, len, "unix socket");
	}
}

int repl_accept(int lfd, int *fd_out, char *peer, size_t len)
{
	struct sockaddr_storage ss;
	for (;;) {
		socklen_t sl = sizeof(ss);
		int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
		if (fd >= 0) {
			int one = 1;
			if (ss.ss_family != AF_UNIX)
				(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			describe_peer(&ss, peer, len);
			repl_forget(fd);
			*fd_out = fd;
			return WALRUS_OK;
		}
		if (errno == EINTR || errno == ECONNABORTED)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return WALRUS_ENOTFOUND;
		return wr_error(wr_errno_code(errno),
		                "could not accept a replication connection: %m");
	}
}

int repl_connect(const char *addr, int *fd_out)
{
	if (addr[0] == '/') {
		struct sockaddr_un sa;
		int rc = unix_addr(addr, &sa);
		if (rc != WALRUS_OK)
			return rc;
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return wr_error(WALRUS_EIO, "could not create a socket: %m");
		/* EIO whatever errno says: a socket file not there yet (ENOENT) is a
		 * primary not started yet, not a refusal (repl_error_permanent). */
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
			rc = wr_error(WALRUS_EIO, "could not connect to \"%s\": %m", addr);
			close(fd);
			return rc;
		}
		repl_forget(fd);
		*fd_out = fd;
		return WALRUS_OK;
	}
	struct addrinfo *res;
	int rc = resolve(addr, false, &res);
	if (rc != WALRUS_OK)
		return rc;
	rc = wr_error(WALRUS_EIO, "could not connect to \"%s\": no address", addr);
	for (struct addrinfo *a = res; a != NULL; a = a->ai_next) {
		int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
			int one = 1;
			(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			repl_forget(fd);
			*fd_out = fd;
			freeaddrinfo(res);
			return WALRUS_OK;
		}
		rc = wr_error(WALRUS_EIO, "could not connect to \"%s\": %m", addr);
		close(fd);
	}
	freeaddrinfo(res);
	return rc;
}

/* ---------------------------------------------------------------- the handshake's pieces */

int repl_mac(const char *password, const char *label, const uint8_t *n1, const uint8_t *n2,
             uint8_t out[WR_SHA256_LEN])
{
	struct wr_iovec_c parts[3] = {
	    {label, strlen(label)}, {n1, REPL_NONCE_LEN}, {n2, REPL_NONCE_LEN}};
	return wr_hmac_sha256(password, strlen(password), parts, 3, out);
}

int repl_auth_key(const char *password, const uint8_t salt[REPL_SALT_LEN], uint32_t iterations,
                  uint8_t key[WR_SHA256_LEN])
{
	return wr_pbkdf2_sha256(password, salt, REPL_SALT_LEN, iterations, key, WR_SHA256_LEN);
}

int repl_proof(const uint8_t key[WR_SHA256_LEN], const char *label, const repl_msg *challenge,
               const uint8_t nonce_s[REPL_NONCE_LEN], const uint8_t *binding,
               uint8_t out[WR_SHA256_LEN])
{
	uint8_t ch[REPL_HEADER_LEN + REPL_CHALLENGE_LEN];
	uint8_t tls = binding != NULL;
	size_t n = repl_encode(challenge, ch, sizeof(ch));
	if (n != sizeof(ch))
		return wr_error(WALRUS_EINTERNAL, "a CHALLENGE of version %u has no proof",
		                challenge->u.challenge.version);
	struct wr_iovec_c parts[5] = {{label, strlen(label)},
	                              {ch + REPL_HEADER_LEN, REPL_CHALLENGE_LEN},
	                              {nonce_s, REPL_NONCE_LEN},
	                              {&tls, 1},
	                              {binding, tls ? REPL_BINDING_LEN : 0}};
	return wr_hmac_sha256(key, WR_SHA256_LEN, parts, tls ? 5 : 4, out);
}

int repl_random(uint8_t *buf, size_t len)
{
	size_t got = 0;
	while (got < len) {
		ssize_t n = getrandom(buf + got, len - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return wr_error(WALRUS_EIO, "getrandom failed: %m");
		got += (size_t)n;
	}
	return WALRUS_OK;
}

uint64_t repl_auth_timeout_ms(void)
{
#ifdef WALRUS_TEST_HOOKS
	const char *s = getenv("WALRUS_REPL_AUTH_TIMEOUT_MS");
	if (s != NULL && atoi(s) > 0)
		return (uint64_t)atoi(s);
#endif
	return REPL_AUTH_TIMEOUT_MS;
}

void repl_announced_format(uint32_t *format, char needs[WAL_NEEDS_LEN])
{
	*format = WAL_FORMAT;
	wr_snprintf(needs, WAL_NEEDS_LEN, "%s", wal_format_walrus(WAL_FORMAT));
#ifdef WALRUS_TEST_HOOKS
	const char *s = getenv("WALRUS_TEST_ANNOUNCE_WAL_FORMAT");
	const char *colon = s != NULL ? strchr(s, ':') : NULL;
	if (colon != NULL && atoi(s) > 0) {
		*format = (uint32_t)atoi(s);
		wr_snprintf(needs, WAL_NEEDS_LEN, "%s", colon + 1);
	}
#endif
}

void repl_refuse(int fd, int code, const char *text)
{
	repl_msg m = {.type = REPL_MSG_ERROR};
	uint8_t buf[REPL_HEADER_LEN + REPL_ERROR_TEXT_MAX + 4];
	m.u.error.code = code;
	wr_snprintf(m.u.error.text, sizeof(m.u.error.text), "%s", text);
	size_t n = repl_encode(&m, buf, sizeof(buf));
	/* The supervisor must not wait for a peer: one try, whatever fits. */
	(void)send(fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
}
