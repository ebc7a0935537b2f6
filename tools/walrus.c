/*
 * walrus.c - the `walrus` command: global options and subcommand dispatch.
 *
 *   walrus [-D DIR] [-o name=value ...] [-s NAME] SUBCOMMAND [args]
 *
 * -D names the data directory (default: $WALRUS_DATA); -o sets any engine
 * option, repeatable; -s (--space) names the key space that put, get, del,
 * incr, scan and load work in.  Exit codes: 0 ok, 1 not found, 2 damage or usage,
 * 3 engine error.  Each subcommand lives in its own cmd_*.c file.
 */
#include "tool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const tool_cmd commands[] = {
    {"put", cmd_put, "store KEY VALUE (durable when it returns)"},
    {"get", cmd_get, "print the value of KEY (exit 1 when absent)"},
    {"del", cmd_del, "delete KEY (exit 1 when absent)"},
    {"incr", cmd_incr, "add 1 (or --by N) to the integer in KEY, in a transaction"},
    {"scan", cmd_scan, "print KEY<TAB>VALUE lines in key order (escaped)"},
    {"load", cmd_load, "KEY<TAB>VALUE lines from stdin (--sync, --ack)"},
    {"checkpoint", cmd_checkpoint, "run an immediate checkpoint"},
    {"compact", cmd_compact, "pack the tree and give its data file's unused tail back"},
    {"switch-wal", cmd_switch_wal, "end the current WAL segment (for archiving)"},
    {"restore-point", cmd_restore_point, "write a named restore point into the WAL"},
    {"backup", cmd_backup, "an online base backup of DIR into DEST (--progress, --verify)"},
    {"restore", cmd_restore, "a base backup into NEWDIR, recovered (to a target: PITR)"},
    {"stats", cmd_stats, "the instance's counters (--json)"},
    {"verify", cmd_verify, "check every page checksum and the tree (exit 2 on damage)"},
    {"serve", cmd_serve,
     "the supervisor in the foreground; with --port/--unix/--resp a RESP (Redis protocol) server"},
    {"status", cmd_status,
     "is DIR's instance ready (exit 0), not yet (1) or not running (2); --wait"},
    {"stop", cmd_stop, "shut the instance down (--mode smart|fast|immediate, --wait)"},
    {"standby", cmd_standby,
     "run DIR as a hot standby in the foreground (--primary, --wal-archive)"},
    {"promote", cmd_promote, "make the standby running on DIR a primary"},
    {"slot", cmd_slot, "create, drop or list replication slots"},
    {"space", cmd_space, "create, drop or list named key spaces (-s NAME works in one)"},
    {"selftest", cmd_selftest, "write, sync, read back and damage pages: the I/O path at work"},
    {"doctor", cmd_doctor, "check DIR's file system for durable writes (O_DIRECT, fsync speed)"},
    {"options", cmd_options, "list every engine option with its default and range"},
    {"config", cmd_config, "set, get or list the settings of DIR/walrus.conf"},
    {"waldump", cmd_waldump, "print the WAL's records, one per line (--stats: per rmgr)"},
    {"controldata", cmd_controldata, "print the control file"},
    {"bench", cmd_bench, "run a benchmark workload (walrus bench --help)"},
};

static void usage(FILE *out)
{
	fprintf(out, "usage: walrus [-D DIR] [-o name=value ...] [-s NAME] COMMAND [ARGS]\n\n"
	             "commands:\n");
	for (size_t i = 0; i < WR_ARRAY_LEN(commands); i++)
		fprintf(out, "  %-13s %s\n", commands[i].name, commands[i].help);
	fprintf(out, "\n  -D DIR         data directory (or set WALRUS_DATA)\n"
	             "  -o name=value  set an engine option (see `walrus options`)\n"
	             "  -s NAME        (--space NAME) put, get, del, incr, scan, load and the\n"
	             "                 key-value benchmarks work in key space NAME (`walrus space\n"
	             "                 create NAME` makes it; bench makes it itself)\n"
	             "  COMMAND --help for the command's own options\n\n"
	             "exit codes: 0 ok, 1 not found, 2 damage or usage, 3 engine error\n");
}

int tool_fail(int code, const char *what)
{
	fprintf(stderr, "walrus: %s: %s\n", what,
	        walrus_errmsg()[0] ? walrus_errmsg() : walrus_strerror(code));
	return code == WALRUS_ECORRUPT    ? TOOL_EXIT_DAMAGE
	       : code == WALRUS_ENOTFOUND ? TOOL_EXIT_NOTFOUND
	       : code == WALRUS_EINVAL    ? TOOL_EXIT_USAGE
	                                  : TOOL_EXIT_ENGINE;
}

