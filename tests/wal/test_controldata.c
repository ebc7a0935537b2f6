/*
 * test_controldata.c - `walrus controldata` on a bootstrapped directory,
 * run as the built binary ($WALRUS_BIN): the fields it prints, exit 2 with
 * the reason on a damaged control file, exit 3 when there is none.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "testutil.h"
#include "wal/wal.h"

static const char *dir;
static char out[16384];

static void setup(void)
{
	dir = tu_tmpdir("walrus-controldata");
	wr_log_set_stderr(WR_PANIC + 1);
	ck_assert_int_eq(fdc_init(100), 0);
}

/* Runs `walrus -D @d controldata`, output (stdout and stderr) into out; returns the exit code. */
static int run(const char *d)
{
	const char *bin = getenv("WALRUS_BIN");
	ck_assert_msg(bin != NULL, "WALRUS_BIN is not set");
	char cmd[8192];
	snprintf(cmd, sizeof(cmd), "'%s' -D '%s' controldata 2>&1", bin, d);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	size_t n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	int st = pclose(p);
	ck_assert(WIFEXITED(st));
	return WEXITSTATUS(st);
}

static void assert_line(const char *label, const char *value)
{
	char want[256];
	const char *at = strstr(out, label);
	ck_assert_msg(at != NULL, "no \"%s\" in:\n%s", label, out);
	at += strlen(label);
	at += strspn(at, " ");
	snprintf(want, sizeof(want), "%s\n", value);
	ck_assert_msg(strncmp(at, want, strlen(want)) == 0, "\"%s\" is not \"%s\" in:\n%s", label,
	              value, out);
}

START_TEST(prints_fields)
{
	wr_options o;
	wr_opts_defaults(&o);
	o.wal_segment_size = 1 << 20;
	ck_assert_int_eq(wal_bootstrap(dir, &o), 0);
	wal_control c;
	ck_assert_int_eq(wal_control_read(dir, &c), 0);
	char buf[64];

	ck_assert_int_eq(run(dir), 0);
	snprintf(buf, sizeof(buf), "%u", WAL_CONTROL_VERSION);
	assert_line("walrus control file version:", buf);
	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)c.sysid);
	assert_line("System identifier:", buf);
	assert_line("Database cluster state:", "shut down");
	assert_line("Latest checkpoint location:", "0/00100028");
	assert_line("Latest checkpoint's REDO location:", "0/00100028");
	assert_line("Prior checkpoint location:", "0/00000000");
	assert_line("WAL segment size:", "1048576");
	snprintf(buf, sizeof(buf), "%lld", (long long)o.data_segment_size);
	assert_line("Data segment size:", buf);
	assert_line("Next relation id:", "1");
	ck_assert_ptr_nonnull(strstr(out, "Time of latest checkpoint:"));

	c.state = WAL_DB_IN_PRODUCTION;
	ck_assert_int_eq(wal_control_write(dir, &c), 0);
	ck_assert_int_eq(run(dir), 0);
	assert_line("Database cluster state:", "in production");
}
END_TEST

START_TEST(damaged_or_missing)
{
	wr_options o;
	wr_opts_defaults(&o);
	ck_assert_int_eq(wal_bootstrap(dir, &o), 0);
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, WAL_CONTROL_FILE);
	tu_flip_bit(path, 44, 0);
	ck_assert_int_eq(run(dir), 2);
	ck_assert_msg(strstr(out, "incorrect checksum in control file") != NULL, "%s", out);
	ck_assert_msg(strstr(out, path) != NULL, "%s", out);

	const char *empty = tu_tmpdir("walrus-controldata-empty");
	ck_assert_int_eq(run(empty), 3);
	ck_assert_msg(strstr(out, "is missing") != NULL, "%s", out);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("wal-controldata");
	TCase *tc = tcase_create("controldata");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, prints_fields);
	tcase_add_test(tc, damaged_or_missing);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
