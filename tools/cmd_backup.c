/*
 * cmd_backup.c - `walrus -D DIR backup DEST`: an online base backup
 * (walrus_backup does the work), with --progress lines and --verify, which
 * restores the backup into a scratch directory next to DEST and runs the
 * page and tree checks on it, so that a backup is known to be usable.
 */
#include "tool.h"

#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: walrus -D DIR backup DEST [--checkpoint fast|spread] [--progress] [--verify]\n\n"
    "Copies the running (or stopped) instance of DIR into DEST while writers\n"
    "keep running: a checkpoint, the data files, the WAL from the checkpoint's\n"
    "redo point to the backup's end, DEST/backup_label; everything fsynced.\n"
    "DEST must not exist or be empty.  Until the backup is complete DEST holds\n"
    "walrus.backup-incomplete: `walrus restore` and opening DEST refuse it.\n"
    "  --checkpoint spread (the default): the backup's checkpoint is paced like\n"
    "              a timed one (checkpoint_completion_target), so writers barely\n"
    "              notice it, and the copy starts when it ends; fast: at once\n"
    "  --progress  report the bytes copied on stderr, and a summary at the end\n"
    "  --verify    restore the backup into a scratch directory beside DEST, run\n"
    "              `walrus verify` on it, remove it (exit 2 on damage)\n\n"
    "Restore with: walrus restore --from DEST [--wal-archive DIR] NEWDIR\n"
    "SIGINT, SIGTERM or SIGHUP stop the copy and end the backup on the instance\n"
    "(a second one kills at once).\n"
    "Exit codes: 0 done, 2 usage or damage found by --verify, 3 engine error,\n"
    "128+N stopped by signal N.\n";

/*
 * Ctrl-C during the copy: the backup is stopped through walrus_interrupt
 * and ended on the instance, rather than the process dying attached (which
 * restarts the instance for every client).  SA_RESETHAND: a second signal
 * kills.
 */
static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};
static struct sigaction old_actions[WR_ARRAY_LEN(stop_signals)];
static volatile sig_atomic_t stopped_by;

static void on_stop_signal(int sig)
{
	stopped_by = sig;
	walrus_interrupt();
}

static void catch_stop_signals(bool on)
{
	for (size_t i = 0; i < WR_ARRAY_LEN(stop_signals); i++) {
		if (on) {
			struct sigaction sa = {.sa_handler = on_stop_signal,
			                       .sa_flags = SA_RESETHAND | SA_RESTART};
			(void)sigemptyset(&sa.sa_mask);
			(void)sigaction(stop_signals[i], &sa, &old_actions[i]);
		} else {
			(void)sigaction(stop_signals[i], &old_actions[i], NULL);
		}
	}
}

/* A line every 250 ms, the first one 250 ms after the first bytes (not at
 * them: "0.0 of N MiB", alone for a short backup); the summary at the end
 * says what was copied. */
typedef struct progress_state {
	uint64_t t0_ns, last_ns, done;
} progress_state;

static void on_progress(uint64_t done, uint64_t total, void *arg)
{
	progress_state *p = arg;
	uint64_t now = wr_now_ns();
	p->done = done;
	if (p->last_ns == 0)
		p->last_ns = now; /* the first bytes: the interval counts from here */
	if (now - p->last_ns < 250000000u)
		return;
	p->last_ns = now;
	fprintf(stderr, "backup: %.1f of %.1f MiB copied (%.0f%%)\n", (double)done / 1048576.0,
	        (double)total / 1048576.0,
	        total ? WR_MIN(99.0, 100.0 * (double)done / (double)total) : 0.0);
}

static void label_line(const char *dest, const char *key, char *buf, size_t len)
{
	char path[PATH_MAX], line[256];
	wr_snprintf(buf, len, "?");
	if (!wr_snprintf(path, sizeof(path), "%s/backup_label", dest))
		return;
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return;
	size_t klen = strlen(key);
	while (fgets(line, sizeof(line), f) != NULL)
		if (strncmp(line, key, klen) == 0 && strncmp(line + klen, " = ", 3) == 0) {
			line[strcspn(line, "\n")] = '\0';
			wr_snprintf(buf, len, "%s", line + klen + 3);
		}
	fclose(f);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	if (remove(path) != 0)
		fprintf(stderr, "walrus backup: could not remove \"%s\": %m\n", path);
	return 0;
}

