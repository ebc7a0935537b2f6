/*
 * kv_space.c - named key spaces: each its own tree in its own relation, and
 * the catalog that names them.
 *
 * The catalog is a tree too, in relation KV_CATALOG_REL, created with the
 * first space.  It holds, for each space, "n" + name -> relation (u32) and
 * "r" + relation (big-endian u32) -> name, "d" + relation -> the name of a
 * dropped space (for messages), and "#" -> the next relation number.  Creating a space is one
 * batch: the catalog's entries and the new tree's meta page and root leaf (kvw_tree_create) in a
 * relation whose file was created just before.  Dropping one is one batch too: the catalog's
 * entries go and the commit record names the relation, so redo removes the
 * file wherever the batch is replayed (crash recovery, a standby, a
 * restore); here the file goes once the batch is durable and the engine
 * has let every call reading the space finish (kv_set_drop_wait).
 *
 * Relation numbers are never used twice while the instance runs: the next
 * is kept in region "kv" (tree lock), from what the catalog says and what
 * base/ holds.  A file the catalog does not name (a creation that never
 * committed, a drop whose file outlived a crash past a checkpoint) is an
 * orphan: kv_space_cleanup removes it at start.
 *
 * Interface: kv.h ("key spaces").
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/buffer.h"
#include "kv/kv_int.h"

#define CAT_NAME    'n'
#define CAT_REL     'r'
#define CAT_DROPPED 'd' /* + relation: the name a dropped space had */
#define CAT_NEXT    "#"

static kv_drop_wait_fn drop_wait;

void kv_set_drop_wait(kv_drop_wait_fn fn)
{
	drop_wait = fn;
}

uint64_t kv_drop_gen(void)
{
	return kv_sh != NULL ? atomic_load(&kv_sh->drop_gen) : 0;
}

int kv_space_check_name(const char *name)
{
	size_t n = name != NULL ? strlen(name) : 0;
	if (n == 0)
		return wr_error(WALRUS_EINVAL, "a key space's name must not be empty");
	if (n > KV_SPACE_NAME_MAX)
		return wr_error(WALRUS_EINVAL, "key space name \"%.40s...\" is over %u bytes", name,
		                KV_SPACE_NAME_MAX);
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		          (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
		if (!ok)
			return wr_error(WALRUS_EINVAL,
			                "key space name \"%s\" has a character other than letters, "
			                "digits, '_', '-' and '.'",
			                name);
	}
	return WALRUS_OK;
}

/* ---------------------------------------------------------------- the catalog */

static size_t name_key(const char *name, char *key)
{
	size_t n = strlen(name);
	key[0] = CAT_NAME;
	memcpy(key + 1, name, n);
	return n + 1;
}

static size_t rel_key_of(char kind, wr_relid rel, char *key)
{
	key[0] = kind;
	for (int i = 0; i < 4; i++)
		key[1 + i] = (char)(rel >> (24 - 8 * i));
	return 5;
}

static size_t rel_key(wr_relid rel, char *key)
{
	return rel_key_of(CAT_REL, rel, key);
}

/*
 * Whether the catalog's tree exists (once seen, for good: it is never
 * dropped): *exists false when there is no file, or an empty one, or one
 * whose meta page was never written (a first creation that did not
 * commit).  Any other state is an error: the catalog is never taken for
 * absent because it could not be read.
 */
static int catalog_state(bool *exists)
{
	*exists = atomic_load(&kv_sh->catalog_ok);
	if (*exists || !smgr_exists(KV_CATALOG_REL))
		return WALRUS_OK;
	smgr_rel *r;
	wr_blkno n;
	int rc = smgr_open(KV_CATALOG_REL, &r);
	if (rc == WALRUS_OK)
		rc = smgr_nblocks(r, &n);
	if (rc != WALRUS_OK || n == 0)
		return rc;
	int buf;
	rc = buf_read(KV_CATALOG_REL, 0, &buf);
	if (rc != WALRUS_OK)
		return rc;
	buf_lock(buf, false);
	bool fresh = page_is_new(buf_page(buf));
	buf_unlock(buf);
	buf_release(buf);
	if (fresh)
		return WALRUS_OK;
	wr_relid cur = kv_cur_rel;
	kv_cur_rel = KV_CATALOG_REL;
	kv_meta m;
	rc = kv_read_meta(&m); /* ECORRUPT naming the block when not a meta page */
	kv_cur_rel = cur;
	if (rc == WALRUS_OK) {
		atomic_store(&kv_sh->catalog_ok, true);
		*exists = true;
	}
	return rc;
}

