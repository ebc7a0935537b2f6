/*
 * test_socket.c - SEQPACKET sockets: fd passing without leaks, error paths,
 * and listening/connecting in data directories, long paths included.
 */
#include "testutil.h"

#include "ipc/ipc.h"

#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static int open_tmpfile(const char *dir)
{
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	return fd;
}

static void check_same_file(int a, int b)
{
	struct stat sa, sb;
	ck_assert_int_eq(fstat(a, &sa), 0);
	ck_assert_int_eq(fstat(b, &sb), 0);
	ck_assert_uint_eq(sa.st_ino, sb.st_ino);
	ck_assert_uint_eq(sa.st_dev, sb.st_dev);
	char w = 'q', r = 0;
	ck_assert_int_eq(pwrite(b, &w, 1, 7), 1);
	ck_assert_int_eq(pread(a, &r, 1, 7), 1);
	ck_assert_int_eq(r, 'q');
	ck_assert_int_eq(fcntl(b, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
}

static void send_recv_n(int nfds)
{
	const char *dir = tu_tmpdir("ipc-sock");
	int before = tu_count_fds();
	int sp[2];
	ck_assert_int_eq(ipc_socketpair(sp), WALRUS_OK);
	int files[IPC_MAX_FDS];
	for (int i = 0; i < nfds; i++)
		files[i] = open_tmpfile(dir);
	char msg[] = "hello, checkpointer";
	ck_assert_int_eq(ipc_send(sp[0], msg, sizeof(msg), files, nfds), WALRUS_OK);
	char buf[64];
	size_t len;
	int got[IPC_MAX_FDS], ngot = -1;
	ck_assert_int_eq(ipc_recv(sp[1], buf, sizeof(buf), &len, got, &ngot), WALRUS_OK);
	ck_assert_uint_eq(len, sizeof(msg));
	ck_assert_str_eq(buf, msg);
	ck_assert_int_eq(ngot, nfds);
	for (int i = 0; i < nfds; i++) {
		check_same_file(files[i], got[i]);
		close(got[i]);
		close(files[i]);
	}
	close(sp[0]);
	close(sp[1]);
	ck_assert_int_eq(tu_count_fds(), before);
}

START_TEST(pass_fds)
{
	int counts[] = {0, 1, 3, IPC_MAX_FDS};
	send_recv_n(counts[_i]);
}
END_TEST

START_TEST(truncated_message_leaks_nothing)
{
	const char *dir = tu_tmpdir("ipc-sock");
	int before = tu_count_fds();
	int sp[2];
	ck_assert_int_eq(ipc_socketpair(sp), WALRUS_OK);
	int files[2] = {open_tmpfile(dir), open_tmpfile(dir)};
	char big[100] = {0};
	ck_assert_int_eq(ipc_send(sp[0], big, sizeof(big), files, 2), WALRUS_OK);
	char small[10];
	size_t len;
	int got[IPC_MAX_FDS], ngot = -1;
	ck_assert_int_eq(ipc_recv(sp[1], small, sizeof(small), &len, got, &ngot), WALRUS_EPROTO);
	ck_assert_int_eq(ngot, 0);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "did not fit"));

	/* fds arriving where none are expected are closed too */
	ck_assert_int_eq(ipc_send(sp[0], big, 1, files, 2), WALRUS_OK);
	ck_assert_int_eq(ipc_recv(sp[1], big, sizeof(big), &len, NULL, NULL), WALRUS_EPROTO);

	close(files[0]);
	close(files[1]);
	close(sp[0]);
	close(sp[1]);
	ck_assert_int_eq(tu_count_fds(), before);
}
END_TEST

/* More fds than the receive buffer holds: the kernel sets MSG_CTRUNC. */
START_TEST(too_many_fds_leaks_nothing)
{
	const char *dir = tu_tmpdir("ipc-sock");
	int before = tu_count_fds();
	int sp[2];
	ck_assert_int_eq(ipc_socketpair(sp), WALRUS_OK);
	enum { N = IPC_MAX_FDS + 4 };
	int files[N];
	for (int i = 0; i < N; i++)
		files[i] = open_tmpfile(dir);
	union {
		char buf[CMSG_SPACE(sizeof(int) * N)];
		struct cmsghdr align;
	} cb;
	memset(&cb, 0, sizeof(cb));
	char byte = 'x';
	struct iovec iov = {&byte, 1};
	struct msghdr mh = {.msg_iov = &iov,
	                    .msg_iovlen = 1,
	                    .msg_control = cb.buf,
	                    .msg_controllen = sizeof(cb.buf)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int) * N);
	memcpy(CMSG_DATA(c), files, sizeof(files));
	ck_assert_int_eq(sendmsg(sp[0], &mh, 0), 1);
	for (int i = 0; i < N; i++)
		close(files[i]);

	char buf[16];
	size_t len;
	int got[IPC_MAX_FDS], ngot = -1;
	ck_assert_int_eq(ipc_recv(sp[1], buf, sizeof(buf), &len, got, &ngot), WALRUS_EPROTO);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "fds truncated"));
	close(sp[0]);
	close(sp[1]);
	ck_assert_int_eq(tu_count_fds(), before);
}
END_TEST

