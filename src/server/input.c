/*
 * input.c - a connection's input, shared by both backend models (one
 * process per connection, conn.c; a pool of multiplexing processes,
 * pool.c): the buffer of bytes read and not yet run, growing as the
 * parser asks, and the loop that runs every complete request in it.
 *
 * Memory: the buffer never grows past the connection's limit
 * (client_query_buffer_limit); a request that would need more fails at
 * once, before anything is allocated for it.  Until the session has
 * authenticated, the parser is strict (resp.h: a few small arguments), so
 * a client without the password makes the backend hold a few KiB.
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

void srv_input_init(srv_input *in, size_t limit)
{
	memset(in, 0, sizeof(*in));
	in->limit = limit;
	resp_parser_init(&in->parser);
}

void srv_input_free(srv_input *in)
{
	resp_parser_free(&in->parser);
	free(in->buf);
	in->buf = NULL;
	in->len = in->cap = 0;
}

static const char full[] = "ERR Protocol error: query buffer limit reached "
                           "(client_query_buffer_limit)";

const char *srv_input_reserve(srv_input *in)
{
	if (in->parser.need > in->limit)
		return full; /* the request under way cannot fit: no use reading it */
	size_t want = WR_MIN(WR_MAX(in->parser.need, in->len + SRV_READ_CHUNK), in->limit);
	if (in->cap >= want)
		return in->len < in->cap ? NULL : full;
	size_t cap = WR_MIN(WR_MAX(in->cap * 2, want), in->limit);
	char *p = realloc(in->buf, cap);
	if (p == NULL)
		return "ERR out of memory for the request";
	in->buf = p;
	in->cap = cap;
	return NULL;
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
		in->parser.strict = !sess->authed; /* AUTH may have run just before */
		int r = resp_parse(&in->parser, in->buf + off, in->len - off, &used);
		if (r == RESP_PROTO || r == RESP_NOMEM) {
			resp_add_error(out, "ERR Protocol error: %s",
			               r == RESP_PROTO ? in->parser.error : "out of memory");
			*closing = true;
			break;
		}
		if (r == RESP_MORE && in->parser.need > in->limit) {
			resp_add_error(out, "%s", full); /* before anything is read or allocated */
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
