/*
 * test_resp.c - the RESP parser and encoder (src/server/resp.c): complete
 * and incomplete requests, every cut of a request, inline commands and
 * their quoting, the limits (array length, bulk length, header and inline
 * line length), malformed input (nested arrays, negative or non-numeric
 * lengths, missing CRLF), discarding of a too-long bulk, the strict limits
 * of a client not yet authenticated, the encoder, glob matching.
 */
#include "server/resp.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parses @in in one call; returns the status, *used the bytes consumed. */
static int parse1(resp_parser *p, const char *in, size_t len, size_t *used)
{
	return resp_parse(p, in, len, used);
}

#define PARSE(p, s, used) parse1((p), (s), sizeof(s) - 1, (used))

static void assert_arg(const resp_parser *p, size_t i, const char *want)
{
	ck_assert_uint_eq(p->argv[i].len, strlen(want));
	ck_assert(memcmp(p->argv[i].p, want, strlen(want)) == 0);
}

START_TEST(test_array)
{
	resp_parser p;
	size_t used;
	resp_parser_init(&p);
	const char req[] = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n*1\r\n$4\r\nPING\r\n";
	ck_assert_int_eq(PARSE(&p, req, &used), RESP_DONE);
	ck_assert_uint_eq(p.argc, 3);
	assert_arg(&p, 0, "SET");
	assert_arg(&p, 1, "k");
	assert_arg(&p, 2, "");
	ck_assert(p.deferred == NULL);
	ck_assert_uint_eq(used, strlen("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"));
	/* the next request in the same buffer */
	ck_assert_int_eq(parse1(&p, req + used, sizeof(req) - 1 - used, &used), RESP_DONE);
	ck_assert_uint_eq(p.argc, 1);
	assert_arg(&p, 0, "PING");
	resp_parser_free(&p);
}
END_TEST

START_TEST(test_binary_bulk)
{
	resp_parser p;
	size_t used;
	resp_parser_init(&p);
	const char req[] = "*2\r\n$3\r\nGET\r\n$4\r\n\r\n\0$\r\n";
	ck_assert_int_eq(PARSE(&p, req, &used), RESP_DONE);
	ck_assert_uint_eq(p.argv[1].len, 4);
	ck_assert(memcmp(p.argv[1].p, "\r\n\0$", 4) == 0);
	resp_parser_free(&p);
}
END_TEST

/* Every prefix of a request is incomplete, fed again and again as it grows. */
START_TEST(test_every_cut)
{
	const char req[] = "*3\r\n$3\r\nSET\r\n$5\r\nhello\r\n$11\r\nhello world\r\n";
	size_t n = sizeof(req) - 1;
	for (size_t cut = 0; cut < n; cut++) {
		resp_parser p;
		size_t used;
		resp_parser_init(&p);
		ck_assert_int_eq(parse1(&p, req, cut, &used), RESP_MORE);
		ck_assert_uint_eq(used, 0);
		/* one byte at a time from the cut on */
		int r = RESP_MORE;
		for (size_t len = cut + 1; len <= n && r == RESP_MORE; len++)
			r = parse1(&p, req, len, &used);
		ck_assert_int_eq(r, RESP_DONE);
		ck_assert_uint_eq(used, n);
		ck_assert_uint_eq(p.argc, 3);
		assert_arg(&p, 2, "hello world");
		resp_parser_free(&p);
	}
}
END_TEST

/* The buffer may move between calls: offsets, not pointers, are kept. */
START_TEST(test_buffer_moves)
{
	const char req[] = "*2\r\n$4\r\nECHO\r\n$6\r\nmoving\r\n";
	resp_parser p;
	size_t used;
	resp_parser_init(&p);
	char *a = strdup(req);
	ck_assert_int_eq(parse1(&p, a, 16, &used), RESP_MORE);
	char *b = strdup(req);
	memset(a, 'X', sizeof(req) - 1);
	free(a);
	ck_assert_int_eq(parse1(&p, b, sizeof(req) - 1, &used), RESP_DONE);
	assert_arg(&p, 1, "moving");
	free(b);
	resp_parser_free(&p);
}
END_TEST

