/*
 * lock.c - cross-process waits and locks on words in shared memory: futex
 * wrappers, a spinlock, and a reader/writer lock.
 *
 * Interface: ipc_wait_u32, ipc_wake_all, ipc_wake_one; spin_*; rw_* (ipc.h).
 *
 * Futexes are the shared (not FUTEX_PRIVATE) kind: the kernel keys them by
 * the page of the memfd, so processes that map the segment at different
 * addresses still meet on the same wait queue.
 *
 * Spinlock.  Test-and-test-and-set: waiters spin on a plain load, which
 * stays in their cache, and only try the exchange when the word reads free.
 * Backoff goes from pause instructions to sched_yield() to short sleeps: on
 * a 2-CPU machine the holder may have been preempted, and spinning then only
 * keeps it from running.  The clock is read only on the contended path.
 *
 * Reader/writer lock: the state word protocol.
 *
 *   bits 0..26  RW_READERS    number of processes holding it shared
 *   bit 27      RW_RSLEEPERS  a reader may be asleep on the word
 *   bit 28      RW_HEIR       a writer that has waited long is next
 *   bit 29      RW_GRANTED    handed to the heir, which has not taken it yet
 *   bit 30      RW_WRITER     a process holds it exclusively (or it is granted)
 *   bit 31      RW_WSLEEPERS  a writer may be asleep on the word
 *
 * RW_WRITER and a non-zero reader count are never set together.  A reader
 * enters by CAS (count + 1) when RW_WRITER is clear and no writer waits
 * (writers_waiting == 0); a writer enters by CAS when the count is 0 and
 * RW_WRITER and RW_HEIR are clear.  Both keep the other bits as they found
 * them.  A writer that has to wait bumps writers_waiting first, which turns
 * new readers away, so a stream of readers cannot starve it.
 *
 * Why no wakeup is lost: a process sleeps only through FUTEX_WAIT on a
 * value that has its sleeper bit set (setting the bit itself by CAS when it
 * is clear); the kernel compares the word and queues the sleeper
 * atomically, so any change after the waiter's last look makes FUTEX_WAIT
 * return at once.  Sleepers tag themselves (FUTEX_WAIT_BITSET) as readers,
 * writers or the heir, and a release wakes only whom it concerns:
 *
 * - A release that frees the lock (the writer leaving, the last reader
 *   leaving) clears RW_WSLEEPERS and wakes *one* writer.  With many
 *   processes on few CPUs, waking them all costs more than the section they
 *   wait for: all but one go back to sleep, and the runnable ones preempt
 *   the next holder.  The woken writer enters with RW_WSLEEPERS set again,
 *   since others may still be asleep, so its own release wakes the next one.
 * - RW_RSLEEPERS stays set, and the readers asleep, while a writer waits
 *   (they could not enter anyway); the release of the last waiting writer
 *   clears it and wakes every reader.  writers_waiting lives outside the
 *   word, so a reader turned away only by it re-reads it *after* its
 *   acquiring CAS (or load) of the word: a writer decrements
 *   writers_waiting before its releasing CAS, so either the reader sees the
 *   decrement and does not sleep, or that writer's release comes later in
 *   the word's modification order and finds RW_RSLEEPERS (writers keep the
 *   bit).
 *
 * Fairness: a free lock goes to whoever takes it first.  That keeps it busy
 * while a woken writer is still on its way to a CPU, but one writer could
 * then lose to the others again and again.  A writer that has waited
 * RW_HEIR_NS takes the heir's place (RW_HEIR by CAS, one heir at a time):
 * the next release does not free the lock but hands it over (RW_WRITER
 * kept, RW_GRANTED set, the sleeper bits kept) and wakes the heir alone,
 * which takes it by clearing RW_GRANTED.  No one else enters a granted
 * lock, and a new heir may claim the place only once the grant is taken.
 * A process that dies as the heir leaves the lock held, as one that dies
 * holding it does.
 *
 * Not supported: taking the lock shared twice in one process (a writer
 * waiting in between would deadlock), or upgrading shared to exclusive.
 */
#include "ipc/ipc.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define RW_READERS   0x07ffffffu
#define RW_RSLEEPERS 0x08000000u
#define RW_HEIR      0x10000000u
#define RW_GRANTED   0x20000000u
#define RW_WRITER    0x40000000u
#define RW_WSLEEPERS 0x80000000u

