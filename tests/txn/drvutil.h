/*
 * drvutil.h - what the transaction drivers (bankdrv, histdrv) share: their
 * pseudo-random numbers, numeric arguments and -o name=value options.
 */
#ifndef WALRUS_TESTS_TXN_DRVUTIL_H
#define WALRUS_TESTS_TXN_DRVUTIL_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "walrus.h"

/* splitmix64: a reproducible stream per seed. */
static inline uint64_t drv_rnd(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A decimal argument; false when @v is not one. */
static inline bool drv_num(const char *v, unsigned long long *out)
{
	char *end;
	errno = 0;
	*out = strtoull(v, &end, 10);
	return errno == 0 && *v != '\0' && *end == '\0';
}

/* -o NAME=VALUE into @o: 0, 1 for a malformed one (usage), 2 for one walrus refused (said). */
static inline int drv_opt(walrus_opts *o, const char *v, const char *prog)
{
	const char *eq = strchr(v, '=');
	if (eq == NULL)
		return 1;
	char key[128];
	snprintf(key, sizeof(key), "%.*s", (int)(eq - v), v);
	if (walrus_opts_set(o, key, eq + 1) != WALRUS_OK) {
		fprintf(stderr, "%s: -o %s: %s\n", prog, v, walrus_errmsg());
		return 2;
	}
	return 0;
}

#endif
