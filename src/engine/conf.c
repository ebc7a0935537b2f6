/*
 * conf.c - DIR/walrus.conf: the instance's settings that persist, in the
 * format of PostgreSQL's postgresql.conf.
 *
 * Interface: conf_load applies the file to a wr_options; conf_effective
 * gives the options an instance starts with and where each came from
 * (default < walrus.conf < what the starting process set explicitly);
 * conf_set edits one setting; conf_get reads one back.
 *
 * Format: one "name = value" per line (the '=' may be left out, as in
 * PostgreSQL); '#' starts a comment, on a line of its own or after a value;
 * blank lines are ignored.  A value is a bare word (no blank, '#' or quote)
 * or a single-quoted string in which '' stands for one quote.  Names are
 * case-insensitive.  When a name is set twice, the last line wins.
 *
 * Notes: only instance options belong in the file, and the options and
 * the passwords (secrets: requirepass of `walrus serve`, and
 * replication_password, which the supervisor reads for its WAL senders),
 * which the engine skips when it applies the file.  A session option
 * (synchronous_commit, create_if_missing, strict_options) is each opener's
 * choice, so the file refuses it rather than appear to set it.  A secret
 * is never copied into the options, so no dump, log or statistics shows
 * it, and the file that holds one must be private (mode 0600).  Any error
 * fails the start and names the file, the line and the option: a setting
 * is never skipped silently.  conf_set refuses to write a file that would
 * not start an instance, and keeps the user's other lines and comments as
 * they are (the line it replaces keeps its trailing comment).
 */
#include "engine/engine.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CONF_MAX_SIZE  (1 << 20) /* a settings file, not a data file */
#define CONF_NAME_MAX  64
#define CONF_VALUE_MAX WR_OPT_STR_MAX

/* What one line of the file holds. */
typedef struct conf_line {
	bool setting;               /* false: blank, or a comment only */
	char name[CONF_NAME_MAX];   /* lower case */
	char value[CONF_VALUE_MAX]; /* without its quotes */
	const char *comment;        /* its trailing "# ...", or NULL */
} conf_line;

/* ---------------------------------------------------------------- reading */

static int conf_path(const char *abs, char *path)
{
	if (!wr_snprintf(path, PATH_MAX, "%s/%s", abs, WR_CONF_FILE))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", abs);
	return WALRUS_OK;
}

/* The text of an open file, NUL-terminated and malloc'd. */
static int read_text(int fd, const char *path, char **text)
{
	struct stat st;
	size_t got;

	if (fstat(fd, &st) != 0)
		return wr_error(wr_errno_code(errno), "could not stat \"%s\": %m", path);
	if (st.st_size > CONF_MAX_SIZE)
		return wr_error(WALRUS_EINVAL, "\"%s\" is larger than %d bytes", path,
		                CONF_MAX_SIZE);
	char *buf = malloc((size_t)st.st_size + 1);
	if (buf == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory reading \"%s\"", path);
	ssize_t n = wr_read_full(fd, buf, (size_t)st.st_size);
	int rc =
	    n < 0 ? wr_error(wr_errno_code(errno), "could not read \"%s\": %m", path) : WALRUS_OK;
	got = n < 0 ? 0 : (size_t)n;
	if (rc == WALRUS_OK && memchr(buf, '\0', got) != NULL)
		rc =
		    wr_error(WALRUS_EINVAL, "\"%s\" holds a NUL byte: it is not a text file", path);
	if (rc != WALRUS_OK) {
		free(buf);
		return rc;
	}
	buf[got] = '\0';
	*text = buf;
	return WALRUS_OK;
}

/* The whole file, malloc'd; "" when there is none. */
static int read_conf(const char *path, char **text)
{
	*text = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		*text = strdup("");
		return *text ? WALRUS_OK : wr_error(WALRUS_ENOMEM, "out of memory");
	}
	if (fd < 0)
		return wr_error(wr_errno_code(errno), "could not open \"%s\": %m", path);
	int rc = read_text(fd, path, text);
	close(fd); /* read-only: nothing a failed close could lose */
	return rc;
}

/* The next line of @text at *pos, NUL-terminated in place; NULL at the end. */
static char *next_line(char *text, size_t *pos)
{
	char *line = text + *pos;
	if (*line == '\0')
		return NULL;
	char *nl = strchr(line, '\n');
	if (nl != NULL) {
		*nl = '\0';
		*pos = (size_t)(nl - text) + 1;
	} else {
		*pos += strlen(line);
	}
	return line;
}

/* ---------------------------------------------------------------- parsing a line */

