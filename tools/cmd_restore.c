/*
 * cmd_restore.c - `walrus restore`: a base backup into a new data
 * directory, recovered to the end of the archived WAL or to a target
 * (walrus_restore does the work).
 */
#include "tool.h"

#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: walrus restore --from BACKUP [--wal-archive DIR]\n"
    "                      [--target-lsn X/Y | --target-time T | --target-name NAME]\n"
    "                      [--target-timeline latest|current|N] NEWDIR\n\n"
    "Copies the base backup BACKUP (walrus backup) into NEWDIR (new or empty),\n"
    "adds the WAL archived after it (DIR, as archive_dir writes it) up to the\n"
    "first missing segment, and recovers: to the end of that WAL, or up to the\n"
    "target, where recovery ends on a new timeline.  NEWDIR is then a stopped\n"
    "data directory.  T: \"YYYY-MM-DD HH:MM:SS[.fff]\" (local time, or with Z or\n"
    "+HH:MM) or \"@SECONDS[.fff]\" since the epoch.  --target-timeline: the\n"
    "history to follow: latest (default: the highest timeline in DIR that\n"
    "descends from the backup, so a backup taken before a failover recovers\n"
    "the promoted standby's writes), current (the backup's), or a number.\n"
    "A failed restore leaves NEWDIR holding walrus.restore-incomplete; remove\n"
    "it and try again.\n"
    "Exit codes: 0 done, 2 usage, a bad backup or damage, 3 engine error.\n";

typedef struct restore_args {
	const char *from, *archive, *kind, *value, *newdir, *timeline;
} restore_args;

static int set_target(restore_args *a, const char *kind, const char *value)
{
	if (a->kind != NULL) {
		fprintf(stderr, "walrus restore: give at most one --target-*\n");
		return TOOL_EXIT_USAGE;
	}
	a->kind = kind;
	a->value = value;
	return 0;
}

static int parse(int argc, char **argv, restore_args *a)
{
	static const char *const targets[][2] = {
	    {"--target-lsn", "lsn"}, {"--target-time", "time"}, {"--target-name", "name"}};
	for (int i = 1; i < argc; i++) {
		const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		bool takes = o[0] == '-';
		if (takes && v == NULL) {
			fprintf(stderr, "walrus restore: %s needs a value\n%s", o, usage);
			return TOOL_EXIT_USAGE;
		}
		int rc = 0;
		if (strcmp(o, "--from") == 0)
			a->from = v;
		else if (strcmp(o, "--wal-archive") == 0)
			a->archive = v;
		else if (strcmp(o, "--target-timeline") == 0)
			a->timeline = v;
		else if (!takes && a->newdir == NULL)
			a->newdir = o;
		else {
			size_t k = 0;
			while (k < WR_ARRAY_LEN(targets) && strcmp(o, targets[k][0]) != 0)
				k++;
			if (k == WR_ARRAY_LEN(targets)) {
				fprintf(stderr, "walrus restore: unexpected argument \"%s\"\n%s", o,
				        usage);
				return TOOL_EXIT_USAGE;
			}
			rc = set_target(a, targets[k][1], v);
		}
		if (rc != 0)
			return rc;
		i += takes ? 1 : 0;
	}
	if (a->from == NULL || a->newdir == NULL) {
		fprintf(stderr, "walrus restore: --from BACKUP and NEWDIR are required\n%s", usage);
		return TOOL_EXIT_USAGE;
	}
	return 0;
}

int cmd_restore(tool_ctx *ctx, int argc, char **argv)
{
	(void)ctx;
	restore_args a = {0};
	if (tool_wants_help(argc, argv)) {
		fputs(usage, stdout);
		return 0;
	}
	int rc = parse(argc, argv, &a);
	if (rc != 0)
		return rc;
	int e = walrus_restore_timeline(a.from, a.archive, a.kind, a.value, a.timeline, a.newdir);
	if (e != WALRUS_OK) {
		fprintf(stderr, "walrus: restore: %s\n",
		        walrus_errmsg()[0] ? walrus_errmsg() : walrus_strerror(e));
		return e == WALRUS_EINVAL || e == WALRUS_ECORRUPT ? TOOL_EXIT_USAGE
		                                                  : TOOL_EXIT_ENGINE;
	}
	printf("restored into %s\n", a.newdir);
	return 0;
}
