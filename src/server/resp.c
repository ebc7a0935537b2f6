/*
 * resp.c - the RESP request parser and reply encoder (see resp.h).
 *
 * Interface: resp_parser_init/free, resp_parse; resp_buf_* and resp_add_*
 * encode replies; resp_glob_match, resp_arg_ll, resp_arg_is are helpers of
 * the command layer that are pure and therefore live here.
 *
 * Notes: the parser never reads past @len and never trusts a length before
 * checking it against the limits, so any byte string is a valid input (the
 * libFuzzer target feeds it arbitrary bytes in arbitrary cuts).  Offsets,
 * not pointers, are kept between calls: the caller may move its buffer.
 */
#include "server/resp.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { RS_START, RS_ARRAY, RS_DISCARD, RS_INLINE };

static const char too_long[] = "ERR argument too long: walrus keys are at most 1024 bytes and "
                               "values at most 64 MiB (67108864 bytes)";

void resp_parser_init(resp_parser *p)
{
	memset(p, 0, sizeof(*p));
}

void resp_parser_free(resp_parser *p)
{
	free(p->argv);
	free(p->off);
	free(p->copy);
	memset(p, 0, sizeof(*p));
}

static void reset(resp_parser *p)
{
	p->state = RS_START;
	p->left = 0;
	p->pos = 0;
	p->skip = 0;
}

static int proto(resp_parser *p, const char *why)
{
	snprintf(p->error, sizeof(p->error), "%s", why);
	reset(p);
	return RESP_PROTO;
}

/* Room for one more argument. */
static bool grow_args(resp_parser *p)
{
	if (p->argc < p->cap)
		return true;
	size_t cap = p->cap ? p->cap * 2 : 8;
	resp_arg *a = realloc(p->argv, cap * sizeof(*a));
	if (a == NULL)
		return false;
	p->argv = a;
	size_t *o = realloc(p->off, cap * sizeof(*o));
	if (o == NULL)
		return false;
	p->off = o;
	p->cap = cap;
	return true;
}

/* Strict decimal: optional '-', no leading zeros, at most 18 digits. */
static bool parse_ll(const char *s, size_t n, long long *out)
{
	bool neg = n > 0 && s[0] == '-';
	size_t i = neg ? 1 : 0;
	if (n == i || n - i > 18 || (s[i] == '0' && n - i > 1))
		return false;
	long long v = 0;
	for (; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (s[i] - '0');
	}
	if (neg && v == 0)
		return false; /* "-0" */
	*out = neg ? -v : v;
	return true;
}

/* The longest line: an inline request or a header. */
static size_t line_max(const resp_parser *p)
{
	return p->strict ? RESP_NOAUTH_BULK : RESP_MAX_INLINE;
}

/*
 * Finds the CRLF ending the header line that starts at @from.  Returns 1
 * with *cr at the CR, 0 when more bytes are needed, -1 when the line is
 * over the limit or the CR is not followed by LF.
 */
static int header_end(const resp_parser *p, const char *buf, size_t len, size_t from, size_t *cr)
{
	size_t max = line_max(p);
	size_t end = len - from > max ? from + max : len;
	const char *r = memchr(buf + from, '\r', end - from);
	if (r == NULL)
		return end < len || len - from >= max ? -1 : 0;
	*cr = (size_t)(r - buf);
	if (*cr + 1 >= len)
		return 0;
	return buf[*cr + 1] == '\n' ? 1 : -1;
}

static int array_header(resp_parser *p, const char *buf, size_t len, size_t *used)
{
	size_t cr;
	long long n;
	int h = header_end(p, buf, len, 1, &cr);
	if (h == 0) {
		p->need = len + 1;
		return RESP_MORE;
	}
	if (h < 0)
		return proto(p, "too big mbulk count string");
	if (!parse_ll(buf + 1, cr - 1, &n) || n > (long long)RESP_MAX_ARGS)
		return proto(p, "invalid multibulk length");
	if (p->strict && n > RESP_NOAUTH_ARGS)
		return proto(p, "unauthenticated multibulk length");
	if (n <= 0) { /* an empty request, ignored as Redis does */
		*used = cr + 2;
		reset(p);
		return RESP_DONE;
	}
	p->state = RS_ARRAY;
	p->left = n;
	p->pos = cr + 2;
	return RESP_MORE; /* the caller's loop goes on with the elements */
}

static void describe_byte(char *out, size_t n, unsigned char c)
{
	if (isprint(c))
		snprintf(out, n, "%c", c);
	else
		snprintf(out, n, "\\x%02x", c);
}

