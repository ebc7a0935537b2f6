/*
 * test_repl_proto.c - the replication protocol's framing (every message
 * type round trip; truncated, oversized, unknown and mis-sized messages
 * refused; a base backup's paths checked; both CHALLENGE versions; what
 * the handshake's proofs cover) and DIR/walrus.standby's parsing (a
 * readable file, a missing primary, an unknown key, quoting, the default
 * application name, sslmode and its files), and the senders' lag in time
 * (lag.c) on made-up samples.
 */
#include "fdcache/fdcache.h"
#include "repl/repl_int.h"
#include "testutil.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static repl_msg sample(int type)
{
	static const uint8_t wal[100] = {1, 2, 3, 4, 5};
	repl_msg m;
	memset(&m, 0, sizeof(m)); /* padding included: the round trip compares bytes */
	m.type = (uint8_t)type;
	switch (type) {
	case REPL_MSG_CHALLENGE:
		m.u.challenge.magic = REPL_MAGIC;
		m.u.challenge.version = REPL_VERSION;
		memset(m.u.challenge.nonce, 7, REPL_NONCE_LEN);
		memset(m.u.challenge.salt, 8, REPL_SALT_LEN);
		m.u.challenge.iterations = REPL_KDF_ITERATIONS;
		m.u.challenge.flags = REPL_CH_TLS;
		break;
	case REPL_MSG_AUTH:
		memset(m.u.auth.nonce, 1, REPL_NONCE_LEN);
		memset(m.u.auth.mac, 2, WR_SHA256_LEN);
		break;
	case REPL_MSG_AUTH_OK:
		memset(m.u.auth_ok.mac, 3, WR_SHA256_LEN);
		m.u.auth_ok.wal_format = WAL_FORMAT + 1;
		snprintf(m.u.auth_ok.needs_walrus, sizeof(m.u.auth_ok.needs_walrus), "10.20.30");
		break;
	case REPL_MSG_START:
		m.u.start.sysid = 0x1122334455667788ULL;
		m.u.start.timeline = 3;
		m.u.start.start_lsn = 0x1000028;
		snprintf(m.u.start.app, sizeof(m.u.start.app), "standby-1");
		snprintf(m.u.start.slot, sizeof(m.u.start.slot), "s1");
		break;
	case REPL_MSG_STREAMING:
		m.u.streaming.timeline = 2;
		m.u.streaming.flush_lsn = 0xdeadbeef;
		break;
	case REPL_MSG_WAL:
		m.u.wal.start_lsn = 0x2000000;
		m.u.wal.primary_flush = 0x3000000;
		m.u.wal.send_time_us = 42;
		m.u.wal.data = wal;
		m.u.wal.len = sizeof(wal);
		break;
	case REPL_MSG_KEEPALIVE:
		m.u.keepalive.primary_flush = 99;
		m.u.keepalive.send_time_us = 100;
		m.u.keepalive.reply_requested = 1;
		break;
	case REPL_MSG_FEEDBACK:
		m.u.feedback.written = 1;
		m.u.feedback.flushed = 2;
		m.u.feedback.applied = 3;
		m.u.feedback.time_us = 4;
		break;
	case REPL_MSG_ERROR:
		m.u.error.code = WALRUS_EPERM;
		snprintf(m.u.error.text, sizeof(m.u.error.text), "authentication failed");
		break;
	case REPL_MSG_BASE_BACKUP:
		m.u.base_backup.flags = REPL_BB_FAST;
		break;
	case REPL_MSG_BACKUP_BEGIN:
		m.u.backup_begin.sysid = 77;
		m.u.backup_begin.timeline = 2;
		m.u.backup_begin.wal_seg_size = 1 << 20;
		m.u.backup_begin.start_lsn = 0x1000028;
		m.u.backup_begin.checkpoint_lsn = 0x1000100;
		m.u.backup_begin.total_bytes = 123456;
		break;
	case REPL_MSG_FILE:
		snprintf(m.u.file.path, sizeof(m.u.file.path), "base/1/16384");
		break;
	case REPL_MSG_DATA:
		m.u.data.data = wal;
		m.u.data.len = sizeof(wal);
		break;
	case REPL_MSG_FILE_END:
		m.u.file_end.bytes = 8192;
		m.u.file_end.crc = 0xabcdef01;
		break;
	case REPL_MSG_BACKUP_END:
		m.u.backup_end.end_lsn = 0x2000000;
		break;
	default:
		break;
	}
	return m;
}