#define SPIN_PAUSE_ROUNDS 100 /* rounds of pause before yielding the CPU */
#define SPIN_YIELD_ROUNDS 10  /* rounds of sched_yield before sleeping */
#define SPIN_SLEEP_MIN_NS 10000
#define SPIN_SLEEP_MAX_NS 100000
#define RW_SPIN_ROUNDS    50                    /* brief spin before sleeping in the kernel */
#define RW_HEIR_NS        (10ULL * 1000 * 1000) /* a writer waiting longer is handed the lock */

/* ---------------------------------------------------------------- futex */

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

static long futex_bitset(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts,
                         uint32_t bits)
{
	return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, bits);
}

int ipc_wait_u32(_Atomic uint32_t *addr, uint32_t expected, uint64_t timeout_ns)
{
	struct timespec ts, *tsp = NULL;
	if (timeout_ns != 0) {
		ts.tv_sec = (time_t)(timeout_ns / 1000000000u);
		ts.tv_nsec = (long)(timeout_ns % 1000000000u);
		tsp = &ts;
	}
	if (futex(addr, FUTEX_WAIT, expected, tsp) == 0)
		return 0;
	/* EFAULT/EINVAL would be a bug (word outside the mapping, misaligned);
	 * report the errno and let the caller re-check like any other wakeup. */
	return errno;
}

void ipc_wake_all(_Atomic uint32_t *addr)
{
	(void)futex(addr, FUTEX_WAKE, INT_MAX, NULL);
}

void ipc_wake_one(_Atomic uint32_t *addr)
{
	(void)futex(addr, FUTEX_WAKE, 1, NULL);
}

/* ---------------------------------------------------------------- backoff */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	atomic_signal_fence(memory_order_seq_cst);
#endif
}

static void sleep_ns(long ns)
{
	struct timespec ts = {.tv_sec = 0, .tv_nsec = ns};
	/* An interrupted backoff sleep is just a shorter one. */
	(void)nanosleep(&ts, NULL);
}

/* One step of waiting for a busy word; @round counts the steps taken. */
static void backoff(uint32_t *round)
{
	uint32_t r = (*round)++;
	if (r < SPIN_PAUSE_ROUNDS) {
		uint32_t n = 1u << WR_MIN(r, 4u);
		for (uint32_t i = 0; i < n; i++)
			cpu_relax();
	} else if (r < SPIN_PAUSE_ROUNDS + SPIN_YIELD_ROUNDS) {
		sched_yield();
	} else {
		uint32_t k = WR_MIN(r - SPIN_PAUSE_ROUNDS - SPIN_YIELD_ROUNDS, 4u);
		sleep_ns(WR_MIN((long)SPIN_SLEEP_MIN_NS << k, (long)SPIN_SLEEP_MAX_NS));
	}
}

/* ---------------------------------------------------------------- spin waits */

static _Atomic uint64_t stuck_ns = IPC_STUCK_NS;
static _Atomic uint64_t spin_delays;

uint64_t ipc_spin_delays(void)
{
	return atomic_load(&spin_delays);
}

void ipc_set_stuck_ns(uint64_t ns)
{
	atomic_store(&stuck_ns, ns != 0 ? ns : IPC_STUCK_NS);
}

/*
 * The pause phase stays free of loads outside the word waited on: most
 * waits end there.  Later steps cost a sched_yield or a sleep anyway, so a
 * look at the instance state and the clock adds nothing that shows.
 */
void ipc_spin_delay(ipc_spin *s)
{
	uint32_t r = s->round;
	backoff(&s->round);
	if (r < SPIN_PAUSE_ROUNDS)
		return;
	shm_header *h = shm_hdr();
	uint64_t now = wr_now_ns();
	if (s->start_ns == 0) {
		s->start_ns = now;
		atomic_fetch_add_explicit(&spin_delays, 1, memory_order_relaxed);
	}
	if (h != NULL && atomic_load(&h->state) == SHM_STATE_CRASHED)
		wr_panic("instance crashed while this process waited for %s", s->what);
	if (now - s->start_ns > atomic_load_explicit(&stuck_ns, memory_order_relaxed))
		wr_panic("stuck spinlock detected: waited %.1f s for %s",
		         (double)(now - s->start_ns) / 1e9, s->what);
}

