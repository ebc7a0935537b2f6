/*
 * test_assert.c - WR_ASSERT: a false invariant PANICs (without a panic
 * handler the process aborts) where NDEBUG is not defined; a true one, or
 * any one in a release build, passes.
 */
#include "common/common.h"
#include "testutil.h"

#include <signal.h>
#include <sys/resource.h>

static int evaluated;

static bool holds(bool v)
{
	evaluated++;
	return v;
}

START_TEST(test_assert_true_passes)
{
	WR_ASSERT(holds(true));
#ifdef NDEBUG
	ck_assert_int_eq(evaluated, 0); /* compiled out */
#else
	ck_assert_int_eq(evaluated, 1);
#endif
}
END_TEST

#ifdef NDEBUG
START_TEST(test_assert_false_compiled_out)
{
	WR_ASSERT(holds(false));
	ck_assert_int_eq(evaluated, 0);
}
END_TEST
#else
START_TEST(test_assert_false_panics)
{
	WR_ASSERT(holds(false));
	ck_abort_msg("a false WR_ASSERT returned");
}
END_TEST

/* common.h promises it: an error path inside a critical section is a bug. */
START_TEST(test_error_in_critical_section_panics)
{
	wr_crit_enter();
	(void)wr_error(WALRUS_EIO, "inside a critical section");
	ck_abort_msg("wr_error returned inside a critical section");
}
END_TEST
#endif

int main(void)
{
	/* the aborts below must leave no core file behind */
	struct rlimit no_core = {0, 0};
	if (setrlimit(RLIMIT_CORE, &no_core) != 0)
		return 1;
	Suite *s = suite_create("assert");
	TCase *tc = tcase_create("assert");

	tcase_add_test(tc, test_assert_true_passes);
#ifdef NDEBUG
	tcase_add_test(tc, test_assert_false_compiled_out);
#else
	/* no panic handler installed: wr_panic aborts (each test runs in a child) */
	tcase_add_test_raise_signal(tc, test_assert_false_panics, SIGABRT);
	tcase_add_test_raise_signal(tc, test_error_in_critical_section_panics, SIGABRT);
#endif
	suite_add_tcase(s, tc);
	return tu_run(s);
}
