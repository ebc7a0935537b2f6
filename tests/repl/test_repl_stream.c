/*
 * test_repl_stream.c - a primary serving WAL to a standby's client steps
 * (repl_client_connect, repl_client_start, repl_client_stream: what the
 * WAL receiver runs), over a Unix socket and over TCP: the streamed bytes
 * equal the primary's segment files up to its flush LSN, and the sender's
 * slot reports the client's feedback in the statistics.  Then bad peers:
 * a wrong password, another system, another timeline, a start ahead of the
 * flush, a removed segment, garbage, an oversized length, one connection
 * too many, a silent peer, a primary writing a later WAL format; and a WAL
 * sender killed with SIGKILL: the primary keeps serving writes in the same
 * generation every time.
 */
#include "engine/engine.h"
#include "fdcache/fdcache.h"
#include "ipc/ipc.h"
#include "repl/repl_int.h"
#include "testutil.h"
#include "walrus.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stddef.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define PASSWORD "s3cret pass"

typedef struct primary {
	char dir[PATH_MAX];
	char addr[PATH_MAX + 32];
	walrus *db;
	wal_control ctl;
	uint64_t seg_size;
	uint64_t crash_restarts;
} primary;

/* A TCP port free right now: bound to port 0, read back, released. */
static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

static void put_keys(walrus *db, int from, int n)
{
	char k[32], v[200];
	memset(v, 'v', sizeof(v));
	for (int i = from; i < from + n; i++) {
		int kl = snprintf(k, sizeof(k), "key-%06d", i);
		ck_assert_int_eq(walrus_put(db, k, (size_t)kl, v, sizeof(v), WALRUS_SYNC),
		                 WALRUS_OK);
	}
}

__attribute__((noinline)) static char *stats(primary *p)
{
	char *json = NULL;
	ck_assert_int_eq(walrus_stats(p->db, &json), WALRUS_OK);
	return json;
}

static uint64_t crash_restarts(primary *p)
{
	char *json = stats(p);
	const char *at = strstr(json, "\"crash_restarts\":");
	ck_assert_ptr_nonnull(at);
	uint64_t n = strtoull(at + strlen("\"crash_restarts\":"), NULL, 10);
	free(json);
	return n;
}

/* A primary listening on a socket in its directory (@tcp: on 127.0.0.1). */
static void start_primary(primary *p, bool tcp, const char *extra)
{
	char conf[PATH_MAX + 600], path[PATH_MAX + 32];
	ck_assert_ptr_nonnull(realpath(tu_tmpdir("repl-primary"), p->dir));
	if (tcp)
		snprintf(p->addr, sizeof(p->addr), "127.0.0.1:%d", free_port());
	else
		snprintf(p->addr, sizeof(p->addr), "%s/repl.sock", p->dir);
	snprintf(conf, sizeof(conf),
	         "replication_password = '%s'\nlisten_replication = '%s'\n"
	         "wal_segment_size = 1MB\n%s",
	         PASSWORD, p->addr, extra);
	snprintf(path, sizeof(path), "%s/walrus.conf", p->dir);
	ck_assert_int_eq(tu_write_file(path, conf, strlen(conf)), 0);
	p->db = tu_open(p->dir, tu_instance_opts("0", "4MB"));
	ck_assert_int_eq(wal_control_read(p->dir, &p->ctl), WALRUS_OK);
	p->seg_size = p->ctl.wal_seg_size;
	p->crash_restarts = crash_restarts(p);
}

/* The primary is unaffected: same generation, writes work. */
static void check_primary_healthy(primary *p)
{
	put_keys(p->db, 900000, 3);
	ck_assert_uint_eq(crash_restarts(p), p->crash_restarts);
}

static void stop_primary(primary *p)
{
	check_primary_healthy(p);
	tu_close_and_wait(p->db);
}

/* The log holds @a and @b on one line; waits for it (the sender writes it as it exits). */
static void wait_log(primary *p, const char *a, const char *b)
{
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/log/walrus.log", p->dir);
	for (int i = 0; i < 2000; i++) {
		FILE *f = fopen(path, "r");
		char line[2048];
		bool found = false;
		while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL)
			found = strstr(line, a) != NULL && strstr(line, b) != NULL;
		if (f != NULL)
			fclose(f);
		if (found)
			return;
		wr_sleep_us(10000);
	}
	ck_abort_msg("no line with \"%s\" and \"%s\" in %s", a, b, path);
}

static bool stop_at(repl_stream *st, void *arg)
{
	return st->flushed < *(wr_lsn *)arg;
}

/* Streams [start, flush) into @dir/wal over a new connection; returns the connection. */
static int stream_into(primary *p, const char *dir, wr_lsn start, wr_lsn until)
{
	int fd;
	wr_lsn pflush;
	char waldir[PATH_MAX + 8];
	snprintf(waldir, sizeof(waldir), "%s/wal", dir);
	mkdir(waldir, 0700);
	ck_assert_msg(repl_client_connect(p->addr, PASSWORD, &fd) == WALRUS_OK, "%s",
	              walrus_errmsg());
	ck_assert_msg(repl_client_start(fd, p->ctl.sysid, wal_control_timeline(&p->ctl), start,
	                                "test-standby", "", &pflush) == WALRUS_OK,
	              "%s", walrus_errmsg());
	ck_assert_uint_ge(pflush, until);
	repl_stream st;
	repl_stream_init(&st, waldir, p->seg_size, start);
	st.progress = stop_at;
	st.arg = &until;
	ck_assert_msg(repl_client_stream(fd, &st) == WALRUS_OK, "%s", walrus_errmsg());
	ck_assert_uint_ge(st.flushed, until);
	repl_stream_close(&st);
	return fd;
}

