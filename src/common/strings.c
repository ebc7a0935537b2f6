/*
 * strings.c - small string helpers shared by every module.
 *
 * Interface: wr_snprintf(), an snprintf whose result is a plain "did it
 * fit", so building a path reads:  if (!wr_snprintf(...)) return wr_error(...).
 */
#include "common/common.h"

#include <stdio.h>

bool wr_snprintf(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (len == 0)
		return false;
	va_start(ap, fmt);
	int n = vsnprintf(buf, len, fmt, ap);
	va_end(ap);
	if (n < 0) {
		buf[0] = '\0';
		return false;
	}
	return (size_t)n < len;
}
