/*
 * cmd_options.c - `walrus options`: every engine option with its default,
 * range and meaning, from the one option table.
 */
#include "tool.h"

#include <stdio.h>

int cmd_options(tool_ctx *ctx, int argc, char **argv)
{
	size_t n;
	const wr_opt_desc *t = wr_opts_table(&n);

	if (tool_wants_help(argc, argv)) {
		printf("usage: walrus [-o name=value ...] options\n\n"
		       "Lists every option with its value (after -o) and description.\n");
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		char val[WR_OPT_TEXT_MAX];
		if (wr_opts_get(&ctx->opts->o, t[i].name, val, sizeof(val)) != WALRUS_OK)
			continue;
		printf("%-30s %-12s %-8s %s\n", t[i].name, val,
		       t[i].scope == WR_SCOPE_INSTANCE ? "instance"
		       : t[i].scope == WR_SCOPE_SERVER ? "server"
		                                       : "session",
		       t[i].help);
	}
	return 0;
}