/*
 * The streamed segments hold the primary's bytes from @start to @flush, but
 * for one field: a page's `durable` stamp, which the primary rewrites when
 * it continues a page it had flushed partly.  The standby keeps the stamp
 * it received, never a later one than the primary's (docs/architecture.md).
 */
static void compare_wal(primary *p, const char *dir, wr_lsn start, wr_lsn flush)
{
	char *a = malloc(p->seg_size), *b = malloc(p->seg_size);
	char wa[PATH_MAX + 8], wb[PATH_MAX + 8];
	const size_t dpos = offsetof(wal_page_header, durable);
	snprintf(wa, sizeof(wa), "%s/wal", p->dir);
	snprintf(wb, sizeof(wb), "%s/wal", dir);
	for (wr_lsn seg = start - start % p->seg_size; seg < flush; seg += p->seg_size) {
		char pa[PATH_MAX + 40], pb[PATH_MAX + 40];
		wal_segment_path(wa, p->seg_size, seg, pa, sizeof(pa));
		wal_segment_path(wb, p->seg_size, seg, pb, sizeof(pb));
		uint64_t to = WR_MIN(flush - seg, p->seg_size);
		int fa = open(pa, O_RDONLY), fb = open(pb, O_RDONLY);
		ck_assert_int_ge(fa, 0);
		ck_assert_int_ge(fb, 0);
		ck_assert_int_eq(pread(fa, a, to, 0), (ssize_t)to);
		ck_assert_int_eq(pread(fb, b, to, 0), (ssize_t)to);
		for (uint64_t pg = 0; pg + WAL_SHORT_PHD <= to; pg += WAL_PAGE_SIZE) {
			if (seg + pg < start)
				continue;
			uint64_t da, db;
			memcpy(&da, a + pg + dpos, 8);
			memcpy(&db, b + pg + dpos, 8);
			ck_assert_uint_le(db, da);
			memcpy(b + pg + dpos, &da, 8);
		}
		uint64_t from = WR_MAX(start, seg) - seg, d = from;
		while (d < to && a[d] == b[d])
			d++;
		ck_assert_msg(d == to, "segment %s differs at offset %llu (of %llu..%llu)", pb,
		              (unsigned long long)d, (unsigned long long)from,
		              (unsigned long long)to);
		close(fa);
		close(fb);
	}
	free(a);
	free(b);
}

/* The sender's slot, in `walrus stats`, reports @flush as the standby's flush LSN. */
static void wait_feedback_in_stats(primary *p, wr_lsn flush)
{
	char want[128];
	snprintf(want, sizeof(want), "\"flush_lsn\":\"" WAL_LSN_FMT "\"", WAL_LSN_ARGS(flush));
	for (int i = 0; i < 2000; i++) {
		char *json = stats(p);
		const char *senders = strstr(json, "\"senders\":[");
		ck_assert_ptr_nonnull(senders);
		bool ok = strstr(senders, want) != NULL &&
		          strstr(senders, "\"application_name\":\"test-standby\"") != NULL &&
		          strstr(senders, "\"state\":\"streaming\"") != NULL;
		free(json);
		if (ok)
			return;
		wr_sleep_us(10000);
	}
	ck_abort_msg("the sender never reported flush_lsn " WAL_LSN_FMT, WAL_LSN_ARGS(flush));
}

static void stream_and_compare(bool tcp)
{
	primary p;
	start_primary(&p, tcp, "");
	put_keys(p.db, 0, 300);
	wr_lsn start = p.ctl.redo_lsn - p.ctl.redo_lsn % p.seg_size; /* the segment's long header */
	wr_lsn flush = wal_flushed_lsn();
	char scratch[PATH_MAX];
	ck_assert_ptr_nonnull(realpath(tu_tmpdir("repl-standby"), scratch));
	int fd = stream_into(&p, scratch, start, flush);
	compare_wal(&p, scratch, start, flush);
	wait_feedback_in_stats(&p, flush);
	/* More WAL: the sleeping sender is woken by the flush and streams it. */
	put_keys(p.db, 300, 50);
	wr_lsn flush2 = wal_flushed_lsn();
	repl_stream st;
	char waldir[PATH_MAX + 8];
	snprintf(waldir, sizeof(waldir), "%s/wal", scratch);
	repl_stream_init(&st, waldir, p.seg_size, flush);
	st.progress = stop_at;
	st.arg = &flush2;
	ck_assert_msg(repl_client_stream(fd, &st) == WALRUS_OK, "%s", walrus_errmsg());
	repl_stream_close(&st);
	compare_wal(&p, scratch, start, flush2);
	wait_feedback_in_stats(&p, flush2);
	close(fd);
	stop_primary(&p);
}

START_TEST(test_stream_unix)
{
	stream_and_compare(false);
}
END_TEST

START_TEST(test_stream_tcp)
{
	stream_and_compare(true);
}
END_TEST

