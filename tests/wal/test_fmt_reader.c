/*
 * test_fmt_reader.c - writing WAL files and reading them back.
 *
 * Streams of records of many sizes, written with small (64 kB) segments so
 * records cross pages and segments, record headers included, must read
 * back byte for byte with the right LSNs and prev-links.  Then the end of
 * WAL: every torn tail and every forged tail in the manner of PostgreSQL's
 * 039_end_of_wal.pl must stop at the right LSN with the right reason,
 * while damage in the middle of the WAL must be reported as damage.
 * Finally `walrus waldump` over such a directory.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "wal/wal.h"

#define SEG    65536u
#define SYSID  0x5157A1u
#define MAXREC 600

static char datadir[512], waldir[600];
static wal_assembled asm_buf;

/* What was written: each record's start, end and bytes. */
static struct {
	int n;
	wr_lsn start[MAXREC], end[MAXREC];
	char *bytes[MAXREC];
	uint32_t len[MAXREC];
	wr_lsn first_prev;
} st;

static void setup(void)
{
	snprintf(datadir, sizeof(datadir), "%s", tu_tmpdir("walfmt"));
	snprintf(waldir, sizeof(waldir), "%s/wal", datadir);
	ck_assert_int_eq(mkdir(waldir, 0700), 0);
	memset(&st, 0, sizeof(st));
}

static void teardown(void)
{
	for (int i = 0; i < st.n; i++)
		free(st.bytes[i]);
	free(asm_buf.buf);
	memset(&asm_buf, 0, sizeof(asm_buf));
}

static void fill(void *p, size_t n, unsigned seed)
{
	unsigned char *c = p;
	for (size_t i = 0; i < n; i++)
		c[i] = (unsigned char)(i * 31 + seed * 7 + (i >> 8));
}

static const char *lsn_str(wr_lsn lsn)
{
	static char buf[4][32];
	static int k;
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof(buf[k]), WAL_LSN_FMT, WAL_LSN_ARGS(lsn));
	return buf[k];
}

static wal_file_writer *open_writer(void)
{
	wal_file_writer *w;
	int rc = wal_fw_open(waldir, SEG, SYSID, SEG, 0, &w);
	ck_assert_msg(rc == WALRUS_OK, "fw_open: %s", walrus_errmsg());
	return w;
}

/* Appends a record whose total length is @len (>= 29): main data only. */
static void append_len(wal_file_writer *w, uint32_t len)
{
	static char data[4 * WAL_PAGE_SIZE + 65536];
	ck_assert_uint_ge(len, WAL_RECORD_HEADER + 5);
	uint32_t m = len - WAL_RECORD_HEADER - 5;
	ck_assert_uint_le(m, sizeof(data));
	fill(data, m, (unsigned)st.n);
	wal_begin();
	wal_register_data(data, m);
	ck_assert_int_eq(wal_assemble(&asm_buf, RM_TEST, (uint8_t)st.n, 0, false, 0), WALRUS_OK);
	ck_assert_uint_eq(asm_buf.len, len);
	int i = st.n++;
	ck_assert_int_lt(i, MAXREC);
	int rc = wal_fw_append(w, &asm_buf, &st.start[i], &st.end[i]);
	ck_assert_msg(rc == WALRUS_OK, "append: %s", walrus_errmsg());
	st.len[i] = len;
	st.bytes[i] = malloc(len);
	memcpy(st.bytes[i], asm_buf.buf, len);
	ck_assert_uint_eq(st.end[i], wal_lsn_advance(st.start[i], len, SEG));
}

/* Where the next record will start. */
static wr_lsn next_start(void)
{
	if (st.n == 0)
		return SEG + WAL_LONG_PHD;
	wr_lsn n = wal_align(st.end[st.n - 1]);
	if (n % WAL_PAGE_SIZE == 0)
		n += wal_page_header_size(n, SEG);
	return n;
}

/* Appends a filler record so that the next record starts at @target. */
static void fill_to(wal_file_writer *w, wr_lsn target)
{
	wr_lsn cur = next_start();
	for (uint32_t len = WAL_RECORD_HEADER + 5; len < 4 * SEG; len++) {
		if (wal_lsn_advance(cur, len, SEG) == target) {
			append_len(w, len);
			ck_assert_uint_eq(next_start(), target);
			return;
		}
	}
	ck_abort_msg("cannot reach %s from %s", lsn_str(target), lsn_str(cur));
}

