/*
 * cmd_kv.c - the key-value subcommands: put, get, del, incr, scan,
 * checkpoint, stats, verify.  Keys and values are taken as they are, or as hexadecimal
 * with --hex (any binary data round-trips that way).  get prints the value
 * as it is (or --hex); scan escapes what is not printable ASCII as
 * redis-cli does, so that a line is always one pair (--raw: as they are,
 * --hex: hexadecimal).  Writes from the command line are durable before the
 * command returns.
 */
#include "tool.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- arguments */

typedef struct kv_args {
	bool hex, raw, json;
	const char *pos[2]; /* positional arguments */
	int npos;
	const char *from, *to;
	long long limit;
	long long by;     /* incr's --by */
	walrus_space *sp; /* -s NAME's key space, NULL: the default one */
} kv_args;

static int parse(int argc, char **argv, int want_pos, kv_args *a, const char *usage)
{
	*a = (kv_args){0};
	a->limit = -1;
	a->by = 1;
	for (int i = 1; i < argc; i++) {
		const char *s = argv[i];
		bool more = i + 1 < argc;
		if (strcmp(s, "--hex") == 0)
			a->hex = true;
		else if (strcmp(s, "--raw") == 0)
			a->raw = true;
		else if (strcmp(s, "--json") == 0)
			a->json = true;
		else if (strcmp(s, "--from") == 0 && more)
			a->from = argv[++i];
		else if (strcmp(s, "--to") == 0 && more)
			a->to = argv[++i];
		else if (strcmp(s, "--limit") == 0 && more) {
			char *end;
			a->limit = strtoll(argv[++i], &end, 10);
			if (*end != '\0' || a->limit < 0)
				goto bad;
		} else if (strcmp(s, "--by") == 0 && more) {
			char *end;
			errno = 0;
			a->by = strtoll(argv[++i], &end, 10);
			if (*end != '\0' || end == argv[i] || errno != 0)
				goto bad;
		} else if (strcmp(s, "--") == 0 && more) {
			while (++i < argc && a->npos < 2)
				a->pos[a->npos++] = argv[i];
			break;
		} else if ((s[0] != '-' || s[1] == '\0') && a->npos < 2)
			a->pos[a->npos++] = s; /* "-" alone is a key */
		else
			goto bad;
	}
	if (a->npos == want_pos && !(a->hex && a->raw))
		return 0;
bad:
	fprintf(stderr, "usage: walrus -D DIR %s\n", usage);
	return TOOL_EXIT_USAGE;
}

/* Decodes @s (hex when @hex) into a malloc'd buffer; returns 0 or an exit code. */
static int decode(const char *s, bool hex, char **out, size_t *len)
{
	size_t n = strlen(s);
	if (!hex) {
		*out = strdup(s);
		*len = n;
		return *out ? 0 : TOOL_EXIT_ENGINE;
	}
	*out = malloc(n / 2 + 1);
	if (*out == NULL)
		return TOOL_EXIT_ENGINE;
	if (!tool_hex_decode(s, n, *out)) {
		free(*out);
		*out = NULL;
		goto bad;
	}
	*len = n / 2;
	return 0;
bad:
	fprintf(stderr, "walrus: \"%s\" is not hexadecimal (--hex)\n", s);
	return TOOL_EXIT_USAGE;
}

static void print_bytes(const void *p, size_t n, bool hex)
{
	const unsigned char *b = p;
	if (!hex) {
		fwrite(b, 1, n, stdout);
		return;
	}
	for (size_t i = 0; i < n; i++)
		printf("%02x", b[i]);
}

/* Printable ASCII as it is, the rest as redis-cli quotes it: no TAB or newline left. */
static void print_escaped(const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = b[i];
		switch (c) {
		case '\\':
			fputs("\\\\", stdout);
			break;
		case '\n':
			fputs("\\n", stdout);
			break;
		case '\r':
			fputs("\\r", stdout);
			break;
		case '\t':
			fputs("\\t", stdout);
			break;
		case '\a':
			fputs("\\a", stdout);
			break;
		case '\b':
			fputs("\\b", stdout);
			break;
		default:
			if (c >= 0x20 && c < 0x7f)
				putchar(c);
			else
				printf("\\x%02x", c);
		}
	}
}

