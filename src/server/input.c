/*
 * input.c - a connection's input, shared by both backend models (one
 * process per connection, conn.c; a pool of multiplexing processes,
 * pool.c): the buffer of bytes read and not yet run, growing as the
 * parser asks, and the loop that runs every complete request in it.
 */
#include "server/srv_int.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/common.h"

#define SRV_READ_CHUNK ((size_t)64 * 1024)
#define SRV_MAX_QUERY  (1024ull * 1024 * 1024) /* Redis's client-query-buffer-limit */

void srv_input_init(srv_input *in)
{
	memset(in, 0, sizeof(*in));
	resp_parser_init(&in->parser);
}

void srv_input_free(srv_input *in)
{
	resp_parser_free(&in->parser);
	free(in->buf);
	in->buf = NULL;
	in->len = in->cap = 0;
}

bool srv_input_reserve(srv_input *in)
{
	size_t want = WR_MAX(in->parser.need, in->len + SRV_READ_CHUNK);
	if (want > SRV_MAX_QUERY)
		want = SRV_MAX_QUERY;
	if (in->cap >= want)
		return in->len < in->cap;
	size_t cap = WR_MAX(in->cap * 2, want);
	char *p = realloc(in->buf, cap);
	if (p == NULL)
		return false;
	in->buf = p;
	in->cap = cap;
	return true;
}

/* Runs the request the parser holds. */
static void dispatch(srv_input *in, srv_session *sess)
{
	resp_parser *ps = &in->parser;
	if (ps->deferred != NULL) {
		srv_reply_error(sess, ps->deferred);
	} else if (ps->argc > 0) {
		/* array requests point into the buffer, kept until srv_input_run drops them */
		uintptr_t a = (uintptr_t)ps->argv[0].p, b = (uintptr_t)in->buf;
		sess->args_stable = a >= b && a < b + in->len;
		srv_dispatch(sess, ps->argv, ps->argc);
	}
}

void srv_input_run(srv_input *in, srv_session *sess, resp_buf *out, bool *closing,
                   bool (*after)(void *conn), void *conn)
{
	size_t off = 0;
	while (!*closing) {
		size_t used;
		int r = resp_parse(&in->parser, in->buf + off, in->len - off, &used);
		if (r == RESP_PROTO || r == RESP_NOMEM) {
			resp_add_error(out, "ERR Protocol error: %s",
			               r == RESP_PROTO ? in->parser.error : "out of memory");
			*closing = true;
			break;
		}
		bool go_on = false;
		if (r == RESP_DONE) {
			dispatch(in, sess);
			go_on = after(conn);
		}
		off += used;
		if (!go_on)
			break;
	}
	srv_group_flush(sess); /* it points into the bytes dropped below */
	if (off > 0) {
		memmove(in->buf, in->buf + off, in->len - off);
		in->len -= off;
	}
	if (in->len == 0 && in->cap > SRV_KEEP_BUFFER) {
		free(in->buf);
		in->buf = NULL;
		in->cap = 0;
	}
}

void srv_socket_nodelay(int fd)
{
	int one = 1;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0 &&
	    (ss.ss_family == AF_INET || ss.ss_family == AF_INET6))
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}
