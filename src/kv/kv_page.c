/*
 * kv_page.c - the tree's pages: a slotted page (line pointers growing up
 * from the header, items growing down from pd_upper to the special space),
 * node, overflow, free and meta page layouts, and the page ops that WAL
 * records carry.
 *
 * The writer changes a page only by building an op and applying it with
 * kvop_apply, the same function redo uses, so replaying a record produces
 * the very bytes the writer produced (compaction included: it is
 * deterministic).
 *
 * Interface: kv_int.h, "kv_page.c".
 */
#include <stdio.h>
#include <string.h>

#include "kv/kv_int.h"

#define HDR_LOWER offsetof(wr_page_header, lower)
#define HDR_UPPER offsetof(wr_page_header, upper)

/* ---------------------------------------------------------------- slotted page */

static void set_u16(char *page, size_t off, uint16_t v)
{
	memcpy(page + off, &v, sizeof(v));
}

static void put_lp(char *page, int slot, kv_lp lp)
{
	memcpy(page + WR_PAGE_HEADER_SIZE + (size_t)slot * KV_LP_SIZE, &lp, sizeof(lp));
}

static int live_bytes(const char *page)
{
	int n = kvp_nslots(page), sum = 0;
	for (int i = 0; i < n; i++)
		sum += kvp_lp(page, i).len;
	return sum;
}

int kvp_free_space(const char *page)
{
	wr_page_header h = kvp_header(page);
	return (h.special - h.lower) - live_bytes(page);
}

/* Rewrites the items packed against the special space, in slot order. */
void kvp_compact(char *page)
{
	char tmp[WR_PAGE_SIZE];
	wr_page_header h = kvp_header(page);
	int n = kvp_nslots(page);
	uint16_t upper = h.special;
	memcpy(tmp, page, WR_PAGE_SIZE);
	for (int i = 0; i < n; i++) {
		kv_lp lp = kvp_lp(tmp, i);
		upper = (uint16_t)(upper - lp.len);
		memcpy(page + upper, tmp + lp.off, lp.len);
		lp.off = upper;
		put_lp(page, i, lp);
	}
	memset(page + h.lower, 0, (size_t)(upper - h.lower)); /* deterministic free space */
	set_u16(page, HDR_UPPER, upper);
}

/* Makes @need contiguous bytes between lower and upper, compacting if needed. */
static bool make_room(char *page, int need)
{
	wr_page_header h = kvp_header(page);
	if (h.upper - h.lower >= need)
		return true;
	if (kvp_free_space(page) < need)
		return false;
	kvp_compact(page);
	return true;
}

/* Places @item under upper; the caller made room. */
static uint16_t place(char *page, const void *item, uint16_t len)
{
	wr_page_header h = kvp_header(page);
	WR_ASSERT(h.lower <= h.upper && len <= h.upper - h.lower);
	uint16_t upper = (uint16_t)(h.upper - len);
	if (len > 0)
		memcpy(page + upper, item, len);
	set_u16(page, HDR_UPPER, upper);
	return upper;
}

bool kvp_insert(char *page, int slot, const void *item, uint16_t len)
{
	int n = kvp_nslots(page);
	if (slot < 0 || slot > n || !make_room(page, len + KV_LP_SIZE))
		return false;
	char *lps = page + WR_PAGE_HEADER_SIZE;
	memmove(lps + (size_t)(slot + 1) * KV_LP_SIZE, lps + (size_t)slot * KV_LP_SIZE,
	        (size_t)(n - slot) * KV_LP_SIZE);
	wr_page_header h = kvp_header(page);
	set_u16(page, HDR_LOWER, (uint16_t)(h.lower + KV_LP_SIZE));
	put_lp(page, slot, (kv_lp){0, 0}); /* counts as nothing while placing */
	uint16_t off = place(page, item, len);
	put_lp(page, slot, (kv_lp){off, len});
	return true;
}

void kvp_delete(char *page, int slot)
{
	int n = kvp_nslots(page);
	WR_ASSERT(slot >= 0 && slot < n);
	char *lps = page + WR_PAGE_HEADER_SIZE;
	memmove(lps + (size_t)slot * KV_LP_SIZE, lps + (size_t)(slot + 1) * KV_LP_SIZE,
	        (size_t)(n - slot - 1) * KV_LP_SIZE);
	wr_page_header h = kvp_header(page);
	set_u16(page, HDR_LOWER, (uint16_t)(h.lower - KV_LP_SIZE));
	memset(page + h.lower - KV_LP_SIZE, 0, KV_LP_SIZE);
}

