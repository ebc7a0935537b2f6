/*
 * fuzz_resp.c - libFuzzer target of the RESP parser (src/server/resp.c).
 *
 * The input is cut into pieces whose sizes come from its first bytes, and
 * fed the way a backend feeds its socket reads: the buffer grows by one
 * piece at a time, the parser runs until it asks for more, consumed bytes
 * are dropped from the front.  Each finished request is checked (arguments
 * inside the buffer or the parser's copy, lengths consistent) and echoed
 * through the encoder; the glob matcher gets the arguments as pattern and
 * subject.  Bit 6 of the first byte makes the parser strict (a client not
 * yet authenticated): then no request may pass the RESP_NOAUTH_* limits.
 * Built with clang -fsanitize=fuzzer,address,undefined when the
 * compiler can (tests/server/meson.build).
 */
#include "server/resp.h"

#include <stdlib.h>
#include <string.h>

static void check_request(const resp_parser *p, const char *buf, size_t used, resp_buf *out)
{
	resp_add_array(out, p->argc);
	for (size_t i = 0; i < p->argc; i++) {
		const resp_arg *a = &p->argv[i];
		int in_buf = a->p >= buf && a->p + a->len <= buf + used;
		int in_copy =
		    p->copy != NULL && a->p >= p->copy && a->p + a->len <= p->copy + p->copy_cap;
		if (!in_buf && !in_copy)
			abort();
		if (p->strict && a->len > RESP_NOAUTH_BULK)
			abort();
		resp_add_bulk(out, a->p, a->len);
	}
	if (p->strict && p->argc > RESP_NOAUTH_ARGS)
		abort();
	if (p->argc >= 2)
		(void)resp_glob_match(p->argv[0].p, p->argv[0].len, p->argv[1].p, p->argv[1].len,
		                      p->argv[0].len & 1);
	out->len = 0;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	if (size < 2)
		return 0;
	size_t piece = (size_t)data[0] % 64 + 1;
	bool strict = (data[0] & 64) != 0;
	data++;
	size--;
	resp_parser p;
	resp_buf out = {0};
	resp_parser_init(&p);
	char *buf = malloc(size + 1);
	size_t len = 0, fed = 0;
	while (buf != NULL && fed < size) {
		size_t n = size - fed < piece ? size - fed : piece;
		memcpy(buf + len, data + fed, n);
		len += n;
		fed += n;
		for (;;) {
			size_t used = 0;
			p.strict = strict;
			int r = resp_parse(&p, buf, len, &used);
			if (used > len)
				abort();
			if (r == RESP_DONE)
				check_request(&p, buf, used, &out);
			if (r == RESP_PROTO || r == RESP_NOMEM) {
				len = 0; /* the connection would close: start afresh */
				resp_parser_free(&p);
				break;
			}
			memmove(buf, buf + used, len - used);
			len -= used;
			if (r == RESP_MORE)
				break;
		}
	}
	free(buf);
	resp_buf_free(&out);
	resp_parser_free(&p);
	return 0;
}