/* Parses one "$N\r\n" header at p->pos: 1 with *blen and *data, 0 for more, RESP_PROTO. */
static int bulk_header(resp_parser *p, const char *buf, size_t len, long long *blen, size_t *data)
{
	size_t cr;
	if (p->pos >= len) {
		p->need = p->pos + 1;
		return 0;
	}
	if (buf[p->pos] != '$') {
		char c[8], why[40];
		describe_byte(c, sizeof(c), (unsigned char)buf[p->pos]);
		snprintf(why, sizeof(why), "expected '$', got '%s'", c);
		return proto(p, why);
	}
	int h = header_end(p, buf, len, p->pos + 1, &cr);
	if (h == 0) {
		p->need = len + 1;
		return 0;
	}
	if (h < 0)
		return proto(p, "too big bulk count string");
	if (!parse_ll(buf + p->pos + 1, cr - p->pos - 1, blen) || *blen < 0 ||
	    (unsigned long long)*blen > RESP_MAX_BULK)
		return proto(p, "invalid bulk length");
	if (p->strict && (unsigned long long)*blen > RESP_NOAUTH_BULK)
		return proto(p, "unauthenticated bulk length");
	*data = cr + 2;
	return 1;
}

/* Discard mode: drops bulks until the array ends.  Everything before p->pos is dropped. */
static int discard(resp_parser *p, const char *buf, size_t len, size_t *used)
{
	for (;;) {
		if (p->skip > 0) {
			size_t avail = len - p->pos;
			if (avail < p->skip) {
				p->skip -= avail;
				*used = len;
				p->pos = 0;
				p->need = 1;
				return RESP_MORE;
			}
			p->pos += (size_t)p->skip;
			p->skip = 0;
			p->left--;
		}
		if (p->left == 0) {
			*used = p->pos;
			reset(p);
			p->argc = 0;
			return RESP_DONE;
		}
		long long blen;
		size_t data;
		int r = bulk_header(p, buf, len, &blen, &data);
		if (r == RESP_PROTO)
			return r;
		if (r == 0) {
			*used = p->pos; /* keep the partial header only */
			p->need = len - p->pos + 1;
			p->pos = 0;
			return RESP_MORE;
		}
		p->skip = (uint64_t)blen + 2;
		p->pos = data;
	}
}

static int array_elements(resp_parser *p, const char *buf, size_t len, size_t *used)
{
	while (p->left > 0) {
		long long blen;
		size_t data;
		int r = bulk_header(p, buf, len, &blen, &data);
		if (r != 1)
			return r == 0 ? RESP_MORE : r;
		if ((unsigned long long)blen >= RESP_MAX_KEEP) {
			p->deferred = too_long;
			p->state = RS_DISCARD;
			p->skip = (uint64_t)blen + 2;
			p->pos = data;
			return discard(p, buf, len, used);
		}
		size_t end = data + (size_t)blen;
		if (len < end + 2) {
			p->need = end + 2;
			return RESP_MORE;
		}
		if (buf[end] != '\r' || buf[end + 1] != '\n')
			return proto(p, "expected CRLF after bulk data");
		if (!grow_args(p))
			return RESP_NOMEM;
		p->off[p->argc] = data;
		p->argv[p->argc].len = (size_t)blen;
		p->argc++;
		p->left--;
		p->pos = end + 2;
	}
	for (size_t i = 0; i < p->argc; i++)
		p->argv[i].p = buf + p->off[i];
	*used = p->pos;
	reset(p);
	return RESP_DONE;
}

/* ---------------------------------------------------------------- inline requests */