bool kvp_replace(char *page, int slot, const void *item, uint16_t len)
{
	WR_ASSERT(slot >= 0 && slot < kvp_nslots(page));
	kv_lp lp = kvp_lp(page, slot);
	if (len <= lp.len) {
		if (len > 0)
			memmove(page + lp.off, item, len); /* item may point into the page */
		put_lp(page, slot, (kv_lp){lp.off, len});
		return true;
	}
	put_lp(page, slot, (kv_lp){0, 0}); /* the old item becomes reclaimable */
	if (!make_room(page, len)) {
		put_lp(page, slot, lp);
		return false;
	}
	uint16_t off = place(page, item, len);
	put_lp(page, slot, (kv_lp){off, len});
	return true;
}

void kvp_truncate(char *page, int nslots)
{
	WR_ASSERT(nslots >= 0 && nslots <= kvp_nslots(page));
	wr_page_header h = kvp_header(page);
	uint16_t lower = (uint16_t)(WR_PAGE_HEADER_SIZE + nslots * KV_LP_SIZE);
	if (lower < h.lower)
		memset(page + lower, 0, (size_t)(h.lower - lower));
	set_u16(page, HDR_LOWER, lower);
}

bool kvp_sane(const char *page)
{
	wr_page_header h = kvp_header(page);
	if (h.version != WR_PAGE_VERSION || h.lower < WR_PAGE_HEADER_SIZE || h.lower > h.upper ||
	    h.upper > h.special || h.special != KV_SPECIAL_OFF ||
	    (h.lower - WR_PAGE_HEADER_SIZE) % KV_LP_SIZE != 0)
		return false;
	int n = kvp_nslots(page);
	for (int i = 0; i < n; i++) {
		kv_lp lp = kvp_lp(page, i);
		if (lp.off < h.upper || lp.off + lp.len > h.special)
			return false;
	}
	return true;
}

void kvp_set_special(char *page, const kv_special *s)
{
	memcpy(page + KV_SPECIAL_OFF, s, sizeof(*s));
}

/* ---------------------------------------------------------------- nodes */

void kvn_init(char *page, uint16_t level, uint16_t flags, wr_blkno left, wr_blkno right,
              const kv_key *low, const kv_key *high)
{
	page_init(page, sizeof(kv_special), KV_PT_NODE);
	flags &= (uint16_t) ~(KVN_LOW_INF | KVN_HIGH_INF);
	flags |= (uint16_t)((low->inf ? KVN_LOW_INF : 0) | (high->inf ? KVN_HIGH_INF : 0));
	kv_special s = {.left = left, .right = right, .level = level, .flags = flags};
	kvp_set_special(page, &s);
	kvp_insert(page, 0, low->p, low->inf ? 0 : low->len);
	kvp_insert(page, 1, high->p, high->inf ? 0 : high->len);
}

/* A leaf's prefix: none on internal nodes, at most kvn_prefix_bound. */
static bool prefix_sane(const char *page)
{
	kv_special sp = kvp_special(page);
	if (sp.level != 0 || sp.prefix == 0)
		return sp.prefix == 0;
	return kvp_nslots(page) >= KV_FIRST_SLOT && sp.prefix <= kvn_prefix_bound(page);
}

/* A leaf entry that decodes, within the size limit, whose whole key is 1 to
 * KV_MAX_KEY bytes (the writer re-encodes entries in buffers of the limit). */
static bool leaf_entry_sane(const char *item, uint16_t len, uint16_t prefix, kv_leaf_ent *e)
{
	return (unsigned)len + KV_LP_SIZE <= KV_LEAF_ITEM_MAX && kvl_decode(item, len, e) &&
	       prefix + e->klen >= 1 && prefix + e->klen <= KV_MAX_KEY;
}

