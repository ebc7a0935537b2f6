/*
 * shmem.c - region "repl": the senders' slots and the receiver's state,
 * and the WAL flusher's wake-up of the senders that sleep for WAL.
 */
#include "repl/repl_int.h"

#include <signal.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "ipc/ipc.h"

static repl_state *R;

size_t repl_shmem_size(const wr_options *o)
{
	return sizeof(repl_state) + (size_t)o->max_wal_senders * sizeof(repl_sender_slot);
}

int repl_shmem_init(const wr_options *o)
{
	R = shm_alloc("repl", repl_shmem_size(o));
	if (R == NULL)
		return wr_error(WALRUS_EINTERNAL, "shared memory has no room for region \"repl\"");
	memset(R, 0, repl_shmem_size(o));
	R->nsenders = (uint32_t)o->max_wal_senders;
	return WALRUS_OK;
}

int repl_attach(void)
{
	size_t size;
	R = shm_lookup("repl", &size);
	if (R == NULL)
		return wr_error(WALRUS_EPROTO, "shared memory has no replication region");
	wal_set_flush_hook(repl_wake_senders);
	return WALRUS_OK;
}

static repl_instance instance;

void repl_set_instance(const repl_instance *inst)
{
	instance = *inst;
}

const repl_instance *repl_instance_get(void)
{
	return &instance;
}

repl_state *repl_shared(void)
{
	return R;
}

/*
 * The flusher's side of the wake-up (repl.h): nwaiting is raised by a
 * sender before it looks at the flush LSN for the last time, and the
 * flusher stored the flush LSN before this load (both seq_cst), so either
 * the sender sees the new LSN or we see its count.  Only the sender
 * changes its `waiting` (set before it sleeps, cleared when it wakes), so
 * each flush signals a sleeper at most once.
 */
void repl_wake_senders(void)
{
	if (R == NULL || atomic_load(&R->nwaiting) == 0)
		return;
	for (uint32_t i = 0; i < R->nsenders; i++) {
		repl_sender_slot *s = &R->senders[i];
		uint32_t pid = atomic_load(&s->pid);
		if (pid != 0 && atomic_load(&s->waiting) != 0)
			(void)kill((pid_t)pid, SIGUSR1);
	}
}

static void sender_reset(repl_sender_slot *s)
{
	atomic_store(&s->waiting, 0);
	memset(s->name, 0, sizeof(s->name));
	atomic_store(&s->sent, 0);
	atomic_store(&s->written, 0);
	atomic_store(&s->flushed, 0);
	atomic_store(&s->applied, 0);
	atomic_store(&s->reply_time_us, 0);
	atomic_store(&s->write_lag_us, 0);
	atomic_store(&s->flush_lag_us, 0);
	atomic_store(&s->replay_lag_us, 0);
	atomic_store(&s->wakeups, 0);
	atomic_store(&s->wal_messages, 0);
	atomic_store(&s->inserting, 0);
}

/*
 * The compare-and-swap on `pid` is the claim: two senders that authenticate
 * at once never share a slot.  The slot was reset when it was freed, so
 * nobody reading it between the claim and the reset sees an earlier
 * standby's name with its flush position.
 */
int repl_sender_claim(const char *peer)
{
	uint32_t me = (uint32_t)getpid();
	for (uint32_t i = 0; i < R->nsenders; i++) {
		repl_sender_slot *s = &R->senders[i];
		uint32_t expected = 0;
		if (!atomic_compare_exchange_strong(&s->pid, &expected, me))
			continue;
		sender_reset(s);
		wr_snprintf(s->peer, sizeof(s->peer), "%s", peer);
		atomic_store(&s->state, REPL_SND_START);
		return (int)i;
	}
	return -1;
}

int repl_sender_slot_of(uint32_t pid)
{
	for (uint32_t i = 0; i < R->nsenders; i++)
		if (atomic_load(&R->senders[i].pid) == pid)
			return (int)i;
	return -1;
}

uint32_t repl_senders_claimed(void)
{
	uint32_t n = 0;
	for (uint32_t i = 0; R != NULL && i < R->nsenders; i++)
		n += atomic_load(&R->senders[i].pid) != 0;
	return n;
}

void repl_sender_free(int slot)
{
	repl_sender_slot *s = &R->senders[slot];
	/* A sender killed while it slept is still counted. */
	if (atomic_exchange(&s->waiting, 0) != 0)
		atomic_fetch_sub(&R->nwaiting, 1);
	atomic_store(&s->state, REPL_SND_FREE);
	sender_reset(s);
	atomic_store(&s->pid, 0);
}

bool repl_auth_warn_ok(uint32_t *suppressed)
{
	uint64_t now = wr_wall_us(), start = atomic_load(&R->auth_warn_us);
	*suppressed = 0;
	if (now - start >= 1000000 &&
	    atomic_compare_exchange_strong(&R->auth_warn_us, &start, now)) {
		atomic_store(&R->auth_warn_n, 1);
		*suppressed = atomic_exchange(&R->auth_warn_suppressed, 0);
		return true;
	}
	if (atomic_fetch_add(&R->auth_warn_n, 1) < REPL_AUTH_WARN_PER_S)
		return true;
	atomic_fetch_add(&R->auth_warn_suppressed, 1);
	return false;
}

static uint64_t refusal_hash(const char *who, const char *why)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a */
	for (const char *p = who; *p; p++)
		h = (h ^ (uint8_t)*p) * 1099511628211ULL;
	h = (h ^ 0xff) * 1099511628211ULL;
	for (const char *p = why; *p; p++)
		h = (h ^ (uint8_t)*p) * 1099511628211ULL;
	return h | 1; /* 0: a free entry */
}

/* The entry of @h, or the one least recently used, taken over for it. */
static struct repl_refusal *refusal_entry(uint64_t h)
{
	struct repl_refusal *oldest = &R->refusals[0];
	for (int i = 0; i < REPL_REFUSAL_KINDS; i++) {
		struct repl_refusal *e = &R->refusals[i];
		if (atomic_load(&e->hash) == h)
			return e;
		if (atomic_load(&e->last_us) < atomic_load(&oldest->last_us))
			oldest = e;
	}
	atomic_store(&oldest->last_us, 0);
	atomic_store(&oldest->suppressed, 0);
	atomic_store(&oldest->hash, h);
	return oldest;
}

bool repl_refusal_log_ok(const char *who, const char *why, uint32_t *suppressed)
{
	*suppressed = 0;
	if (R == NULL)
		return true;
	struct repl_refusal *e = refusal_entry(refusal_hash(who, why));
	uint64_t now = wr_wall_us(), last = atomic_load(&e->last_us);
	if ((last == 0 || now - last >= REPL_REFUSAL_LOG_US) &&
	    atomic_compare_exchange_strong(&e->last_us, &last, now)) {
		*suppressed = atomic_exchange(&e->suppressed, 0);
		return true;
	}
	atomic_fetch_add(&e->suppressed, 1);
	return false;
}

void repl_senders_finish(void)
{
	if (R == NULL)
		return;
	atomic_store(&R->finishing, 1);
	for (uint32_t i = 0; i < R->nsenders; i++) {
		uint32_t pid = atomic_load(&R->senders[i].pid);
		if (pid != 0)
			(void)kill((pid_t)pid, SIGUSR1);
	}
}
