/*
 * cmd_serve.c - `walrus serve`: the RESP server, or the supervisor alone.
 *
 * With any server option (--port, --bind, --unix, --no-tcp, --requirepass,
 * --requirepass-file, --idle-timeout, --backends, --databases, --resp, --tls-*) it runs
 * the RESP server of src/server
 * (server.h): one process that accepts connections and hands them to a pool
 * of backend processes (or forks a backend per connection: --backends 0).
 * Without, it runs the instance's supervisor in the foreground, as
 * `postgres -D DIR` runs the postmaster (tests and scripts rely on that
 * form: its pid is the supervisor's).  Both stop on SIGTERM or SIGINT after
 * a clean shutdown (the supervisor on SIGTERM once its attached processes
 * have gone, as a smart `walrus stop`); the supervisor's log lines also go
 * to stderr.
 *
 * The password: from --requirepass-file, or "requirepass = ..." in
 * DIR/walrus.conf; both files must be private (mode 0600), since anyone who
 * reads one has the data.  --requirepass PW still works, with a warning:
 * the command line of the server and of every backend it forks shows it
 * to every local user (ps).  The options of walrus serve in walrus.conf
 * (scope "server" in the option table) count unless -o sets them.
 */
#include "tool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "server/server.h"

static const char usage[] =
    "usage: walrus -D DIR serve [--port P] [--bind ADDR] [--unix PATH|none] [--no-tcp]\n"
    "                           [--requirepass-file FILE] [--idle-timeout S]\n"
    "                           [--backends N] [--databases N] [--resp]\n"
    "                           [--tls-port P --tls-cert-file F --tls-key-file F\n"
    "                            [--tls-ca-cert-file F] [--tls-auth-clients yes|no|optional]]\n"
    "       walrus -D DIR serve          (no option: the supervisor alone)\n\n"
    "RESP server (Redis protocol; redis-cli and Redis client libraries work):\n"
    "  --port P          TCP port (default 6379; 0 picks a free port, printed)\n"
    "  --bind ADDR       address to listen on (default 127.0.0.1)\n"
    "  --no-tcp          no TCP listener: the Unix socket only\n"
    "  --unix PATH       Unix socket (default DIR/walrus-resp.sock, mode 0600, in a\n"
    "                    0700 directory); \"none\" for no Unix socket\n"
    "  --requirepass-file FILE  clients must AUTH first with the password in FILE\n"
    "                    (one line, mode 0600); without it, requirepass in\n"
    "                    DIR/walrus.conf (mode 0600) if set.  Clients that have not\n"
    "                    authenticated send small requests only and are closed after\n"
    "                    authentication_timeout (-o, default 10s)\n"
    "  --requirepass PW  the same, but the password shows in ps: avoid\n"
    "  --idle-timeout S  close connections idle S seconds (default 0: never)\n"
    "  --backends N      N backend processes, each serving many connections with\n"
    "                    epoll (default: 2 per online CPU, at most 64); 0: one\n"
    "                    backend process per connection\n"
    "  --databases N     SELECT takes 0 to N-1 (default 16; -o databases=N, or\n"
    "                    walrus.conf); database n > 0 is the key space \"dbN\"\n"
    "  --resp            the RESP server with every default\n"
    "  --tls-port P      also listen on port P of --bind for TLS connections (TLS 1.2\n"
    "                    or later; 0 picks a free port, printed): redis-cli --tls\n"
    "  --tls-cert-file F, --tls-key-file F  the server's certificate chain and its\n"
    "                    key (PEM; the key file mode 0600)\n"
    "  --tls-ca-cert-file F  CA certificates that sign clients' certificates\n"
    "  --tls-auth-clients yes|no|optional  ask clients for a certificate the CA\n"
    "                    signed: required (default with --tls-ca-cert-file), not\n"
    "                    asked (default without), or checked when one is sent\n\n"
    "At most max_connections - 1 clients (-o max_connections=N); the pool\n"
    "backends hold one attachment each.  A connection's unparsed input is at most\n"
    "client_query_buffer_limit (-o or walrus.conf, default 1GB).  Writes are acknowledged once "
    "durable when\n"
    "synchronous_commit=on (the default; -o synchronous_commit=off acknowledges\n"
    "at once).  SIGTERM: clean shutdown (requests under way finish); SIGINT:\n"
    "fast shutdown (connections dropped).  Prints \"walrus serve: RESP on ADDR\n"
    "port P\" and \"walrus serve: ready ...\" once it accepts connections.\n\n"
    "Without any of these options: runs the instance's supervisor in the\n"
    "foreground; processes that open DIR attach to it.  It stops as `walrus stop`\n"
    "makes it: SIGTERM smart (once the attached processes have closed their\n"
    "handles), SIGINT fast, SIGQUIT immediate (no checkpoint).\n";

