/*
 * cmd_waldump.c - `walrus waldump`: print the WAL's records, one per line,
 * or a summary per resource manager (--stats), like pg_waldump.
 *
 * It reads DIR/wal directly and needs no running instance, so it also
 * works on a directory that does not start: that is when it is needed.
 * The segment size comes from the oldest segment's long page header (the
 * WAL describes itself), or from -o wal_segment_size when that header is
 * unreadable.  The last line says why the dump stopped ("end: ..."); exit
 * 0 at a clean end of WAL, 2 when the WAL is damaged.
 */
#include "tool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "wal/wal.h"

typedef struct waldump_args {
	wr_lsn from; /* 0: the oldest segment's first record */
	bool stats;
	uint64_t limit; /* 0: no limit */
} waldump_args;

typedef struct waldump_stat {
	uint64_t records, bytes, fpis, fpi_raw, fpi_stored;
} waldump_stat;

static bool waldump_parse_lsn(const char *s, wr_lsn *out)
{
	char *end;
	errno = 0;
	unsigned long long hi = strtoull(s, &end, 16);
	if (errno != 0 || end == s || *end != '/' || hi > UINT32_MAX)
		return false;
	const char *lo_s = end + 1;
	unsigned long long lo = strtoull(lo_s, &end, 16);
	if (errno != 0 || end == lo_s || *end != '\0' || lo > UINT32_MAX)
		return false;
	*out = (hi << 32) | lo;
	return true;
}

static int waldump_usage(FILE *out, int code)
{
	fprintf(out, "usage: walrus -D DIR waldump [--from LSN] [--stats] [--limit N]\n\n"
	             "Prints the records of DIR/wal, one per line, from the oldest segment's\n"
	             "first record (or the first record at or after LSN, given as X/XXXXXXXX).\n"
	             "--stats prints a summary per resource manager instead.  The last line says\n"
	             "why the dump stopped.  Exit 0 at the end of WAL, 2 on damage.\n");
	return code;
}

static int waldump_parse(int argc, char **argv, waldump_args *a)
{
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end;
		if (strcmp(argv[i], "--stats") == 0) {
			a->stats = true;
		} else if (strcmp(argv[i], "--from") == 0 && v && waldump_parse_lsn(v, &a->from)) {
			i++;
		} else if (strcmp(argv[i], "--limit") == 0 && v) {
			a->limit = strtoull(v, &end, 10);
			if (*end != '\0' || end == v || a->limit == 0)
				return waldump_usage(stderr, TOOL_EXIT_USAGE);
			i++;
		} else {
			fprintf(stderr, "walrus waldump: bad argument \"%s\"\n", argv[i]);
			return waldump_usage(stderr, TOOL_EXIT_USAGE);
		}
	}
	return 0;
}

/* The lowest segment start among the files of @waldir (names of any alignment). */
static int waldump_oldest(const char *waldir, wr_lsn *oldest)
{
	DIR *d = opendir(waldir);
	if (d == NULL) {
		fprintf(stderr, "walrus waldump: could not open \"%s\": %s\n", waldir,
		        strerror(errno));
		return TOOL_EXIT_USAGE;
	}
	struct dirent *e;
	bool any = false;
	wr_lsn start;
	while ((e = readdir(d)) != NULL) {
		if (wal_segment_parse_name(e->d_name, 1, &start) && (!any || start < *oldest)) {
			*oldest = start;
			any = true;
		}
	}
	closedir(d);
	if (!any) {
		fprintf(stderr, "walrus waldump: no WAL segments in \"%s\"\n", waldir);
		return TOOL_EXIT_NOTFOUND;
	}
	return 0;
}

/* The segment size from the long header of the segment at @start, or @fallback. */
static uint64_t waldump_seg_size(const char *waldir, wr_lsn start, uint64_t fallback)
{
	char path[PATH_MAX];
	wal_long_page_header lh;
	fdc_file f;
	wal_segment_path(waldir, 1, start, path, sizeof(path));
	if (fdc_open(path, O_RDONLY | O_CLOEXEC, 0, &f) != WALRUS_OK)
		return fallback;
	ssize_t n = fdc_pread(f, &lh, sizeof(lh), 0);
	(void)fdc_close(f); /* read-only */
	uint64_t s = lh.seg_size;
	if (n != (ssize_t)sizeof(lh) || !wal_format_readable(wal_magic_format(lh.std.magic)) ||
	    !(lh.std.info & WAL_PAGE_LONG) || s < WAL_PAGE_SIZE || (s & (s - 1)) != 0 ||
	    start % s != 0)
		return fallback;
	return s;
}

static const char *waldump_lsn(wr_lsn lsn, char *buf)
{
	sprintf(buf, WAL_LSN_FMT, WAL_LSN_ARGS(lsn));
	return buf;
}

static void waldump_blocks(const wal_decoded *rec)
{
	if (rec->nblocks == 0)
		return;
	printf(" blocks: [");
	for (int i = 0; i < rec->nblocks; i++) {
		const wal_decoded_block *b = &rec->blocks[i];
		printf("%s%u: rel %" PRIu32 " blk %" PRIu32, i ? ", " : "", b->id, b->rel,
		       b->blkno);
		if (b->image)
			printf(" fpi %u->%u%s", WR_PAGE_SIZE, b->ih.length,
			       (b->flags & WAL_BLK_IMAGE_ZSTD) ? " zstd" : "");
		if (b->data_len)
			printf(" data %u", b->data_len);
		if (b->flags & WAL_BLK_WILL_INIT)
			printf(" init");
	}
	printf("]");
}

