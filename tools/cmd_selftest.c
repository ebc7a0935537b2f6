/*
 * cmd_selftest.c - `walrus selftest`: the foundation's I/O path at work on
 * a real data directory.  Attaches to (or starts) the instance, writes pages
 * with checksums through the storage layer and the fd cache, makes them
 * durable, reads them back, damages one on disk and shows that the damage is
 * detected, not returned.  It works in a scratch relation it removes after.
 */
#include "tool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "storage/storage.h"

#define SELFTEST_REL 4000000000u

static double secs(uint64_t ns)
{
	return (double)ns / 1e9;
}

static void fill_page(char *page, wr_blkno b)
{
	page_init(page, 0, 1);
	wr_page_header *h = (wr_page_header *)page;
	for (size_t i = WR_PAGE_HEADER_SIZE; i < WR_PAGE_SIZE; i++)
		page[i] = (char)(((size_t)b * 31 + i) & 0xff);
	h->lower = h->upper; /* the page is "full" of our pattern */
}

static void crc_speed(void)
{
	size_t len = 64u << 20;
	char *buf = malloc(len);
	if (buf == NULL)
		return;
	memset(buf, 0x5a, len);
	uint64_t t0 = wr_now_ns();
	volatile uint32_t c = crc32c(0, buf, len);
	uint64_t t1 = wr_now_ns();
	c = crc32c_sw(0, buf, len / 4);
	uint64_t t2 = wr_now_ns();
	(void)c;
	printf("  crc32c: %.1f GB/s (%s), %.1f GB/s (table)\n", (double)len / (double)(t1 - t0),
	       crc32c_hw_available() ? "sse4.2" : "no sse4.2: table",
	       (double)len / 4.0 / (double)(t2 - t1));
	free(buf);
}

static int write_pages(smgr_rel *r, int n, char *page)
{
	uint64_t t0 = wr_now_ns();
	for (int b = 0; b < n; b++) {
		fill_page(page, (wr_blkno)b);
		int rc = smgr_extend(r, (wr_blkno)b, page);
		if (rc != WALRUS_OK)
			return tool_fail(rc, "extend");
	}
	uint64_t t1 = wr_now_ns();
	smgr_writeback(r, 0, (wr_blkno)n);
	smgr_immedsync(r);
	uint64_t t2 = wr_now_ns();
	double mib = (double)n * WR_PAGE_SIZE / 1048576.0;
	printf("  wrote %d pages (%.1f MiB) in %.3f s (%.0f MiB/s), then fsync in %.3f s\n", n, mib,
	       secs(t1 - t0), mib / secs(t1 - t0 + 1), secs(t2 - t1));
	return 0;
}

static int read_pages(smgr_rel *r, int n, char *page, char *expect)
{
	uint64_t t0 = wr_now_ns();
	for (int b = 0; b < n; b++) {
		int rc = smgr_read(r, (wr_blkno)b, page);
		if (rc != WALRUS_OK)
			return tool_fail(rc, "read");
		fill_page(expect, (wr_blkno)b);
		if (memcmp(page + WR_PAGE_HEADER_SIZE, expect + WR_PAGE_HEADER_SIZE,
		           WR_PAGE_SIZE - WR_PAGE_HEADER_SIZE) != 0) {
			fprintf(stderr, "walrus selftest: block %d read back different\n", b);
			return TOOL_EXIT_DAMAGE;
		}
	}
	printf("  read back %d pages, every checksum valid, in %.3f s\n", n,
	       secs(wr_now_ns() - t0));
	return 0;
}

