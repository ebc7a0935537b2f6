/*
 * bench_compare.c - `walrus bench --compare A.json B.json [--json]`: two
 * results of `walrus bench --json` side by side, with the ratio B/A of
 * every number both hold.
 *
 * Each file's last line that starts with '{' is the result (so a file
 * holding a whole run's stdout works). It is parsed by a small JSON reader
 * into flat paths: top-level members by name ("ops_per_s"), nested ones
 * with dots ("options.shared_buffers"), array elements with their index
 * ("checkpoints[0].write_s"). The table shows, in A's order: every
 * top-level number or string of either file, the number of elements of
 * each top-level array with the mean of each numeric member of its
 * elements ("checkpoints: mean write_MBps"), then the engine options that
 * differ. A ratio is B / A, "-" when A is 0 or a value is not a number.
 * --json prints the same as one JSON object.
 *
 * Exit codes: 0, or 2 when an argument or a file is wrong (the message
 * names the file and the position of a syntax error).
 */
#include "tool.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMP_PATH  160
#define CMP_STR   256
#define CMP_DEPTH 32

enum { J_NUM, J_STR, J_BOOL, J_NULL, J_COUNT };

typedef struct jval {
	char path[CMP_PATH];
	int type;
	double num; /* J_NUM, J_COUNT (array length), J_BOOL */
	char str[CMP_STR];
} jval;

typedef struct jdoc {
	const char *file;
	jval *v;
	int n, cap;
	const char *text, *p; /* the line, and the parser's position */
	char err[160];
} jdoc;

static bool jd_add(jdoc *d, const char *path, int type, double num, const char *str)
{
	if (d->n == d->cap) {
		int cap = d->cap ? d->cap * 2 : 64;
		jval *v = realloc(d->v, (size_t)cap * sizeof(*v));
		if (v == NULL) {
			snprintf(d->err, sizeof(d->err), "out of memory");
			return false;
		}
		d->v = v;
		d->cap = cap;
	}
	jval *j = &d->v[d->n++];
	snprintf(j->path, sizeof(j->path), "%s", path);
	j->type = type;
	j->num = num;
	snprintf(j->str, sizeof(j->str), "%s", str ? str : "");
	return true;
}

static void skip_ws(jdoc *d)
{
	while (*d->p == ' ' || *d->p == '\t' || *d->p == '\n' || *d->p == '\r')
		d->p++;
}

static bool fail_at(jdoc *d, const char *what)
{
	if (d->err[0] == '\0')
		snprintf(d->err, sizeof(d->err), "%s at character %ld", what,
		         (long)(d->p - d->text) + 1);
	return false;
}

/* A string into out (truncated to len - 1; \u escapes beyond ASCII as '?'). */
static bool parse_string(jdoc *d, char *out, size_t len)
{
	size_t n = 0;
	if (*d->p != '"')
		return fail_at(d, "expected a string");
	d->p++;
	for (;;) {
		char ch = *d->p++;
		if (ch == '\0')
			return fail_at(d, "unterminated string");
		if (ch == '"')
			break;
		if ((unsigned char)ch < 0x20)
			return fail_at(d, "control character in a string");
		if (ch == '\\') {
			char e = *d->p++;
			switch (e) {
			case '"':
			case '\\':
			case '/':
				ch = e;
				break;
			case 'b':
				ch = '\b';
				break;
			case 'f':
				ch = '\f';
				break;
			case 'n':
				ch = '\n';
				break;
			case 'r':
				ch = '\r';
				break;
			case 't':
				ch = '\t';
				break;
			case 'u': {
				unsigned code = 0;
				for (int i = 0; i < 4; i++) {
					char h = *d->p++;
					unsigned x =
					    h >= '0' && h <= '9'   ? (unsigned)(h - '0')
					    : h >= 'a' && h <= 'f' ? (unsigned)(h - 'a' + 10)
					    : h >= 'A' && h <= 'F' ? (unsigned)(h - 'A' + 10)
					                           : 16u;
					if (x == 16u)
						return fail_at(d, "bad \\u escape");
					code = code * 16 + x;
				}
				ch = (char)(code < 0x80 ? code : (unsigned)'?');
				break;
			}
			default:
				return fail_at(d, "bad escape");
			}
		}
		if (n + 1 < len)
			out[n++] = ch;
	}
	out[n] = '\0';
	return true;
}

static bool parse_value(jdoc *d, const char *path, int depth);

