/*
 * cmd_controldata.c - `walrus controldata`: prints DIR/walrus.control, as
 * pg_controldata does.  It reads the file directly and never starts an
 * instance, so it works on a directory that cannot start (the reason to
 * look at the control file in the first place).  Exit 2 when the file is
 * damaged, 3 for other errors (missing, another version).
 */
#include "tool.h"

#include <stdio.h>
#include <time.h>

#include "wal/wal.h"

static const char *state_name(uint32_t state)
{
	switch (state) {
	case WAL_DB_SHUTDOWN:
		return "shut down";
	case WAL_DB_IN_PRODUCTION:
		return "in production";
	case WAL_DB_IN_RECOVERY:
		return "in recovery";
	default:
		return "unrecognized status code";
	}
}

/* Local time, as pg_controldata prints it ("Tue 03 Dec 2026 09:30:00 AM UTC" there). */
static void format_time(uint64_t us, char *buf, size_t len)
{
	time_t t = (time_t)(us / 1000000);
	struct tm tm;
	if (us == 0 || localtime_r(&t, &tm) == NULL || strftime(buf, len, "%c %Z", &tm) == 0)
		wr_snprintf(buf, len, "%s", us == 0 ? "(never)" : "(invalid)");
}

static void print_control(const wal_control *c)
{
	char when[128];
	format_time(c->checkpoint_time_us, when, sizeof(when));
	printf("walrus control file version:          %u\n", c->version);
	printf("System identifier:                    %llu\n", (unsigned long long)c->sysid);
	printf("Database cluster state:               %s\n", state_name(c->state));
	printf("Latest checkpoint location:           " WAL_LSN_FMT "\n",
	       WAL_LSN_ARGS(c->checkpoint_lsn));
	printf("Latest checkpoint's REDO location:    " WAL_LSN_FMT "\n",
	       WAL_LSN_ARGS(c->redo_lsn));
	printf("Prior checkpoint location:            " WAL_LSN_FMT "\n",
	       WAL_LSN_ARGS(c->prev_checkpoint_lsn));
	printf("Time of latest checkpoint:            %s\n", when);
	printf("Page size:                            %u\n", c->page_size);
	printf("WAL segment size:                     %llu\n", (unsigned long long)c->wal_seg_size);
	printf("Data segment size:                    %llu\n",
	       (unsigned long long)c->data_seg_size);
	printf("Next relation id:                     %llu\n", (unsigned long long)c->next_relid);
	printf("Latest checkpoint's TimeLineID:       %u\n", wal_control_timeline(c));
	printf("Promotion decided:                    %s\n", c->promoted ? "yes" : "no");
	printf("Backup start location:                " WAL_LSN_FMT "\n",
	       WAL_LSN_ARGS(c->backup_start_lsn));
	printf("Backup end location:                  " WAL_LSN_FMT "\n",
	       WAL_LSN_ARGS(c->backup_end_lsn));
}

int cmd_controldata(tool_ctx *ctx, int argc, char **argv)
{
	wal_control c;

	if (tool_wants_help(argc, argv)) {
		printf("usage: walrus -D DIR controldata\n\nPrints the control file "
		       "DIR/walrus.control without starting the instance.\nExit 2 if it is "
		       "damaged, 3 on other errors.\n");
		return 0;
	}
	if (argc > 1) {
		fprintf(stderr, "walrus controldata: unexpected argument \"%s\"\n", argv[1]);
		return TOOL_EXIT_USAGE;
	}
	if (ctx->datadir == NULL) {
		fprintf(stderr, "walrus: no data directory: use -D DIR or set WALRUS_DATA\n");
		return TOOL_EXIT_USAGE;
	}
	int rc = wal_control_read(ctx->datadir, &c);
	if (rc != WALRUS_OK) {
		tool_fail(rc, "controldata");
		return rc == WALRUS_ECORRUPT ? TOOL_EXIT_DAMAGE : TOOL_EXIT_ENGINE;
	}
	print_control(&c);
	return 0;
}