/* Opens the database (and -s's key space), runs @fn, closes; the first failure decides
 * the exit code. */
static int with_db(tool_ctx *ctx, bool create, int (*fn)(walrus *, const kv_args *), kv_args *a)
{
	walrus *db;
	int rc = tool_open(ctx, create, &db);
	if (rc != 0)
		return rc;
	rc = tool_space(ctx, db, &a->sp);
	if (rc == 0)
		rc = fn(db, a);
	int crc = walrus_close(db);
	if (rc == 0 && crc != WALRUS_OK)
		rc = tool_fail(crc, "close");
	return rc;
}

/* The shape of every subcommand here: --help, arguments, the call on an open database. */
static int run(tool_ctx *ctx, int argc, char **argv, int npos, bool create, const char *u,
               int (*fn)(walrus *, const kv_args *))
{
	kv_args a;
	if (tool_wants_help(argc, argv)) {
		printf("usage: walrus -D DIR %s\n", u);
		return 0;
	}
	int rc = parse(argc, argv, npos, &a, u);
	return rc ? rc : with_db(ctx, create, fn, &a);
}

/* ---------------------------------------------------------------- put, get, del */

static int do_put(walrus *db, const kv_args *a)
{
	char *k = NULL, *v = NULL;
	size_t kl, vl;
	int rc = decode(a->pos[0], a->hex, &k, &kl);
	if (rc == 0)
		rc = decode(a->pos[1], a->hex, &v, &vl);
	if (rc == 0) {
		int e = walrus_put_in(db, a->sp, k, kl, v, vl, WALRUS_SYNC);
		rc = e == WALRUS_OK ? 0 : tool_fail(e, "put");
	}
	free(k);
	free(v);
	return rc;
}

static int do_get(walrus *db, const kv_args *a)
{
	char *k;
	size_t kl, vl;
	void *v;
	int rc = decode(a->pos[0], a->hex, &k, &kl);
	if (rc != 0)
		return rc;
	int e = walrus_get_in(db, a->sp, k, kl, &v, &vl);
	free(k);
	if (e == WALRUS_ENOTFOUND)
		return TOOL_EXIT_NOTFOUND; /* quiet, as grep: the exit code says it */
	if (e != WALRUS_OK)
		return tool_fail(e, "get");
	print_bytes(v, vl, a->hex);
	putchar('\n');
	walrus_free(v);
	return fflush(stdout) == 0 ? 0 : TOOL_EXIT_ENGINE;
}

static int do_del(walrus *db, const kv_args *a)
{
	char *k;
	size_t kl;
	int rc = decode(a->pos[0], a->hex, &k, &kl);
	if (rc != 0)
		return rc;
	int e = walrus_delete_in(db, a->sp, k, kl, WALRUS_SYNC);
	free(k);
	if (e == WALRUS_ENOTFOUND)
		return TOOL_EXIT_NOTFOUND;
	return e == WALRUS_OK ? 0 : tool_fail(e, "del");
}

/* The integer in @v (no sign other than '-', no spaces), as INCR takes it. */
static bool parse_integer(const char *v, size_t vl, long long *n)
{
	char buf[24];
	if (vl == 0 || vl > 20)
		return false;
	memcpy(buf, v, vl);
	buf[vl] = '\0';
	char *end;
	errno = 0;
	*n = strtoll(buf, &end, 10);
	return *end == '\0' && errno == 0 && (buf[0] == '-' || (buf[0] >= '0' && buf[0] <= '9'));
}