static int damage_and_detect(smgr_rel *r, char *page)
{
	char path[PATH_MAX];
	const wr_blkno victim = 7;
	smgr_segment_path(SELFTEST_REL, victim / smgr_blocks_per_segment(), path, sizeof(path));
	off_t off = (off_t)(victim % smgr_blocks_per_segment()) * WR_PAGE_SIZE + 4000;
	int fd = open(path, O_RDWR | O_CLOEXEC);
	unsigned char c;
	if (fd < 0 || pread(fd, &c, 1, off) != 1) {
		perror("walrus selftest: open/pread");
		if (fd >= 0)
			close(fd);
		return TOOL_EXIT_ENGINE;
	}
	c ^= 1u << 3;
	ssize_t w = pwrite(fd, &c, 1, off);
	close(fd);
	if (w != 1) {
		perror("walrus selftest: pwrite");
		return TOOL_EXIT_ENGINE;
	}
	int rc = smgr_read(r, victim, page);
	if (rc != WALRUS_ECORRUPT) {
		fprintf(stderr, "walrus selftest: a flipped bit was NOT detected (rc %d)\n", rc);
		return TOOL_EXIT_DAMAGE;
	}
	printf("  flipped bit 3 of byte 4000 in block %u on disk; the read refused it:\n    %s\n",
	       victim, walrus_errmsg());
	fill_page(page, victim);
	rc = smgr_write(r, victim, page);
	if (rc == WALRUS_OK)
		rc = smgr_read(r, victim, page);
	if (rc != WALRUS_OK)
		return tool_fail(rc, "rewrite");
	printf("  rewrote block %u: valid again\n", victim);
	return 0;
}

static int run(const char *abs, int npages)
{
	char *page = aligned_alloc(4096, WR_PAGE_SIZE), *expect = aligned_alloc(4096, WR_PAGE_SIZE);
	smgr_rel *r;
	int rc = page && expect ? WALRUS_OK : WALRUS_ENOMEM;
	if (rc == WALRUS_OK)
		rc = smgr_init(abs, engine_sh()->opts.data_segment_size);
	if (rc == WALRUS_OK && smgr_exists(SELFTEST_REL))
		rc = smgr_unlink(SELFTEST_REL);
	if (rc == WALRUS_OK)
		rc = smgr_create(SELFTEST_REL);
	if (rc == WALRUS_OK)
		rc = smgr_open(SELFTEST_REL, &r);
	int ex = rc != WALRUS_OK ? tool_fail(rc, "scratch relation") : 0;
	if (ex == 0)
		ex = write_pages(r, npages, page);
	if (ex == 0)
		ex = read_pages(r, npages, page, expect);
	if (ex == 0)
		ex = damage_and_detect(r, page);
	if (rc == WALRUS_OK && (rc = smgr_unlink(SELFTEST_REL)) != WALRUS_OK && ex == 0)
		ex = tool_fail(rc, "remove scratch relation");
	smgr_shutdown();
	free(page);
	free(expect);
	return ex;
}

int cmd_selftest(tool_ctx *ctx, int argc, char **argv)
{
	int npages = 2048;
	walrus *db;

	if (tool_wants_help(argc, argv)) {
		printf("usage: walrus -D DIR selftest [--pages N]\n\n"
		       "Writes N pages (default 2048) with checksums, fsyncs, reads them back,\n"
		       "damages one on disk and shows the checksum failure.\n");
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--pages") == 0 && i + 1 < argc) {
			npages = atoi(argv[++i]);
		} else {
			fprintf(stderr, "walrus selftest: unexpected argument \"%s\"\n", argv[i]);
			return TOOL_EXIT_USAGE;
		}
	}
	if (npages < 8 || npages > 1 << 20) {
		fprintf(stderr, "walrus selftest: --pages must be between 8 and 1048576\n");
		return TOOL_EXIT_USAGE;
	}
	int ex = tool_open(ctx, true, &db);
	if (ex != 0)
		return ex;
	wr_log_set_stderr(WR_ERROR); /* the checksum WARNING is expected: we print it ourselves */
	printf("walrus selftest on \"%s\"\n", engine_sh()->datadir);
	printf("  instance: supervisor pid %d, generation %llu\n", walrus_supervisor_pid(db),
	       (unsigned long long)client_generation());
	crc_speed();
	ex = run(engine_sh()->datadir, npages);
	int rc = walrus_close(db);
	if (ex == 0 && rc != WALRUS_OK)
		ex = tool_fail(rc, "close");
	if (ex == 0)
		printf("selftest passed\n");
	return ex;
}
