/*
 * test_kv_page.c - the tree's pages without a tree: slotted-page insert,
 * delete, replace and compaction against a model; search in nodes; the page
 * ops applied twice give the same bytes; where splits cut, and that a cut
 * always exists at the size limits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_int.h"
#include "kvtest.h"

static char page[WR_PAGE_SIZE];

static void leaf_init(char *p, const char *low, const char *high)
{
	kv_key lo = {.p = low, .len = low ? (uint16_t)strlen(low) : 0, .inf = low == NULL};
	kv_key hi = {.p = high, .len = high ? (uint16_t)strlen(high) : 0, .inf = high == NULL};
	kvn_init(p, 0, 0, WR_INVALID_BLKNO, WR_INVALID_BLKNO, &lo, &hi);
}

/* ---------------------------------------------------------------- slotted page */

/* memcmp order, shorter first on a tie: the sign kv_cmp must give. */
static int ref_cmp(const unsigned char *a, size_t al, const unsigned char *b, size_t bl)
{
	int c = memcmp(a, b, al < bl ? al : bl);
	if (c != 0)
		return c < 0 ? -1 : 1;
	return al < bl ? -1 : al > bl ? 1 : 0;
}

/* Keys of 0..12 bytes over a few byte values, 0x00 and 0xff among them:
 * the short ones take kv_cmp's loop, the others memcmp. */
START_TEST(key_order_is_memcmp_order)
{
	static const unsigned char vals[] = {0x00, 0x01, 0x7f, 0x80, 0xff};
	uint64_t seed = 7;
	for (int i = 0; i < 200000; i++) {
		unsigned char a[12], b[12];
		size_t al = (size_t)(kt_rand(&seed) % 13), bl = (size_t)(kt_rand(&seed) % 13);
		for (size_t j = 0; j < sizeof(a); j++) {
			a[j] = vals[kt_rand(&seed) % sizeof(vals)];
			b[j] = j < 4 ? a[j] : vals[kt_rand(&seed) % sizeof(vals)]; /* long ties */
		}
		int c = kv_cmp(a, al, b, bl);
		ck_assert_int_eq(c < 0 ? -1 : c > 0 ? 1 : 0, ref_cmp(a, al, b, bl));
	}
}
END_TEST

START_TEST(slotted_page_matches_a_model)
{
	enum { MAXN = 400 };
	static char model[MAXN][64];
	static uint16_t mlen[MAXN];
	int n = 0;
	uint64_t seed = 42;
	page_init(page, sizeof(kv_special), KV_PT_NODE);
	for (int step = 0; step < 5000; step++) {
		uint64_t r = kt_rand(&seed);
		int slot = n ? (int)(r % (uint64_t)(n + 1)) : 0;
		uint16_t len = (uint16_t)(1 + (r >> 20) % 60);
		char item[64];
		memset(item, 'a' + step % 26, len);
		int op = (int)((r >> 40) % 3);
		if (op == 0 && n < MAXN) {
			bool fit = kvp_free_space(page) >= len + KV_LP_SIZE;
			ck_assert_int_eq(kvp_insert(page, slot, item, len), fit);
			if (fit) {
				memmove(model[slot + 1], model[slot], (size_t)(n - slot) * 64);
				memmove(&mlen[slot + 1], &mlen[slot], (size_t)(n - slot) * 2);
				memcpy(model[slot], item, len);
				mlen[slot] = len;
				n++;
			}
		} else if (op == 1 && n > 0) {
			slot %= n;
			kvp_delete(page, slot);
			memmove(model[slot], model[slot + 1], (size_t)(n - slot - 1) * 64);
			memmove(&mlen[slot], &mlen[slot + 1], (size_t)(n - slot - 1) * 2);
			n--;
		} else if (n > 0) {
			slot %= n;
			bool fit = kvp_free_space(page) + mlen[slot] >= len;
			ck_assert_int_eq(kvp_replace(page, slot, item, len), fit);
			if (fit) {
				memcpy(model[slot], item, len);
				mlen[slot] = len;
			}
		}
		ck_assert_int_eq(kvp_nslots(page), n);
		ck_assert(kvp_sane(page));
		for (int i = 0; i < n; i++) {
			uint16_t l;
			const char *it = kvp_item(page, i, &l);
			ck_assert_uint_eq(l, mlen[i]);
			ck_assert(memcmp(it, model[i], l) == 0);
		}
	}
}
END_TEST

