/*
 * standby_conf.c - DIR/walrus.standby: which primary a standby follows and
 * how it proves itself (PostgreSQL's standby.signal and primary_conninfo
 * in one file).  walrus.conf's format, so a user edits both the same way;
 * its own file, so that `walrus promote` ends the standby role by removing
 * one file, and so that the password is never an instance option (options
 * are in shared memory, dumps and statistics).
 */
#include "repl/repl_int.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STANDBY_FILE_MAX 65536

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	size_t n = strlen(s);
	while (n > 0 && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
	return s;
}

/* A value: bare up to a '#', or single-quoted with '' for a quote.  False when malformed. */
static bool parse_value(char *v, char *out, size_t len)
{
	size_t o = 0;
	if (*v != '\'') {
		char *hash = strchr(v, '#');
		if (hash != NULL)
			*hash = '\0';
		v = trim(v);
		if (strlen(v) >= len)
			return false;
		memcpy(out, v, strlen(v) + 1);
		return true;
	}
	for (v++;; v++) {
		if (*v == '\0')
			return false; /* unterminated */
		if (*v == '\'' && v[1] == '\'')
			v++;
		else if (*v == '\'')
			break;
		if (o + 1 >= len)
			return false;
		out[o++] = *v;
	}
	out[o] = '\0';
	v = trim(v + 1);
	return *v == '\0' || *v == '#';
}

static int bad_line(const char *path, int lineno, const char *what)
{
	return wr_error(WALRUS_EINVAL, "\"%s\", line %d: %s", path, lineno, what);
}

static int set_key(repl_standby_conf *c, const char *name, char *value, const char *path,
                   int lineno)
{
	struct {
		const char *name;
		char *field;
		size_t len;
	} keys[] = {{"primary", c->primary, sizeof(c->primary)},
	            {"slot", c->slot, sizeof(c->slot)},
	            {"application_name", c->application_name, sizeof(c->application_name)},
	            {"password", c->password, sizeof(c->password)},
	            {"wal_archive", c->wal_archive, sizeof(c->wal_archive)},
	            {"sslmode", c->sslmode, sizeof(c->sslmode)},
	            {"sslrootcert", c->ssl.rootcert, sizeof(c->ssl.rootcert)},
	            {"sslcert", c->ssl.cert, sizeof(c->ssl.cert)},
	            {"sslkey", c->ssl.key, sizeof(c->ssl.key)}};
	for (size_t i = 0; i < WR_ARRAY_LEN(keys); i++) {
		if (strcmp(name, keys[i].name) != 0)
			continue;
		if (!parse_value(value, keys[i].field, keys[i].len)) {
			char what[160];
			snprintf(what, sizeof(what),
			         "bad value for \"%s\" (too long, or a quote not closed)", name);
			return bad_line(path, lineno, what);
		}
		return WALRUS_OK;
	}
	char what[256];
	snprintf(what, sizeof(what),
	         "unknown setting \"%.60s\" (known: primary, slot, application_name, password, "
	         "wal_archive, sslmode, sslrootcert, sslcert, sslkey)",
	         name);
	return bad_line(path, lineno, what);
}

static void default_name(const char *abs, char *out, size_t len)
{
	const char *base = strrchr(abs, '/');
	base = base != NULL && base[1] != '\0' ? base + 1 : abs;
	wr_snprintf(out, len, "%s", base);
}

/* A TLS file: absolute as given, or relative to the data directory. */
static int absolute(const char *abs, const char *path, const char *key, char *file, size_t len)
{
	char tmp[1024];
	if (file[0] == '\0' || file[0] == '/')
		return WALRUS_OK;
	if (!wr_snprintf(tmp, sizeof(tmp), "%s/%s", abs, file) || strlen(tmp) >= len)
		return wr_error(WALRUS_EINVAL, "\"%s\": %s is too long", path, key);
	memcpy(file, tmp, strlen(tmp) + 1);
	return WALRUS_OK;
}

