/*
 * peers.h - walrus-peers: the interface each peer engine (SQLite, LMDB,
 * RocksDB) implements for the workloads of peers.c, and the few helpers the
 * engine files share with it.
 *
 * Interface routines of an engine (peers_engine):
 *   open     open or create the database in an existing directory, for
 *            asynchronous (sync = false) or durable (sync = true) writes
 *   put      one write, committed on its own (no batching)
 *   get      one point read into a caller buffer; false when absent
 *   scan     every pair in key order, handed to a callback
 *   close    release the handle
 *
 * Notes: an engine never returns an error. Every library call is checked and
 * a failure ends the program through peers_fatal(), which names the engine
 * and the call, so the workloads stay free of error plumbing. An engine with
 * threads == true cannot be opened by several processes at once; its
 * multi-client workloads share one handle among threads.
 */
#ifndef WALRUS_PEERS_H
#define WALRUS_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Exit codes, as the walrus command's: usage or verification failure, engine
 * or system error. */
#define PEERS_EXIT_DAMAGE 2
#define PEERS_EXIT_ERROR  3

typedef void (*peers_scan_cb)(void *arg, const char *key, size_t klen, const char *val,
                              size_t vlen);

typedef struct peers_open_args {
	const char *dir; /* existing directory that holds only this database */
	bool sync;       /* each put durable before it returns */
	uint64_t nkeys;  /* most keys the database will hold (LMDB map size) */
} peers_open_args;

typedef struct peers_engine {
	const char *name;
	bool threads; /* single-process engine: clients are threads */
	const char *(*version)(void);
	void *(*open)(const peers_open_args *args);
	void (*close)(void *h);
	void (*put)(void *h, const char *key, size_t klen, const char *val, size_t vlen);
	bool (*get)(void *h, const char *key, size_t klen, char *buf, size_t cap, size_t *vlen);
	void (*scan)(void *h, peers_scan_cb cb, void *arg);
} peers_engine;

extern const peers_engine peers_sqlite;
extern const peers_engine peers_lmdb;
extern const peers_engine peers_rocksdb;

/* Print "walrus-peers: WHO: OP failed: DETAIL" (WHO is the engine, or NULL
 * outside an engine's run), stop every child process,
 * remove the scratch directories (unless --keep) and exit with
 * PEERS_EXIT_ERROR. Safe to call from a child process or a thread. */
_Noreturn void peers_fatal(const char *who, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Same, for a wrong result (exit PEERS_EXIT_DAMAGE). */
_Noreturn void peers_mismatch(const char *who, const char *workload, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void *peers_xmalloc(const char *what, size_t n);

#endif
