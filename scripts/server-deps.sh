#!/bin/sh
# Checks on a build's objects that the server's command files call no
# function defined in another command file (src/server/README.md: calls go
# down, commands.c -> keys.c tx.c admin.c -> reply.c).  Prints each
# offending call and exits 1.  Usage: sh scripts/server-deps.sh [BUILDDIR]
set -eu
obj=${1:-build}/libwalrus_core.a.p
files="admin keys tx commands"
bad=0
defined() { nm --defined-only "$obj/src_server_$1.c.o" | awk '$2 == "T" {print $3}'; }
for a in admin keys tx; do
	for b in $files; do
		[ "$a" = "$b" ] && continue
		for sym in $(nm --undefined-only "$obj/src_server_$a.c.o" | awk '{print $2}'); do
			if defined "$b" | grep -qx "$sym"; then
				echo "$a.c calls $sym of $b.c"
				bad=1
			fi
		done
	done
done
exit $bad
