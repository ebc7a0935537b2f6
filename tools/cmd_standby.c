/*
 * cmd_standby.c - `walrus standby` runs DIR as a hot standby in the
 * foreground (as `walrus serve` runs a primary), and `walrus promote`
 * makes a running standby a primary (walrus_promote does the work).
 *
 * `standby` records its settings in DIR/walrus.standby (mode 0600: it
 * holds the replication password), so that every later start of DIR,
 * embedded or not, is a standby's until it is promoted.
 */
#include "tool.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "repl/repl.h"
#include "wal/wal.h"

static const char standby_usage[] =
    "usage: walrus -D DIR standby [--primary HOST:PORT|SOCKET] [--slot NAME]\n"
    "                             [--application-name NAME] [--wal-archive ARCHIVE]\n"
    "                             [--checkpoint fast|spread] [--sslmode MODE]\n"
    "                             [--sslrootcert FILE] [--sslcert FILE --sslkey FILE]\n\n"
    "Runs DIR as a hot standby in the foreground: it replays the primary's WAL\n"
    "as it arrives and serves reads (gets, scans); writes get WALRUS_EREADONLY.\n"
    "DIR is a standby already, a base backup of the primary (walrus -D PRIMARY\n"
    "backup DIR), or missing or empty: then a base backup is taken from the\n"
    "primary given by --primary over its replication connection first (progress\n"
    "on stderr).  The settings go to DIR/walrus.standby, so every start of\n"
    "DIR stays a standby's until `walrus -D DIR promote`.\n"
    "  --primary ADDR       stream WAL from the primary's listen_replication\n"
    "                       (password: WALRUS_REPLICATION_PASSWORD in the environment)\n"
    "  --checkpoint MODE    the base backup's checkpoint on the primary: fast (the\n"
    "                       default: the standby is waited for) or spread\n"
    "  --slot NAME          the primary's replication slot to use\n"
    "  --application-name N the standby's name (default: DIR's base name)\n"
    "  --wal-archive DIR    replay segments from this archive (the primary's\n"
    "                       archive_dir) when streaming does not bring them\n"
    "  --sslmode MODE       TLS to the primary: disable, prefer (the default: when\n"
    "                       the primary has ssl = on), require, verify-ca (its\n"
    "                       certificate signed by --sslrootcert's CA) or verify-full\n"
    "                       (... and naming the host of --primary HOST:PORT)\n"
    "  --sslrootcert FILE   CA certificates (PEM) for verify-ca and verify-full\n"
    "  --sslcert FILE, --sslkey FILE  the standby's certificate and key, for a\n"
    "                       primary with ssl_ca_file\n"
    "Stops on SIGINT/SIGTERM or `walrus stop`, as `walrus serve`.\n";

static const char promote_usage[] =
    "usage: walrus -D DIR promote\n\n"
    "Ends the recovery of the standby running on DIR: what it received is\n"
    "replayed, a new timeline begins, and it accepts writes.  Returns when done.\n"
    "Exit codes: 0 promoted, 1 no instance is running, 2 usage, 3 engine error\n"
    "(not a standby, not consistent yet, or the promotion failed).\n";

typedef struct standby_args {
	const char *primary, *slot, *name, *archive, *checkpoint;
	const char *sslmode, *sslrootcert, *sslcert, *sslkey;
} standby_args;

static int parse_standby(int argc, char **argv, standby_args *a)
{
	for (int i = 1; i < argc; i += 2) { /* each option takes a value */
		const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		const char **dst = strcmp(o, "--primary") == 0            ? &a->primary
		                   : strcmp(o, "--slot") == 0             ? &a->slot
		                   : strcmp(o, "--application-name") == 0 ? &a->name
		                   : strcmp(o, "--wal-archive") == 0      ? &a->archive
		                   : strcmp(o, "--checkpoint") == 0       ? &a->checkpoint
		                   : strcmp(o, "--sslmode") == 0          ? &a->sslmode
		                   : strcmp(o, "--sslrootcert") == 0      ? &a->sslrootcert
		                   : strcmp(o, "--sslcert") == 0          ? &a->sslcert
		                   : strcmp(o, "--sslkey") == 0           ? &a->sslkey
		                                                          : NULL;
		if (dst == NULL || v == NULL || *v == '\0' || strpbrk(v, "\n\r'") != NULL ||
		    (dst == &a->checkpoint && strcmp(v, "fast") != 0 && strcmp(v, "spread") != 0) ||
		    (dst == &a->sslmode && repl_sslmode_parse(v) < 0)) {
			fprintf(stderr, "walrus standby: bad argument \"%s\"\n%s", o,
			        standby_usage);
			return TOOL_EXIT_USAGE;
		}
		*dst = v;
	}
	return 0;
}

/* A TLS file given on the command line, made absolute (the standby may run elsewhere). */
static int tls_file(const char *flag, const char *path, char *out, size_t len)
{
	char abs[PATH_MAX];
	if (path == NULL)
		return 0;
	if (realpath(path, abs) == NULL || !wr_snprintf(out, len, "%s", abs)) {
		fprintf(stderr, "walrus standby: %s \"%s\": %s\n", flag, path,
		        errno == 0 ? "path too long" : strerror(errno));
		return TOOL_EXIT_USAGE;
	}
	return 0;
}