START_TEST(test_inline)
{
	resp_parser p;
	size_t used;
	resp_parser_init(&p);
	const char req[] = "  SET  k   \"a b\\x41\\n\\\"\" 'it\\'s' \r\nPING\n";
	ck_assert_int_eq(PARSE(&p, req, &used), RESP_DONE);
	ck_assert_uint_eq(p.argc, 4);
	assert_arg(&p, 0, "SET");
	assert_arg(&p, 1, "k");
	assert_arg(&p, 2, "a bA\n\"");
	assert_arg(&p, 3, "it's");
	ck_assert_int_eq(parse1(&p, req + used, sizeof(req) - 1 - used, &used), RESP_DONE);
	assert_arg(&p, 0, "PING");
	/* an empty line is an empty request */
	ck_assert_int_eq(PARSE(&p, "\r\n", &used), RESP_DONE);
	ck_assert_uint_eq(p.argc, 0);
	ck_assert_uint_eq(used, 2);
	/* incomplete until its newline */
	ck_assert_int_eq(PARSE(&p, "GET ke", &used), RESP_MORE);
	ck_assert_int_eq(PARSE(&p, "GET key\n", &used), RESP_DONE);
	assert_arg(&p, 1, "key");
	ck_assert_int_eq(PARSE(&p, "SET a \"open\r\n", &used), RESP_PROTO);
	ck_assert_str_eq(p.error, "unbalanced quotes in request");
	ck_assert_int_eq(PARSE(&p, "SET a \"x\"y\r\n", &used), RESP_PROTO);
	resp_parser_free(&p);
}
END_TEST

START_TEST(test_inline_limit)
{
	resp_parser p;
	size_t used;
	resp_parser_init(&p);
	size_t n = RESP_MAX_INLINE + 10;
	char *big = malloc(n);
	memset(big, 'a', n);
	ck_assert_int_eq(parse1(&p, big, RESP_MAX_INLINE - 1, &used), RESP_MORE);
	ck_assert_int_eq(parse1(&p, big, n, &used), RESP_PROTO);
	ck_assert_str_eq(p.error, "too big inline request");
	/* just under the limit with its newline: fine */
	resp_parser_free(&p);
	big[RESP_MAX_INLINE - 1] = '\n';
	ck_assert_int_eq(parse1(&p, big, n, &used), RESP_DONE);
	ck_assert_uint_eq(used, RESP_MAX_INLINE);
	free(big);
	resp_parser_free(&p);
}
END_TEST

static void expect_proto(const char *in, size_t len, const char *why)
{
	resp_parser p;
	size_t used;
	resp_parser_init(&p);
	ck_assert_int_eq(parse1(&p, in, len, &used), RESP_PROTO);
	ck_assert_msg(strcmp(p.error, why) == 0, "%s: got \"%s\"", why, p.error);
	resp_parser_free(&p);
}

#define EXPECT_PROTO(s, why) expect_proto((s), sizeof(s) - 1, (why))

START_TEST(test_malformed)
{
	EXPECT_PROTO("*x\r\n", "invalid multibulk length");
	EXPECT_PROTO("*\r\n", "invalid multibulk length");
	EXPECT_PROTO("*01\r\n", "invalid multibulk length");
	EXPECT_PROTO("*+1\r\n", "invalid multibulk length");
	EXPECT_PROTO("*1048577\r\n", "invalid multibulk length");
	EXPECT_PROTO("*99999999999999999999\r\n", "invalid multibulk length");
	EXPECT_PROTO("*1\r\n*1\r\n$1\r\na\r\n", "expected '$', got '*'");
	EXPECT_PROTO("*1\r\n:1\r\n", "expected '$', got ':'");
	EXPECT_PROTO("*1\r\n\x01", "expected '$', got '\\x01'");
	EXPECT_PROTO("*1\r\n$-1\r\n", "invalid bulk length");
	EXPECT_PROTO("*1\r\n$-0\r\n", "invalid bulk length");
	EXPECT_PROTO("*1\r\n$1x\r\n", "invalid bulk length");
	EXPECT_PROTO("*1\r\n$536870913\r\n", "invalid bulk length");
	EXPECT_PROTO("*1\r\n$3\r\nabcde", "expected CRLF after bulk data");
	EXPECT_PROTO("*1\r\n$3\r\nabc\n\r", "expected CRLF after bulk data");
	EXPECT_PROTO("*1\rx", "too big mbulk count string");
	EXPECT_PROTO("*1\r\n$3\rx", "too big bulk count string");
}
END_TEST