static void waldump_print(const wal_decoded *rec)
{
	char a[32], b[32], c[32], info[16], desc[512] = "";
	const wal_rmgr *rm = wal_rmgr_get(rec->hdr.rmid);
	const char *iname = rm && rm->info_name ? rm->info_name(rec->hdr.info) : NULL;
	snprintf(info, sizeof(info), "0x%02X", rec->hdr.info);
	if (rm && rm->describe)
		rm->describe(rec, desc, sizeof(desc));
	printf("lsn: %s end: %s len: %u prev: %s ", waldump_lsn(rec->lsn, a),
	       waldump_lsn(rec->end, b), rec->hdr.tot_len, waldump_lsn(rec->hdr.prev, c));
	if (rm && rm->name)
		printf("rmgr: %s", rm->name);
	else
		printf("rmgr: rmid %u", rec->hdr.rmid);
	printf(" info: %s", iname ? iname : info);
	waldump_blocks(rec);
	printf("%s%s\n", desc[0] ? " " : "", desc);
}

static void waldump_count(waldump_stat *st, const wal_decoded *rec)
{
	waldump_stat *s = &st[rec->hdr.rmid % RM_MAX];
	s->records++;
	s->bytes += rec->hdr.tot_len;
	for (int i = 0; i < rec->nblocks; i++) {
		if (rec->blocks[i].image == NULL)
			continue;
		s->fpis++;
		s->fpi_raw += WR_PAGE_SIZE;
		s->fpi_stored += rec->blocks[i].ih.length;
	}
}

static void waldump_stat_line(const char *name, const waldump_stat *s)
{
	printf("%-12s records: %" PRIu64 " bytes: %" PRIu64 " fpis: %" PRIu64 " fpi_raw: %" PRIu64
	       " fpi_stored: %" PRIu64 "\n",
	       name, s->records, s->bytes, s->fpis, s->fpi_raw, s->fpi_stored);
}

static void waldump_stats(const waldump_stat *st)
{
	waldump_stat total = {0};
	for (int id = 0; id < RM_MAX; id++) {
		const waldump_stat *s = &st[id];
		if (s->records == 0)
			continue;
		const wal_rmgr *rm = wal_rmgr_get(id);
		char name[32];
		if (rm && rm->name)
			snprintf(name, sizeof(name), "%s", rm->name);
		else
			snprintf(name, sizeof(name), "rmid %d", id);
		waldump_stat_line(name, s);
		total.records += s->records;
		total.bytes += s->bytes;
		total.fpis += s->fpis;
		total.fpi_raw += s->fpi_raw;
		total.fpi_stored += s->fpi_stored;
	}
	waldump_stat_line("total", &total);
}

/* Reads from @start on; returns the reader's final code. */
static int waldump_run(wal_reader *r, wr_lsn start, const waldump_args *a, uint64_t *n)
{
	waldump_stat st[RM_MAX] = {0};
	wal_decoded *rec;
	wr_lsn first;
	int rc = wal_find_first(r, start, &first);
	for (*n = 0; rc == WALRUS_OK; (*n)++) {
		if (a->limit && *n == a->limit)
			break;
		rc = wal_read_record(r, *n == 0 ? first : 0, &rec);
		if (rc != WALRUS_OK)
			break;
		if (a->stats)
			waldump_count(st, rec);
		else
			waldump_print(rec);
	}
	if (a->stats)
		waldump_stats(st);
	return rc;
}

int cmd_waldump(tool_ctx *ctx, int argc, char **argv)
{
	waldump_args a = {0};
	char waldir[PATH_MAX];
	wr_lsn oldest = 0;
	if (tool_wants_help(argc, argv))
		return waldump_usage(stdout, 0);
	int code = waldump_parse(argc, argv, &a);
	if (code != 0)
		return code;
	if (ctx->datadir == NULL) {
		fprintf(stderr, "walrus: no data directory: use -D DIR or set WALRUS_DATA\n");
		return TOOL_EXIT_USAGE;
	}
	snprintf(waldir, sizeof(waldir), "%s/wal", ctx->datadir);
	kv_register_rmgr(); /* to describe its records */
	code = waldump_oldest(waldir, &oldest);
	if (code != 0)
		return code;
	uint64_t seg = waldump_seg_size(waldir, oldest, (uint64_t)ctx->opts->o.wal_segment_size);
	wal_reader *r;
	int rc = wal_reader_open(waldir, seg, 0, &r);
	if (rc != WALRUS_OK)
		return tool_fail(rc, "waldump");
	uint64_t n;
	rc = waldump_run(r, a.from ? a.from : oldest, &a, &n);
	wal_reader_close(r);
	if (rc == WALRUS_OK) {
		printf("end: limit of %" PRIu64 " records reached\n", n);
		return 0;
	}
	printf("end: %s\n", walrus_errmsg());
	return rc == WALRUS_ENOTFOUND  ? 0
	       : rc == WALRUS_ECORRUPT ? TOOL_EXIT_DAMAGE
	                               : TOOL_EXIT_ENGINE;
}
