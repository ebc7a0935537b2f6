/*
 * grow.c - growing an array by doubling: the one copy of what many modules
 * need (WAL record buffers, batch arenas, lists of segments or nodes).
 *
 * Interface: wr_grow.
 *
 * Notes: the buffer's pointer is read and written with memcpy, so a caller
 * passes &p for p of any object pointer type without a cast through
 * void **, which would access a char * (say) through a void * lvalue.
 */
#include "common/common.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int wr_grow(void *bufp, size_t *cap, size_t need, size_t elem, size_t first)
{
	if (need <= *cap)
		return WALRUS_OK;
	if (elem == 0)
		return WALRUS_EINVAL;
	size_t max = SIZE_MAX / elem;
	if (need > max)
		return WALRUS_ENOMEM; /* need * elem bytes cannot even be counted */
	size_t n = *cap > 0 ? *cap : WR_MIN(WR_MAX(first, 1), max);
	while (n < need)
		n = n > max / 2 ? max : n * 2;
	void *old;
	memcpy(&old, bufp, sizeof(old));
	void *p = realloc(old, n * elem);
	if (p == NULL)
		return WALRUS_ENOMEM; /* the old buffer stays, as realloc leaves it */
	memcpy(bufp, &p, sizeof(p));
	*cap = n;
	return WALRUS_OK;
}
