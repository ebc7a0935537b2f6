/*
 * sync_int.h - inside the checkpointer module: what the two sides of the
 * sync-request queue share.  sync.c is the checkpointer's side (the shared
 * region, the table, absorbing, the sync phase); sync_send.c the side every
 * process runs.  Calls go one way, from sync_send.c to sync.c.  Only these
 * two files include it; checkpointer.h is the module's contract.
 */
#ifndef WALRUS_CKPT_SYNC_INT_H
#define WALRUS_CKPT_SYNC_INT_H

#include "checkpointer/checkpointer.h"

/* Region "ckptsync". */
typedef struct cks_shared {
	_Atomic uint64_t cycle;
	_Atomic uint64_t latch_off;    /* the checkpointer's latch; 0 = this region's latch */
	_Atomic uint32_t latch;        /* the default latch */
	_Atomic uint32_t wake_pending; /* a sender woke the checkpointer since the last absorb */
	_Atomic uint64_t requests;
	_Atomic uint64_t absorbed;
	_Atomic uint64_t sender_fsyncs;
	_Atomic uint64_t early_syncs;
	_Atomic uint64_t forgets;
	_Atomic uint64_t files_synced;
} cks_shared;

/* This process's view of the region; NULL before ckpt_sync_shmem_init/attach. */
extern cks_shared *cks_sh;

/* A request on the wire. */
enum { CKS_REGISTER = 1, CKS_FORGET = 2 };

typedef struct cks_msg {
	uint32_t type;
	uint32_t rel;
	uint32_t seg; /* REGISTER: the segment; FORGET: the first segment to drop */
	uint32_t pad;
	uint64_t seq;   /* REGISTER: open_seq of the fd; FORGET: when it was sent */
	uint64_t cycle; /* REGISTER: the shared cycle the sender saw */
} cks_msg;

/* Adds @n to a counter of the region. */
void cks_count(_Atomic uint64_t *c, uint64_t n);
/* Wakes the checkpointer's latch. */
void cks_wake(void);
/* Requests sent but not yet absorbed (all connections together; forgets not counted). */
int64_t cks_backlog(void);
/* Whether this process is the listening checkpointer (requests then go straight to its table). */
bool cks_is_checkpointer(void);
/* The path of a segment, for messages. */
void cks_path(wr_relid rel, uint32_t seg, char *buf, size_t len);
/* close() of a socket, a failure logged. */
void cks_close_socket(int fd);
/* In the checkpointer: applies a REGISTER (taking @fd) or a FORGET to the table. */
void cks_add(wr_relid rel, uint32_t seg, uint64_t open_seq, uint64_t cycle, int fd);
void cks_forget(wr_relid rel, uint32_t from_seg, uint64_t when);
/* The checkpointer's half of ckpt_sync_shutdown (nothing in other processes). */
void cks_stop_listening(void);

#endif /* WALRUS_CKPT_SYNC_INT_H */