#define PASS_MAX 1024

/* Where the password comes from; filled by the options, read by run_server. */
typedef struct pass_src {
	const char *flag; /* --requirepass */
	const char *file; /* --requirepass-file */
	char buf[PASS_MAX];
} pass_src;

static bool parse_int(const char *s, long lo, long hi, long *out)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (*s == '\0' || *end != '\0' || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

/* --tls-*: Redis 6's names.  --tls-auth-clients stays -1 until check_tls
 * decides its default. */
static bool tls_option(srv_config *cfg, const char *o, const char *v)
{
	long n;
	if (strcmp(o, "--tls-port") == 0 && parse_int(v, 0, 65535, &n))
		cfg->tls_port = (int)n;
	else if (strcmp(o, "--tls-cert-file") == 0)
		cfg->tls_cert = v;
	else if (strcmp(o, "--tls-key-file") == 0)
		cfg->tls_key = v;
	else if (strcmp(o, "--tls-ca-cert-file") == 0)
		cfg->tls_ca = v;
	else if (strcmp(o, "--tls-auth-clients") == 0 && strcmp(v, "yes") == 0)
		cfg->tls_auth_clients = WR_TLS_VERIFY_REQUIRED;
	else if (strcmp(o, "--tls-auth-clients") == 0 && strcmp(v, "no") == 0)
		cfg->tls_auth_clients = WR_TLS_VERIFY_NONE;
	else if (strcmp(o, "--tls-auth-clients") == 0 && strcmp(v, "optional") == 0)
		cfg->tls_auth_clients = WR_TLS_VERIFY_OPTIONAL;
	else
		return false;
	return true;
}

/* The --tls-* options agree: a port needs the certificate and key, client
 * certificates need the CA.  0, or the usage exit code said on stderr. */
static int check_tls(srv_config *cfg)
{
	const char *why = NULL;
	bool files = cfg->tls_cert != NULL || cfg->tls_key != NULL || cfg->tls_ca != NULL;
	if (cfg->tls_port < 0 && (files || cfg->tls_auth_clients >= 0))
		why = "--tls-cert-file, --tls-key-file, --tls-ca-cert-file and --tls-auth-clients "
		      "need --tls-port";
	else if (cfg->tls_port >= 0 && (cfg->tls_cert == NULL || cfg->tls_key == NULL))
		why = "--tls-port needs --tls-cert-file and --tls-key-file";
	else if (cfg->tls_auth_clients > WR_TLS_VERIFY_NONE && cfg->tls_ca == NULL)
		why = "--tls-auth-clients yes or optional needs --tls-ca-cert-file (the CA that "
		      "signs clients' certificates)";
	if (why != NULL) {
		fprintf(stderr, "walrus serve: %s\n", why);
		return TOOL_EXIT_USAGE;
	}
	if (cfg->tls_auth_clients < 0)
		cfg->tls_auth_clients =
		    cfg->tls_ca != NULL ? WR_TLS_VERIFY_REQUIRED : WR_TLS_VERIFY_NONE;
	return 0;
}

/* One option of the RESP server at argv[*i]; false when it is not one or is bad. */
static bool server_option(srv_config *cfg, pass_src *pw, int argc, char **argv, int *i,
                          bool *default_unix)
{
	const char *o = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
	long n;
	if (strcmp(o, "--resp") == 0)
		return true;
	if (strcmp(o, "--no-tcp") == 0) {
		cfg->tcp = false;
		return true;
	}
	if (v == NULL)
		return false;
	(*i)++;
	if (strcmp(o, "--port") == 0 && parse_int(v, 0, 65535, &n))
		cfg->port = (int)n;
	else if (strcmp(o, "--bind") == 0)
		cfg->bind = v;
	else if (strcmp(o, "--unix") == 0) {
		snprintf(cfg->unix_path, sizeof(cfg->unix_path), "%s", strcmp(v, "none") ? v : "");
		*default_unix = false;
	} else if (strcmp(o, "--requirepass") == 0 && pw->file == NULL)
		pw->flag = v;
	else if (strcmp(o, "--requirepass-file") == 0 && pw->flag == NULL)
		pw->file = v;
	else if (strcmp(o, "--idle-timeout") == 0 && parse_int(v, 0, 86400L * 365, &n))
		cfg->idle_ms = (int64_t)n * 1000;
	else if (strcmp(o, "--backends") == 0 && parse_int(v, 0, SRV_MAX_POOL, &n))
		cfg->backends = (int)n;
	else if (strcmp(o, "--databases") == 0 && parse_int(v, 1, 1000000, &n))
		cfg->databases = (int)n;
	else
		return tls_option(cfg, o, v);
	return true;
}

static int run_supervisor(tool_ctx *ctx)
{
	char abs[PATH_MAX];
	const wr_options *o = &ctx->opts->o;
	int rc = wr_opts_validate(o);
	if (rc == WALRUS_OK)
		rc = datadir_resolve(ctx->datadir, o->create_if_missing, abs);
	if (rc == WALRUS_OK)
		rc = datadir_check(abs);
	if (rc != WALRUS_OK)
		return tool_fail(rc, ctx->datadir);
	wr_log_set_stderr(WR_LOG);
	supervisor_main(abs, o, -1, true);
}

/* walrus serve's options in DIR/walrus.conf count unless -o set them. */
static int server_conf(const char *abs, wr_options *o)
{
	wr_options file;
	size_t n;
	const wr_opt_desc *t = wr_opts_table(&n);
	wr_opts_defaults(&file);
	int rc = conf_load(abs, &file);
	for (size_t i = 0; rc == WALRUS_OK && i < n; i++)
		if (t[i].scope == WR_SCOPE_SERVER && !wr_opts_is_set(o, i) &&
		    wr_opts_is_set(&file, i))
			wr_opts_copy(o, &file, i);
	return rc;
}

static int pass_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A problem with the password: said on stderr; the usage exit code. */
static int pass_fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "walrus serve: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return TOOL_EXIT_USAGE;
}

