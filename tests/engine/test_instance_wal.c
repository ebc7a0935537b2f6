/*
 * test_instance_wal.c - the WAL inside a running instance: checkpoints
 * requested by WAL volume recycle segments (and a shutdown gives back all
 * but min_wal_size), a clean shutdown leaves a
 * shutdown checkpoint, records flushed before a kill -9 survive it, and a
 * damaged control file or WAL, or WAL a newer walrus wrote, stops the start
 * with a clear error.
 */
#include "testutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "checkpointer/checkpointer.h"
#include "engine/engine.h"
#include "kv/kv_int.h"
#include "wal/wal.h"

/* 64 kB segments, min_wal_size two of them. */
static walrus *open_small_warn(const char *dir, const char *max_wal_size, const char *wal_buffers,
                               const char *checkpoint_warning)
{
	walrus_opts *o = walrus_opts_new();
	const char *set[][2] = {{"create_if_missing", "on"},
	                        {"supervisor_linger", "50ms"},
	                        {"wal_segment_size", "64kB"},
	                        {"max_wal_size", max_wal_size},
	                        {"min_wal_size", "128kB"},
	                        {"wal_buffers", wal_buffers},
	                        {"checkpoint_warning", checkpoint_warning}};
	for (size_t i = 0; i < WR_ARRAY_LEN(set); i++)
		ck_assert_int_eq(walrus_opts_set(o, set[i][0], set[i][1]), WALRUS_OK);
	return tu_open(dir, o);
}

static walrus *open_small_with(const char *dir, const char *max_wal_size, const char *wal_buffers)
{
	return open_small_warn(dir, max_wal_size, wal_buffers, "30s");
}

static walrus *open_small(const char *dir)
{
	return open_small_with(dir, "512kB", "256kB");
}

static int count_segments(const char *dir)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/wal", dir);
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;
	while ((e = readdir(d)) != NULL)
		n += strlen(e->d_name) == 16;
	closedir(d);
	return n;
}

static wr_lsn insert_noops(int n, size_t size)
{
	static char buf[8192];
	wr_lsn end = 0;
	for (int i = 0; i < n; i++) {
		memset(buf, i, size);
		wal_begin();
		wal_register_data(buf, size);
		end = wal_insert(RM_XLOG, XLOG_NOOP);
		if (i % 50 == 0)
			wal_flush_to(end);
	}
	wal_flush_to(end);
	return end;
}

static bool log_has(const char *dir, const char *needle)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", dir, WR_LOG_FILE);
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return false;
	char line[2048];
	bool found = false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, needle) != NULL;
	fclose(f);
	return found;
}

/* ~4 MB of WAL (60+ segments of 64 kB), then waits for a checkpoint WAL
 * volume started to land past its first MB; *@c: the control file then. */
static void write_until_wal_checkpoint(const char *dir, wal_control *c)
{
	wal_control c0;
	ck_assert_int_eq(wal_control_read(dir, &c0), WALRUS_OK);
	insert_noops(1000, 4000);
	for (int i = 0; i < 1000; i++) {
		ck_assert_int_eq(wal_control_read(dir, c), WALRUS_OK);
		if (c->checkpoint_lsn > c0.checkpoint_lsn + 1024 * 1024)
			break;
		usleep(10000);
	}
	ck_assert_uint_gt(c->checkpoint_lsn, c0.checkpoint_lsn + 1024 * 1024);
}

START_TEST(wal_volume_checkpoints_and_recycles)
{
	const char *dir = tu_tmpdir("walrus-iwal");
	walrus *db = open_small(dir);
	wal_control c1;
	write_until_wal_checkpoint(dir, &c1);
	ck_assert_uint_eq(c1.state, WAL_DB_IN_PRODUCTION);
	/* Counted as WAL volume's (stats: checkpoints.wal), not as timed ones. */
	ck_assert_uint_ge(atomic_load(&ckpt_shared_state()->num_wal), 1);
	ck_assert_uint_eq(atomic_load(&ckpt_shared_state()->num_timed), 0);
	/* Old segments were recycled or removed: far fewer than were written.
	 * Counted after one more checkpoint: the volume-triggered ones run
	 * behind the inserts (under ASan, one segment past the bound). */
	ck_assert_int_eq(walrus_checkpoint(db), WALRUS_OK);
	ck_assert_int_le(count_segments(dir), 24);
	wal_stats st;
	wal_get_stats(&st);
	ck_assert_uint_gt(st.segments_recycled + st.segments_removed, 0);
	tu_close_and_wait(db);
	ck_assert(log_has(dir, "checkpoint complete (wal)"));
	/* Seconds apart, against checkpoint_warning's 30 s. */
	ck_assert(log_has(dir, "WARNING:  checkpoints are occurring too frequently"));
	/* Settled by the shutdown checkpoint: min_wal_size (two segments) only,
	 * not the future segments the busy cycles recycled. */
	ck_assert_int_le(count_segments(dir), 2);
}
END_TEST