static bool parse_object(jdoc *d, const char *path, int depth)
{
	char key[CMP_STR], sub[CMP_PATH];
	d->p++; /* '{' */
	skip_ws(d);
	if (*d->p == '}') {
		d->p++;
		return true;
	}
	for (;;) {
		skip_ws(d);
		if (!parse_string(d, key, sizeof(key)))
			return false;
		skip_ws(d);
		if (*d->p != ':')
			return fail_at(d, "expected ':'");
		d->p++;
		if ((size_t)snprintf(sub, sizeof(sub), "%s%s%s", path, path[0] ? "." : "", key) >=
		    sizeof(sub))
			return fail_at(d, "member name too long");
		if (!parse_value(d, sub, depth + 1))
			return false;
		skip_ws(d);
		if (*d->p == ',') {
			d->p++;
			continue;
		}
		if (*d->p == '}') {
			d->p++;
			return true;
		}
		return fail_at(d, "expected ',' or '}'");
	}
}

static bool parse_array(jdoc *d, const char *path, int depth)
{
	char sub[CMP_PATH];
	int count = 0, at = d->n;
	if (!jd_add(d, path, J_COUNT, 0, NULL)) /* the length, filled in below */
		return false;
	d->p++; /* '[' */
	skip_ws(d);
	if (*d->p == ']') {
		d->p++;
		return true;
	}
	for (;;) {
		if ((size_t)snprintf(sub, sizeof(sub), "%s[%d]", path, count++) >= sizeof(sub))
			return fail_at(d, "nested too deeply");
		if (!parse_value(d, sub, depth + 1))
			return false;
		d->v[at].num = count;
		skip_ws(d);
		if (*d->p == ',') {
			d->p++;
			continue;
		}
		if (*d->p == ']') {
			d->p++;
			return true;
		}
		return fail_at(d, "expected ',' or ']'");
	}
}

static bool parse_value(jdoc *d, const char *path, int depth)
{
	char s[CMP_STR];
	if (depth > CMP_DEPTH)
		return fail_at(d, "nested too deeply");
	skip_ws(d);
	switch (*d->p) {
	case '{':
		return parse_object(d, path, depth);
	case '[':
		return parse_array(d, path, depth);
	case '"':
		return parse_string(d, s, sizeof(s)) && jd_add(d, path, J_STR, 0, s);
	case 't':
		if (strncmp(d->p, "true", 4) != 0)
			break;
		d->p += 4;
		return jd_add(d, path, J_BOOL, 1, "true");
	case 'f':
		if (strncmp(d->p, "false", 5) != 0)
			break;
		d->p += 5;
		return jd_add(d, path, J_BOOL, 0, "false");
	case 'n':
		if (strncmp(d->p, "null", 4) != 0)
			break;
		d->p += 4;
		return jd_add(d, path, J_NULL, 0, "null");
	default: {
		char *end;
		if (*d->p != '-' && (*d->p < '0' || *d->p > '9'))
			break;
		errno = 0;
		double v = strtod(d->p, &end);
		if (end == d->p || errno == ERANGE)
			break;
		snprintf(s, sizeof(s), "%.*s", (int)(end - d->p), d->p);
		d->p = end;
		return jd_add(d, path, J_NUM, v, s);
	}
	}
	return fail_at(d, "expected a value");
}

/* Reads @file's last line starting with '{' and parses it; false with a message. */
static bool load_doc(jdoc *d, const char *file)
{
	FILE *f = fopen(file, "r");
	char *line = NULL, *last = NULL;
	size_t cap = 0;
	ssize_t n;
	d->file = file;
	if (f == NULL) {
		fprintf(stderr, "walrus bench: --compare: could not open \"%s\": %s\n", file,
		        strerror(errno));
		return false;
	}
	while ((n = getline(&line, &cap, f)) >= 0) {
		const char *s = line;
		while (*s == ' ' || *s == '\t')
			s++;
		if (*s == '{') {
			free(last);
			last = strdup(s);
		}
	}
	free(line);
	fclose(f);
	if (last == NULL) {
		fprintf(stderr, "walrus bench: --compare: \"%s\" holds no JSON object\n", file);
		return false;
	}
	d->text = d->p = last;
	bool ok = parse_value(d, "", 0);
	if (ok) {
		skip_ws(d);
		if (*d->p != '\0')
			ok = fail_at(d, "trailing characters");
	}
	if (ok && (d->n == 0 || d->text[0] != '{'))
		ok = fail_at(d, "not an object");
	if (!ok)
		fprintf(stderr, "walrus bench: --compare: \"%s\": %s\n", file, d->err);
	free(last);
	d->text = d->p = NULL;
	return ok;
}

static const jval *find(const jdoc *d, const char *path)
{
	for (int i = 0; i < d->n; i++)
		if (strcmp(d->v[i].path, path) == 0)
			return &d->v[i];
	return NULL;
}

