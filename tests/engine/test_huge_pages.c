/*
 * test_huge_pages.c - huge_pages = off | try | on: the shared memory segment
 * in huge pages when the kernel has them reserved; without them, normal
 * pages (try) or a clear error that names vm.nr_hugepages (on); never
 * huge pages with off.
 *
 * The cases set vm.nr_hugepages themselves (root, as the other suites that
 * mount need) and an unchecked fixture, which libcheck runs in the parent
 * even when a case dies, puts the old value back.  Meson runs this suite
 * alone (is_parallel: false): another instance, whose huge_pages defaults
 * to try, would otherwise take the pages a case reserved.
 */
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "ipc/ipc.h"

#define NR_HUGEPAGES "/proc/sys/vm/nr_hugepages"

static long saved_nr = -1;
static int shm_fd = -1;

static long read_long(const char *path)
{
	FILE *f = fopen(path, "r");
	ck_assert_msg(f != NULL, "open %s: %m", path);
	long v = -1;
	ck_assert_int_eq(fscanf(f, "%ld", &v), 1);
	fclose(f);
	return v;
}

static void write_long(const char *path, long v)
{
	char text[32];
	int n = snprintf(text, sizeof(text), "%ld\n", v);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ck_assert_msg(fd >= 0, "open %s: %m (the suite runs as root)", path);
	ck_assert_int_eq(write(fd, text, (size_t)n), n);
	ck_assert_int_eq(close(fd), 0);
}

/* A field of /proc/meminfo ("HugePages_Rsvd"), in its own unit. */
static long meminfo(const char *field)
{
	FILE *f = fopen("/proc/meminfo", "r");
	ck_assert_ptr_nonnull(f);
	char line[256];
	size_t fl = strlen(field);
	long v = -1;
	while (fgets(line, sizeof(line), f) != NULL)
		if (strncmp(line, field, fl) == 0 && line[fl] == ':')
			v = strtol(line + fl + 1, NULL, 10);
	fclose(f);
	ck_assert_msg(v >= 0, "no %s in /proc/meminfo", field);
	return v;
}

/* vm.nr_hugepages = @n, and the kernel really holds that many. */
static void reserve(long n)
{
	write_long(NR_HUGEPAGES, n);
	ck_assert_msg(meminfo("HugePages_Total") == n,
	              "the kernel reserved %ld huge pages of the %ld asked",
	              meminfo("HugePages_Total"), n);
}

static void save_nr(void)
{
	saved_nr = read_long(NR_HUGEPAGES);
}

static void restore_nr(void)
{
	if (saved_nr >= 0)
		write_long(NR_HUGEPAGES, saved_nr);
}

static void teardown(void)
{
	shm_detach();
	if (shm_fd >= 0)
		close(shm_fd);
	shm_fd = -1;
}

static size_t huge_page_bytes(void)
{
	return (size_t)meminfo("Hugepagesize") * 1024;
}

/* ---------------------------------------------------------------- the segment */

START_TEST(segment_in_huge_pages_when_reserved)
{
	size_t hp = huge_page_bytes(), want = hp + hp / 2;
	reserve(8);
	ck_assert_int_eq(shm_create(want, WR_HUGE_ON, &shm_fd), WALRUS_OK);
	const shm_header *h = shm_hdr();
	ck_assert_uint_eq(h->huge_page_size, hp);
	ck_assert_uint_eq(h->size, 2 * hp); /* whole pages, and the header says so */
	/* Mapped means reserved: both pages are taken though only the header's
	 * was touched (a touched page leaves Rsvd for the used ones). */
	ck_assert_int_eq(meminfo("HugePages_Rsvd"), 1);
	ck_assert_int_eq(meminfo("HugePages_Total") - meminfo("HugePages_Free"), 1);
	char *p = shm_alloc("all", h->size - 4096);
	ck_assert_ptr_nonnull(p);
	memset(p, 0x5a, h->size - 4096);
	/* Another process maps it through the fd, as a backend does. */
	shm_detach();
	ck_assert_int_eq(shm_attach(shm_fd), WALRUS_OK);
	size_t got = 0;
	p = shm_lookup("all", &got);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(got, 2 * hp - 4096);
	ck_assert_int_eq(p[0], 0x5a);
	ck_assert_int_eq(p[got - 1], 0x5a);
	ck_assert_int_eq(meminfo("HugePages_Total") - meminfo("HugePages_Free"), 2);
}
END_TEST

