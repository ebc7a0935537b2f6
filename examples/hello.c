/*
 * hello.c - the smallest walrus program: open (creating) a database, write
 * a key durably, read it back, iterate, close.
 *
 *   cc hello.c $(pkg-config --cflags --libs walrus) -o hello && ./hello /tmp/hello-db
 */
#include <stdio.h>
#include <string.h>
#include <walrus.h>

static int fail(const char *what, int rc)
{
	fprintf(stderr, "%s: %s (%s)\n", what, walrus_strerror(rc), walrus_errmsg());
	return 1;
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "hello-db";
	walrus_opts *o = walrus_opts_new();
	walrus *db;
	if (o == NULL || walrus_opts_set(o, "create_if_missing", "on") != WALRUS_OK)
		return fail("options", WALRUS_ENOMEM);
	int rc = walrus_open(dir, o, &db);
	walrus_opts_free(o);
	if (rc != WALRUS_OK)
		return fail("open", rc);

	/* Durable when it returns: the commit record is on stable storage. */
	rc = walrus_put(db, "hello", 5, "world", 5, WALRUS_SYNC);
	if (rc != WALRUS_OK)
		return fail("put", rc);

	/* An atomic batch: both or neither survive a crash. */
	walrus_batch *b = walrus_batch_new();
	if (b == NULL)
		return fail("batch", WALRUS_ENOMEM);
	walrus_batch_put(b, "apple", 5, "red", 3);
	walrus_batch_put(b, "banana", 6, "yellow", 6);
	rc = walrus_batch_commit(db, b, WALRUS_SYNC);
	walrus_batch_free(b);
	if (rc != WALRUS_OK)
		return fail("batch commit", rc);

	void *v;
	size_t vl;
	rc = walrus_get(db, "hello", 5, &v, &vl);
	if (rc != WALRUS_OK)
		return fail("get", rc);
	printf("hello -> %.*s\n", (int)vl, (const char *)v);
	walrus_free(v);

	walrus_iter *it;
	rc = walrus_iter_open(db, NULL, 0, NULL, 0, &it);
	while (rc == WALRUS_OK && walrus_iter_valid(it)) {
		const void *k, *val;
		size_t kl, vlen;
		walrus_iter_key(it, &k, &kl);
		walrus_iter_value(it, &val, &vlen);
		printf("%.*s = %.*s\n", (int)kl, (const char *)k, (int)vlen, (const char *)val);
		rc = walrus_iter_next(it);
	}
	walrus_iter_close(it);
	if (rc != WALRUS_OK)
		return fail("scan", rc);
	rc = walrus_close(db);
	return rc == WALRUS_OK ? 0 : fail("close", rc);
}