START_TEST(test_header_limits)
{
	resp_parser p;
	size_t used;
	size_t n = RESP_MAX_INLINE + 16;
	char *s = malloc(n);
	memset(s, '1', n);
	s[0] = '*';
	resp_parser_init(&p);
	ck_assert_int_eq(parse1(&p, s, 100, &used), RESP_MORE);
	ck_assert_int_eq(parse1(&p, s, n, &used), RESP_PROTO);
	ck_assert_str_eq(p.error, "too big mbulk count string");
	memcpy(s, "*1\r\n$", 5);
	resp_parser_free(&p);
	ck_assert_int_eq(parse1(&p, s, n, &used), RESP_PROTO);
	ck_assert_str_eq(p.error, "too big bulk count string");
	free(s);
	resp_parser_free(&p);
}
END_TEST

START_TEST(test_empty_arrays)
{
	resp_parser p;
	size_t used;
	resp_parser_init(&p);
	ck_assert_int_eq(PARSE(&p, "*0\r\n", &used), RESP_DONE);
	ck_assert_uint_eq(p.argc, 0);
	ck_assert_uint_eq(used, 4);
	ck_assert_int_eq(PARSE(&p, "*-1\r\n", &used), RESP_DONE);
	ck_assert_uint_eq(p.argc, 0);
	ck_assert_int_eq(PARSE(&p, "", &used), RESP_MORE);
	resp_parser_free(&p);
}
END_TEST

/* A huge declared array allocates as its elements arrive, not up front. */
START_TEST(test_many_args)
{
	resp_parser p;
	size_t used;
	size_t n = 100000;
	resp_parser_init(&p);
	char head[32];
	int hl = snprintf(head, sizeof(head), "*%zu\r\n", n);
	size_t len = (size_t)hl + n * 7;
	char *s = malloc(len);
	memcpy(s, head, (size_t)hl);
	for (size_t i = 0; i < n; i++)
		memcpy(s + hl + i * 7, "$1\r\nx\r\n", 7);
	ck_assert_int_eq(parse1(&p, s, 10, &used), RESP_MORE);
	ck_assert_int_eq(parse1(&p, s, len - 1, &used), RESP_MORE);
	ck_assert_int_eq(parse1(&p, s, len, &used), RESP_DONE);
	ck_assert_uint_eq(p.argc, n);
	ck_assert_uint_eq(used, len);
	free(s);
	/* the limit itself is accepted as a count */
	ck_assert_int_eq(PARSE(&p, "*1048576\r\n", &used), RESP_MORE);
	resp_parser_free(&p);
}
END_TEST

