#!/usr/bin/env bash
# Prints the path of a PgBouncer executable for test/postgres, which runs it
# as a process behind the pooler manager (internal/pooler). Debian's
# pgbouncer package and the c-ares library it needs are downloaded with
# `apt-get download` and extracted into the cache outside the checkout
# (never installed: the package would start a pgbouncer service), once per
# version: the printed path is the executable, and the lib directory beside
# it holds the library (run it with LD_LIBRARY_PATH=<dir>/lib). Progress
# goes to stderr.
set -euo pipefail

PGBOUNCER_VERSION=${PGBOUNCER_VERSION:-1.18.0}
CACHE_DIR=${MYOPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/myoperator}

say() { printf '[pgbouncer] %s\n' "$*" >&2; }

dir="$CACHE_DIR/bin/pgbouncer-$PGBOUNCER_VERSION"
bin="$dir/pgbouncer"
if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi
command -v apt-get >/dev/null || { say "ERROR: no apt-get to download Debian's pgbouncer package: put a PgBouncer $PGBOUNCER_VERSION executable at $bin"; exit 1; }
mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/.lock-pgbouncer"
flock 9
if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 0755 "$tmp" # apt-get download writes as the _apt user
say "downloading Debian's pgbouncer and libc-ares2 into $dir"
if ! (cd "$tmp" && apt-get download pgbouncer libc-ares2 >&2); then
	say "apt-get download failed; running apt-get update once"
	apt-get update -qq >&2
	(cd "$tmp" && apt-get download pgbouncer libc-ares2 >&2)
fi
rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/root" "$dir.tmp/lib"
for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$dir.tmp/root"; done
cp "$dir.tmp/root/usr/sbin/pgbouncer" "$dir.tmp/pgbouncer"
find "$dir.tmp/root" -name 'libcares.so*' -exec cp -P {} "$dir.tmp/lib/" \;
rm -rf "$dir.tmp/root"
rm -rf "$dir" && mv "$dir.tmp" "$dir"
have=$(LD_LIBRARY_PATH="$dir/lib" "$bin" --version | head -1)
case "$have" in
*" $PGBOUNCER_VERSION") say "$have" ;;
*) say "ERROR: the package holds $have, not $PGBOUNCER_VERSION: set PGBOUNCER_VERSION"; exit 1 ;;
esac
echo "$bin"
