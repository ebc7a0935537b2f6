/*
 * ipc.h - shared memory, cross-process locks and waits, Unix sockets and
 * fd passing.
 *
 * Shared memory: one memfd created by the supervisor, sized at start from
 * the options, and mapped MAP_SHARED by every process of the instance.
 * Processes map it at different addresses (backends are application
 * processes, not children of the supervisor), so shared structures hold
 * offsets, never pointers: shm_ptr()/shm_off() convert with the process's
 * base.  A process serves one instance, so the base is a per-process global.
 * The segment starts with a header (magic, layout version, size, generation,
 * instance state) and a table of named regions, carved out once at
 * creation by shm_alloc() and found by name by attachers (shm_lookup()).
 *
 * Locks: a test-and-test-and-set spinlock with backoff for very short
 * sections, and a futex-based reader/writer lock (shared futexes, since the
 * words live in a MAP_SHARED mapping) that sleeps in the kernel.  Both keep
 * wait statistics.  A process that dies holding one (or waiting as the rw
 * lock's heir, to which a release hands it) leaves it held: that is why any
 * death of an attached process makes the supervisor throw the shared memory
 * away (crash restart), as PostgreSQL does.
 *
 * Waits: ipc_wait_u32() sleeps while a shared 32-bit word holds a value, with
 * a timeout; ipc_wake_all() wakes every sleeper on it in one call.  Waiters
 * must re-check the instance state after waking (a crash restart wakes them).
 *
 * Sockets: SOCK_SEQPACKET Unix sockets (message boundaries kept), bound and
 * connected through /proc/self/fd/N/name so that data directory paths longer
 * than sun_path work; fds travel with SCM_RIGHTS.  Received fds are
 * close-on-exec; a message whose fds were truncated (MSG_CTRUNC) is an error
 * and every fd that did arrive is closed (no leaks).
 *
 * Contract details: ipc_send refuses an empty message (the receiver would
 * read it as "peer closed"); ipc_recv's fds[] must hold IPC_MAX_FDS entries,
 * or be NULL for "none expected" (fds that arrive anyway are closed and the
 * call fails with EPROTO); ECONNRESET reads as the peer closing (len 0).
 * ipc_wait_u32 may return any errno: callers re-check their condition.
 * The rw lock cannot be taken shared twice by one process (a waiting writer
 * would deadlock it) nor upgraded.  The memfd is sealed against resizing.
 * With huge pages (MFD_HUGETLB) the kernel reserves every page when the
 * creator maps the segment, so a short reserve fails there, never later
 * as a SIGBUS on a first touch.
 *
 * Returns: WALRUS_* codes with a message.  PANICs: in a wait (spin or rw
 * lock) that finds the instance CRASHED, or a spin wait stuck for
 * IPC_STUCK_NS; nowhere else (callers decide).
 */
#ifndef WALRUS_IPC_H
#define WALRUS_IPC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/common.h"

/* ---------------------------------------------------------------- shared memory */

#define SHM_MAGIC          0x57414c5255534d31ULL /* "WALRUSM1" */
#define SHM_LAYOUT_VERSION 3
#define SHM_MAX_REGIONS    32
#define SHM_REGION_NAME    24

enum shm_state {
	SHM_STATE_STARTING = 0, /* being initialised / recovering */
	SHM_STATE_RUNNING = 1,
	SHM_STATE_CRASHED = 2,  /* a process died or PANICked: stop, return ERESTART */
	SHM_STATE_SHUTDOWN = 3, /* clean shutdown in progress: backends do no more I/O */
	SHM_STATE_STOPPING = 4, /* a shutdown drains: no new calls, calls under way finish */
};

typedef struct shm_region {
	char name[SHM_REGION_NAME];
	uint64_t off;
	uint64_t size;
} shm_region;

typedef struct shm_header {
	uint64_t magic;
	uint32_t layout_version;
	uint32_t nregions;
	uint64_t size;
	uint64_t alloc_off;          /* next free byte, during creation */
	_Atomic uint64_t generation; /* bumped by every crash restart */
	_Atomic uint32_t state;      /* enum shm_state; futex-waitable */
	_Atomic uint32_t panic_pid;  /* who PANICked, if anyone */
	uint64_t huge_page_size;     /* bytes of one huge page, or 0: normal pages */
	uint32_t page_size;          /* WR_PAGE_SIZE of the build that made it */
	uint32_t reserved;
	shm_region regions[SHM_MAX_REGIONS];
} shm_header;

/* Size the header plus @nregions regions of the given sizes need (cache-line aligned). */
size_t shm_size_for(const size_t *region_sizes, int nregions);

/*
 * Creates a memfd of @size, maps it, writes the header; sets the process
 * base.  @huge (enum wr_huge_pages) asks for huge pages: the size is
 * rounded up to whole huge pages and the kernel must have them reserved
 * (vm.nr_hugepages) when the segment is mapped.  WR_HUGE_TRY falls back to
 * normal pages when it cannot; WR_HUGE_ON fails with WALRUS_ENOMEM (or the
 * errno's code) and a message saying what to reserve.  The header's
 * huge_page_size says which it got.
 */
int shm_create(size_t size, int huge, int *fd_out);
/* Maps an existing segment (received fd), checks magic/version/page size/size;
 * sets the process base. */
int shm_attach(int fd);
/* Unmaps and forgets the base (does not close any fd). */
void shm_detach(void);
/* @fn runs in shm_detach before the unmap: for work of this process still
 * in flight on the segment (the buffer pool's background populates). */
void shm_set_unmap_hook(void (*fn)(void));

shm_header *shm_hdr(void); /* NULL when not attached */
static inline void *shm_ptr(uint64_t off);
static inline uint64_t shm_off(const void *p);