START_TEST(test_wrong_password)
{
	primary p;
	int fd;
	start_primary(&p, true, "");
	ck_assert_int_eq(repl_client_connect(p.addr, "not the password", &fd), WALRUS_EPERM);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "authentication failed"));
	wait_log(&p, "WARNING:  replication connection from 127.0.0.1:", "authentication failed");
	stop_primary(&p);
}
END_TEST

/* START refused with @what in the error. */
static void expect_start_refused(primary *p, uint64_t sysid, uint32_t tli, wr_lsn start,
                                 const char *what)
{
	int fd;
	wr_lsn pflush;
	ck_assert_int_eq(repl_client_connect(p->addr, PASSWORD, &fd), WALRUS_OK);
	ck_assert_int_ne(repl_client_start(fd, sysid, tli, start, "bad", "", &pflush), WALRUS_OK);
	ck_assert_msg(strstr(walrus_errmsg(), what) != NULL, "%s", walrus_errmsg());
	close(fd);
	wait_log(p, "refused", what);
}

START_TEST(test_start_refused)
{
	primary p;
	start_primary(&p, false, "");
	uint32_t tli = wal_control_timeline(&p.ctl);
	wr_lsn flush = wal_flushed_lsn();
	char text[256];
	snprintf(text, sizeof(text), "system identifier %llu differs from the primary's %llu",
	         (unsigned long long)(p.ctl.sysid + 1), (unsigned long long)p.ctl.sysid);
	expect_start_refused(&p, p.ctl.sysid + 1, tli, flush, text);
	snprintf(text, sizeof(text),
	         "cannot follow timeline %u: the standby's timeline %u is not in its history", tli,
	         tli + 1);
	expect_start_refused(&p, p.ctl.sysid, tli + 1, flush, text);
	expect_start_refused(&p, p.ctl.sysid, tli, flush + 4096,
	                     "is ahead of the primary's flush position");
	expect_start_refused(&p, p.ctl.sysid, tli, 0,
	                     "requested start 0/00000000 is no WAL position");
	/* Segment 0 never existed here: the first one starts at wal_segment_size. */
	expect_start_refused(&p, p.ctl.sysid, tli, 100,
	                     "requested WAL segment 0000000000000000 has already been removed");
	stop_primary(&p);
}
END_TEST

/* Sends @bytes raw after reading the challenge; the primary closes the connection. */
static void send_raw_expect_drop(primary *p, const void *bytes, size_t n)
{
	int fd;
	uint8_t buf[256];
	ck_assert_int_eq(repl_connect(p->addr, &fd), WALRUS_OK);
	ck_assert_int_eq(wr_read_full(fd, buf, REPL_HEADER_LEN + REPL_CHALLENGE_LEN),
	                 REPL_HEADER_LEN + REPL_CHALLENGE_LEN);
	ck_assert_int_eq(buf[0], REPL_MSG_CHALLENGE);
	ck_assert_int_eq(wr_write_full(fd, bytes, n), 0);
	ssize_t r;
	do /* until the primary closes: EOF (or a reset) */
		r = read(fd, buf, sizeof(buf));
	while (r > 0 || (r < 0 && errno == EINTR));
	close(fd);
}

START_TEST(test_garbage)
{
	primary p;
	start_primary(&p, false, "");
	static const char junk[] = "GET / HTTP/1.1\r\nHost: example\r\n\r\n";
	send_raw_expect_drop(&p, junk, sizeof(junk) - 1);
	wait_log(&p, "dropped", "unknown replication message type");
	/* An AUTH header claiming 16 MiB: refused before anything is read for it. */
	uint8_t big[REPL_HEADER_LEN] = {REPL_MSG_AUTH, 0, 0, 0, 1};
	send_raw_expect_drop(&p, big, sizeof(big));
	wait_log(&p, "dropped", "over the limit");
	/* A well-formed message, but not AUTH: nothing else is accepted first. */
	repl_msg m = {.type = REPL_MSG_FEEDBACK};
	uint8_t out[64];
	size_t n = repl_encode(&m, out, sizeof(out));
	send_raw_expect_drop(&p, out, n);
	wait_log(&p, "dropped", "something else than AUTH");
	stop_primary(&p);
}
END_TEST

START_TEST(test_too_many_standbys)
{
	primary p;
	int fd1, fd2;
	start_primary(&p, false, "max_wal_senders = 1\n");
	ck_assert_int_eq(repl_client_connect(p.addr, PASSWORD, &fd1), WALRUS_OK);
	ck_assert_int_eq(repl_client_connect(p.addr, PASSWORD, &fd2), WALRUS_ELIMIT);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "too many standbys (max_wal_senders = 1)"));
	close(fd1);
	stop_primary(&p);
}
END_TEST

/* Peers that connect and never authenticate take no sender slot. */
START_TEST(test_unauthenticated_take_no_slot)
{
	primary p;
	int idle[3], fd;
	uint8_t buf[256];
	start_primary(&p, false, "max_wal_senders = 1\n");
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(repl_connect(p.addr, &idle[i]), WALRUS_OK);
		/* Its CHALLENGE: a sender process is running for it. */
		ck_assert_int_eq(wr_read_full(idle[i], buf, REPL_HEADER_LEN + REPL_CHALLENGE_LEN),
		                 REPL_HEADER_LEN + REPL_CHALLENGE_LEN);
	}
	ck_assert_int_eq(repl_client_connect(p.addr, PASSWORD, &fd), WALRUS_OK);
	close(fd);
	for (int i = 0; i < 3; i++)
		close(idle[i]);
	stop_primary(&p);
}
END_TEST

