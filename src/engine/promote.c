/*
 * promote.c - walrus_promote: asks a standby's supervisor to end recovery
 * (PROMOTE on DIR/walrus.sock, as walrus_stop asks for a stop) and waits
 * for its answer, which comes once the instance accepts writes.
 */
#include "engine/engine.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

static int promote_wait_answer(int sock, wr_msg *m, const char *abs)
{
	size_t len;
	struct pollfd p = {.fd = sock, .events = POLLIN};
	int r;
	do
		r = poll(&p, 1, -1); /* replaying what arrived may take a while: no bound */
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return wr_error(WALRUS_EIO, "poll on the supervisor's socket: %m");
	int rc = ipc_recv(sock, m, sizeof(*m), &len, NULL, NULL);
	if (rc != WALRUS_OK)
		return rc;
	if (len == 0)
		return wr_error(WALRUS_EIO,
		                "the instance of \"%s\" ended during the promotion (see %s/%s)",
		                abs, abs, WR_LOG_FILE);
	m->text[sizeof(m->text) - 1] = '\0';
	if (len != sizeof(*m) || m->magic != WR_PROTO_MAGIC || m->version != WR_PROTO_VERSION ||
	    (m->type != WR_MSG_PROMOTE_OK && m->type != WR_MSG_ERROR))
		return wr_error(WALRUS_EPROTO, "unexpected answer from the supervisor of \"%s\"",
		                abs);
	return WALRUS_OK;
}

int walrus_promote(const char *dir)
{
	char abs[PATH_MAX];
	int sock = -1;
	wr_error_clear();
	if (dir == NULL || *dir == '\0')
		return wr_error(WALRUS_EINVAL, "walrus_promote: no data directory given");
	if (realpath(dir, abs) == NULL)
		return wr_error(wr_errno_code(errno), "could not access data directory \"%s\": %m",
		                dir);
	int rc = ipc_connect(abs, WR_SOCKET_NAME, &sock);
	if (rc == WALRUS_ENOENT)
		return wr_error(WALRUS_ENOTRUNNING, "no instance is running on \"%s\"", abs);
	if (rc != WALRUS_OK)
		return rc;
	wr_msg m = {.magic = WR_PROTO_MAGIC,
	            .version = WR_PROTO_VERSION,
	            .type = WR_MSG_PROMOTE,
	            .pid = (uint32_t)getpid()};
	rc = ipc_send(sock, &m, sizeof(m), NULL, 0);
	if (rc == WALRUS_OK)
		rc = promote_wait_answer(sock, &m, abs);
	close(sock);
	if (rc != WALRUS_OK)
		return rc;
	if (m.type == WR_MSG_ERROR)
		return wr_error(m.status, "%s", m.text);
	wr_log(WR_LOG, "%s: %s", abs, m.text);
	return WALRUS_OK;
}
