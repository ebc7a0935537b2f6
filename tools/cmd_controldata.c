/* placeholder: being written */
#include "tool.h"

#include <stdio.h>

int cmd_controldata(tool_ctx *ctx, int argc, char **argv)
{
	(void)ctx;
	(void)argc;
	(void)argv;
	fprintf(stderr, "walrus controldata: not yet available\n");
	return TOOL_EXIT_ENGINE;
}