/* With checkpoint_warning=0 the same checkpoints are not warned about. */
START_TEST(checkpoint_warning_off)
{
	const char *dir = tu_tmpdir("walrus-iwal");
	walrus *db = open_small_warn(dir, "512kB", "256kB", "0");
	wal_control c1;
	write_until_wal_checkpoint(dir, &c1);
	tu_close_and_wait(db);
	ck_assert(log_has(dir, "checkpoint complete (wal)"));
	ck_assert(!log_has(dir, "too frequently"));
}
END_TEST

START_TEST(async_commit_flushed_by_wal_writer)
{
	const char *dir = tu_tmpdir("walrus-iwal");
	walrus *db = open_small(dir);
	char buf[100] = {1};
	wal_begin();
	wal_register_data(buf, sizeof(buf));
	wr_lsn end = wal_insert(RM_XLOG, XLOG_NOOP);
	wal_flush_async(end);
	/* Nobody here flushes: the WAL writer does, within wal_writer_delay. */
	for (int i = 0; i < 500 && wal_flushed_lsn() < end; i++)
		usleep(10000);
	ck_assert_uint_ge(wal_flushed_lsn(), end);
	tu_close_and_wait(db);
}
END_TEST

START_TEST(clean_shutdown_leaves_shutdown_checkpoint)
{
	const char *dir = tu_tmpdir("walrus-iwal");
	walrus *db = open_small(dir);
	insert_noops(100, 100);
	tu_close_and_wait(db);
	wal_control c;
	ck_assert_int_eq(wal_control_read(dir, &c), WALRUS_OK);
	ck_assert_uint_eq(c.state, WAL_DB_SHUTDOWN);
	ck_assert_uint_eq(c.checkpoint_lsn, c.redo_lsn); /* nothing to replay */
	ck_assert(log_has(dir, "checkpoint complete (shutdown)"));
}
END_TEST

START_TEST(flushed_records_survive_kill9)
{
	const char *dir = tu_tmpdir("walrus-iwal");
	walrus *db = open_small(dir);
	pid_t sup = walrus_supervisor_pid(db);
	wr_lsn end = insert_noops(300, 1000);
	ck_assert_uint_ge(wal_flushed_lsn(), end);
	kill(sup, SIGKILL);
	tu_wait_gone(sup);
	ck_assert_int_eq(walrus_close(db), WALRUS_OK);
	/* A process killed while creating a segment leaves its temp file:
	 * recovery removes it (and nothing else). */
	char tmp[4200], other[4200];
	snprintf(tmp, sizeof(tmp), "%s/wal/00000000DEAD0000.tmp.4242", dir);
	snprintf(other, sizeof(other), "%s/wal/notes.tmp.1", dir);
	ck_assert_int_eq(tu_write_file(tmp, "x", 1), 0);
	ck_assert_int_eq(tu_write_file(other, "x", 1), 0);
	db = open_small(dir);
	/* Recovery continued the stream after our records. */
	ck_assert_uint_gt(wal_insert_lsn(), end);
	ck_assert_int_ne(access(tmp, F_OK), 0);
	ck_assert_int_eq(access(other, F_OK), 0);
	/* Ours at least: an auxiliary process of the killed instance may have
	 * been zero-filling a segment of its own when it saw the supervisor gone. */
	ck_assert(log_has(dir, "temporary WAL segment(s) left by a crash"));
	ck_assert_int_eq(unlink(other), 0);
	tu_close_and_wait(db);
	wal_control c;
	ck_assert_int_eq(wal_control_read(dir, &c), WALRUS_OK);
	ck_assert_uint_gt(c.redo_lsn, end); /* a checkpoint after them all */
}
END_TEST

START_TEST(damaged_control_file_stops_start)
{
	const char *dir = tu_tmpdir("walrus-iwal");
	tu_close_and_wait(open_small(dir));
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", dir, WAL_CONTROL_FILE);
	tu_flip_bit(path, 40, 2);
	tu_open_fails(dir, NULL, WALRUS_ECORRUPT, "walrus.control");
}
END_TEST

