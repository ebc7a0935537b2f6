/*
 * cmd_stop.c - `walrus stop`: shuts down the instance serving DIR, as
 * `pg_ctl stop` does (walrus_stop() does the work).  Exit 0 when the
 * request was accepted (with --wait: once the instance's processes have
 * exited), 1 when no instance is running, 2 for a usage error or a missing
 * directory, 3 for an engine error.
 */
#include "tool.h"

#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: walrus -D DIR stop [--mode smart|fast|immediate] [--wait]\n\n"
    "Shuts down the instance serving DIR.\n"
    "  -m, --mode M  smart: new opens are refused; the instance waits until every\n"
    "                       process attached to it has closed its handles, then\n"
    "                       writes a shutdown checkpoint and exits\n"
    "                fast (the default): calls on open handles fail with \"instance\n"
    "                       shutting down\" (those under way finish), then the\n"
    "                       shutdown checkpoint and exit\n"
    "                immediate: the processes stop at once, without a checkpoint;\n"
    "                       the next start recovers from the WAL\n"
    "  -w, --wait    return once the supervisor and its processes have exited\n\n"
    "No mode loses a write acknowledged as durable.  A stop under way may be\n"
    "escalated by another (smart, then fast, then immediate).\n"
    "Exit codes: 0 done, 1 no instance is running, 2 usage or no such directory,\n"
    "3 engine error.\n";

static int parse_mode(const char *s)
{
	static const char *const names[] = {"smart", "fast", "immediate"};
	static const int modes[] = {WALRUS_STOP_SMART, WALRUS_STOP_FAST, WALRUS_STOP_IMMEDIATE};
	for (size_t i = 0; s != NULL && i < WR_ARRAY_LEN(names); i++)
		if (strcmp(s, names[i]) == 0)
			return modes[i];
	return 0;
}

static int parse_args(int argc, char **argv, int *mode, bool *wait)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "-w") == 0 || strcmp(a, "--wait") == 0) {
			*wait = true;
		} else if (strcmp(a, "-m") == 0 || strcmp(a, "--mode") == 0) {
			*mode = parse_mode(i + 1 < argc ? argv[++i] : NULL);
			if (*mode == 0) {
				fprintf(stderr,
				        "walrus stop: --mode takes smart, fast or immediate\n");
				return TOOL_EXIT_USAGE;
			}
		} else {
			fprintf(stderr, "walrus stop: unknown argument \"%s\"\n%s", a, usage);
			return TOOL_EXIT_USAGE;
		}
	}
	return 0;
}

int cmd_stop(tool_ctx *ctx, int argc, char **argv)
{
	int mode = WALRUS_STOP_FAST;
	bool wait = false;

	if (tool_wants_help(argc, argv)) {
		fputs(usage, stdout);
		return 0;
	}
	int rc = parse_args(argc, argv, &mode, &wait);
	if (rc != 0)
		return rc;
	if (ctx->datadir == NULL) {
		fprintf(stderr, "walrus: no data directory: use -D DIR or set WALRUS_DATA\n");
		return TOOL_EXIT_USAGE;
	}
	rc = walrus_stop(ctx->datadir, mode, wait);
	if (rc == WALRUS_ENOTRUNNING) {
		fprintf(stderr, "walrus stop: %s\n", walrus_errmsg());
		return TOOL_EXIT_NOTFOUND;
	}
	if (rc == WALRUS_ENOENT) {
		fprintf(stderr, "walrus stop: %s\n", walrus_errmsg());
		return TOOL_EXIT_USAGE;
	}
	if (rc != WALRUS_OK)
		return tool_fail(rc, "stop");
	printf(wait ? "instance on \"%s\" stopped\n"
	            : "shutdown of the instance on \"%s\" requested\n",
	       ctx->datadir);
	return 0;
}
