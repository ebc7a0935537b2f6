/*
 * fuzz_page.c - libFuzzer target: a data page read from disk, and the page
 * ops that redo applies to it.
 *
 * Input: byte 0 = flags, bytes 1..4 = block number, then the 8 KiB page
 * (zero-padded when short), then one byte n and an n-byte search key, then
 * page ops (kv_int.h: u8 code, u16 slot, u16 len, data).
 *
 *  1. page_verify / page_checksum: what smgr_read decides about any 8 KiB
 *     it reads.  Unless flag bit 0 is set, the harness stamps a correct
 *     checksum first, so the page gets past the checksum to the readers
 *     (a page that is damaged but checksummed is what a bug would write).
 *  2. The B+tree readers, gated exactly as the engine gates them
 *     (kv_tree.c locate(), kv_iter.c, kv_tree.c ovf_piece): a node that is
 *     KV_PT_NODE, kvp_sane and has its two fences goes through the fences,
 *     kvn_lower_bound, kvn_child_slot/kvn_child, every entry key,
 *     kvl_decode of leaf entries and kvn_entries_sane; overflow and meta
 *     pages through their header readers.  kvp_sane must keep every item
 *     inside the page: the harness checks that itself.
 *  3. kvop_apply (redo) of the ops on a copy of the page when it is new or
 *     kvp_sane (the states redo can meet), and kvop_describe (waldump).
 * Nothing may crash, read or write out of bounds, or loop.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_int.h"
#include "storage/storage.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint32_t sink;

/* Reads every byte of [p, p+n), which must lie inside the page. */
static void touch(const char *page, const char *p, size_t n)
{
	if (n > 0 && (p < page || p + n > page + WR_PAGE_SIZE)) {
		fprintf(stderr, "fuzz_page: a reader returned bytes outside the page\n");
		abort();
	}
	uint32_t s = 0;
	for (size_t i = 0; i < n; i++)
		s += (unsigned char)p[i];
	sink += s;
}

static void read_node(const char *page, const char *key, uint16_t kl)
{
	kv_special sp = kvp_special(page);
	kv_key low = kvn_low(page), high = kvn_high(page);
	touch(page, low.p, low.len);
	touch(page, high.p, high.len);
	int n = kvp_nslots(page);
	for (int s = KV_FIRST_SLOT; s < n; s++) {
		char buf[KV_MAX_KEY];
		kv_key k = kvn_entry_key(page, s, buf), stored = kvn_leaf_key(page, s);
		if (k.p != buf)
			touch(page, k.p, k.len);
		else if (k.len > KV_MAX_KEY)
			abort();
		if (sp.level == 0)
			touch(page, stored.p, stored.len);
		if (sp.level == 0) {
			uint16_t len;
			const char *item = kvp_item(page, s, &len);
			kv_leaf_ent e;
			if (kvl_decode(item, len, &e)) {
				touch(page, e.key, e.klen);
				if (e.kind == KV_INLINE)
					touch(page, e.val, e.vlen);
			}
		}
	}
	bool eq;
	int pos = kvn_lower_bound(page, key, kl, &eq);
	if (pos < KV_FIRST_SLOT || pos > n)
		abort();
	if (sp.level > 0 && kvn_nentries(page) > 0) {
		kv_key k = {.p = key, .len = kl, .inf = kl == 0};
		for (int before = 0; before < 2; before++) {
			int slot = kvn_child_slot(page, &k, before);
			if (slot < KV_FIRST_SLOT || slot >= n)
				abort();
			sink += kvn_child(page, slot);
		}
		kv_key lo = {.p = NULL, .len = 0, .inf = true};
		sink += kvn_child(page, kvn_child_slot(page, &lo, false));
	}
	sink += kvn_entries_sane(page);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 5)
		return 0;
	uint8_t flags = data[0];
	uint32_t blkno;
	memcpy(&blkno, data + 1, 4);
	data += 5;
	size -= 5;
	char *page = calloc(1, WR_PAGE_SIZE);
	if (page == NULL)
		return 0;
	size_t n = size < WR_PAGE_SIZE ? size : WR_PAGE_SIZE;
	memcpy(page, data, n);
	data += n;
	size -= n;
	uint16_t kl = 0;
	char key[256];
	if (size > 0) {
		kl = data[0];
		if (kl > size - 1)
			kl = (uint16_t)(size - 1);
		memcpy(key, data + 1, kl);
		data += 1 + kl;
		size -= 1 + kl;
	}

	if (!(flags & 1))
		page_set_checksum(page, blkno);
	if (page_verify(page, blkno)) {
		uint8_t type = kvp_type(page);
		if (type == KV_PT_NODE && kvp_sane(page) && kvp_nslots(page) >= KV_FIRST_SLOT) {
			int ns = kvp_nslots(page);
			for (int s = 0; s < ns; s++) {
				uint16_t len;
				const char *item = kvp_item(page, s, &len);
				touch(page, item, len);
			}
			read_node(page, key, kl);
		} else if (type == KV_PT_OVF) {
			kv_ovf_hdr h = kvo_header(page);
			if (h.len > 0 && h.len <= KV_OVF_CHUNK)
				touch(page, kvo_data(page), h.len);
			sink += kvp_special(page).right;
		} else if (type == KV_PT_META) {
			kv_meta m = kvm_get(page);
			sink += m.root + m.height + m.free_head;
		}
	}

	/* Redo: the ops applied to the page (a copy: the size is exact). */
	if (size > 0 && (page_is_new(page) || kvp_sane(page))) {
		char *ops = malloc(size);
		char *copy = malloc(WR_PAGE_SIZE);
		if (ops != NULL && copy != NULL) {
			memcpy(ops, data, size);
			memcpy(copy, page, WR_PAGE_SIZE);
			char why[128];
			if (kvop_apply(copy, ops, size, why, sizeof(why)) && kvp_sane(copy) &&
			    kvp_type(copy) == KV_PT_NODE && kvp_nslots(copy) >= KV_FIRST_SLOT)
				read_node(copy, key, kl);
			char desc[512];
			kvop_describe(ops, size, desc, sizeof(desc));
		}
		free(ops);
		free(copy);
	}
	free(page);
	return 0;
}
