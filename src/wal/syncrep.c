/*
 * syncrep.c - durable commits that wait for a synchronous standby
 * (synchronous_standby): the commit's WAL is flushed here, then the
 * standby's WAL sender must report it flushed (or replayed) there.
 *
 * The sender publishes the standby's position in sync_lsn and wakes the
 * sleepers with one futex call per report (none when nobody sleeps).  The
 * sleepers look at the instance's state every 100 ms: a stop, a crash, or
 * a supervisor that died (nobody would ever mark the state again: the
 * process's liveness check, wal_set_alive_check) ends their wait (the WAL
 * is durable here either way; only the standby's confirmation is missing,
 * and the caller says so).  A wait longer than SYNC_WARN_NS says so in the
 * log, once per commit, as PostgreSQL's "waiting for ... to be replicated".
 *
 * Interface: wal.h ("a synchronous standby").
 */
#include "wal/wal_int.h"

#define SYNC_POLL_NS (100ULL * 1000000ULL)
#define SYNC_WARN_NS (5ULL * 1000000000ULL)

static bool (*sync_alive)(void); /* is the instance's supervisor still there? */

void wal_set_alive_check(bool (*fn)(void))
{
	sync_alive = fn;
}

bool wal_supervisor_gone(void)
{
	return sync_alive != NULL && !sync_alive();
}

void wal_sync_standby_set(const char *name)
{
	wr_snprintf(wal_sh->sync_name, sizeof(wal_sh->sync_name), "%s", name != NULL ? name : "");
	atomic_store(&wal_sh->sync_wanted, name != NULL && name[0] != '\0' ? 1u : 0u);
}

bool wal_sync_standby_wanted(void)
{
	return wal_sh != NULL && atomic_load(&wal_sh->sync_wanted) != 0;
}

void wal_sync_standby_confirm(wr_lsn lsn)
{
	wr_lsn cur = atomic_load(&wal_sh->sync_lsn);
	while (cur < lsn && !atomic_compare_exchange_weak(&wal_sh->sync_lsn, &cur, lsn))
		;
	if (cur >= lsn)
		return;
	atomic_fetch_add(&wal_sh->sync_seq, 1);
	if (atomic_load(&wal_sh->sync_sleepers) != 0)
		ipc_wake_all(&wal_sh->sync_seq);
}

wr_lsn wal_sync_standby_lsn(void)
{
	return atomic_load(&wal_sh->sync_lsn);
}

uint32_t wal_sync_standby_waiters(void)
{
	return atomic_load(&wal_sh->sync_sleepers);
}

int wal_commit_durable(wr_lsn lsn)
{
	wal_flush_to(lsn);
	if (!wal_sync_standby_wanted())
		return WALRUS_OK;
	uint64_t since = wr_now_ns();
	bool warned = false;
	while (atomic_load(&wal_sh->sync_lsn) < lsn) {
		uint32_t seen = atomic_load(&wal_sh->sync_seq);
		uint32_t st = atomic_load(&shm_hdr()->state);
		if (sync_alive != NULL && !sync_alive())
			return wr_error(
			    WALRUS_ERESTART,
			    "the instance's supervisor exited while the commit at " WAL_LSN_FMT
			    " waited for the synchronous standby: it is durable here, not "
			    "confirmed there; close and reopen the database",
			    WAL_LSN_ARGS(lsn));
		if (!warned && wr_now_ns() - since > SYNC_WARN_NS) {
			warned = true;
			wr_log(
			    WR_WARNING,
			    "a durable commit has waited %.0f s for synchronous standby \"%s\" to "
			    "confirm " WAL_LSN_FMT " (it has confirmed " WAL_LSN_FMT "); "
			    "is it connected? (walrus stats: replication.senders)",
			    (double)(wr_now_ns() - since) / 1e9, wal_sh->sync_name,
			    WAL_LSN_ARGS(lsn), WAL_LSN_ARGS(atomic_load(&wal_sh->sync_lsn)));
		}
		if (st == SHM_STATE_CRASHED)
			return wr_error(WALRUS_ERESTART,
			                "the instance crashed while the commit at " WAL_LSN_FMT
			                " waited for the synchronous standby: it is durable here, "
			                "not confirmed there",
			                WAL_LSN_ARGS(lsn));
		if (st == SHM_STATE_STOPPING || st == SHM_STATE_SHUTDOWN)
			return wr_error(WALRUS_ESHUTDOWN,
			                "the instance is stopping: the commit at " WAL_LSN_FMT
			                " is durable here but was not confirmed by the synchronous "
			                "standby",
			                WAL_LSN_ARGS(lsn));
		atomic_fetch_add(&wal_sh->sync_sleepers, 1);
		if (atomic_load(&wal_sh->sync_lsn) < lsn)
			ipc_wait_u32(&wal_sh->sync_seq, seen, SYNC_POLL_NS);
		atomic_fetch_sub(&wal_sh->sync_sleepers, 1);
	}
	return WALRUS_OK;
}
