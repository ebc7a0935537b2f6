/* placeholder: being written */
#include "tool.h"

#include <stdio.h>

int cmd_waldump(tool_ctx *ctx, int argc, char **argv)
{
	(void)ctx;
	(void)argc;
	(void)argv;
	fprintf(stderr, "walrus waldump: not yet available\n");
	return TOOL_EXIT_ENGINE;
}