bool kvn_entries_sane(const char *page)
{
	int level = kvp_special(page).level, n = kvp_nslots(page);
	uint16_t prefix = kvp_special(page).prefix;
	if (!prefix_sane(page))
		return false;
	for (int s = 0; s < n; s++) {
		uint16_t len;
		const char *item = kvp_item(page, s, &len);
		kv_leaf_ent e;
		bool ok = s < KV_FIRST_SLOT ? len <= KV_MAX_KEY
		          : level == 0      ? leaf_entry_sane(item, len, prefix, &e)
		                       : len >= KV_INNER_HDR && len - KV_INNER_HDR <= KV_MAX_KEY;
		if (!ok)
			return false;
	}
	return true;
}

/*
 * The leaf's prefix, @n bytes long from now on: every entry re-encoded into
 * a copy whose items lie packed against the special space in slot order
 * (deterministic, for redo; kvp_compact's layout).  False when @n is more
 * than the fences share, an entry's key lacks the bytes, or the entries no
 * longer fit (a shorter prefix makes them longer).
 */
static bool set_prefix(char *page, uint16_t n)
{
	char tmp[WR_PAGE_SIZE];
	kv_special sp = kvp_special(page);
	kv_key low = kvn_low(page), old = kvn_prefix(page);
	int ns = kvp_nslots(page);
	if (sp.level != 0 || ns < KV_FIRST_SLOT || n > kvn_prefix_bound(page))
		return false;
	uint16_t lower = (uint16_t)(WR_PAGE_HEADER_SIZE + ns * KV_LP_SIZE), upper = KV_SPECIAL_OFF;
	memcpy(tmp, page, lower);
	for (int s = 0; s < ns; s++) {
		uint16_t len;
		const char *it = kvp_item(page, s, &len);
		int nl = len;
		kv_leaf_ent e;
		if (s >= KV_FIRST_SLOT) {
			if (!leaf_entry_sane(it, len, old.len, &e) ||
			    (n > old.len && (e.klen < n - old.len ||
			                     memcmp(e.key, low.p + old.len, n - old.len) != 0)))
				return false;
			nl = len + old.len - n;
		}
		if (nl + KV_LP_SIZE > (int)KV_LEAF_ITEM_MAX || upper - nl < lower)
			return false;
		upper = (uint16_t)(upper - nl);
		if (s < KV_FIRST_SLOT)
			memcpy(tmp + upper, it, len);
		else
			kvl_reencode(it, len, &old, n, tmp + upper);
		put_lp(tmp, s, (kv_lp){upper, (uint16_t)nl});
	}
	memset(tmp + lower, 0, (size_t)(upper - lower));
	set_u16(tmp, HDR_UPPER, upper);
	sp.prefix = n;
	kvp_set_special(tmp, &sp);
	memcpy(page, tmp, WR_PAGE_SIZE);
	return true;
}

/*
 * The searches below run on pages that are mostly not in the CPU's caches (a
 * get lands on a random leaf), and each probe's item is a miss that depends
 * on the previous compare.  Before comparing, a probe starts loading the
 * items of both probes that can come next, so the next miss overlaps this
 * one; the line pointers it reads for that are independent of the compare.
 */
static inline void prefetch_item(const char *page, int slot)
{
	kv_lp lp = kvp_lp(page, slot);
	__builtin_prefetch(page + (lp.off < KV_SPECIAL_OFF ? lp.off : 0));
}

/* The probe of [lo, hi), and with @depth the probes of the halves it leaves. */
static inline void prefetch_probes(const char *page, int lo, int hi, int depth)
{
	if (lo >= hi)
		return;
	int mid = lo + (hi - lo) / 2;
	prefetch_item(page, mid);
	if (depth > 0) {
		prefetch_probes(page, lo, mid, depth - 1);
		prefetch_probes(page, mid + 1, hi, depth - 1);
	}
}

/* Two probes ahead: the four items that can come after the next compare. */
static inline void prefetch_next(const char *page, int lo, int mid, int hi)
{
	int m1 = lo + (mid - lo) / 2, m2 = mid + 1 + (hi - mid - 1) / 2;
	prefetch_probes(page, lo, m1, 0);
	prefetch_probes(page, m1 + 1, mid, 0);
	prefetch_probes(page, mid + 1, m2, 0);
	prefetch_probes(page, m2 + 1, hi, 0);
}

/* The level is looked at once, not per probe: the two loops differ only in how
 * an entry's key is found. */