/* sslmode and its files: what the mode needs is there. */
static int check_ssl(const char *abs, const char *path, repl_standby_conf *c)
{
	repl_ssl_conf *t = &c->ssl;
	t->mode = c->sslmode[0] == '\0' ? REPL_SSL_PREFER : repl_sslmode_parse(c->sslmode);
	if (t->mode < 0)
		return wr_error(WALRUS_EINVAL,
		                "\"%s\": bad sslmode \"%s\" (disable, prefer, require, verify-ca "
		                "or verify-full)",
		                path, c->sslmode);
	if (t->mode >= REPL_SSL_VERIFY_CA && t->rootcert[0] == '\0')
		return wr_error(WALRUS_EINVAL,
		                "\"%s\": sslmode = %s needs sslrootcert (the CA certificates that "
		                "signed the primary's)",
		                path, c->sslmode);
	if (t->mode == REPL_SSL_VERIFY_FULL && c->primary[0] == '/')
		return wr_error(WALRUS_EINVAL,
		                "\"%s\": sslmode = verify-full needs primary = HOST:PORT (a host "
		                "name to check the certificate against), not a socket path",
		                path);
	if ((t->cert[0] == '\0') != (t->key[0] == '\0'))
		return wr_error(WALRUS_EINVAL, "\"%s\": sslcert and sslkey go together", path);
	int rc = absolute(abs, path, "sslrootcert", t->rootcert, sizeof(t->rootcert));
	if (rc == WALRUS_OK)
		rc = absolute(abs, path, "sslcert", t->cert, sizeof(t->cert));
	if (rc == WALRUS_OK)
		rc = absolute(abs, path, "sslkey", t->key, sizeof(t->key));
	return rc;
}

int repl_standby_parse(const char *abs, const char *path, char *text, repl_standby_conf *c)
{
	memset(c, 0, sizeof(*c));
	int lineno = 0;
	for (char *line = text; line != NULL;) {
		char *nl = strchr(line, '\n');
		if (nl != NULL)
			*nl = '\0';
		lineno++;
		char *l = trim(line);
		line = nl != NULL ? nl + 1 : NULL;
		if (*l == '\0' || *l == '#')
			continue;
		char *eq = strchr(l, '=');
		if (eq == NULL)
			return bad_line(path, lineno, "expected \"name = value\"");
		*eq = '\0';
		char *name = trim(l);
		int rc = set_key(c, name, trim(eq + 1), path, lineno);
		if (rc != WALRUS_OK)
			return rc;
	}
	/* A standby fed by the archive alone (log shipping) needs no primary. */
	if (c->primary[0] == '\0' && c->wal_archive[0] == '\0')
		return wr_error(
		    WALRUS_EINVAL,
		    "\"%s\" does not say which primary to follow "
		    "(primary = HOST:PORT or a socket path) nor where its WAL archive is "
		    "(wal_archive = DIR)",
		    path);
	if (c->wal_archive[0] != '\0' && c->wal_archive[0] != '/')
		return wr_error(WALRUS_EINVAL, "\"%s\": wal_archive must be an absolute path",
		                path);
	int rc = c->primary[0] == '\0' ? WALRUS_OK : repl_check_address(c->primary);
	if (rc != WALRUS_OK) {
		char why[512];
		wr_snprintf(why, sizeof(why), "%s", walrus_errmsg());
		return wr_error(rc, "\"%s\": %s", path, why);
	}
	if (c->application_name[0] == '\0')
		default_name(abs, c->application_name, sizeof(c->application_name));
	return check_ssl(abs, path, c);
}

/* The file holds a password: ours alone. */
static int check_mode(int fd, const char *path)
{
	struct stat st;
	if (fstat(fd, &st) != 0)
		return wr_error(wr_errno_code(errno), "could not stat \"%s\": %m", path);
	if ((st.st_mode & 077) != 0)
		return wr_error(WALRUS_EINVAL,
		                "\"%s\" holds a password but is readable by others (mode %04o): "
		                "chmod 600 it",
		                path, (unsigned)(st.st_mode & 07777));
	return WALRUS_OK;
}

