/*
 * fuzz_wal.c - libFuzzer target: the WAL record decoder.
 *
 * What recovery and `walrus waldump` do with a record read from a segment:
 * wal_decode (length, CRC, block headers, image headers, data layout), then
 * each block's full-page image through wal_fpi_decode (hole, zstd), then
 * the resource manager's describe function (RM_XLOG, RM_TEST, RM_KV).
 *
 * Input: the first byte chooses the mode, the rest is the record.  Mode bit
 * 0 set: the record is taken as it is (almost every input then fails the
 * CRC, as damaged WAL does).  Clear: the harness first makes tot_len and
 * the CRC match, so the fuzzer reaches the decoding behind the checksum --
 * a record whose CRC is right but whose content is wrong is what a bug in
 * the writer, or a collision, would hand recovery.  Nothing may crash or
 * read out of bounds; every failure must be a WALRUS_ECORRUPT with a
 * message.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "kv/kv.h"
#include "wal/wal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool init;
	if (!init) {
		wal_register_builtin_rmgrs();
		kv_register_rmgr();
		init = true;
	}
	if (size < 1 || size > (1u << 20))
		return 0;
	uint8_t mode = data[0];
	size_t len = size - 1;
	/* An exact-size heap copy: ASan sees any read past the record. */
	char *raw = malloc(len ? len : 1);
	if (raw == NULL)
		return 0;
	memcpy(raw, data + 1, len);
	if (!(mode & 1) && len >= WAL_RECORD_HEADER) {
		wal_record h;
		memcpy(&h, raw, sizeof(h));
		h.tot_len = (uint32_t)len;
		memcpy(raw, &h, sizeof(h));
		uint32_t crc = crc32c(0, raw + WAL_RECORD_HEADER, len - WAL_RECORD_HEADER);
		crc = crc32c(crc, raw, offsetof(wal_record, crc));
		h.crc = crc;
		memcpy(raw, &h, sizeof(h));
	}
	static wal_decoded dec;
	if (wal_decode(raw, (uint32_t)len, 0x1000000, &dec) == WALRUS_OK) {
		static char page[WR_PAGE_SIZE];
		for (int i = 0; i < dec.nblocks; i++) {
			const wal_decoded_block *b = &dec.blocks[i];
			if (b->image != NULL)
				(void)wal_fpi_decode(b->image, &b->ih, b->flags, page);
		}
		const wal_rmgr *rm = wal_rmgr_get(dec.hdr.rmid);
		if (rm != NULL && rm->describe != NULL) {
			char desc[1024];
			rm->describe(&dec, desc, sizeof(desc));
		}
		if (rm != NULL && rm->info_name != NULL)
			(void)rm->info_name(dec.hdr.info);
	}
	(void)walrus_errmsg();
	free(raw);
	return 0;
}