/* The TLS settings of the command line: sslmode (as given) and absolute files. */
static int tls_settings(const standby_args *a, repl_standby_conf *c)
{
	wr_snprintf(c->sslmode, sizeof(c->sslmode), "%s", a->sslmode ? a->sslmode : "");
	c->ssl.mode = a->sslmode ? repl_sslmode_parse(a->sslmode) : REPL_SSL_PREFER;
	errno = 0;
	int rc =
	    tls_file("--sslrootcert", a->sslrootcert, c->ssl.rootcert, sizeof(c->ssl.rootcert));
	if (rc == 0)
		rc = tls_file("--sslcert", a->sslcert, c->ssl.cert, sizeof(c->ssl.cert));
	if (rc == 0)
		rc = tls_file("--sslkey", a->sslkey, c->ssl.key, sizeof(c->ssl.key));
	return rc;
}

/* DIR/walrus.standby (repl/standby_conf.c): mode 0600, written durably. */
static int write_settings(const char *abs, const standby_args *a)
{
	repl_standby_conf c;
	memset(&c, 0, sizeof(c));
	const char *pw = getenv("WALRUS_REPLICATION_PASSWORD");
	const char *base = strrchr(abs, '/');
	if (a->archive != NULL && a->archive[0] != '/') {
		fprintf(stderr, "walrus standby: --wal-archive must be an absolute path\n");
		return TOOL_EXIT_USAGE;
	}
	int code = tls_settings(a, &c);
	if (code != 0)
		return code;
	wr_snprintf(c.primary, sizeof(c.primary), "%s", a->primary ? a->primary : "");
	wr_snprintf(c.slot, sizeof(c.slot), "%s", a->slot ? a->slot : "");
	wr_snprintf(c.application_name, sizeof(c.application_name), "%s",
	            a->name ? a->name
	            : base  ? base + 1
	                    : abs);
	wr_snprintf(c.password, sizeof(c.password), "%s", pw ? pw : "");
	wr_snprintf(c.wal_archive, sizeof(c.wal_archive), "%s", a->archive ? a->archive : "");
	int rc = repl_standby_write(abs, &c);
	explicit_bzero(&c, sizeof(c));
	return rc == WALRUS_OK ? 0 : tool_fail(rc, WR_STANDBY_FILE);
}

/*
 * A line every PROGRESS_NS, the first one PROGRESS_NS after the first bytes
 * (not at them: "0.0 of N MiB", which was the only line of a backup shorter
 * than that), and the last one at the end.
 * The total is the primary's estimate: the percentage stays below 100 until
 * the end.
 */
#define PROGRESS_NS 250000000ULL

typedef struct progress_state {
	uint64_t last_ns, done, total;
} progress_state;

static void print_progress(uint64_t done, uint64_t total, bool end)
{
	double pct = end ? 100.0 : total ? WR_MIN(99.0, 100.0 * (double)done / (double)total) : 0;
	fprintf(stderr, "standby: base backup: %.1f of %.1f MiB received (%.0f%%)\n",
	        (double)done / 1048576.0, (double)(end ? done : total) / 1048576.0, pct);
}

static void on_progress(uint64_t done, uint64_t total, void *arg)
{
	progress_state *p = arg;
	uint64_t now = wr_now_ns();
	p->done = done;
	p->total = total;
	if (p->last_ns == 0)
		p->last_ns = now; /* the first bytes: the interval counts from here */
	if (now - p->last_ns < PROGRESS_NS)
		return;
	p->last_ns = now;
	print_progress(done, total, false);
}

/* Missing, or an empty directory: what a base backup from the primary may fill. */
static int dir_missing_or_empty(const char *dir, bool *yes)
{
	DIR *d = opendir(dir);
	if (d == NULL && errno == ENOENT) {
		*yes = true;
		return WALRUS_OK;
	}
	if (d == NULL && errno == ENOTDIR) {
		*yes = false;
		return WALRUS_OK;
	}
	if (d == NULL)
		return wr_error(wr_errno_code(errno), "could not open \"%s\": %m", dir);
	struct dirent *de;
	*yes = true;
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			*yes = false;
	closedir(d);
	return WALRUS_OK;
}

