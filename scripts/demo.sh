#!/bin/sh
# make demo: show the engine at work on a fresh data directory.
# Until the key-value layer lands, the demo runs the I/O path of the
# foundation: the instance and its processes, checksummed pages written,
# fsynced, read back and a damaged page detected.
set -eu
BUILD=${1:-build}
W="$BUILD/tools/walrus"
DIR=$(mktemp -d /tmp/walrus-demo-XXXXXX)
trap 'rm -rf "$DIR"' EXIT
chmod 700 "$DIR"
echo "== data directory: $DIR"
"$W" -D "$DIR" -o supervisor_linger=3s selftest --pages 4096
echo
echo "== the instance lingers for a moment after its last client:"
"$W" -D "$DIR" status || true
echo
echo "== its log:"
sleep 4
cat "$DIR/log/walrus.log"
