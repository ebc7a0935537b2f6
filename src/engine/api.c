/*
 * api.c - the public entry points of include/walrus.h that open and close
 * a database.  Handles of one process share its single attachment, counted
 * here: the process detaches when its last handle closes.
 */
#include "engine/engine.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WALRUS_HANDLE_MAGIC 0x57484e44u /* "WHND" */

struct walrus {
	uint32_t magic;
	uint64_t generation; /* of the instance it was opened on */
};

static int open_handles;
static pid_t handles_owner; /* a forked child starts with no handles of its own */

static void own_handles(void)
{
	if (handles_owner != client_self_pid()) {
		handles_owner = client_self_pid();
		open_handles = 0;
	}
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
	own_handles();
	walrus *h = calloc(1, sizeof(*h));
	if (h == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory");
	/* Every public call is a PANIC boundary, so wr_panic's abort() is never
	 * reached in the application's process: it only unwinds to here. */
	jmp_buf jb;
	if (setjmp(jb)) {
		client_leave();
		free(h);
		rc = client_panicked();
		client_detach();
		return rc;
	}
	client_enter(&jb);
	rc = client_attach(abs, &o);
	client_leave();
	if (rc != WALRUS_OK) {
		free(h);
		return rc;
	}
	h->magic = WALRUS_HANDLE_MAGIC;
	h->generation = client_generation();
	open_handles++;
	*db = h;
	return WALRUS_OK;
}

int walrus_close(walrus *db)
{
	if (db == NULL || db->magic != WALRUS_HANDLE_MAGIC)
		return wr_error(WALRUS_EINVAL, "walrus_close: not an open handle");
	db->magic = 0;
	free(db);
	own_handles();
	int rc = WALRUS_OK;
	if (open_handles == 0)
		return WALRUS_OK; /* a handle inherited through fork(): nothing of ours */
	if (--open_handles == 0) {
		jmp_buf jb;
		if (setjmp(jb)) {
			client_leave();
			rc = client_panicked();
			client_detach();
			return rc;
		}
		client_enter(&jb);
		rc = client_detach();
		client_leave();
	}
	return rc;
}

int api_handle_check(const walrus *db, const char *fn)
{
	if (db == NULL || db->magic != WALRUS_HANDLE_MAGIC)
		return wr_error(WALRUS_EINVAL, "%s: not an open handle", fn);
	int rc = client_check();
	if (rc == WALRUS_OK && db->generation != client_generation())
		rc = wr_error(
		    WALRUS_ERESTART,
		    "the instance restarted since this handle was opened; close and reopen "
		    "the database");
	return rc;
}

int walrus_supervisor_pid(const walrus *db)
{
	if (db == NULL || db->magic != WALRUS_HANDLE_MAGIC)
		return wr_error(WALRUS_EINVAL, "walrus_supervisor_pid: not an open handle");
	return (int)client_supervisor_pid();
}
