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
 *   bits 0..29  RW_READERS  number of processes holding it shared
 *   bit 30      RW_WRITER   a process holds it exclusively
 *   bit 31      RW_WAITERS  someone may be asleep on the word
 *
 * RW_WRITER and a non-zero reader count are never set together.  A reader
 * enters by CAS (count + 1) when RW_WRITER is clear and no writer waits
 * (writers_waiting == 0); a writer enters by CAS when the count is 0 and
 * RW_WRITER is clear.  Both keep RW_WAITERS as they found it.  A writer that
 * has to wait bumps writers_waiting first, which turns new readers away, so
 * a stream of readers cannot starve it.
 *
 * Why no wakeup is lost: a process sleeps only through FUTEX_WAIT on a
 * value that has RW_WAITERS set (setting the bit itself by CAS when it is
 * clear); the kernel compares the word and queues the sleeper atomically,
 * so any change after the waiter's last look makes FUTEX_WAIT return at once.
 * A release that could let a sleeper in (the writer leaving, the last
 * reader leaving) clears RW_WAITERS and wakes *all* sleepers; those still
 * blocked set the bit again before sleeping.  writers_waiting lives outside
 * the word, so a reader turned away only by it re-reads it *after* its
 * acquiring CAS (or load) of the word: a writer decrements writers_waiting
 * before its releasing exchange, so either the reader sees the decrement and
 * does not sleep, or that writer's release comes later in the word's
 * modification order, finds RW_WAITERS (writers keep the bit), and wakes it.
 *
 * Waking all is a herd, but these locks guard short sections and it keeps
 * the protocol simple enough to check by reading.
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

#define RW_READERS 0x3fffffffu
#define RW_WRITER  0x40000000u
#define RW_WAITERS 0x80000000u

#define SPIN_PAUSE_ROUNDS 100 /* rounds of pause before yielding the CPU */
#define SPIN_YIELD_ROUNDS 10  /* rounds of sched_yield before sleeping */
#define SPIN_SLEEP_MIN_NS 10000
#define SPIN_SLEEP_MAX_NS 100000
#define RW_SPIN_ROUNDS    50 /* brief spin before sleeping in the kernel */

/* ---------------------------------------------------------------- futex */

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
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

static bool excl_blocked(uint32_t s)
{
	return (s & (RW_WRITER | RW_READERS)) != 0;
}

#define RW_CRASH_CHECK_NS (100ULL * 1000 * 1000)

/*
 * Sets RW_WAITERS on the word last seen as @s and sleeps while it holds that
 * value.  Returns without sleeping when the word moved on meanwhile.  A
 * reader re-checks writers_waiting after its acquire on the word: a writer
 * that released before that point has decremented it (and is visible), and
 * one that releases later finds RW_WAITERS set and wakes us.
 */
static void rw_sleep(wr_rwlock *l, uint32_t s, bool reader)
{
	if (s & RW_WAITERS) {
		if (atomic_load_explicit(&l->state, memory_order_acquire) != s)
			return;
	} else {
		if (!atomic_compare_exchange_strong_explicit(
		        &l->state, &s, s | RW_WAITERS, memory_order_acquire, memory_order_relaxed))
			return;
		s |= RW_WAITERS;
	}
	if (reader && !shared_blocked(l, s))
		return;
	/* Wake now and then: the holder may have died with the lock, and then
	 * only the instance's crashed state tells us to stop waiting. */
	(void)ipc_wait_u32(&l->state, s, RW_CRASH_CHECK_NS);
	shm_header *h = shm_hdr();
	if (h != NULL && atomic_load(&h->state) == SHM_STATE_CRASHED)
		wr_panic("instance crashed while this process waited for a lock");
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
			rw_sleep(l, s, true);
	}
}

static uint32_t rw_wait_excl(wr_rwlock *l)
{
	uint32_t round = 0;
	for (;;) {
		uint32_t s = atomic_load_explicit(&l->state, memory_order_relaxed);
		if (!excl_blocked(s))
			return s;
		if (round < RW_SPIN_ROUNDS)
			backoff(&round);
		else
			rw_sleep(l, s, false);
	}
}

static bool rw_try_shared_at(wr_rwlock *l, uint32_t s)
{
	return atomic_compare_exchange_weak_explicit(&l->state, &s, s + 1, memory_order_acquire,
	                                             memory_order_relaxed);
}

static bool rw_try_excl_at(wr_rwlock *l, uint32_t s)
{
	return atomic_compare_exchange_weak_explicit(&l->state, &s, s | RW_WRITER,
	                                             memory_order_acquire, memory_order_relaxed);
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

void rw_lock_excl(wr_rwlock *l)
{
	if (rw_trylock_excl(l))
		return;
	uint64_t start = wr_now_ns();
	atomic_fetch_add_explicit(&l->writers_waiting, 1, memory_order_relaxed);
	while (!rw_try_excl_at(l, rw_wait_excl(l)))
		;
	atomic_fetch_sub_explicit(&l->writers_waiting, 1, memory_order_relaxed);
	rw_count(l);
	stats_contended(&l->stats, start);
}

static void rw_unlock_excl(wr_rwlock *l)
{
	uint32_t old = atomic_exchange_explicit(&l->state, 0, memory_order_release);
	if (old & RW_WAITERS)
		ipc_wake_all(&l->state);
}

static void rw_unlock_shared(wr_rwlock *l)
{
	uint32_t s = atomic_load_explicit(&l->state, memory_order_relaxed);
	uint32_t next;
	do {
		next = s - 1;
		if ((next & RW_READERS) == 0)
			next &= ~RW_WAITERS; /* last reader out wakes the sleepers */
	} while (!atomic_compare_exchange_weak_explicit(&l->state, &s, next, memory_order_release,
	                                                memory_order_relaxed));
	if ((s & RW_WAITERS) && !(next & RW_WAITERS))
		ipc_wake_all(&l->state);
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