int repl_standby_read(const char *abs, repl_standby_conf *c)
{
	char path[PATH_MAX];
	if (!wr_snprintf(path, sizeof(path), "%s/%s", abs, REPL_STANDBY_FILE))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", abs);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT
		           ? wr_error(WALRUS_ENOENT, "\"%s\" does not exist", path)
		           : wr_error(wr_errno_code(errno), "could not open \"%s\": %m", path);
	char *text = malloc(STANDBY_FILE_MAX + 1);
	int rc = text == NULL ? wr_error(WALRUS_ENOMEM, "out of memory") : check_mode(fd, path);
	ssize_t n = rc == WALRUS_OK ? wr_read_full(fd, text, STANDBY_FILE_MAX + 1) : 0;
	if (rc == WALRUS_OK && n < 0)
		rc = wr_error(wr_errno_code(errno), "could not read \"%s\": %m", path);
	else if (rc == WALRUS_OK && n > STANDBY_FILE_MAX)
		rc = wr_error(WALRUS_EINVAL, "\"%s\" is larger than %d bytes", path,
		              STANDBY_FILE_MAX);
	close(fd); /* read-only */
	if (rc == WALRUS_OK) {
		text[n] = '\0';
		rc = repl_standby_parse(abs, path, text, c);
	}
	if (text != NULL) {
		explicit_bzero(text, STANDBY_FILE_MAX + 1);
		free(text);
	}
	return rc;
}

/* Single-quoted, quotes doubled; false when it holds a line break. */
static bool quote(const char *v, char *out, size_t len)
{
	size_t o = 0;
	if (strpbrk(v, "\r\n") != NULL || len < 3)
		return false;
	out[o++] = '\'';
	for (; *v != '\0'; v++) {
		if (o + 4 >= len)
			return false;
		if (*v == '\'')
			out[o++] = '\'';
		out[o++] = *v;
	}
	out[o++] = '\'';
	out[o] = '\0';
	return true;
}

/* Appends "name = 'value'" when @v is set (optional keys are left out when empty). */
static bool add_key(char *text, size_t len, const char *name, const char *v)
{
	char q[2200];
	size_t used = strlen(text);
	if (v[0] == '\0')
		return true;
	if (!quote(v, q, sizeof(q)))
		return false;
	return wr_snprintf(text + used, len - used, "%s = %s\n", name, q);
}

/* What would be written reads back (sslmode and its files agree): no file a start refuses. */
static int check_text(const char *abs, const char *text)
{
	char path[PATH_MAX], copy[8192];
	repl_standby_conf back;
	wr_snprintf(path, sizeof(path), "%s/%s", abs, REPL_STANDBY_FILE);
	wr_snprintf(copy, sizeof(copy), "%s", text);
	int rc = repl_standby_parse(abs, path, copy, &back);
	explicit_bzero(copy, sizeof(copy));
	explicit_bzero(&back, sizeof(back));
	return rc;
}

int repl_standby_write(const char *abs, const repl_standby_conf *c)
{
	char text[8192] = "# This directory is a standby (walrus promote removes this file).\n";
	if (c->primary[0] != '\0' && repl_check_address(c->primary) != WALRUS_OK)
		return WALRUS_EINVAL;
	bool ok = add_key(text, sizeof(text), "primary", c->primary) &&
	          add_key(text, sizeof(text), "slot", c->slot) &&
	          add_key(text, sizeof(text), "application_name", c->application_name) &&
	          add_key(text, sizeof(text), "password", c->password) &&
	          add_key(text, sizeof(text), "wal_archive", c->wal_archive) &&
	          add_key(text, sizeof(text), "sslmode", c->sslmode) &&
	          add_key(text, sizeof(text), "sslrootcert", c->ssl.rootcert) &&
	          add_key(text, sizeof(text), "sslcert", c->ssl.cert) &&
	          add_key(text, sizeof(text), "sslkey", c->ssl.key);
	int rc =
	    ok ? check_text(abs, text)
	       : wr_error(WALRUS_EINVAL, "a standby setting holds a line break or is too long");
	if (rc == WALRUS_OK)
		rc = wal_write_file(abs, REPL_STANDBY_FILE, text);
	explicit_bzero(text, sizeof(text));
	return rc;
}
