/*
 * test_workloads.c - the smoke test of the workload library when walrus-peers
 * is not built (no peer libraries): every workload, small, against the
 * walrus engine alone, in a new directory under $TMPDIR or /tmp that it
 * removes: the five of walrus-peers' default list, then readwhilewriting
 * and updaterandom (twice: the second on values the first rewrote) with 1
 * and 2 clients, each client count run by threads (a handle each) and by
 * processes, and a scan of the result; readrandom and scan plainly and
 * through a snapshot; txn_transfer with 1 and 4 clients, asynchronous and
 * durable commits (its balances' sum checked); then, on a new directory,
 * the options of runs larger than memory: fillseq, readrandom,
 * readwhilewriting (1 and 2 clients, 500 operations each), scanrange (200
 * keys) and writerandom (300 puts, batches of 50) with sampled warm passes.
 * First of all, the latency histogram's self-check, then a timed fillseq
 * and a readrandom whose clients must keep latencies of a fixed size.
 * The workloads check their own
 * results and end the process with exit code 2 (wrong result) or 3 (engine
 * or system error) on a failure; timings are printed, never asserted. It is
 * always built; the suite runs it only where walrus-peers is not built.
 */
#include "peers.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
	peers_config cfg = {
	    .num = 2000,
	    .sync_ops = 20,
	    .workloads = {PEERS_FILLSEQ, PEERS_FILLRANDOM, PEERS_FILLSYNC, PEERS_READRANDOM,
	                  PEERS_SCAN, PEERS_READWHILEWRITING, PEERS_UPDATERANDOM,
	                  PEERS_UPDATERANDOM, PEERS_SCAN, PEERS_TXN_TRANSFER},
	    .nworkloads = 10,
	    .sync_procs = {1, 4},
	    .nsync_procs = 2,
	    .read_procs = {1, 2},
	    .nread_procs = 2,
	    .client_modes = {PEERS_CLIENTS_THREADS, PEERS_CLIENTS_PROCESSES},
	    .nclient_modes = 2,
	    .fresh_dirs = true,
	    .snapshot = true,
	    .snapshot_and_plain = true,
	    .txn_procs = {1, 4},
	    .ntxn_procs = 2,
	    .txn_sync = {false, true},
	    .ntxn_sync = 2,
	    .txn_ops = 50,
	};
	peers_config large = {
	    .num = 3000,
	    .reads = 500,
	    .writes = 300,
	    .scan_keys = 200,
	    .warm_sample = true,
	    .batch = 50,
	    .workloads = {PEERS_FILLSEQ, PEERS_READRANDOM, PEERS_READWHILEWRITING, PEERS_SCANRANGE,
	                  PEERS_WRITERANDOM},
	    .nworkloads = 5,
	    .read_procs = {1, 2},
	    .nread_procs = 2,
	    .client_modes = {PEERS_CLIENTS_THREADS, PEERS_CLIENTS_PROCESSES},
	    .nclient_modes = 2,
	    .fresh_dirs = true,
	};
	/* A timed fillseq of 20000 keys, then readrandom on its untimed load:
	 * neither keeps 4 bytes an operation (80 kB here, 160 MiB for 40M keys
	 * under a memory limit), a timed client only its fixed histogram. */
	peers_config bounded = {
	    .num = 20000,
	    .reads = 100,
	    .warm_sample = true,
	    .batch = 1000,
	    .workloads = {PEERS_FILLSEQ, PEERS_READRANDOM},
	    .nworkloads = 2,
	    .read_procs = {1},
	    .nread_procs = 1,
	    .client_modes = {PEERS_CLIENTS_THREADS},
	    .nclient_modes = 1,
	    .fresh_dirs = true,
	};
	const char *tmp = getenv("TMPDIR");
	char base[PATH_MAX], sub[PATH_MAX];
	int err;

	peers_init("kvbench-smoke");
	if (tmp == NULL || tmp[0] == '\0')
		tmp = "/tmp";
	if ((size_t)snprintf(base, sizeof(base), "%s/kvbench-smoke.XXXXXX", tmp) >=
	    sizeof(base) - 16)
		peers_fatal(NULL, "mkdtemp", "path too long under \"%s\"", tmp);
	if (mkdtemp(base) == NULL)
		peers_fatal(NULL, "mkdtemp", "\"%s\": %s", base, strerror(errno));
	peers_set_scratch(base, true, false);
	if ((size_t)snprintf(sub, sizeof(sub), "%s/walrus", base) >= sizeof(sub))
		peers_fatal(NULL, "directory", "path too long under \"%s\"", base);

	const char *bad = peers_latency_selftest();
	if (bad != NULL) {
		fprintf(stderr, "latency histogram: %s\n", bad);
		return 2;
	}
	/* First: the largest record so far is this run's. */
	peers_run_engine(&bounded, &peers_walrus, sub);
	peers_remove_dir(&peers_walrus, sub);
	if (peers_latency_record_max() * 2 > bounded.num * sizeof(uint32_t)) {
		fprintf(stderr, "latencies grew with the operations: a record of %llu bytes\n",
		        (unsigned long long)peers_latency_record_max());
		return 2;
	}
	peers_run_engine(&cfg, &peers_walrus, sub);
	peers_remove_dir(&peers_walrus, sub);
	peers_run_engine(&large, &peers_walrus, sub);
	peers_remove_dir(&peers_walrus, sub);
	peers_set_scratch(NULL, false, false);
	err = peers_rm_tree(base);
	if (err != 0)
		peers_fatal(NULL, "remove", "\"%s\": %s", base, strerror(err));
	peers_flush(stdout);
	return 0;
}
