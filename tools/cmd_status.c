/*
 * cmd_status.c - `walrus status`: whether an instance serves DIR, and its
 * processes as ps would show them, and its settings with their sources
 * (as its supervisor wrote them at start: DIR/walrus.settings).  Exit 0 when
 * running, 1 when not.
 */
#include "tool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"

static bool read_proc(long pid, char *comm, size_t len, long *ppid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return false;
	bool ok = fgets(buf, sizeof(buf), f) != NULL;
	fclose(f);
	char *open = strchr(buf, '('), *close = strrchr(buf, ')');
	if (!ok || open == NULL || close == NULL)
		return false;
	snprintf(comm, len, "%.*s", (int)(close - open - 1), open + 1);
	*ppid = strtol(close + 4, NULL, 10); /* ") S ppid" */
	return true;
}

static void list_children(long sup)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		char comm[64];
		long ppid, pid = strtol(e->d_name, NULL, 10);
		if (pid > 0 && read_proc(pid, comm, sizeof(comm), &ppid) && ppid == sup)
			printf("  %7ld  %s\n", pid, comm);
	}
	closedir(d);
}

/*
 * The running instance's settings and their sources, as its supervisor wrote
 * them at start (DIR/walrus.settings): attaching to read its shared memory
 * would keep it from stopping.
 */
static void print_settings(const char *abs)
{
	char path[PATH_MAX + 32], line[256];
	snprintf(path, sizeof(path), "%s/%s", abs, WR_SETTINGS_FILE);
	FILE *f = fopen(path, "r");
	if (f == NULL) {
		fprintf(stderr, "walrus status: could not read the settings \"%s\": %s\n", path,
		        strerror(errno));
		return;
	}
	printf("settings (value, source):\n");
	while (fgets(line, sizeof(line), f) != NULL)
		fputs(line, stdout);
	if (ferror(f))
		fprintf(stderr, "walrus status: could not read \"%s\"\n", path);
	fclose(f);
}

int cmd_status(tool_ctx *ctx, int argc, char **argv)
{
	char abs[PATH_MAX], comm[64];
	long ppid;

	if (tool_wants_help(argc, argv)) {
		printf("usage: walrus -D DIR status\n\nExit 0 when an instance serves DIR, 1 when "
		       "none does.\nShows its status (ready, or read-only and why),\nits "
		       "processes, and its settings with where each came "
		       "from:\ndefault, file (DIR/walrus.conf), command line (the starter's -o or\n"
		       "walrus_opts_set), control file (fixed at initialisation).\n");
		return 0;
	}
	if (ctx->datadir == NULL || realpath(ctx->datadir, abs) == NULL) {
		fprintf(stderr, "walrus status: no such data directory \"%s\"\n",
		        ctx->datadir ? ctx->datadir : "");
		return TOOL_EXIT_USAGE;
	}
	/* The supervisor's pid; 0: none; -1: locked, pid not written yet (starting). */
	long pid = datadir_instance_pid(abs);
	if (pid == 0) {
		printf("no instance is running on \"%s\"\n", abs);
		return TOOL_EXIT_NOTFOUND;
	}
	if (pid < 0) {
		printf("an instance is starting on \"%s\"\n", abs);
		return 0;
	}
	printf("instance running on \"%s\"\n", abs);
	char status[2048];
	datadir_pid_status(abs, status, sizeof(status));
	if (status[0])
		printf("status: %s\n", status);
	if (read_proc(pid, comm, sizeof(comm), &ppid))
		printf("  %7ld  %s\n", pid, comm);
	list_children(pid);
	print_settings(abs);
	return 0;
}