static int count_log(primary *p, const char *a)
{
	char path[PATH_MAX + 32], line[2048];
	snprintf(path, sizeof(path), "%s/log/walrus.log", p->dir);
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	int n = 0;
	while (fgets(line, sizeof(line), f) != NULL)
		n += strstr(line, a) != NULL;
	fclose(f);
	return n;
}

/* How many may be authenticating at once is bounded, and the refusals log
 * ten WARNINGs a second at most. */
START_TEST(test_unauthenticated_bounded)
{
	enum { BOUND = 16, EXTRA = 40, PER_S = 10 };
	primary p;
	int idle[BOUND], fd;
	uint8_t buf[256];
	start_primary(&p, false, "");
	for (int i = 0; i < BOUND; i++) {
		ck_assert_int_eq(repl_connect(p.addr, &idle[i]), WALRUS_OK);
		ck_assert_int_eq(wr_read_full(idle[i], buf, REPL_HEADER_LEN + REPL_CHALLENGE_LEN),
		                 REPL_HEADER_LEN + REPL_CHALLENGE_LEN);
	}
	uint64_t t0 = wr_now_ns();
	for (int i = 0; i < EXTRA; i++) {
		ck_assert_int_eq(repl_client_connect(p.addr, PASSWORD, &fd), WALRUS_ELIMIT);
		ck_assert_ptr_nonnull(
		    strstr(walrus_errmsg(), "too many connections authenticating (16)"));
	}
	uint64_t seconds = (wr_now_ns() - t0) / 1000000000ULL;
	/* The supervisor logs before it answers: every line is there. */
	int lines = count_log(&p, "too many connections authenticating");
	ck_assert_int_ge(lines, 1);
	ck_assert_int_le(lines, PER_S * ((int)seconds + 1));
	for (int i = 0; i < BOUND; i++)
		close(idle[i]);
	stop_primary(&p);
}
END_TEST

/* An AUTH recorded from one handshake is refused in another: the MAC
 * covers the primary's fresh nonce.  A MAC keyed by the password itself
 * (no key derivation) is refused too. */
START_TEST(test_replayed_auth)
{
	primary p;
	repl_msg m, auth = {.type = REPL_MSG_AUTH};
	uint8_t *buf = malloc(REPL_MAX_PAYLOAD);
	ck_assert_ptr_nonnull(buf);
	start_primary(&p, false, "");
	int fd;
	ck_assert_int_eq(repl_connect(p.addr, &fd), WALRUS_OK);
	ck_assert_int_eq(repl_recv(fd, buf, &m), WALRUS_OK);
	ck_assert_int_eq(m.type, REPL_MSG_CHALLENGE);
	ck_assert_uint_eq(m.u.challenge.version, REPL_VERSION);
	ck_assert_uint_eq(m.u.challenge.flags, 0); /* no TLS */
	uint8_t key[WR_SHA256_LEN];
	ck_assert_int_eq(repl_auth_key(PASSWORD, m.u.challenge.salt, m.u.challenge.iterations, key),
	                 WALRUS_OK);
	ck_assert_int_eq(repl_random(auth.u.auth.nonce, REPL_NONCE_LEN), WALRUS_OK);
	ck_assert_int_eq(
	    repl_proof(key, "walrus-standby", &m, auth.u.auth.nonce, NULL, auth.u.auth.mac),
	    WALRUS_OK);
	ck_assert_int_eq(repl_send(fd, &auth), WALRUS_OK);
	ck_assert_int_eq(repl_recv(fd, buf, &m), WALRUS_OK);
	ck_assert_int_eq(m.type, REPL_MSG_AUTH_OK); /* the recorded AUTH was good */
	close(fd);
	ck_assert_int_eq(repl_connect(p.addr, &fd), WALRUS_OK);
	ck_assert_int_eq(repl_recv(fd, buf, &m), WALRUS_OK);
	ck_assert_int_eq(m.type, REPL_MSG_CHALLENGE);
	ck_assert_int_eq(repl_send(fd, &auth), WALRUS_OK); /* replayed */
	ck_assert_int_eq(repl_recv(fd, buf, &m), WALRUS_OK);
	ck_assert_int_eq(m.type, REPL_MSG_ERROR);
	ck_assert_str_eq(m.u.error.text, "authentication failed");
	close(fd);
	/* Nor does a proof made without the key derivation (the password as
	 * the key, as protocol 2 had it) pass. */
	ck_assert_int_eq(repl_connect(p.addr, &fd), WALRUS_OK);
	ck_assert_int_eq(repl_recv(fd, buf, &m), WALRUS_OK);
	ck_assert_int_eq(m.type, REPL_MSG_CHALLENGE);
	ck_assert_int_eq(repl_mac(PASSWORD, "walrus-standby", m.u.challenge.nonce,
	                          auth.u.auth.nonce, auth.u.auth.mac),
	                 WALRUS_OK);
	ck_assert_int_eq(repl_send(fd, &auth), WALRUS_OK);
	ck_assert_int_eq(repl_recv(fd, buf, &m), WALRUS_OK);
	ck_assert_int_eq(m.type, REPL_MSG_ERROR);
	ck_assert_str_eq(m.u.error.text, "authentication failed");
	close(fd);
	free(buf);
	stop_primary(&p);
}
END_TEST