/* ---------------------------------------------------------------- stats */

static void stats_init(wr_lock_stats *s)
{
	atomic_init(&s->acquisitions, 0);
	atomic_init(&s->contended, 0);
	atomic_init(&s->wait_ns, 0);
}

static void stats_contended(wr_lock_stats *s, uint64_t start_ns)
{
	atomic_fetch_add_explicit(&s->contended, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->wait_ns, wr_now_ns() - start_ns, memory_order_relaxed);
}

/* ---------------------------------------------------------------- spinlock */

void spin_init(wr_spinlock *l)
{
	atomic_init(&l->v, 0);
	stats_init(&l->stats);
}

static inline bool spin_try_once(wr_spinlock *l)
{
	return atomic_load_explicit(&l->v, memory_order_relaxed) == 0 &&
	       atomic_exchange_explicit(&l->v, 1, memory_order_acquire) == 0;
}

/* Only the holder updates this counter, so a plain read-modify-write is
 * exact and avoids a locked instruction on the fast path. */
static inline void spin_count(wr_spinlock *l)
{
	uint64_t n = atomic_load_explicit(&l->stats.acquisitions, memory_order_relaxed);
	atomic_store_explicit(&l->stats.acquisitions, n + 1, memory_order_relaxed);
}

static void spin_lock_slow(wr_spinlock *l)
{
	uint64_t start = wr_now_ns();
	ipc_spin sp = IPC_SPIN_INIT("a spinlock");
	do {
		while (atomic_load_explicit(&l->v, memory_order_relaxed) != 0)
			ipc_spin_delay(&sp);
	} while (atomic_exchange_explicit(&l->v, 1, memory_order_acquire) != 0);
	stats_contended(&l->stats, start);
}

void spin_lock(wr_spinlock *l)
{
	if (WR_UNLIKELY(!spin_try_once(l)))
		spin_lock_slow(l);
	spin_count(l);
}

bool spin_trylock(wr_spinlock *l)
{
	if (!spin_try_once(l))
		return false;
	spin_count(l);
	return true;
}

void spin_unlock(wr_spinlock *l)
{
	atomic_store_explicit(&l->v, 0, memory_order_release);
}

/* ---------------------------------------------------------------- rwlock */

void rw_init(wr_rwlock *l)
{
	atomic_init(&l->state, 0);
	atomic_init(&l->writers_waiting, 0);
	stats_init(&l->stats);
}

static void rw_count(wr_rwlock *l)
{
	atomic_fetch_add_explicit(&l->stats.acquisitions, 1, memory_order_relaxed);
}

static bool shared_blocked(wr_rwlock *l, uint32_t s)
{
	return (s & RW_WRITER) != 0 ||
	       atomic_load_explicit(&l->writers_waiting, memory_order_relaxed) != 0;
}

/* For every writer but the heir, which waits for RW_GRANTED instead. */
static bool excl_blocked(uint32_t s)
{
	return (s & (RW_WRITER | RW_READERS | RW_HEIR)) != 0;
}

#define RW_CRASH_CHECK_NS (100ULL * 1000 * 1000)

/* Sleepers tag themselves (FUTEX_WAIT_BITSET), so that a release wakes the
 * readers, one writer, or the heir, and no one else. */
#define RW_WAKE_READER 1u
#define RW_WAKE_WRITER 2u
#define RW_WAKE_HEIR   4u

static _Atomic uint64_t heir_ns = RW_HEIR_NS;

void ipc_set_heir_ns(uint64_t ns)
{
	atomic_store(&heir_ns, ns != 0 ? ns : RW_HEIR_NS);
}

/*
 * Sets @bit (RW_RSLEEPERS or RW_WSLEEPERS) on the word last seen as @s and
 * sleeps while it holds that value, tagged @wake.  True when a release woke
 * us; false when the word had moved on (no sleep), or on a timeout.  A
 * reader re-checks writers_waiting after its acquire on the word: a writer
 * that released before that point has decremented it (and is visible), and
 * one that releases later finds RW_RSLEEPERS set and wakes us.
 */