/* One try of incr: the new value in *n; WALRUS_ECONFLICT asks for another. */
static int incr_once(walrus *db, const kv_args *a, const char *k, size_t kl, long long *n,
                     bool *bad)
{
	walrus_txn *t;
	char buf[32];
	void *v = NULL;
	size_t vl;
	int e = walrus_txn_begin(db, 0, &t);
	if (e != WALRUS_OK)
		return e;
	*n = 0;
	e = walrus_txn_get_in(t, a->sp, k, kl, &v, &vl);
	if (e == WALRUS_OK && !parse_integer(v, vl, n))
		e = WALRUS_ETOOBIG;
	walrus_free(v);
	if (e == WALRUS_ENOTFOUND)
		e = WALRUS_OK;
	long long by = a->by;
	*bad = e == WALRUS_ETOOBIG || (e == WALRUS_OK && ((by > 0 && *n > LLONG_MAX - by) ||
	                                                  (by < 0 && *n < LLONG_MIN - by)));
	if (e == WALRUS_OK && !*bad) {
		*n += by;
		int len = snprintf(buf, sizeof(buf), "%lld", *n);
		e = walrus_txn_put_in(t, a->sp, k, kl, buf, (size_t)len);
	}
	if (e == WALRUS_OK && !*bad)
		e = walrus_txn_commit(t, WALRUS_SYNC);
	walrus_txn_free(t);
	return *bad ? WALRUS_OK : e;
}

static int do_incr(walrus *db, const kv_args *a)
{
	char *k;
	size_t kl;
	int rc = decode(a->pos[0], a->hex, &k, &kl);
	if (rc != 0)
		return rc;
	long long n = 0;
	bool bad = false;
	int e;
	while ((e = incr_once(db, a, k, kl, &n, &bad)) == WALRUS_ECONFLICT)
		; /* another writer changed it since our read: read it again */
	free(k);
	if (bad) {
		fprintf(stderr,
		        "walrus incr: the value of \"%s\" is not an integer, or the result "
		        "would overflow\n",
		        a->pos[0]);
		return TOOL_EXIT_ENGINE;
	}
	if (e != WALRUS_OK)
		return tool_fail(e, "incr");
	printf("%lld\n", n);
	return fflush(stdout) == 0 ? 0 : TOOL_EXIT_ENGINE;
}

int cmd_incr(tool_ctx *ctx, int argc, char **argv)
{
	return run(ctx, argc, argv, 1, true,
	           "incr [--hex] [--by N] KEY   (adds N, default 1, to the integer in KEY in a "
	           "transaction, durable when it returns; an absent KEY is 0; prints the new "
	           "value)",
	           do_incr);
}

int cmd_put(tool_ctx *ctx, int argc, char **argv)
{
	return run(ctx, argc, argv, 2, true, "put [--hex] KEY VALUE   (durable when it returns)",
	           do_put);
}

int cmd_get(tool_ctx *ctx, int argc, char **argv)
{
	return run(ctx, argc, argv, 1, false,
	           "get [--hex] KEY   (the value as it is, or --hex; exit 1 when absent)", do_get);
}

int cmd_del(tool_ctx *ctx, int argc, char **argv)
{
	return run(ctx, argc, argv, 1, false, "del [--hex] KEY   (exit 1 when absent)", do_del);
}

/* ---------------------------------------------------------------- scan */

static void print_field(const void *p, size_t n, const kv_args *a)
{
	if (a->hex || a->raw)
		print_bytes(p, n, a->hex);
	else
		print_escaped(p, n);
}

static int scan_loop(walrus_iter *it, const kv_args *a)
{
	long long n = 0;
	int e = WALRUS_OK;
	while (walrus_iter_valid(it) && (a->limit < 0 || n < a->limit)) {
		const void *k, *v;
		size_t kl, vl;
		walrus_iter_key(it, &k, &kl);
		walrus_iter_value(it, &v, &vl);
		print_field(k, kl, a);
		putchar('\t');
		print_field(v, vl, a);
		putchar('\n');
		n++;
		e = walrus_iter_next(it);
		if (e != WALRUS_OK)
			return tool_fail(e, "scan");
	}
	return fflush(stdout) == 0 ? 0 : TOOL_EXIT_ENGINE;
}

