/*
 * bankdrv.c - the client of the bank test (tests/txn/test_bank_crash.py):
 * accounts whose total must never change, moved between by transactions
 * that each leave a record of themselves, and readers that sum them.
 *
 *   bankdrv -D DIR [-o name=value ...] --prefix PFX --init [--accounts N] [--balance B]
 *   bankdrv -D DIR [-o name=value ...] --prefix PFX --client NAME --transfers
 *           [--accounts N] [--seed S] [--isolation serializable|snapshot|none]
 *           [--durability sync|async] [--until-eof] [--count C] [--max-restarts R]
 *   bankdrv -D DIR [-o name=value ...] --prefix PFX --client NAME --reader
 *           [--accounts N] [--reads snapshot|txn|mixed|plain]
 *           [--until-eof] [--count C] [--max-restarts R]
 *
 * Keys: PFX/a/NN, the N accounts (default 20), each holding its balance in
 * decimal; PFX/x/NAME/SEQ, the record of transfer SEQ of client NAME:
 * "FROM TO AMOUNT".
 *
 * --init writes every account with balance B (default 1000) in one
 * transaction, WALRUS_SYNC (an account already there is an error).
 *
 * --transfers: each transfer is a serializable transaction (flags 0;
 * --isolation snapshot: WALRUS_TXN_SNAPSHOT) that reads two distinct random
 * accounts, moves a random amount 1..100 (no more than the first holds) from
 * the first to the second, and puts its record, then commits with
 * WALRUS_SYNC (--durability async: WALRUS_ASYNC, "acked" then means applied,
 * not durable).  WALRUS_ECONFLICT: nothing applied, and the transfer is made
 * again as a new attempt (a new SEQ).  --isolation none does the same
 * without a transaction (plain gets, then one atomic batch of the three
 * puts): updates get lost, which the test's control case must see.
 *
 * --reader sums every account, each time through (--reads mixed, the
 * default, takes turns) a snapshot and walrus_get_into_at, a snapshot's
 * iterator (walrus_iter_open_at), or a read-only serializable transaction
 * and its iterator (walrus_txn_iter_open, then a commit that must succeed);
 * --reads plain uses walrus_get per account, no snapshot (the control).
 * A sum other than N x B, or another number of accounts, is an error.
 *
 * Both stop after C transfers acknowledged or sums read (--count, 0 = no
 * limit) or, with --until-eof, once stdin reaches its end.  WALRUS_ERESTART,
 * WALRUS_EPANIC and WALRUS_ESHUTDOWN (a crash restart): the handle is closed
 * and opened again (up to R times in a row, default 50); a transfer whose
 * commit met it has an unknown outcome.
 *
 * Output, one line per event, each whole (one write(2) under a lock):
 *   transfer NAME SEQ FROM TO AMOUNT   before the commit is called
 *   acked NAME SEQ                     WALRUS_SYNC commit returned: durable
 *   conflict NAME SEQ                  WALRUS_ECONFLICT: nothing applied
 *   unknown NAME SEQ CODE MSG          the commit met a crash restart
 *   sum NAME SEQ TOTAL HOW             a reader's sum (HOW: snap, iter, txn, plain)
 *   open NAME N                        a handle opened, the N-th time
 *   restart NAME CODE MSG              a crash restart seen outside a commit
 *   done NAME N                        the end: N transfers acked / sums read
 *   E NAME SEQ CODE MSG                an error (a wrong sum too): the handle is
 *                                      closed, the process exits with status 3
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "drvutil.h"
#include "walrus.h"

#define MAX_ACCOUNTS 1000
#define MAX_CONFLICT 1000

static const char *dir, *prefix, *name;
static walrus_opts *opts;
static unsigned naccounts = 20, max_restarts = 50;
static long balance = 1000;
static unsigned long long count_limit;
static atomic_bool stop_now;
static walrus *db;
static unsigned opens;
static unsigned long long seq;
static uint64_t rng_state;

/* ---------------------------------------------------------------- output */