START_TEST(peer_close_and_nowait)
{
	int sp[2];
	ck_assert_int_eq(ipc_socketpair(sp), WALRUS_OK);
	char buf[16];
	size_t len = 0;
	int got[IPC_MAX_FDS], ngot = -1;
	ck_assert_int_eq(ipc_recv_nowait(sp[1], buf, sizeof(buf), &len, got, &ngot), WALRUS_OK);
	ck_assert_uint_eq(len, SIZE_MAX);
	ck_assert_int_eq(ngot, 0);
	ck_assert_int_eq(ipc_send(sp[0], "abc", 3, NULL, 0), WALRUS_OK);
	ck_assert_int_eq(ipc_recv_nowait(sp[1], buf, sizeof(buf), &len, got, &ngot), WALRUS_OK);
	ck_assert_uint_eq(len, 3);
	ck_assert_int_eq(ngot, 0);
	ck_assert_int_eq(ipc_send(sp[0], "defg", 4, NULL, 0), WALRUS_OK);
	close(sp[0]);
	/* queued messages come first, then the close */
	ck_assert_int_eq(ipc_recv(sp[1], buf, sizeof(buf), &len, got, &ngot), WALRUS_OK);
	ck_assert_uint_eq(len, 4);
	ck_assert_int_eq(ipc_recv(sp[1], buf, sizeof(buf), &len, got, &ngot), WALRUS_OK);
	ck_assert_uint_eq(len, 0);
	ck_assert_int_eq(ngot, 0);
	ck_assert_int_eq(ipc_recv_nowait(sp[1], buf, sizeof(buf), &len, got, &ngot), WALRUS_OK);
	ck_assert_uint_eq(len, 0);
	/* and sending to a closed peer is EIO, not SIGPIPE */
	ck_assert_int_eq(ipc_send(sp[1], "x", 1, NULL, 0), WALRUS_EIO);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "peer closed"));
	close(sp[1]);
}
END_TEST

START_TEST(send_bad_arguments)
{
	int sp[2];
	ck_assert_int_eq(ipc_socketpair(sp), WALRUS_OK);
	int fds[IPC_MAX_FDS + 1] = {0};
	ck_assert_int_eq(ipc_send(sp[0], "x", 1, fds, IPC_MAX_FDS + 1), WALRUS_EINVAL);
	ck_assert_int_eq(ipc_send(sp[0], "x", 1, fds, -1), WALRUS_EINVAL);
	ck_assert_int_eq(ipc_send(sp[0], "x", 0, NULL, 0), WALRUS_EINVAL);
	ck_assert_int_eq(fcntl(sp[0], F_SETFL, O_NONBLOCK), 0);
	char block[512] = {0};
	int rc;
	while ((rc = ipc_send(sp[0], block, sizeof(block), NULL, 0)) == WALRUS_OK)
		;
	ck_assert_int_eq(rc, WALRUS_EBUSY);
	close(sp[0]);
	close(sp[1]);
}
END_TEST

struct client_arg {
	const char *dir;
	const char *name;
};

static int client(void *arg)
{
	struct client_arg *a = arg;
	int fd;
	if (ipc_connect(a->dir, a->name, &fd) != WALRUS_OK)
		return 1;
	if (ipc_send(fd, "hello", 5, NULL, 0) != WALRUS_OK)
		return 2;
	char buf[8];
	size_t len;
	int nfds;
	if (ipc_recv(fd, buf, sizeof(buf), &len, NULL, &nfds) != WALRUS_OK || len != 2)
		return 3;
	close(fd);
	return 0;
}