/* Appends a record that ends exactly at the next page boundary. */
static void end_at_boundary(wal_file_writer *w)
{
	wr_lsn cur = next_start();
	uint32_t len = WAL_RECORD_HEADER + 5;
	while (wal_lsn_advance(cur, len, SEG) % WAL_PAGE_SIZE != 0)
		len++;
	append_len(w, len);
	ck_assert_uint_eq(st.end[st.n - 1] % WAL_PAGE_SIZE, 0);
}

static void flush_close(wal_file_writer *w)
{
	ck_assert_int_eq(wal_fw_flush(w, true), WALRUS_OK);
	wal_fw_close(w);
}

/* Many records of random sizes with crafted positions around page and segment ends. */
static void write_many(int n, unsigned seed)
{
	wal_file_writer *w = open_writer();
	srandom(seed);
	while (st.n < n) {
		int kind = (int)(random() % 10);
		wr_lsn cur = next_start();
		wr_lsn page_end = cur - cur % WAL_PAGE_SIZE + WAL_PAGE_SIZE;
		if (kind == 0 && page_end - cur > 200) {
			/* The next record's header splits across the page boundary. */
			static const int back[] = {8, 16, 24, 32};
			fill_to(w, page_end + WAL_PAGE_SIZE - back[random() % 4]);
		} else if (kind == 1) {
			end_at_boundary(w);
		} else if (kind == 2) {
			/* Straddle a segment boundary, header split or not. */
			wr_lsn seg_end = cur - cur % SEG + SEG;
			if (seg_end - cur > 100 && seg_end - cur < 3 * WAL_PAGE_SIZE)
				fill_to(w, seg_end - 8 * (1 + random() % 6));
			else
				append_len(w, 29 + (uint32_t)(random() % 100));
		} else {
			append_len(w, 29 + 1 + (uint32_t)(random() % (3 * WAL_PAGE_SIZE)));
		}
	}
	flush_close(w);
}

static wal_reader *open_reader(void)
{
	wal_reader *r;
	ck_assert_int_eq(wal_reader_open(waldir, SEG, SYSID, &r), WALRUS_OK);
	return r;
}

static void check_record(const wal_decoded *rec, int i)
{
	ck_assert_msg(rec->lsn == st.start[i], "record %d at %s, expected %s", i, lsn_str(rec->lsn),
	              lsn_str(st.start[i]));
	ck_assert_uint_eq(rec->end, st.end[i]);
	ck_assert_uint_eq(rec->hdr.tot_len, st.len[i]);
	ck_assert_uint_eq(rec->hdr.prev, i == 0 ? st.first_prev : st.start[i - 1]);
	ck_assert(memcmp(rec->raw, st.bytes[i], st.len[i]) == 0);
}

/* Reads from the first record on: expects @upto good records, then @code. */
static const char *read_all(int upto, int code)
{
	static char msg[1024];
	wal_reader *r = open_reader();
	wal_decoded *rec;
	int rc = WALRUS_OK, i;
	for (i = 0; i <= upto && i < st.n + 1; i++) {
		rc = wal_read_record(r, i == 0 ? st.start[0] : 0, &rec);
		if (rc != WALRUS_OK)
			break;
		check_record(rec, i);
	}
	snprintf(msg, sizeof(msg), "%s", walrus_errmsg());
	wal_reader_close(r);
	ck_assert_msg(i == upto && rc == code, "stopped after %d records (expected %d) with %d: %s",
	              i, upto, rc, msg);
	return msg;
}

START_TEST(test_stream_round_trip)
{
	write_many(tu_long_mode() ? MAXREC : 300, 1);
	ck_assert_uint_gt(st.end[st.n - 1], 20 * SEG);
	const char *msg = read_all(st.n, WALRUS_ENOTFOUND);
	/* The end is right after the last record, whatever follows it. */
	wr_lsn after = next_start();
	ck_assert_msg(strstr(msg, lsn_str(after)) != NULL, "%s (next %s)", msg, lsn_str(after));
}
END_TEST