static uint8_t buf[REPL_HEADER_LEN + REPL_MAX_PAYLOAD + 16];

START_TEST(test_round_trip)
{
	for (int t = 1; t < REPL_MSG_NTYPES; t++) {
		repl_msg m = sample(t), back;
		memset(&back, 0, sizeof(back));
		size_t n = repl_encode(&m, buf, sizeof(buf)), used = 0;
		ck_assert_uint_gt(n, REPL_HEADER_LEN);
		ck_assert_int_eq(repl_decode_buf(buf, n, &back, &used), WALRUS_OK);
		ck_assert_uint_eq(used, n);
		ck_assert_int_eq(back.type, t);
		if (t == REPL_MSG_WAL) {
			ck_assert_uint_eq(back.u.wal.start_lsn, m.u.wal.start_lsn);
			ck_assert_uint_eq(back.u.wal.primary_flush, m.u.wal.primary_flush);
			ck_assert_uint_eq(back.u.wal.send_time_us, 42);
			ck_assert_uint_eq(back.u.wal.len, m.u.wal.len);
			ck_assert_mem_eq(back.u.wal.data, m.u.wal.data, m.u.wal.len);
		} else if (t == REPL_MSG_DATA) {
			ck_assert_uint_eq(back.u.data.len, m.u.data.len);
			ck_assert_mem_eq(back.u.data.data, m.u.data.data, m.u.data.len);
		} else if (t == REPL_MSG_FILE) {
			ck_assert_str_eq(back.u.file.path, m.u.file.path);
		} else {
			/* Every fixed field, and the names and text, compare whole. */
			ck_assert_mem_eq(&back.u, &m.u, sizeof(m.u));
		}
	}
}
END_TEST

START_TEST(test_truncated)
{
	for (int t = 1; t < REPL_MSG_NTYPES; t++) {
		repl_msg m = sample(t), back;
		size_t n = repl_encode(&m, buf, sizeof(buf)), used = 0;
		for (size_t cut = 0; cut < n; cut++)
			ck_assert_int_eq(repl_decode_buf(buf, cut, &back, &used), WALRUS_ENOTFOUND);
	}
}
END_TEST

START_TEST(test_oversized_and_unknown)
{
	uint8_t h[REPL_HEADER_LEN] = {REPL_MSG_WAL, 0, 0, 0, 0}, type;
	uint32_t len, big = REPL_MAX_PAYLOAD + 1;
	memcpy(h + 1, &big, 4); /* little-endian host */
	ck_assert_int_eq(repl_decode_header(h, &type, &len), WALRUS_EPROTO);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "over the limit"));
	big = REPL_MAX_PAYLOAD;
	memcpy(h + 1, &big, 4);
	ck_assert_int_eq(repl_decode_header(h, &type, &len), WALRUS_OK);
	h[0] = 0;
	ck_assert_int_eq(repl_decode_header(h, &type, &len), WALRUS_EPROTO);
	h[0] = REPL_MSG_NTYPES;
	ck_assert_int_eq(repl_decode_header(h, &type, &len), WALRUS_EPROTO);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "unknown replication message type"));
	/* A fixed-size message with another length. */
	uint8_t p[200] = {0};
	repl_msg m;
	ck_assert_int_eq(repl_decode(REPL_MSG_FEEDBACK, p, 31, &m), WALRUS_EPROTO);
	ck_assert_int_eq(repl_decode(REPL_MSG_FEEDBACK, p, 33, &m), WALRUS_EPROTO);
	ck_assert_int_eq(repl_decode(REPL_MSG_FEEDBACK, p, 32, &m), WALRUS_OK);
	/* WAL without data, ERROR without a code. */
	ck_assert_int_eq(repl_decode(REPL_MSG_WAL, p, REPL_WAL_HEADER, &m), WALRUS_EPROTO);
	ck_assert_int_eq(repl_decode(REPL_MSG_ERROR, p, 3, &m), WALRUS_EPROTO);
	/* The encoder refuses what the decoder would. */
	repl_msg w = sample(REPL_MSG_WAL);
	w.u.wal.len = REPL_MAX_PAYLOAD;
	ck_assert_uint_eq(repl_encode(&w, buf, sizeof(buf)), 0);
}
END_TEST

