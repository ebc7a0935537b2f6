/*
 * cmd_load.c - `walrus load`: KEY<TAB>VALUE lines from stdin.
 *
 *   --sync     each commit is durable before the next line is read
 *   --ack      print "ack KEY" once the line is durable (implies --sync)
 *   --batch N  commit N lines at a time as one atomic batch (default 1)
 *   --hex      keys and values are hexadecimal
 * The command contract's crash test relies on --ack: a key is acknowledged
 * only after walrus_batch_commit(WALRUS_SYNC) returned for it.
 */
#include "tool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct load_args {
	bool sync, ack, hex;
	long batch;
	walrus_space *sp; /* -s NAME's key space, NULL: the default one */
} load_args;

static int load_parse(int argc, char **argv, load_args *a)
{
	*a = (load_args){.batch = 1};
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--sync") == 0)
			a->sync = true;
		else if (strcmp(argv[i], "--ack") == 0)
			a->ack = a->sync = true;
		else if (strcmp(argv[i], "--hex") == 0)
			a->hex = true;
		else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
			char *end;
			a->batch = strtol(argv[++i], &end, 10);
			if (*end != '\0' || a->batch < 1 || a->batch > 1000000)
				goto bad;
		} else
			goto bad;
	}
	return 0;
bad:
	fprintf(stderr, "usage: walrus -D DIR load [--sync] [--ack] [--batch N] [--hex] < lines\n"
	                "  stdin: KEY<TAB>VALUE lines\n");
	return TOOL_EXIT_USAGE;
}

/* In place: the decoded bytes are never longer than the text. */
static int unhex(char *s, size_t n, size_t *out)
{
	if (!tool_hex_decode(s, n, s))
		return -1;
	*out = n / 2;
	return 0;
}

/* Keys of the pending batch, to acknowledge after its commit. */
typedef struct acks {
	char **keys;
	size_t *lens;
	long n;
} acks;

static int commit(walrus *db, walrus_batch *b, const load_args *a, acks *ak)
{
	if (walrus_batch_count(b) == 0)
		return 0;
	int e = walrus_batch_commit(db, b, a->sync ? WALRUS_SYNC : WALRUS_ASYNC);
	walrus_batch_clear(b);
	if (e != WALRUS_OK)
		return tool_fail(e, "load");
	for (long i = 0; i < ak->n; i++) {
		if (a->ack) {
			fputs("ack ", stdout);
			fwrite(ak->keys[i], 1, ak->lens[i], stdout);
			putchar('\n');
		}
		free(ak->keys[i]);
	}
	ak->n = 0;
	if (a->ack && fflush(stdout) != 0)
		return TOOL_EXIT_ENGINE;
	return 0;
}

/* Adds one line to the batch; the key is remembered (as typed) for its ack. */
static int add_line(walrus_batch *b, char *line, size_t len, long lineno, const load_args *a,
                    acks *ak)
{
	char *tab = memchr(line, '\t', len);
	if (tab == NULL) {
		fprintf(stderr, "walrus: load: line %ld has no TAB between key and value\n",
		        lineno);
		return TOOL_EXIT_USAGE;
	}
	size_t kl = (size_t)(tab - line), vl = len - kl - 1;
	char *typed = malloc(kl + 1);
	if (typed == NULL)
		return TOOL_EXIT_ENGINE;
	memcpy(typed, line, kl);
	if (a->hex && (unhex(line, kl, &kl) != 0 || unhex(tab + 1, vl, &vl) != 0)) {
		free(typed);
		fprintf(stderr, "walrus: load: line %ld is not hexadecimal (--hex)\n", lineno);
		return TOOL_EXIT_USAGE;
	}
	int e = walrus_batch_put_in(b, a->sp, line, kl, tab + 1, vl);
	if (e != WALRUS_OK) {
		free(typed);
		char what[64];
		snprintf(what, sizeof(what), "load: line %ld", lineno);
		return tool_fail(e, what);
	}
	ak->keys[ak->n] = typed;
	ak->lens[ak->n++] = (size_t)(tab - line);
	return 0;
}

static int load_loop(walrus *db, const load_args *a)
{
	walrus_batch *b = walrus_batch_new();
	acks ak = {calloc((size_t)a->batch, sizeof(char *)),
	           calloc((size_t)a->batch, sizeof(size_t)), 0};
	char *line = NULL;
	size_t cap = 0;
	long lineno = 0;
	int rc = b && ak.keys && ak.lens ? 0 : tool_fail(WALRUS_ENOMEM, "load");
	ssize_t n;
	while (rc == 0 && (n = getline(&line, &cap, stdin)) >= 0) {
		lineno++;
		if (n > 0 && line[n - 1] == '\n')
			line[--n] = '\0';
		if (n == 0)
			continue;
		rc = add_line(b, line, (size_t)n, lineno, a, &ak);
		if (rc == 0 && ak.n >= a->batch)
			rc = commit(db, b, a, &ak);
	}
	if (rc == 0)
		rc = commit(db, b, a, &ak);
	for (long i = 0; i < ak.n; i++)
		free(ak.keys[i]);
	free(ak.keys);
	free(ak.lens);
	free(line);
	walrus_batch_free(b);
	return rc;
}

int cmd_load(tool_ctx *ctx, int argc, char **argv)
{
	load_args a;
	if (tool_wants_help(argc, argv)) {
		printf("usage: walrus -D DIR load [--sync] [--ack] [--batch N] [--hex] < lines\n"
		       "  stdin: KEY<TAB>VALUE lines, committed in batches of N (default 1)\n"
		       "  --sync  each batch is durable before the next is read\n"
		       "  --ack   print \"ack KEY\" once its line is durable (implies --sync)\n"
		       "  --hex   keys and values in hexadecimal\n");
		return 0;
	}
	int rc = load_parse(argc, argv, &a);
	if (rc != 0)
		return rc;
	walrus *db;
	rc = tool_open(ctx, true, &db);
	if (rc != 0)
		return rc;
	rc = tool_space(ctx, db, &a.sp);
	if (rc == 0)
		rc = load_loop(db, &a);
	int crc = walrus_close(db);
	if (rc == 0 && crc != WALRUS_OK)
		rc = tool_fail(crc, "close");
	return rc;
}