/* The catalog's value of @key into @buf (ENOTFOUND when absent). */
static int catalog_get(const char *key, size_t kl, void *buf, size_t cap, size_t *vl)
{
	bool exists;
	int rc = catalog_state(&exists);
	if (rc != WALRUS_OK)
		return rc;
	if (!exists)
		return wr_error(WALRUS_ENOTFOUND, "no key space exists");
	return kv_get_into_in(KV_CATALOG_REL, key, kl, buf, cap, vl);
}

static int catalog_rel(const char *name, wr_relid *rel)
{
	char key[KV_SPACE_NAME_MAX + 1];
	size_t vl;
	int rc = catalog_get(key, name_key(name, key), rel, sizeof(*rel), &vl);
	if (rc == WALRUS_ENOTFOUND)
		return wr_error(WALRUS_ENOTFOUND, "no key space \"%s\"", name);
	if (rc == WALRUS_OK && vl != sizeof(*rel))
		rc = wr_error(WALRUS_ECORRUPT,
		              "the catalog's entry of key space \"%s\" is malformed", name);
	return rc;
}

int kv_space_lookup(const char *name, wr_relid *rel)
{
	int rc = kv_space_check_name(name);
	return rc == WALRUS_OK ? catalog_rel(name, rel) : rc;
}

int kv_space_name(wr_relid rel, char *name, size_t cap)
{
	char key[8];
	size_t vl;
	if (cap == 0)
		return wr_error(WALRUS_EINVAL, "no room for a key space's name");
	int rc = catalog_get(key, rel_key(rel, key), name, cap - 1, &vl);
	if (rc == WALRUS_OK)
		name[vl] = '\0';
	return rc;
}

int kv_space_live(wr_relid rel)
{
	char name[KV_SPACE_NAME_MAX + 1], key[8];
	int rc = kv_space_name(rel, name, sizeof(name));
	if (rc != WALRUS_ENOTFOUND)
		return rc;
	size_t vl;
	if (catalog_get(key, rel_key_of(CAT_DROPPED, rel, key), name, sizeof(name) - 1, &vl) ==
	    WALRUS_OK) {
		name[vl] = '\0';
		return wr_error(WALRUS_ENOTFOUND, "key space \"%s\" (relation %u) was dropped",
		                name, rel);
	}
	return wr_error(WALRUS_ENOTFOUND, "the key space of relation %u was dropped", rel);
}

int kv_space_list(kv_space_fn fn, void *arg)
{
	bool exists;
	int rc = catalog_state(&exists);
	if (rc != WALRUS_OK || !exists)
		return rc;
	char lo[1] = {CAT_NAME}, hi[1] = {CAT_NAME + 1};
	kv_iter *it;
	rc = kv_iter_open_in(KV_CATALOG_REL, lo, 1, hi, 1, &it);
	while (rc == WALRUS_OK && kv_iter_valid(it)) {
		const kv_iter_cur *c = kv_iter_current(it);
		wr_relid rel;
		char name[KV_SPACE_NAME_MAX + 1];
		if (c->klen < 2 || c->klen > KV_SPACE_NAME_MAX + 1 || c->vlen != sizeof(rel)) {
			rc = wr_error(WALRUS_ECORRUPT,
			              "the catalog of key spaces has a malformed entry");
			break;
		}
		memcpy(name, (const char *)c->key + 1, c->klen - 1);
		name[c->klen - 1] = '\0';
		memcpy(&rel, c->val, sizeof(rel));
		rc = fn(arg, name, rel);
		if (rc == WALRUS_OK)
			rc = kv_iter_next(it);
	}
	if (it != NULL)
		kv_iter_close(it);
	return rc;
}

/* ---------------------------------------------------------------- relation numbers */

/* The highest relation number a file of base/ has (0: none). */
static wr_relid highest_file(void)
{
	char path[4096];
	smgr_segment_path(KV_REL, 0, path, sizeof(path));
	char *slash = strrchr(path, '/');
	if (slash != NULL)
		*slash = '\0';
	DIR *d = opendir(path);
	if (d == NULL)
		return 0;
	wr_relid top = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		char *end;
		unsigned long v = strtoul(e->d_name, &end, 10);
		if (end != e->d_name && (*end == '\0' || *end == '.') && v <= UINT32_MAX && v > top)
			top = (wr_relid)v;
	}
	closedir(d);
	return top;
}

/* The next relation number (tree lock held exclusive). */
static int next_relid(wr_relid *rel)
{
	if (kv_sh->next_relid == 0) {
		wr_relid next = KV_FIRST_SPACE_REL, v;
		size_t vl;
		int rc = catalog_get(CAT_NEXT, 1, &v, sizeof(v), &vl);
		if (rc == WALRUS_OK && vl == sizeof(v) && v > next)
			next = v;
		else if (rc != WALRUS_OK && rc != WALRUS_ENOTFOUND)
			return rc;
		wr_error_clear();
		wr_relid top = highest_file();
		if (top >= next)
			next = top + 1;
		kv_sh->next_relid = next;
	}
	if (kv_sh->next_relid == UINT32_MAX)
		return wr_error(WALRUS_ELIMIT, "no relation number is left for a new key space");
	*rel = kv_sh->next_relid++;
	return WALRUS_OK;
}