/* A CHALLENGE of protocol @version as a primary sends it (a fresh nonce and salt). */
static repl_msg fake_challenge(uint32_t version)
{
	repl_msg m = {.type = REPL_MSG_CHALLENGE};
	m.u.challenge.magic = REPL_MAGIC;
	m.u.challenge.version = version;
	m.u.challenge.iterations = REPL_KDF_MIN_ITERATIONS;
	if (repl_random(m.u.challenge.nonce, REPL_NONCE_LEN) != WALRUS_OK ||
	    repl_random(m.u.challenge.salt, REPL_SALT_LEN) != WALRUS_OK)
		_exit(1);
	return m;
}

/* A primary that does not know the password (it answers AUTH_OK with a MAC
 * it cannot compute) is refused by the standby's side. */
START_TEST(test_fake_primary)
{
	char dir[PATH_MAX], addr[PATH_MAX + 16];
	ck_assert_ptr_nonnull(realpath(tu_tmpdir("repl-fake"), dir));
	snprintf(addr, sizeof(addr), "%s/fake.sock", dir);
	int lfd, fd;
	ck_assert_int_eq(repl_listen(addr, &lfd), WALRUS_OK);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* The fake: a CHALLENGE, then AUTH_OK whatever the AUTH says. */
		uint8_t *buf = malloc(REPL_MAX_PAYLOAD);
		struct pollfd pl = {.fd = lfd, .events = POLLIN};
		char peer[64];
		repl_msg m = fake_challenge(REPL_VERSION);
		if (buf == NULL || poll(&pl, 1, 60000) != 1 ||
		    repl_accept(lfd, &fd, peer, sizeof(peer)) != WALRUS_OK ||
		    repl_send(fd, &m) != WALRUS_OK || repl_recv(fd, buf, &m) != WALRUS_OK)
			_exit(1);
		m = (repl_msg){.type = REPL_MSG_AUTH_OK};
		_exit(repl_send(fd, &m) == WALRUS_OK && wr_read_full(fd, buf, 1) >= 0 ? 0 : 1);
	}
	close(lfd);
	ck_assert_int_eq(repl_client_connect(addr, PASSWORD, &fd), WALRUS_EPERM);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "failed to prove it knows the password"));
	ck_assert_int_eq(tu_wait(pid), 0); /* the fake got as far as its AUTH_OK */
}
END_TEST

/*
 * A fake primary that knows the password and answers AUTH_OK announcing
 * @format (and @needs), CHALLENGE in protocol @version.  It exits 0 once it
 * got as far as sending AUTH_OK.
 */
static pid_t announcing_primary(const char *addr, uint32_t version, uint32_t format,
                                const char *needs)
{
	int lfd, fd;
	ck_assert_int_eq(repl_listen(addr, &lfd), WALRUS_OK);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid > 0) {
		close(lfd);
		return pid;
	}
	uint8_t *buf = malloc(REPL_MAX_PAYLOAD);
	struct pollfd pl = {.fd = lfd, .events = POLLIN};
	char peer[64];
	repl_msg ch = fake_challenge(version), m;
	if (buf == NULL || poll(&pl, 1, 60000) != 1 ||
	    repl_accept(lfd, &fd, peer, sizeof(peer)) != WALRUS_OK)
		_exit(1);
	if (repl_send(fd, &ch) != WALRUS_OK)
		_exit(1);
	if (version < REPL_VERSION_FORMATS)
		_exit(wr_read_full(fd, buf, 1) >= 0 ? 0 : 1); /* refused at the CHALLENGE */
	if (repl_recv(fd, buf, &m) != WALRUS_OK)
		_exit(wr_read_full(fd, buf, 1) >= 0 ? 0 : 1); /* refused before AUTH */
	if (m.type != REPL_MSG_AUTH)
		_exit(1);
	uint8_t nonce_s[REPL_NONCE_LEN], key[WR_SHA256_LEN];
	memcpy(nonce_s, m.u.auth.nonce, sizeof(nonce_s));
	m = (repl_msg){.type = REPL_MSG_AUTH_OK};
	m.u.auth_ok.wal_format = format;
	snprintf(m.u.auth_ok.needs_walrus, sizeof(m.u.auth_ok.needs_walrus), "%s", needs);
	int rc = version < REPL_VERSION_KDF
	             ? repl_mac(PASSWORD, "walrus-primary", nonce_s, ch.u.challenge.nonce,
	                        m.u.auth_ok.mac)
	             : repl_auth_key(PASSWORD, ch.u.challenge.salt, ch.u.challenge.iterations, key);
	if (rc == WALRUS_OK && version >= REPL_VERSION_KDF)
		rc = repl_proof(key, "walrus-primary", &ch, nonce_s, NULL, m.u.auth_ok.mac);
	if (rc != WALRUS_OK)
		_exit(1);
	_exit(repl_send(fd, &m) == WALRUS_OK && wr_read_full(fd, buf, 1) >= 0 ? 0 : 1);
}

/*
 * A primary that writes a later WAL format than this walrus reads is
 * refused once it proved the password, with WALRUS_EVERSION and a message
 * naming the format, the walrus it needs and ours; one of an older
 * protocol (no WAL format in its handshake) is refused at its CHALLENGE.
 */