START_TEST(compaction_reclaims_deleted_space)
{
	enum { I = KV_NODE_SPACE / 8 - 19 }; /* 1000 bytes with 8 KiB pages: 8 fit */
	char item[I];
	memset(item, 'x', sizeof(item));
	page_init(page, sizeof(kv_special), KV_PT_NODE);
	int n = 0;
	while (kvp_insert(page, n, item, sizeof(item)))
		n++;
	ck_assert_int_eq(n, 8); /* 8 * (I + 4) <= KV_NODE_SPACE */
	kvp_delete(page, 3);
	kvp_delete(page, 0);
	/* Contiguous room is gone, but compaction finds it. */
	ck_assert_int_lt(page_free_space(page), I + 4);
	ck_assert(kvp_insert(page, 2, item, sizeof(item)));
	ck_assert(kvp_insert(page, 0, item, I - 100));
	ck_assert(kvp_sane(page));
	ck_assert_int_eq(kvp_nslots(page), 8);
	kvp_truncate(page, 5);
	ck_assert_int_eq(kvp_nslots(page), 5);
	ck_assert_int_eq(kvp_free_space(page), KV_NODE_SPACE - 4 * (I + 4) - (I - 96));
}
END_TEST

/* ---------------------------------------------------------------- nodes */

static void leaf_add(char *p, const char *k, const char *v)
{
	char item[KV_LEAF_ITEM_MAX];
	bool eq;
	int slot = kvn_lower_bound(p, k, strlen(k), &eq);
	ck_assert(!eq);
	uint16_t len = kvl_encode_inline(item, k, (uint16_t)strlen(k), v, (uint32_t)strlen(v));
	ck_assert(kvp_insert(p, slot, item, len));
}

START_TEST(node_search_and_fences)
{
	leaf_init(page, "b", "m");
	const char *keys[] = {"f", "c", "d\0x", "k", "ca"};
	leaf_add(page, keys[0], "1");
	leaf_add(page, keys[1], "2");
	leaf_add(page, "d", "3");
	leaf_add(page, keys[3], "4");
	leaf_add(page, keys[4], "5");
	ck_assert_int_eq(kvn_nentries(page), 5);
	bool eq;
	ck_assert_int_eq(kvn_lower_bound(page, "ca", 2, &eq), KV_FIRST_SLOT + 1);
	ck_assert(eq);
	ck_assert_int_eq(kvn_lower_bound(page, "cb", 2, &eq), KV_FIRST_SLOT + 2);
	ck_assert(!eq);
	ck_assert_int_eq(kvn_lower_bound(page, "z", 1, &eq), KV_FIRST_SLOT + 5);
	/* A key with a NUL byte sorts after its prefix. */
	ck_assert_int_eq(kvn_lower_bound(page, "d\0", 2, &eq), KV_FIRST_SLOT + 3);
	kv_key lo = kvn_low(page), hi = kvn_high(page);
	ck_assert(!lo.inf && lo.len == 1 && lo.p[0] == 'b');
	ck_assert(!hi.inf && hi.len == 1 && hi.p[0] == 'm');
	kv_leaf_ent e;
	uint16_t len;
	const char *it = kvp_item(page, KV_FIRST_SLOT + 3, &len);
	ck_assert(kvl_decode(it, len, &e));
	ck_assert_int_eq(e.klen, 1);
	ck_assert_int_eq(e.vlen, 1);
	ck_assert_int_eq(e.val[0], '1');
}
END_TEST

