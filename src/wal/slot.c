/*
 * slot.c - replication slots: the WAL a standby still needs is kept while
 * it is away, as PostgreSQL's physical slots keep it.
 *
 * A slot is a name and a restart LSN.  The WAL sender of the standby that
 * uses it moves the LSN to what the standby flushed (wal_slot_advance, in
 * memory); recycling keeps every segment at or after the oldest valid
 * slot's LSN.  A standby gone for long must not fill the disk: a slot more
 * than max_slot_wal_keep_size behind the redo point is invalidated, and
 * its standby then catches up from the archive or is told which segment
 * is gone.
 *
 * Durability: DIR/slots/NAME holds the slot's LSN.  It is written when the
 * slot is made or invalidated, and by each checkpoint for the slots that
 * moved, before the checkpoint recycles anything: the file may lag the
 * memory, so a crash restarts a slot from an older LSN and keeps more WAL
 * than needed, never less.
 *
 * Interface: wal.h ("replication slots").  Locks: rslot_lock (a spinlock)
 * for a slot's name and in_use, and the taking of active_pid.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "wal/wal_int.h"

static bool slot_name_ok(const char *name)
{
	size_t n = name == NULL ? 0 : strlen(name);
	if (n == 0 || n > WAL_SLOT_NAME_MAX)
		return false;
	return strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") ==
	       n;
}

/* The slot named @name (caller holds rslot_lock), or NULL. */
static wal_rslot *slot_find(const char *name)
{
	for (int i = 0; i < WAL_MAX_RSLOTS; i++) {
		wal_rslot *s = &wal_sh->rslots[i];
		if (atomic_load(&s->in_use) && strcmp(s->name, name) == 0)
			return s;
	}
	return NULL;
}

static int slot_dir(const char *datadir, char *buf, size_t len)
{
	if (!wr_snprintf(buf, len, "%s/%s", datadir, WAL_SLOT_DIR))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", datadir);
	return WALRUS_OK;
}

static int slot_write(const char *datadir, const char *name, wr_lsn lsn, bool invalidated)
{
	char dir[PATH_MAX], text[160];
	int rc = slot_dir(datadir, dir, sizeof(dir));
	if (rc != WALRUS_OK)
		return rc;
	if (mkdir(dir, 0700) == 0) {
		if (fdc_fsync_path(datadir) != WALRUS_OK)
			wr_panic("could not fsync \"%s\": %s", datadir, walrus_errmsg());
	} else if (errno != EEXIST)
		return wr_error(wr_errno_code(errno), "could not create \"%s\": %m", dir);
	snprintf(text, sizeof(text), "restart_lsn = " WAL_LSN_FMT "\ninvalidated = %d\n",
	         WAL_LSN_ARGS(lsn), invalidated ? 1 : 0);
	return wal_write_file(dir, name, text);
}

/* ---------------------------------------------------------------- loading */

static int slot_load_one(const char *dir, const char *name, int *next)
{
	char path[PATH_MAX], line[160];
	wr_lsn lsn = 0;
	int inval = 0;
	if (!wr_snprintf(path, sizeof(path), "%s/%s", dir, name))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", dir);
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return wr_error(wr_errno_code(errno), "could not read \"%s\": %m", path);
	bool ok = false;
	while (fgets(line, sizeof(line), f) != NULL) {
		char v[64];
		if (sscanf(line, "restart_lsn = %63s", v) == 1)
			ok = wal_parse_lsn(v, &lsn);
		else
			(void)sscanf(line, "invalidated = %d", &inval);
	}
	fclose(f);
	if (!ok)
		return wr_error(WALRUS_ECORRUPT, "replication slot file \"%s\" has no restart_lsn",
		                path);
	if (*next >= WAL_MAX_RSLOTS)
		return wr_error(WALRUS_ELIMIT, "more than %d replication slots in \"%s\"",
		                WAL_MAX_RSLOTS, dir);
	wal_rslot *s = &wal_sh->rslots[(*next)++];
	wr_snprintf(s->name, sizeof(s->name), "%s", name);
	atomic_store(&s->restart_lsn, lsn);
	atomic_store(&s->invalidated, inval != 0);
	atomic_store(&s->in_use, 1);
	return WALRUS_OK;
}

