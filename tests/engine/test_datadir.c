/*
 * test_datadir.c - initialising a data directory (issue 15) and the
 * instance lock's "in use" message, on datadir.c directly.
 *
 * An interrupted initialisation is made by hand: a complete one whose
 * WALRUS_VERSION is removed and whose marker (walrus.bootstrap) is put
 * back, as a power cut before the version file leaves it.  The power cuts
 * themselves are in tests/durability/bootstrap_cut.py.
 */
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "wal/wal.h"

#define SEG_SIZE ((uint64_t)64 << 10)

static wr_options new_opts(bool create)
{
	wr_options o;
	wr_opts_defaults(&o);
	o.create_if_missing = create;
	o.wal_segment_size = (int64_t)SEG_SIZE;
	return o;
}

static const char *join(char *buf, const char *dir, const char *name)
{
	snprintf(buf, PATH_MAX, "%s/%s", dir, name);
	return buf;
}
/* DIR/NAME in a buffer that lives until the end of the enclosing block. */
#define path_in(dir, name) join((char[PATH_MAX]){0}, dir, name)

static bool exists(const char *dir, const char *name)
{
	return access(path_in(dir, name), F_OK) == 0;
}

static void touch(const char *dir, const char *name)
{
	ck_assert_int_eq(tu_write_file(path_in(dir, name), "", 0), 0);
}

/* The system identifier in the long header of the first WAL segment. */
static uint64_t segment_sysid(const char *dir)
{
	char waldir[PATH_MAX], seg[PATH_MAX];
	wal_long_page_header h;
	snprintf(waldir, sizeof(waldir), "%s/wal", dir);
	wal_segment_path(waldir, SEG_SIZE, SEG_SIZE, seg, sizeof(seg));
	int fd = open(seg, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	close(fd);
	return h.sysid;
}

static uint64_t control_sysid(const char *dir)
{
	wal_control c;
	ck_assert_int_eq(wal_control_read(dir, &c), WALRUS_OK);
	return c.sysid;
}

/* An initialisation cut after its WAL and control file, before WALRUS_VERSION. */
static const char *interrupted_dir(void)
{
	const char *dir = tu_tmpdir("walrus-datadir");
	wr_options o = new_opts(true);
	ck_assert_int_eq(datadir_init_or_verify(dir, &o), WALRUS_OK);
	ck_assert(!exists(dir, WR_BOOTSTRAP_FILE));
	ck_assert_int_eq(unlink(path_in(dir, WR_VERSION_FILE)), 0);
	touch(dir, WR_BOOTSTRAP_FILE);
	return dir;
}

START_TEST(interrupted_initialisation_is_redone)
{
	const char *dir = interrupted_dir();
	uint64_t old = control_sysid(dir);
	touch(dir, WR_VERSION_FILE ".tmp");
	touch(dir, "wal/0000000000030000.tmp.4242"); /* a temp segment of the cut bootstrap */
	wr_options o = new_opts(true);
	ck_assert_int_eq(datadir_init_or_verify(dir, &o), WALRUS_OK);
	ck_assert(exists(dir, WR_VERSION_FILE));
	ck_assert(!exists(dir, WR_BOOTSTRAP_FILE));
	ck_assert(!exists(dir, WR_VERSION_FILE ".tmp"));
	ck_assert(!exists(dir, "wal/0000000000030000.tmp.4242"));
	/* Done again, not finished: a new system identifier, in both places. */
	ck_assert_uint_ne(control_sysid(dir), old);
	ck_assert_uint_eq(segment_sysid(dir), control_sysid(dir));
	ck_assert_int_eq(datadir_init_or_verify(dir, &o), WALRUS_OK);
}
END_TEST

START_TEST(interrupted_initialisation_needs_create)
{
	const char *dir = interrupted_dir();
	wr_options o = new_opts(false);
	ck_assert_int_eq(datadir_init_or_verify(dir, &o), WALRUS_ENOTWALRUS);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "initialisation was interrupted"));
	ck_assert(exists(dir, WR_BOOTSTRAP_FILE)); /* nothing touched */
	ck_assert(exists(dir, "walrus.control"));
}
END_TEST

START_TEST(marker_beside_foreign_file_refused)
{
	const char *dir = interrupted_dir();
	touch(dir, "precious.txt");
	wr_options o = new_opts(true);
	ck_assert_int_eq(datadir_init_or_verify(dir, &o), WALRUS_ENOTWALRUS);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "\"precious.txt\""));
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "interrupted initialisation does not"));
	ck_assert(exists(dir, "precious.txt"));
	ck_assert(!exists(dir, WR_VERSION_FILE));
}
END_TEST