START_TEST(internal_child_choice)
{
	char item[64];
	kv_key inf = {.inf = true};
	kvn_init(page, 1, 0, WR_INVALID_BLKNO, WR_INVALID_BLKNO, &inf, &inf);
	ck_assert(kvp_insert(page, 2, item, kvi_encode(item, 10, NULL, 0)));
	ck_assert(kvp_insert(page, 3, item, kvi_encode(item, 11, "g", 1)));
	ck_assert(kvp_insert(page, 4, item, kvi_encode(item, 12, "p", 1)));
	kv_key k = {.p = "a", .len = 1};
	ck_assert_uint_eq(kvn_child(page, kvn_child_slot(page, &k, false)), 10);
	k.p = "g";
	ck_assert_uint_eq(kvn_child(page, kvn_child_slot(page, &k, false)), 11);
	ck_assert_uint_eq(kvn_child(page, kvn_child_slot(page, &k, true)), 10); /* keys below g */
	k.p = "z";
	ck_assert_uint_eq(kvn_child(page, kvn_child_slot(page, &k, true)), 12);
	ck_assert_uint_eq(kvn_child(page, kvn_child_slot(page, &inf, true)), 12);
}
END_TEST

/* ---------------------------------------------------------------- ops */

static size_t put_op(char *buf, uint8_t code, uint16_t slot, const void *p, uint16_t len)
{
	buf[0] = (char)code;
	memcpy(buf + 1, &slot, 2);
	memcpy(buf + 3, &len, 2);
	if (len)
		memcpy(buf + KVOP_HDR, p, len);
	return KVOP_HDR + len;
}

START_TEST(ops_replay_to_identical_bytes)
{
	static char a[WR_PAGE_SIZE], b[WR_PAGE_SIZE], img[WR_PAGE_SIZE], ops[64 * 1024];
	char why[128], item[900], val[800];
	size_t len = 0;
	memset(val, 'v', sizeof(val));
	uint64_t seed = 7;
	leaf_init(img, "a", NULL);
	kvop_image(img, ops + KVOP_HDR);
	len += put_op(ops, KVOP_INIT, 0, ops + KVOP_HDR, (uint16_t)kvop_image_size(img));
	int n = 0;
	for (int i = 0; i < 60; i++) {
		uint64_t r = kt_rand(&seed);
		char key[8];
		snprintf(key, sizeof(key), "k%05d", (int)(r % 100000));
		uint16_t il = kvl_encode_inline(item, key, 6, val,
		                                (uint32_t)(r >> 32) % (800 * WR_PAGE_SIZE / 8192));
		if (n > 3 && r % 3 == 0) {
			len += put_op(ops + len, KVOP_DELETE, (uint16_t)(2 + r % (uint64_t)n), NULL,
			              0);
			n--;
		} else if (n > 3 && r % 3 == 1) {
			len += put_op(ops + len, KVOP_REPLACE, (uint16_t)(2 + r % (uint64_t)n),
			              item, il);
		} else if (n < 8) {
			len += put_op(ops + len, KVOP_INSERT, (uint16_t)(2 + r % (uint64_t)(n + 1)),
			              item, il);
			n++;
		}
	}
	kv_special s = {.left = 3, .right = 9, .level = 0};
	len += put_op(ops + len, KVOP_SPECIAL, 0, &s, sizeof(s));
	memset(b, 0x5a, sizeof(b)); /* whatever was there before: the image replaces it */
	ck_assert_msg(kvop_apply(a, ops, len, why, sizeof(why)), "%s", why);
	ck_assert_msg(kvop_apply(b, ops, len, why, sizeof(why)), "%s", why);
	ck_assert(memcmp(a, b, WR_PAGE_SIZE) == 0);
	ck_assert_uint_eq(kvp_special(a).right, 9);
	ck_assert(kvp_sane(a));
	/* A malformed op is refused, not applied blindly. */
	size_t bad = put_op(ops, KVOP_DELETE, 500, NULL, 0);
	ck_assert(!kvop_apply(a, ops, bad, why, sizeof(why)));
	ck_assert(!kvop_apply(a, ops, 3, why, sizeof(why)));
}
END_TEST

