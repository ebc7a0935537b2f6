/*
 * test_lock.c - the spinlock and the reader/writer lock, taken by several
 * processes on words in one shared memory segment.
 */
#include "testutil.h"

#include "ipc/ipc.h"

#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define NPROC 4

typedef struct shared {
	wr_spinlock spin;
	wr_rwlock rw;
	uint64_t counter; /* protected by spin */
	uint64_t a, b;    /* protected by rw: always equal outside it */
	_Atomic uint32_t started;
	_Atomic uint32_t stop;
	_Atomic uint32_t acquired;
	uint64_t writes[NPROC];
} shared;

static shared *sh;
static int shm_fd = -1;

static void setup(void)
{
	size_t sz = sizeof(shared);
	ck_assert_int_eq(shm_create(shm_size_for(&sz, 1), WR_HUGE_OFF, &shm_fd), WALRUS_OK);
	sh = shm_alloc("locks", sizeof(shared));
	ck_assert_ptr_nonnull(sh);
	spin_init(&sh->spin);
	rw_init(&sh->rw);
}

static void teardown(void)
{
	shm_detach();
	close(shm_fd);
}

static long iterations(long normal)
{
	return tu_long_mode() ? normal * 10 : normal;
}

static void run_children(int (*fn)(void *), int n)
{
	pid_t pids[NPROC];
	for (long i = 0; i < n; i++)
		pids[i] = tu_fork(fn, (void *)i);
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(tu_wait(pids[i]), 0);
}

/* Lines the workers up so that they really run at the same time. */
static void start_together(void)
{
	atomic_fetch_add(&sh->started, 1);
	while (atomic_load(&sh->started) < NPROC)
		sched_yield();
}

static int spin_worker(void *arg)
{
	(void)arg;
	start_together();
	long n = iterations(200000);
	for (long i = 0; i < n; i++) {
		spin_lock(&sh->spin);
		sh->counter++; /* not atomic: the lock is what makes it exact */
		spin_unlock(&sh->spin);
	}
	return 0;
}

START_TEST(spin_counts_exactly)
{
	run_children(spin_worker, NPROC);
	uint64_t want = (uint64_t)NPROC * (uint64_t)iterations(200000);
	ck_assert_uint_eq(sh->counter, want);
	ck_assert_uint_eq(atomic_load(&sh->spin.stats.acquisitions), want);
	ck_assert_uint_eq(atomic_load(&sh->spin.v), 0);
	printf("spinlock: %llu contended, %llu us waiting\n",
	       (unsigned long long)atomic_load(&sh->spin.stats.contended),
	       (unsigned long long)atomic_load(&sh->spin.stats.wait_ns) / 1000);
}
END_TEST

START_TEST(spin_trylock_semantics)
{
	ck_assert(spin_trylock(&sh->spin));
	ck_assert(!spin_trylock(&sh->spin));
	spin_unlock(&sh->spin);
	ck_assert(spin_trylock(&sh->spin));
	spin_unlock(&sh->spin);
	spin_lock(&sh->spin);
	ck_assert(!spin_trylock(&sh->spin));
	spin_unlock(&sh->spin);
	ck_assert_uint_eq(atomic_load(&sh->spin.stats.acquisitions), 3);
	ck_assert_uint_eq(atomic_load(&sh->spin.stats.contended), 0);
}
END_TEST

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

/* nanosleep(3) is either system call, depending on the C library. */
static bool in_nanosleep(pid_t pid)
{
#ifdef SYS_nanosleep
	if (tu_in_syscall(pid, SYS_nanosleep, NULL))
		return true;
#endif
	return tu_in_syscall(pid, SYS_clock_nanosleep, NULL);
}

static int spin_waiter(void *arg)
{
	(void)arg;
	atomic_store(&sh->started, 1);
	spin_lock(&sh->spin);
	spin_unlock(&sh->spin);
	return 0;
}