static bool rw_sleep(wr_rwlock *l, uint32_t s, uint32_t bit, uint32_t wake)
{
	if (s & bit) {
		if (atomic_load_explicit(&l->state, memory_order_acquire) != s)
			return false;
	} else {
		if (!atomic_compare_exchange_strong_explicit(
		        &l->state, &s, s | bit, memory_order_acquire, memory_order_relaxed))
			return false;
		s |= bit;
	}
	if (wake == RW_WAKE_READER && !shared_blocked(l, s))
		return false;
	/* Wake now and then: the holder may have died with the lock, and then
	 * only the instance's crashed state tells us to stop waiting. */
	uint64_t until_ns = wr_now_ns() + RW_CRASH_CHECK_NS;
	struct timespec until = {.tv_sec = (time_t)(until_ns / 1000000000u),
	                         .tv_nsec = (long)(until_ns % 1000000000u)};
	bool woken = futex_bitset(&l->state, FUTEX_WAIT_BITSET, s, &until, wake) == 0;
	shm_header *h = shm_hdr();
	if (h != NULL && atomic_load(&h->state) == SHM_STATE_CRASHED)
		wr_panic("instance crashed while this process waited for a lock");
	return woken;
}

/* Waits until a reader may try to enter: spins briefly, then sleeps in the kernel. */
static uint32_t rw_wait_shared(wr_rwlock *l)
{
	uint32_t round = 0;
	for (;;) {
		uint32_t s = atomic_load_explicit(&l->state, memory_order_relaxed);
		if (!shared_blocked(l, s))
			return s;
		if (round < RW_SPIN_ROUNDS)
			backoff(&round);
		else
			(void)rw_sleep(l, s, RW_RSLEEPERS, RW_WAKE_READER);
	}
}

static bool rw_try_shared_at(wr_rwlock *l, uint32_t s)
{
	return atomic_compare_exchange_weak_explicit(&l->state, &s, s + 1, memory_order_acquire,
	                                             memory_order_relaxed);
}

bool rw_trylock_shared(wr_rwlock *l)
{
	for (;;) {
		uint32_t s = atomic_load_explicit(&l->state, memory_order_relaxed);
		if (shared_blocked(l, s))
			return false;
		if (rw_try_shared_at(l, s)) {
			rw_count(l);
			return true;
		}
	}
}

bool rw_trylock_excl(wr_rwlock *l)
{
	uint32_t s = atomic_load_explicit(&l->state, memory_order_relaxed);
	while (!excl_blocked(s)) {
		if (atomic_compare_exchange_weak_explicit(
		        &l->state, &s, s | RW_WRITER, memory_order_acquire, memory_order_relaxed)) {
			rw_count(l);
			return true;
		}
	}
	return false;
}

void rw_lock_shared(wr_rwlock *l)
{
	if (rw_trylock_shared(l))
		return;
	uint64_t start = wr_now_ns();
	while (!rw_try_shared_at(l, rw_wait_shared(l)))
		;
	rw_count(l);
	stats_contended(&l->stats, start);
}

/* A waiting writer: when it started, its spin, whether a release woke it, whether it is the heir.
 */
typedef struct excl_wait {
	uint64_t start_ns;
	uint32_t round;
	bool woken;
	bool heir;
} excl_wait;

static bool excl_must_wait(const excl_wait *w, uint32_t s)
{
	return w->heir ? !(s & RW_GRANTED) : excl_blocked(s);
}

/*
 * One step of a writer that must wait on the word @s: spin; past the spin,
 * take the heir's place once it has waited heir_ns and the place is free
 * (no heir, and no grant to the last one pending), or sleep.
 */
static void excl_wait_step(wr_rwlock *l, excl_wait *w, uint32_t s)
{
	if (w->round < RW_SPIN_ROUNDS) {
		backoff(&w->round);
		return;
	}
	if (!w->heir && !(s & (RW_HEIR | RW_GRANTED)) &&
	    wr_now_ns() - w->start_ns >= atomic_load_explicit(&heir_ns, memory_order_relaxed)) {
		w->heir = atomic_compare_exchange_strong_explicit(
		    &l->state, &s, s | RW_HEIR, memory_order_relaxed, memory_order_relaxed);
		return;
	}
	if (rw_sleep(l, s, RW_WSLEEPERS, w->heir ? RW_WAKE_HEIR : RW_WAKE_WRITER))
		w->woken = true;
}