static int hexdig(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = tolower(c);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static char unescape(char c)
{
	switch (c) {
	case 'n':
		return '\n';
	case 'r':
		return '\r';
	case 't':
		return '\t';
	case 'b':
		return '\b';
	case 'a':
		return '\a';
	default:
		return c;
	}
}

/*
 * Reads one quoted word starting after its opening quote at s[*i]; appends
 * its bytes at *o.  Returns false on unbalanced quotes.
 */
static bool quoted_word(const char *s, size_t n, size_t *i, char q, char *out, size_t *o)
{
	size_t k = *i;
	for (;;) {
		if (k >= n)
			return false;
		char c = s[k];
		if (q == '"' && c == '\\' && k + 3 < n && s[k + 1] == 'x' &&
		    hexdig(s[k + 2]) >= 0 && hexdig(s[k + 3]) >= 0) {
			out[(*o)++] = (char)(hexdig(s[k + 2]) * 16 + hexdig(s[k + 3]));
			k += 4;
		} else if (q == '"' && c == '\\' && k + 1 < n) {
			out[(*o)++] = unescape(s[k + 1]);
			k += 2;
		} else if (q == '\'' && c == '\\' && k + 1 < n && s[k + 1] == '\'') {
			out[(*o)++] = '\'';
			k += 2;
		} else if (c == q) {
			k++;
			/* The closing quote must end the word. */
			if (k < n && !isspace((unsigned char)s[k]))
				return false;
			*i = k;
			return true;
		} else {
			out[(*o)++] = c;
			k++;
		}
	}
}

/* Splits an inline line into words (sdssplitargs' rules) into p->copy. */
static int split_inline(resp_parser *p, const char *s, size_t n)
{
	if (p->copy_cap < n + 1) {
		char *c = realloc(p->copy, n + 1);
		if (c == NULL)
			return RESP_NOMEM;
		p->copy = c;
		p->copy_cap = n + 1;
	}
	size_t i = 0, o = 0;
	p->argc = 0;
	for (;;) {
		while (i < n && isspace((unsigned char)s[i]))
			i++;
		if (i >= n)
			break;
		if (p->strict && p->argc >= RESP_NOAUTH_ARGS)
			return proto(p, "unauthenticated multibulk length");
		if (!grow_args(p))
			return RESP_NOMEM;
		size_t start = o;
		while (i < n && !isspace((unsigned char)s[i])) {
			char c = s[i++];
			if (c == '"' || c == '\'') {
				if (!quoted_word(s, n, &i, c, p->copy, &o))
					return proto(p, "unbalanced quotes in request");
			} else {
				p->copy[o++] = c;
			}
		}
		p->off[p->argc] = start;
		p->argv[p->argc].len = o - start;
		p->argc++;
	}
	for (size_t k = 0; k < p->argc; k++)
		p->argv[k].p = p->copy + p->off[k];
	return RESP_DONE;
}

static int inline_request(resp_parser *p, const char *buf, size_t len, size_t *used)
{
	size_t max = line_max(p);
	size_t lim = len > max ? max : len;
	const char *nl = p->pos < lim ? memchr(buf + p->pos, '\n', lim - p->pos) : NULL;
	if (nl == NULL) {
		if (len >= max)
			return proto(p, "too big inline request");
		p->pos = len;
		p->need = len + 1;
		return RESP_MORE;
	}
	size_t n = (size_t)(nl - buf);
	size_t line = n > 0 && buf[n - 1] == '\r' ? n - 1 : n;
	int r = split_inline(p, buf, line);
	if (r != RESP_DONE)
		return r;
	*used = n + 1;
	reset(p);
	return RESP_DONE;
}

/* ---------------------------------------------------------------- resp_parse */

int resp_parse(resp_parser *p, const char *buf, size_t len, size_t *used)
{
	*used = 0;
	p->deferred = NULL;
	p->need = 0;
	if (p->state == RS_START) {
		p->argc = 0;
		if (len == 0) {
			p->need = 1;
			return RESP_MORE;
		}
		if (buf[0] != '*') {
			p->state = RS_INLINE;
		} else {
			int r = array_header(p, buf, len, used);
			if (r != RESP_MORE || p->state != RS_ARRAY)
				return r;
		}
	}
	switch (p->state) {
	case RS_INLINE:
		return inline_request(p, buf, len, used);
	case RS_ARRAY:
		return array_elements(p, buf, len, used);
	default:
		p->deferred = too_long;
		return discard(p, buf, len, used);
	}
}

/* ---------------------------------------------------------------- replies */

void resp_buf_free(resp_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

char *resp_buf_reserve(resp_buf *b, size_t n)
{
	if (b->oom)
		return NULL;
	if (b->cap - b->len < n) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap - b->len < n) {
			if (cap > SIZE_MAX / 2) {
				b->oom = true;
				return NULL;
			}
			cap *= 2;
		}
		char *p = realloc(b->p, cap);
		if (p == NULL) {
			b->oom = true;
			return NULL;
		}
		b->p = p;
		b->cap = cap;
	}
	return b->p + b->len;
}

void resp_add_raw(resp_buf *b, const void *p, size_t n)
{
	char *d = resp_buf_reserve(b, n);
	if (d == NULL)
		return;
	if (n > 0)
		memcpy(d, p, n);
	b->len += n;
}

/* A type byte, a number, CRLF. */
static void add_num(resp_buf *b, char type, long long v)
{
	char *d = resp_buf_reserve(b, 24);
	if (d != NULL)
		b->len += (size_t)snprintf(d, 24, "%c%lld\r\n", type, v);
}

void resp_add_simple(resp_buf *b, const char *s)
{
	size_t n = strlen(s);
	char *d = resp_buf_reserve(b, n + 3);
	if (d == NULL)
		return;
	d[0] = '+';
	memcpy(d + 1, s, n); /* NOLINT(bugprone-not-null-terminated-result): RESP, not C */
	d[n + 1] = '\r';
	d[n + 2] = '\n';
	b->len += n + 3;
}