START_TEST(test_explicit_and_find_first)
{
	write_many(150, 2);
	wal_reader *r = open_reader();
	wal_decoded *rec;
	srandom(3);
	for (int k = 0; k < 200; k++) {
		int i = (int)(random() % st.n);
		ck_assert_int_eq(wal_read_record(r, st.start[i], &rec), WALRUS_OK);
		check_record(rec, i);
		if (i + 1 < st.n) { /* sequential after an explicit read */
			ck_assert_int_eq(wal_read_record(r, 0, &rec), WALRUS_OK);
			check_record(rec, i + 1);
		}
	}
	/* Not a record start. */
	ck_assert_int_eq(wal_read_record(r, SEG + 3, &rec), WALRUS_EINVAL);
	ck_assert_int_eq(wal_read_record(r, 2 * SEG, &rec), WALRUS_EINVAL);
	for (int k = 0; k < 400; k++) {
		wr_lsn lsn = SEG + (uint64_t)random() % (st.end[st.n - 1] - SEG + 100);
		if (k < 20)
			lsn = st.start[random() % st.n] + (uint64_t)(k % 3) - 1;
		int want = 0;
		while (want < st.n && st.start[want] < lsn)
			want++;
		wr_lsn found = 0;
		int rc = wal_find_first(r, lsn, &found);
		if (want == st.n) {
			ck_assert_int_eq(rc, WALRUS_ENOTFOUND);
			continue;
		}
		ck_assert_msg(rc == WALRUS_OK, "find_first(%s): %s", lsn_str(lsn), walrus_errmsg());
		ck_assert_msg(found == st.start[want], "find_first(%s) = %s, expected %s",
		              lsn_str(lsn), lsn_str(found), lsn_str(st.start[want]));
	}
	wal_reader_close(r);
}
END_TEST

/* ---------------------------------------------------------------- tails */

/* File position of record byte @j of the record at @start. */
static wr_lsn byte_pos(wr_lsn start, uint32_t j)
{
	wr_lsn p = wal_lsn_advance(start, j, SEG);
	if (p % WAL_PAGE_SIZE == 0)
		p += wal_page_header_size(p, SEG);
	return p;
}

static void seg_file(wr_lsn lsn, char *path, size_t len)
{
	wal_segment_path(waldir, SEG, lsn, path, len);
}

static void pwrite_at(wr_lsn lsn, const void *buf, size_t n)
{
	char path[700];
	seg_file(lsn, path, sizeof(path));
	int fd = open(path, O_WRONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, buf, n, (off_t)(lsn % SEG)), (ssize_t)n);
	close(fd);
}

static void pread_at(wr_lsn lsn, void *buf, size_t n)
{
	char path[700];
	seg_file(lsn, path, sizeof(path));
	int fd = open(path, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, buf, n, (off_t)(lsn % SEG)), (ssize_t)n);
	close(fd);
}

/* Zeroes the WAL from @from to the end of its segment and removes later segments. */
static void zero_from(wr_lsn from)
{
	static const char zeros[SEG];
	pwrite_at(from, zeros, SEG - from % SEG);
	for (wr_lsn s = from - from % SEG + SEG;; s += SEG) {
		char path[700];
		seg_file(s, path, sizeof(path));
		if (unlink(path) != 0)
			break;
	}
}

/* Overwrites record bytes [j, j+n) of the record at @start, wherever they are. */
static void patch_record(wr_lsn start, uint32_t j, const void *data, uint32_t n)
{
	for (uint32_t k = 0; k < n; k++)
		pwrite_at(byte_pos(start, j + k), (const char *)data + k, 1);
}

/*
 * A short stream whose last record starts @back bytes before a page
 * boundary (a segment boundary when @seg_end) and crosses it.
 */
static void tail_stream(uint32_t back, bool seg_end, uint32_t last_len)
{
	wal_file_writer *w = open_writer();
	append_len(w, 100);
	append_len(w, 3000);
	wr_lsn b = seg_end ? 2 * SEG : SEG + 3 * WAL_PAGE_SIZE;
	fill_to(w, b - back);
	append_len(w, last_len);
	flush_close(w);
}

static void check_stop(int good, const char *reason, wr_lsn at)
{
	const char *msg = read_all(good, WALRUS_ENOTFOUND);
	ck_assert_msg(strstr(msg, reason) != NULL, "expected \"%s\" in: %s", reason, msg);
	ck_assert_msg(strstr(msg, lsn_str(at)) != NULL, "expected %s in: %s", lsn_str(at), msg);
}