/* Is @path a top-level member (no '.' or '[')? */
static bool top_level(const char *path)
{
	return strpbrk(path, ".[") == NULL;
}

/* Mean of the numbers at NAME[i].MEMBER, i < count; false if none. */
static bool array_mean(const jdoc *d, const char *name, const char *member, double *mean)
{
	char path[CMP_PATH * 2];
	const jval *len = find(d, name);
	int n = 0;
	double sum = 0;
	for (int i = 0; len != NULL && i < (int)len->num; i++) {
		snprintf(path, sizeof(path), "%s[%d].%s", name, i, member);
		const jval *v = find(d, path);
		if (v != NULL && v->type == J_NUM) {
			sum += v->num;
			n++;
		}
	}
	*mean = n ? sum / n : 0;
	return n > 0;
}

typedef struct cmp_row {
	char name[CMP_PATH];
	char a[CMP_STR], b[CMP_STR];
	bool has_ratio;
	double ratio;
	bool a_num, b_num;
	double an, bn;
} cmp_row;

typedef struct cmp_table {
	cmp_row *r;
	int n, cap;
} cmp_table;

static cmp_row *add_row(cmp_table *t, const char *name)
{
	if (t->n == t->cap) {
		int cap = t->cap ? t->cap * 2 : 64;
		cmp_row *r = realloc(t->r, (size_t)cap * sizeof(*r));
		if (r == NULL)
			return NULL;
		t->r = r;
		t->cap = cap;
	}
	cmp_row *r = &t->r[t->n++];
	memset(r, 0, sizeof(*r));
	snprintf(r->name, sizeof(r->name), "%s", name);
	return r;
}

static void fmt_val(const jval *v, char *out, size_t len)
{
	if (v == NULL)
		snprintf(out, len, "(none)");
	else if (v->type == J_NUM || v->type == J_COUNT)
		snprintf(out, len, "%.10g", v->num);
	else
		snprintf(out, len, "%s", v->str);
}

static bool row_from(cmp_table *t, const char *name, const jval *a, const jval *b)
{
	cmp_row *r = add_row(t, name);
	if (r == NULL)
		return false;
	fmt_val(a, r->a, sizeof(r->a));
	fmt_val(b, r->b, sizeof(r->b));
	r->a_num = a != NULL && (a->type == J_NUM || a->type == J_COUNT);
	r->b_num = b != NULL && (b->type == J_NUM || b->type == J_COUNT);
	r->an = r->a_num ? a->num : 0;
	r->bn = r->b_num ? b->num : 0;
	r->has_ratio = r->a_num && r->b_num && r->an != 0;
	r->ratio = r->has_ratio ? r->bn / r->an : 0;
	return true;
}

/* Rows for the numeric members of NAME's elements (their means). */
static bool array_rows(cmp_table *t, const jdoc *a, const jdoc *b, const char *name)
{
	char prefix[CMP_PATH + 8], label[CMP_PATH * 2];
	snprintf(prefix, sizeof(prefix), "%s[0].", name);
	for (int i = 0; i < a->n + b->n; i++) {
		const jval *v = i < a->n ? &a->v[i] : &b->v[i - a->n];
		const char *member = v->path + strlen(prefix);
		double am, bm;
		if (strncmp(v->path, prefix, strlen(prefix)) != 0 || v->type != J_NUM ||
		    strpbrk(member, ".[") != NULL)
			continue;
		snprintf(label, sizeof(label), "%s: mean %s", name, member);
		bool dup = false;
		for (int k = 0; k < t->n && !dup; k++)
			dup = strcmp(t->r[k].name, label) == 0;
		if (dup)
			continue;
		bool ha = array_mean(a, name, member, &am), hb = array_mean(b, name, member, &bm);
		jval ja = {.type = J_NUM, .num = am}, jb = {.type = J_NUM, .num = bm};
		if (!row_from(t, label, ha ? &ja : NULL, hb ? &jb : NULL))
			return false;
	}
	return true;
}

static bool build_table(cmp_table *t, const jdoc *a, const jdoc *b)
{
	/* top-level scalars and arrays, in A's order then B's extras */
	for (int i = 0; i < a->n + b->n; i++) {
		const jval *v = i < a->n ? &a->v[i] : &b->v[i - a->n];
		if (!top_level(v->path) || (i >= a->n && find(a, v->path) != NULL))
			continue;
		const jval *va = find(a, v->path), *vb = find(b, v->path);
		if (v->type == J_COUNT) {
			char label[CMP_PATH + 16];
			snprintf(label, sizeof(label), "%s (count)", v->path);
			if (!row_from(t, label, va, vb) || !array_rows(t, a, b, v->path))
				return false;
		} else if (!row_from(t, v->path, va, vb)) {
			return false;
		}
	}
	return true;
}

