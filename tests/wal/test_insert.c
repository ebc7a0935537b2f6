/*
 * test_insert.c - the shared-memory side of the WAL: concurrent inserters
 * from several processes, records crossing pages, segments and the ring of
 * buffers, group commit, and identical bytes from every write path
 * (sync, O_DIRECT, open_datasync, io_uring).
 *
 * The WAL is set up here without an instance: a shared memory segment with
 * only the WAL region, inherited by forked children, as the supervisor's
 * children inherit it.
 */
#include "waltest.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdcache/fdcache.h"
#include "testsupport/testsupport.h"

static uint32_t payload_len(uint32_t who, uint32_t seq)
{
	/* Mostly small, sometimes several pages: records cross pages and segments. */
	uint32_t x = (who * 2654435761u) ^ (seq * 40503u);
	return (x % 17 == 0) ? 9000 + x % 20000 : 16 + x % 300;
}

static wr_lsn insert_one(uint32_t who, uint32_t seq, wr_lsn *start)
{
	return wt_insert(who, seq, payload_len(who, seq), start);
}

START_TEST(single_process_round_trip)
{
	wt_base_opts(NULL, NULL);
	wt_setup_wal(tu_tmpdir("walrus-walins"), 0);
	ck_assert_int_eq(wal_attach(0), WALRUS_OK);
	wr_lsn prev_end = 0, start;
	for (uint32_t i = 0; i < 600; i++) {
		wr_lsn end = insert_one(0, i, &start);
		ck_assert_uint_gt(end, start);
		ck_assert_uint_ge(start, prev_end);
		prev_end = end;
	}
	wal_flush_to(prev_end);
	ck_assert_uint_ge(wal_flushed_lsn(), prev_end);
	uint32_t next[1] = {0};
	ck_assert_int_eq(wt_read_all(next, 1), 600);
	wal_stats st;
	wal_get_stats(&st);
	ck_assert_uint_eq(st.records, 600);
	ck_assert_uint_gt(st.buffer_full_waits, 0); /* 8 buffer pages: the ring wrapped */
}
END_TEST

START_TEST(huge_record_through_small_ring)
{
	/* 24 MiB through 8 buffer pages and 64 kB segments: the record crosses
	 * hundreds of segments while the ring wraps thousands of times. */
	size_t len = 24u << 20;
	char *big = malloc(len);
	ck_assert_ptr_nonnull(big);
	for (size_t i = 0; i < len; i++)
		big[i] = (char)(i * 131 + (i >> 16));
	wt_base_opts(NULL, NULL);
	wt_setup_wal(tu_tmpdir("walrus-walins"), 0);
	ck_assert_int_eq(wal_attach(0), WALRUS_OK);
	wr_lsn start;
	insert_one(0, 0, NULL);
	wal_begin();
	wal_register_data(big, len);
	wr_lsn end = wal_insert_at(RM_XLOG, XLOG_NOOP, &start);
	insert_one(0, 1, NULL);
	wal_flush_to(wal_insert_lsn());
	wal_reader *r;
	wal_decoded *rec;
	ck_assert_int_eq(
	    wal_reader_open(wt_waldir, (uint64_t)wt_opts.wal_segment_size, TU_SYSID, &r),
	    WALRUS_OK);
	ck_assert_int_eq(wal_read_record(r, start, &rec), WALRUS_OK);
	ck_assert_uint_eq(rec->end, end);
	ck_assert_uint_eq(rec->main_len, len);
	ck_assert_int_eq(memcmp(rec->main_data, big, len), 0);
	ck_assert_int_eq(wal_read_record(r, 0, &rec), WALRUS_OK); /* the one after it */
	wal_reader_close(r);
	free(big);
}
END_TEST

struct child_arg {
	uint32_t who, count;
	int flush_every;
};

static int inserter(void *p)
{
	struct child_arg *a = p;
	if (wal_attach((int)a->who + 1) != WALRUS_OK)
		return 10;
	for (uint32_t i = 0; i < a->count; i++) {
		wr_lsn end = insert_one(a->who, i, NULL);
		if (a->flush_every && i % (uint32_t)a->flush_every == 0) {
			wal_flush_to(end);
			if (wal_flushed_lsn() < end)
				return 11;
		}
	}
	return 0;
}

