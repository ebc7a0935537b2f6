/*
 * admin.c - the administrative commands: INFO, CONFIG GET, DBSIZE, HELLO,
 * COMMAND, CLIENT.
 *
 * INFO flattens walrus_stats()'s JSON into Redis's "# Section" /
 * "name:value" lines: one section per top-level object of the JSON
 * (instance, wal, buffers, checkpoints, kv), with nested names joined by
 * '_' ("checkpoints_last_lsn"), after the server's own Server, Clients and
 * Stats sections.  CONFIG GET answers with the engine options (the running
 * instance's values for instance-wide options, the server's for session
 * options such as synchronous_commit) and the server's own settings.
 */
#include "server/srv_int.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/common.h"
#include "engine/engine.h"

/* ---------------------------------------------------------------- INFO */

typedef struct info_ctx {
	resp_buf *b;
	const resp_arg *want; /* requested sections */
	size_t nwant;
	bool emit; /* the current section is wanted */
	char path[192];
} info_ctx;

static bool wanted(const info_ctx *c, const char *section)
{
	if (c->nwant == 0)
		return true;
	for (size_t i = 0; i < c->nwant; i++)
		if (resp_arg_is(&c->want[i], section) || resp_arg_is(&c->want[i], "all") ||
		    resp_arg_is(&c->want[i], "everything") || resp_arg_is(&c->want[i], "default"))
			return true;
	return false;
}

static void section(info_ctx *c, const char *name)
{
	c->emit = wanted(c, name);
	if (!c->emit)
		return;
	char line[64];
	snprintf(line, sizeof(line), "%s# %c%s\r\n", c->b->len ? "\r\n" : "",
	         toupper((unsigned char)name[0]), name + 1);
	resp_add_raw(c->b, line, strlen(line));
}