/* A cut after WALRUS_VERSION, before the marker's removal: complete. */
START_TEST(marker_beside_version_removed)
{
	const char *dir = tu_tmpdir("walrus-datadir");
	wr_options o = new_opts(true);
	ck_assert_int_eq(datadir_init_or_verify(dir, &o), WALRUS_OK);
	uint64_t sysid = control_sysid(dir);
	touch(dir, WR_BOOTSTRAP_FILE);
	o.create_if_missing = false;
	ck_assert_int_eq(datadir_init_or_verify(dir, &o), WALRUS_OK);
	ck_assert(!exists(dir, WR_BOOTSTRAP_FILE));
	ck_assert_uint_eq(control_sysid(dir), sysid);
}
END_TEST

/* Without the marker nothing is ours: refused, naming what is there. */
START_TEST(leftovers_without_marker_refused)
{
	const char *dir = tu_tmpdir("walrus-datadir");
	wr_options o = new_opts(true);
	ck_assert_int_eq(mkdir(path_in(dir, "base"), 0700), 0);
	ck_assert_int_eq(datadir_init_or_verify(dir, &o), WALRUS_ENOTWALRUS);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "holds \"base\""));
	ck_assert_int_eq(rmdir(path_in(dir, "base")), 0);
	ck_assert_int_eq(mkdir(path_in(dir, "wal"), 0700), 0);
	touch(dir, "wal/0000000000010000");
	ck_assert_int_eq(datadir_init_or_verify(dir, &o), WALRUS_ENOTWALRUS);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "holds \"wal/0000000000010000\""));
	ck_assert(exists(dir, "wal/0000000000010000"));
	ck_assert(!exists(dir, WR_BOOTSTRAP_FILE));
}
END_TEST

/* What a user may prepare does not count, and stays. */
START_TEST(prepared_directory_initialised)
{
	const char *dir = tu_tmpdir("walrus-datadir");
	wr_options o = new_opts(true);
	ck_assert_int_eq(mkdir(path_in(dir, "wal"), 0700), 0);
	ck_assert_int_eq(mkdir(path_in(dir, "log"), 0700), 0);
	touch(dir, WR_CONF_FILE);
	ck_assert_int_eq(datadir_init_or_verify(dir, &o), WALRUS_OK);
	ck_assert(exists(dir, WR_VERSION_FILE));
	ck_assert(exists(dir, WR_CONF_FILE));
}
END_TEST

/* A missing directory and its missing parents are made (0700). */
START_TEST(resolve_creates_parents)
{
	char want[PATH_MAX], got[PATH_MAX];
	struct stat st;
	snprintf(want, sizeof(want), "%s/a/b/c", tu_tmpdir("walrus-datadir"));
	ck_assert_int_eq(datadir_resolve(want, true, got), WALRUS_OK);
	ck_assert_int_eq(stat(got, &st), 0);
	ck_assert(S_ISDIR(st.st_mode));
	ck_assert_int_eq(st.st_mode & 0777, 0700);
}
END_TEST

/* The lock taken, the pid not written yet: "starting", never "pid 0". */
START_TEST(busy_message_names_starting_owner)
{
	const char *dir = tu_tmpdir("walrus-datadir");
	char pid[64];
	int owner, other = -1;
	ck_assert_int_eq(datadir_lock_instance(dir, &owner), WALRUS_OK);
	ck_assert_int_eq(datadir_lock_instance(dir, &other), WALRUS_EBUSY);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "which is starting"));
	ck_assert_ptr_null(strstr(walrus_errmsg(), "pid 0"));
	ck_assert_int_eq(datadir_write_pid(owner, dir), WALRUS_OK);
	ck_assert_int_eq(datadir_lock_instance(dir, &other), WALRUS_EBUSY);
	snprintf(pid, sizeof(pid), "(supervisor pid %d)", (int)getpid());
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), pid));
	close(owner);
}
END_TEST

static Suite *datadir_suite(void)
{
	Suite *s = suite_create("datadir");
	TCase *tc = tcase_create("datadir");
	tcase_add_test(tc, interrupted_initialisation_is_redone);
	tcase_add_test(tc, interrupted_initialisation_needs_create);
	tcase_add_test(tc, marker_beside_foreign_file_refused);
	tcase_add_test(tc, marker_beside_version_removed);
	tcase_add_test(tc, leftovers_without_marker_refused);
	tcase_add_test(tc, prepared_directory_initialised);
	tcase_add_test(tc, resolve_creates_parents);
	tcase_add_test(tc, busy_message_names_starting_owner);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(datadir_suite());
}