/*
 * One attempt to enter from the word @s.  The heir takes the lock a release
 * granted it; others take a free one.  A writer that a release woke sets
 * RW_WSLEEPERS as it enters: that release cleared the bit, and other
 * writers may still be asleep.
 */
static bool excl_try(wr_rwlock *l, const excl_wait *w, uint32_t s)
{
	uint32_t next = w->heir ? s & ~RW_GRANTED : s | RW_WRITER;
	if (w->woken)
		next |= RW_WSLEEPERS;
	return atomic_compare_exchange_weak_explicit(&l->state, &s, next, memory_order_acquire,
	                                             memory_order_relaxed);
}

void rw_lock_excl(wr_rwlock *l)
{
	if (rw_trylock_excl(l))
		return;
	excl_wait w = {.start_ns = wr_now_ns()};
	atomic_fetch_add_explicit(&l->writers_waiting, 1, memory_order_relaxed);
	for (;;) {
		uint32_t s = atomic_load_explicit(&l->state, memory_order_relaxed);
		if (excl_must_wait(&w, s))
			excl_wait_step(l, &w, s);
		else if (excl_try(l, &w, s))
			break;
	}
	atomic_fetch_sub_explicit(&l->writers_waiting, 1, memory_order_relaxed);
	rw_count(l);
	stats_contended(&l->stats, w.start_ns);
}

/*
 * The word a release leaves, from @s, the last holder's view: handed to the
 * heir if there is one (the sleeper bits kept: the others still sleep);
 * else free, with RW_RSLEEPERS kept while a writer waits (the readers stay
 * blocked; the writer's own release wakes them).
 */
static uint32_t released(wr_rwlock *l, uint32_t s)
{
	if (s & RW_HEIR)
		return (s & (RW_RSLEEPERS | RW_WSLEEPERS)) | RW_WRITER | RW_GRANTED;
	if ((s & RW_RSLEEPERS) &&
	    atomic_load_explicit(&l->writers_waiting, memory_order_relaxed) != 0)
		return RW_RSLEEPERS;
	return 0;
}

/* Wakes whom a release from @old to @next concerns. */
static void rw_wake(wr_rwlock *l, uint32_t old, uint32_t next)
{
	if (next & RW_GRANTED) {
		(void)futex_bitset(&l->state, FUTEX_WAKE_BITSET, 1, NULL, RW_WAKE_HEIR);
		return;
	}
	if (old & RW_WSLEEPERS)
		(void)futex_bitset(&l->state, FUTEX_WAKE_BITSET, 1, NULL, RW_WAKE_WRITER);
	if ((old & RW_RSLEEPERS) && !(next & RW_RSLEEPERS))
		(void)futex_bitset(&l->state, FUTEX_WAKE_BITSET, INT_MAX, NULL, RW_WAKE_READER);
}

static void rw_unlock_excl(wr_rwlock *l)
{
	uint32_t s = atomic_load_explicit(&l->state, memory_order_relaxed);
	uint32_t next;
	do
		next = released(l, s);
	while (!atomic_compare_exchange_weak_explicit(&l->state, &s, next, memory_order_release,
	                                              memory_order_relaxed));
	rw_wake(l, s, next);
}

static void rw_unlock_shared(wr_rwlock *l)
{
	uint32_t s = atomic_load_explicit(&l->state, memory_order_relaxed);
	uint32_t next;
	do
		next = (s & RW_READERS) == 1 ? released(l, s) : s - 1;
	while (!atomic_compare_exchange_weak_explicit(&l->state, &s, next, memory_order_release,
	                                              memory_order_relaxed));
	if ((s & RW_READERS) == 1)
		rw_wake(l, s, next);
}

void rw_unlock(wr_rwlock *l)
{
	if (atomic_load_explicit(&l->state, memory_order_relaxed) & RW_WRITER)
		rw_unlock_excl(l);
	else
		rw_unlock_shared(l);
}

bool rw_held_excl(const wr_rwlock *l)
{
	return (atomic_load_explicit(&l->state, memory_order_relaxed) & RW_WRITER) != 0;
}