START_TEST(concurrent_inserters)
{
	enum { NPROC = 4 };
	uint32_t count = tu_long_mode() ? 20000 : 1500;
	wt_base_opts(NULL, NULL);
	wt_setup_wal(tu_tmpdir("walrus-walins"), 0);
	ck_assert_int_eq(wal_attach(0), WALRUS_OK);
	struct child_arg args[NPROC];
	pid_t pids[NPROC];
	for (uint32_t i = 0; i < NPROC; i++) {
		args[i] = (struct child_arg){i, count, 7};
		pids[i] = tu_fork(inserter, &args[i]);
	}
	for (int i = 0; i < NPROC; i++)
		ck_assert_int_eq(tu_wait(pids[i]), 0);
	wal_flush_to(wal_insert_lsn());
	uint32_t next[NPROC] = {0};
	ck_assert_int_eq(wt_read_all(next, NPROC), (int)(NPROC * count));
	for (int i = 0; i < NPROC; i++)
		ck_assert_uint_eq(next[i], count);
}
END_TEST

static int committer(void *p)
{
	struct child_arg *a = p;
	if (wal_attach((int)a->who + 1) != WALRUS_OK)
		return 10;
	for (uint32_t i = 0; i < a->count; i++) {
		wal_begin();
		wal_register_data(&i, sizeof(i));
		wr_lsn end = wal_insert(RM_XLOG, XLOG_NOOP);
		wal_flush_to(end);
		if (wal_flushed_lsn() < end)
			return 11; /* released before its commit was durable */
	}
	return 0;
}

START_TEST(group_commit_releases_waiters)
{
	enum { NPROC = 8 };
	wt_base_opts("wal_buffers", "1MB");
	wt_setup_wal(tu_tmpdir("walrus-walins"), 0);
	ck_assert_int_eq(wal_attach(0), WALRUS_OK);
	struct child_arg args[NPROC];
	pid_t pids[NPROC];
	for (uint32_t i = 0; i < NPROC; i++) {
		args[i] = (struct child_arg){i, 150, 0};
		pids[i] = tu_fork(committer, &args[i]);
	}
	for (int i = 0; i < NPROC; i++)
		ck_assert_int_eq(tu_wait(pids[i]), 0);
	wal_stats st;
	wal_get_stats(&st);
	ck_assert_uint_eq(st.records, NPROC * 150);
	/* Every commit was durable when released (checked in the children);
	 * with 8 committers on 2 CPUs some were covered by another's flush. */
	ck_assert_uint_gt(st.group_waits, 0);
	ck_assert_uint_lt(st.flushes, NPROC * 150);
}
END_TEST

static uint64_t fixed_clock(void)
{
	return 1764000000000ull;
}

/* Fills a fresh WAL with a fixed sequence under the given option; returns the end. */
static wr_lsn fill_fixed(const char *dir, const char *name, const char *value)
{
	wal_set_clock(fixed_clock); /* record times would differ */
	wt_base_opts(name, value);
	wt_setup_wal(dir, 0);
	ck_assert_int_eq(wal_attach(0), WALRUS_OK);
	wr_lsn end = 0;
	for (uint32_t i = 0; i < 400; i++) {
		end = insert_one(3, i, NULL);
		if (i % 5 == 0)
			wal_flush_to(end);
	}
	wal_flush_to(end);
	return end;
}

static void compare_segments(const char *a, const char *b, wr_lsn end)
{
	uint64_t seg = 64 * 1024;
	for (wr_lsn s = 0; s < end; s += seg) {
		char pa[4300], pb[4300];
		snprintf(pa, sizeof(pa), "%s/wal/%016llX", a, (unsigned long long)s);
		snprintf(pb, sizeof(pb), "%s/wal/%016llX", b, (unsigned long long)s);
		static char ba[64 * 1024], bb[64 * 1024];
		int fa = open(pa, O_RDONLY), fb = open(pb, O_RDONLY);
		ck_assert_msg(fa >= 0 && fb >= 0, "missing segment %s or %s", pa, pb);
		ck_assert_int_eq(read(fa, ba, sizeof(ba)), (ssize_t)sizeof(ba));
		ck_assert_int_eq(read(fb, bb, sizeof(bb)), (ssize_t)sizeof(bb));
		close(fa);
		close(fb);
		/* Past the end, a page may hold leftovers of nothing: compare up to end. */
		size_t n = end - s < seg ? (size_t)(end - s) : seg;
		ck_assert_msg(memcmp(ba, bb, n) == 0, "segment %016llX differs",
		              (unsigned long long)s);
	}
}

static int run_variant(void *p)
{
	const char **v = p;
	wal_detach();
	shm_detach(); /* inherited from the test process: each variant has its own */
	fill_fixed(v[0], v[1], v[2]);
	return 0;
}