static int do_scan(walrus *db, const kv_args *a)
{
	char *lo = NULL, *hi = NULL;
	size_t lol = 0, hil = 0;
	int rc = a->from ? decode(a->from, a->hex, &lo, &lol) : 0;
	if (rc == 0 && a->to)
		rc = decode(a->to, a->hex, &hi, &hil);
	walrus_iter *it = NULL;
	if (rc == 0) {
		int e = walrus_iter_open_in(db, a->sp, lo, lol, hi, hil, &it);
		rc = e == WALRUS_OK ? scan_loop(it, a) : tool_fail(e, "scan");
	}
	walrus_iter_close(it);
	free(lo);
	free(hi);
	return rc;
}

int cmd_scan(tool_ctx *ctx, int argc, char **argv)
{
	return run(ctx, argc, argv, 0, false,
	           "scan [--from KEY] [--to KEY] [--limit N] [--hex | --raw]\n"
	           "  prints KEY<TAB>VALUE lines in key order over [from, to); bytes that are\n"
	           "  not printable ASCII are escaped as redis-cli does (\\n \\r \\t \\\\ "
	           "\\xHH),\n"
	           "  so that a line is one pair; --raw prints them as they are, --hex all in\n"
	           "  hexadecimal",
	           do_scan);
}

/* ---------------------------------------------------------------- checkpoint, stats, verify */

static int do_checkpoint(walrus *db, const kv_args *a)
{
	(void)a;
	int e = walrus_checkpoint(db);
	return e == WALRUS_OK ? 0 : tool_fail(e, "checkpoint");
}

static int do_compact(walrus *db, const kv_args *a)
{
	(void)a;
	walrus_compact_stats st;
	int e = walrus_compact(db, &st);
	if (e != WALRUS_OK)
		return tool_fail(e, "compact");
	printf("leaves merged %llu, poured %llu; pages moved %llu; blocks in use %llu -> %llu; "
	       "given back %llu (%.1f MiB)\n",
	       (unsigned long long)st.leaves_merged, (unsigned long long)st.leaves_poured,
	       (unsigned long long)st.pages_moved, (unsigned long long)st.blocks_before,
	       (unsigned long long)st.blocks_after, (unsigned long long)st.blocks_given_back,
	       (double)st.blocks_given_back * (double)WR_PAGE_SIZE / 1048576.0);
	return 0;
}

int cmd_compact(tool_ctx *ctx, int argc, char **argv)
{
	return run(ctx, argc, argv, 0, false,
	           "compact   (pack the leaves, move the tree to the front of its file and give "
	           "the\n  unused tail back to the file system; other writers wait for one small "
	           "batch at a time)",
	           do_compact);
}

int cmd_checkpoint(tool_ctx *ctx, int argc, char **argv)
{
	return run(ctx, argc, argv, 0, false,
	           "checkpoint   (an immediate checkpoint; returns when it is complete)",
	           do_checkpoint);
}

static int do_switch_wal(walrus *db, const kv_args *a)
{
	(void)a;
	uint64_t lsn;
	int e = walrus_switch_wal(db, &lsn);
	if (e != WALRUS_OK)
		return tool_fail(e, "switch-wal");
	if (lsn == 0)
		printf("nothing written since the current segment began: no switch\n");
	else
		printf("%X/%08X\n", (unsigned)(lsn >> 32), (unsigned)lsn);
	return 0;
}

int cmd_switch_wal(tool_ctx *ctx, int argc, char **argv)
{
	return run(ctx, argc, argv, 0, false,
	           "switch-wal   (end the current WAL segment so it can be archived; prints "
	           "where the next one starts)",
	           do_switch_wal);
}

static int do_restore_point(walrus *db, const kv_args *a)
{
	uint64_t lsn;
	int e = walrus_restore_point(db, a->pos[0], &lsn);
	if (e != WALRUS_OK)
		return tool_fail(e, "restore-point");
	printf("%X/%08X\n", (unsigned)(lsn >> 32), (unsigned)lsn);
	return 0;
}