int tool_open(tool_ctx *ctx, bool create, walrus **db)
{
	if (ctx->datadir == NULL) {
		fprintf(stderr, "walrus: no data directory: use -D DIR or set WALRUS_DATA\n");
		return TOOL_EXIT_USAGE;
	}
	if (create && walrus_opts_set(ctx->opts, "create_if_missing", "on") != WALRUS_OK)
		return tool_fail(WALRUS_EINVAL, "create_if_missing");
	int rc = walrus_open(ctx->datadir, ctx->opts, db);
	if (rc != WALRUS_OK)
		return tool_fail(rc, ctx->datadir);
	return 0;
}

int tool_space(tool_ctx *ctx, walrus *db, walrus_space **sp)
{
	*sp = NULL;
	if (ctx->space == NULL)
		return 0;
	int rc = walrus_space_open(db, ctx->space, 0, sp);
	if (rc == WALRUS_ENOTFOUND) {
		fprintf(stderr,
		        "walrus: key space \"%s\" does not exist: create it with "
		        "`walrus -D %s space create %s`\n",
		        ctx->space, ctx->datadir, ctx->space);
		return TOOL_EXIT_NOTFOUND;
	}
	return rc == WALRUS_OK ? 0 : tool_fail(rc, ctx->space);
}

static int parse_globals(int argc, char **argv, tool_ctx *ctx, int *next)
{
	int i = 1;
	while (i < argc && argv[i][0] == '-') {
		const char *a = argv[i];
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout);
			exit(0);
		}
		bool space = strcmp(a, "-s") == 0 || strcmp(a, "--space") == 0;
		if ((strcmp(a, "-D") == 0 || strcmp(a, "-o") == 0 || space) && i + 1 >= argc) {
			fprintf(stderr, "walrus: %s needs a value\n", a);
			return TOOL_EXIT_USAGE;
		}
		if (strcmp(a, "-D") == 0) {
			ctx->datadir = argv[i + 1];
		} else if (space) {
			ctx->space = argv[i + 1];
		} else if (strcmp(a, "-o") == 0) {
			if (wr_opts_set_pair(&ctx->opts->o, argv[i + 1]) != WALRUS_OK) {
				fprintf(stderr, "walrus: %s\n", walrus_errmsg());
				return TOOL_EXIT_USAGE;
			}
		} else {
			fprintf(stderr, "walrus: unknown option \"%s\"\n", a);
			return TOOL_EXIT_USAGE;
		}
		i += 2;
	}
	*next = i;
	return 0;
}

/* The commands -s applies to. */
static const char *const in_space[] = {"put", "get", "del", "incr", "scan", "load", "bench"};

/* A command that does not work in a key space refuses -s rather than ignore it. */
static int run_command(const tool_cmd *c, tool_ctx *ctx, int argc, char **argv)
{
	bool takes = false;
	for (size_t i = 0; i < WR_ARRAY_LEN(in_space); i++)
		takes = takes || strcmp(c->name, in_space[i]) == 0;
	if (ctx->space != NULL && !takes) {
		fprintf(stderr,
		        "walrus: -s (a key space) applies to put, get, del, incr, scan, load and "
		        "bench, not to %s\n",
		        c->name);
		return TOOL_EXIT_USAGE;
	}
	return c->fn(ctx, argc, argv);
}

int main(int argc, char **argv)
{
	tool_ctx ctx = {.datadir = getenv("WALRUS_DATA")};
	int next;

	/* The library is silent on stderr; this command is a terminal program and
	 * shows its engine's warnings there (the instance's own go to its log). */
	wr_log_set_stderr(WR_WARNING);
	ctx.opts = walrus_opts_new();
	if (ctx.opts == NULL) {
		fprintf(stderr, "walrus: out of memory\n");
		return TOOL_EXIT_ENGINE;
	}
	int rc = parse_globals(argc, argv, &ctx, &next);
	if (rc != 0)
		goto out;
	if (next >= argc) {
		usage(stderr);
		rc = TOOL_EXIT_USAGE;
		goto out;
	}
	rc = -1;
	for (size_t i = 0; i < WR_ARRAY_LEN(commands); i++)
		if (strcmp(argv[next], commands[i].name) == 0)
			rc = run_command(&commands[i], &ctx, argc - next, argv + next);
	if (rc == -1) {
		fprintf(stderr, "walrus: unknown command \"%s\" (walrus --help lists them)\n",
		        argv[next]);
		rc = TOOL_EXIT_USAGE;
	}
out:
	walrus_opts_free(ctx.opts);
	return rc;
}

bool tool_wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
			return true;
	return false;
}

static int hex_nibble(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

bool tool_hex_decode(const char *s, size_t n, char *out)
{
	if (n % 2 != 0)
		return false;
	for (size_t i = 0; i < n / 2; i++) {
		int h = hex_nibble(s[2 * i]), l = hex_nibble(s[2 * i + 1]);
		if (h < 0 || l < 0)
			return false;
		out[i] = (char)(h << 4 | l);
	}
	return true;
}