/* Listens in @dir, serves one forked client, checks what the server sees. */
static void serve_one(const char *dir)
{
	int before = tu_count_fds();
	int lfd;
	ck_assert_int_eq(ipc_listen(dir, "walrus.sock", &lfd), WALRUS_OK);
	ck_assert_int_eq(fcntl(lfd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	struct client_arg a = {dir, "walrus.sock"};
	pid_t pid = tu_fork(client, &a);
	int cfd;
	ck_assert_int_eq(ipc_accept(lfd, &cfd), WALRUS_OK);
	ck_assert_int_eq(fcntl(cfd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	pid_t peer = 0;
	ck_assert_int_eq(ipc_peer_pid(cfd, &peer), WALRUS_OK);
	ck_assert_int_eq(peer, pid);
	char buf[16];
	size_t len;
	int nfds;
	ck_assert_int_eq(ipc_recv(cfd, buf, sizeof(buf), &len, NULL, &nfds), WALRUS_OK);
	ck_assert_uint_eq(len, 5);
	ck_assert_int_eq(memcmp(buf, "hello", 5), 0);
	ck_assert_int_eq(ipc_send(cfd, "ok", 2, NULL, 0), WALRUS_OK);
	ck_assert_int_eq(tu_wait(pid), 0);
	close(cfd);
	close(lfd);
	ck_assert_int_eq(tu_count_fds(), before);
}

START_TEST(listen_connect_accept)
{
	const char *dir = tu_tmpdir("ipc-sock");
	serve_one(dir);
	char path[4096];
	snprintf(path, sizeof(path), "%s/walrus.sock", dir);
	struct stat st;
	ck_assert_int_eq(lstat(path, &st), 0);
	ck_assert(S_ISSOCK(st.st_mode));
	ck_assert_int_eq(st.st_mode & 07777, 0600);
}
END_TEST

START_TEST(long_directory_path)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s", tu_tmpdir("ipc-sock"));
	while (strlen(path) < 300) {
		strcat(path, "/a-rather-long-directory-name-for-walrus");
		ck_assert_int_eq(mkdir(path, 0700), 0);
	}
	ck_assert_uint_gt(strlen(path), 108);
	serve_one(path);
}
END_TEST

START_TEST(connect_nothing_listening)
{
	const char *dir = tu_tmpdir("ipc-sock");
	int before = tu_count_fds();
	int fd = -1;
	ck_assert_int_eq(ipc_connect(dir, "walrus.sock", &fd), WALRUS_ENOENT);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "no instance is listening on"));
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), dir));
	char missing[4096];
	snprintf(missing, sizeof(missing), "%s/nope", dir);
	ck_assert_int_eq(ipc_connect(missing, "walrus.sock", &fd), WALRUS_ENOENT);

	/* a socket file whose listener is gone: refused, also ENOENT */
	int lfd;
	ck_assert_int_eq(ipc_listen(dir, "walrus.sock", &lfd), WALRUS_OK);
	close(lfd);
	ck_assert_int_eq(ipc_connect(dir, "walrus.sock", &fd), WALRUS_ENOENT);
	ck_assert_int_eq(tu_count_fds(), before);
	ck_assert_int_eq(ipc_connect(dir, "a/b", &fd), WALRUS_EINVAL);
}
END_TEST

START_TEST(stale_socket_replaced)
{
	const char *dir = tu_tmpdir("ipc-sock");
	int lfd, lfd2;
	ck_assert_int_eq(ipc_listen(dir, "walrus.sock", &lfd), WALRUS_OK);
	/* someone is listening: not stale, not ours to remove */
	ck_assert_int_eq(ipc_listen(dir, "walrus.sock", &lfd2), WALRUS_EBUSY);
	close(lfd);
	int c;
	/* a bad fd is an error, not a retry */
	ck_assert_int_lt(ipc_accept(-1, &c), 0);
	/* the stale socket is replaced */
	serve_one(dir);
}
END_TEST

START_TEST(regular_file_refused)
{
	const char *dir = tu_tmpdir("ipc-sock");
	char path[4096];
	snprintf(path, sizeof(path), "%s/walrus.sock", dir);
	ck_assert_int_eq(tu_write_file(path, "precious", 8), 0);
	int before = tu_count_fds();
	int lfd;
	ck_assert_int_eq(ipc_listen(dir, "walrus.sock", &lfd), WALRUS_EBUSY);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "not a socket"));
	ck_assert_int_eq(tu_count_fds(), before);
	struct stat st;
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert(S_ISREG(st.st_mode));
	ck_assert_int_eq(st.st_size, 8);
}
END_TEST

START_TEST(accept_nonblocking_empty)
{
	const char *dir = tu_tmpdir("ipc-sock");
	int lfd, c;
	ck_assert_int_eq(ipc_listen(dir, "s", &lfd), WALRUS_OK);
	ck_assert_int_eq(fcntl(lfd, F_SETFL, O_NONBLOCK), 0);
	ck_assert_int_eq(ipc_accept(lfd, &c), WALRUS_EBUSY);
	close(lfd);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ipc-socket");
	TCase *tc = tcase_create("socket");
	tcase_add_loop_test(tc, pass_fds, 0, 4);
	tcase_add_test(tc, truncated_message_leaks_nothing);
	tcase_add_test(tc, too_many_fds_leaks_nothing);
	tcase_add_test(tc, peer_close_and_nowait);
	tcase_add_test(tc, send_bad_arguments);
	tcase_add_test(tc, listen_connect_accept);
	tcase_add_test(tc, long_directory_path);
	tcase_add_test(tc, connect_nothing_listening);
	tcase_add_test(tc, stale_socket_replaced);
	tcase_add_test(tc, regular_file_refused);
	tcase_add_test(tc, accept_nonblocking_empty);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
