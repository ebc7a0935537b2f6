/*
 * cmd_serve.c - `walrus serve`: the RESP server, or the supervisor alone.
 *
 * With any server option (--port, --bind, --unix, --no-tcp, --requirepass,
 * --idle-timeout, --backends, --resp) it runs the RESP server of src/server
 * (server.h): one process that accepts connections and hands them to a pool
 * of backend processes (or forks a backend per connection: --backends 0).
 * Without, it runs the instance's supervisor in the foreground, as
 * `postgres -D DIR` runs the postmaster (tests and scripts rely on that
 * form: its pid is the supervisor's).  Both stop on SIGTERM or SIGINT after
 * a clean shutdown (the supervisor on SIGTERM once its attached processes
 * have gone, as a smart `walrus stop`); the supervisor's log lines also go
 * to stderr.
 */
#include "tool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "server/server.h"

static const char usage[] =
    "usage: walrus -D DIR serve [--port P] [--bind ADDR] [--unix PATH|none] [--no-tcp]\n"
    "                           [--requirepass PW] [--idle-timeout S] [--backends N]\n"
    "                           [--resp]\n"
    "       walrus -D DIR serve          (no option: the supervisor alone)\n\n"
    "RESP server (Redis protocol; redis-cli and Redis client libraries work):\n"
    "  --port P          TCP port (default 6379; 0 picks a free port, printed)\n"
    "  --bind ADDR       address to listen on (default 127.0.0.1)\n"
    "  --no-tcp          no TCP listener: the Unix socket only\n"
    "  --unix PATH       Unix socket (default DIR/walrus-resp.sock, mode 0600, in a\n"
    "                    0700 directory); \"none\" for no Unix socket\n"
    "  --requirepass PW  clients must AUTH first\n"
    "  --idle-timeout S  close connections idle S seconds (default 0: never)\n"
    "  --backends N      N backend processes, each serving many connections with\n"
    "                    epoll (default: 2 per online CPU, at most 64); 0: one\n"
    "                    backend process per connection\n"
    "  --resp            the RESP server with every default\n\n"
    "At most max_connections - 1 clients (-o max_connections=N); the pool\n"
    "backends hold one attachment each.  Writes are acknowledged once durable when\n"
    "synchronous_commit=on (the default; -o synchronous_commit=off acknowledges\n"
    "at once).  SIGTERM: clean shutdown (requests under way finish); SIGINT:\n"
    "fast shutdown (connections dropped).  Prints \"walrus serve: RESP on ADDR\n"
    "port P\" and \"walrus serve: ready ...\" once it accepts connections.\n\n"
    "Without any of these options: runs the instance's supervisor in the\n"
    "foreground; processes that open DIR attach to it.  It stops as `walrus stop`\n"
    "makes it: SIGTERM smart (once the attached processes have closed their\n"
    "handles), SIGINT fast, SIGQUIT immediate (no checkpoint).\n";

static bool parse_int(const char *s, long lo, long hi, long *out)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (*s == '\0' || *end != '\0' || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

/* One option of the RESP server at argv[*i]; false when it is not one or is bad. */
static bool server_option(srv_config *cfg, int argc, char **argv, int *i, bool *default_unix)
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
	} else if (strcmp(o, "--requirepass") == 0)
		cfg->requirepass = v;
	else if (strcmp(o, "--idle-timeout") == 0 && parse_int(v, 0, 86400L * 365, &n))
		cfg->idle_ms = (int64_t)n * 1000;
	else if (strcmp(o, "--backends") == 0 && parse_int(v, 0, SRV_MAX_POOL, &n))
		cfg->backends = (int)n;
	else
		return false;
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

static int run_server(tool_ctx *ctx, srv_config *cfg, bool default_unix)
{
	char abs[PATH_MAX];
	const wr_options *o = &ctx->opts->o;
	int rc = wr_opts_validate(o);
	if (rc == WALRUS_OK)
		rc = datadir_resolve(ctx->datadir, o->create_if_missing, abs);
	if (rc != WALRUS_OK)
		return tool_fail(rc, ctx->datadir);
	cfg->dir = abs;
	cfg->opts = ctx->opts;
	if (default_unix &&
	    !wr_snprintf(cfg->unix_path, sizeof(cfg->unix_path), "%s/walrus-resp.sock", abs))
		return tool_fail(wr_error(WALRUS_EINVAL, "data directory path too long"), abs);
	if (!cfg->tcp && cfg->unix_path[0] == '\0') {
		fprintf(stderr, "walrus serve: --no-tcp and --unix none: nothing to listen on\n");
		return TOOL_EXIT_USAGE;
	}
	return srv_run(cfg);
}

int cmd_serve(tool_ctx *ctx, int argc, char **argv)
{
	srv_config cfg = {.tcp = true, .bind = "127.0.0.1", .port = 6379, .backends = -1};
	bool default_unix = true;
	if (tool_wants_help(argc, argv)) {
		fputs(usage, stdout);
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		const char *opt = argv[i];
		if (!server_option(&cfg, argc, argv, &i, &default_unix)) {
			fprintf(stderr, "walrus serve: bad or unknown option \"%s\"\n%s", opt,
			        usage);
			return TOOL_EXIT_USAGE;
		}
	}
	if (ctx->datadir == NULL) {
		fprintf(stderr, "walrus: no data directory: use -D DIR or set WALRUS_DATA\n");
		return TOOL_EXIT_USAGE;
	}
	return argc > 1 ? run_server(ctx, &cfg, default_unix) : run_supervisor(ctx);
}