START_TEST(test_primary_of_later_wal_format)
{
	char dir[PATH_MAX], addr[PATH_MAX + 16], want[PATH_MAX + 256];
	ck_assert_ptr_nonnull(realpath(tu_tmpdir("repl-later"), dir));
	snprintf(addr, sizeof(addr), "%s/later.sock", dir);
	pid_t pid = announcing_primary(addr, REPL_VERSION, WAL_FORMAT + 1, "9.9.9");
	int fd;
	ck_assert_int_eq(repl_client_connect(addr, PASSWORD, &fd), WALRUS_EVERSION);
	snprintf(want, sizeof(want),
	         "the primary at \"%s\" writes WAL format %u, which needs walrus >= 9.9.9; this "
	         "standby runs walrus %s: upgrade the standby first",
	         addr, WAL_FORMAT + 1, WR_WALRUS_VERSION);
	ck_assert_str_eq(walrus_errmsg(), want);
	ck_assert_int_eq(tu_wait(pid), 0);
	ck_assert_int_eq(unlink(addr), 0);

	/* Its own format is accepted: the handshake goes on to its end. */
	pid = announcing_primary(addr, REPL_VERSION, WAL_FORMAT, WR_WALRUS_VERSION);
	ck_assert_int_eq(repl_client_connect(addr, PASSWORD, &fd), WALRUS_OK);
	close(fd);
	ck_assert_int_eq(tu_wait(pid), 0);
	ck_assert_int_eq(unlink(addr), 0);

	pid = announcing_primary(addr, REPL_VERSION_FORMATS - 1, WAL_FORMAT, "");
	ck_assert_int_eq(repl_client_connect(addr, PASSWORD, &fd), WALRUS_EPROTO);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "not a walrus primary of this version"));
	ck_assert_int_eq(tu_wait(pid), 0);
}
END_TEST

/*
 * A primary of protocol 2 (no key derivation, no TLS) during an upgrade
 * that goes standbys first: a standby that does not insist on TLS still
 * authenticates to it (both proofs keyed by the password, as protocol 2
 * has them); one whose sslmode requires TLS refuses it, saying why.
 */
START_TEST(test_primary_of_protocol_2)
{
	char dir[PATH_MAX], addr[PATH_MAX + 16];
	ck_assert_ptr_nonnull(realpath(tu_tmpdir("repl-v2"), dir));
	snprintf(addr, sizeof(addr), "%s/v2.sock", dir);
	pid_t pid = announcing_primary(addr, REPL_VERSION_FORMATS, WAL_FORMAT, WR_WALRUS_VERSION);
	int fd;
	ck_assert_msg(repl_client_connect(addr, PASSWORD, &fd) == WALRUS_OK, "%s", walrus_errmsg());
	repl_close(fd);
	ck_assert_int_eq(tu_wait(pid), 0);
	ck_assert_int_eq(unlink(addr), 0);

	repl_ssl_conf require = {.mode = REPL_SSL_REQUIRE};
	pid = announcing_primary(addr, REPL_VERSION_FORMATS, WAL_FORMAT, WR_WALRUS_VERSION);
	ck_assert_int_eq(repl_client_connect_tls(addr, PASSWORD, &require, &fd), WALRUS_EPERM);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "does not use TLS"));
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "sslmode is require"));
	ck_assert_int_eq(tu_wait(pid), 0);
}
END_TEST

/* sslmode = require against a primary without TLS (ssl = off): refused,
 * saying so, before anything about the password leaves. */
START_TEST(test_require_tls_of_plain_primary)
{
	primary p;
	int fd;
	start_primary(&p, false, "");
	repl_ssl_conf require = {.mode = REPL_SSL_REQUIRE};
	ck_assert_int_eq(repl_client_connect_tls(p.addr, PASSWORD, &require, &fd), WALRUS_EPERM);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "does not use TLS (ssl = off there)"));
	stop_primary(&p);
}
END_TEST

START_TEST(test_silent_peer)
{
	primary p;
	int fd;
	uint8_t buf[256];
	/* The sender inherits the environment: 300 ms instead of 10 s (test hooks). */
	setenv("WALRUS_REPL_AUTH_TIMEOUT_MS", "300", 1);
	start_primary(&p, false, "");
	ck_assert_int_eq(repl_connect(p.addr, &fd), WALRUS_OK);
	ck_assert_int_eq(wr_read_full(fd, buf, REPL_HEADER_LEN + REPL_CHALLENGE_LEN),
	                 REPL_HEADER_LEN + REPL_CHALLENGE_LEN);
	/* Say nothing: the next read sees the end of the connection. */
	ck_assert_int_eq(wr_read_full(fd, buf, 1), 0);
	close(fd);
	wait_log(&p, "dropped", "did not authenticate in time");
	stop_primary(&p);
}
END_TEST

static pid_t sender_pid(primary *p)
{
	char *json = stats(p);
	const char *at = strstr(json, "\"senders\":[{\"pid\":");
	pid_t pid = at ? (pid_t)atoi(at + strlen("\"senders\":[{\"pid\":")) : 0;
	free(json);
	return pid;
}

/* A primary with ten keys and a standby connection that streamed them from
 * the page holding the flush point (@flush_out); returns the connection. */
static int streaming_primary(primary *p, char scratch[PATH_MAX], wr_lsn *flush_out)
{
	start_primary(p, false, "");
	put_keys(p->db, 0, 10);
	ck_assert_ptr_nonnull(realpath(tu_tmpdir("repl-standby"), scratch));
	wr_lsn flush = *flush_out = wal_flushed_lsn();
	return stream_into(p, scratch, flush - flush % WAL_PAGE_SIZE, flush);
}