/* During creation only: carves a zeroed, 64-byte aligned region; NULL if no room. */
void *shm_alloc(const char *name, size_t size);
/* Finds a region by name; NULL (and optionally its size) if absent. */
void *shm_lookup(const char *name, size_t *size);

extern char *shm_base_;
static inline void *shm_ptr(uint64_t off)
{
	return shm_base_ + off;
}
static inline uint64_t shm_off(const void *p)
{
	return (uint64_t)((const char *)p - shm_base_);
}

/* ---------------------------------------------------------------- futex */

/* Sleeps while *addr == expected, up to timeout_ns (0 = forever).  0, or
 * ETIMEDOUT / EAGAIN / EINTR as positive errno values: callers re-check. */
int ipc_wait_u32(_Atomic uint32_t *addr, uint32_t expected, uint64_t timeout_ns);
void ipc_wake_all(_Atomic uint32_t *addr);
void ipc_wake_one(_Atomic uint32_t *addr);

/* ---------------------------------------------------------------- locks */

typedef struct wr_lock_stats {
	_Atomic uint64_t acquisitions;
	_Atomic uint64_t contended; /* acquisitions that had to wait */
	_Atomic uint64_t wait_ns;   /* total time spent waiting */
} wr_lock_stats;

typedef struct wr_spinlock {
	_Atomic uint32_t v;
	wr_lock_stats stats;
} wr_spinlock;

/*
 * A wait for a word another process of the instance will change (a
 * spinlock, a buffer header lock, a WAL insertion slot): backoff from pause
 * to yield to short sleeps.  The holder may have been killed, and then only
 * the instance's CRASHED state ends the wait: past the pause phase every
 * step checks it and PANICs (a backend's call then returns ERESTART).  A
 * holder that is alive but never lets go is a bug: after IPC_STUCK_NS of
 * waiting, "stuck spinlock" PANICs, as PostgreSQL's s_lock does.
 *     ipc_spin sp = IPC_SPIN_INIT("the WAL insert lock");
 *     while (busy) ipc_spin_delay(&sp);
 */
#define IPC_STUCK_NS (60ULL * 1000 * 1000 * 1000)
typedef struct ipc_spin {
	uint32_t round;
	uint64_t start_ns; /* of the first step past the pause phase */
	const char *what;  /* for the PANIC message */
} ipc_spin;
#define IPC_SPIN_INIT(what_)                                                                       \
	{                                                                                          \
		.round = 0, .start_ns = 0, .what = (what_)                                         \
	}
void ipc_spin_delay(ipc_spin *s);
/* Tests: shortens (or, with 0, restores) the stuck limit of this process. */
void ipc_set_stuck_ns(uint64_t ns);
/* Spin waits of this process that went past the pause phase. */
uint64_t ipc_spin_delays(void);

void spin_init(wr_spinlock *l);
void spin_lock(wr_spinlock *l);
bool spin_trylock(wr_spinlock *l);
void spin_unlock(wr_spinlock *l);

/*
 * Reader/writer lock on one 32-bit futex word: the low bits count readers,
 * the high bits mark a writer, sleepers, and the heir.  Writers are not
 * starved: a waiting writer blocks new readers, a release wakes one
 * sleeping writer (not all), and a writer that has waited 10 ms
 * becomes the heir, to which the next release hands the lock (lock.c).
 */
typedef struct wr_rwlock {
	_Atomic uint32_t state;
	_Atomic uint32_t writers_waiting;
	wr_lock_stats stats;
} wr_rwlock;

void rw_init(wr_rwlock *l);
void rw_lock_shared(wr_rwlock *l);
void rw_lock_excl(wr_rwlock *l);
bool rw_trylock_shared(wr_rwlock *l);
bool rw_trylock_excl(wr_rwlock *l);
void rw_unlock(wr_rwlock *l); /* releases whichever mode this process holds */
bool rw_held_excl(const wr_rwlock *l);
/* Tests: a waiting writer becomes the heir after @ns of waiting (0 restores the default, 10 ms). */
void ipc_set_heir_ns(uint64_t ns);

/* ---------------------------------------------------------------- sockets */

/* Listens on dir/name (SOCK_SEQPACKET, mode 0600, close-on-exec); unlinks a stale socket first. */
int ipc_listen(const char *dir, const char *name, int *fd_out);
/* Connects to dir/name; WALRUS_ENOENT when nothing listens there (missing or refused). */
int ipc_connect(const char *dir, const char *name, int *fd_out);
/* Accepts one connection (close-on-exec, non-blocking off). */
int ipc_accept(int lfd, int *fd_out);
/* The peer's pid (SO_PEERCRED). */
int ipc_peer_pid(int fd, pid_t *pid);

/* Sends one message with 0..IPC_MAX_FDS fds attached; retries EINTR; EPIPE is WALRUS_EIO. */
#define IPC_MAX_FDS 8
int ipc_send(int sock, const void *msg, size_t len, const int *fds, int nfds);
/*
 * Receives one message (blocking).  *len gets the message size (0 = peer
 * closed), *nfds the number of fds received into fds[].  A message or fd
 * array that did not fit is WALRUS_EPROTO, with every received fd closed.
 */
int ipc_recv(int sock, void *msg, size_t cap, size_t *len, int *fds, int *nfds);
/* Like ipc_recv but returns WALRUS_OK with *len == SIZE_MAX when nothing is queued. */
int ipc_recv_nowait(int sock, void *msg, size_t cap, size_t *len, int *fds, int *nfds);

/* A socketpair(AF_UNIX, SOCK_SEQPACKET), both ends close-on-exec. */
int ipc_socketpair(int fds[2]);

#endif /* WALRUS_IPC_H */
