/*
 * cmd_space.c - `walrus space create NAME | drop NAME | list [--json]`: the
 * named key spaces of a data directory (walrus_space_create, _drop, _list).
 * put, get, del, incr, scan and load work in one with the global -s NAME.
 */
#include "tool.h"

#include <string.h>

static const char usage[] =
    "usage: walrus -D DIR space create NAME | drop NAME | list [--json]\n\n"
    "A key space is an ordered set of keys of its own, in its own data files,\n"
    "beside the default one; `walrus -D DIR -s NAME put|get|del|incr|scan|load`\n"
    "works in it.  Names: 1 to 64 of letters, digits, '_', '-' and '.'.\n"
    "create and drop are durable when they return; drop deletes every key of\n"
    "the space and gives its files back.  list prints one name per line, in\n"
    "order (--json: a JSON array of the names).\n"
    "Exit codes: 0 done, 1 no such space (drop) or it exists (create),\n"
    "2 usage or a bad name, 3 engine error.\n";

/* Names hold only letters, digits, '_', '-' and '.': nothing to escape in JSON. */
static int space_list(walrus *db, bool json)
{
	char **names;
	size_t n;
	int rc = walrus_space_list(db, &names, &n);
	if (rc != WALRUS_OK)
		return tool_fail(rc, "space list");
	if (json)
		putchar('[');
	for (size_t i = 0; i < n; i++) {
		if (json)
			printf("%s\"%s\"", i ? "," : "", names[i]);
		else
			printf("%s\n", names[i]);
	}
	if (json)
		puts("]");
	walrus_free(names);
	return fflush(stdout) == 0 ? 0 : TOOL_EXIT_ENGINE;
}

static int space_change(walrus *db, const char *verb, const char *name)
{
	int e = verb[0] == 'c' ? walrus_space_create(db, name) : walrus_space_drop(db, name);
	if (e == WALRUS_OK)
		return 0;
	char what[96];
	snprintf(what, sizeof(what), "space %s", verb);
	int rc = tool_fail(e, what);
	return e == WALRUS_EEXIST ? TOOL_EXIT_NOTFOUND : rc;
}

int cmd_space(tool_ctx *ctx, int argc, char **argv)
{
	if (tool_wants_help(argc, argv)) {
		fputs(usage, stdout);
		return 0;
	}
	const char *verb = argc > 1 ? argv[1] : "";
	bool json = argc == 3 && strcmp(argv[2], "--json") == 0;
	bool list = strcmp(verb, "list") == 0 && (argc == 2 || json);
	bool named = (strcmp(verb, "create") == 0 || strcmp(verb, "drop") == 0) && argc == 3;
	if (!list && !named) {
		fputs(usage, stderr);
		return TOOL_EXIT_USAGE;
	}
	walrus *db;
	int rc = tool_open(ctx, false, &db);
	if (rc != 0)
		return rc;
	rc = list ? space_list(db, json) : space_change(db, verb, argv[2]);
	int c = walrus_close(db);
	return rc != 0 ? rc : c == WALRUS_OK ? 0 : tool_fail(c, "close");
}