/*
 * A leaf's prefix: KVOP_PREFIX re-encodes every entry to leave out (or take
 * back) bytes of the low fence, replays to the same bytes, and is refused
 * beyond what the fences share, on an internal node, and when the longer
 * entries would not fit; a search takes whole keys.
 */
static bool prefix_op(char *p, uint16_t n)
{
	char ops[KVOP_HDR], why[128];
	size_t len = put_op(ops, KVOP_PREFIX, n, NULL, 0);
	return kvop_apply(p, ops, len, why, sizeof(why));
}

static void whole_key_is(const char *p, int slot, const char *want)
{
	char buf[KV_MAX_KEY];
	kv_key k = kvn_entry_key(p, slot, buf);
	ck_assert_int_eq(k.len, (int)strlen(want));
	ck_assert(memcmp(k.p, want, k.len) == 0);
}

START_TEST(prefix_op_reencodes_leaf_entries)
{
	static char a[WR_PAGE_SIZE], b[WR_PAGE_SIZE];
	leaf_init(a, "user001", "user0019"); /* they share "user001" */
	leaf_add(a, "user001", "1");         /* the prefix alone: an empty stored key */
	leaf_add(a, "user0015", "2");
	leaf_add(a, "user0018zz", "3");
	memcpy(b, a, WR_PAGE_SIZE);
	int before = kvp_free_space(a);
	ck_assert(!prefix_op(b, 8)); /* more than the fences share */
	memcpy(b, a, WR_PAGE_SIZE);
	ck_assert(prefix_op(a, 7));
	ck_assert(prefix_op(b, 7));
	ck_assert(memcmp(a, b, WR_PAGE_SIZE) == 0);
	ck_assert_int_eq(kvp_special(a).prefix, 7);
	ck_assert_int_eq(kvp_free_space(a), before + 3 * 7);
	ck_assert(kvp_sane(a) && kvn_entries_sane(a));
	bool eq;
	kv_key k = kvn_leaf_key(a, KV_FIRST_SLOT + 2);
	ck_assert(k.len == 3 && memcmp(k.p, "8zz", 3) == 0);
	ck_assert_int_eq(kvn_leaf_key(a, KV_FIRST_SLOT).len, 0);
	whole_key_is(a, KV_FIRST_SLOT, "user001");
	ck_assert_int_eq(kvn_lower_bound(a, "user001", 7, &eq), KV_FIRST_SLOT);
	ck_assert(eq);
	whole_key_is(a, KV_FIRST_SLOT + 2, "user0018zz");
	ck_assert_int_eq(kvn_lower_bound(a, "user0015", 8, &eq), KV_FIRST_SLOT + 1);
	ck_assert(eq);
	ck_assert_int_eq(kvn_lower_bound(a, "user0014", 8, &eq), KV_FIRST_SLOT + 1);
	ck_assert(!eq);
	ck_assert_int_eq(kvn_lower_bound(a, "user0018zz", 10, &eq), KV_FIRST_SLOT + 2);
	ck_assert(eq);
	/* Keys without the prefix sort before or after every entry. */
	ck_assert_int_eq(kvn_lower_bound(a, "user00", 6, &eq), KV_FIRST_SLOT);
	ck_assert(!eq);
	ck_assert_int_eq(kvn_lower_bound(a, "user0", 5, &eq), KV_FIRST_SLOT);
	ck_assert_int_eq(kvn_lower_bound(a, "user002", 7, &eq), KV_FIRST_SLOT + 3);
	ck_assert_int_eq(kvn_lower_bound(a, "a", 1, &eq), KV_FIRST_SLOT);
	/* Back to whole keys: the same entries. */
	ck_assert(prefix_op(a, 2));
	whole_key_is(a, KV_FIRST_SLOT + 1, "user0015");
	ck_assert(prefix_op(a, 0));
	ck_assert_int_eq(kvp_free_space(a), before);
	whole_key_is(a, KV_FIRST_SLOT + 2, "user0018zz");
	/* A prefix the fences do not allow makes the page insane, not readable. */
	kv_special sp = kvp_special(a);
	sp.prefix = 8;
	kvp_set_special(a, &sp);
	ck_assert(!kvn_entries_sane(a));
	/* The rightmost leaf (high +inf): up to its low fence, if its entries
	 * have the bytes; none with a low fence of -inf, none on an internal node. */
	leaf_init(a, "user0012", NULL);
	leaf_add(a, "user0013", "1");
	ck_assert(!prefix_op(a, 9));
	memcpy(b, a, WR_PAGE_SIZE);
	ck_assert(!prefix_op(b, 8)); /* "user0013" lacks "user0012" */
	ck_assert(prefix_op(a, 7));
	whole_key_is(a, KV_FIRST_SLOT, "user0013");
	leaf_init(a, NULL, "user");
	ck_assert(!prefix_op(a, 1));
	ck_assert(prefix_op(a, 0));
	kv_key lo = {.p = "ab", .len = 2}, hi = {.p = "ac", .len = 2};
	kvn_init(a, 1, 0, WR_INVALID_BLKNO, WR_INVALID_BLKNO, &lo, &hi);
	ck_assert(!prefix_op(a, 1));
}
END_TEST

