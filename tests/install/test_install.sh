#!/bin/sh
# Installs the build into a staging directory, builds examples/hello.c
# against the installed pkg-config file only, runs it, and checks its output.
# usage: test_install.sh BUILD_DIR SOURCE_DIR [EXTRA_CFLAGS]
set -eu
build=$1
src=$2
extra=${3:-}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
meson install -C "$build" --destdir "$stage" --no-rebuild >/dev/null
pc=$(find "$stage" -name walrus.pc | head -n1)
[ -n "$pc" ] || { echo "walrus.pc not installed"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_SYSROOT_DIR=$stage
cflags=$(pkg-config --cflags walrus)
libs=$(pkg-config --libs walrus)
libdir=$(pkg-config --variable=libdir walrus)
cc -std=c11 -Wall -Wextra -Werror $extra $cflags "$src/examples/hello.c" $libs -o "$stage/hello"
for f in walrus; do
	find "$stage" -type f -name "$f" -path '*/bin/*' | grep -q . || { echo "tool $f not installed"; exit 1; }
done
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
