/*
 * cmd_serve.c - `walrus serve`: the supervisor in the foreground, as
 * `postgres -D DIR` runs the postmaster.  It stops on SIGTERM or SIGINT
 * (after a clean shutdown); log lines also go to stderr.
 */
#include "tool.h"

#include <stdio.h>
#include <string.h>

#include "engine/engine.h"

int cmd_serve(tool_ctx *ctx, int argc, char **argv)
{
	char abs[PATH_MAX];

	if (tool_wants_help(argc, argv)) {
		printf("usage: walrus -D DIR serve\n\n"
		       "Runs the instance's supervisor in the foreground until SIGTERM/SIGINT.\n"
		       "Processes that open DIR attach to it.  The RESP server arrives with\n"
		       "--port in a later version.\n");
		return 0;
	}
	if (argc > 1) {
		fprintf(stderr, "walrus serve: unexpected argument \"%s\"\n", argv[1]);
		return TOOL_EXIT_USAGE;
	}
	if (ctx->datadir == NULL) {
		fprintf(stderr, "walrus: no data directory: use -D DIR or set WALRUS_DATA\n");
		return TOOL_EXIT_USAGE;
	}
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