static void report(void *arg, uint32_t block, const char *msg)
{
	(void)arg;
	fprintf(stderr, "walrus backup --verify: block %u: %s\n", block, msg);
}

static int verify_in(const char *scratch)
{
	walrus *db;
	int rc = walrus_open(scratch, NULL, &db);
	if (rc != WALRUS_OK)
		return tool_fail(rc, "backup --verify: opening the restored copy");
	rc = walrus_verify(db, report, NULL);
	int exit_code = rc == WALRUS_OK ? 0 : tool_fail(rc, "backup --verify");
	walrus_close(db);
	walrus_stop(scratch, WALRUS_STOP_FAST, 1);
	return exit_code;
}

/* Restores DEST into a scratch directory beside it and verifies that. */
static int verify_backup(const char *dest)
{
	char scratch[PATH_MAX];
	if (!wr_snprintf(scratch, sizeof(scratch), "%s.verify-XXXXXX", dest) ||
	    mkdtemp(scratch) == NULL) {
		fprintf(stderr, "walrus backup --verify: could not make a scratch directory: %m\n");
		return TOOL_EXIT_ENGINE;
	}
	int rc = walrus_restore(dest, NULL, NULL, NULL, scratch);
	int exit_code = rc == WALRUS_OK ? verify_in(scratch)
	                                : tool_fail(rc, "backup --verify: restoring the backup");
	nftw(scratch, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	if (exit_code == 0)
		fprintf(stderr, "backup: verified (restored and checked in a scratch directory)\n");
	return exit_code;
}

int cmd_backup(tool_ctx *ctx, int argc, char **argv)
{
	bool show = false, verify = false;
	int flags = 0;
	const char *dest = NULL;
	if (tool_wants_help(argc, argv)) {
		fputs(usage, stdout);
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--progress") == 0)
			show = true;
		else if (strcmp(argv[i], "--verify") == 0)
			verify = true;
		else if (strcmp(argv[i], "--checkpoint") == 0 && i + 1 < argc &&
		         (strcmp(argv[i + 1], "fast") == 0 || strcmp(argv[i + 1], "spread") == 0))
			flags = strcmp(argv[++i], "fast") == 0 ? WALRUS_BACKUP_FAST : 0;
		else if (argv[i][0] != '-' && dest == NULL)
			dest = argv[i];
		else {
			fprintf(stderr, "walrus backup: unexpected argument \"%s\"\n%s", argv[i],
			        usage);
			return TOOL_EXIT_USAGE;
		}
	}
	if (dest == NULL) {
		fprintf(stderr, "walrus backup: no destination\n%s", usage);
		return TOOL_EXIT_USAGE;
	}
	walrus *db;
	int rc = tool_open(ctx, false, &db);
	if (rc != 0)
		return rc;
	progress_state p = {.t0_ns = wr_now_ns()};
	if (show)
		fprintf(stderr, "backup: waiting for a %s checkpoint\n",
		        flags & WALRUS_BACKUP_FAST ? "fast" : "spread");
	catch_stop_signals(true);
	int e = walrus_backup(db, dest, flags, show ? on_progress : NULL, &p);
	catch_stop_signals(false);
	if (e == WALRUS_EINTR) { /* a signal after the copy ended: the backup is complete */
		int sig = stopped_by;
		fprintf(stderr, "walrus backup: stopped by signal %d; \"%s\" is incomplete\n", sig,
		        dest);
		walrus_close(db);
		return 128 + sig;
	}
	if (e != WALRUS_OK) {
		int code = tool_fail(e, "backup");
		walrus_close(db);
		return code;
	}
	walrus_close(db);
	if (show) {
		char start[32], end[32];
		label_line(dest, "start_lsn", start, sizeof(start));
		label_line(dest, "end_lsn", end, sizeof(end));
		double secs = (double)(wr_now_ns() - p.t0_ns) / 1e9;
		fprintf(stderr, "backup: complete: %.1f MiB in %.2f s (%.1f MiB/s), WAL %s to %s\n",
		        (double)p.done / 1048576.0, secs, (double)p.done / 1048576.0 / secs, start,
		        end);
	}
	return verify ? verify_backup(dest) : 0;
}
