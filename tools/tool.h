/*
 * tool.h - what the `walrus` command's subcommands share: the context built
 * from the global options, opening the database, and exit codes.
 *
 * Exit codes are part of the command contract: 0 ok, 1 not found, 2 damage
 * or usage error, 3 engine error.
 */
#ifndef WALRUS_TOOL_H
#define WALRUS_TOOL_H

#include <stdbool.h>
#include <stddef.h>

#include "common/common.h"
#include "walrus.h"

#define TOOL_EXIT_OK       0
#define TOOL_EXIT_NOTFOUND 1
#define TOOL_EXIT_USAGE    2
#define TOOL_EXIT_DAMAGE   2
#define TOOL_EXIT_ENGINE   3

typedef struct tool_ctx {
	const char *datadir;
	walrus_opts *opts;
} tool_ctx;

typedef int (*tool_fn)(tool_ctx *ctx, int argc, char **argv);
typedef struct tool_cmd {
	const char *name;
	tool_fn fn;
	const char *help;
} tool_cmd;

/* Prints "walrus: what: message" and returns the exit code for @code. */
int tool_fail(int code, const char *what);
/* Opens ctx->datadir (creating it when @create); prints and returns an exit code on failure. */
int tool_open(tool_ctx *ctx, bool create, walrus **db);
/* Decodes @n hex digits of @s into @out (n/2 bytes; may be @s itself); false if not hex. */
bool tool_hex_decode(const char *s, size_t n, char *out);
/* True when argv holds -h or --help. */
bool tool_wants_help(int argc, char **argv);

int cmd_serve(tool_ctx *ctx, int argc, char **argv);
int cmd_status(tool_ctx *ctx, int argc, char **argv);
int cmd_selftest(tool_ctx *ctx, int argc, char **argv);
int cmd_options(tool_ctx *ctx, int argc, char **argv);
int cmd_waldump(tool_ctx *ctx, int argc, char **argv);
int cmd_controldata(tool_ctx *ctx, int argc, char **argv);
int cmd_bench(tool_ctx *ctx, int argc, char **argv);
int cmd_bench_kv(tool_ctx *ctx, int argc, char **argv); /* -1: not a kv workload */
int cmd_bench_ckpt(tool_ctx *ctx, int argc, char **argv);
int cmd_put(tool_ctx *ctx, int argc, char **argv);
int cmd_get(tool_ctx *ctx, int argc, char **argv);
int cmd_del(tool_ctx *ctx, int argc, char **argv);
int cmd_scan(tool_ctx *ctx, int argc, char **argv);
int cmd_load(tool_ctx *ctx, int argc, char **argv);
int cmd_checkpoint(tool_ctx *ctx, int argc, char **argv);
int cmd_stats(tool_ctx *ctx, int argc, char **argv);
int cmd_verify(tool_ctx *ctx, int argc, char **argv);

#endif
