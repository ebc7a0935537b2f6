#!/bin/sh
# make demo: show the engine at work on a fresh data directory.
# Until the key-value layer lands, the demo shows the layers that exist:
# the instance and its processes, checksummed pages written, fsynced, read
# back and a damaged page detected; then group commit in the WAL, the
# checkpoint log lines, the WAL's records and the control file.
set -eu
BUILD=${1:-build}
W="$BUILD/tools/walrus"
DIR=$(mktemp -d /tmp/walrus-demo-XXXXXX)
trap 'rm -rf "$DIR"' EXIT
chmod 700 "$DIR"
echo "== data directory: $DIR"
"$W" -D "$DIR" -o supervisor_linger=3s -o wal_segment_size=1MB -o max_wal_size=4MB \
	-o min_wal_size=2MB selftest --pages 4096
echo
echo "== the instance lingers for a moment after its last client:"
"$W" -D "$DIR" status || true
echo
echo "== group commit: 1 then 8 processes committing 100-byte records for 3 s each"
"$W" -D "$DIR" bench --workload walcommit --clients 1 --duration 3
"$W" -D "$DIR" bench --workload walcommit --clients 8 --duration 3
echo
echo "== WAL summary (walrus waldump --stats):"
"$W" -D "$DIR" waldump --stats | tail -4
sleep 4 # the supervisor's linger, then its shutdown checkpoint
echo
echo "== control file after the clean shutdown (walrus controldata):"
"$W" -D "$DIR" controldata
echo
echo "== checkpoints in the log:"
grep "checkpoint complete" "$DIR/log/walrus.log" | tail -5