/* Taking the prefix back needs room for every entry's longer key. */
START_TEST(prefix_op_refuses_entries_that_no_longer_fit)
{
	char key[16], item[64];
	leaf_init(page, "k00000000", "k00000999"); /* share "k00000" */
	ck_assert(prefix_op(page, 6));
	int n = 0;
	for (;; n++) {
		snprintf(key, sizeof(key), "%03d", n);
		uint16_t len = kvl_encode_inline(item, key, 3, "v", 1);
		if (kvp_free_space(page) < len + KV_LP_SIZE)
			break;
		ck_assert(kvp_insert(page, KV_FIRST_SLOT + n, item, len));
	}
	ck_assert_int_lt(kvp_free_space(page), 6 * n);
	static char copy[WR_PAGE_SIZE];
	memcpy(copy, page, WR_PAGE_SIZE);
	ck_assert(!prefix_op(copy, 0));
	ck_assert(prefix_op(page, 6)); /* unchanged length: fits */
	ck_assert(kvn_entries_sane(page));
	snprintf(key, sizeof(key), "k00000%03d", n - 1);
	whole_key_is(page, KV_FIRST_SLOT + n - 1, key);
}
END_TEST

/* ---------------------------------------------------------------- split points */

static void max_leaf_item(char *item, uint16_t *len, int i, int keylen)
{
	char key[KV_MAX_KEY];
	memset(key, 'k', sizeof(key));
	char num[16];
	snprintf(num, sizeof(num), "%06d", i % 1000000);
	memcpy(key + keylen - 6, num, 6);
	uint32_t vl = KV_LEAF_ITEM_MAX - KV_LP_SIZE - KV_LEAF_HDR - (uint32_t)keylen;
	ck_assert(kvl_fits_inline((size_t)keylen, vl));
	ck_assert(!kvl_fits_inline((size_t)keylen, vl + 1));
	*len = kvl_encode_inline(item, key, (uint16_t)keylen, key, vl);
}