/* A password file is ours alone: whoever reads it has the data. */
static int check_private(int fd, const char *path)
{
	struct stat st;
	if (fstat(fd, &st) != 0)
		return pass_fail("could not stat \"%s\": %s", path, strerror(errno));
	if ((st.st_mode & 077) == 0)
		return 0;
	return pass_fail("\"%s\" is readable by %s: chmod 600 it", path,
	                 (st.st_mode & 070) ? "its group" : "others");
}

/* The first line of --requirepass-file into pw->buf. */
static int read_pass_file(pass_src *pw)
{
	int fd = open(pw->file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return pass_fail("could not open \"%s\": %s", pw->file, strerror(errno));
	int rc = check_private(fd, pw->file);
	size_t got = 0;
	while (rc == 0 && got < sizeof(pw->buf) - 1) {
		ssize_t n = read(fd, pw->buf + got, sizeof(pw->buf) - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			rc = pass_fail("could not read \"%s\": %s", pw->file, strerror(errno));
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd); /* read-only: nothing a failed close could lose */
	pw->buf[got] = '\0';
	if (rc == 0 && got == sizeof(pw->buf) - 1)
		rc = pass_fail("\"%s\" is too long for a password", pw->file);
	pw->buf[strcspn(pw->buf, "\r\n")] = '\0'; /* the first line */
	return rc;
}

/* The password, from --requirepass-file, --requirepass or walrus.conf; NULL for none. */
static int find_password(const char *abs, pass_src *pw, const char **out)
{
	bool found = pw->file != NULL || pw->flag != NULL;
	int rc = 0;
	*out = NULL;
	if (pw->file != NULL) {
		rc = read_pass_file(pw);
	} else if (pw->flag != NULL) {
		fprintf(stderr,
		        "walrus serve: WARNING: --requirepass shows the password to every "
		        "local user (ps, /proc/PID/cmdline of the server and of each "
		        "backend): put \"requirepass = '...'\" in %s/%s (mode 0600) or use "
		        "--requirepass-file\n",
		        abs, WR_CONF_FILE);
		rc = wr_snprintf(pw->buf, sizeof(pw->buf), "%s", pw->flag)
		         ? 0
		         : pass_fail("--requirepass: a password is at most %zu bytes",
		                     sizeof(pw->buf) - 1);
	} else {
		int r = conf_secret(abs, "requirepass", pw->buf, sizeof(pw->buf), &found);
		if (r != WALRUS_OK)
			rc = tool_fail(r, "serve");
	}
	if (rc == 0 && found && pw->buf[0] == '\0')
		rc = pass_fail("the password (%s) is empty: anyone could AUTH",
		               pw->file   ? pw->file
		               : pw->flag ? "--requirepass"
		                          : WR_CONF_FILE);
	if (rc == 0 && found)
		*out = pw->buf;
	return rc;
}

static int run_server(tool_ctx *ctx, srv_config *cfg, pass_src *pw, bool default_unix)
{
	char abs[PATH_MAX];
	const wr_options *o = &ctx->opts->o;
	int rc = wr_opts_validate(o);
	if (rc == WALRUS_OK)
		rc = datadir_resolve(ctx->datadir, o->create_if_missing, abs);
	if (rc == WALRUS_OK && cfg->databases > 0) { /* --databases: as -o databases=N */
		char n[16];
		snprintf(n, sizeof(n), "%d", cfg->databases);
		rc = walrus_opts_set(ctx->opts, "databases", n);
	}
	if (rc == WALRUS_OK)
		rc = server_conf(abs, &ctx->opts->o);
	if (rc != WALRUS_OK)
		return tool_fail(rc, ctx->datadir);
	int code = check_tls(cfg);
	if (code == 0)
		code = find_password(abs, pw, &cfg->requirepass);
	if (code != 0)
		return code;
	cfg->dir = abs;
	cfg->opts = ctx->opts;
	if (default_unix &&
	    !wr_snprintf(cfg->unix_path, sizeof(cfg->unix_path), "%s/walrus-resp.sock", abs))
		return tool_fail(wr_error(WALRUS_EINVAL, "data directory path too long"), abs);
	if (!cfg->tcp && cfg->unix_path[0] == '\0' && cfg->tls_port < 0) {
		fprintf(stderr, "walrus serve: --no-tcp and --unix none: nothing to listen on\n");
		return TOOL_EXIT_USAGE;
	}
	return srv_run(cfg);
}

int cmd_serve(tool_ctx *ctx, int argc, char **argv)
{
	srv_config cfg = {.tcp = true,
	                  .bind = "127.0.0.1",
	                  .port = 6379,
	                  .backends = -1,
	                  .tls_port = -1,
	                  .tls_auth_clients = -1};
	static pass_src pw; /* lives while the server runs */
	bool default_unix = true;
	if (tool_wants_help(argc, argv)) {
		fputs(usage, stdout);
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		const char *opt = argv[i];
		if (!server_option(&cfg, &pw, argc, argv, &i, &default_unix)) {
			fprintf(stderr, "walrus serve: bad or unknown option \"%s\"\n%s", opt,
			        usage);
			return TOOL_EXIT_USAGE;
		}
	}
	if (ctx->datadir == NULL) {
		fprintf(stderr, "walrus: no data directory: use -D DIR or set WALRUS_DATA\n");
		return TOOL_EXIT_USAGE;
	}
	int code = argc > 1 ? run_server(ctx, &cfg, &pw, default_unix) : run_supervisor(ctx);
	explicit_bzero(pw.buf, sizeof(pw.buf));
	return code;
}
