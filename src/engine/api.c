/*
 * api.c - the public entry points of include/walrus.h that open and close
 * a database.  A handle is a backend (engine.h, client_open); the handles of
 * one process share its attachment, which goes with the last of them.
 */
#include "engine/api_int.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WALRUS_HANDLE_MAGIC 0x57484e44u /* "WHND" */

struct walrus {
	uint32_t magic;
	bool sync_default; /* its synchronous_commit: what flags 0 means */
	client_backend *be;
	api_owned owned; /* its snapshots and transactions (api_txn.c) */
};

api_owned *api_handle_owned(walrus *db)
{
	return &db->owned;
}

int walrus_open(const char *dir, const walrus_opts *opts, walrus **db)
{
	char abs[PATH_MAX];
	wr_options o;

	wr_error_clear();
	if (db == NULL)
		return wr_error(WALRUS_EINVAL, "walrus_open: db must not be NULL");
	*db = NULL;
	if (opts != NULL)
		o = opts->o;
	else
		wr_opts_defaults(&o);
	int rc = wr_opts_validate(&o);
	if (rc == WALRUS_OK)
		rc = datadir_resolve(dir, o.create_if_missing, abs);
	if (rc == WALRUS_OK)
		rc = datadir_check(abs);
	if (rc != WALRUS_OK)
		return rc;
	walrus *h = calloc(1, sizeof(*h));
	if (h == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory");
	/* Every public call is a PANIC boundary, so wr_panic's abort() is never
	 * reached in the application's process: it only unwinds to here. */
	jmp_buf jb;
	if (setjmp(jb)) {
		client_leave();
		free(h);
		return client_panicked();
	}
	client_enter(&jb);
	rc = client_open(abs, &o, &h->be);
	client_leave();
	if (rc != WALRUS_OK) {
		free(h);
		return rc;
	}
	h->magic = WALRUS_HANDLE_MAGIC;
	h->sync_default = o.synchronous_commit;
	*db = h;
	return WALRUS_OK;
}

int walrus_close(walrus *db)
{
	wr_error_clear();
	if (db == NULL || db->magic != WALRUS_HANDLE_MAGIC)
		return wr_error(WALRUS_EINVAL, "walrus_close: not an open handle");
	client_backend *be = db->be;
	int rc = client_call_begin(be);
	if (rc == WALRUS_EMISUSE && !client_backend_inherited(be))
		return rc; /* another thread is inside a call on it: closing would pull it away */
	/* Its snapshots' registrations go while the handle still holds the instance. */
	if (rc == WALRUS_OK)
		api_txn_orphan_all(db, true);
	else
		api_txn_orphan_all(db, false);
	if (rc == WALRUS_OK)
		client_call_end(be);
	api_space_free_all(db);
	wr_error_clear();
	db->magic = 0;
	free(db);
	jmp_buf jb;
	if (setjmp(jb)) {
		client_leave();
		return client_panicked();
	}
	client_enter(&jb);
	rc = client_close(be);
	client_leave();
	return rc;
}

int api_handle_valid(const walrus *db, const char *fn)
{
	if (db == NULL || db->magic != WALRUS_HANDLE_MAGIC)
		return wr_error(WALRUS_EINVAL, "%s: not an open handle", fn);
	return WALRUS_OK;
}

int api_handle_check(const walrus *db, const char *fn)
{
	if (db == NULL || db->magic != WALRUS_HANDLE_MAGIC)
		return wr_error(WALRUS_EINVAL, "%s: not an open handle", fn);
	return client_check();
}

int api_call_begin(walrus *db, const char *fn)
{
	if (db == NULL || db->magic != WALRUS_HANDLE_MAGIC)
		return wr_error(WALRUS_EINVAL, "%s: not an open handle", fn);
	return client_call_begin(db->be);
}

void api_call_end(walrus *db)
{
	client_call_end(db->be);
}

bool api_sync_default(const walrus *db)
{
	return db->sync_default;
}

int walrus_supervisor_pid(const walrus *db)
{
	if (db == NULL || db->magic != WALRUS_HANDLE_MAGIC)
		return wr_error(WALRUS_EINVAL, "walrus_supervisor_pid: not an open handle");
	return (int)client_supervisor_pid();
}