static const char *skip_blanks(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\f' || *p == '\v')
		p++;
	return p;
}

static bool name_char(char c, bool first)
{
	unsigned char u = (unsigned char)c;
	return isalpha(u) || c == '_' || (!first && (isdigit(u) || c == '.'));
}

static int parse_name(const char **pp, conf_line *l)
{
	const char *p = *pp;
	size_t n = 0;

	if (!name_char(*p, true))
		return wr_error(WALRUS_EINVAL,
		                "syntax error near \"%.40s\" (expected an option name)", p);
	for (; name_char(*p, n == 0); p++) {
		if (n + 1 >= sizeof(l->name))
			return wr_error(WALRUS_EINVAL, "unrecognized option \"%.*s...\"", (int)n,
			                l->name);
		l->name[n++] = (char)tolower((unsigned char)*p);
	}
	l->name[n] = '\0';
	*pp = p;
	return WALRUS_OK;
}

/* A single-quoted value at *pp (on its opening quote); '' is one quote. */
static int parse_quoted(const char **pp, conf_line *l)
{
	const char *p = *pp + 1;
	size_t n = 0;

	for (;; p++) {
		if (*p == '\0')
			return wr_error(WALRUS_EINVAL,
			                "unterminated quoted value for option \"%s\"", l->name);
		if (*p == '\'' && p[1] != '\'')
			break;
		if (*p == '\'')
			p++;
		if (n + 1 >= sizeof(l->value))
			return wr_error(WALRUS_EINVAL, "value of option \"%s\" is too long",
			                l->name);
		l->value[n++] = *p;
	}
	l->value[n] = '\0';
	*pp = p + 1;
	return WALRUS_OK;
}

static int parse_bare(const char **pp, conf_line *l)
{
	const char *p = *pp;
	size_t n = 0;

	for (; *p != '\0' && *p != '#' && *p != '\'' && skip_blanks(p) == p; p++) {
		if (n + 1 >= sizeof(l->value))
			return wr_error(WALRUS_EINVAL, "value of option \"%s\" is too long",
			                l->name);
		l->value[n++] = *p;
	}
	if (n == 0)
		return wr_error(WALRUS_EINVAL, "missing value for option \"%s\"", l->name);
	l->value[n] = '\0';
	*pp = p;
	return WALRUS_OK;
}

static int parse_line(const char *line, conf_line *l)
{
	const char *p = skip_blanks(line);
	int rc;

	memset(l, 0, sizeof(*l));
	if (*p == '\0' || *p == '#') {
		l->comment = *p ? p : NULL;
		return WALRUS_OK;
	}
	if ((rc = parse_name(&p, l)) != WALRUS_OK)
		return rc;
	p = skip_blanks(p);
	if (*p == '=')
		p = skip_blanks(p + 1);
	rc = *p == '\'' ? parse_quoted(&p, l) : parse_bare(&p, l);
	if (rc != WALRUS_OK)
		return rc;
	p = skip_blanks(p);
	if (*p != '\0' && *p != '#')
		return wr_error(WALRUS_EINVAL,
		                "unexpected \"%.40s\" after the value of option \"%s\" (quote a "
		                "value that holds blanks)",
		                p, l->name);
	l->comment = *p ? p : NULL;
	l->setting = true;
	return WALRUS_OK;
}

/* ---------------------------------------------------------------- applying */

static bool is_secret(const char *name)
{
	return strcmp(name, "requirepass") == 0 || strcmp(name, "replication_password") == 0;
}

/* Known, instance-wide (or the server's) and valid, or an error naming the option. */
static int apply_setting(const conf_line *l, wr_options *o)
{
	if (is_secret(l->name))
		return WALRUS_OK; /* walrus serve's, read by conf_secret */
	const wr_opt_desc *d = wr_opts_find(l->name, NULL);

	if (d == NULL)
		return wr_error(WALRUS_EINVAL, "unrecognized option \"%s\"", l->name);
	if (d->scope == WR_SCOPE_SESSION)
		return wr_error(WALRUS_EINVAL,
		                "option \"%s\" is chosen by each opener (-o or walrus_opts_set), "
		                "not in %s",
		                d->name, WR_CONF_FILE);
	return wr_opts_set(o, d->name, l->value);
}

/* Prefixes the message just recorded with its place: "FILE:LINE: ". */
static int at_line(int rc, const char *path, int lineno)
{
	char msg[768];

	(void)wr_snprintf(msg, sizeof(msg), "%s", walrus_errmsg());
	return wr_error(rc, "%s:%d: %s", path, lineno, msg);
}