int kvn_lower_bound(const char *page, const void *k, size_t kl, bool *eq)
{
	int lo = KV_FIRST_SLOT, hi = kvp_nslots(page);
	/* No-op on a sane page; keeps a torn one that a peek reads (kv_tree.c)
	 * from taking line pointers past the page. */
	if (hi > (int)(KV_NODE_SPACE / KV_LP_SIZE))
		hi = (int)(KV_NODE_SPACE / KV_LP_SIZE);
	bool leaf = kvp_special(page).level == 0;
	*eq = false;
	if (leaf && kvp_special(page).prefix > 0) {
		/* Entries leave the prefix out: a key without it sorts before or after all. */
		kv_key p = kvn_prefix(page);
		int c = memcmp(k, p.p, kl < p.len ? kl : p.len);
		if (c < 0 || (c == 0 && kl < p.len))
			return lo;
		if (c > 0)
			return hi;
		k = (const char *)k + p.len;
		kl -= p.len;
	}
	prefetch_probes(page, lo, hi, 1);
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		prefetch_next(page, lo, mid, hi);
		kv_key e = leaf ? kvn_leaf_key(page, mid) : kvn_inner_key(page, mid);
		int c = kv_cmp(e.p, e.len, k, kl);
		if (c < 0) {
			lo = mid + 1;
		} else {
			hi = mid;
			if (c == 0)
				*eq = true;
		}
	}
	return lo;
}

/*
 * The first internal entry stands for minus infinity.  A child covers k
 * when its key is <= k; with @before, the child holding keys just below k
 * is the last whose key is < k.  k->inf means plus infinity here.
 */
int kvn_child_slot(const char *page, const kv_key *k, bool before)
{
	int lo = KV_FIRST_SLOT + 1, hi = kvp_nslots(page);
	if (k->inf)
		return hi - 1;
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		prefetch_next(page, lo, mid, hi);
		kv_key e = kvn_inner_key(page, mid);
		int c = kv_cmp(e.p, e.len, k->p, k->len);
		if (c < 0 || (c == 0 && !before))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo - 1;
}

/* ---------------------------------------------------------------- entries */

bool kvl_fits_inline(size_t kl, size_t vl)
{
	return KV_LEAF_HDR + kl + vl + KV_LP_SIZE <= KV_LEAF_ITEM_MAX;
}

static uint16_t leaf_head(char *out, const void *k, uint16_t kl, uint8_t kind)
{
	memcpy(out, &kl, sizeof(kl));
	out[2] = (char)kind;
	memcpy(out + KV_LEAF_HDR, k, kl);
	return (uint16_t)(KV_LEAF_HDR + kl);
}

uint16_t kvl_encode_inline(char *out, const void *k, uint16_t kl, const void *v, uint32_t vl)
{
	uint16_t n = leaf_head(out, k, kl, KV_INLINE);
	if (vl > 0)
		memcpy(out + n, v, vl);
	return (uint16_t)(n + vl);
}

uint16_t kvl_encode_ovf(char *out, const void *k, uint16_t kl, const kv_ovf_ref *ref)
{
	uint16_t n = leaf_head(out, k, kl, KV_OVERFLOW);
	memcpy(out + n, ref, sizeof(*ref));
	return (uint16_t)(n + KV_OVF_REF_SIZE);
}

uint16_t kvl_reencode(const char *item, uint16_t len, const kv_key *from, uint16_t to, char *out)
{
	uint16_t kl, nkl;
	memcpy(&kl, item, sizeof(kl));
	const char *key = item + KV_LEAF_HDR;
	char *okey = out + KV_LEAF_HDR;
	if (to <= from->len) { /* the bytes from @to on of the old prefix come back */
		nkl = (uint16_t)(from->len - to + kl);
		memcpy(okey, from->p + to, from->len - to);
		memcpy(okey + from->len - to, key, kl);
	} else {
		nkl = (uint16_t)(kl - (to - from->len));
		memcpy(okey, key + (to - from->len), nkl);
	}
	memcpy(out, &nkl, sizeof(nkl));
	out[2] = item[2];
	uint16_t rest = (uint16_t)(len - KV_LEAF_HDR - kl);
	memcpy(okey + nkl, key + kl, rest);
	return (uint16_t)(KV_LEAF_HDR + nkl + rest);
}

