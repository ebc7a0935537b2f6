/*
 * waltest.c - helpers shared by the WAL suites.  See waltest.h.
 */
#include "waltest.h"

#include <stdio.h>
#include <string.h>

/* The largest record data wt_insert takes. */
#define WT_MAX_LEN 40000

wr_options wt_opts;
char wt_waldir[4200];

void wt_base_opts(const char *name, const char *value)
{
	wr_opts_defaults(&wt_opts);
	ck_assert_int_eq(wr_opts_set(&wt_opts, "wal_segment_size", "64kB"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_set(&wt_opts, "max_wal_size", "1MB"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_set(&wt_opts, "min_wal_size", "128kB"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_set(&wt_opts, "wal_buffers", "64kB"), WALRUS_OK); /* 8 pages */
	if (name)
		ck_assert_int_eq(wr_opts_set(&wt_opts, name, value), WALRUS_OK);
}

void *wt_setup_wal(const char *dir, size_t extra)
{
	snprintf(wt_waldir, sizeof(wt_waldir), "%s/wal", dir);
	return tu_shm_wal_buffers_setup(&wt_opts, dir, WT_NSLOTS, false, extra);
}

/* The record's data: the payload, then bytes that depend on it and on their offset. */
static void fill(char *buf, const wt_payload *p)
{
	memcpy(buf, p, sizeof(*p));
	for (uint32_t i = sizeof(*p); i < p->len; i++)
		buf[i] = (char)(p->who * 31 + p->seq + i);
}

wr_lsn wt_insert(uint32_t who, uint32_t seq, uint32_t len, wr_lsn *start)
{
	static char buf[WT_MAX_LEN];
	wt_payload p = {who, seq, len, who ^ seq};
	/* The payload must fit, and the record in the static buffer. */
	ck_assert_uint_ge(len, sizeof(p));
	ck_assert_uint_le(len, sizeof(buf));
	fill(buf, &p);
	wal_begin();
	wal_register_data(buf, p.len);
	return wal_insert_at(RM_XLOG, XLOG_NOOP, start);
}

static bool payload_ok(const wal_decoded *r, wt_payload *out)
{
	static char buf[WT_MAX_LEN];
	if (r->main_len < sizeof(wt_payload))
		return false;
	memcpy(out, r->main_data, sizeof(*out));
	/* A damaged length must not run past buf. */
	if (out->len != r->main_len || out->len > sizeof(buf) ||
	    out->check != (out->who ^ out->seq))
		return false;
	fill(buf, out);
	return memcmp(buf, r->main_data, out->len) == 0;
}

int wt_read_all(uint32_t *per_who_next, int nwho)
{
	wal_reader *r;
	wal_decoded *rec;
	int n = 0;
	ck_assert_int_eq(
	    wal_reader_open(wt_waldir, (uint64_t)wt_opts.wal_segment_size, TU_SYSID, &r),
	    WALRUS_OK);
	int rc = wal_read_record(r, WAL_LONG_PHD, &rec);
	while (rc == WALRUS_OK) {
		wt_payload p;
		ck_assert_msg(payload_ok(rec, &p), "bad payload at " WAL_LSN_FMT,
		              WAL_LSN_ARGS(rec->lsn));
		ck_assert_int_lt((int)p.who, nwho);
		ck_assert_uint_eq(p.seq, per_who_next[p.who]); /* each once, in its order */
		per_who_next[p.who]++;
		n++;
		rc = wal_read_record(r, 0, &rec);
	}
	ck_assert_msg(rc == WALRUS_ENOTFOUND, "stream ended with %d: %s", rc, walrus_errmsg());
	wal_reader_close(r);
	return n;
}