static void torn_every_byte(uint32_t back, bool seg_end)
{
	tail_stream(back, seg_end, 700);
	int last = st.n - 1;
	wr_lsn s = st.start[last];
	/* Save the WAL from the last record to the end of the next segment. */
	static char saved[2 * SEG];
	wr_lsn base = s - s % SEG;
	char p2[700];
	pread_at(base, saved, SEG);
	seg_file(base + SEG, p2, sizeof(p2));
	bool two = access(p2, F_OK) == 0;
	if (two)
		pread_at(base + SEG, saved + SEG, SEG);
	for (uint32_t k = 0; k < st.len[last]; k++) {
		wr_lsn from = byte_pos(s, k);
		/* A torn page loses its header along with its data. */
		if (from % WAL_PAGE_SIZE == wal_page_header_size(from, SEG))
			from -= from % WAL_PAGE_SIZE;
		zero_from(from);
		check_stop(last, "at ", s);
		pwrite_at(base, saved, SEG);
		if (two) {
			char p[700];
			seg_file(base + SEG, p, sizeof(p));
			ck_assert_int_eq(tu_write_file(p, saved + SEG, SEG), 0);
		}
	}
	read_all(st.n, WALRUS_ENOTFOUND); /* restored */
}

START_TEST(test_torn_tail_every_byte)
{
	torn_every_byte(8, false); /* header split */
	teardown();
	setup();
	torn_every_byte(48, false); /* header whole, body crosses */
	teardown();
	setup();
	torn_every_byte(16, true); /* across a segment */
}
END_TEST

enum forge {
	F_ZERO_LEN,
	F_SHORT_LEN,
	F_PREV,
	F_CRC,
	F_MAGIC,
	F_PAGEADDR,
	F_NO_CONT,
	F_REM_LEN,
	F_MISSING_SEG,
	F_COUNT
};

static const char *forge_reason[F_COUNT] = {
    [F_ZERO_LEN] = "invalid record length at",
    [F_SHORT_LEN] = "expected at least 24, got 10",
    [F_PREV] = "record with incorrect prev-link",
    [F_CRC] = "incorrect resource manager data checksum in record at",
    [F_MAGIC] = "invalid magic number",
    [F_PAGEADDR] = "unexpected pageaddr",
    [F_NO_CONT] = "there is no contrecord flag at",
    [F_REM_LEN] = "invalid contrecord length",
    [F_MISSING_SEG] = "could not open WAL segment",
};

/* The page header of the page where the last record continues. */
static wr_lsn cont_page(void)
{
	wr_lsn s = st.start[st.n - 1];
	return s - s % WAL_PAGE_SIZE + WAL_PAGE_SIZE;
}

static void patch_page_header(wr_lsn page, void (*fn)(wal_page_header *))
{
	wal_page_header h;
	pread_at(page, &h, sizeof(h));
	fn(&h);
	pwrite_at(page, &h, sizeof(h));
}

static void clear_cont(wal_page_header *h)
{
	h->info &= (uint16_t)~WAL_PAGE_CONT;
}
static void bad_rem(wal_page_header *h)
{
	h->rem_len += 8;
}
static void bad_magic(wal_page_header *h)
{
	h->magic ^= 0x0100;
}

/* Makes the continuation page look like a recycled one: a page of older WAL. */
static void recycle_next(bool seg_end)
{
	wr_lsn page = cont_page();
	char path[700], old[700];
	if (seg_end) {
		/* The whole next segment is a renamed old segment. */
		seg_file(page, path, sizeof(path));
		seg_file(SEG, old, sizeof(old));
		ck_assert_int_eq(unlink(path), 0);
		char cmd[1600];
		snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", old, path);
		ck_assert_int_eq(system(cmd), 0);
		return;
	}
	char buf[WAL_PAGE_SIZE];
	pread_at(SEG + WAL_PAGE_SIZE, buf, sizeof(buf));
	pwrite_at(page, buf, sizeof(buf));
}

static void forge(enum forge f, bool seg_end)
{
	int last = st.n - 1;
	wr_lsn s = st.start[last];
	uint32_t v;
	uint64_t prev = st.start[last - 1] + 8;
	switch (f) {
	case F_ZERO_LEN:
		v = 0;
		patch_record(s, 0, &v, 4);
		break;
	case F_SHORT_LEN:
		v = 10;
		patch_record(s, 0, &v, 4);
		break;
	case F_PREV:
		patch_record(s, 8, &prev, 8);
		break;
	case F_CRC: {
		char path[700];
		wr_lsn pos = byte_pos(s, st.len[last] - 1);
		seg_file(pos, path, sizeof(path));
		tu_flip_bit(path, (off_t)(pos % SEG), 3);
		break;
	}
	case F_MAGIC:
		patch_page_header(cont_page(), bad_magic);
		break;
	case F_PAGEADDR:
		recycle_next(seg_end);
		break;
	case F_NO_CONT:
		patch_page_header(cont_page(), clear_cont);
		break;
	case F_REM_LEN:
		patch_page_header(cont_page(), bad_rem);
		break;
	case F_MISSING_SEG: {
		char path[700];
		seg_file(cont_page(), path, sizeof(path));
		ck_assert_int_eq(unlink(path), 0);
		break;
	}
	default:
		break;
	}
}