uint16_t kvi_encode(char *out, wr_blkno child, const void *k, uint16_t kl)
{
	memcpy(out, &child, sizeof(child));
	if (kl > 0)
		memcpy(out + KV_INNER_HDR, k, kl);
	return (uint16_t)(KV_INNER_HDR + kl);
}

/* ---------------------------------------------------------------- overflow, free, meta */

void kvo_init(char *page, uint64_t id, uint32_t seq, const void *data, uint32_t len, wr_blkno next)
{
	page_init(page, sizeof(kv_special), KV_PT_OVF);
	kv_ovf_hdr h = {.id = id, .seq = seq, .len = len};
	memcpy(page + WR_PAGE_HEADER_SIZE, &h, sizeof(h));
	memcpy(page + WR_PAGE_HEADER_SIZE + sizeof(h), data, len);
	/* The data sits below pd_lower, so a full-page image drops only the unused tail. */
	set_u16(page, HDR_LOWER, (uint16_t)(WR_PAGE_HEADER_SIZE + sizeof(h) + len));
	kv_special s = {.left = WR_INVALID_BLKNO, .right = next};
	kvp_set_special(page, &s);
}

kv_ovf_hdr kvo_header(const char *page)
{
	kv_ovf_hdr h;
	memcpy(&h, page + WR_PAGE_HEADER_SIZE, sizeof(h));
	return h;
}

const char *kvo_data(const char *page)
{
	return page + WR_PAGE_HEADER_SIZE + sizeof(kv_ovf_hdr);
}

void kvf_init(char *page, wr_blkno next)
{
	page_init(page, sizeof(kv_special), KV_PT_FREE);
	kv_special s = {.left = WR_INVALID_BLKNO, .right = next};
	kvp_set_special(page, &s);
}

void kvm_init(char *page, const kv_meta *m)
{
	page_init(page, sizeof(kv_special), KV_PT_META);
	set_u16(page, HDR_LOWER, (uint16_t)(WR_PAGE_HEADER_SIZE + sizeof(*m)));
	kv_special s = {.left = WR_INVALID_BLKNO, .right = WR_INVALID_BLKNO};
	kvp_set_special(page, &s);
	kvm_set(page, m);
}

kv_meta kvm_get(const char *page)
{
	kv_meta m;
	memcpy(&m, page + WR_PAGE_HEADER_SIZE, sizeof(m));
	return m;
}

void kvm_set(char *page, const kv_meta *m)
{
	memcpy(page + WR_PAGE_HEADER_SIZE, m, sizeof(*m));
}

/* ---------------------------------------------------------------- ops */

size_t kvop_image_size(const char *page)
{
	wr_page_header h = kvp_header(page);
	return (size_t)h.lower + (WR_PAGE_SIZE - h.upper);
}

void kvop_image(const char *page, char *out)
{
	wr_page_header h = kvp_header(page);
	memcpy(out, page, h.lower);
	/* LSN and checksum are not part of the content. */
	memset(out, 0, offsetof(wr_page_header, flags));
	memcpy(out + h.lower, page + h.upper, WR_PAGE_SIZE - h.upper);
}

static bool apply_image(char *page, const char *img, uint16_t len)
{
	wr_page_header h;
	if (len < sizeof(h))
		return false;
	memcpy(&h, img, sizeof(h));
	if (h.lower < WR_PAGE_HEADER_SIZE || h.lower > h.upper || h.upper > WR_PAGE_SIZE ||
	    (size_t)h.lower + (WR_PAGE_SIZE - h.upper) != len)
		return false;
	memset(page, 0, WR_PAGE_SIZE);
	memcpy(page, img, h.lower);
	memcpy(page + h.upper, img + h.lower, WR_PAGE_SIZE - h.upper);
	return true;
}

static bool slot_ok(const char *page, uint16_t slot, bool insert)
{
	int n = kvp_nslots(page);
	return insert ? slot <= n : slot < n;
}