/* ---------------------------------------------------------------- files */

void kv_drop_files(wr_relid rel)
{
	if (drop_wait != NULL)
		drop_wait(rel);
	buf_drop_rel(rel);
	/* Another tree may take the slot now. */
	for (int i = 1; i < KV_TREE_SLOTS; i++) {
		kv_tree_sh *t = &kv_sh->trees[i];
		if (atomic_load(&t->rel) == rel) {
			atomic_fetch_add(&t->seq, 1);
			atomic_store(&t->rel, 0);
			atomic_fetch_add(&t->seq, 1);
		}
	}
	if (smgr_exists(rel) && smgr_unlink(rel) != WALRUS_OK) {
		wr_log(WR_WARNING, "could not remove the files of dropped relation %u: %s", rel,
		       walrus_errmsg());
		wr_error_clear();
	}
}

/* A new relation's empty file (an orphan's first removed). */
static int new_file(wr_relid rel)
{
	if (smgr_exists(rel))
		kv_drop_files(rel);
	return smgr_create(rel);
}

/* ---------------------------------------------------------------- create and drop */

typedef struct space_op {
	kv_batch *b;
	const char *name;
	wr_relid rel;
	bool made_file, made_catalog;
} space_op;

static int put_catalog(kv_batch *b, const char *k, size_t kl, const void *v, size_t vl)
{
	return kv_batch_put_in(b, KV_CATALOG_REL, k, kl, v, vl);
}

/* Under the tree lock: the creating batch (kv_batch_commit_built). */
static int build_create(void *arg)
{
	space_op *o = arg;
	wr_relid rel;
	int rc = catalog_rel(o->name, &rel);
	if (rc == WALRUS_OK)
		return wr_error(WALRUS_EEXIST, "key space \"%s\" exists", o->name);
	if (rc != WALRUS_ENOTFOUND)
		return rc;
	wr_error_clear();
	bool exists;
	rc = catalog_state(&exists);
	if (rc != WALRUS_OK)
		return rc;
	if (!exists) {
		rc = new_file(KV_CATALOG_REL);
		if (rc == WALRUS_OK)
			rc = kv_batch_create_tree(o->b, KV_CATALOG_REL);
		if (rc != WALRUS_OK)
			return rc;
		o->made_catalog = true;
	}
	rc = next_relid(&o->rel);
	if (rc == WALRUS_OK)
		rc = new_file(o->rel);
	if (rc != WALRUS_OK)
		return rc;
	o->made_file = true;
	char nk[KV_SPACE_NAME_MAX + 1], rk[8];
	wr_relid next = o->rel + 1;
	rc = kv_batch_create_tree(o->b, o->rel);
	if (rc == WALRUS_OK)
		rc = put_catalog(o->b, nk, name_key(o->name, nk), &o->rel, sizeof(o->rel));
	if (rc == WALRUS_OK)
		rc = put_catalog(o->b, rk, rel_key(o->rel, rk), o->name, strlen(o->name));
	if (rc == WALRUS_OK)
		rc = put_catalog(o->b, CAT_NEXT, 1, &next, sizeof(next));
	return rc;
}

/* The durable batch @build makes for space @o->name. */
static int run_space_op(space_op *o, kv_commit_check_fn build)
{
	int rc = kv_space_check_name(o->name);
	if (rc != WALRUS_OK)
		return rc;
	if ((o->b = kv_batch_new()) == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory for key space \"%s\"", o->name);
	rc = kv_batch_commit_built(o->b, KV_SYNC, build, o, NULL);
	kv_batch_free(o->b);
	return rc;
}

int kv_space_create(const char *name, wr_relid *rel)
{
	space_op o = {.name = name};
	int rc = run_space_op(&o, build_create);
	if (rc == WALRUS_OK) {
		*rel = o.rel;
		wr_log(WR_LOG, "created key space \"%s\" (relation %u)", name, o.rel);
		return WALRUS_OK;
	}
	/* Nothing names the files: give them back (a crash here leaves orphans
	 * that the next start removes). */
	if (o.made_file)
		kv_drop_files(o.rel);
	bool exists;
	if (o.made_catalog && catalog_state(&exists) == WALRUS_OK && !exists)
		kv_drop_files(KV_CATALOG_REL);
	return rc;
}

