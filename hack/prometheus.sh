#!/usr/bin/env bash
# Builds Prometheus and promtool from the Go module proxy, once per version,
# into a cache outside the checkout (as hack/k8s-binaries.sh does for the
# Kubernetes binaries), and prints the directory that holds them.
#
#   hack/prometheus.sh     build what is missing, print the bin dir
#
# Prometheus publishes its Go module as github.com/prometheus/prometheus
# v0.<3xx>.0 for the release v3.<xx>.0: v0.316.0 is Prometheus 3.16. The
# binaries are built in a throwaway module that requires it. The web UI's
# assets are not part of the module, so the server's UI pages are missing;
# the HTTP API (what the tests use) is complete. About 4 minutes the first
# time on 2 cores. Progress goes to stderr.
set -euo pipefail

PROMETHEUS_VERSION=${PROMETHEUS_VERSION:-v0.316.0}
CACHE_DIR=${MYOPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/myoperator}

say() { printf '[prometheus] %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

command -v go >/dev/null || die "go is not on PATH; install Go 1.26 first"

bindir="$CACHE_DIR/bin/prometheus-$PROMETHEUS_VERSION"
mod="$CACHE_DIR/src/prometheus-$PROMETHEUS_VERSION"
mkdir -p "$bindir"

# One builder at a time: parallel runs share the cache.
exec 9>"$CACHE_DIR/.lock-prometheus"
flock 9

bins=(prometheus promtool)
missing=()
for b in "${bins[@]}"; do [ -x "$bindir/$b" ] || missing+=("$b"); done
if [ ${#missing[@]} -eq 0 ]; then
  echo "$bindir"
  exit 0
fi
say "building into $bindir: ${missing[*]}"

rm -rf "$mod" && mkdir -p "$mod"
(cd "$mod" && go mod init example.com/buildonly >/dev/null 2>&1) || die "go mod init in $mod failed"
echo "require github.com/prometheus/prometheus $PROMETHEUS_VERSION" >>"$mod/go.mod"
# One go build for both (shared packages compile once). remove_all_sd
# leaves out every service discovery but static and file ones (the cloud
# SDKs, most of the build): the tests scrape static targets.
start=$SECONDS
tmp=$(mktemp -d "$bindir/.build.XXXXXX")
say "  go build -tags remove_all_sd ${missing[*]} ..."
(cd "$mod" && CGO_ENABLED=0 go build -mod=mod -trimpath -tags remove_all_sd -ldflags "-s -w" -o "$tmp/" \
  "${missing[@]/#/github.com/prometheus/prometheus/cmd/}") || { rm -rf "$tmp"; die "building ${missing[*]} failed (see the go output above)"; }
for b in "${missing[@]}"; do mv "$tmp/$b" "$bindir/$b"; done
rm -rf "$tmp"
say "  ${missing[*]} built in $((SECONDS - start)) s"
echo "$bindir"
