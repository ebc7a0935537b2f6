/*
 * fuzz_repl.c - libFuzzer target: the replication protocol's decoder
 * (src/repl/proto.c), which reads what unauthenticated peers send.
 *
 * Input: a byte stream as it would arrive on a replication connection;
 * messages are decoded one after the other until one is incomplete or
 * malformed.  Nothing may crash or read out of bounds.  Oracles besides
 * the sanitizers: a decoded message is consumed whole (header + its
 * length); encoding it gives a message that decodes to the same length and
 * type, and encoding that again gives the very same bytes (the decoder
 * normalises only what it must: an ERROR's text, bytes after a name's
 * terminator).
 */
#include "repl/repl_int.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t out1[REPL_HEADER_LEN + REPL_MAX_PAYLOAD], out2[REPL_HEADER_LEN + REPL_MAX_PAYLOAD];

static void check_reencode(const repl_msg *m)
{
	repl_msg m1, m2;
	size_t used1, used2;
	size_t n1 = repl_encode(m, out1, sizeof(out1));
	if (n1 == 0)
		abort(); /* what decodes must encode */
	if (repl_decode_buf(out1, n1, &m1, &used1) != WALRUS_OK || used1 != n1 ||
	    m1.type != m->type)
		abort();
	size_t n2 = repl_encode(&m1, out2, sizeof(out2));
	if (n2 != n1 || memcmp(out1, out2, n1) != 0)
		abort();
	if (repl_decode_buf(out2, n2, &m2, &used2) != WALRUS_OK || used2 != n2)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t off = 0;
	while (off < size) {
		repl_msg m;
		size_t used = 0;
		int rc = repl_decode_buf(data + off, size - off, &m, &used);
		if (rc != WALRUS_OK)
			break;
		if (used < REPL_HEADER_LEN || used > size - off)
			abort();
		check_reencode(&m);
		off += used;
	}
	return 0;
}