/* A bulk over RESP_MAX_KEEP is skipped as it arrives; the request gets the deferred error. */
START_TEST(test_discard)
{
	resp_parser p;
	size_t used, total = 0;
	char head[64];
	unsigned long long big = RESP_MAX_KEEP + 5;
	int hl = snprintf(head, sizeof(head), "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%llu\r\n", big);
	resp_parser_init(&p);
	ck_assert_int_eq(parse1(&p, head, (size_t)hl, &used), RESP_MORE);
	total += used;
	ck_assert_uint_eq(used, (size_t)hl); /* everything so far may be dropped */
	size_t chunk = 1 << 20;
	char *buf = malloc(chunk);
	memset(buf, 'v', chunk);
	unsigned long long left = big;
	while (left > 0) {
		size_t n = left < chunk ? (size_t)left : chunk;
		ck_assert_int_eq(parse1(&p, buf, n, &used), RESP_MORE);
		ck_assert_uint_eq(used, n);
		total += used;
		left -= n;
	}
	/* every byte of the header and of the value was consumed, none kept */
	ck_assert_uint_eq(total, (size_t)hl + big);
	const char tail[] = "\r\n*1\r\n$4\r\nPING\r\n";
	ck_assert_int_eq(PARSE(&p, tail, &used), RESP_DONE);
	ck_assert_uint_eq(used, 2);
	ck_assert_uint_eq(p.argc, 0);
	ck_assert(p.deferred != NULL && strncmp(p.deferred, "ERR argument too long", 21) == 0);
	/* and the connection goes on */
	ck_assert_int_eq(parse1(&p, tail + 2, sizeof(tail) - 3, &used), RESP_DONE);
	ck_assert(p.deferred == NULL);
	assert_arg(&p, 0, "PING");
	/* a too-long bulk followed by more arguments: all skipped */
	resp_parser_free(&p);
	hl = snprintf(head, sizeof(head), "*3\r\n$%llu\r\n", big);
	ck_assert_int_eq(parse1(&p, head, (size_t)hl, &used), RESP_MORE);
	left = big + 2;
	while (left > 0) {
		size_t n = left < chunk ? (size_t)left : chunk;
		ck_assert_int_eq(parse1(&p, buf, n, &used), RESP_MORE);
		left -= n;
	}
	ck_assert_int_eq(PARSE(&p, "$2\r\nab\r\n$", &used), RESP_MORE);
	ck_assert_uint_eq(used, 8); /* the partial header is kept */
	ck_assert_int_eq(PARSE(&p, "$1\r\nc\r\n", &used), RESP_DONE);
	ck_assert(p.deferred != NULL);
	free(buf);
	resp_parser_free(&p);
}
END_TEST

/* Strict: @in alone is a protocol error saying @why. */
static void strict_refuses(const char *in, size_t len, const char *why)
{
	resp_parser p;
	size_t used;
	resp_parser_init(&p);
	p.strict = true;
	ck_assert_int_eq(parse1(&p, in, len, &used), RESP_PROTO);
	ck_assert_str_eq(p.error, why);
	resp_parser_free(&p);
}

START_TEST(test_strict)
{
	resp_parser p;
	size_t used;
	resp_parser_init(&p);
	p.strict = true;
	ck_assert_int_eq(PARSE(&p, "*3\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$2\r\npw\r\n", &used),
	                 RESP_DONE);
	ck_assert_int_eq(PARSE(&p, "AUTH a b c d e f g h i\r\n", &used), RESP_DONE);
	ck_assert_uint_eq(p.argc, RESP_NOAUTH_ARGS);
	resp_parser_free(&p);
	/* refused from the header on: nothing to wait or allocate for */
	strict_refuses("*11\r\n", 5, "unauthenticated multibulk length");
	strict_refuses("*1000000\r\n", 10, "unauthenticated multibulk length");
	strict_refuses("*1\r\n$16385\r\n", 13, "unauthenticated bulk length");
	strict_refuses("AUTH a b c d e f g h i j\r\n", 26, "unauthenticated multibulk length");
	char *line = malloc(RESP_NOAUTH_BULK + 1);
	ck_assert_ptr_nonnull(line);
	memset(line, 'x', RESP_NOAUTH_BULK + 1);
	strict_refuses(line, RESP_NOAUTH_BULK + 1, "too big inline request");
	line[0] = '*';
	strict_refuses(line, RESP_NOAUTH_BULK + 1, "too big mbulk count string");
	free(line);
	/* the largest strict bulk passes */
	resp_parser_init(&p);
	p.strict = true;
	char *req = malloc(RESP_NOAUTH_BULK + 32);
	ck_assert_ptr_nonnull(req);
	int n = sprintf(req, "*1\r\n$%zu\r\n", RESP_NOAUTH_BULK);
	memset(req + n, 'y', RESP_NOAUTH_BULK);
	memcpy(req + n + RESP_NOAUTH_BULK, "\r\n", 2);
	ck_assert_int_eq(parse1(&p, req, (size_t)n + RESP_NOAUTH_BULK + 2, &used), RESP_DONE);
	ck_assert_uint_eq(p.argv[0].len, RESP_NOAUTH_BULK);
	free(req);
	resp_parser_free(&p);
}
END_TEST

