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
 *
 * One crc32 instruction takes three cycles before the next can use its
 * result, but a core can start one per cycle: a single chain over a page
 * runs at a third of the speed the unit has.  So the hardware path cuts
 * long inputs into rounds of three stripes, runs three independent chains
 * (the first from the running value, the others from zero) and joins them:
 * the register after A||B is the register after A multiplied by
 * x^(8|B|) mod P, xor the register after B from zero (the CRC is linear).
 * The multiplication by the fixed x^(8 * stripe) is four table lookups.
 * Page checksums on every pool miss were 10% of a larger-than-memory read
 * workload (a perf profile of readrandom on a 10M-key tree).
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
/* Bytes of one stripe: a multiple of 8; two rounds of three per 8 KiB page. */
#define CRC_STRIPE ((size_t)1360)

/* crc_shift_tab[k][b]: the register (b << 8k) after CRC_STRIPE zero bytes. */
static uint32_t crc_shift_tab[4][256];

/* @c times x^(8 * CRC_STRIPE) mod P: the register @c after a stripe of zeros. */
static inline uint32_t crc_shift(uint32_t c)
{
	return crc_shift_tab[0][c & 0xff] ^ crc_shift_tab[1][(c >> 8) & 0xff] ^
	       crc_shift_tab[2][(c >> 16) & 0xff] ^ crc_shift_tab[3][c >> 24];
}

/* Shifts each of the 32 single-bit registers through the zeros, then fills
 * the tables by linearity. */
__attribute__((target("sse4.2"))) static void crc_shift_init(void)
{
	uint32_t bit[32];
	for (int i = 0; i < 32; i++) {
		uint64_t v = 1u << i;
		for (size_t n = 0; n < CRC_STRIPE; n += 8)
			v = _mm_crc32_u64(v, 0);
		bit[i] = (uint32_t)v;
	}
	for (int k = 0; k < 4; k++)
		for (int b = 0; b < 256; b++) {
			uint32_t v = 0;
			for (int i = 0; i < 8; i++)
				if (b & (1 << i))
					v ^= bit[8 * k + i];
			crc_shift_tab[k][b] = v;
		}
}

static inline uint64_t load64(const unsigned char *p)
{
	uint64_t w;
	memcpy(&w, p, sizeof(w));
	return w;
}

/* Rounds of three stripes, three chains in flight; returns the register. */
__attribute__((target("sse4.2"))) static uint64_t crc_rounds(uint64_t c, const unsigned char **pp,
                                                             size_t *len)
{
	const unsigned char *p = *pp;
	while (*len >= 3 * CRC_STRIPE) {
		uint64_t c1 = 0, c2 = 0;
		for (size_t i = 0; i < CRC_STRIPE; i += 8) {
			c = _mm_crc32_u64(c, load64(p + i));
			c1 = _mm_crc32_u64(c1, load64(p + CRC_STRIPE + i));
			c2 = _mm_crc32_u64(c2, load64(p + 2 * CRC_STRIPE + i));
		}
		c = crc_shift(crc_shift((uint32_t)c) ^ (uint32_t)c1) ^ (uint32_t)c2;
		p += 3 * CRC_STRIPE;
		*len -= 3 * CRC_STRIPE;
	}
	*pp = p;
	return c;
}

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
	c = crc_rounds(c, &p, &len);
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
	if (__builtin_cpu_supports("sse4.2"))
		crc_shift_init(); /* before crc_use_hw says the hardware path may run */
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
