/*
 * cmd_slot.c - `walrus slot create|drop NAME` and `walrus slot list`: the
 * replication slots of a primary (walrus_slot_create, walrus_slot_drop;
 * the list comes from the statistics).
 */
#include "tool.h"

#include <string.h>

static const char usage[] =
    "usage: walrus -D DIR slot create NAME | drop NAME | list\n\n"
    "A replication slot keeps the WAL a standby using it (walrus standby --slot\n"
    "NAME) has not flushed yet, up to max_slot_wal_keep_size behind the redo\n"
    "point.  A new slot keeps WAL from the last checkpoint's redo point.\n"
    "list prints NAME<TAB>RESTART_LSN<TAB>active|inactive|invalidated per slot.\n"
    "Exit codes: 0 done, 1 no such slot (drop), 2 usage, 3 engine error.\n";

static int slot_list(walrus *db)
{
	char *json = NULL;
	int rc = walrus_stats(db, &json);
	if (rc != WALRUS_OK)
		return tool_fail(rc, "stats");
	/* The "slots" array: [{"name":"N","restart_lsn":"X/Y","active_pid":P,"invalidated":I},...]
	 */
	const char *p = strstr(json, "\"slots\":[");
	while (p != NULL && (p = strstr(p, "{\"name\":\"")) != NULL) {
		char name[64], lsn[32];
		unsigned long pid = 0, inval = 0;
		if (sscanf(p,
		           "{\"name\":\"%63[^\"]\",\"restart_lsn\":\"%31[^\"]\",\"active_pid\":%lu,"
		           "\"invalidated\":%lu",
		           name, lsn, &pid, &inval) != 4)
			break;
		printf("%s\t%s\t%s\n", name, lsn,
		       inval ? "invalidated"
		       : pid ? "active"
		             : "inactive");
		p++;
	}
	walrus_free(json);
	return 0;
}

int cmd_slot(tool_ctx *ctx, int argc, char **argv)
{
	if (tool_wants_help(argc, argv)) {
		fputs(usage, stdout);
		return 0;
	}
	const char *verb = argc > 1 ? argv[1] : "";
	bool list = strcmp(verb, "list") == 0 && argc == 2;
	bool named = (strcmp(verb, "create") == 0 || strcmp(verb, "drop") == 0) && argc == 3;
	if (!list && !named) {
		fputs(usage, stderr);
		return TOOL_EXIT_USAGE;
	}
	walrus *db;
	int rc = tool_open(ctx, false, &db);
	if (rc != 0)
		return rc;
	if (list)
		rc = slot_list(db);
	else {
		int e = verb[0] == 'c' ? walrus_slot_create(db, argv[2])
		                       : walrus_slot_drop(db, argv[2]);
		rc = e == WALRUS_OK ? 0 : tool_fail(e, verb);
	}
	int c = walrus_close(db);
	return rc != 0 ? rc : c == WALRUS_OK ? 0 : tool_fail(c, "close");
}