/* Applies every setting of @text (split in place) to @o. */
static int apply_text(const char *path, char *text, wr_options *o)
{
	size_t pos = 0;
	int lineno = 0;
	char *line;

	while ((line = next_line(text, &pos)) != NULL) {
		conf_line l;
		lineno++;
		int rc = parse_line(line, &l);
		if (rc == WALRUS_OK && l.setting)
			rc = apply_setting(&l, o);
		if (rc != WALRUS_OK)
			return at_line(rc, path, lineno);
	}
	return WALRUS_OK;
}

int conf_load(const char *abs, wr_options *o)
{
	char path[PATH_MAX], *text;
	int rc = conf_path(abs, path);

	if (rc == WALRUS_OK)
		rc = read_conf(path, &text);
	if (rc != WALRUS_OK)
		return rc;
	rc = apply_text(path, text, o);
	free(text);
	return rc;
}

/* Relations between options, for a message that says the file took part. */
static int validate_with(const char *abs, const wr_options *o)
{
	char path[PATH_MAX], msg[768];

	if (wr_opts_validate_instance(o) == WALRUS_OK)
		return WALRUS_OK;
	(void)wr_snprintf(msg, sizeof(msg), "%s", walrus_errmsg());
	if (conf_path(abs, path) != WALRUS_OK)
		return WALRUS_EINVAL;
	return wr_error(WALRUS_EINVAL, "%s: %s", path, msg);
}

int conf_effective(const char *abs, const wr_options *starter, wr_options *out,
                   uint8_t sources[WR_OPTS_MAX])
{
	wr_options file;
	size_t n;
	bool from_file = false;

	wr_opts_table(&n);
	wr_opts_defaults(&file);
	wr_opts_defaults(out);
	memset(sources, WR_SRC_DEFAULT, WR_OPTS_MAX);
	int rc = conf_load(abs, &file);
	/* On an error @out still gets the starter's options: enough to log why. */
	for (size_t i = 0; i < n; i++) {
		if (wr_opts_is_set(starter, i)) {
			wr_opts_copy(out, starter, i);
			sources[i] = WR_SRC_COMMAND_LINE;
		} else if (rc == WALRUS_OK && wr_opts_is_set(&file, i)) {
			wr_opts_copy(out, &file, i);
			sources[i] = WR_SRC_FILE;
			from_file = true;
		}
	}
	if (rc != WALRUS_OK)
		return rc;
	return from_file ? validate_with(abs, out) : wr_opts_validate_instance(out);
}

/* ---------------------------------------------------------------- editing */

/* A growing output text. */
typedef struct conf_buf {
	char *s;
	size_t len, cap;
} conf_buf;

static int buf_add(conf_buf *b, const char *s, size_t n)
{
	if (wr_grow(&b->s, &b->cap, b->len + n + 1, 1, 2 * (n + 1)) != WALRUS_OK)
		return wr_error(WALRUS_ENOMEM, "out of memory editing %s", WR_CONF_FILE);
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = '\0';
	return WALRUS_OK;
}

static bool bare_ok(const char *v)
{
	if (*v == '\0')
		return false;
	for (; *v; v++)
		if (!isalnum((unsigned char)*v) && strchr("._+-", *v) == NULL)
			return false;
	return true;
}

/* "name = value" (quoted when it must be), then @comment (with its blanks), then a newline. */
static int add_setting(conf_buf *b, const conf_line *want, const char *comment)
{
	int rc = buf_add(b, want->name, strlen(want->name));
	if (rc == WALRUS_OK)
		rc = buf_add(b, " = ", 3);
	if (rc == WALRUS_OK && bare_ok(want->value))
		rc = buf_add(b, want->value, strlen(want->value));
	else if (rc == WALRUS_OK) {
		rc = buf_add(b, "'", 1);
		for (const char *v = want->value; rc == WALRUS_OK && *v; v++)
			rc = *v == '\'' ? buf_add(b, "''", 2) : buf_add(b, v, 1);
		if (rc == WALRUS_OK)
			rc = buf_add(b, "'", 1);
	}
	if (rc == WALRUS_OK && comment != NULL)
		rc = buf_add(b, comment, strlen(comment));
	return rc == WALRUS_OK ? buf_add(b, "\n", 1) : rc;
}

/* The number of the last line that sets @name (0: none). */
static int last_line_setting(const char *text, const char *name)
{
	char *copy = strdup(text);
	size_t pos = 0;
	int lineno = 0, found = 0;
	char *line;

	if (copy == NULL)
		return 0;
	while ((line = next_line(copy, &pos)) != NULL) {
		conf_line l;
		lineno++;
		if (parse_line(line, &l) == WALRUS_OK && l.setting && strcmp(l.name, name) == 0)
			found = lineno;
	}
	free(copy);
	return found;
}