START_TEST(test_forged_tails)
{
	static const uint32_t backs[] = {8, 40};
	for (int f = 0; f < F_COUNT; f++) {
		for (int b = 0; b < 2; b++) {
			for (int se = 0; se < 2; se++) {
				if (f == F_MISSING_SEG && !se)
					continue;
				teardown();
				setup();
				tail_stream(backs[b], se, 500);
				read_all(st.n, WALRUS_ENOTFOUND);
				forge((enum forge)f, se);
				const char *msg = read_all(st.n - 1, WALRUS_ENOTFOUND);
				ck_assert_msg(strstr(msg, forge_reason[f]) != NULL,
				              "case %d back %u seg %d: expected \"%s\" in: %s", f,
				              backs[b], se, forge_reason[f], msg);
				if (f != F_MISSING_SEG)
					ck_assert_msg(strstr(msg, lsn_str(st.start[st.n - 1])) !=
					                  NULL,
					              "case %d: expected %s in: %s", f,
					              lsn_str(st.start[st.n - 1]), msg);
			}
		}
	}
}
END_TEST

START_TEST(test_damage_in_the_middle)
{
	write_many(120, 4);
	for (int k = 0; k < 3; k++) {
		int i = 30 + k * 30;
		wr_lsn s = st.start[i];
		/* A bit of the payload, then the prev-link: either way valid WAL follows. */
		uint32_t j = k == 2 ? 9 : WAL_RECORD_HEADER + (st.len[i] - WAL_RECORD_HEADER) / 2;
		wr_lsn pos = byte_pos(s, j);
		char path[700];
		seg_file(pos, path, sizeof(path));
		tu_flip_bit(path, (off_t)(pos % SEG), k);
		const char *msg = read_all(i, WALRUS_ECORRUPT);
		ck_assert_msg(strstr(msg, lsn_str(s)) != NULL && strstr(msg, "damaged") != NULL,
		              "%s", msg);
		tu_flip_bit(path, (off_t)(pos % SEG), k);
	}
	read_all(st.n, WALRUS_ENOTFOUND);
}
END_TEST

START_TEST(test_segment_checks)
{
	tail_stream(40, true, 500);
	/* The reader checks the system id and the segment size. */
	wal_reader *r;
	wal_decoded *rec;
	ck_assert_int_eq(wal_reader_open(waldir, SEG, SYSID + 1, &r), WALRUS_OK);
	ck_assert_int_eq(wal_read_record(r, st.start[0], &rec), WALRUS_ENOTFOUND);
	ck_assert_msg(strstr(walrus_errmsg(), "different database system"), "%s", walrus_errmsg());
	wal_reader_close(r);
	ck_assert_int_eq(wal_reader_open(waldir, 2 * SEG, SYSID, &r), WALRUS_OK);
	ck_assert_int_eq(wal_read_record(r, 2 * SEG + WAL_LONG_PHD, &rec), WALRUS_ECORRUPT);
	wal_reader_close(r);
	/* A segment of the wrong size is damage, naming the file. */
	char path[700];
	seg_file(2 * SEG, path, sizeof(path));
	ck_assert_int_eq(truncate(path, SEG / 2), 0);
	const char *msg = read_all(st.n - 1, WALRUS_ECORRUPT);
	ck_assert_msg(strstr(msg, path) != NULL, "%s", msg);
}
END_TEST

START_TEST(test_writer_continues_stream)
{
	wal_file_writer *w = open_writer();
	append_len(w, 100);
	append_len(w, 5000);
	flush_close(w);
	/* Reopen at the end of the last record, as after recovery. */
	ck_assert_int_eq(wal_fw_open(waldir, SEG, SYSID, st.end[1], st.start[1], &w), WALRUS_OK);
	append_len(w, 200);
	end_at_boundary(w);
	flush_close(w);
	ck_assert_int_eq(wal_fw_open(waldir, SEG, SYSID, st.end[st.n - 1], st.start[st.n - 1], &w),
	                 WALRUS_OK);
	append_len(w, 300);
	flush_close(w);
	read_all(st.n, WALRUS_ENOTFOUND);
}
END_TEST