/* Protocol 2's CHALLENGE (40 bytes) still decodes; each length goes with its version. */
START_TEST(test_challenge_versions)
{
	repl_msg m = sample(REPL_MSG_CHALLENGE), back;
	size_t used, n = repl_encode(&m, buf, sizeof(buf));
	ck_assert_uint_eq(n, REPL_HEADER_LEN + REPL_CHALLENGE_LEN);
	m.u.challenge.version = REPL_VERSION_FORMATS;
	memset(m.u.challenge.salt, 0, REPL_SALT_LEN);
	m.u.challenge.iterations = m.u.challenge.flags = 0;
	n = repl_encode(&m, buf, sizeof(buf));
	ck_assert_uint_eq(n, REPL_HEADER_LEN + REPL_CHALLENGE_V2);
	memset(&back, 0, sizeof(back));
	ck_assert_int_eq(repl_decode_buf(buf, n, &back, &used), WALRUS_OK);
	ck_assert_mem_eq(&back.u.challenge, &m.u.challenge, sizeof(m.u.challenge));
	/* Version 3 in 40 bytes, version 2 in 64: refused. */
	buf[REPL_HEADER_LEN + 4] = REPL_VERSION_KDF;
	ck_assert_int_eq(repl_decode_buf(buf, n, &back, &used), WALRUS_EPROTO);
	m = sample(REPL_MSG_CHALLENGE);
	n = repl_encode(&m, buf, sizeof(buf));
	buf[REPL_HEADER_LEN + 4] = REPL_VERSION_FORMATS;
	ck_assert_int_eq(repl_decode_buf(buf, n, &back, &used), WALRUS_EPROTO);
	/* An unknown flag. */
	m.u.challenge.flags = 2;
	n = repl_encode(&m, buf, sizeof(buf));
	ck_assert_int_eq(repl_decode_buf(buf, n, &back, &used), WALRUS_EPROTO);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "unknown flags"));
}
END_TEST

/* A proof is good for one key, one challenge, one standby nonce and one
 * TLS session (or none): change any of them and it changes. */
START_TEST(test_proofs)
{
	repl_msg ch = sample(REPL_MSG_CHALLENGE), other;
	uint8_t key[WR_SHA256_LEN], key2[WR_SHA256_LEN], nonce[REPL_NONCE_LEN] = {9};
	uint8_t bind[REPL_BINDING_LEN] = {1}, bind2[REPL_BINDING_LEN] = {2};
	uint8_t a[WR_SHA256_LEN], b[WR_SHA256_LEN];
	ck_assert_int_eq(repl_auth_key("pw", ch.u.challenge.salt, 4096, key), WALRUS_OK);
	ck_assert_int_eq(repl_auth_key("pw", ch.u.challenge.salt, 4097, key2), WALRUS_OK);
	ck_assert(memcmp(key, key2, sizeof(key)) != 0);
	ck_assert_int_eq(repl_proof(key, "walrus-standby", &ch, nonce, bind, a), WALRUS_OK);
	ck_assert_int_eq(repl_proof(key, "walrus-standby", &ch, nonce, bind, b), WALRUS_OK);
	ck_assert_mem_eq(a, b, sizeof(a));
	ck_assert_int_eq(repl_proof(key, "walrus-standby", &ch, nonce, bind2, b), WALRUS_OK);
	ck_assert(memcmp(a, b, sizeof(a)) != 0);
	ck_assert_int_eq(repl_proof(key, "walrus-standby", &ch, nonce, NULL, b), WALRUS_OK);
	ck_assert(memcmp(a, b, sizeof(a)) != 0);
	ck_assert_int_eq(repl_proof(key, "walrus-primary", &ch, nonce, bind, b), WALRUS_OK);
	ck_assert(memcmp(a, b, sizeof(a)) != 0);
	ck_assert_int_eq(repl_proof(key2, "walrus-standby", &ch, nonce, bind, b), WALRUS_OK);
	ck_assert(memcmp(a, b, sizeof(a)) != 0);
	other = ch;
	other.u.challenge.flags = 0; /* a relay telling the standby there is no TLS */
	ck_assert_int_eq(repl_proof(key, "walrus-standby", &other, nonce, bind, b), WALRUS_OK);
	ck_assert(memcmp(a, b, sizeof(a)) != 0);
	nonce[0]++;
	ck_assert_int_eq(repl_proof(key, "walrus-standby", &ch, nonce, bind, b), WALRUS_OK);
	ck_assert(memcmp(a, b, sizeof(a)) != 0);
}
END_TEST