START_TEST(every_write_path_writes_the_same_bytes)
{
	const char *variants[][2] = {
	    {"wal_direct_io", "on"},      {"wal_direct_io", "off"},
	    {"io_method", "io_uring"},    {"wal_sync_method", "open_datasync"},
	    {"wal_sync_method", "fsync"},
	};
	const char *ref = tu_tmpdir("walrus-walref");
	wr_lsn end = fill_fixed(ref, NULL, NULL);
	for (size_t i = 0; i < WR_ARRAY_LEN(variants); i++) {
		const char *dir = tu_tmpdir("walrus-walvar");
		const char *arg[3] = {dir, variants[i][0], variants[i][1]};
		/* Each variant in its own process: one shared memory segment each. */
		pid_t pid = tu_fork(run_variant, arg);
		ck_assert_int_eq(tu_wait(pid), 0);
		compare_segments(ref, dir, end);
	}
}
END_TEST

/* The WAL's I/O for options @v (name, value pairs, NULL-ended): 1 direct, 0 buffered. */
static int direct_with(void *p)
{
	const char **v = p;
	wal_detach();
	shm_detach();
	wt_base_opts(NULL, NULL);
	for (int i = 0; v[i] != NULL; i += 2)
		ck_assert_int_eq(wr_opts_set(&wt_opts, v[i], v[i + 1]), WALRUS_OK);
	wt_setup_wal(tu_tmpdir("walrus-waldirect"), 0);
	ck_assert_int_eq(wal_attach(0), WALRUS_OK);
	wal_flush_to(insert_one(3, 0, NULL));
	wal_stats st;
	wal_get_stats(&st);
	return st.direct_io ? 1 : 0;
}

/* auto: O_DIRECT unless an archiver or a WAL sender reads the segments back. */
START_TEST(auto_direct_io_unless_wal_is_read_back)
{
	const char *none[] = {NULL}, *arch[] = {"archive_mode", "on", NULL},
	           *repl[] = {"listen_replication", "127.0.0.1:5433", NULL},
	           *forced[] = {"archive_mode", "on", "wal_direct_io", "on", NULL},
	           *off[] = {"wal_direct_io", "off", NULL};
	const struct {
		const char **opts;
		int direct;
	} cases[] = {{none, 1}, {arch, 0}, {repl, 0}, {forced, 1}, {off, 0}};
	for (size_t i = 0; i < WR_ARRAY_LEN(cases); i++)
		ck_assert_msg(tu_wait(tu_fork(direct_with, cases[i].opts)) == cases[i].direct,
		              "case %zu", i);
}
END_TEST

#ifdef WALRUS_TEST_HOOKS /* the refusal is a failpoint */
static int refused_variant(void *p)
{
	ck_assert_int_eq(ts_failpoint_set("open_direct:EINVAL:/wal/*0"), WALRUS_OK);
	run_variant(p);
	ck_assert_uint_gt(ts_failpoint_hits(), 0);
	wal_stats st;
	wal_get_stats(&st);
	return st.direct_io ? 1 : 0;
}

/*
 * A file system that refuses O_DIRECT (EINVAL at open, injected): under auto
 * the WAL goes on through the page cache, byte for byte the same.
 */
START_TEST(auto_direct_io_falls_back_when_refused)
{
	const char *ref = tu_tmpdir("walrus-walref");
	wr_lsn end = fill_fixed(ref, NULL, NULL);
	wal_stats st;
	wal_get_stats(&st);
	ck_assert(st.direct_io);
	const char *dir = tu_tmpdir("walrus-walvar");
	const char *arg[3] = {dir, "wal_direct_io", "auto"};
	ck_assert_int_eq(tu_wait(tu_fork(refused_variant, arg)), 0);
	compare_segments(ref, dir, end);
}
END_TEST
#endif

static Suite *insert_suite(void)
{
	Suite *s = suite_create("wal-insert");
	TCase *t = tcase_create("insert");
	tcase_set_timeout(t, 240);
	tcase_add_test(t, single_process_round_trip);
	tcase_add_test(t, huge_record_through_small_ring);
	tcase_add_test(t, concurrent_inserters);
	tcase_add_test(t, group_commit_releases_waiters);
	tcase_add_test(t, every_write_path_writes_the_same_bytes);
	tcase_add_test(t, auto_direct_io_unless_wal_is_read_back);
#ifdef WALRUS_TEST_HOOKS
	tcase_add_test(t, auto_direct_io_falls_back_when_refused);
#endif
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	return tu_run(insert_suite());
}
