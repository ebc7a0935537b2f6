/*
 * cmd_config.c - `walrus config`: the settings that persist in
 * DIR/walrus.conf (engine/conf.c reads and edits the file).
 *
 *   walrus -D DIR config set NAME VALUE   validate, then replace or append the line
 *   walrus -D DIR config get NAME         the file's value, or the default (marked)
 *   walrus -D DIR config list             every option, its value and its source
 *
 * `list` shows what an instance started now would use: -o options given to
 * this command count as the command line.  A bad name or value exits 2
 * with a message naming the option, and leaves the file as it was.
 */
#include "tool.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"

static const char config_usage[] =
    "usage: walrus -D DIR config set NAME VALUE\n"
    "       walrus -D DIR config get NAME\n"
    "       walrus -D DIR config list\n\n"
    "DIR/walrus.conf holds instance options as \"name = value\" lines (# comments, values\n"
    "optionally in single quotes), read when an instance starts.  Precedence: default <\n"
    "walrus.conf < options set by the process that starts the instance (-o).  Session\n"
    "options (synchronous_commit, create_if_missing, strict_options) are each opener's own\n"
    "and do not belong in the file.  Options of `walrus serve` (client_query_buffer_limit,\n"
    "authentication_timeout, databases) and its password (requirepass, which `config`\n"
    "neither sets nor shows: write it into the file, mode 0600) may be in it too.\n"
    "`walrus options` lists every option.\n";

void tool_print_settings(FILE *out, const wr_options *o, const uint8_t *sources, bool instance_only)
{
	size_t n;
	const wr_opt_desc *t = wr_opts_table(&n);

	for (size_t i = 0; i < n; i++) {
		char v[WR_OPT_TEXT_MAX];
		if ((instance_only && t[i].scope != WR_SCOPE_INSTANCE) ||
		    wr_opts_get(o, t[i].name, v, sizeof(v)) != WALRUS_OK)
			continue;
		fprintf(out, "%-30s %-12s %s%s\n", t[i].name, v, wr_opt_source_name(sources[i]),
		        t[i].scope == WR_SCOPE_INSTANCE ? ""
		        : t[i].scope == WR_SCOPE_SERVER ? " (walrus serve option)"
		                                        : " (session option)");
	}
}

/* The data directory, made absolute; created for `set` (as `put` does). */
static int config_dir(tool_ctx *ctx, bool create, char *abs)
{
	if (ctx->datadir == NULL) {
		fprintf(stderr, "walrus: no data directory: use -D DIR or set WALRUS_DATA\n");
		return TOOL_EXIT_USAGE;
	}
	int rc = datadir_resolve(ctx->datadir, create, abs);
	if (rc == WALRUS_OK)
		rc = datadir_check(abs);
	return rc == WALRUS_OK ? 0 : tool_fail(rc, ctx->datadir);
}

/*
 * How many trailing components of @dir do not exist yet: what `set` would
 * create, and what it removes again when it refuses the setting.
 */
static int missing_levels(const char *dir)
{
	char p[PATH_MAX];
	struct stat st;
	int n = 0;
	if (!wr_snprintf(p, sizeof(p), "%s", dir))
		return 0;
	while (p[0] != '\0' && stat(p, &st) != 0 && errno == ENOENT) {
		n++;
		char *slash = strrchr(p, '/');
		if (slash == NULL || slash == p)
			break;
		*slash = '\0';
	}
	return n;
}

/* Removes the @levels directories `set` made for @abs (empty ones only). */
static void remove_made(const char *abs, int levels)
{
	char p[PATH_MAX];
	if (!wr_snprintf(p, sizeof(p), "%s", abs))
		return;
	for (int i = 0; i < levels; i++) {
		if (rmdir(p) != 0) {
			fprintf(stderr, "walrus: could not remove \"%s\": %s\n", p,
			        strerror(errno));
			return;
		}
		char *slash = strrchr(p, '/');
		if (slash == NULL || slash == p)
			return;
		*slash = '\0';
	}
}

static int config_set(const char *abs, const char *name, const char *value, int made)
{
	char now[WR_OPT_TEXT_MAX];
	bool found;

	int rc = conf_set(abs, name, value);
	if (rc != WALRUS_OK) {
		int code = tool_fail(rc, "config set");
		if (made > 0) {
			remove_made(abs, made);
			fprintf(stderr, "walrus: %s not created\n", abs);
		} else {
			fprintf(stderr, "walrus: %s/%s left unchanged\n", abs, WR_CONF_FILE);
		}
		return code;
	}
	if (conf_get(abs, name, now, sizeof(now), &found) != WALRUS_OK)
		return tool_fail(WALRUS_EIO, "config set");
	char lower[64];
	size_t i = 0;
	for (; name[i] != '\0' && i + 1 < sizeof(lower); i++)
		lower[i] = (char)tolower((unsigned char)name[i]); /* names are case-insensitive */
	lower[i] = '\0';
	const wr_opt_desc *d = wr_opts_find(lower, NULL);
	const char *canon = d != NULL ? d->name : name;
	printf("%s = %s in %s/%s\n", canon, now, abs, WR_CONF_FILE);
	pid_t pid = datadir_instance_pid(abs);
	if (pid != 0)
		printf("an instance is running (pid %d): %s takes effect at the next start\n",
		       (int)pid, canon);
	return 0;
}

static int config_get(const char *abs, const char *name)
{
	char v[WR_OPT_TEXT_MAX];
	bool found;

	int rc = conf_get(abs, name, v, sizeof(v), &found);
	if (rc != WALRUS_OK)
		return tool_fail(rc, "config get");
	printf("%s%s\n", v, found ? "" : " (default)");
	return 0;
}

static int config_list(tool_ctx *ctx, const char *abs)
{
	wr_options eff;
	uint8_t sources[WR_OPTS_MAX];

	int rc = conf_effective(abs, &ctx->opts->o, &eff, sources);
	if (rc != WALRUS_OK)
		return tool_fail(rc, "config list");
	tool_print_settings(stdout, &eff, sources, false);
	return 0;
}

int cmd_config(tool_ctx *ctx, int argc, char **argv)
{
	char abs[PATH_MAX];
	const char *verb = argc > 1 ? argv[1] : "";
	int want = strcmp(verb, "set") == 0 ? 4 : strcmp(verb, "get") == 0 ? 3 : 2;

	if (tool_wants_help(argc, argv)) {
		fputs(config_usage, stdout);
		return 0;
	}
	if (argc != want || (want == 2 && strcmp(verb, "list") != 0)) {
		fputs(config_usage, stderr);
		return TOOL_EXIT_USAGE;
	}
	int made = want == 4 && ctx->datadir != NULL ? missing_levels(ctx->datadir) : 0;
	int rc = config_dir(ctx, want == 4, abs);
	if (rc != 0)
		return rc;
	if (want == 4)
		return config_set(abs, argv[2], argv[3], made);
	if (want == 3)
		return config_get(abs, argv[2]);
	return config_list(ctx, abs);
}