int wal_slots_load(const char *datadir)
{
	char dir[PATH_MAX];
	int rc = slot_dir(datadir, dir, sizeof(dir)), n = 0;
	if (rc != WALRUS_OK)
		return rc;
	DIR *d = opendir(dir);
	if (d == NULL)
		return errno == ENOENT
		           ? WALRUS_OK
		           : wr_error(wr_errno_code(errno), "could not open \"%s\": %m", dir);
	struct dirent *de;
	while (rc == WALRUS_OK && (de = readdir(d)) != NULL)
		if (slot_name_ok(de->d_name)) /* not ".", "..", nor a temp file */
			rc = slot_load_one(dir, de->d_name, &n);
	closedir(d);
	return rc;
}

/* ---------------------------------------------------------------- create, drop */

int wal_slot_create(const char *datadir, const char *name, int max_slots)
{
	if (!slot_name_ok(name))
		return wr_error(WALRUS_EINVAL,
		                "replication slot name \"%.80s\" is invalid: 1 to %d of a-z, A-Z, "
		                "0-9, '_' and '-'",
		                name ? name : "", WAL_SLOT_NAME_MAX);
	spin_lock(&wal_sh->rslot_lock);
	wal_rslot *s = NULL;
	int used = 0;
	for (int i = 0; i < WAL_MAX_RSLOTS; i++) {
		if (atomic_load(&wal_sh->rslots[i].in_use))
			used++;
		else if (s == NULL)
			s = &wal_sh->rslots[i];
	}
	int rc = WALRUS_OK;
	if (slot_find(name) != NULL)
		rc = wr_error(WALRUS_EBUSY, "replication slot \"%s\" already exists", name);
	else if (used >= max_slots || s == NULL)
		rc = wr_error(WALRUS_ELIMIT,
		              "all replication slots are in use (max_replication_slots = %d)",
		              max_slots);
	wr_lsn lsn = atomic_load(&wal_sh->redo);
	if (rc == WALRUS_OK) {
		wr_snprintf(s->name, sizeof(s->name), "%s", name);
		atomic_store(&s->restart_lsn, lsn);
		atomic_store(&s->invalidated, 0);
		atomic_store(&s->active_pid, 0);
		atomic_store(&s->in_use, 1);
	}
	spin_unlock(&wal_sh->rslot_lock);
	if (rc == WALRUS_OK && (rc = slot_write(datadir, name, lsn, false)) != WALRUS_OK)
		atomic_store(&s->in_use, 0); /* nothing durable says it exists */
	if (rc == WALRUS_OK)
		wr_log(WR_LOG, "replication slot \"%s\" created: WAL kept from " WAL_LSN_FMT, name,
		       WAL_LSN_ARGS(lsn));
	return rc;
}

int wal_slot_drop(const char *datadir, const char *name)
{
	char dir[PATH_MAX], path[PATH_MAX + 80];
	int rc = slot_dir(datadir, dir, sizeof(dir));
	if (rc != WALRUS_OK)
		return rc;
	spin_lock(&wal_sh->rslot_lock);
	wal_rslot *s = slot_find(name == NULL ? "" : name);
	uint32_t pid = s == NULL ? 0 : atomic_load(&s->active_pid);
	if (s != NULL && pid == 0)
		atomic_store(&s->in_use, 0);
	spin_unlock(&wal_sh->rslot_lock);
	if (s == NULL)
		return wr_error(WALRUS_ENOTFOUND, "replication slot \"%.80s\" does not exist",
		                name ? name : "");
	if (pid != 0)
		return wr_error(WALRUS_EBUSY,
		                "replication slot \"%s\" is in use by the WAL sender of process %u",
		                name, pid);
	wr_snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (fdc_unlink(path) != WALRUS_OK && errno != ENOENT)
		return wr_error(WALRUS_EIO, "could not remove \"%s\": %s", path, walrus_errmsg());
	if (fdc_fsync_path(dir) != WALRUS_OK)
		wr_panic("could not fsync \"%s\": %s", dir, walrus_errmsg());
	wr_log(WR_LOG, "replication slot \"%s\" dropped", name);
	return WALRUS_OK;
}

/* ---------------------------------------------------------------- senders */