static int rw_waiter(void *arg)
{
	atomic_fetch_add(&sh->started, 1);
	if (arg)
		rw_lock_excl(&sh->rw);
	else
		rw_lock_shared(&sh->rw);
	rw_unlock(&sh->rw);
	return 0;
}

START_TEST(stats_count_contention)
{
	spin_lock(&sh->spin);
	pid_t pid = tu_fork(spin_waiter, NULL);
	/* Past its spinning and yielding: in the backoff's sleeps. */
	bool asleep = false;
	for (int i = 0; i < 200000 && !(asleep = in_nanosleep(pid)); i++)
		sched_yield();
	ck_assert_msg(asleep, "the spinlock's waiter never reached its backoff sleep");
	spin_unlock(&sh->spin);
	ck_assert_int_eq(tu_wait(pid), 0);
	ck_assert_uint_eq(atomic_load(&sh->spin.stats.acquisitions), 2);
	ck_assert_uint_eq(atomic_load(&sh->spin.stats.contended), 1);
	ck_assert_uint_gt(atomic_load(&sh->spin.stats.wait_ns), 0);

	/* a writer holds: one reader and one writer must wait (and sleep) */
	atomic_store(&sh->started, 0);
	rw_lock_excl(&sh->rw);
	pid_t r = tu_fork(rw_waiter, NULL);
	pid_t w = tu_fork(rw_waiter, (void *)1);
	tu_wait_in_syscall(r, SYS_futex, &sh->rw.state);
	tu_wait_in_syscall(w, SYS_futex, &sh->rw.state);
	rw_unlock(&sh->rw);
	ck_assert_int_eq(tu_wait(r), 0);
	ck_assert_int_eq(tu_wait(w), 0);
	ck_assert_uint_eq(atomic_load(&sh->rw.stats.acquisitions), 3);
	ck_assert_uint_eq(atomic_load(&sh->rw.stats.contended), 2);
	ck_assert_uint_gt(atomic_load(&sh->rw.stats.wait_ns), 0);
	ck_assert_uint_eq(atomic_load(&sh->rw.state), 0);
	ck_assert_uint_eq(atomic_load(&sh->rw.writers_waiting), 0);
}
END_TEST

START_TEST(rw_trylock_semantics)
{
	wr_rwlock *l = &sh->rw;
	ck_assert(rw_trylock_shared(l));
	ck_assert(rw_trylock_shared(l));
	ck_assert(!rw_held_excl(l));
	ck_assert(!rw_trylock_excl(l));
	rw_unlock(l);
	ck_assert(!rw_trylock_excl(l));
	rw_unlock(l);
	ck_assert(rw_trylock_excl(l));
	ck_assert(rw_held_excl(l));
	ck_assert(!rw_trylock_excl(l));
	ck_assert(!rw_trylock_shared(l));
	rw_unlock(l);
	ck_assert(!rw_held_excl(l));
	rw_lock_shared(l);
	rw_unlock(l);
	rw_lock_excl(l);
	ck_assert(rw_held_excl(l));
	rw_unlock(l);
	ck_assert_uint_eq(atomic_load(&l->state), 0);
	ck_assert_uint_eq(atomic_load(&l->stats.acquisitions), 5);
}
END_TEST

static void busy(int n)
{
	for (volatile int i = 0; i < n; i++)
		;
}

static int rw_worker(void *arg)
{
	long me = (long)arg;
	long n = iterations(100000);
	start_together();
	for (long i = 0; i < n; i++) {
		if ((i + me) % 4 == 0) {
			rw_lock_excl(&sh->rw);
			if (!rw_held_excl(&sh->rw))
				return 1;
			sh->a++;
			busy(20); /* a window in which a reader would see a != b */
			sh->b++;
			rw_unlock(&sh->rw);
			sh->writes[me]++;
		} else {
			rw_lock_shared(&sh->rw);
			uint64_t a = sh->a;
			busy(20);
			uint64_t b = sh->b;
			bool held = rw_held_excl(&sh->rw);
			rw_unlock(&sh->rw);
			if (a != b || held)
				return 2;
		}
	}
	return 0;
}