static int take_base_backup(tool_ctx *ctx, const standby_args *a)
{
	struct stat st;
	int rc;
	if (a->primary == NULL) {
		fprintf(stderr,
		        "walrus standby: \"%s\" is missing or empty: give --primary HOST:PORT to "
		        "take a base backup from the primary over its replication connection, or "
		        "make it a base backup first (walrus -D PRIMARY backup %s)\n%s",
		        ctx->datadir, ctx->datadir, standby_usage);
		return TOOL_EXIT_USAGE;
	}
	/* An existing empty directory must already be fit to be a data directory. */
	if (stat(ctx->datadir, &st) == 0 && (rc = datadir_check(ctx->datadir)) != WALRUS_OK)
		return tool_fail(rc, ctx->datadir);
	const char *pw = getenv("WALRUS_REPLICATION_PASSWORD");
	progress_state p = {0};
	repl_standby_conf tls;
	memset(&tls, 0, sizeof(tls));
	if ((rc = tls_settings(a, &tls)) != 0)
		return rc;
	standby_backup_args b = {.dir = ctx->datadir,
	                         .primary = a->primary,
	                         .password = pw ? pw : "",
	                         .ssl = &tls.ssl,
	                         .fast =
	                             a->checkpoint == NULL || strcmp(a->checkpoint, "fast") == 0,
	                         .opts = &ctx->opts->o,
	                         .progress = on_progress,
	                         .arg = &p};
	fprintf(stderr, "standby: taking a base backup from %s (%s checkpoint)\n", a->primary,
	        b.fast ? "fast" : "spread");
	wr_log_set_stderr(WR_LOG); /* the engine's lines about it, as the standby's later */
	rc = standby_base_backup(&b);
	if (rc != WALRUS_OK) {
		fprintf(stderr, "walrus standby: %s\n", walrus_errmsg());
		return TOOL_EXIT_ENGINE;
	}
	print_progress(p.done, p.total, true);
	fprintf(stderr, "standby: base backup complete\n");
	return 0;
}

int cmd_standby(tool_ctx *ctx, int argc, char **argv)
{
	standby_args a = {0};
	char abs[PATH_MAX], ver[PATH_MAX + 32];
	if (tool_wants_help(argc, argv)) {
		fputs(standby_usage, stdout);
		return 0;
	}
	int rc = parse_standby(argc, argv, &a);
	if (rc != 0)
		return rc;
	if (ctx->datadir == NULL) {
		fprintf(stderr, "walrus: no data directory: use -D DIR or set WALRUS_DATA\n");
		return TOOL_EXIT_USAGE;
	}
	const wr_options *o = &ctx->opts->o;
	bool fresh = false;
	rc = wr_opts_validate(o);
	if (rc == WALRUS_OK)
		rc = dir_missing_or_empty(ctx->datadir, &fresh);
	if (rc != WALRUS_OK)
		return tool_fail(rc, ctx->datadir);
	/* A primary that drops a TLS connection mid-transfer makes libssl's
	 * write() raise SIGPIPE: an error to report, not a reason to die. */
	if (fresh && signal(SIGPIPE, SIG_IGN) == SIG_ERR)
		return tool_fail(wr_error(WALRUS_EIO, "could not ignore SIGPIPE: %m"),
		                 ctx->datadir);
	if (fresh && (rc = take_base_backup(ctx, &a)) != 0)
		return rc;
	rc = datadir_resolve(ctx->datadir, false, abs);
	if (rc == WALRUS_OK)
		rc = datadir_check(abs);
	if (rc != WALRUS_OK)
		return tool_fail(rc, ctx->datadir);
	wr_snprintf(ver, sizeof(ver), "%s/%s", abs, WR_VERSION_FILE);
	if (access(ver, F_OK) != 0) {
		fprintf(stderr,
		        "walrus standby: \"%s\" is not a walrus directory and not empty: give a "
		        "missing or empty directory to take a base backup from the primary "
		        "(--primary), or a base backup of it (walrus -D PRIMARY backup DIR)\n",
		        abs);
		return TOOL_EXIT_USAGE;
	}
	if (a.primary == NULL && a.archive == NULL && !standby_configured(abs)) {
		fprintf(stderr, "walrus standby: give --primary or --wal-archive\n%s",
		        standby_usage);
		return TOOL_EXIT_USAGE;
	}
	if ((a.primary != NULL || a.archive != NULL) && (rc = write_settings(abs, &a)) != 0)
		return rc;
	wr_log_set_stderr(WR_LOG);
	supervisor_main(abs, o, -1, true);
}

int cmd_promote(tool_ctx *ctx, int argc, char **argv)
{
	if (tool_wants_help(argc, argv)) {
		fputs(promote_usage, stdout);
		return 0;
	}
	if (argc > 1) {
		fprintf(stderr, "walrus promote: unknown argument \"%s\"\n%s", argv[1],
		        promote_usage);
		return TOOL_EXIT_USAGE;
	}
	if (ctx->datadir == NULL) {
		fprintf(stderr, "walrus: no data directory: use -D DIR or set WALRUS_DATA\n");
		return TOOL_EXIT_USAGE;
	}
	int rc = walrus_promote(ctx->datadir);
	if (rc == WALRUS_ENOTRUNNING) {
		fprintf(stderr, "walrus promote: %s\n", walrus_errmsg());
		return TOOL_EXIT_NOTFOUND;
	}
	if (rc != WALRUS_OK) {
		fprintf(stderr, "walrus promote: %s\n", walrus_errmsg());
		return rc == WALRUS_EINVAL ? TOOL_EXIT_ENGINE : tool_fail(rc, "promote");
	}
	printf("promoted\n");
	return 0;
}