int wal_slot_acquire(const char *name, uint32_t pid, wr_lsn *restart)
{
	spin_lock(&wal_sh->rslot_lock);
	wal_rslot *s = slot_find(name);
	uint32_t other = 0;
	bool inval = s != NULL && atomic_load(&s->invalidated);
	if (s != NULL && !inval && !atomic_compare_exchange_strong(&s->active_pid, &other, pid))
		s = NULL;
	if (s != NULL)
		*restart = atomic_load(&s->restart_lsn);
	spin_unlock(&wal_sh->rslot_lock);
	if (other != 0)
		return wr_error(WALRUS_EBUSY, "replication slot \"%s\" is in use by process %u",
		                name, other);
	if (s == NULL)
		return wr_error(WALRUS_ENOTFOUND, "replication slot \"%s\" does not exist", name);
	if (inval)
		return wr_error(WALRUS_EINVAL,
		                "replication slot \"%s\" was invalidated: it fell more than "
		                "max_slot_wal_keep_size behind; drop it and make the standby anew",
		                name);
	return WALRUS_OK;
}

void wal_slot_release(const char *name, uint32_t pid)
{
	spin_lock(&wal_sh->rslot_lock);
	wal_rslot *s = slot_find(name);
	uint32_t mine = pid;
	if (s != NULL)
		(void)atomic_compare_exchange_strong(&s->active_pid, &mine, 0);
	spin_unlock(&wal_sh->rslot_lock);
}

void wal_slots_release_pid(uint32_t pid)
{
	for (int i = 0; i < WAL_MAX_RSLOTS; i++) {
		uint32_t mine = pid;
		(void)atomic_compare_exchange_strong(&wal_sh->rslots[i].active_pid, &mine, 0);
	}
}

void wal_slot_advance(const char *name, wr_lsn lsn)
{
	spin_lock(&wal_sh->rslot_lock);
	wal_rslot *s = slot_find(name);
	if (s != NULL && lsn > atomic_load(&s->restart_lsn)) {
		atomic_store(&s->restart_lsn, lsn);
		atomic_store(&s->dirty, 1);
	}
	spin_unlock(&wal_sh->rslot_lock);
}

/* ---------------------------------------------------------------- checkpoints */

/* A copy of slot @i under the lock: false when free. */
static bool slot_copy(int i, wal_slot_info *out)
{
	wal_rslot *s = &wal_sh->rslots[i];
	spin_lock(&wal_sh->rslot_lock);
	bool used = atomic_load(&s->in_use);
	if (used) {
		memcpy(out->name, s->name, sizeof(out->name));
		out->restart_lsn = atomic_load(&s->restart_lsn);
		out->active_pid = atomic_load(&s->active_pid);
		out->invalidated = atomic_load(&s->invalidated);
	}
	spin_unlock(&wal_sh->rslot_lock);
	return used;
}

int wal_slots_save(const char *datadir)
{
	for (int i = 0; i < WAL_MAX_RSLOTS; i++) {
		wal_slot_info c;
		if (!atomic_exchange(&wal_sh->rslots[i].dirty, 0) || !slot_copy(i, &c))
			continue;
		int rc = slot_write(datadir, c.name, c.restart_lsn, c.invalidated);
		if (rc != WALRUS_OK) {
			atomic_store(&wal_sh->rslots[i].dirty, 1);
			return rc;
		}
	}
	return WALRUS_OK;
}

wr_lsn wal_slots_keep(const char *datadir, wr_lsn redo, int64_t max_keep)
{
	wr_lsn keep = 0;
	for (int i = 0; i < WAL_MAX_RSLOTS; i++) {
		wal_slot_info c;
		if (!slot_copy(i, &c) || c.invalidated)
			continue;
		if (max_keep > 0 && redo > c.restart_lsn &&
		    redo - c.restart_lsn > (uint64_t)max_keep) {
			wr_log(WR_WARNING,
			       "replication slot \"%s\" invalidated: it needs WAL from " WAL_LSN_FMT
			       ", more than max_slot_wal_keep_size (%lld bytes) behind the redo "
			       "point " WAL_LSN_FMT,
			       c.name, WAL_LSN_ARGS(c.restart_lsn), (long long)max_keep,
			       WAL_LSN_ARGS(redo));
			atomic_store(&wal_sh->rslots[i].invalidated, 1);
			if (slot_write(datadir, c.name, c.restart_lsn, true) != WALRUS_OK)
				wr_log(WR_WARNING, "could not record the invalidation: %s",
				       walrus_errmsg());
			continue;
		}
		if (keep == 0 || c.restart_lsn < keep)
			keep = c.restart_lsn;
	}
	return keep;
}

int wal_slots_list(wal_slot_info *out, int max)
{
	int n = 0;
	for (int i = 0; i < WAL_MAX_RSLOTS && n < max; i++)
		if (slot_copy(i, &out[n]))
			n++;
	return n;
}
