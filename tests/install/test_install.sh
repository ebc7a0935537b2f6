#!/bin/sh
# Installs walrus into a staging directory, checks that what is installed
# carries no test hooks and exports only the public API, then builds
# examples/hello.c against the installed pkg-config file only, runs it, and
# checks its output.
#
# A build with test hooks (HOOKS=true, make's and CI's builds) installs
# nothing: the source is then built afresh as a user would, a release build
# without hooks (warnings are errors), and that is installed.  This is also
# CI's release build: a warning gcc gives only at -O3 fails it.
# usage: test_install.sh BUILD_DIR SOURCE_DIR HOOKS [EXTRA_CFLAGS]
set -eu
build=$1
src=$2
hooks=$3
extra=${4:-}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
if [ "$hooks" = true ]; then
	build=$stage/build
	meson setup --buildtype=release -Dwerror=true -Dtests=false -Dtest_hooks=false \
		"$build" "$src" >"$stage/setup.log" 2>&1 || { cat "$stage/setup.log"; exit 1; }
	ninja -j 2 -C "$build" >"$stage/build.log" 2>&1 || { cat "$stage/build.log"; exit 1; }
	if grep -n 'warning:' "$stage/build.log"; then
		echo "the release build has warnings"
		exit 1
	fi
fi
meson install -C "$build" --destdir "$stage/root" --no-rebuild >/dev/null
root=$stage/root
pc=$(find "$root" -name walrus.pc | head -n1)
[ -n "$pc" ] || { echo "walrus.pc not installed"; exit 1; }
lib=$(find "$root" -type f -name 'libwalrus.so*' | head -n1)
[ -n "$lib" ] || { echo "libwalrus.so not installed"; exit 1; }
bin=$(find "$root" -type f -name walrus -path '*/bin/*' | head -n1)
[ -n "$bin" ] || { echo "tool walrus not installed"; exit 1; }

# Only the public API leaves the library.
others=$(nm -D --defined-only "$lib" | awk '{print $NF}' | grep -v '^walrus_' || true)
if [ -n "$others" ]; then
	echo "libwalrus.so exports symbols outside the public API:"
	echo "$others" | head -n 20
	exit 1
fi
nm -D --defined-only "$lib" | grep -q ' walrus_open$' || { echo "walrus_open not exported"; exit 1; }
# No environment variable may inject faults into an installed program.
for f in "$lib" "$bin"; do
	if strings "$f" | grep -E 'WALRUS_(FAILPOINTS|POWERLOSS)'; then
		echo "$f carries test hooks"
		exit 1
	fi
	if nm "$f" 2>/dev/null | grep -E ' (ts_failpoint_set|ts_pl_enabled|kv_test_crash_after_records)$'; then
		echo "$f carries test hooks"
		exit 1
	fi
done

export PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_SYSROOT_DIR=$root
cflags=$(pkg-config --cflags walrus)
libs=$(pkg-config --libs walrus)
libdir=$(pkg-config --variable=libdir walrus)
cc -std=c11 -Wall -Wextra -Werror $extra $cflags "$src/examples/hello.c" $libs -o "$stage/hello"
out=$(LD_LIBRARY_PATH="$libdir" "$stage/hello" "$stage/db" 2>&1)
echo "$out"
echo "$out" | grep -q '^hello -> world$'
echo "$out" | grep -q '^apple = red$'
echo "$out" | grep -q '^banana = yellow$'
# The instance lingers briefly after the last close: wait until its
# supervisor is gone (or a zombie nobody reaps) before removing its directory.
pid=$(head -n1 "$stage/db/walrus.pid" | cut -d' ' -f1)
for i in $(seq 1 100); do
	state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -c1 || true)
	[ -z "$state" ] || [ "$state" = Z ] && break
	sleep 0.1
done
echo ok
