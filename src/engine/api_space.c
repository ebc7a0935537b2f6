/*
 * api_space.c - named key spaces in include/walrus.h: space handles, the
 * _in calls, and the wait a drop makes for the calls inside the space.
 *
 * A call that reads or writes a space says so in its backend's slot
 * (wr_proc.space_rel) before it looks at kv's drop generation; a drop
 * commits, bumps the generation, then waits until no slot names the space
 * before its files go (engine_space_drop_wait).  Either the call sees the
 * new generation (and looks the space up again: gone, ENOTFOUND), or the
 * drop sees the call's slot and waits for it: both sides store, then load,
 * sequentially consistent.
 */
#include "engine/api_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPACE_MAGIC 0x53504345u /* "SPCE" */

struct walrus_space {
	uint32_t magic;
	walrus *db; /* the handle it belongs to */
	wr_relid rel;
	uint64_t gen; /* kv_drop_gen() when last found live */
	bool dropped; /* found dropped: every call fails */
	char name[KV_SPACE_NAME_MAX + 1];
	walrus_space *next; /* the handle's list */
};

static WR_TLS int enter_rc;

/* ---------------------------------------------------------------- inside a call */

int api_space_rel(walrus *db, const walrus_space *sp, const char *fn, wr_relid *rel)
{
	*rel = KV_REL;
	if (sp == NULL)
		return WALRUS_OK;
	if (sp->magic != SPACE_MAGIC)
		return wr_error(WALRUS_EINVAL, "%s: not a key space handle", fn);
	if (sp->db != db)
		return wr_error(WALRUS_EMISUSE,
		                "%s: key space \"%s\" was opened by another handle: open it with "
		                "this one",
		                fn, sp->name);
	*rel = sp->rel;
	return WALRUS_OK;
}

int api_space_batch_rel(const walrus_space *sp, const char *fn, wr_relid *rel)
{
	*rel = KV_REL;
	if (sp == NULL)
		return WALRUS_OK;
	if (sp->magic != SPACE_MAGIC)
		return wr_error(WALRUS_EINVAL, "%s: not a key space handle", fn);
	*rel = sp->rel;
	return WALRUS_OK;
}

static void set_slot(wr_relid rel)
{
	wr_proc *me = engine_my_proc();
	if (me != NULL)
		atomic_store(&me->space_rel, rel);
}

int api_space_enter(walrus_space *sp)
{
	if (sp == NULL)
		return WALRUS_OK;
	set_slot(sp->rel);
	uint64_t gen = kv_drop_gen();
	if (!sp->dropped && gen != sp->gen) {
		wr_relid rel;
		int rc = kv_space_lookup(sp->name, &rel);
		if (rc == WALRUS_OK && rel == sp->rel) {
			sp->gen = gen;
		} else if (rc == WALRUS_OK || rc == WALRUS_ENOTFOUND) {
			sp->dropped = true;
		} else {
			set_slot(0);
			return enter_rc = rc;
		}
	}
	if (sp->dropped) {
		set_slot(0);
		return enter_rc =
		           wr_error(WALRUS_ENOTFOUND, "key space \"%s\" was dropped", sp->name);
	}
	return WALRUS_OK;
}

int api_space_failed(void)
{
	return enter_rc;
}

int api_space_leave(int rc)
{
	set_slot(0);
	return rc;
}

int engine_in_space(uint32_t rel, engine_space_fn fn, void *arg)
{
	set_slot(rel);
	int rc = kv_space_live(rel);
	if (rc == WALRUS_OK)
		rc = fn(rel, arg);
	set_slot(0);
	if (rc == WALRUS_ENOTFOUND) {
		wr_error_clear();
		rc = ENGINE_SPACE_GONE;
	}
	return rc;
}

void engine_space_drop_wait(uint32_t rel)
{
	wr_proc *procs = engine_procs(), *me = engine_my_proc();
	engine_shared *sh = engine_sh();
	if (procs == NULL || sh == NULL)
		return;
	for (uint32_t i = 0; i < sh->nprocs; i++) {
		wr_proc *p = &procs[i];
		/* A call is short; a process killed inside one is gone (ESRCH). */
		for (;;) {
			uint32_t pid = atomic_load(&p->pid);
			if (p == me || pid == 0 || atomic_load(&p->space_rel) != rel ||
			    (kill((pid_t)pid, 0) != 0 && errno == ESRCH))
				break;
			wr_sleep_us(200);
		}
	}
}

/* ---------------------------------------------------------------- handles */

static walrus_space *find_handle(walrus *db, const char *name)
{
	for (walrus_space *s = api_handle_owned(db)->spaces; s != NULL; s = s->next)
		if (!s->dropped && strcmp(s->name, name) == 0)
			return s;
	return NULL;
}

typedef struct open_args {
	walrus *db;
	const char *name;
	int flags;
	walrus_space **sp;
} open_args;

