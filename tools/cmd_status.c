/*
 * cmd_status.c - `walrus status`: whether an instance serves DIR, and its
 * processes as ps would show them, and its settings with their sources
 * (as its supervisor wrote them at start: DIR/walrus.settings).
 *
 * Exit codes as pg_isready's, so that a script can wait for an instance:
 * 0 ready (every listener the configuration asks for is open: the
 * replication listener, and the RESP server's when `walrus serve` runs
 * one), 1 there but not serving (starting, a standby not yet consistent,
 * promoting, restarting after a crash, stopping), 2 no instance, 3 bad
 * usage.  --wait polls until ready, for at most SECONDS.
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

enum { STATUS_READY = 0, STATUS_NOT_YET = 1, STATUS_NONE = 2, STATUS_USAGE = 3 };

#define WAIT_DEFAULT_S 60
#define WAIT_POLL_US   20000

static const char usage[] =
    "usage: walrus -D DIR status [--wait [SECONDS]]\n\n"
    "Whether an instance serves DIR: its status, its processes, and its settings\n"
    "with where each came from: default, file (DIR/walrus.conf), command line\n"
    "(the starter's -o or walrus_opts_set), control file (fixed at\n"
    "initialisation).\n"
    "  --wait [SECONDS]  wait until the instance is ready, at most SECONDS\n"
    "                    (default 60), then report and exit as below\n\n"
    "Exit codes (as pg_isready's):\n"
    "  0  ready: it serves, and every listener its configuration asks for is open\n"
    "     (listen_replication; the RESP server's port and socket when `walrus\n"
    "     serve` runs one); read-only on a full disk, and a standby that serves\n"
    "     reads, count as ready\n"
    "  1  there, but not serving: starting, a standby replaying up to a\n"
    "     consistent state, promoting, restarting after a crash, stopping\n"
    "  2  no instance runs on DIR\n"
    "  3  bad usage\n";

typedef struct probe {
	int state;        /* STATUS_* */
	long pid;         /* the supervisor's; 0 none, -1 locked but not written yet */
	char line[2048];  /* the instance's status line */
	long server;      /* the RESP server's pid, 0 when none */
	char served[512]; /* its state */
} probe;

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

static bool first_word_is(const char *line, const char *word)
{
	size_t n = strlen(word);
	return strncmp(line, word, n) == 0 && (line[n] == '\0' || line[n] == ':' || line[n] == ' ');
}

/* What DIR's instance and its RESP server (if one runs) say of themselves. */
static void take_probe(const char *abs, probe *p)
{
	p->pid = datadir_instance_pid(abs);
	p->line[0] = '\0';
	if (p->pid > 0)
		datadir_pid_status(abs, p->line, sizeof(p->line));
	bool serving =
	    p->pid > 0 && (first_word_is(p->line, "ready") || first_word_is(p->line, "read-only"));
	bool server = serve_status_read(abs, &p->server, p->served, sizeof(p->served));
	if (!server)
		p->server = 0;
	if (server && !first_word_is(p->served, "ready"))
		serving = false;
	/* A server whose instance is gone reattaches, which starts it again. */
	p->state = serving ? STATUS_READY : p->pid != 0 || server ? STATUS_NOT_YET : STATUS_NONE;
}

static void print_probe(const char *abs, const probe *p)
{
	char comm[64];
	long ppid;
	if (p->pid == 0)
		printf("no instance is running on \"%s\"\n", abs);
	else if (p->pid < 0)
		printf("an instance is starting on \"%s\"\n", abs);
	else
		printf("instance running on \"%s\"\nstatus: %s\n", abs,
		       p->line[0] ? p->line : "starting");
	if (p->server != 0)
		printf("RESP server (pid %ld): %s\n", p->server, p->served);
	if (p->pid <= 0)
		return;
	if (read_proc(p->pid, comm, sizeof(comm), &ppid))
		printf("  %7ld  %s\n", p->pid, comm);
	list_children(p->pid);
	print_settings(abs);
}

/*
 * Polls until ready or @seconds pass.  An instance seen and then gone has
 * stopped (a failed start, a standby that cannot follow its primary): no
 * point waiting out the rest.  A directory not made yet is no instance yet:
 * `walrus serve` may be about to make it.
 */
static bool wait_ready(const char *dir, long seconds, char *abs, probe *p)
{
	uint64_t deadline = wr_now_ns() + (uint64_t)seconds * 1000000000ULL;
	bool seen = false, found;
	for (;;) {
		found = realpath(dir, abs) != NULL;
		if (found)
			take_probe(abs, p);
		if ((found && p->state == STATUS_READY) ||
		    (seen && (!found || p->state == STATUS_NONE)) || wr_now_ns() >= deadline)
			return found;
		seen = seen || (found && p->state == STATUS_NOT_YET);
		wr_sleep_us(WAIT_POLL_US);
	}
}

static int parse_args(int argc, char **argv, bool *wait, long *seconds)
{
	*wait = false;
	*seconds = WAIT_DEFAULT_S;
	for (int i = 1; i < argc; i++) {
		char *end;
		if (strcmp(argv[i], "--wait") == 0 && !*wait) {
			*wait = true;
			if (i + 1 < argc && argv[i + 1][0] != '-') {
				long s = strtol(argv[i + 1], &end, 10);
				if (*end != '\0' || s <= 0 || s > 86400L * 365) {
					fprintf(stderr,
					        "walrus status: --wait takes a number of seconds "
					        "(1 or more), not \"%s\"\n",
					        argv[i + 1]);
					return STATUS_USAGE;
				}
				*seconds = s;
				i++;
			}
			continue;
		}
		fprintf(stderr, "walrus status: unexpected argument \"%s\"\n%s", argv[i], usage);
		return STATUS_USAGE;
	}
	return 0;
}

int cmd_status(tool_ctx *ctx, int argc, char **argv)
{
	char abs[PATH_MAX];
	bool wait;
	long seconds;
	probe p;

	if (tool_wants_help(argc, argv)) {
		fputs(usage, stdout);
		return 0;
	}
	int rc = parse_args(argc, argv, &wait, &seconds);
	if (rc != 0)
		return rc;
	if (ctx->datadir == NULL) {
		fprintf(stderr, "walrus: no data directory: use -D DIR or set WALRUS_DATA\n");
		return STATUS_USAGE;
	}
	bool found =
	    wait ? wait_ready(ctx->datadir, seconds, abs, &p) : realpath(ctx->datadir, abs) != NULL;
	if (!found) {
		printf("no instance is running on \"%s\": no such directory\n", ctx->datadir);
		return STATUS_NONE;
	}
	if (!wait)
		take_probe(abs, &p);
	print_probe(abs, &p);
	return p.state;
}
