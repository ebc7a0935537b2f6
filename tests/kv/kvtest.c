/*
 * kvtest.c - the kv suites' instance without a supervisor.  See kvtest.h.
 */
#include "kvtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fdcache/fdcache.h"

wr_options kt_opts;
const char *kt_dir;
kt_shared *kt_sh;
bool kt_skip_redo_end;
bool kt_redo_via_storage;

void kt_init(const char *prefix, int64_t nbuffers)
{
	wr_log_set_stderr(WR_ERROR);
	wr_opts_defaults(&kt_opts);
	ck_assert_int_eq(wr_opts_set(&kt_opts, "wal_segment_size", "4MB"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_set(&kt_opts, "wal_buffers", "1MB"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_set(&kt_opts, "data_segment_size", "1MB"), WALRUS_OK);
	kt_opts.shared_buffers = nbuffers * WR_PAGE_SIZE;
	kt_dir = tu_tmpdir(prefix);
	ck_assert_int_eq(fdc_init(200), WALRUS_OK);
	ck_assert_int_eq(smgr_init(kt_dir, kt_opts.data_segment_size), WALRUS_OK);
	int rc = wal_bootstrap(kt_dir, &kt_opts);
	ck_assert_msg(rc == WALRUS_OK, "wal_bootstrap: %s", walrus_errmsg());
	kt_start();
}

static void create_shm(void)
{
	int fd;
	size_t sizes[] = {wal_shmem_size(&kt_opts, KT_SLOTS), buf_shmem_size(&kt_opts),
	                  kv_shmem_size(), kv_mvcc_shmem_size(&kt_opts), sizeof(kt_shared)};
	ck_assert_int_eq(shm_create(shm_size_for(sizes, 5), WR_HUGE_OFF, &fd), WALRUS_OK);
	close(fd);
	ck_assert_int_eq(wal_shmem_init(&kt_opts, kt_dir, KT_SLOTS), WALRUS_OK);
	ck_assert_int_eq(buf_shmem_init(&kt_opts), WALRUS_OK);
	ck_assert_int_eq(kv_shmem_init(), WALRUS_OK);
	ck_assert_int_eq(kv_mvcc_shmem_init(&kt_opts), WALRUS_OK);
	kt_sh = shm_alloc("kvtest", sizeof(kt_shared));
	ck_assert_ptr_nonnull(kt_sh);
	ck_assert_int_eq(wal_attach(0), WALRUS_OK);
	ck_assert_int_eq(buf_attach(), WALRUS_OK);
}

/* Recovery as the startup process does it, with the kv resource manager. */
static void recover(void)
{
	static wal_recovery_result res;
	wal_control c;
	wal_register_builtin_rmgrs();
	kv_register_rmgr();
	wal_redo_set_pages(kt_redo_via_storage ? NULL : &buf_redo_pages);
	int rc = wal_recover(kt_dir, &kt_opts, &res);
	ck_assert_msg(rc == WALRUS_OK, "wal_recover: %s", walrus_errmsg());
	if (!kt_skip_redo_end)
		kv_redo_end();
	ck_assert_int_eq(wal_control_read(kt_dir, &c), WALRUS_OK);
	ck_assert_int_eq(
	    wal_start_insert_at(res.end, res.last_lsn, res.last_redo, c.sysid, res.last_page),
	    WALRUS_OK);
}

void kt_start(void)
{
	create_shm();
	recover();
	int rc = kv_create_if_missing();
	ck_assert_msg(rc == WALRUS_OK, "kv_create_if_missing: %s", walrus_errmsg());
}

void kt_stop(void)
{
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
	wal_detach();
	shm_detach();
	kt_sh = NULL;
}

void kt_crash_restart(void)
{
	kt_stop();
	kt_start();
}

void kt_clean_restart(void)
{
	ck_assert_int_eq(buf_flush_all(), WALRUS_OK);
	kt_stop();
	kt_start();
}

/* The checkpointer's order with the buffer phase in: redo point, pages, record, control file. */
void kt_checkpoint(void)
{
	wal_control c;
	smgr_rel *r;
	wr_lsn start;
	ck_assert_int_eq(wal_control_read(kt_dir, &c), WALRUS_OK);
	wr_lsn redo = wal_set_redo_here();
	ck_assert_int_eq(buf_flush_all(), WALRUS_OK);
	ck_assert_int_eq(smgr_open(KV_REL, &r), WALRUS_OK);
	smgr_immedsync(r);
	wal_checkpoint_rec ck = {.redo = redo, .time_us = wr_wall_us(), .next_relid = c.next_relid};
	wal_begin();
	wal_register_data(&ck, sizeof(ck));
	wr_lsn end = wal_insert_at(RM_XLOG, XLOG_CHECKPOINT_ONLINE, &start);
	wal_flush_to(end);
	c.prev_checkpoint_lsn = c.checkpoint_lsn;
	c.checkpoint_lsn = start;
	c.redo_lsn = redo;
	c.state = WAL_DB_IN_PRODUCTION;
	ck_assert_int_eq(wal_control_write(kt_dir, &c), WALRUS_OK);
}

int kt_child_attach(int slot)
{
	if (wal_attach(slot) != WALRUS_OK || buf_attach() != WALRUS_OK || kv_attach() != WALRUS_OK)
		return 90;
	return 0;
}

int kt_child_done(void)
{
	if (buf_detach_check() != WALRUS_OK) {
		fprintf(stderr, "child %d: %s\n", (int)getpid(), walrus_errmsg());
		return 91;
	}
	return 0;
}

static void print_problem(void *arg, wr_blkno blk, const char *msg)
{
	(void)arg;
	fprintf(stderr, "verify: block %u: %s\n", blk, msg);
}

int kt_verify(kv_verify_result *r)
{
	return kv_verify(print_problem, NULL, r);
}

void kt_verify_clean(void)
{
	kv_verify_result r;
	int rc = kt_verify(&r);
	ck_assert_msg(rc == WALRUS_OK, "kv_verify: %d %s", rc, walrus_errmsg());
	ck_assert_uint_eq(r.errors, 0);
}