START_TEST(test_bad_fields)
{
	repl_msg m = sample(REPL_MSG_START), back;
	size_t n = repl_encode(&m, buf, sizeof(buf)), used;
	/* An application name without its terminator. */
	memset(buf + REPL_HEADER_LEN + 20, 'x', REPL_NAME_LEN);
	ck_assert_int_eq(repl_decode_buf(buf, n, &back, &used), WALRUS_EPROTO);
	m = sample(REPL_MSG_CHALLENGE);
	m.u.challenge.magic = 0x12345678;
	n = repl_encode(&m, buf, sizeof(buf));
	ck_assert_int_eq(repl_decode_buf(buf, n, &back, &used), WALRUS_EPROTO);
	m = sample(REPL_MSG_KEEPALIVE);
	n = repl_encode(&m, buf, sizeof(buf));
	buf[n - 1] = 2;
	ck_assert_int_eq(repl_decode_buf(buf, n, &back, &used), WALRUS_EPROTO);
	/* An ERROR's control characters do not reach the log. */
	m = sample(REPL_MSG_ERROR);
	snprintf(m.u.error.text, sizeof(m.u.error.text), "a\nb");
	n = repl_encode(&m, buf, sizeof(buf));
	ck_assert_int_eq(repl_decode_buf(buf, n, &back, &used), WALRUS_OK);
	ck_assert_str_eq(back.u.error.text, "a?b");
	/* AUTH_OK's walrus version: terminated, nothing unprintable (it goes
	 * into the standby's log). */
	m = sample(REPL_MSG_AUTH_OK);
	n = repl_encode(&m, buf, sizeof(buf));
	uint8_t *needs = buf + REPL_HEADER_LEN + WR_SHA256_LEN + 4;
	ck_assert_mem_eq(needs, "10.20.30", 9);
	memset(needs, '1', WAL_NEEDS_LEN);
	ck_assert_int_eq(repl_decode_buf(buf, n, &back, &used), WALRUS_EPROTO);
	memcpy(needs, "1.0\n", 5);
	ck_assert_int_eq(repl_decode_buf(buf, n, &back, &used), WALRUS_EPROTO);
}
END_TEST

/* A FILE message carrying @path (any bytes): what its decoding says. */
static int decode_file(const char *path, size_t len)
{
	uint8_t msg[REPL_HEADER_LEN + 1024] = {REPL_MSG_FILE};
	uint32_t l = (uint32_t)len;
	repl_msg back;
	size_t used;
	memcpy(msg + 1, &l, 4); /* little-endian host */
	memcpy(msg + REPL_HEADER_LEN, path, len);
	return repl_decode_buf(msg, REPL_HEADER_LEN + len, &back, &used);
}

