/*
 * time.c - clocks and sleeping.
 *
 * Interface: wr_now_ns() for intervals (monotonic, immune to clock
 * changes), wr_wall_us() for timestamps people read, wr_sleep_us() that
 * sleeps the full time even when signals interrupt it.
 */
#include "common/common.h"

#include <errno.h>
#include <time.h>

uint64_t wr_now_ns(void)
{
	struct timespec ts;

	/* Cannot fail with a valid clock id and pointer; if it does, timing is meaningless. */
	if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
		wr_panic("could not read the monotonic clock: %m");
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t wr_wall_us(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		wr_panic("could not read the real-time clock: %m");
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void wr_sleep_us(uint64_t us)
{
	struct timespec req = {
	    .tv_sec = (time_t)(us / 1000000u),
	    .tv_nsec = (long)(us % 1000000u) * 1000L,
	};
	struct timespec rem;
	int saved_errno = errno;

	while (nanosleep(&req, &rem) != 0) {
		if (errno != EINTR)
			wr_panic("nanosleep failed: %m");
		req = rem;
	}
	errno = saved_errno;
}
