/*
 * bench_ckpt.c - `walrus bench --workload checkpoint`: the checkpoint's
 * write and sync phases measured on their own.
 *
 * A relation of --pages pages (default: 3/4 of shared_buffers) is created
 * unlogged, then read back in a random order after the pool was flushed
 * through another relation, so buffer numbers do not follow block numbers
 * (otherwise the pool's order would already be the file's, and sorting
 * would change nothing).  Each of --rounds rounds dirties every page (in a
 * random order) and requests an immediate checkpoint, then reads the
 * checkpoint's own figures: pages written, write phase, sync phase, total.
 * --num N is --rounds N; --duration S runs rounds until S seconds have
 * passed (at least one), as every bench workload takes one or the other.
 * Run it once per configuration (the options are the instance's):
 *   -o checkpoint_sort=on|off  -o checkpoint_flush_after=0|256kB
 *   -o io_method=sync|io_uring
 * scripts/bench_ckpt.sh runs the matrix next to fio on the same disk.
 */
#include "tool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/buffer.h"
#include "checkpointer/checkpointer.h"
#include "engine/engine.h"

#define CK_REL   1100u /* the pages checkpointed */
#define CK_FLUSH 1101u /* pushes CK_REL out of the pool */

typedef struct ck_args {
	uint64_t pages;
	int rounds;        /* done when duration_s is 0 */
	double duration_s; /* rounds until this many seconds have passed; < 0: not given */
	bool json;
} ck_args;