START_TEST(test_backup_paths)
{
	static const char *const good[] = {"base/1/16384",        "base/x",
	                                   "WALRUS_VERSION",      "walrus.conf",
	                                   "walrus.control",      "wal/0000000001000000",
	                                   "wal/00000002.history"};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		ck_assert_msg(decode_file(good[i], strlen(good[i])) == WALRUS_OK, "%s: %s", good[i],
		              walrus_errmsg());
	static const char *const bad[] = {"../x",
	                                  "/abs",
	                                  "base/../../x",
	                                  "",
	                                  "a//b",
	                                  "base//x",
	                                  "base/./x",
	                                  "base/",
	                                  "base",
	                                  "wal/x/y",
	                                  "wal/..",
	                                  "wal/notasegment",
	                                  "wal/0000000g01000000",
	                                  "pg_hba.conf",
	                                  "walrus.pid",
	                                  "walrus.standby",
	                                  "log/walrus.log",
	                                  "base/a\nb",
	                                  "./base/x"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(decode_file(bad[i], strlen(bad[i])) == WALRUS_EPROTO, "%s accepted",
		              bad[i]);
	ck_assert_int_eq(decode_file("base/a\0b", 7), WALRUS_EPROTO); /* a NUL inside */
	char longp[REPL_PATH_MAX + 2];
	memset(longp, 'x', sizeof(longp));
	memcpy(longp, "base/", 5);
	ck_assert_int_eq(decode_file(longp, REPL_PATH_MAX), WALRUS_OK);
	ck_assert_int_eq(decode_file(longp, REPL_PATH_MAX + 1), WALRUS_EPROTO);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "may not hold"));
	/* Bad fields of the other backup messages. */
	repl_msg m = sample(REPL_MSG_BACKUP_BEGIN), back;
	m.u.backup_begin.wal_seg_size = 3 << 20; /* not a power of two */
	size_t used, n = repl_encode(&m, buf, sizeof(buf));
	ck_assert_int_eq(repl_decode_buf(buf, n, &back, &used), WALRUS_EPROTO);
	m = sample(REPL_MSG_BACKUP_BEGIN);
	m.u.backup_begin.start_lsn = m.u.backup_begin.checkpoint_lsn + 1;
	n = repl_encode(&m, buf, sizeof(buf));
	ck_assert_int_eq(repl_decode_buf(buf, n, &back, &used), WALRUS_EPROTO);
	m = sample(REPL_MSG_BASE_BACKUP);
	m.u.base_backup.flags = 2;
	n = repl_encode(&m, buf, sizeof(buf));
	ck_assert_int_eq(repl_decode_buf(buf, n, &back, &used), WALRUS_EPROTO);
	uint8_t p[REPL_WAL_CHUNK + 1] = {0};
	ck_assert_int_eq(repl_decode(REPL_MSG_DATA, p, 0, &back), WALRUS_EPROTO);
	ck_assert_int_eq(repl_decode(REPL_MSG_DATA, p, REPL_WAL_CHUNK, &back), WALRUS_OK);
	ck_assert_int_eq(repl_decode(REPL_MSG_DATA, p, REPL_WAL_CHUNK + 1, &back), WALRUS_EPROTO);
	ck_assert_int_eq(repl_decode(REPL_MSG_FILE_END, p, 11, &back), WALRUS_EPROTO);
}
END_TEST

/* ---------------------------------------------------------------- walrus.standby */

static int parse(const char *text, repl_standby_conf *c)
{
	char copy[1024];
	snprintf(copy, sizeof(copy), "%s", text);
	return repl_standby_parse("/data/standby1", "/data/standby1/walrus.standby", copy, c);
}