static int open_body(open_args *a)
{
	walrus_space *s = find_handle(a->db, a->name);
	if (s != NULL) {
		int rc = api_space_leave(api_space_enter(s));
		if (rc == WALRUS_OK) {
			*a->sp = s;
			return WALRUS_OK;
		}
		if (rc != WALRUS_ENOTFOUND)
			return rc;
		wr_error_clear(); /* dropped: look for a space of that name again */
	}
	uint64_t gen = kv_drop_gen(); /* before the lookup: a drop after it is seen */
	wr_relid rel;
	int rc = kv_space_lookup(a->name, &rel);
	if (rc == WALRUS_ENOTFOUND && (a->flags & WALRUS_SPACE_CREATE)) {
		wr_error_clear();
		rc = WRITABLE("walrus_space_open", kv_space_create(a->name, &rel));
		if (rc == WALRUS_EEXIST) { /* another process made it first */
			wr_error_clear();
			rc = kv_space_lookup(a->name, &rel);
		}
	}
	if (rc != WALRUS_OK)
		return rc;
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory for a key space handle");
	s->magic = SPACE_MAGIC;
	s->db = a->db;
	s->rel = rel;
	s->gen = gen;
	snprintf(s->name, sizeof(s->name), "%s", a->name);
	api_owned *o = api_handle_owned(a->db);
	s->next = o->spaces;
	o->spaces = s;
	*a->sp = s;
	return WALRUS_OK;
}

int walrus_space_open(walrus *db, const char *name, int flags, walrus_space **sp)
{
	if (sp == NULL)
		return wr_error(WALRUS_EINVAL, "walrus_space_open: sp must not be NULL");
	*sp = NULL;
	if (flags & ~WALRUS_SPACE_CREATE)
		return wr_error(WALRUS_EINVAL, "walrus_space_open: unknown flags 0x%x",
		                (unsigned)flags);
	int rc = kv_space_check_name(name);
	if (rc != WALRUS_OK)
		return rc;
	open_args a = {db, name, flags, sp};
	API_CALL(db, "walrus_space_open", open_body(&a));
}

static int create_body(const char *name)
{
	wr_relid rel;
	return kv_space_create(name, &rel);
}

int walrus_space_create(walrus *db, const char *name)
{
	int rc = kv_space_check_name(name);
	if (rc != WALRUS_OK)
		return rc;
	API_CALL(db, "walrus_space_create", WRITABLE("walrus_space_create", create_body(name)));
}

static int drop_body(walrus *db, const char *name)
{
	kv_set_drop_wait(engine_space_drop_wait);
	int rc = kv_space_drop(name);
	walrus_space *s = find_handle(db, name);
	if (rc == WALRUS_OK && s != NULL)
		s->dropped = true;
	return rc;
}

int walrus_space_drop(walrus *db, const char *name)
{
	int rc = kv_space_check_name(name);
	if (rc != WALRUS_OK)
		return rc;
	API_CALL(db, "walrus_space_drop", WRITABLE("walrus_space_drop", drop_body(db, name)));
}

typedef struct list_args {
	char **names;
	size_t n, cap, bytes;
} list_args;

static int list_one(void *arg, const char *name, wr_relid rel)
{
	(void)rel;
	list_args *l = arg;
	char *copy = strdup(name);
	if (copy == NULL ||
	    wr_grow(&l->names, &l->cap, l->n + 1, sizeof(char *), 16) != WALRUS_OK) {
		free(copy);
		return wr_error(WALRUS_ENOMEM, "out of memory listing key spaces");
	}
	l->names[l->n++] = copy;
	l->bytes += strlen(name) + 1;
	return WALRUS_OK;
}

/* One allocation: the pointers, then the names they point to. */
static int list_pack(list_args *l, char ***out)
{
	char **all = malloc((l->n + 1) * sizeof(char *) + l->bytes);
	if (all == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory listing key spaces");
	char *p = (char *)(all + l->n + 1);
	for (size_t i = 0; i < l->n; i++) {
		size_t len = strlen(l->names[i]) + 1;
		memcpy(p, l->names[i], len);
		all[i] = p;
		p += len;
	}
	all[l->n] = NULL;
	*out = all;
	return WALRUS_OK;
}

static int list_body(char ***names, size_t *n)
{
	list_args l = {0};
	int rc = kv_space_list(list_one, &l);
	if (rc == WALRUS_OK)
		rc = list_pack(&l, names);
	if (rc == WALRUS_OK)
		*n = l.n;
	for (size_t i = 0; i < l.n; i++)
		free(l.names[i]);
	free(l.names);
	return rc;
}

int walrus_space_list(walrus *db, char ***names, size_t *n)
{
	if (names == NULL || n == NULL)
		return wr_error(WALRUS_EINVAL, "walrus_space_list: names and n must not be NULL");
	*names = NULL;
	*n = 0;
	API_CALL(db, "walrus_space_list", list_body(names, n));
}

const char *walrus_space_name(const walrus_space *sp)
{
	return sp != NULL && sp->magic == SPACE_MAGIC ? sp->name : NULL;
}

void api_space_free_all(walrus *db)
{
	api_owned *o = api_handle_owned(db);
	while (o->spaces != NULL) {
		walrus_space *s = o->spaces;
		o->spaces = s->next;
		s->magic = 0;
		free(s);
	}
}