/* One op; false when it does not apply to this page. */
static bool apply_one(char *page, uint8_t code, uint16_t slot, const char *p, uint16_t len)
{
	bool node = kvp_type(page) != 0;
	switch (code) {
	case KVOP_INIT:
		return apply_image(page, p, len);
	case KVOP_INSERT:
		return node && slot_ok(page, slot, true) && kvp_insert(page, slot, p, len);
	case KVOP_DELETE:
		if (!node || !slot_ok(page, slot, false))
			return false;
		kvp_delete(page, slot);
		return true;
	case KVOP_REPLACE:
		return node && slot_ok(page, slot, false) && kvp_replace(page, slot, p, len);
	case KVOP_TRUNCATE:
		if (!node || !slot_ok(page, slot, true))
			return false;
		kvp_truncate(page, slot);
		return true;
	case KVOP_SPECIAL:
		if (!node || len != sizeof(kv_special))
			return false;
		memcpy(page + KV_SPECIAL_OFF, p, len);
		return true;
	case KVOP_META:
		if (kvp_type(page) != KV_PT_META || len != sizeof(kv_meta))
			return false;
		memcpy(page + WR_PAGE_HEADER_SIZE, p, len);
		return true;
	case KVOP_NKEYS:
		if (kvp_type(page) != KV_PT_META || len != sizeof(uint64_t))
			return false;
		memcpy(page + WR_PAGE_HEADER_SIZE + offsetof(kv_meta, nkeys), p, len);
		return true;
	case KVOP_PREFIX:
		return kvp_type(page) == KV_PT_NODE && len == 0 && set_prefix(page, slot);
	default:
		return false;
	}
}

int kvop_unknown(const char *ops, size_t len)
{
	for (size_t pos = 0; len - pos >= KVOP_HDR;) {
		uint8_t code = (uint8_t)ops[pos];
		uint16_t l;
		memcpy(&l, ops + pos + 3, 2);
		if (code == 0 || code >= KVOP_NCODES)
			return code;
		if (len - pos - KVOP_HDR < l)
			break;
		pos += KVOP_HDR + l;
	}
	return -1;
}

bool kvop_apply(char *page, const char *ops, size_t len, char *why, size_t whylen)
{
	size_t pos = 0;
	while (pos < len) {
		uint16_t slot, l;
		if (len - pos < KVOP_HDR) {
			snprintf(why, whylen, "truncated op header at byte %zu", pos);
			return false;
		}
		uint8_t code = (uint8_t)ops[pos];
		memcpy(&slot, ops + pos + 1, 2);
		memcpy(&l, ops + pos + 3, 2);
		if (len - pos - KVOP_HDR < l) {
			snprintf(why, whylen, "op %u at byte %zu overruns its data", code, pos);
			return false;
		}
		if (!apply_one(page, code, slot, ops + pos + KVOP_HDR, l)) {
			snprintf(why, whylen,
			         "op %u (slot %u, %u bytes) at byte %zu does not apply", code, slot,
			         l, pos);
			return false;
		}
		pos += KVOP_HDR + l;
	}
	return true;
}

static const char *op_name(uint8_t code)
{
	static const char *const names[] = {"?",        "init",  "insert", "delete", "replace",
	                                    "truncate", "links", "meta",   "nkeys",  "prefix"};
	return code < WR_ARRAY_LEN(names) ? names[code] : "?";
}

void kvop_describe(const char *ops, size_t len, char *buf, size_t buflen)
{
	size_t pos = 0, used = 0;
	buf[0] = '\0';
	while (pos + KVOP_HDR <= len && used + 1 < buflen) {
		uint16_t slot, l;
		uint8_t code = (uint8_t)ops[pos];
		memcpy(&slot, ops + pos + 1, 2);
		memcpy(&l, ops + pos + 3, 2);
		if (code == KVOP_DELETE || code == KVOP_TRUNCATE || code == KVOP_PREFIX)
			snprintf(buf + used, buflen - used, "%s%s %u", used ? ", " : "",
			         op_name(code), slot);
		else if (code == KVOP_INSERT || code == KVOP_REPLACE)
			snprintf(buf + used, buflen - used, "%s%s %u (%u B)", used ? ", " : "",
			         op_name(code), slot, l);
		else
			snprintf(buf + used, buflen - used, "%s%s (%u B)", used ? ", " : "",
			         op_name(code), l);
		used += strlen(buf + used);
		pos += KVOP_HDR + l;
	}
}
