/*
 * resp.h - the RESP protocol (Redis serialization protocol, versions 2 and
 * 3): a request parser and a reply encoder, pure functions over memory.
 *
 * Owns: nothing but the memory of a parser (its argument table, the copy of
 * an inline command's arguments) and of a reply buffer.  No I/O, no global
 * state, no dependency on the engine: resp.c is built alone into the
 * libFuzzer target (tests/server/fuzz_resp.c).
 *
 * Requests.  A client sends either an array of bulk strings
 * ("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n") or an inline command (a line of words,
 * as typed in telnet; double-quoted words take \n \r \t \\ \" \xHH escapes,
 * single-quoted ones \').  resp_parse() is incremental: called again on the
 * same (grown) buffer it resumes where it stopped, so a large request that
 * arrives in many reads is scanned once.
 *
 * Limits (as Redis's, except where walrus's own limits are smaller):
 *   - array length 1..RESP_MAX_ARGS; "*0" and "*-1" are empty requests;
 *   - bulk length 0..RESP_MAX_BULK; a bulk longer than RESP_MAX_KEEP (no
 *     walrus key or value can be that long) is read and discarded without
 *     being buffered, and the request gets the deferred error instead;
 *   - an inline line, or a "*N"/"$N" header line, of RESP_MAX_INLINE bytes;
 *   - strict (a client not yet authenticated, as Redis since CVE-2021-32675):
 *     at most RESP_NOAUTH_ARGS arguments of RESP_NOAUTH_BULK bytes, and lines
 *     of RESP_NOAUTH_BULK bytes, so such a client makes the caller hold a few
 *     KiB at most.
 * Anything else malformed (a nested array, a negative or non-numeric length,
 * a bulk not followed by CRLF) is a protocol error: the caller replies
 * "-ERR Protocol error: <reason>" and closes that connection.
 */
#ifndef WALRUS_RESP_H
#define WALRUS_RESP_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RESP_MAX_ARGS    ((size_t)1024 * 1024) /* elements of a request array */
#define RESP_MAX_BULK    (512ull << 20)        /* Redis's proto-max-bulk-len */
#define RESP_MAX_KEEP    ((64ull << 20) + 1)   /* larger bulks are discarded (WALRUS_MAX_VALUE) */
#define RESP_MAX_INLINE  ((size_t)64 * 1024)   /* an inline request or a header line */
#define RESP_NOAUTH_ARGS 10                    /* strict: arguments of a request */
#define RESP_NOAUTH_BULK ((size_t)16 * 1024)   /* strict: an argument, a line */

typedef struct resp_arg {
	const char *p;
	size_t len;
} resp_arg;

enum resp_status {
	RESP_DONE,  /* a request is complete: argv/argc, or deferred */
	RESP_MORE,  /* more bytes are needed */
	RESP_PROTO, /* protocol error: error[] says why; close the connection */
	RESP_NOMEM, /* out of memory */
};

typedef struct resp_parser {
	/* After RESP_DONE, until the next call: the request's arguments point
	 * into the caller's buffer (or, for inline requests, into the parser).
	 * argc 0 is an empty request (ignore it). */
	resp_arg *argv;
	size_t argc;
	/* After RESP_DONE: when not NULL the request was discarded (an argument
	 * over RESP_MAX_KEEP): reply this error and run nothing. */
	const char *deferred;
	/* After RESP_PROTO: the reason, for "-ERR Protocol error: <reason>". */
	char error[96];
	/* After RESP_MORE: the buffer length worth waiting for (a hint). */
	size_t need;
	/* Set by the caller before a call that starts a request (it is kept for
	 * the rest of it): the RESP_NOAUTH_* limits apply. */
	bool strict;
	/* private */
	size_t *off; /* argument offsets from the request's start */
	size_t cap;
	int state;     /* RS_* in resp.c */
	int64_t left;  /* array elements still to read */
	size_t pos;    /* where scanning resumes, from the request's start */
	uint64_t skip; /* discarding: bytes still to drop */
	char *copy;    /* inline arguments, unescaped */
	size_t copy_cap;
} resp_parser;

void resp_parser_init(resp_parser *p);
void resp_parser_free(resp_parser *p);
/*
 * Parses the request at the start of buf[0..len).  *used is set to the
 * number of bytes the caller must drop from the front of its buffer: after
 * RESP_DONE, the request's bytes (drop them once the request has run: argv
 * points into them); after RESP_MORE, bytes that were discarded (0 unless a
 * too-long bulk is being skipped).  Between calls that return RESP_MORE the
 * caller keeps the buffer's bytes and only appends (it may move them).
 */
int resp_parse(resp_parser *p, const char *buf, size_t len, size_t *used);

/* ---------------------------------------------------------------- replies */

/* A growable reply buffer; on allocation failure it sets oom and stops growing. */
typedef struct resp_buf {
	char *p;
	size_t len, cap;
	bool oom;
} resp_buf;

void resp_buf_free(resp_buf *b);
/* Makes room for @n more bytes; returns a pointer to them, or NULL (oom). */
char *resp_buf_reserve(resp_buf *b, size_t n);
void resp_add_raw(resp_buf *b, const void *p, size_t n);
/* "+s\r\n": @s must not contain CR or LF. */
void resp_add_simple(resp_buf *b, const char *s);
/* "-<text>\r\n" with CR/LF in the text replaced by spaces.  The text starts
 * with its error code ("ERR ...", "NOAUTH ..."). */
void resp_add_error(resp_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void resp_add_verror(resp_buf *b, const char *fmt, va_list ap);
void resp_add_int(resp_buf *b, long long v);
void resp_add_bulk(resp_buf *b, const void *p, size_t n);
void resp_add_cstr(resp_buf *b, const char *s); /* as a bulk string */
/* The null reply: "$-1" in RESP2, "_" in RESP3. */
void resp_add_null(resp_buf *b, int proto);
void resp_add_array(resp_buf *b, size_t n);
/* A map of @n pairs: "%n" in RESP3, an array of 2n elements in RESP2. */
void resp_add_map(resp_buf *b, size_t n, int proto);

/* ---------------------------------------------------------------- helpers */

/* Redis's glob-style matching (*, ?, [a-z], [^x], \x) of a binary string. */
bool resp_glob_match(const char *pat, size_t plen, const char *s, size_t slen, bool nocase);
/* Strict decimal integer of a whole argument (no sign '+', no spaces). */
bool resp_arg_ll(const resp_arg *a, long long *out);
/* Case-insensitive comparison of an argument with a word. */
bool resp_arg_is(const resp_arg *a, const char *word);

#endif /* WALRUS_RESP_H */
