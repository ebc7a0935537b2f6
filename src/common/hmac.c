/*
 * hmac.c - HMAC-SHA256 and PBKDF2 for the replication handshake, through
 * OpenSSL's libcrypto: the hash, the MAC and the key derivation are the
 * library's, never our own.
 */
#include "common/common.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <string.h>

int wr_hmac_sha256(const void *key, size_t klen, const struct wr_iovec_c *parts, int nparts,
                   uint8_t out[WR_SHA256_LEN])
{
	EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	EVP_MAC_CTX *ctx = mac != NULL ? EVP_MAC_CTX_new(mac) : NULL;
	char digest[] = "SHA256";
	OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
	                       OSSL_PARAM_construct_end()};
	/* An empty key is a valid HMAC key; OpenSSL wants a non-NULL pointer for it. */
	static const uint8_t none[1];
	bool ok = ctx != NULL && EVP_MAC_init(ctx, klen > 0 ? key : none, klen, params) == 1;
	for (int i = 0; ok && i < nparts; i++)
		ok = EVP_MAC_update(ctx, parts[i].base, parts[i].len) == 1;
	size_t len = 0;
	ok = ok && EVP_MAC_final(ctx, out, &len, WR_SHA256_LEN) == 1 && len == WR_SHA256_LEN;
	EVP_MAC_CTX_free(ctx);
	EVP_MAC_free(mac);
	if (!ok)
		return wr_error(WALRUS_EINTERNAL, "HMAC-SHA256 failed in libcrypto");
	return WALRUS_OK;
}

int wr_pbkdf2_sha256(const char *password, const uint8_t *salt, size_t saltlen, uint32_t iterations,
                     uint8_t *out, size_t outlen)
{
	if (PKCS5_PBKDF2_HMAC(password, (int)strlen(password), salt, (int)saltlen, (int)iterations,
	                      EVP_sha256(), (int)outlen, out) != 1)
		return wr_error(WALRUS_EINTERNAL, "PBKDF2-HMAC-SHA256 failed in libcrypto");
	return WALRUS_OK;
}

bool wr_mac_equal(const uint8_t *a, const uint8_t *b, size_t len)
{
	return CRYPTO_memcmp(a, b, len) == 0;
}