static void check_mixed_processes(void)
{
	run_children(rw_worker, NPROC);
	uint64_t writes = 0;
	for (int i = 0; i < NPROC; i++)
		writes += sh->writes[i];
	ck_assert_uint_eq(writes, (uint64_t)NPROC * (uint64_t)iterations(100000) / 4);
	ck_assert_uint_eq(sh->a, writes);
	ck_assert_uint_eq(sh->b, writes);
	ck_assert_uint_eq(atomic_load(&sh->rw.state), 0);
	ck_assert_uint_eq(atomic_load(&sh->rw.writers_waiting), 0);
	ck_assert_uint_eq(atomic_load(&sh->rw.stats.acquisitions),
	                  (uint64_t)NPROC * (uint64_t)iterations(100000));
	printf("rwlock: %llu contended, %llu us waiting\n",
	       (unsigned long long)atomic_load(&sh->rw.stats.contended),
	       (unsigned long long)atomic_load(&sh->rw.stats.wait_ns) / 1000);
}

START_TEST(rw_mixed_processes)
{
	check_mixed_processes();
}
END_TEST

/* The same, with every writer that sleeps made the heir: the lock changes
 * hands by grant all the time, beside readers and barging writers. */
START_TEST(rw_mixed_processes_with_heirs)
{
	ipc_set_heir_ns(1);
	check_mixed_processes();
	ipc_set_heir_ns(0);
}
END_TEST

/* Keeps the lock read-held almost all the time, overlapping the other readers. */
static int stream_reader(void *arg)
{
	(void)arg;
	atomic_fetch_add(&sh->started, 1);
	while (!atomic_load(&sh->stop)) {
		rw_lock_shared(&sh->rw);
		busy(20000);
		rw_unlock(&sh->rw);
	}
	return 0;
}

static int lone_writer(void *arg)
{
	(void)arg;
	rw_lock_excl(&sh->rw);
	atomic_store(&sh->acquired, 1);
	rw_unlock(&sh->rw);
	return 0;
}

START_TEST(writer_not_starved)
{
	pid_t readers[3];
	for (int i = 0; i < 3; i++)
		readers[i] = tu_fork(stream_reader, NULL);
	/* The readers hold the lock in turns, overlapping, before the writer comes. */
	for (int i = 0; i < 20000 && atomic_load(&sh->rw.stats.acquisitions) < 30; i++)
		sleep_ms(1);
	ck_assert_uint_ge(atomic_load(&sh->rw.stats.acquisitions), 30);
	pid_t w = tu_fork(lone_writer, NULL);
	/* generous bound: a starved writer would wait until the readers stop */
	for (int i = 0; i < 60000 && !atomic_load(&sh->acquired); i++)
		sleep_ms(1);
	bool acquired = atomic_load(&sh->acquired);
	atomic_store(&sh->stop, 1);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(tu_wait(readers[i]), 0);
	ck_assert_int_eq(tu_wait(w), 0);
	ck_assert_msg(acquired, "the writer was starved by readers");
}
END_TEST

static int heir_writer(void *arg)
{
	(void)arg;
	rw_lock_excl(&sh->rw);
	atomic_store(&sh->acquired, 1);
	rw_unlock(&sh->rw);
	return 0;
}

/*
 * A writer that has waited long (here: at all, past its spin) is the heir:
 * the release hands it the lock, so the releaser cannot take it straight
 * back, as a process that loops on the lock would again and again.
 */