/* Under the tree lock: the dropping batch. */
static int build_drop(void *arg)
{
	space_op *o = arg;
	int rc = catalog_rel(o->name, &o->rel);
	if (rc != WALRUS_OK)
		return rc;
	char nk[KV_SPACE_NAME_MAX + 1], rk[8], dk[8];
	rc = kv_batch_delete_in(o->b, KV_CATALOG_REL, nk, name_key(o->name, nk));
	if (rc == WALRUS_OK)
		rc = kv_batch_delete_in(o->b, KV_CATALOG_REL, rk, rel_key(o->rel, rk));
	if (rc == WALRUS_OK)
		rc = put_catalog(o->b, dk, rel_key_of(CAT_DROPPED, o->rel, dk), o->name,
		                 strlen(o->name));
	if (rc == WALRUS_OK)
		rc = kv_batch_drop_tree(o->b, o->rel);
	return rc;
}

int kv_space_drop(const char *name)
{
	space_op o = {.name = name};
	int rc = run_space_op(&o, build_drop);
	if (rc != WALRUS_OK)
		return rc;
	/* Calls that found the space before the commit see the new generation
	 * once they look again; the engine's wait covers those still reading. */
	atomic_fetch_add(&kv_sh->drop_gen, 1);
	kv_drop_files(o.rel);
	wr_log(WR_LOG, "dropped key space \"%s\" (relation %u)", name, o.rel);
	return WALRUS_OK;
}

/* ---------------------------------------------------------------- orphans */

typedef struct orphan_scan {
	wr_relid *rels;
	size_t n, cap;
} orphan_scan;

int kv_space_cleanup(void)
{
	char path[4096];
	smgr_segment_path(KV_REL, 0, path, sizeof(path));
	char *slash = strrchr(path, '/');
	if (slash != NULL)
		*slash = '\0';
	DIR *d = opendir(path);
	if (d == NULL)
		return wr_error(WALRUS_EIO, "could not open directory \"%s\": %s", path,
		                strerror(errno));
	orphan_scan os = {0};
	int rc = WALRUS_OK;
	struct dirent *e;
	while (rc == WALRUS_OK && (e = readdir(d)) != NULL) {
		char *end;
		unsigned long v = strtoul(e->d_name, &end, 10);
		if (end == e->d_name || *end != '\0' || v < KV_FIRST_SPACE_REL || v > UINT32_MAX)
			continue; /* segment files beyond the first go with it */
		if (wr_grow(&os.rels, &os.cap, os.n + 1, sizeof(*os.rels), 16) != WALRUS_OK)
			rc = wr_error(WALRUS_ENOMEM, "out of memory listing data files");
		else
			os.rels[os.n++] = (wr_relid)v;
	}
	closedir(d);
	for (size_t i = 0; rc == WALRUS_OK && i < os.n; i++) {
		char name[KV_SPACE_NAME_MAX + 1];
		int lrc = kv_space_name(os.rels[i], name, sizeof(name));
		if (lrc == WALRUS_OK)
			continue;
		if (lrc != WALRUS_ENOTFOUND) {
			rc = lrc;
			break;
		}
		wr_error_clear();
		wr_log(WR_LOG,
		       "removing \"%s/%u\": no key space uses it (a creation that never "
		       "committed, or a drop that a crash interrupted)",
		       path, os.rels[i]);
		kv_drop_files(os.rels[i]);
	}
	free(os.rels);
	return rc;
}

int kv_tree_shape(wr_relid rel, kv_shape *out)
{
	wr_relid cur = kv_cur_rel;
	kv_cur_rel = rel;
	kv_meta m;
	int rc = kv_read_meta(&m);
	kv_cur_rel = cur;
	if (rc == WALRUS_OK)
		*out = (kv_shape){.keys = m.nkeys, .pages = m.nblocks, .free_pages = m.nfree};
	return rc;
}

typedef struct space_vec {
	kv_space_ent *e;
	size_t n, cap;
} space_vec;

static int collect(void *arg, const char *name, wr_relid rel)
{
	space_vec *v = arg;
	if (wr_grow(&v->e, &v->cap, v->n + 1, sizeof(*v->e), 16) != WALRUS_OK)
		return wr_error(WALRUS_ENOMEM, "out of memory listing key spaces");
	kv_space_ent *e = &v->e[v->n++];
	e->rel = rel;
	snprintf(e->name, sizeof(e->name), "%s", name);
	return WALRUS_OK;
}

int kv_space_all(kv_space_ent **out, size_t *n)
{
	space_vec v = {0};
	int rc = kv_space_list(collect, &v);
	if (rc != WALRUS_OK) {
		free(v.e);
		v.e = NULL;
		v.n = 0;
	}
	*out = v.e;
	*n = v.n;
	return rc;
}