void resp_add_verror(resp_buf *b, const char *fmt, va_list ap)
{
	char text[512];
	int n = vsnprintf(text, sizeof(text), fmt, ap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof(text))
		n = sizeof(text) - 1;
	for (int i = 0; i < n; i++)
		if (text[i] == '\r' || text[i] == '\n')
			text[i] = ' ';
	char *d = resp_buf_reserve(b, (size_t)n + 3);
	if (d == NULL)
		return;
	d[0] = '-';
	memcpy(d + 1, text, (size_t)n);
	d[n + 1] = '\r';
	d[n + 2] = '\n';
	b->len += (size_t)n + 3;
}

void resp_add_error(resp_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	resp_add_verror(b, fmt, ap);
	va_end(ap);
}

void resp_add_int(resp_buf *b, long long v)
{
	add_num(b, ':', v);
}

void resp_add_bulk(resp_buf *b, const void *p, size_t n)
{
	add_num(b, '$', (long long)n);
	resp_add_raw(b, p, n);
	resp_add_raw(b, "\r\n", 2);
}

void resp_add_cstr(resp_buf *b, const char *s)
{
	resp_add_bulk(b, s, strlen(s));
}

void resp_add_null(resp_buf *b, int proto)
{
	if (proto >= 3)
		resp_add_raw(b, "_\r\n", 3);
	else
		resp_add_raw(b, "$-1\r\n", 5);
}

void resp_add_array(resp_buf *b, size_t n)
{
	add_num(b, '*', (long long)n);
}

void resp_add_map(resp_buf *b, size_t n, int proto)
{
	if (proto >= 3)
		add_num(b, '%', (long long)n);
	else
		add_num(b, '*', (long long)n * 2);
}

/* ---------------------------------------------------------------- helpers */

static int fold(int c, bool nocase)
{
	return nocase ? tolower(c) : c;
}

/* A [...] class at pat[0..plen) (after the '['): matches @c? *consumed = bytes through ']'. */
static bool class_match(const char *pat, size_t plen, unsigned char c, bool nocase,
                        size_t *consumed)
{
	size_t i = 0;
	bool neg = i < plen && pat[i] == '^', match = false;
	if (neg)
		i++;
	for (; i < plen && pat[i] != ']'; i++) {
		if (pat[i] == '\\' && i + 1 < plen) {
			i++;
			match |= fold(pat[i], nocase) == fold(c, nocase);
		} else if (i + 2 < plen && pat[i + 1] == '-' && pat[i + 2] != ']') {
			int lo = fold((unsigned char)pat[i], nocase);
			int hi = fold((unsigned char)pat[i + 2], nocase);
			if (lo > hi) {
				int t = lo;
				lo = hi;
				hi = t;
			}
			match |= fold(c, nocase) >= lo && fold(c, nocase) <= hi;
			i += 2;
		} else {
			match |= fold((unsigned char)pat[i], nocase) == fold(c, nocase);
		}
	}
	*consumed = i < plen ? i + 1 : i; /* an unterminated class runs to the end */
	return neg ? !match : match;
}

bool resp_glob_match(const char *pat, size_t plen, const char *s, size_t slen, bool nocase)
{
	/* Iterative with one backtrack point for the last '*': linear in practice. */
	size_t pi = 0, si = 0, star_p = SIZE_MAX, star_s = 0;
	while (si < slen) {
		if (pi < plen && pat[pi] == '*') {
			while (pi < plen && pat[pi] == '*')
				pi++;
			if (pi == plen)
				return true;
			star_p = pi;
			star_s = si;
			continue;
		}
		bool ok = false;
		size_t step = 1;
		if (pi < plen) {
			unsigned char c = (unsigned char)s[si];
			if (pat[pi] == '?') {
				ok = true;
			} else if (pat[pi] == '[') {
				ok = class_match(pat + pi + 1, plen - pi - 1, c, nocase, &step);
				step++;
			} else if (pat[pi] == '\\' && pi + 1 < plen) {
				ok = fold(pat[pi + 1], nocase) == fold(c, nocase);
				step = 2;
			} else {
				ok = fold((unsigned char)pat[pi], nocase) == fold(c, nocase);
			}
		}
		if (ok) {
			pi += step;
			si++;
		} else if (star_p != SIZE_MAX) {
			pi = star_p;
			si = ++star_s;
		} else {
			return false;
		}
	}
	while (pi < plen && pat[pi] == '*')
		pi++;
	return pi == plen;
}

bool resp_arg_ll(const resp_arg *a, long long *out)
{
	return parse_ll(a->p, a->len, out);
}

bool resp_arg_is(const resp_arg *a, const char *word)
{
	size_t n = strlen(word);
	return a->len == n && strncasecmp(a->p, word, n) == 0;
}