START_TEST(on_without_reserve_fails_clearly)
{
	reserve(0);
	int fds = tu_count_fds();
	ck_assert_int_eq(shm_create(huge_page_bytes(), WR_HUGE_ON, &shm_fd), WALRUS_ENOMEM);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "huge pages"));
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "vm.nr_hugepages"));
	ck_assert_ptr_null(shm_hdr());
	ck_assert_int_eq(tu_count_fds(), fds); /* the memfd is closed */
}
END_TEST

START_TEST(try_without_reserve_uses_normal_pages)
{
	reserve(0);
	size_t want = huge_page_bytes() + 4096;
	ck_assert_int_eq(shm_create(want, WR_HUGE_TRY, &shm_fd), WALRUS_OK);
	ck_assert_uint_eq(shm_hdr()->huge_page_size, 0);
	ck_assert_uint_eq(shm_hdr()->size, want); /* not rounded */
}
END_TEST

START_TEST(off_leaves_reserved_pages_alone)
{
	reserve(8);
	ck_assert_int_eq(shm_create(huge_page_bytes(), WR_HUGE_OFF, &shm_fd), WALRUS_OK);
	ck_assert_uint_eq(shm_hdr()->huge_page_size, 0);
	ck_assert_int_eq(meminfo("HugePages_Rsvd"), 0);
	ck_assert_int_eq(meminfo("HugePages_Free"), 8);
}
END_TEST

/* ---------------------------------------------------------------- an instance */

static walrus_opts *huge_opts(const char *mode)
{
	walrus_opts *o = tu_instance_opts("0", "8MB");
	ck_assert_int_eq(walrus_opts_set(o, "huge_pages", mode), WALRUS_OK);
	return o;
}

static bool log_has(const char *dir, const char *what)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/log/walrus.log", dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ck_assert_msg(fd >= 0, "open %s: %m", path);
	static char text[1 << 20];
	ssize_t n = wr_read_full(fd, text, sizeof(text) - 1);
	ck_assert_int_ge(n, 0);
	close(fd);
	text[n] = '\0';
	return strstr(text, what) != NULL;
}

START_TEST(instance_runs_in_huge_pages)
{
	const char *dir = tu_tmpdir("huge");
	reserve(64);
	walrus *db = tu_open(dir, huge_opts("on"));
	ck_assert_int_eq(walrus_put(db, "k", 1, "v", 1, 0), WALRUS_OK);
	char *json = NULL;
	ck_assert_int_eq(walrus_stats(db, &json), WALRUS_OK);
	char want[64];
	snprintf(want, sizeof(want), "\"huge_page_size\":%zu", huge_page_bytes());
	ck_assert_msg(strstr(json, want) != NULL, "no %s in %s", want, json);
	free(json);
	ck_assert_int_gt(64 - meminfo("HugePages_Free") + meminfo("HugePages_Rsvd"), 0);
	tu_close_and_wait(db);
	ck_assert(log_has(dir, "huge pages of"));
	/* The pages go back to the kernel with the instance. */
	ck_assert_int_eq(meminfo("HugePages_Free"), 64);
	tu_rmtree(dir);
}
END_TEST

START_TEST(instance_on_without_reserve_refuses_to_start)
{
	const char *dir = tu_tmpdir("huge");
	reserve(0);
	walrus_opts *o = huge_opts("on");
	tu_open_fails(dir, o, WALRUS_ENOMEM, "vm.nr_hugepages");
	walrus_opts_free(o);
	/* Nothing was lost: the same directory starts with try, in normal pages
	 * (said at debug level: the usual case, nothing reserved). */
	walrus_opts *t = huge_opts("try");
	ck_assert_int_eq(walrus_opts_set(t, "log_min_messages", "debug"), WALRUS_OK);
	walrus *db = tu_open(dir, t);
	char *json = NULL;
	ck_assert_int_eq(walrus_stats(db, &json), WALRUS_OK);
	ck_assert_ptr_nonnull(strstr(json, "\"huge_page_size\":0"));
	free(json);
	tu_close_and_wait(db);
	ck_assert(log_has(dir, "huge_pages = try: using normal pages"));
	tu_rmtree(dir);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("huge-pages");
	TCase *tc = tcase_create("segment");
	tcase_add_unchecked_fixture(tc, save_nr, restore_nr);
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, segment_in_huge_pages_when_reserved);
	tcase_add_test(tc, on_without_reserve_fails_clearly);
	tcase_add_test(tc, try_without_reserve_uses_normal_pages);
	tcase_add_test(tc, off_leaves_reserved_pages_alone);
	suite_add_tcase(s, tc);
	tc = tcase_create("instance");
	tcase_add_unchecked_fixture(tc, save_nr, restore_nr);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, instance_runs_in_huge_pages);
	tcase_add_test(tc, instance_on_without_reserve_refuses_to_start);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
