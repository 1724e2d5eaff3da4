#!/usr/bin/env bash
# Builds the Versity S3 Gateway (versitygw, Apache-2.0), an S3 server that
# keeps buckets as directories of a POSIX filesystem, from the Go module
# proxy, once per version, into the cache outside the checkout that
# hack/k8s-binaries.sh uses, and prints the path of its binary. The backup
# tests and make dev run it as a local process (internal/testenv,
# `versitygw posix`): a real S3 server over HTTP that checks every request's
# signature, not a mock.
#
# The first build takes about 2 minutes on two cores; every later call only
# checks that the file exists. Progress goes to stderr.
set -euo pipefail

VERSITYGW_VERSION=${VERSITYGW_VERSION:-v1.8.0}
CACHE_DIR=${MYOPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/myoperator}

# shellcheck source=hack/lib/progress.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/progress.sh"
say() { progress s3 "$*"; }
command -v go >/dev/null || { say "ERROR: go is not on PATH"; exit 1; }

bin="$CACHE_DIR/bin/versitygw-$VERSITYGW_VERSION/versitygw"
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
mod="$CACHE_DIR/src/versitygw-$VERSITYGW_VERSION"
rm -rf "$mod" && mkdir -p "$mod"
cd "$mod"
go mod init example.com/buildonly >/dev/null 2>&1
echo "require github.com/versity/versitygw $VERSITYGW_VERSION" >>go.mod
say "building versitygw $VERSITYGW_VERSION into $(dirname "$bin") (the first time takes about 2 minutes)"
start=$SECONDS
CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "-s -w" -o "$bin.tmp" github.com/versity/versitygw/cmd/versitygw >&2
mv "$bin.tmp" "$bin"
say "versitygw built in $((SECONDS - start)) s"
echo "$bin"
