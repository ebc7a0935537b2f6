/*
 * crc32c.c - CRC32C (Castagnoli) for pages, WAL records and the control file.
 *
 * Interface: crc32c() picks the fastest implementation once per process;
 * crc32c_sw() is the portable one, kept callable so tests can compare both.
 *
 * Notes: the value is the usual reflected CRC with pre- and post-inversion
 * done inside, so a caller can feed data in pieces:
 * crc32c(crc32c(0, a, na), b, nb) == crc32c(0, a||b, na+nb).
 * The software path is slicing-by-8: eight 256-entry tables let it consume a
 * 64-bit word per step instead of one byte.  The hardware path uses the
 * SSE4.2 crc32 instruction, which computes this very polynomial.
 */
#include "common/common.h"

#include <string.h>

#if defined(__x86_64__)
#include <nmmintrin.h>
#define WR_CRC_HAVE_X86 1
#endif

#define CRC32C_POLY 0x82F63B78u /* 0x1EDC6F41 bit-reversed */

static uint32_t crc_table[8][256];
static bool crc_table_ready;

static void crc_table_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ ((c & 1) ? CRC32C_POLY : 0);
		crc_table[0][i] = c;
	}
	for (int t = 1; t < 8; t++)
		for (int i = 0; i < 256; i++) {
			uint32_t prev = crc_table[t - 1][i];
			crc_table[t][i] = (prev >> 8) ^ crc_table[0][prev & 0xff];
		}
	crc_table_ready = true;
}

/* Byte-wise assembly keeps the software path correct on big-endian hosts too. */
static inline uint32_t load_le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint32_t crc32c_sw(uint32_t crc, const void *data, size_t len)
{
	const unsigned char *p = data;
	uint32_t c = ~crc;

	if (WR_UNLIKELY(!crc_table_ready))
		crc_table_init();
	while (len >= 8) {
		uint32_t lo = c ^ load_le32(p);
		uint32_t hi = load_le32(p + 4);
		c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
		    crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^
		    crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
		    crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
		p += 8;
		len -= 8;
	}
	while (len-- > 0)
		c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
	return ~c;
}

#ifdef WR_CRC_HAVE_X86
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const void *data,
                                                            size_t len)
{
	const unsigned char *p = data;
	uint64_t c = ~crc;

	/* Align first so the 8-byte loads below never straddle a cache line needlessly. */
	while (len > 0 && ((uintptr_t)p & 7) != 0) {
		c = _mm_crc32_u8((uint32_t)c, *p++);
		len--;
	}
	while (len >= 8) {
		uint64_t w;
		memcpy(&w, p, sizeof(w));
		c = _mm_crc32_u64(c, w);
		p += 8;
		len -= 8;
	}
	while (len-- > 0)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	return ~(uint32_t)c;
}
#endif

/* -1: not yet decided; 0: software; 1: SSE4.2. */
static int crc_use_hw = -1;

static bool crc_decide(void)
{
#ifdef WR_CRC_HAVE_X86
	/* Needed when this runs from a constructor, before libgcc has probed the CPU. */
	__builtin_cpu_init();
	crc_use_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
	crc_use_hw = 0;
#endif
	if (!crc_use_hw && !crc_table_ready)
		crc_table_init();
	return crc_use_hw;
}

/*
 * Decide before main(), so the lazily set statics are never first written
 * by two threads of an embedding application at once.
 */
__attribute__((constructor)) static void crc_startup(void)
{
	crc_table_init();
	crc_decide();
}

bool crc32c_hw_available(void)
{
	if (WR_UNLIKELY(crc_use_hw < 0))
		return crc_decide();
	return crc_use_hw == 1;
}

uint32_t crc32c(uint32_t crc, const void *data, size_t len)
{
#ifdef WR_CRC_HAVE_X86
	if (WR_LIKELY(crc32c_hw_available()))
		return crc32c_hw(crc, data, len);
#endif
	return crc32c_sw(crc, data, len);
}