/* A FEEDBACK claiming more than the standby was sent (a relay's forgery)
 * moves the standby's flush position (what synchronous commits and
 * replication slots go by) no further than what was sent. */
START_TEST(test_feedback_bounded_by_sent)
{
	primary p;
	char scratch[PATH_MAX];
	wr_lsn flush;
	int fd = streaming_primary(&p, scratch, &flush);
	wr_lsn start = flush - flush % WAL_PAGE_SIZE;
	/* written = start - 1, below anything the stream reported, marks this
	 * message in the stats once it is read. */
	repl_msg m = {.type = REPL_MSG_FEEDBACK};
	m.u.feedback.written = start - 1;
	m.u.feedback.flushed = m.u.feedback.applied = 1ULL << 62;
	ck_assert_int_eq(repl_send(fd, &m), WALRUS_OK);
	char mark[128];
	snprintf(mark, sizeof(mark), "\"write_lsn\":\"" WAL_LSN_FMT "\"", WAL_LSN_ARGS(start - 1));
	char *json = NULL;
	for (int i = 0; i < 2000; i++) {
		free(json);
		json = stats(&p);
		if (strstr(json, mark) != NULL)
			break;
		wr_sleep_us(10000);
	}
	ck_assert_msg(strstr(json, mark) != NULL, "the FEEDBACK never showed: %s", json);
	/* The sender's object alone: other sections have a flush_lsn too. */
	char *slot = strstr(json, "\"senders\":[");
	ck_assert_ptr_nonnull(slot);
	slot[strcspn(slot, "]")] = '\0';
	const char *sent = strstr(slot, "\"sent_lsn\":\"");
	ck_assert_ptr_nonnull(sent);
	sent += strlen("\"sent_lsn\":\"");
	char want[128];
	snprintf(want, sizeof(want), "\"flush_lsn\":\"%.*s\"", (int)strcspn(sent, "\""), sent);
	ck_assert_msg(strstr(slot, want) != NULL, "want %s in %s", want, slot);
	free(json);
	close(fd);
	stop_primary(&p);
}
END_TEST

START_TEST(test_kill_sender)
{
	primary p;
	char scratch[PATH_MAX];
	wr_lsn flush;
	int fd = streaming_primary(&p, scratch, &flush);
	pid_t pid = sender_pid(&p);
	ck_assert_int_gt(pid, 0);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	tu_wait_gone(pid);
	/* Its slot is freed once the supervisor reaps it: without a crash restart. */
	for (int i = 0; i < 2000 && sender_pid(&p) != 0; i++)
		wr_sleep_us(10000);
	ck_assert_int_eq(sender_pid(&p), 0);
	close(fd);
	check_primary_healthy(&p);
	/* And a standby can connect again. */
	fd = stream_into(&p, scratch, flush, wal_flushed_lsn());
	close(fd);
	stop_primary(&p);
}
END_TEST

typedef struct rcv_args {
	const char *dir;
	_Atomic uint32_t *shutdown;
} rcv_args;

/* The WAL receiver's own main, in a child, for a "standby" directory @arg->dir. */
static int receiver_child(void *arg)
{
	rcv_args *a = arg;
	wr_set_panic_handler(tu_panic_exit);
	fdc_reset();
	repl_set_instance(&(repl_instance){.datadir = a->dir,
	                                   .opts = &engine_sh()->opts,
	                                   .shutdown = a->shutdown,
	                                   .supervisor = getppid()});
	repl_receiver_main();
}

/* Waits (bounded) for the receiver to have made WAL up to @lsn durable. */
static void wait_received(repl_receiver *r, wr_lsn lsn)
{
	uint64_t deadline = wr_now_ns() + 30ULL * 1000000000ULL;
	for (;;) {
		uint32_t seq = atomic_load(&r->flush_seq);
		if (atomic_load(&r->flushed) >= lsn)
			return;
		ck_assert_msg(wr_now_ns() < deadline,
		              "the receiver flushed only " WAL_LSN_FMT " of " WAL_LSN_FMT " (%s)",
		              WAL_LSN_ARGS(atomic_load(&r->flushed)), WAL_LSN_ARGS(lsn), r->error);
		(void)ipc_wait_u32(&r->flush_seq, seq, 100 * 1000000ULL);
	}
}

/*
 * repl_receiver_main itself: it waits for start_lsn, streams into the
 * standby's DIR/wal, publishes `flushed` with flush_seq, and after its
 * sender is killed reconnects and goes on from what it had flushed.
 */
