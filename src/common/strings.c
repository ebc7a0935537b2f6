/*
 * strings.c - small string helpers shared by every module.
 *
 * Interface: wr_snprintf(), an snprintf whose result is a plain "did it
 * fit", so building a path reads:  if (!wr_snprintf(...)) return wr_error(...).
 */
#include "common/common.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

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

ssize_t wr_read_full(int fd, void *buf, size_t len)
{
	size_t got = 0;
	while (got < len) {
		ssize_t n = read(fd, (char *)buf + got, len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

size_t wr_shown(char *buf, size_t cap, const char *src, size_t len, char other)
{
	size_t n = 0;
	for (; n < len && n + 1 < cap; n++) {
		unsigned char c = (unsigned char)src[n];
		buf[n] = c >= 0x20 && c < 0x7f ? (char)c : other;
	}
	if (cap > 0)
		buf[n] = '\0';
	return n;
}

int wr_write_full(int fd, const void *buf, size_t len)
{
	size_t done = 0;
	while (done < len) {
		ssize_t n = write(fd, (const char *)buf + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		done += (size_t)n;
	}
	return 0;
}
