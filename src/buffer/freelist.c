/*
 * freelist.c - buffer header locks, pins, and the clock sweep.
 *
 * The header lock is a bit of the state word, so pinning an unlocked buffer
 * is one CAS and never sleeps.  The clock hand is a shared 64-bit counter
 * advanced by fetch_add: processes sweeping at once take different buffers
 * without a lock.
 */
#include "buffer/buf_int.h"

uint32_t buf_hdr_lock(buf_desc *d)
{
	ipc_spin sp = IPC_SPIN_INIT("a buffer header lock");
	for (;;) {
		uint32_t old = atomic_fetch_or(&d->state, BM_LOCKED);
		if (!(old & BM_LOCKED))
			return old | BM_LOCKED;
		while (atomic_load_explicit(&d->state, memory_order_relaxed) & BM_LOCKED)
			ipc_spin_delay(&sp);
	}
}

void buf_hdr_unlock(buf_desc *d, uint32_t state)
{
	atomic_store_explicit(&d->state, state & ~BM_LOCKED, memory_order_release);
}

static void buf_check_num(int buf)
{
	if (buf < 1 || (uint32_t)buf > buf_l.r->nbuffers)
		wr_panic("invalid buffer number %d (pool has %u)", buf, buf_l.r->nbuffers);
}

bool buf_pin(int buf)
{
	buf_check_num(buf);
	buf_desc *d = buf_get_desc(buf);
	int32_t *mine = &buf_me->pins[buf - 1];
	if (*mine > 0) {
		/* Already pinned by us: the shared count holds one pin per process. */
		(*mine)++;
		return atomic_load(&d->state) & BM_VALID;
	}
	uint32_t old = atomic_load(&d->state), want;
	ipc_spin sp = IPC_SPIN_INIT("a buffer header lock (to pin)");
	for (;;) {
		if (old & BM_LOCKED) {
			ipc_spin_delay(&sp);
			old = atomic_load(&d->state);
			continue;
		}
		want = old + BUF_REFCOUNT_ONE;
		if (BUF_USAGE(old) < BUF_MAX_USAGE)
			want += BUF_USAGE_ONE;
		if (atomic_compare_exchange_weak(&d->state, &old, want))
			break;
	}
	*mine = 1;
	return want & BM_VALID;
}

void buf_pin_locked(int buf, uint32_t *state)
{
	int32_t *mine = &buf_me->pins[buf - 1];
	if ((*mine)++ == 0)
		*state += BUF_REFCOUNT_ONE;
}

void buf_unpin(int buf)
{
	buf_check_num(buf);
	int32_t *mine = &buf_me->pins[buf - 1];
	if (*mine <= 0)
		wr_panic("buffer %d released but not pinned by this process", buf);
	if (--*mine > 0)
		return;
	buf_desc *d = buf_get_desc(buf);
	uint32_t old = atomic_load(&d->state);
	ipc_spin sp = IPC_SPIN_INIT("a buffer header lock (to unpin)");
	for (;;) {
		if (old & BM_LOCKED) {
			ipc_spin_delay(&sp);
			old = atomic_load(&d->state);
			continue;
		}
		if (BUF_REFCOUNT(old) == 0)
			wr_panic("buffer %d: shared refcount underflow", buf);
		if (atomic_compare_exchange_weak(&d->state, &old, old - BUF_REFCOUNT_ONE))
			return;
	}
}

/*
 * One step of the sweep on buffer @buf.  Returns true (buffer pinned, header
 * unlocked, *state its state) when it is a victim; else decrements its usage
 * count and says in *touched whether it did (which restarts the try budget).
 */
static bool buf_sweep_one(int buf, uint32_t *state, bool *touched)
{
	buf_desc *d = buf_get_desc(buf);
	*touched = false;
	if (buf_me->pins[buf - 1] > 0)
		return false;
	uint32_t s = atomic_load(&d->state);
	if (BUF_REFCOUNT(s) != 0)
		return false; /* unlocked peek: pinned buffers are not candidates */
	s = buf_hdr_lock(d);
	if (BUF_REFCOUNT(s) == 0 && BUF_USAGE(s) == 0) {
		s += BUF_REFCOUNT_ONE;
		buf_hdr_unlock(d, s);
		buf_me->pins[buf - 1] = 1;
		*state = s;
		return true;
	}
	if (BUF_REFCOUNT(s) == 0) {
		s -= BUF_USAGE_ONE;
		*touched = true;
	}
	buf_hdr_unlock(d, s);
	return false;
}

int buf_clock_victim(int *out, uint32_t *state)
{
	uint32_t n = buf_l.r->nbuffers;
	/* As PostgreSQL: give up after a whole lap that found every buffer
	 * pinned.  Pins are usually short, so wait a little and lap again
	 * before reporting the pool exhausted. */
	for (int lap = 0; lap < 200; lap++) {
		uint32_t tries = n;
		while (tries > 0) {
			uint64_t hand = atomic_fetch_add(&buf_l.r->clock_hand, 1);
			int buf = (int)(hand % n) + 1;
			bool touched;
			if (buf_sweep_one(buf, state, &touched)) {
				atomic_fetch_add(&buf_l.r->stats.allocs, 1);
				*out = buf;
				return WALRUS_OK;
			}
			tries = touched ? n : tries - 1;
		}
		wr_sleep_us(100);
	}
	return wr_error(WALRUS_EBUSY, "no unpinned buffers available (shared_buffers = %u pages)",
	                n);
}