START_TEST(heir_is_handed_the_lock)
{
	ipc_set_heir_ns(1); /* inherited by the child */
	rw_lock_excl(&sh->rw);
	pid_t w = tu_fork(heir_writer, NULL);
	tu_wait_in_syscall(w, SYS_futex, &sh->rw.state);
	rw_unlock(&sh->rw);
	bool got = rw_trylock_excl(&sh->rw);
	/* Holding the lock, whether the heir has had it is settled. */
	bool overtook = got && atomic_load(&sh->acquired) == 0;
	if (got)
		rw_unlock(&sh->rw);
	ck_assert_int_eq(tu_wait(w), 0);
	ck_assert_uint_eq(atomic_load(&sh->acquired), 1);
	ipc_set_heir_ns(0);
	ck_assert_msg(!overtook,
	              "the releaser took the lock back from a writer waiting in the kernel");
	ck_assert_uint_eq(atomic_load(&sh->rw.state), 0);
	ck_assert_uint_eq(atomic_load(&sh->rw.writers_waiting), 0);
}
END_TEST

/*
 * Writers and readers asleep behind a writer: one release starts the chain
 * (the writers woken one at a time, each waking the next as it leaves, then
 * the readers all at once), and every one of them gets in.
 */
START_TEST(one_release_lets_every_sleeper_in)
{
	enum { NW = 3, NR = 3 };
	pid_t pids[NW + NR];
	atomic_store(&sh->started, 0);
	rw_lock_excl(&sh->rw);
	for (int i = 0; i < NW + NR; i++)
		pids[i] = tu_fork(rw_waiter, i < NW ? (void *)1 : NULL);
	for (int i = 0; i < NW + NR; i++)
		tu_wait_in_syscall(pids[i], SYS_futex, &sh->rw.state);
	rw_unlock(&sh->rw);
	for (int i = 0; i < NW + NR; i++)
		ck_assert_int_eq(tu_wait(pids[i]), 0);
	ck_assert_uint_eq(atomic_load(&sh->rw.stats.acquisitions), 1 + NW + NR);
	ck_assert_uint_eq(atomic_load(&sh->rw.stats.contended), NW + NR);
	ck_assert_uint_eq(atomic_load(&sh->rw.state), 0);
	ck_assert_uint_eq(atomic_load(&sh->rw.writers_waiting), 0);
}
END_TEST

static int writer_until_crash(void *arg)
{
	(void)arg;
	wr_set_panic_handler(tu_panic_exit);
	rw_lock_excl(&sh->rw);
	return 1; /* the lock is never free: only the crash ends the wait */
}

/*
 * A writer killed while it waits as the heir: the release hands it the lock
 * all the same, so the lock stays held, as when a holder dies; the other
 * waiters see the instance crash (as any death of a process makes it) and
 * PANIC instead of waiting for ever.
 */
START_TEST(dead_heir_keeps_the_lock_until_the_crash)
{
	ipc_set_heir_ns(1);
	rw_lock_excl(&sh->rw);
	pid_t heir = tu_fork(writer_until_crash, NULL);
	tu_wait_in_syscall(heir, SYS_futex, &sh->rw.state);
	pid_t other = tu_fork(writer_until_crash, NULL);
	tu_wait_in_syscall(other, SYS_futex, &sh->rw.state);
	ck_assert_int_eq(kill(heir, SIGKILL), 0);
	ck_assert_int_eq(tu_wait(heir), 128 + SIGKILL);
	rw_unlock(&sh->rw);
	ck_assert(!rw_trylock_excl(&sh->rw)); /* granted to the dead heir */
	atomic_store(&shm_hdr()->state, SHM_STATE_CRASHED);
	ck_assert_int_eq(tu_wait(other), TU_PANIC_EXIT);
	ipc_set_heir_ns(0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ipc-lock");
	TCase *tc = tcase_create("locks");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, spin_trylock_semantics);
	tcase_add_test(tc, spin_counts_exactly);
	tcase_add_test(tc, stats_count_contention);
	tcase_add_test(tc, rw_trylock_semantics);
	tcase_add_test(tc, rw_mixed_processes);
	tcase_add_test(tc, rw_mixed_processes_with_heirs);
	tcase_add_test(tc, heir_is_handed_the_lock);
	tcase_add_test(tc, one_release_lets_every_sleeper_in);
	tcase_add_test(tc, dead_heir_keeps_the_lock_until_the_crash);
	tcase_add_test(tc, writer_not_starved);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