static void field(info_ctx *c, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void field(info_ctx *c, const char *name, const char *fmt, ...)
{
	if (!c->emit)
		return;
	char v[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(v, sizeof(v), fmt, ap);
	va_end(ap);
	resp_add_raw(c->b, name, strlen(name));
	resp_add_raw(c->b, ":", 1);
	resp_add_raw(c->b, v, strlen(v));
	resp_add_raw(c->b, "\r\n", 2);
}

static const char *flatten(info_ctx *c, const char *p, size_t plen, int depth);

/* A scalar at @p as the field c->path; returns the position after it, or NULL. */
static const char *scalar(info_ctx *c, const char *p)
{
	const char *v = p, *ve;
	if (*v == '"') {
		v++;
		ve = strchr(v, '"');
	} else {
		ve = v + strcspn(v, ",}]");
	}
	if (ve == NULL)
		return NULL;
	field(c, c->path, "%.*s", (int)(ve - v), v);
	return *ve == '"' ? ve + 1 : ve;
}

/* The JSON array at *p (at its '['): element i is named PATH_i. */
static const char *flatten_array(info_ctx *c, const char *p, size_t plen, int depth)
{
	p++;
	for (int i = 0; p != NULL && *p != ']'; i++) {
		if (*p == ',')
			p++;
		int n = snprintf(c->path + plen, sizeof(c->path) - plen, "_%d", i);
		size_t nlen = n < 0 ? plen : WR_MIN(plen + (size_t)n, sizeof(c->path) - 1);
		p = *p == '{' ? flatten(c, p, nlen, depth + 1) : scalar(c, p);
		c->path[plen] = '\0';
		if (p == NULL || *p == '\0')
			return NULL;
	}
	return p == NULL ? NULL : p + 1;
}

/* Flattens the JSON object at *p (at its '{'); returns the position after its '}', or NULL. */
static const char *flatten(info_ctx *c, const char *p, size_t plen, int depth)
{
	p++;
	while (*p != '}') {
		if (*p == ',')
			p++;
		if (*p != '"')
			return NULL;
		const char *k = p + 1, *ke = strchr(k, '"');
		if (ke == NULL || ke[1] != ':')
			return NULL;
		int n = snprintf(c->path + plen, sizeof(c->path) - plen, "%s%.*s", plen ? "_" : "",
		                 (int)(ke - k), k);
		size_t nlen = n < 0 ? plen : WR_MIN(plen + (size_t)n, sizeof(c->path) - 1);
		p = ke + 2;
		if (*p == '{') {
			if (depth == 0)
				section(c, c->path);
			p = flatten(c, p, nlen, depth + 1);
		} else if (*p == '[') {
			if (depth == 0)
				section(c, c->path);
			p = flatten_array(c, p, nlen, depth + 1);
		} else {
			p = scalar(c, p);
		}
		c->path[plen] = '\0';
		if (p == NULL || *p == '\0')
			return NULL;
	}
	return p + 1;
}

static void info_server(info_ctx *c, srv_session *s)
{
	const srv_shared *sh = s->cfg->sh;
	section(c, "server");
	field(c, "redis_version", "7.0.0");
	field(c, "walrus_server", "resp");
	field(c, "redis_mode", "standalone");
	field(c, "process_id", "%d", (int)getpid());
	field(c, "server_process_id", "%d", (int)getppid());
	field(c, "tcp_port", "%d", sh ? sh->tcp_port : 0);
	field(c, "uptime_in_seconds", "%llu",
	      sh ? (unsigned long long)((wr_wall_us() - sh->start_us) / 1000000) : 0ULL);
	field(c, "data_directory", "%s", s->cfg->dir);
	field(c, "synchronous_commit", "%s", s->cfg->sync ? "on" : "off");
	field(c, "backends", "%d", s->cfg->backends); /* 0: one process per connection */
	section(c, "clients");
	field(c, "connected_clients", "%u", (unsigned)srv_clients(s->cfg));
	field(c, "maxclients", "%ld", s->cfg->max_clients);
	section(c, "stats");
	field(c, "total_connections_received", "%llu",
	      sh ? (unsigned long long)atomic_load(&sh->connections) : 0ULL);
	field(c, "rejected_connections", "%llu",
	      sh ? (unsigned long long)atomic_load(&sh->rejected) : 0ULL);
	field(c, "total_commands_processed", "%llu",
	      sh ? (unsigned long long)atomic_load(&sh->commands) : 0ULL);
}

/* The unsigned number at "section":{..."name":N in the stats JSON; false if absent. */
static bool json_u64(const char *json, const char *sec, const char *name, unsigned long long *v)
{
	char key[64];
	snprintf(key, sizeof(key), "\"%s\":{", sec);
	const char *p = strstr(json, key);
	if (p == NULL)
		return false;
	snprintf(key, sizeof(key), "\"%s\":", name);
	p = strstr(p, key);
	return p != NULL && sscanf(p + strlen(key), "%llu", v) == 1;
}

/* keyspace: db0, then each SELECTable database with keys (the key space "dbN"). */
static void info_keyspace(info_ctx *c, const srv_session *s, const char *json,
                          unsigned long long db0_keys)
{
	section(c, "keyspace");
	field(c, "db0", "keys=%llu,expires=0,avg_ttl=0", db0_keys);
	const char *p = strstr(json, "\"spaces\":{");
	p = p != NULL ? strstr(p, "\"list\":[") : NULL;
	while (p != NULL && (p = strstr(p, "{\"name\":\"db")) != NULL) {
		int n, used = 0;
		unsigned long long keys;
		p += strlen("{\"name\":\"db");
		/* names are letters, digits, '_', '-' and '.': no escapes to undo */
		if (sscanf(p, "%d\",\"keys\":%llu%n", &n, &keys, &used) != 2 || used == 0 ||
		    n < 1 || n >= s->cfg->databases || keys == 0 || p[0] == '0' || p[0] == '+')
			continue;
		char name[24];
		snprintf(name, sizeof(name), "db%d", n);
		field(c, name, "keys=%llu,expires=0,avg_ttl=0", keys);
	}
}

void srv_cmd_info(srv_session *s, const resp_arg *argv, size_t argc)
{
	char *json;
	unsigned long long keys = 0;
	int rc = walrus_stats(s->db, &json);
	if (rc != WALRUS_OK) {
		srv_reply_engine_error(s, rc);
		return;
	}
	resp_buf text = {0};
	info_ctx c = {.b = &text, .want = argv + 1, .nwant = argc - 1};
	info_server(&c, s);
	const char *end = json[0] == '{' ? flatten(&c, json, 0, 0) : NULL;
	(void)json_u64(json, "kv", "keys", &keys);
	info_keyspace(&c, s, json, keys);
	walrus_free(json);
	if (end == NULL || text.oom)
		resp_add_error(s->out, "ERR could not format the statistics");
	else
		resp_add_bulk(s->out, text.p, text.len);
	resp_buf_free(&text);
}

/* The keys of a key space, counted (the statistics count the default space's). */
static int count_keys(srv_session *s, long long *n)
{
	walrus_iter *it = NULL;
	*n = 0;
	if (s->sp_missing)
		return WALRUS_OK;
	int rc = walrus_iter_open_in(s->db, s->sp, NULL, 0, NULL, 0, &it);
	while (rc == WALRUS_OK && walrus_iter_valid(it)) {
		(*n)++;
		rc = walrus_iter_next(it);
	}
	walrus_iter_close(it);
	return rc;
}

void srv_cmd_dbsize(srv_session *s, const resp_arg *argv, size_t argc)
{
	char *json;
	unsigned long long keys;
	(void)argv;
	(void)argc;
	if (s->dbnum != 0) {
		long long n;
		int rc = count_keys(s, &n);
		if (rc == WALRUS_OK)
			resp_add_int(s->out, n);
		else
			srv_reply_engine_error(s, rc);
		return;
	}
	int rc = walrus_stats(s->db, &json);
	if (rc != WALRUS_OK) {
		srv_reply_engine_error(s, rc);
		return;
	}
	if (json_u64(json, "kv", "keys", &keys))
		resp_add_int(s->out, (long long)keys);
	else
		resp_add_error(s->out, "ERR the statistics have no key count");
	walrus_free(json);
}

/* ---------------------------------------------------------------- CONFIG */

/* Appends the pairs matching @pat; returns how many. */
static size_t config_engine(srv_session *s, resp_buf *b, const resp_arg *pat)
{
	size_t n, count = 0;
	const wr_opt_desc *t = wr_opts_table(&n);
	walrus_opts inst = {.o = engine_sh()->opts}; /* the running instance's values */
	for (size_t i = 0; i < n; i++) {
		char v[WR_OPT_TEXT_MAX];
		if (!resp_glob_match(pat->p, pat->len, t[i].name, strlen(t[i].name), true))
			continue;
		const walrus_opts *o = t[i].scope == WR_SCOPE_INSTANCE ? &inst : s->cfg->opts;
		if (walrus_opts_get(o, t[i].name, v, sizeof(v)) != WALRUS_OK)
			continue;
		resp_add_cstr(b, t[i].name);
		resp_add_cstr(b, v);
		count++;
	}
	return count;
}

static size_t config_server(srv_session *s, resp_buf *b, const resp_arg *pat)
{
	char port[16], clients[24], idle[24];
	const srv_config *cfg = s->cfg;
	snprintf(port, sizeof(port), "%d", cfg->sh ? cfg->sh->tcp_port : 0);
	snprintf(clients, sizeof(clients), "%ld", cfg->max_clients);
	snprintf(idle, sizeof(idle), "%lld", (long long)(cfg->idle_ms / 1000));
	const char *pairs[][2] = {
	    {"bind", cfg->tcp ? cfg->bind : ""},
	    {"port", port},
	    {"unixsocket", cfg->unix_path},
	    {"requirepass", cfg->requirepass ? "********" : ""}, /* never the password */
	    {"maxclients", clients},
	    {"timeout", idle},
	    {"save", ""},         /* walrus has no snapshots: its WAL is the persistence */
	    {"appendonly", "no"}, /* nor an append-only file */
	};
	size_t count = 0;
	for (size_t i = 0; i < WR_ARRAY_LEN(pairs); i++) {
		if (!resp_glob_match(pat->p, pat->len, pairs[i][0], strlen(pairs[i][0]), true))
			continue;
		resp_add_cstr(b, pairs[i][0]);
		resp_add_cstr(b, pairs[i][1]);
		count++;
	}
	return count;
}

void srv_cmd_config(srv_session *s, const resp_arg *argv, size_t argc)
{
	if (resp_arg_is(&argv[1], "set")) {
		resp_add_error(s->out,
		               "ERR CONFIG SET is not supported: walrus options are set when "
		               "the server starts (-o name=value)");
		return;
	}
	if (resp_arg_is(&argv[1], "resetstat")) {
		resp_add_simple(s->out, "OK");
		return;
	}
	if (!resp_arg_is(&argv[1], "get")) {
		resp_add_error(s->out, "ERR unknown subcommand '%.*s'. Try CONFIG GET.",
		               (int)WR_MIN(argv[1].len, 128), argv[1].p);
		return;
	}
	if (argc < 3) {
		srv_arity_error(s, "config|get");
		return;
	}
	resp_buf pairs = {0};
	size_t n = 0;
	for (size_t i = 2; i < argc; i++)
		n += config_engine(s, &pairs, &argv[i]) + config_server(s, &pairs, &argv[i]);
	resp_add_map(s->out, n, s->proto);
	resp_add_raw(s->out, pairs.p, pairs.len);
	resp_buf_free(&pairs);
}

/* ---------------------------------------------------------------- HELLO, COMMAND, CLIENT */

static void hello_reply(srv_session *s)
{
	resp_add_map(s->out, 7, s->proto);
	resp_add_cstr(s->out, "server");
	resp_add_cstr(s->out, "walrus");
	resp_add_cstr(s->out, "version");
	resp_add_cstr(s->out, "7.0.0");
	resp_add_cstr(s->out, "proto");
	resp_add_int(s->out, s->proto);
	resp_add_cstr(s->out, "id");
	resp_add_int(s->out, (long long)s->client_id);
	resp_add_cstr(s->out, "mode");
	resp_add_cstr(s->out, "standalone");
	resp_add_cstr(s->out, "role");
	resp_add_cstr(s->out, "master");
	resp_add_cstr(s->out, "modules");
	resp_add_array(s->out, 0);
}

/* HELLO's AUTH: true when authenticated (or nothing asked); else the error is given. */
static bool hello_auth(srv_session *s, const resp_arg *user, const resp_arg *pass)
{
	const char *pw = s->cfg->requirepass;
	if (pw == NULL) {
		s->authed = true;
		return true;
	}
	bool ok = resp_arg_is(user, "default") && srv_password_ok(pw, pass);
	if (!ok)
		resp_add_error(s->out, "WRONGPASS invalid username-password pair or user is "
		                       "disabled.");
	s->authed |= ok;
	return ok;
}

void srv_cmd_hello(srv_session *s, const resp_arg *argv, size_t argc)
{
	long long proto = s->proto;
	if (argc >= 2 && (!resp_arg_ll(&argv[1], &proto) || proto < 2 || proto > 3)) {
		resp_add_error(s->out, "NOPROTO unsupported protocol version");
		return;
	}
	for (size_t i = 2; i < argc; i++) {
		if (resp_arg_is(&argv[i], "auth") && i + 2 < argc) {
			if (!hello_auth(s, &argv[i + 1], &argv[i + 2]))
				return;
			i += 2;
		} else if (resp_arg_is(&argv[i], "setname") && i + 1 < argc) {
			i++;
		} else {
			resp_add_error(s->out, "ERR syntax error in HELLO option '%.*s'",
			               (int)WR_MIN(argv[i].len, 64), argv[i].p);
			return;
		}
	}
	if (!s->authed) {
		resp_add_error(s->out, "NOAUTH HELLO must be called with the client already "
		                       "authenticated, otherwise the HELLO <proto> AUTH <user> "
		                       "<pass> option can be used to authenticate the client and "
		                       "select the RESP protocol version at the same time");
		return;
	}
	s->proto = (int)proto;
	hello_reply(s);
}

void srv_cmd_command(srv_session *s, const resp_arg *argv, size_t argc)
{
	if (argc >= 2 && resp_arg_is(&argv[1], "count"))
		resp_add_int(s->out, 22);
	else if (argc >= 2 && resp_arg_is(&argv[1], "docs"))
		resp_add_map(s->out, 0, s->proto);
	else
		resp_add_array(s->out, 0); /* no command table to describe: clients cope */
}

void srv_cmd_client(srv_session *s, const resp_arg *argv, size_t argc)
{
	if (resp_arg_is(&argv[1], "id"))
		resp_add_int(s->out, (long long)s->client_id);
	else if (resp_arg_is(&argv[1], "getname"))
		resp_add_null(s->out, s->proto);
	else if ((resp_arg_is(&argv[1], "setname") && argc == 3) ||
	         (resp_arg_is(&argv[1], "setinfo") && argc == 4))
		resp_add_simple(s->out, "OK"); /* names are not kept */
	else
		resp_add_error(s->out,
		               "ERR unknown subcommand '%.*s'. Try CLIENT ID, GETNAME, "
		               "SETNAME, SETINFO.",
		               (int)WR_MIN(argv[1].len, 128), argv[1].p);
}