START_TEST(test_receiver)
{
	primary p;
	char sdir[PATH_MAX];
	start_primary(&p, false, "");
	put_keys(p.db, 0, 20);
	ck_assert_ptr_nonnull(realpath(tu_tmpdir("repl-standby"), sdir));
	char waldir[PATH_MAX + 8];
	snprintf(waldir, sizeof(waldir), "%s/wal", sdir);
	ck_assert_int_eq(mkdir(waldir, 0700), 0);
	ck_assert_int_eq(wal_control_write(sdir, &p.ctl), WALRUS_OK); /* same system */
	repl_standby_conf sc = {0};
	ck_assert(wr_snprintf(sc.primary, sizeof(sc.primary), "%s", p.addr));
	snprintf(sc.password, sizeof(sc.password), "%s", PASSWORD);
	snprintf(sc.application_name, sizeof(sc.application_name), "test-standby");
	ck_assert_int_eq(repl_standby_write(sdir, &sc), WALRUS_OK);

	repl_receiver *r = &repl_shared()->receiver;
	rcv_args a = {.dir = sdir, .shutdown = (_Atomic uint32_t *)client_scratch()};
	pid_t child = tu_fork(receiver_child, &a);
	while (atomic_load(&r->state) != REPL_RCV_WAITING_START)
		wr_sleep_us(1000); /* bounded by the case's timeout */
	wr_lsn flush = wal_flushed_lsn(), start = flush - flush % WAL_PAGE_SIZE;
	atomic_store(&r->start_lsn, start);
	atomic_fetch_add(&r->start_seq, 1);
	ipc_wake_all(&r->start_seq);
	wait_received(r, flush);
	compare_wal(&p, sdir, start, flush);
	wait_feedback_in_stats(&p, atomic_load(&r->flushed));

	/* The connection breaks: it reconnects from what it flushed. */
	pid_t snd = sender_pid(&p);
	ck_assert_int_gt(snd, 0);
	ck_assert_int_eq(kill(snd, SIGKILL), 0);
	put_keys(p.db, 20, 50);
	wr_lsn flush2 = wal_flushed_lsn();
	wait_received(r, flush2);
	compare_wal(&p, sdir, start, flush2);
	char *json = stats(&p);
	ck_assert_ptr_nonnull(strstr(json, "\"receiver\":{\"pid\":"));
	free(json);

	atomic_store(a.shutdown, 1);
	ipc_wake_all(a.shutdown);
	ck_assert_int_eq(tu_wait(child), 0);
	ck_assert_uint_eq(crash_restarts(&p), p.crash_restarts);
	stop_primary(&p);
}
END_TEST

START_TEST(test_no_password)
{
	char dir[PATH_MAX], conf[PATH_MAX + 128], path[PATH_MAX + 32];
	ck_assert_ptr_nonnull(realpath(tu_tmpdir("repl-primary"), dir));
	snprintf(conf, sizeof(conf), "listen_replication = '%s/repl.sock'\n", dir);
	snprintf(path, sizeof(path), "%s/walrus.conf", dir);
	ck_assert_int_eq(tu_write_file(path, conf, strlen(conf)), 0);
	walrus_opts *o = tu_instance_opts("0", "4MB");
	tu_open_fails(dir, o, WALRUS_EINVAL, "sets no replication_password");
	walrus_opts_free(o);
}
END_TEST

/*
 * A clean shutdown lets the senders send what is flushed, the shutdown
 * checkpoint included, before they exit: a standby stopped with its
 * primary has all of the primary's WAL.
 */
START_TEST(test_shutdown_sends_rest)
{
	primary p;
	char scratch[PATH_MAX], waldir[PATH_MAX + 8];
	start_primary(&p, false, "");
	put_keys(p.db, 0, 10);
	ck_assert_ptr_nonnull(realpath(tu_tmpdir("repl-standby"), scratch));
	wr_lsn flush = wal_flushed_lsn();
	int fd = stream_into(&p, scratch, flush - flush % WAL_PAGE_SIZE, flush);
	check_primary_healthy(&p);
	tu_close_and_wait(p.db); /* the supervisor waited for its sender */
	wal_control c;
	ck_assert_int_eq(wal_control_read(p.dir, &c), WALRUS_OK);
	ck_assert_int_eq(c.state, WAL_DB_SHUTDOWN);
	snprintf(waldir, sizeof(waldir), "%s/wal", scratch);
	repl_stream st;
	repl_stream_init(&st, waldir, p.seg_size, flush);
	/* Everything it sent is in the socket; then the end of the connection. */
	ck_assert_int_eq(repl_client_stream(fd, &st), WALRUS_EIO);
	ck_assert_msg(st.flushed > c.checkpoint_lsn,
	              "streamed to " WAL_LSN_FMT ", shutdown checkpoint at " WAL_LSN_FMT,
	              WAL_LSN_ARGS(st.flushed), WAL_LSN_ARGS(c.checkpoint_lsn));
	repl_stream_close(&st);
	close(fd);
	wait_log(&p, "sent at shutdown", "test-standby");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("repl-stream");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_stream_unix);
	tcase_add_test(tc, test_stream_tcp);
	tcase_add_test(tc, test_wrong_password);
	tcase_add_test(tc, test_start_refused);
	tcase_add_test(tc, test_garbage);
	tcase_add_test(tc, test_too_many_standbys);
	tcase_add_test(tc, test_unauthenticated_take_no_slot);
	tcase_add_test(tc, test_unauthenticated_bounded);
	tcase_add_test(tc, test_replayed_auth);
	tcase_add_test(tc, test_fake_primary);
	tcase_add_test(tc, test_primary_of_later_wal_format);
	tcase_add_test(tc, test_primary_of_protocol_2);
	tcase_add_test(tc, test_require_tls_of_plain_primary);
	tcase_add_test(tc, test_silent_peer);
	tcase_add_test(tc, test_kill_sender);
	tcase_add_test(tc, test_feedback_bounded_by_sent);
	tcase_add_test(tc, test_receiver);
	tcase_add_test(tc, test_no_password);
	tcase_add_test(tc, test_shutdown_sends_rest);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