START_TEST(test_standby_parse)
{
	repl_standby_conf c;
	ck_assert_int_eq(
	    parse("# a standby\nprimary = db1:5433\npassword = 'it''s # secret'  # c\n", &c),
	    WALRUS_OK);
	ck_assert_str_eq(c.primary, "db1:5433");
	ck_assert_str_eq(c.password, "it's # secret");
	ck_assert_str_eq(c.application_name, "standby1"); /* the directory's name */
	ck_assert_str_eq(c.slot, "");
	ck_assert_int_eq(
	    parse("primary=/run/walrus/repl.sock\napplication_name = east\nslot = s\n", &c),
	    WALRUS_OK);
	ck_assert_str_eq(c.primary, "/run/walrus/repl.sock");
	ck_assert_str_eq(c.application_name, "east");

	ck_assert_int_eq(parse("password = x\n", &c), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "does not say which primary"));
	ck_assert_int_eq(parse("primary = h:1\nprimry = h:2\n", &c), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "line 2: unknown setting \"primry\""));
	ck_assert_int_eq(parse("primary = nohostport\n", &c), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "bad replication address"));
	ck_assert_int_eq(parse("primary = 'h:1\n", &c), WALRUS_EINVAL);
	ck_assert_int_eq(parse("primary h:1\n", &c), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "line 1"));
}
END_TEST

/* sslmode (default prefer) and its files: relative ones are the data directory's. */
START_TEST(test_standby_parse_ssl)
{
	repl_standby_conf c;
	ck_assert_int_eq(parse("primary = db1:5433\n", &c), WALRUS_OK);
	ck_assert_int_eq(c.ssl.mode, REPL_SSL_PREFER);
	ck_assert_int_eq(parse("primary = db1:5433\nsslmode = verify-full\nsslrootcert = ca.crt\n"
	                       "sslcert = /etc/sb.crt\nsslkey = sb.key\n",
	                       &c),
	                 WALRUS_OK);
	ck_assert_int_eq(c.ssl.mode, REPL_SSL_VERIFY_FULL);
	ck_assert_str_eq(c.ssl.rootcert, "/data/standby1/ca.crt");
	ck_assert_str_eq(c.ssl.cert, "/etc/sb.crt");
	ck_assert_str_eq(c.ssl.key, "/data/standby1/sb.key");
	ck_assert_int_eq(parse("primary = db1:5433\nsslmode = disable\n", &c), WALRUS_OK);
	ck_assert_int_eq(c.ssl.mode, REPL_SSL_DISABLE);

	ck_assert_int_eq(parse("primary = db1:5433\nsslmode = on\n", &c), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "bad sslmode \"on\""));
	ck_assert_int_eq(parse("primary = db1:5433\nsslmode = verify-ca\n", &c), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "needs sslrootcert"));
	ck_assert_int_eq(
	    parse("primary = /run/r.sock\nsslmode = verify-full\nsslrootcert = /ca\n", &c),
	    WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "needs primary = HOST:PORT"));
	ck_assert_int_eq(parse("primary = db1:5433\nsslcert = /c\n", &c), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "sslcert and sslkey go together"));
}
END_TEST

START_TEST(test_standby_file)
{
	char abs[PATH_MAX], path[PATH_MAX + 32];
	ck_assert_ptr_nonnull(realpath(tu_tmpdir("repl-standby"), abs));
	ck_assert_int_eq(fdc_init(50), WALRUS_OK);
	repl_standby_conf c = {0}, back;
	ck_assert_int_eq(repl_standby_read(abs, &back), WALRUS_ENOENT);
	snprintf(c.primary, sizeof(c.primary), "127.0.0.1:5433");
	snprintf(c.application_name, sizeof(c.application_name), "b");
	snprintf(c.password, sizeof(c.password), "p'w #x");
	snprintf(c.sslmode, sizeof(c.sslmode), "verify-ca");
	snprintf(c.ssl.rootcert, sizeof(c.ssl.rootcert), "/etc/walrus/ca.crt");
	ck_assert_int_eq(repl_standby_write(abs, &c), WALRUS_OK);
	ck_assert_int_eq(repl_standby_read(abs, &back), WALRUS_OK);
	ck_assert_str_eq(back.primary, c.primary);
	ck_assert_str_eq(back.password, c.password);
	ck_assert_str_eq(back.application_name, "b");
	ck_assert_int_eq(back.ssl.mode, REPL_SSL_VERIFY_CA);
	ck_assert_str_eq(back.ssl.rootcert, c.ssl.rootcert);
	/* Readable by the group: refused, naming the mode. */
	snprintf(path, sizeof(path), "%s/%s", abs, REPL_STANDBY_FILE);
	ck_assert_int_eq(chmod(path, 0640), 0);
	ck_assert_int_eq(repl_standby_read(abs, &back), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "mode 0640"));
}
END_TEST