START_TEST(test_encoder)
{
	resp_buf b = {0};
	resp_add_simple(&b, "OK");
	resp_add_error(&b, "ERR bad\r\nthing %d", 7);
	resp_add_int(&b, -42);
	resp_add_bulk(&b, "a\0b", 3);
	resp_add_null(&b, 2);
	resp_add_null(&b, 3);
	resp_add_array(&b, 2);
	resp_add_map(&b, 1, 2);
	resp_add_map(&b, 1, 3);
	const char want[] = "+OK\r\n-ERR bad  thing 7\r\n:-42\r\n$3\r\na\0b\r\n$-1\r\n_\r\n*2\r\n"
	                    "*2\r\n%1\r\n";
	ck_assert_uint_eq(b.len, sizeof(want) - 1);
	ck_assert(memcmp(b.p, want, b.len) == 0);
	ck_assert(!b.oom);
	resp_buf_free(&b);
}
END_TEST

START_TEST(test_glob)
{
	ck_assert(resp_glob_match("user:*", 6, "user:1", 6, false));
	ck_assert(!resp_glob_match("user:*", 6, "usr:1", 5, false));
	ck_assert(resp_glob_match("*", 1, "", 0, false));
	ck_assert(resp_glob_match("a?c", 3, "abc", 3, false));
	ck_assert(!resp_glob_match("a?c", 3, "ac", 2, false));
	ck_assert(resp_glob_match("[a-c]x", 6, "bx", 2, false));
	ck_assert(!resp_glob_match("[^a-c]x", 7, "bx", 2, false));
	ck_assert(resp_glob_match("a\\*", 3, "a*", 2, false));
	ck_assert(!resp_glob_match("a\\*", 3, "ab", 2, false));
	ck_assert(resp_glob_match("*b*d", 4, "abcbxd", 6, false));
	ck_assert(resp_glob_match("MAX*", 4, "max_wal_size", 12, true));
	ck_assert(!resp_glob_match("MAX*", 4, "max_wal_size", 12, false));
	ck_assert(resp_glob_match("[", 1, "x", 1, false) == false);
}
END_TEST

START_TEST(test_arg_helpers)
{
	long long v;
	resp_arg a = {"123", 3}, neg = {"-5", 2}, bad = {"1x", 2}, zero = {"007", 3};
	ck_assert(resp_arg_ll(&a, &v) && v == 123);
	ck_assert(resp_arg_ll(&neg, &v) && v == -5);
	ck_assert(!resp_arg_ll(&bad, &v));
	ck_assert(!resp_arg_ll(&zero, &v));
	resp_arg w = {"sEt", 3}, nul = {"se\0", 3};
	ck_assert(resp_arg_is(&w, "set"));
	ck_assert(!resp_arg_is(&nul, "set"));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("resp");
	TCase *tc = tcase_create("resp");
	tcase_add_test(tc, test_array);
	tcase_add_test(tc, test_binary_bulk);
	tcase_add_test(tc, test_every_cut);
	tcase_add_test(tc, test_buffer_moves);
	tcase_add_test(tc, test_inline);
	tcase_add_test(tc, test_inline_limit);
	tcase_add_test(tc, test_malformed);
	tcase_add_test(tc, test_header_limits);
	tcase_add_test(tc, test_empty_arrays);
	tcase_add_test(tc, test_many_args);
	tcase_add_test(tc, test_discard);
	tcase_add_test(tc, test_strict);
	tcase_add_test(tc, test_encoder);
	tcase_add_test(tc, test_glob);
	tcase_add_test(tc, test_arg_helpers);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
