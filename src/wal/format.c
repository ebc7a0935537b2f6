/*
 * format.c - the WAL formats walrus has written, and what to say when WAL
 * of a format this walrus does not read turns up (wal.h, "WAL formats").
 *
 * A format bump is WAL_FORMAT + 1 in wal.h and its line here.  The table
 * keeps every format, so that messages name the walrus that wrote even an
 * old one.
 */
#include <stdio.h>
#include <string.h>

#include "wal/wal.h"

static const struct {
	uint32_t format;
	const char *walrus; /* the first version that writes it */
} wal_formats[] = {
    {1, "0.1.0"},
    /* key spaces: a commit record may name relations it drops */
    {2, "0.2.0"},
};

_Static_assert(WR_ARRAY_LEN(wal_formats) == WAL_FORMAT,
               "each WAL format up to WAL_FORMAT has its line in wal_formats[]");

const char *wal_format_walrus(uint32_t format)
{
	for (size_t i = 0; i < WR_ARRAY_LEN(wal_formats); i++)
		if (wal_formats[i].format == format)
			return wal_formats[i].walrus;
	return NULL;
}

bool wal_walrus_version_ok(const char *v)
{
	size_t n = strnlen(v, WAL_NEEDS_LEN);
	if (n == WAL_NEEDS_LEN)
		return false;
	for (size_t i = 0; i < n; i++)
		if (v[i] <= ' ' || v[i] > '~' || v[i] == '"')
			return false;
	return true;
}

void wal_format_why(uint32_t format, const char *needs, char *buf, size_t len)
{
	if (format < WAL_FORMAT_OLDEST)
		snprintf(buf, len,
		         "is no longer read by walrus %s (it reads WAL formats %u to %u; walrus "
		         "%s wrote it)",
		         WR_WALRUS_VERSION, WAL_FORMAT_OLDEST, WAL_FORMAT,
		         wal_format_walrus(format) ? wal_format_walrus(format) : "?");
	else if (needs != NULL && needs[0] != '\0')
		snprintf(buf, len, "needs walrus >= %s (this is walrus %s)", needs,
		         WR_WALRUS_VERSION);
	else
		snprintf(buf, len,
		         "needs a walrus newer than this one (walrus %s, which reads WAL "
		         "formats %u to %u)",
		         WR_WALRUS_VERSION, WAL_FORMAT_OLDEST, WAL_FORMAT);
}