/* lag.c: a FEEDBACK's lag is the time since the last sample it passes; a
 * kind behind what was sent is at least the age of its next sample, so a
 * stalled replay's lag grows; a kind that confirmed everything and passes
 * nothing new is idle (0); a full ring stretches its newest sample. */
START_TEST(test_lag)
{
	repl_lag l;
	memset(&l, 0, sizeof(l));
	repl_lag_sent(&l, 100, 1000);
	repl_lag_sent(&l, 200, 2000);
	repl_lag_confirmed(&l, REPL_LAG_WRITE, 200, 200, 2500);
	repl_lag_confirmed(&l, REPL_LAG_FLUSH, 100, 200, 2500);
	repl_lag_confirmed(&l, REPL_LAG_APPLY, 50, 200, 2500);
	ck_assert_uint_eq(l.lag_ns[REPL_LAG_WRITE], 500);  /* 2500 - 2000 */
	ck_assert_uint_eq(l.lag_ns[REPL_LAG_FLUSH], 1500); /* 2500 - 1000 */
	ck_assert_uint_eq(l.lag_ns[REPL_LAG_APPLY], 1500); /* waits for the 1000 one */
	/* Idle: everything written, nothing new passed. */
	repl_lag_confirmed(&l, REPL_LAG_WRITE, 200, 200, 3000);
	ck_assert_uint_eq(l.lag_ns[REPL_LAG_WRITE], 0);
	/* Replay stalled: its lag grows with each FEEDBACK. */
	repl_lag_confirmed(&l, REPL_LAG_APPLY, 50, 200, 5000);
	ck_assert_uint_eq(l.lag_ns[REPL_LAG_APPLY], 4000);
	/* It replays all: the time since the last sample, then idle. */
	repl_lag_confirmed(&l, REPL_LAG_APPLY, 200, 200, 6000);
	ck_assert_uint_eq(l.lag_ns[REPL_LAG_APPLY], 4000); /* 6000 - 2000 */
	repl_lag_confirmed(&l, REPL_LAG_APPLY, 200, 200, 7000);
	ck_assert_uint_eq(l.lag_ns[REPL_LAG_APPLY], 0);
	/* A full ring: the newest sample takes the new ends, keeping its time. */
	memset(&l, 0, sizeof(l));
	for (uint64_t i = 1; i <= 2 * REPL_LAG_SAMPLES; i++)
		repl_lag_sent(&l, i * 10, i * 100);
	ck_assert_uint_eq(l.recorded, REPL_LAG_SAMPLES);
	ck_assert_uint_eq(l.samples[REPL_LAG_SAMPLES - 1].lsn, 2 * REPL_LAG_SAMPLES * 10);
	ck_assert_uint_eq(l.samples[REPL_LAG_SAMPLES - 1].ns, REPL_LAG_SAMPLES * 100);
	uint64_t end = 2 * REPL_LAG_SAMPLES * 10, now = 2 * REPL_LAG_SAMPLES * 100;
	repl_lag_confirmed(&l, REPL_LAG_FLUSH, end, end, now);
	ck_assert_uint_eq(l.lag_ns[REPL_LAG_FLUSH], now - REPL_LAG_SAMPLES * 100);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("repl-proto");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_round_trip);
	tcase_add_test(tc, test_truncated);
	tcase_add_test(tc, test_oversized_and_unknown);
	tcase_add_test(tc, test_challenge_versions);
	tcase_add_test(tc, test_proofs);
	tcase_add_test(tc, test_bad_fields);
	tcase_add_test(tc, test_backup_paths);
	tcase_add_test(tc, test_standby_parse);
	tcase_add_test(tc, test_standby_parse_ssl);
	tcase_add_test(tc, test_standby_file);
	tcase_add_test(tc, test_lag);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