static void print_json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", (unsigned char)*s);
		else
			putchar(*s);
	}
	putchar('"');
}

static void print_json_val(bool num, double n, const char *s)
{
	if (num)
		printf("%.10g", n);
	else
		print_json_str(s);
}

int cmd_bench_compare(int argc, char **argv)
{
	const char *files[2] = {NULL, NULL};
	bool json = false;
	int nfiles = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--compare") == 0)
			continue;
		if (strcmp(argv[i], "--json") == 0)
			json = true;
		else if (argv[i][0] == '-' && argv[i][1] != '\0') {
			fprintf(stderr, "walrus bench: --compare: unknown option \"%s\"\n",
			        argv[i]);
			return TOOL_EXIT_USAGE;
		} else if (nfiles < 2)
			files[nfiles++] = argv[i];
		else {
			fprintf(stderr, "walrus bench: --compare takes two files, not \"%s\" too\n",
			        argv[i]);
			return TOOL_EXIT_USAGE;
		}
	}
	if (nfiles != 2) {
		fprintf(stderr, "usage: walrus bench --compare A.json B.json [--json]\n");
		return TOOL_EXIT_USAGE;
	}
	jdoc a = {0}, b = {0};
	cmp_table t = {0};
	int ex = TOOL_EXIT_USAGE;
	if (!load_doc(&a, files[0]) || !load_doc(&b, files[1]))
		goto out;
	if (!build_table(&t, &a, &b)) {
		fprintf(stderr, "walrus bench: --compare: out of memory\n");
		ex = TOOL_EXIT_ENGINE;
		goto out;
	}
	if (json) {
		printf("{\"a\":");
		print_json_str(files[0]);
		printf(",\"b\":");
		print_json_str(files[1]);
		printf(",\"metrics\":[");
		for (int i = 0; i < t.n; i++) {
			cmp_row *r = &t.r[i];
			printf("%s{\"name\":", i ? "," : "");
			print_json_str(r->name);
			printf(",\"a\":");
			print_json_val(r->a_num, r->an, r->a);
			printf(",\"b\":");
			print_json_val(r->b_num, r->bn, r->b);
			if (r->has_ratio)
				printf(",\"ratio\":%.6g}", r->ratio);
			else
				printf(",\"ratio\":null}");
		}
		printf("],\"options_differ\":[");
	} else {
		printf("A: %s\nB: %s\n\n%-36s %22s %22s %9s\n", files[0], files[1], "metric", "A",
		       "B", "B/A");
		for (int i = 0; i < t.n; i++) {
			cmp_row *r = &t.r[i];
			char ratio[32] = "-";
			if (r->has_ratio)
				snprintf(ratio, sizeof(ratio), "%.3f", r->ratio);
			else if (!r->a_num && !r->b_num && strcmp(r->a, r->b) != 0)
				snprintf(ratio, sizeof(ratio), "differ");
			printf("%-36s %22s %22s %9s\n", r->name, r->a, r->b, ratio);
		}
	}
	/* engine options that differ */
	int nd = 0;
	for (int i = 0; i < a.n + b.n; i++) {
		const jval *v = i < a.n ? &a.v[i] : &b.v[i - a.n];
		if (strncmp(v->path, "options.", 8) != 0 || (i >= a.n && find(&a, v->path) != NULL))
			continue;
		const jval *va = find(&a, v->path), *vb = find(&b, v->path);
		char sa[CMP_STR], sb[CMP_STR];
		fmt_val(va, sa, sizeof(sa));
		fmt_val(vb, sb, sizeof(sb));
		if (strcmp(sa, sb) == 0)
			continue;
		if (json) {
			printf("%s{\"name\":", nd ? "," : "");
			print_json_str(v->path + 8);
			printf(",\"a\":");
			print_json_str(sa);
			printf(",\"b\":");
			print_json_str(sb);
			printf("}");
		} else {
			if (nd == 0)
				printf("\noptions that differ:\n");
			printf("  %-34s %22s %22s\n", v->path + 8, sa, sb);
		}
		nd++;
	}
	if (json)
		printf("]}\n");
	else if (nd == 0)
		printf("\noptions: the same\n");
	ex = fflush(stdout) == 0 ? 0 : TOOL_EXIT_ENGINE;
out:
	free(a.v);
	free(b.v);
	free(t.r);
	return ex;
}