/* @text with the line setting want->name replaced, or @want appended. */
static int edit_text(const char *text, const conf_line *want, conf_buf *out)
{
	int target = last_line_setting(text, want->name), lineno = 0, rc = WALRUS_OK;
	char *copy = strdup(text), *line;
	size_t pos = 0;

	if (copy == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory editing %s", WR_CONF_FILE);
	while (rc == WALRUS_OK && (line = next_line(copy, &pos)) != NULL) {
		conf_line l;
		if (++lineno != target) {
			rc = buf_add(out, line, strlen(line));
			if (rc == WALRUS_OK)
				rc = buf_add(out, "\n", 1);
			continue;
		}
		(void)parse_line(line, &l); /* it parsed when it was found */
		const char *comment = l.comment;
		while (comment != NULL && comment > line &&
		       (comment[-1] == ' ' || comment[-1] == '\t'))
			comment--; /* the user's alignment of the comment stays */
		rc = add_setting(out, want, comment);
	}
	free(copy);
	if (rc == WALRUS_OK && target == 0)
		rc = add_setting(out, want, NULL);
	return rc;
}

/* The line @name = @value would be, once both are known good. */
static int check_setting(const char *name, const char *value, conf_line *want)
{
	wr_options scratch;
	const char *val = value ? value : "";
	size_t n = strlen(name ? name : ""), v = strlen(val);

	memset(want, 0, sizeof(*want));
	if (n == 0 || n >= sizeof(want->name))
		return wr_error(WALRUS_EINVAL, "unrecognized option \"%.100s\"", name ? name : "");
	if (v >= sizeof(want->value))
		return wr_error(WALRUS_EINVAL, "value of option \"%s\" is too long", name);
	for (size_t i = 0; i <= n; i++)
		want->name[i] = (char)tolower((unsigned char)name[i]);
	if (is_secret(want->name))
		return wr_error(WALRUS_EINVAL,
		                "%s is not set with `walrus config set`: the password would show "
		                "in ps; write \"%s = '...'\" into %s yourself (mode 0600)",
		                want->name, want->name, WR_CONF_FILE);
	memcpy(want->value, val, v + 1);
	want->setting = true;
	wr_opts_defaults(&scratch);
	return apply_setting(want, &scratch);
}

/* The file @text would make must start an instance (with no command line). */
static int check_text(const char *abs, const char *path, const conf_buf *text)
{
	wr_options o;
	char *copy = strdup(text->s);

	if (copy == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory editing %s", WR_CONF_FILE);
	wr_opts_defaults(&o);
	int rc = apply_text(path, copy, &o);
	free(copy);
	return rc == WALRUS_OK ? validate_with(abs, &o) : rc;
}

/* Settings a base backup leaves out: the instance's passwords, and what
 * makes it the primary of its standbys (where it listens for them, the one
 * its durable writes wait for): the copy, a standby or a restored instance,
 * chooses its own. */
static bool not_copied(const char *name)
{
	return is_secret(name) || strcmp(name, "synchronous_standby") == 0 ||
	       strcmp(name, "listen_replication") == 0;
}

int conf_backup_text(const char *abs, char **text)
{
	char path[PATH_MAX], *src;
	*text = NULL;
	int rc = conf_path(abs, path);
	if (rc == WALRUS_OK && access(path, F_OK) != 0)
		return errno == ENOENT
		           ? WALRUS_ENOENT
		           : wr_error(wr_errno_code(errno), "could not open \"%s\": %m", path);
	if (rc == WALRUS_OK)
		rc = read_conf(path, &src);
	if (rc != WALRUS_OK)
		return rc;
	conf_buf out = {0};
	size_t pos = 0;
	char *line;
	rc = buf_add(&out, "", 0);
	while (rc == WALRUS_OK && (line = next_line(src, &pos)) != NULL) {
		conf_line l;
		bool drop = parse_line(line, &l) == WALRUS_OK && l.setting && not_copied(l.name);
		wr_error_clear();
		if (drop) {
			char note[CONF_NAME_MAX + 96];
			int n = snprintf(note, sizeof(note),
			                 "# %s: not copied by the base backup; set it for this "
			                 "instance\n",
			                 l.name);
			rc = buf_add(&out, note, (size_t)n);
		} else {
			rc = buf_add(&out, line, strlen(line));
			if (rc == WALRUS_OK)
				rc = buf_add(&out, "\n", 1);
		}
	}
	free(src);
	if (rc != WALRUS_OK) {
		free(out.s);
		return rc;
	}
	*text = out.s;
	return WALRUS_OK;
}

int conf_set(const char *abs, const char *name, const char *value)
{
	char path[PATH_MAX], *text = NULL;
	conf_line want;
	conf_buf out = {0};

	int rc = check_setting(name, value, &want);
	if (rc == WALRUS_OK)
		rc = conf_path(abs, path);
	if (rc == WALRUS_OK)
		rc = read_conf(path, &text);
	if (rc == WALRUS_OK)
		rc = edit_text(text, &want, &out);
	free(text);
	if (rc == WALRUS_OK)
		rc = check_text(abs, path, &out);
	if (rc == WALRUS_OK)
		rc = datadir_write_file(abs, WR_CONF_FILE, out.s);
	free(out.s);
	return rc;
}

int conf_get(const char *abs, const char *name, char *buf, size_t len, bool *found)
{
	char lower[CONF_NAME_MAX];
	size_t index, n = strlen(name ? name : "");
	wr_options o;

	*found = false;
	if (n >= sizeof(lower))
		return wr_error(WALRUS_EINVAL, "unrecognized option \"%.100s\"", name);
	for (size_t i = 0; i <= n; i++)
		lower[i] = (char)tolower((unsigned char)name[i]);
	if (is_secret(lower)) {
		int rc = conf_secret(abs, lower, NULL, 0, found);
		if (rc == WALRUS_OK)
			(void)wr_snprintf(buf, len, "%s", *found ? "********" : "");
		return rc;
	}
	const wr_opt_desc *d = wr_opts_find(lower, &index);
	if (d == NULL)
		return wr_error(WALRUS_EINVAL, "unrecognized option \"%s\"", lower);
	wr_opts_defaults(&o);
	int rc = conf_load(abs, &o);
	if (rc != WALRUS_OK)
		return rc;
	*found = wr_opts_is_set(&o, index);
	return wr_opts_get(&o, d->name, buf, len);
}

/* ---------------------------------------------------------------- secrets */

/* The value of the last line of @text that sets @name (split in place). */
static int find_setting(const char *path, char *text, const char *name, conf_line *l, bool *found)
{
	size_t pos = 0;
	int lineno = 0;
	char *line;
	conf_line cur;

	*found = false;
	while ((line = next_line(text, &pos)) != NULL) {
		lineno++;
		int rc = parse_line(line, &cur);
		if (rc != WALRUS_OK)
			return at_line(rc, path, lineno);
		if (cur.setting && strcmp(cur.name, name) == 0) {
			*l = cur;
			*found = true;
		}
		explicit_bzero(&cur, sizeof(cur));
	}
	return WALRUS_OK;
}

/* A file that holds a password is ours alone. */
static int check_private(int fd, const char *path, const char *name)
{
	struct stat st;

	if (fstat(fd, &st) != 0)
		return wr_error(wr_errno_code(errno), "could not stat \"%s\": %m", path);
	if ((st.st_mode & 077) == 0)
		return WALRUS_OK;
	return wr_error(WALRUS_EINVAL,
	                "\"%s\" sets %s but is readable by %s (mode %04o): chmod 600 it", path,
	                name,
	                (st.st_mode & 070) && (st.st_mode & 07) ? "its group and others"
	                : (st.st_mode & 070)                    ? "its group"
	                                                        : "others",
	                (unsigned)(st.st_mode & 07777));
}

int conf_secret(const char *abs, const char *name, char *buf, size_t len, bool *found)
{
	char path[PATH_MAX], *text = NULL;
	conf_line l = {0};

	*found = false;
	int rc = conf_path(abs, path);
	if (rc != WALRUS_OK)
		return rc;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT
		           ? WALRUS_OK
		           : wr_error(wr_errno_code(errno), "could not open \"%s\": %m", path);
	rc = read_text(fd, path, &text);
	if (rc == WALRUS_OK)
		rc = find_setting(path, text, name, &l, found);
	if (rc == WALRUS_OK && *found)
		rc = check_private(fd, path, name);
	if (rc == WALRUS_OK && *found && buf != NULL && !wr_snprintf(buf, len, "%s", l.value))
		rc = wr_error(WALRUS_EINVAL, "%s: %s is too long", path, name);
	close(fd); /* read-only: nothing a failed close could lose */
	if (text != NULL) {
		explicit_bzero(text, strlen(text));
		free(text);
	}
	explicit_bzero(&l, sizeof(l));
	return rc;
}
