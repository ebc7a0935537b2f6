/*
 * test_error.c - error codes and messages, errno mapping, clocks, wr_snprintf.
 */
#include "common/common.h"
#include "testutil.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/time.h>

START_TEST(test_strerror_all_codes)
{
	for (int a = WALRUS_ESNAPSHOT; a <= WALRUS_OK; a++) {
		const char *sa = walrus_strerror(a);
		ck_assert_ptr_nonnull(sa);
		ck_assert_int_gt((int)strlen(sa), 0);
		ck_assert_str_ne(sa, "unknown error");
		for (int b = WALRUS_ESNAPSHOT; b < a; b++)
			ck_assert_str_ne(sa, walrus_strerror(b));
	}
	ck_assert_str_eq(walrus_strerror(1), "unknown error");
	ck_assert_str_eq(walrus_strerror(-1000), "unknown error");
}
END_TEST

START_TEST(test_wr_error_message)
{
	ck_assert_str_eq(walrus_errmsg(), "");
	errno = ENOENT;
	int rc = wr_error(WALRUS_EIO, "could not open \"%s\": %m", "base/1");
	ck_assert_int_eq(rc, WALRUS_EIO);
	ck_assert_int_eq(errno, ENOENT);
	ck_assert_str_eq(walrus_errmsg(), "could not open \"base/1\": No such file or directory");
	wr_error_clear();
	ck_assert_str_eq(walrus_errmsg(), "");
}
END_TEST

START_TEST(test_wr_error_truncates)
{
	char big[3000];

	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	ck_assert_int_eq(wr_error(WALRUS_EINVAL, "%s", big), WALRUS_EINVAL);
	ck_assert_int_eq((int)strlen(walrus_errmsg()), 1023);
}
END_TEST

START_TEST(test_errno_mapping)
{
	static const struct {
		int err, code;
	} map[] = {
	    {ENOENT, WALRUS_ENOENT}, {ENOTDIR, WALRUS_ENOENT},    {EACCES, WALRUS_EPERM},
	    {EPERM, WALRUS_EPERM},   {EROFS, WALRUS_EPERM},       {ENOSPC, WALRUS_ENOSPC},
	    {EDQUOT, WALRUS_ENOSPC}, {ENOMEM, WALRUS_ENOMEM},     {EINVAL, WALRUS_EINVAL},
	    {EBUSY, WALRUS_EBUSY},   {EWOULDBLOCK, WALRUS_EBUSY}, {EMFILE, WALRUS_ELIMIT},
	    {ENFILE, WALRUS_ELIMIT}, {EIO, WALRUS_EIO},           {EXDEV, WALRUS_EIO},
	    {0, WALRUS_EIO},
	};
	for (size_t i = 0; i < WR_ARRAY_LEN(map); i++)
		ck_assert_msg(wr_errno_code(map[i].err) == map[i].code, "errno %d", map[i].err);
}
END_TEST

START_TEST(test_snprintf)
{
	char buf[8];

	ck_assert(wr_snprintf(buf, sizeof(buf), "%s", "1234567"));
	ck_assert_str_eq(buf, "1234567");
	ck_assert(!wr_snprintf(buf, sizeof(buf), "%s", "12345678"));
	ck_assert_str_eq(buf, "1234567");
	ck_assert(!wr_snprintf(buf, 0, "x"));
}
END_TEST

START_TEST(test_clocks)
{
	uint64_t t0 = wr_now_ns();
	uint64_t w0 = wr_wall_us();
	wr_sleep_us(20000);
	uint64_t t1 = wr_now_ns();
	uint64_t w1 = wr_wall_us();

	ck_assert_uint_ge(t1 - t0, 20000000u);
	ck_assert_uint_lt(t1 - t0, 2000000000u);
	/* Well after 2020, well before 2100. */
	ck_assert_uint_gt(w0, 1577836800000000u);
	ck_assert_uint_lt(w0, 4102444800000000u);
	ck_assert_uint_ge(w1, w0);
	wr_sleep_us(0);
}
END_TEST

static void on_alarm(int sig)
{
	(void)sig;
}

/* Signals must not cut the sleep short. */
START_TEST(test_sleep_survives_signals)
{
	struct sigaction sa = {.sa_handler = on_alarm};
	struct itimerval it = {.it_interval = {0, 5000}, .it_value = {0, 5000}};
	struct itimerval off = {0};

	ck_assert_int_eq(sigaction(SIGALRM, &sa, NULL), 0);
	ck_assert_int_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
	uint64_t t0 = wr_now_ns();
	errno = 1234;
	wr_sleep_us(60000);
	uint64_t t1 = wr_now_ns();
	ck_assert_int_eq(errno, 1234);
	ck_assert_int_eq(setitimer(ITIMER_REAL, &off, NULL), 0);
	ck_assert_uint_ge(t1 - t0, 60000000u);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("error");
	TCase *tc = tcase_create("error");

	tcase_add_test(tc, test_strerror_all_codes);
	tcase_add_test(tc, test_wr_error_message);
	tcase_add_test(tc, test_wr_error_truncates);
	tcase_add_test(tc, test_errno_mapping);
	tcase_add_test(tc, test_snprintf);
	tcase_add_test(tc, test_clocks);
	tcase_add_test(tc, test_sleep_survives_signals);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
