#!/bin/sh
# make demo: the engine at work on fresh data directories, in about a
# minute and a half.
#  1. The I/O path: the instance and its processes, checksummed pages written,
#     fsynced, read back and a damaged page detected; group commit in the WAL.
#  2. Checkpoints under load: `walrus bench --workload updaterandom` rewrites
#     random keys of a working set for DEMO_SECONDS (50 s) while a spread
#     checkpoint (checkpoint_timeout=20s) runs inside the run: progress lines
#     every 5 s, the checkpoint's log line, the summary, and a plot of
#     throughput, p99 latency and dirty buffers with the checkpoint's write
#     and sync phases shaded, kept in $BUILD/demo/ with the JSON and CSV.
set -eu
BUILD=${1:-build}
W="$BUILD/tools/walrus"
SECONDS_RUN=${DEMO_SECONDS:-50}
BASE=$(mktemp -d /tmp/walrus-demo-XXXXXX)
trap 'rm -rf "$BASE"' EXIT
chmod 700 "$BASE"
mkdir -p "$BUILD/demo"
OUT=$(cd "$BUILD/demo" && pwd)
DIR="$BASE/io"
KV="$BASE/kv"

echo "== 1. the I/O path, data directory $DIR"
"$W" -D "$DIR" -o supervisor_linger=3s -o wal_segment_size=1MB -o max_wal_size=4MB \
	-o min_wal_size=2MB selftest --pages 4096
echo
echo "== the instance lingers for a moment after its last client:"
"$W" -D "$DIR" status || true
echo
echo "== group commit: 1 then 8 processes committing 100-byte records for 2 s each"
"$W" -D "$DIR" bench --workload walcommit --clients 1 --duration 2
"$W" -D "$DIR" bench --workload walcommit --clients 8 --duration 2
echo
echo "== WAL summary (walrus waldump --stats):"
"$W" -D "$DIR" waldump --stats | tail -4

echo
echo "== 2. checkpoints under load, data directory $KV"
echo "   updaterandom: 1 process reading and rewriting random keys of 400000 (a 50 MB"
echo "   tree in a 128 MB pool) for $SECONDS_RUN s; a checkpoint every 20 s, its writes"
echo "   spread over 90% of that (checkpoint_completion_target), sorted, with write-back"
echo "   hints every 256 kB; a line every 5 s:"
"$W" -D "$KV" -o supervisor_linger=0 -o checkpoint_timeout=20s -o max_wal_size=2GB \
	bench --workload updaterandom --num 400000 --duration "$SECONDS_RUN" --progress 5 \
	--csv "$OUT/updaterandom.csv" --plot "$OUT/updaterandom.svg" --json \
	>"$OUT/updaterandom.json"
echo
echo "== the checkpoints in the instance's log (log_checkpoints):"
grep "checkpoint complete" "$KV/log/walrus.log" | grep -v -e "end-of-recovery" -e "(shutdown)" | sed 's/^/  /'
sleep 4 # the first instance's linger, then its shutdown checkpoint
echo
echo "== control file of the first directory after its clean shutdown (walrus controldata):"
"$W" -D "$DIR" controldata
echo
echo "== results kept in $OUT/:"
echo "   updaterandom.svg   the plot: open it in a browser"
echo "   updaterandom.json  the summary as JSON (walrus bench --compare A.json B.json)"
echo "   updaterandom.csv   the per-second time series"
