#!/bin/sh
# Install walrus's build and test dependencies from Debian's packages.
# Quiet when everything is already present; runs apt-get update first otherwise.
set -eu
# python3-pytest runs the Python binding's suite (python/tests); setuptools, wheel, pip
# and venv are what `pip install --no-index --no-build-isolation ./python` needs.
# nutcracker (twemproxy) is for the shard suite and docs/scale-out.md; the tests run
# their own, so its packaged service (port 22121) is not needed.
PKGS="build-essential meson ninja-build pkg-config liburing-dev libzstd-dev libssl-dev check \
python3 openssl python3-pytest python3-setuptools python3-wheel python3-pip python3-venv fio e2fsprogs util-linux procps libsqlite3-dev liblmdb-dev librocksdb-dev redis-tools redis-server nutcracker clang libclang-rt-14-dev"
missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "deps.sh: missing packages:$missing (run as root to install them)" >&2
	exit 1
fi
echo "deps.sh: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $missing >/dev/null