int cmd_restore_point(tool_ctx *ctx, int argc, char **argv)
{
	return run(ctx, argc, argv, 1, false,
	           "restore-point NAME   (a named point in the WAL: walrus restore "
	           "--target-name NAME stops after it; prints its LSN)",
	           do_restore_point);
}

/*
 * Human form of the statistics' JSON: one "section.name value" line per
 * figure, an array's members numbered ("spaces.list.0.name").  Returns the
 * end of the value at @p, or NULL on JSON it does not expect.
 */
static const char *print_flat_value(const char *p, char *path, size_t len, size_t cap)
{
	if (*p == '{' || *p == '[') {
		bool obj = *p == '{';
		char close = obj ? '}' : ']';
		for (unsigned i = 0; p != NULL; i++) {
			p++;
			if (*p == close && i == 0) /* empty: the section is there, with nothing */
				printf("%-40s %s\n", path, obj ? "{}" : "[]");
			if (*p == close)
				return p + 1;
			int n;
			if (obj) {
				const char *e = *p == '"' ? strchr(p + 1, '"') : NULL;
				if (e == NULL || e[1] != ':')
					return NULL;
				n = snprintf(path + len, cap - len, "%s%.*s", len ? "." : "",
				             (int)(e - p - 1), p + 1);
				p = e + 2;
			} else {
				n = snprintf(path + len, cap - len, "%s%u", len ? "." : "", i);
			}
			if (n < 0 || (size_t)n >= cap - len)
				return NULL;
			p = print_flat_value(p, path, len + (size_t)n, cap);
			path[len] = '\0';
			if (p == NULL || *p == close)
				return p == NULL ? NULL : p + 1;
			if (*p != ',')
				return NULL;
		}
		return NULL;
	}
	const char *end = p;
	if (*end == '"') /* a string may hold ',' or '}', and escaped quotes */
		for (end++; *end && *end != '"'; end++)
			end += end[0] == '\\' && end[1] != '\0';
	while (*end && *end != ',' && *end != '}' && *end != ']')
		end++;
	printf("%-40s %.*s\n", path, (int)(end - p), p);
	return end;
}

static void print_flat(const char *j)
{
	char path[256] = "";
	(void)print_flat_value(j, path, 0, sizeof(path));
}

static int do_stats(walrus *db, const kv_args *a)
{
	char *json;
	int e = walrus_stats(db, &json);
	if (e != WALRUS_OK)
		return tool_fail(e, "stats");
	if (a->json)
		printf("%s\n", json);
	else
		print_flat(json);
	walrus_free(json);
	return fflush(stdout) == 0 ? 0 : TOOL_EXIT_ENGINE;
}

int cmd_stats(tool_ctx *ctx, int argc, char **argv)
{
	return run(ctx, argc, argv, 0, false,
	           "stats [--json]   (WAL, buffer pool, checkpoint and key-value counters)",
	           do_stats);
}

static void verify_print(void *arg, uint32_t block, const char *msg)
{
	(*(unsigned long *)arg)++;
	printf("block %u: %s\n", block, msg);
}

static int do_verify(walrus *db, const kv_args *a)
{
	(void)a;
	unsigned long problems = 0;
	int e = walrus_verify(db, verify_print, &problems);
	if (e == WALRUS_OK) {
		printf("verify: ok\n");
		return 0;
	}
	if (e == WALRUS_ECORRUPT) {
		printf("verify: %lu problem(s) found\n", problems);
		return TOOL_EXIT_DAMAGE;
	}
	return tool_fail(e, "verify");
}

int cmd_verify(tool_ctx *ctx, int argc, char **argv)
{
	return run(ctx, argc, argv, 0, false,
	           "verify   (every page checksum and the tree's invariants; exit 2 on damage)",
	           do_verify);
}