START_TEST(split_point_balances_and_truncates)
{
	char item[KV_LEAF_ITEM_MAX], sep[KV_MAX_KEY];
	uint16_t seplen;
	leaf_init(page, NULL, "zzzz");
	for (int i = 0; i < 40; i++) {
		char k[16], v[100 * WR_PAGE_SIZE / 8192]; /* 40 fit */
		snprintf(k, sizeof(k), "key%04d", i * 2);
		memset(v, 'v', sizeof(v) - 1);
		v[sizeof(v) - 1] = '\0';
		leaf_add(page, k, v);
	}
	uint16_t il = kvl_encode_inline(item, "key0031", 7, "x", 1);
	int k = kvm_split_point(page, KV_FIRST_SLOT + 16, item, il, sep, &seplen);
	ck_assert_int_eq(k, 21); /* 41 entries of about the same size, one of them small */
	/* Left ends at key0038, right starts at key0040: "key004" separates them. */
	ck_assert_int_eq(seplen, 6);
	ck_assert(memcmp(sep, "key004", 6) == 0);
}
END_TEST

START_TEST(split_point_appends_at_the_right_end)
{
	char item[KV_LEAF_ITEM_MAX], sep[KV_MAX_KEY];
	uint16_t seplen;
	leaf_init(page, "a", NULL);
	for (int i = 0; i < 40; i++) {
		char k[16];
		snprintf(k, sizeof(k), "key%04d", i);
		leaf_add(page, k, "some value of fifty bytes, more or less, right?");
	}
	uint16_t il = kvl_encode_inline(item, "key9999", 7, "x", 1);
	int k = kvm_split_point(page, kvp_nslots(page), item, il, sep, &seplen);
	ck_assert_int_eq(k, 40); /* everything stays left: sequential loads fill pages */
}
END_TEST

START_TEST(split_always_fits_at_the_limits)
{
	char item[KV_LEAF_ITEM_MAX], sep[KV_MAX_KEY], fence[KV_MAX_KEY];
	uint16_t len, seplen;
	for (int fl = 0; fl <= 1; fl++) {
		/* Maximal fences (or none) and maximal entries. */
		memset(fence, fl ? 'a' : 'z', sizeof(fence));
		kv_key lo = {.p = fence, .len = KV_MAX_KEY, .inf = !fl};
		char hfence[KV_MAX_KEY];
		memset(hfence, 'z', sizeof(hfence));
		kv_key hi = {.p = hfence, .len = KV_MAX_KEY, .inf = !fl};
		kvn_init(page, 0, 0, 1, 2, &lo, &hi);
		int n = 0;
		for (;; n++) {
			max_leaf_item(item, &len, n * 2 + 10, KV_MAX_KEY - 24);
			if (!kvp_insert(page, KV_FIRST_SLOT + n, item, len))
				break;
		}
		ck_assert_int_ge(n, 2); /* two maximal entries always fit */
		for (int at = 0; at <= n; at++) {
			max_leaf_item(item, &len, at * 2 + 9, KV_MAX_KEY - 24);
			int k = kvm_split_point(page, KV_FIRST_SLOT + at, item, len, sep, &seplen);
			ck_assert_int_gt(k, 0);
			ck_assert_int_le(k, n);
		}
	}
}
END_TEST

static Suite *page_suite(void)
{
	Suite *s = suite_create("kv-page");
	TCase *t = tcase_create("page");
	tcase_add_test(t, key_order_is_memcmp_order);
	tcase_add_test(t, slotted_page_matches_a_model);
	tcase_add_test(t, compaction_reclaims_deleted_space);
	tcase_add_test(t, node_search_and_fences);
	tcase_add_test(t, internal_child_choice);
	tcase_add_test(t, ops_replay_to_identical_bytes);
	tcase_add_test(t, prefix_op_reencodes_leaf_entries);
	tcase_add_test(t, prefix_op_refuses_entries_that_no_longer_fit);
	tcase_add_test(t, split_point_balances_and_truncates);
	tcase_add_test(t, split_point_appends_at_the_right_end);
	tcase_add_test(t, split_always_fits_at_the_limits);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	return tu_run(page_suite());
}