static uint64_t ck_rng(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static int ck_extend(wr_relid rel, uint64_t pages)
{
	int rc = smgr_exists(rel) ? WALRUS_OK : smgr_create(rel);
	for (uint64_t i = 0; rc == WALRUS_OK && i < pages; i++) {
		int buf;
		wr_blkno blk;
		rc = buf_extend(rel, &buf, &blk);
		if (rc == WALRUS_OK) {
			buf_unlock(buf);
			buf_release(buf);
		}
	}
	return rc;
}

static int ck_touch(wr_relid rel, wr_blkno blk, bool dirty, uint64_t stamp)
{
	int buf;
	int rc = buf_read(rel, blk, &buf);
	if (rc != WALRUS_OK)
		return rc;
	if (dirty) {
		buf_lock(buf, true);
		memcpy((char *)buf_page(buf) + WR_PAGE_HEADER_SIZE, &stamp, sizeof(stamp));
		buf_mark_dirty(buf);
		buf_unlock(buf);
	}
	buf_release(buf);
	return WALRUS_OK;
}

static void ck_shuffle(wr_blkno *order, uint64_t n, uint64_t *seed)
{
	for (uint64_t i = 0; i < n; i++)
		order[i] = (wr_blkno)i;
	for (uint64_t i = n; i > 1; i--) {
		uint64_t j = ck_rng(seed) % i;
		wr_blkno t = order[i - 1];
		order[i - 1] = order[j];
		order[j] = t;
	}
}

/* The relation, clean on disk, in the pool in a random buffer order. */
static int ck_prepare(uint64_t pages, wr_blkno *order, uint64_t *seed)
{
	uint32_t nbuf = buf_nbuffers();
	int rc = ck_extend(CK_REL, pages);
	if (rc == WALRUS_OK)
		rc = ck_extend(CK_FLUSH, nbuf);
	if (rc == WALRUS_OK)
		rc = ckpt_request(CKPT_IMMEDIATE | CKPT_FORCE, true);
	for (uint32_t b = 0; rc == WALRUS_OK && b < nbuf; b++)
		rc = ck_touch(CK_FLUSH, b, false, 0);
	ck_shuffle(order, pages, seed);
	for (uint64_t i = 0; rc == WALRUS_OK && i < pages; i++)
		rc = ck_touch(CK_REL, order[i], false, 0);
	return rc;
}

/* Another round? --duration: until it has passed (one at least); else --rounds. */
static bool ck_more(const ck_args *a, int done, uint64_t t0)
{
	if (a->duration_s >= 0)
		return done == 0 || (double)(wr_now_ns() - t0) < a->duration_s * 1e9;
	return done < a->rounds;
}

static int ck_parse(int argc, char **argv, ck_args *a)
{
	*a = (ck_args){.rounds = 3, .duration_s = -1};
	for (int i = 1; i < argc; i++) {
		char *end = NULL;
		if (strcmp(argv[i], "--json") == 0)
			a->json = true;
		else if (strcmp(argv[i], "--workload") == 0 && i + 1 < argc)
			i++;
		else if (strcmp(argv[i], "--pages") == 0 && i + 1 < argc)
			a->pages = strtoull(argv[++i], &end, 10);
		else if ((strcmp(argv[i], "--rounds") == 0 || strcmp(argv[i], "--num") == 0) &&
		         i + 1 < argc)
			a->rounds = (int)strtol(argv[++i], &end, 10);
		else if (strcmp(argv[i], "--duration") == 0 && i + 1 < argc)
			a->duration_s = strtod(argv[++i], &end);
		else
			goto bad;
		if (end != NULL && (*end != '\0' || end == argv[i]))
			goto bad;
	}
	if (a->rounds >= 1 && a->rounds <= 1000 && (a->duration_s == -1 || a->duration_s > 0) &&
	    a->duration_s <= 86400.0 * 7)
		return 0;
bad:
	fprintf(stderr, "usage: walrus -D DIR [-o ...] bench --workload checkpoint [--pages N] "
	                "[--rounds R | --num R | --duration S] [--json]\n");
	return TOOL_EXIT_USAGE;
}

typedef struct ck_total {
	uint64_t written;
	double write_s, sync_s, total_s;
	uint32_t files;
} ck_total;

static int ck_round(uint64_t pages, wr_blkno *order, uint64_t *seed, int round, ck_total *t)
{
	ck_shuffle(order, pages, seed);
	int rc = WALRUS_OK;
	for (uint64_t i = 0; rc == WALRUS_OK && i < pages; i++)
		rc = ck_touch(CK_REL, order[i], true, (uint64_t)round);
	if (rc == WALRUS_OK)
		rc = ckpt_request(CKPT_IMMEDIATE | CKPT_FORCE, true);
	if (rc != WALRUS_OK)
		return rc;
	ckpt_result r = ckpt_shared_state()->last;
	t->written += r.bufs_written;
	t->write_s += r.write_s;
	t->sync_s += r.sync_s;
	t->total_s += r.write_s + r.sync_s;
	t->files = r.sync_files;
	return WALRUS_OK;
}

static void ck_report(tool_ctx *ctx, const ck_args *a, uint64_t pages, const ck_total *t)
{
	const wr_options *o = &engine_sh()->opts; /* the instance's, not ours */
	(void)ctx;
	double mb = (double)t->written * WR_PAGE_SIZE / 1048576.0;
	double wr = t->write_s > 0 ? mb / t->write_s : 0,
	       all = t->total_s > 0 ? mb / t->total_s : 0;
	const char *io = o->io_method == WR_IO_SYNC ? "sync" : "io_uring";
	if (a->json) {
		printf("{\"workload\":\"checkpoint\",\"pages\":%llu,\"page_size\":%d,\"rounds\":%d,"
		       "\"written\":%llu,"
		       "\"sort\":%s,\"flush_after_kb\":%lld,\"io_method\":\"%s\",\"write_s\":%.4f,"
		       "\"sync_s\":%.4f,\"total_s\":%.4f,\"write_mb_s\":%.1f,\"total_mb_s\":%.1f,"
		       "\"files\":%u}\n",
		       (unsigned long long)pages, WR_PAGE_SIZE, a->rounds,
		       (unsigned long long)t->written, o->checkpoint_sort ? "true" : "false",
		       (long long)(o->checkpoint_flush_after / 1024), io, t->write_s, t->sync_s,
		       t->total_s, wr, all, t->files);
		return;
	}
	printf("checkpoint: %llu pages x %d rounds (sort=%s, flush_after=%lldkB, io_method=%s)\n"
	       "  written %llu pages (%.1f MB); write phase %.3f s (%.1f MB/s); sync %.3f s; "
	       "write+sync %.3f s (%.1f MB/s)\n",
	       (unsigned long long)pages, a->rounds, o->checkpoint_sort ? "on" : "off",
	       (long long)(o->checkpoint_flush_after / 1024), io, (unsigned long long)t->written,
	       mb, t->write_s, wr, t->sync_s, t->total_s, all);
}

int cmd_bench_ckpt(tool_ctx *ctx, int argc, char **argv)
{
	ck_args a;
	int ex = ck_parse(argc, argv, &a);
	if (ex != 0)
		return ex;
	walrus *db;
	ex = tool_open(ctx, true, &db);
	if (ex != 0)
		return ex;
	uint64_t pages = a.pages ? a.pages : (uint64_t)buf_nbuffers() * 3 / 4;
	wr_blkno *order = malloc(pages * sizeof(*order));
	uint64_t seed = 0x2545F4914F6CDD1DULL;
	ck_total t = {0};
	int rc = order ? ck_prepare(pages, order, &seed) : WALRUS_ENOMEM;
	uint64_t t0 = wr_now_ns();
	int done = 0;
	while (rc == WALRUS_OK && ck_more(&a, done, t0))
		rc = ck_round(pages, order, &seed, ++done, &t);
	a.rounds = done;
	free(order);
	if (rc == WALRUS_OK)
		ck_report(ctx, &a, pages, &t);
	else
		ex = tool_fail(rc, "bench checkpoint");
	int crc = walrus_close(db);
	return ex != 0 ? ex : (crc == WALRUS_OK ? 0 : tool_fail(crc, "close"));
}