START_TEST(missing_wal_segment_stops_start)
{
	const char *dir = tu_tmpdir("walrus-iwal");
	walrus *db = open_small(dir);
	wal_control c;
	ck_assert_int_eq(wal_control_read(dir, &c), WALRUS_OK);
	tu_close_and_wait(db);
	/* Remove the segment holding the last checkpoint record. */
	char path[4200];
	snprintf(path, sizeof(path), "%s/wal/%016llX", dir,
	         (unsigned long long)(c.checkpoint_lsn - c.checkpoint_lsn % (64 * 1024)));
	ck_assert_int_eq(unlink(path), 0);
	tu_open_fails(dir, NULL, WALRUS_ECORRUPT, "checkpoint");
}
END_TEST

/* The end of the WAL of a cleanly stopped instance: after its shutdown checkpoint. */
static wr_lsn wal_end_after_shutdown(const char *dir, wal_control *c)
{
	char waldir[4200];
	wal_reader *r;
	wal_decoded *rec;
	ck_assert_int_eq(wal_control_read(dir, c), WALRUS_OK);
	snprintf(waldir, sizeof(waldir), "%s/wal", dir);
	ck_assert_int_eq(wal_reader_open(waldir, c->wal_seg_size, c->sysid, &r), WALRUS_OK);
	ck_assert_int_eq(wal_read_record(r, c->checkpoint_lsn, &rec), WALRUS_OK);
	wr_lsn end = rec->end;
	wal_reader_close(r);
	return end;
}

/* Sets the magic of the WAL page holding @lsn; returns the one it had. */
static uint16_t set_page_magic(const char *dir, uint64_t seg, wr_lsn lsn, uint16_t magic)
{
	char path[4200];
	wr_lsn page = lsn - lsn % WAL_PAGE_SIZE;
	snprintf(path, sizeof(path), "%s/wal/%016llX", dir,
	         (unsigned long long)(page - page % seg));
	int fd = open(path, O_RDWR);
	ck_assert_int_ge(fd, 0);
	uint16_t old;
	ck_assert_int_eq(pread(fd, &old, 2, (off_t)(page % seg)), 2);
	ck_assert_int_eq(pwrite(fd, &magic, 2, (off_t)(page % seg)), 2);
	ck_assert_int_eq(close(fd), 0);
	return old;
}

/*
 * WAL that a later walrus wrote (its pages say a later WAL format) stops
 * the start with WALRUS_EVERSION and the format in the message and the
 * log, and changes nothing: with the page as it was, the instance starts.
 */
START_TEST(wal_of_later_format_stops_start)
{
	const char *dir = tu_tmpdir("walrus-iwal");
	walrus *db = open_small(dir);
	ck_assert_int_eq(walrus_put(db, "k", 1, "v", 1, WALRUS_SYNC), WALRUS_OK);
	tu_close_and_wait(db);
	wal_control c;
	wal_end_after_shutdown(dir, &c);
	uint16_t was =
	    set_page_magic(dir, c.wal_seg_size, c.checkpoint_lsn, WAL_FORMAT_MAGIC(WAL_FORMAT + 1));
	char what[64];
	snprintf(what, sizeof(what), "has WAL format %u, which needs", WAL_FORMAT + 1);
	tu_open_fails(dir, NULL, WALRUS_EVERSION, what);
	ck_assert(log_has(dir, what));
	ck_assert(!log_has(dir, "PANIC"));
	set_page_magic(dir, c.wal_seg_size, c.checkpoint_lsn, was);
	db = open_small(dir);
	void *v = NULL;
	size_t vlen = 0;
	ck_assert_int_eq(walrus_get(db, "k", 1, &v, &vlen), WALRUS_OK);
	ck_assert_int_eq(vlen, 1);
	walrus_free(v);
	tu_close_and_wait(db);
}
END_TEST

/*
 * A key-value record with a page op this walrus does not know (as a newer
 * walrus would write): recovery refuses to start with WALRUS_EVERSION
 * naming the op and the record's LSN, without a PANIC.
 */
