/*
 * test_hmac.c - wr_hmac_sha256 (libcrypto underneath) on the RFC 4231
 * vectors, its message in parts as the replication handshake gives it, and
 * the MAC comparison.
 */
#include "common/common.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void hex(const uint8_t *d, char out[65])
{
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void check_hmac(const void *key, size_t klen, const void *data, size_t len, const char *want)
{
	uint8_t d[WR_SHA256_LEN];
	char h[65];
	/* In two parts: the handshake hashes a label and nonces that way. */
	struct wr_iovec_c parts[2] = {{data, len / 2},
	                              {(const char *)data + len / 2, len - len / 2}};
	ck_assert_int_eq(wr_hmac_sha256(key, klen, parts, 2, d), WALRUS_OK);
	hex(d, h);
	ck_assert_str_eq(h, want);
}

START_TEST(test_rfc4231_vectors)
{
	uint8_t k20[20], kaa[131], d50[50], k25[25];
	memset(k20, 0x0b, sizeof(k20));
	check_hmac(k20, 20, "Hi There", 8,
	           "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
	const char *q = "what do ya want for nothing?";
	check_hmac("Jefe", 4, q, strlen(q),
	           "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
	memset(kaa, 0xaa, sizeof(kaa));
	memset(d50, 0xdd, sizeof(d50));
	check_hmac(kaa, 20, d50, 50,
	           "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
	for (int i = 0; i < 25; i++)
		k25[i] = (uint8_t)(i + 1);
	memset(d50, 0xcd, sizeof(d50));
	check_hmac(k25, 25, d50, 50,
	           "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
	const char *t6 = "Test Using Larger Than Block-Size Key - Hash Key First";
	check_hmac(kaa, 131, t6, strlen(t6),
	           "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
	const char *t7 = "This is a test using a larger than block-size key and a larger than "
	                 "block-size data. The key needs to be hashed before being used by the "
	                 "HMAC algorithm.";
	check_hmac(kaa, 131, t7, strlen(t7),
	           "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
	/* An empty key and message: a valid HMAC all the same. */
	check_hmac("", 0, "", 0,
	           "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}
END_TEST

START_TEST(test_mac_equal)
{
	uint8_t a[32] = {0}, b[32] = {0};
	ck_assert(wr_mac_equal(a, b, 32));
	b[31] = 1;
	ck_assert(!wr_mac_equal(a, b, 32));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("hmac");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_rfc4231_vectors);
	tcase_add_test(tc, test_mac_equal);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
