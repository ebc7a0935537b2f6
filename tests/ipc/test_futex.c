/*
 * test_futex.c - sleeping on a shared word and waking every sleeper, across
 * processes.
 */
#include "testutil.h"

#include "ipc/ipc.h"

#include <errno.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NWAITERS 6

typedef struct shared {
	_Atomic uint32_t word;
	_Atomic uint32_t ready;
	_Atomic uint32_t woken;
} shared;

static shared *sh;
static int shm_fd = -1;

static void setup(void)
{
	size_t sz = sizeof(shared);
	ck_assert_int_eq(shm_create(shm_size_for(&sz, 1), WR_HUGE_OFF, &shm_fd), WALRUS_OK);
	sh = shm_alloc("futex", sizeof(shared));
	ck_assert_ptr_nonnull(sh);
}

static void teardown(void)
{
	shm_detach();
	close(shm_fd);
}

START_TEST(wait_times_out)
{
	atomic_store(&sh->word, 5);
	ck_assert_int_eq(ipc_wait_u32(&sh->word, 5, 10 * 1000000), ETIMEDOUT);
	ck_assert_int_eq(ipc_wait_u32(&sh->word, 5, 1), ETIMEDOUT);
	ck_assert_int_eq(ipc_wait_u32(&sh->word, 4, 0), EAGAIN); /* value differs: no sleep */
}
END_TEST

static int waiter(void *arg)
{
	(void)arg;
	atomic_fetch_add(&sh->ready, 1);
	while (atomic_load(&sh->word) == 0) {
		int r = ipc_wait_u32(&sh->word, 0, 0);
		if (r != 0 && r != EAGAIN && r != EINTR)
			return 1;
	}
	atomic_fetch_add(&sh->woken, 1);
	return 0;
}

START_TEST(wake_all_wakes_everyone)
{
	pid_t pids[NWAITERS];
	for (int i = 0; i < NWAITERS; i++)
		pids[i] = tu_fork(waiter, NULL);
	for (int i = 0; i < NWAITERS; i++) /* every one asleep in the kernel */
		tu_wait_in_syscall(pids[i], SYS_futex, &sh->word);
	ck_assert_uint_eq(atomic_load(&sh->woken), 0);
	atomic_store(&sh->word, 1);
	ipc_wake_all(&sh->word);
	for (int i = 0; i < NWAITERS; i++)
		ck_assert_int_eq(tu_wait(pids[i]), 0);
	ck_assert_uint_eq(atomic_load(&sh->woken), NWAITERS);
}
END_TEST

START_TEST(wake_one_wakes_a_sleeper)
{
	pid_t pid = tu_fork(waiter, NULL);
	tu_wait_in_syscall(pid, SYS_futex, &sh->word);
	atomic_store(&sh->word, 1);
	ipc_wake_one(&sh->word);
	ck_assert_int_eq(tu_wait(pid), 0);
	ck_assert_uint_eq(atomic_load(&sh->woken), 1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ipc-futex");
	TCase *tc = tcase_create("futex");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, wait_times_out);
	tcase_add_test(tc, wake_all_wakes_everyone);
	tcase_add_test(tc, wake_one_wakes_a_sleeper);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