START_TEST(unknown_kv_page_op_stops_start)
{
	const char *dir = tu_tmpdir("walrus-iwal");
	walrus *db = open_small(dir);
	ck_assert_int_eq(walrus_put(db, "k", 1, "v", 1, WALRUS_SYNC), WALRUS_OK);
	tu_close_and_wait(db);
	wal_control c;
	wr_lsn end = wal_end_after_shutdown(dir, &c);
	char waldir[4200];
	snprintf(waldir, sizeof(waldir), "%s/wal", dir);
	wal_file_writer *fw;
	ck_assert_int_eq(wal_fw_open(waldir, c.wal_seg_size, c.sysid, end, c.checkpoint_lsn, &fw),
	                 WALRUS_OK);
	static char page[WR_PAGE_SIZE];
	const uint8_t op[KVOP_HDR] = {99, 0, 0, 0, 0}; /* code 99, slot 0, no data */
	wal_assembled a = {0};
	wal_begin();
	wal_register_block(0, KV_REL, 0, page, 0);
	wal_register_block_data(0, op, sizeof(op));
	ck_assert_int_eq(wal_assemble(&a, RM_KV, KV_INFO_CHANGE | KV_FIRST, 0, false, 0),
	                 WALRUS_OK);
	wr_lsn start, rec_end;
	ck_assert_int_eq(wal_fw_append(fw, &a, &start, &rec_end), WALRUS_OK);
	ck_assert_int_eq(wal_fw_flush(fw, true), WALRUS_OK);
	wal_fw_close(fw);
	free(a.buf);
	char what[128];
	snprintf(what, sizeof(what), "key-value record at " WAL_LSN_FMT " has page op 99",
	         WAL_LSN_ARGS(start));
	tu_open_fails(dir, NULL, WALRUS_EVERSION, what);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "a newer walrus wrote it"));
	ck_assert(log_has(dir, what));
	ck_assert(!log_has(dir, "PANIC"));
}
END_TEST

static bool segment_exists(const char *dir, uint64_t start)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/wal/%016llX", dir, (unsigned long long)start);
	return access(path, F_OK) == 0;
}

/* Whether the WAL writer has segments ready up to @ahead past @end's. */
static bool ready_past(const char *dir, wr_lsn end, uint32_t ahead, uint64_t seg)
{
	for (uint32_t i = 1; i <= ahead; i++)
		if (!segment_exists(dir, end - end % seg + i * seg))
			return false;
	return true;
}

/*
 * A process writing WAL into a segment the WAL writer has not made yet
 * zero-fills it itself: counted, and the WAL writer keeps twice as many
 * ready from then on (up to an eighth of max_wal_size).  The WAL writer is
 * stopped while the test writes, so every new segment is made that way.
 */
START_TEST(on_demand_segments_grow_preallocation)
{
	const uint64_t seg = 64 * 1024;
	const char *dir = tu_tmpdir("walrus-iwal");
	walrus *db = open_small_with(dir, "4MB", "128kB");
	pid_t walw = 0;
	for (int i = 0;
	     i < 2000 && tu_children(walrus_supervisor_pid(db), "walrus-walw", &walw, 1) != 1; i++)
		usleep(10000);
	ck_assert_int_gt(walw, 0);
	wal_stats s0, s1, s2;
	wal_get_stats(&s0);
	ck_assert_uint_eq(s0.prealloc_ahead, 1);
	/* Stopped while it sleeps on its latch: it holds no lock then. */
	tu_wait_in_syscall(walw, SYS_futex, NULL);
	ck_assert_int_eq(kill(walw, SIGSTOP), 0);
	wr_lsn end = insert_noops(100, 4000); /* ~400 kB: six segments and more */
	wal_get_stats(&s1);
	ck_assert_int_eq(kill(walw, SIGCONT), 0);
	uint64_t made = s1.segments_on_demand - s0.segments_on_demand;
	ck_assert_uint_ge(made, 3);
	ck_assert_uint_eq(s1.prealloc_ahead, 8); /* 1, doubled three times: 4MB / 64kB / 8 */
	for (int i = 0; i < 2000 && !ready_past(dir, end, s1.prealloc_ahead, seg); i++)
		usleep(10000);
	ck_assert(ready_past(dir, end, s1.prealloc_ahead, seg));
	/* Four more segments' worth finds them all ready. */
	insert_noops(64, 4000);
	wal_get_stats(&s2);
	ck_assert_uint_eq(s2.segments_on_demand, s1.segments_on_demand);
	tu_close_and_wait(db);
	/* The shutdown gives the ready segments back: min_wal_size is kept. */
	ck_assert_int_le(count_segments(dir), 2);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("instance-wal");
	TCase *t = tcase_create("wal");
	tcase_set_timeout(t, 240);
	tcase_add_test(t, wal_volume_checkpoints_and_recycles);
	tcase_add_test(t, checkpoint_warning_off);
	tcase_add_test(t, async_commit_flushed_by_wal_writer);
	tcase_add_test(t, on_demand_segments_grow_preallocation);
	tcase_add_test(t, clean_shutdown_leaves_shutdown_checkpoint);
	tcase_add_test(t, flushed_records_survive_kill9);
	tcase_add_test(t, damaged_control_file_stops_start);
	tcase_add_test(t, missing_wal_segment_stops_start);
	tcase_add_test(t, wal_of_later_format_stops_start);
	tcase_add_test(t, unknown_kv_page_op_stops_start);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	return tu_run(suite());
}
