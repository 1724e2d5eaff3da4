#!/usr/bin/env bash
# Builds SeaweedFS (Apache-2.0), an S3-compatible object store, from the Go
# module proxy, once per version, into the cache outside the checkout that
# hack/k8s-binaries.sh uses, and prints the path of its `weed` binary. The
# backup tests run it as a local process (`weed mini`, internal/testenv):
# a real S3 server, not a mock.
#
# The first build takes about 6-10 minutes on two cores (a 230 MB binary);
# every later call only checks that the file exists. Progress goes to
# stderr.
set -euo pipefail

WEED_VERSION=${WEED_VERSION:-v0.0.0-20261109003541-7506e5f91cd6}
CACHE_DIR=${MYOPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/myoperator}

say() { printf '[s3] %s\n' "$*" >&2; }
command -v go >/dev/null || { say "ERROR: go is not on PATH"; exit 1; }

bin="$CACHE_DIR/bin/seaweedfs-$WEED_VERSION/weed"
if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi
mkdir -p "$CACHE_DIR/src" "$(dirname "$bin")"
exec 9>"$CACHE_DIR/.lock-s3"
flock 9
if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi
mod="$CACHE_DIR/src/seaweedfs-$WEED_VERSION"
mkdir -p "$mod"
cd "$mod"
[ -f go.mod ] || go mod init seaweedfs-build >/dev/null 2>&1
say "building SeaweedFS $WEED_VERSION into $(dirname "$bin") (the first time takes several minutes)"
GOFLAGS=-mod=mod go get "github.com/seaweedfs/seaweedfs@$WEED_VERSION" >&2
GOFLAGS=-mod=mod go build -o "$bin.tmp" github.com/seaweedfs/seaweedfs/weed >&2
mv "$bin.tmp" "$bin"
echo "$bin"