__attribute__((format(printf, 1, 2))) static void emit(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		_exit(3);
	if ((size_t)n > sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	for (int i = 0; i < n; i++)
		if (buf[i] == '\n' || buf[i] == '\r')
			buf[i] = ' ';
	buf[n++] = '\n';
	const char *b = buf;
	size_t len = (size_t)n;
	while (len > 0) {
		ssize_t w = write(STDOUT_FILENO, b, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			_exit(4); /* the reader is gone */
		b += w;
		len -= (size_t)w;
	}
}

/* After an E line: the handle detaches cleanly (an _exit while attached
 * would be a crash, restarting the instance under the other processes). */
static _Noreturn void quit(void)
{
	if (db != NULL)
		(void)walrus_close(db); /* whatever it says: the E line said why */
	_exit(3);
}

static _Noreturn void fail(int code, const char *what)
{
	emit("E %s %llu %d %s: %s", name, seq, code, what, walrus_errmsg());
	quit();
}

static uint64_t rnd(void)
{
	return drv_rnd(&rng_state);
}

static unsigned below(unsigned n)
{
	return (unsigned)(rnd() % n);
}

static int account_key(unsigned a, char *buf, size_t cap)
{
	return snprintf(buf, cap, "%s/a/%02u", prefix, a);
}

static bool restartable(int rc)
{
	return rc == WALRUS_ERESTART || rc == WALRUS_EPANIC || rc == WALRUS_ESHUTDOWN;
}

static void reopen(void)
{
	if (db != NULL) {
		(void)walrus_close(db); /* a dead handle: its error says nothing new */
		db = NULL;
	}
	for (unsigned attempt = 0;; attempt++) {
		int rc = walrus_open(dir, opts, &db);
		if (rc == WALRUS_OK)
			break;
		db = NULL;
		if (!restartable(rc) || attempt + 1 >= max_restarts)
			fail(rc, "open");
		emit("restart %s %d open: %s", name, rc, walrus_errmsg());
		struct timespec ts = {0, 20 * 1000000L}; /* a back-off, as attach's own */
		nanosleep(&ts, NULL);
	}
	opens++;
	emit("open %s %u", name, opens);
}

/* Parses a balance; false if it is not a decimal integer. */
static bool parse_long(const char *v, size_t vl, long *out)
{
	char buf[32];
	if (vl == 0 || vl >= sizeof(buf))
		return false;
	memcpy(buf, v, vl);
	buf[vl] = '\0';
	char *end;
	errno = 0;
	*out = strtol(buf, &end, 10);
	return errno == 0 && *end == '\0';
}

/* ---------------------------------------------------------------- --init */

static int init_accounts(void)
{
	walrus_txn *t;
	int rc = walrus_txn_begin(db, 0, &t);
	if (rc != WALRUS_OK)
		fail(rc, "walrus_txn_begin");
	for (unsigned a = 0; a < naccounts; a++) {
		char key[128], val[32];
		int kl = account_key(a, key, sizeof(key));
		size_t vl;
		rc = walrus_txn_get_into(t, key, (size_t)kl, val, sizeof(val), &vl);
		if (rc != WALRUS_ENOTFOUND)
			fail(rc == WALRUS_OK ? WALRUS_EINVAL : rc, "an account is already there");
		int n = snprintf(val, sizeof(val), "%ld", balance);
		rc = walrus_txn_put(t, key, (size_t)kl, val, (size_t)n);
		if (rc != WALRUS_OK)
			fail(rc, "walrus_txn_put");
	}
	rc = walrus_txn_commit(t, WALRUS_SYNC);
	walrus_txn_free(t);
	if (rc != WALRUS_OK)
		fail(rc, "walrus_txn_commit");
	emit("done %s %u", name, naccounts);
	return 0;
}

/* ---------------------------------------------------------------- transfers */

enum outcome { OUT_ACKED, OUT_CONFLICT, OUT_RESTART, OUT_SKIP };

static int isolation; /* 0 serializable, 1 snapshot, 2 none */
static int durability = WALRUS_SYNC;

static int read_balance(walrus_txn *t, unsigned a, long *out)
{
	char key[128], val[32];
	int kl = account_key(a, key, sizeof(key));
	size_t vl = 0;
	int rc = t != NULL ? walrus_txn_get_into(t, key, (size_t)kl, val, sizeof(val), &vl)
	                   : walrus_get_into(db, key, (size_t)kl, val, sizeof(val), &vl);
	if (rc == WALRUS_ENOTFOUND)
		fail(rc, "an account is missing");
	if (rc != WALRUS_OK)
		return rc;
	if (!parse_long(val, vl, out)) {
		emit("E %s %llu %d account %u holds '%.*s', not a balance", name, seq,
		     WALRUS_ECORRUPT, a, (int)(vl < 30 ? vl : 30), val);
		quit();
	}
	return WALRUS_OK;
}

/* One attempt: a new SEQ, two accounts, an amount. */
static enum outcome transfer(void)
{
	seq++;
	unsigned from = below(naccounts), to = below(naccounts - 1);
	if (to >= from)
		to++;
	long amount = 1 + (long)below(100);
	walrus_txn *t = NULL;
	walrus_batch *b = NULL;
	int rc = WALRUS_OK;
	if (isolation != 2)
		rc = walrus_txn_begin(db, isolation == 1 ? WALRUS_TXN_SNAPSHOT : 0, &t);
	long bf = 0, bt = 0;
	if (rc == WALRUS_OK)
		rc = read_balance(t, from, &bf);
	if (rc == WALRUS_OK)
		rc = read_balance(t, to, &bt);
	if (rc == WALRUS_OK && bf < amount) {
		walrus_txn_free(t); /* nothing to move: another pair */
		return OUT_SKIP;
	}
	char kf[128], kt[128], kx[256], vf[32], vt[32], vx[64];
	int lf = account_key(from, kf, sizeof(kf)), lt = account_key(to, kt, sizeof(kt));
	int lx = snprintf(kx, sizeof(kx), "%s/x/%s/%llu", prefix, name, seq);
	int nf = snprintf(vf, sizeof(vf), "%ld", bf - amount);
	int nt = snprintf(vt, sizeof(vt), "%ld", bt + amount);
	int nx = snprintf(vx, sizeof(vx), "%u %u %ld", from, to, amount);
	if (rc == WALRUS_OK && t != NULL) {
		rc = walrus_txn_put(t, kf, (size_t)lf, vf, (size_t)nf);
		if (rc == WALRUS_OK)
			rc = walrus_txn_put(t, kt, (size_t)lt, vt, (size_t)nt);
		if (rc == WALRUS_OK)
			rc = walrus_txn_put(t, kx, (size_t)lx, vx, (size_t)nx);
	} else if (rc == WALRUS_OK) {
		b = walrus_batch_new();
		if (b == NULL)
			fail(WALRUS_ENOMEM, "walrus_batch_new");
		rc = walrus_batch_put(b, kf, (size_t)lf, vf, (size_t)nf);
		if (rc == WALRUS_OK)
			rc = walrus_batch_put(b, kt, (size_t)lt, vt, (size_t)nt);
		if (rc == WALRUS_OK)
			rc = walrus_batch_put(b, kx, (size_t)lx, vx, (size_t)nx);
	}
	if (rc != WALRUS_OK) {
		walrus_txn_free(t);
		walrus_batch_free(b);
		if (restartable(rc)) {
			emit("restart %s %d %s", name, rc, walrus_errmsg());
			return OUT_RESTART;
		}
		fail(rc, "reads of the transfer");
	}
	emit("transfer %s %llu %u %u %ld", name, seq, from, to, amount);
	if (t != NULL) {
		rc = walrus_txn_commit(t, durability);
		walrus_txn_free(t);
	} else {
		rc = walrus_batch_commit(db, b, durability);
		walrus_batch_free(b);
	}
	if (rc == WALRUS_OK) {
		emit("acked %s %llu", name, seq);
		return OUT_ACKED;
	}
	if (rc == WALRUS_ECONFLICT) {
		emit("conflict %s %llu", name, seq);
		return OUT_CONFLICT;
	}
	if (restartable(rc)) {
		emit("unknown %s %llu %d %s", name, seq, rc, walrus_errmsg());
		return OUT_RESTART;
	}
	fail(rc, "commit of the transfer");
}

static void run_transfers(void)
{
	unsigned long long acked = 0;
	unsigned conflicts = 0, restarts = 0;
	while (!atomic_load(&stop_now) && (count_limit == 0 || acked < count_limit)) {
		enum outcome o = transfer();
		if (o == OUT_ACKED) {
			acked++;
			conflicts = restarts = 0;
		} else if (o == OUT_CONFLICT && ++conflicts >= MAX_CONFLICT) {
			emit("E %s %llu %d %u conflicts in a row: a livelock?", name, seq,
			     WALRUS_ECONFLICT, conflicts);
			quit();
		} else if (o == OUT_RESTART) {
			if (++restarts >= max_restarts) {
				emit("E %s %llu %d gave up after %u restarts", name, seq,
				     WALRUS_ERESTART, restarts);
				quit();
			}
			reopen();
		}
	}
	emit("done %s %llu", name, acked);
}

/* ---------------------------------------------------------------- reader */

enum reads { READS_MIXED, READS_SNAPSHOT, READS_TXN, READS_PLAIN };
static enum reads reads = READS_MIXED;

/* Adds the accounts an iterator over PFX/a/ shows to *sum and *n. */
static int sum_iter(walrus_iter *it, long *sum, unsigned *n)
{
	int rc = WALRUS_OK;
	while (rc == WALRUS_OK && walrus_iter_valid(it)) {
		const void *v;
		size_t vl;
		long x;
		walrus_iter_value(it, &v, &vl);
		if (!parse_long(v, vl, &x)) {
			emit("E %s %llu %d an account holds '%.*s', not a balance", name, seq,
			     WALRUS_ECORRUPT, (int)(vl < 30 ? vl : 30), (const char *)v);
			quit();
		}
		*sum += x;
		(*n)++;
		rc = walrus_iter_next(it);
	}
	return rc;
}

/* One sum, through @how; *sum and *n are the total and how many accounts. */
static int one_sum(int how, long *sum, unsigned *n)
{
	char lo[128], hi[128];
	int lol = snprintf(lo, sizeof(lo), "%s/a/", prefix);
	int hil = snprintf(hi, sizeof(hi), "%s/a0", prefix); /* '0' follows '/' */
	*sum = 0;
	*n = 0;
	int rc = WALRUS_OK;
	if (how == 0 || how == 1) {
		walrus_snapshot *s;
		rc = walrus_snapshot_take(db, &s);
		if (rc != WALRUS_OK)
			return rc;
		if (how == 0) {
			for (unsigned a = 0; rc == WALRUS_OK && a < naccounts; a++) {
				char key[128], val[32];
				int kl = account_key(a, key, sizeof(key));
				size_t vl;
				long x;
				rc = walrus_get_into_at(db, s, key, (size_t)kl, val, sizeof(val),
				                        &vl);
				if (rc == WALRUS_ENOTFOUND) {
					rc = WALRUS_OK;
					continue;
				}
				if (rc == WALRUS_OK && !parse_long(val, vl, &x))
					fail(WALRUS_ECORRUPT, "an account does not hold a balance");
				if (rc == WALRUS_OK) {
					*sum += x;
					(*n)++;
				}
			}
		} else {
			walrus_iter *it;
			rc = walrus_iter_open_at(db, s, lo, (size_t)lol, hi, (size_t)hil, &it);
			if (rc == WALRUS_OK) {
				rc = sum_iter(it, sum, n);
				walrus_iter_close(it);
			}
		}
		walrus_snapshot_release(s);
		return rc;
	}
	if (how == 2) {
		walrus_txn *t;
		rc = walrus_txn_begin(db, 0, &t);
		if (rc != WALRUS_OK)
			return rc;
		walrus_iter *it;
		rc = walrus_txn_iter_open(t, lo, (size_t)lol, hi, (size_t)hil, &it);
		if (rc == WALRUS_OK) {
			rc = sum_iter(it, sum, n);
			walrus_iter_close(it);
		}
		if (rc == WALRUS_OK) {
			rc = walrus_txn_commit(t, 0); /* read-only: commits at once */
			if (rc == WALRUS_ECONFLICT)
				fail(rc, "a read-only transaction's commit");
		}
		walrus_txn_free(t);
		return rc;
	}
	for (unsigned a = 0; rc == WALRUS_OK && a < naccounts; a++) {
		long x;
		rc = read_balance(NULL, a, &x);
		if (rc == WALRUS_OK) {
			*sum += x;
			(*n)++;
		}
	}
	return rc;
}

static void run_reader(void)
{
	static const char *const hows[] = {"snap", "iter", "txn", "plain"};
	unsigned long long sums = 0;
	unsigned restarts = 0;
	while (!atomic_load(&stop_now) && (count_limit == 0 || sums < count_limit)) {
		seq++;
		int how = reads == READS_MIXED      ? (int)(seq % 3)
		          : reads == READS_SNAPSHOT ? (int)(seq % 2)
		          : reads == READS_TXN      ? 2
		                                    : 3;
		long sum;
		unsigned n;
		int rc = one_sum(how, &sum, &n);
		if (restartable(rc)) {
			emit("restart %s %d %s", name, rc, walrus_errmsg());
			if (++restarts >= max_restarts) {
				emit("E %s %llu %d gave up after %u restarts", name, seq, rc,
				     restarts);
				quit();
			}
			reopen();
			continue;
		}
		if (rc != WALRUS_OK)
			fail(rc, hows[how]);
		restarts = 0;
		if (n != naccounts || sum != (long)naccounts * balance) {
			emit("E %s %llu %d %s read %u accounts holding %ld in all, not %u holding "
			     "%ld",
			     name, seq, WALRUS_ECORRUPT, hows[how], n, sum, naccounts,
			     (long)naccounts * balance);
			quit();
		}
		sums++;
		emit("sum %s %llu %ld %s", name, seq, sum, hows[how]);
	}
	emit("done %s %llu", name, sums);
}

/* --until-eof: stdin's end stops the work. */
static void *watch_stdin(void *arg)
{
	(void)arg;
	char buf[256];
	for (;;) {
		ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
		if (n == 0 || (n < 0 && errno != EINTR))
			break;
	}
	atomic_store(&stop_now, true);
	return NULL;
}

/* ---------------------------------------------------------------- main */

static _Noreturn void usage(void)
{
	fprintf(stderr,
	        "usage: bankdrv -D DIR [-o name=value ...] --prefix PFX --init [--accounts N] "
	        "[--balance B]\n"
	        "       bankdrv -D DIR [-o name=value ...] --prefix PFX --client NAME "
	        "--transfers [--accounts N] [--seed S] "
	        "[--isolation serializable|snapshot|none] [--durability sync|async] "
	        "[--until-eof] [--count C] "
	        "[--max-restarts R]\n"
	        "       bankdrv -D DIR [-o name=value ...] --prefix PFX --client NAME --reader "
	        "[--accounts N] [--reads snapshot|txn|mixed|plain] [--until-eof] [--count C] "
	        "[--max-restarts R]\n");
	exit(2);
}

static unsigned long long num(const char *v)
{
	unsigned long long n;
	if (!drv_num(v, &n))
		usage();
	return n;
}

int main(int argc, char **argv)
{
	enum { NONE, INIT, TRANSFERS, READER } mode = NONE;
	bool until_eof = false;
	unsigned long long seed = 1;
	opts = walrus_opts_new();
	if (opts == NULL)
		return 3;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--init") == 0) {
			mode = INIT;
			continue;
		}
		if (strcmp(a, "--transfers") == 0) {
			mode = TRANSFERS;
			continue;
		}
		if (strcmp(a, "--reader") == 0) {
			mode = READER;
			continue;
		}
		if (strcmp(a, "--until-eof") == 0) {
			until_eof = true;
			continue;
		}
		if (i + 1 >= argc)
			usage();
		const char *v = argv[++i];
		if (strcmp(a, "-D") == 0) {
			dir = v;
		} else if (strcmp(a, "-o") == 0) {
			int orc = drv_opt(opts, v, "bankdrv");
			if (orc == 1)
				usage();
			if (orc != 0)
				return orc;
		} else if (strcmp(a, "--prefix") == 0) {
			prefix = v;
		} else if (strcmp(a, "--client") == 0) {
			name = v;
		} else if (strcmp(a, "--accounts") == 0) {
			naccounts = (unsigned)num(v);
		} else if (strcmp(a, "--balance") == 0) {
			balance = (long)num(v);
		} else if (strcmp(a, "--seed") == 0) {
			seed = num(v);
		} else if (strcmp(a, "--count") == 0) {
			count_limit = num(v);
		} else if (strcmp(a, "--max-restarts") == 0) {
			max_restarts = (unsigned)num(v);
		} else if (strcmp(a, "--isolation") == 0) {
			if (strcmp(v, "serializable") == 0)
				isolation = 0;
			else if (strcmp(v, "snapshot") == 0)
				isolation = 1;
			else if (strcmp(v, "none") == 0)
				isolation = 2;
			else
				usage();
		} else if (strcmp(a, "--durability") == 0) {
			if (strcmp(v, "sync") == 0)
				durability = WALRUS_SYNC;
			else if (strcmp(v, "async") == 0)
				durability = WALRUS_ASYNC;
			else
				usage();
		} else if (strcmp(a, "--reads") == 0) {
			if (strcmp(v, "mixed") == 0)
				reads = READS_MIXED;
			else if (strcmp(v, "snapshot") == 0)
				reads = READS_SNAPSHOT;
			else if (strcmp(v, "txn") == 0)
				reads = READS_TXN;
			else if (strcmp(v, "plain") == 0)
				reads = READS_PLAIN;
			else
				usage();
		} else {
			usage();
		}
	}
	if (mode == INIT && name == NULL)
		name = "init";
	if (dir == NULL || prefix == NULL || name == NULL || mode == NONE || naccounts < 2 ||
	    naccounts > MAX_ACCOUNTS || max_restarts < 1 || balance > 1000000000L)
		usage();
	rng_state = seed;
	if (until_eof) {
		pthread_t w;
		int err = pthread_create(&w, NULL, watch_stdin, NULL);
		if (err == 0)
			err = pthread_detach(w);
		if (err != 0) {
			emit("E %s 0 %d pthread_create: %s", name, WALRUS_ENOMEM, strerror(err));
			quit();
		}
	}
	reopen();
	if (mode == INIT)
		init_accounts();
	else if (mode == TRANSFERS)
		run_transfers();
	else
		run_reader();
	int rc = walrus_close(db);
	db = NULL;
	if (rc != WALRUS_OK)
		fail(rc, "walrus_close");
	walrus_opts_free(opts);
	return 0;
}