/* ---------------------------------------------------------------- waldump */

/* Runs walrus waldump with @args; returns the exit status, output lines in @out. */
static int waldump(const char *args, char *out, size_t len, int *lines)
{
	const char *bin = getenv("WALRUS_BIN");
	ck_assert_msg(bin != NULL, "WALRUS_BIN is not set");
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "'%s' -D '%s' waldump %s 2>&1", bin, datadir, args);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	size_t n = 0;
	*lines = 0;
	char line[4096];
	out[0] = '\0';
	while (fgets(line, sizeof(line), p) != NULL) {
		if (strncmp(line, "lsn: ", 5) == 0)
			(*lines)++;
		size_t l = strlen(line);
		if (n + l < len) {
			memcpy(out + n, line, l + 1);
			n += l;
		}
	}
	int status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

START_TEST(test_waldump)
{
	if (getenv("WALRUS_BIN") == NULL)
		return; /* built outside meson */
	static char out[1 << 20];
	wal_file_writer *w = open_writer();
	for (int i = 0; i < 40; i++)
		append_len(w, 29 + (uint32_t)(i * 701 % 20000));
	/* A record with a compressed full-page image. */
	static char page[WR_PAGE_SIZE];
	memset(page, 'a', sizeof(page));
	wr_page_header ph = {.lower = 4096, .upper = 4096}; /* no hole: compresses anyway */
	memcpy(page, &ph, sizeof(ph));
	wal_begin();
	wal_register_block(0, 1, 7, page, 0);
	ck_assert_int_eq(wal_assemble(&asm_buf, RM_XLOG, XLOG_FPI, 0, true, 3), WALRUS_OK);
	wr_lsn s, e;
	ck_assert_int_eq(wal_fw_append(w, &asm_buf, &s, &e), WALRUS_OK);
	flush_close(w);
	int lines, n = st.n + 1;
	ck_assert_int_eq(waldump("", out, sizeof(out), &lines), 0);
	ck_assert_msg(lines == n, "%d lines, expected %d:\n%s", lines, n, out);
	ck_assert_msg(strstr(out, "fpi " TU_PAGE_SIZE_STRING "->") && strstr(out, "zstd") &&
	                  strstr(out, "\nend: "),
	              "%s", out);
	char want[128];
	snprintf(want, sizeof(want), "lsn: %s end: %s len: %u prev: %s ", lsn_str(st.start[1]),
	         lsn_str(st.end[1]), st.len[1], lsn_str(st.start[0]));
	ck_assert_msg(strstr(out, want) != NULL, "no \"%s\" in:\n%s", want, out);

	ck_assert_int_eq(waldump("--stats", out, sizeof(out), &lines), 0);
	snprintf(want, sizeof(want), "total        records: %d ", n);
	ck_assert_msg(lines == 0 && strstr(out, want) && strstr(out, "fpis: 1 "), "%s", out);
	ck_assert_int_eq(waldump("--limit 5", out, sizeof(out), &lines), 0);
	ck_assert_int_eq(lines, 5);
	char args[64];
	snprintf(args, sizeof(args), "--from %s", lsn_str(st.start[10] - 8));
	ck_assert_int_eq(waldump(args, out, sizeof(out), &lines), 0);
	ck_assert_int_eq(lines, n - 10);
	ck_assert_int_eq(waldump("--from nonsense", out, sizeof(out), &lines), 2);

	/* Damage in the middle: exit 2, the records before it are printed. */
	wr_lsn pos = byte_pos(st.start[20], 30);
	char path[700];
	seg_file(pos, path, sizeof(path));
	tu_flip_bit(path, (off_t)(pos % SEG), 1);
	ck_assert_int_eq(waldump("", out, sizeof(out), &lines), 2);
	ck_assert_int_eq(lines, 20);
	ck_assert_msg(strstr(out, "end: record at ") != NULL, "%s", out);
}
END_TEST

static Suite *reader_suite(void)
{
	Suite *s = suite_create("wal-fmt-reader");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 600);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_stream_round_trip);
	tcase_add_test(tc, test_explicit_and_find_first);
	tcase_add_test(tc, test_torn_tail_every_byte);
	tcase_add_test(tc, test_forged_tails);
	tcase_add_test(tc, test_damage_in_the_middle);
	tcase_add_test(tc, test_segment_checks);
	tcase_add_test(tc, test_writer_continues_stream);
	tcase_add_test(tc, test_waldump);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(reader_suite());
}
