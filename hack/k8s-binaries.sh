#!/usr/bin/env bash
# Builds the Kubernetes binaries the tests and the local cluster need, from the
# Go module proxy, once per version, into a cache outside the checkout, and
# prints that directory (usable as KUBEBUILDER_ASSETS). Progress goes to stderr.
#
#   hack/k8s-binaries.sh --envtest  etcd, kube-apiserver, kubectl: envtest
#   hack/k8s-binaries.sh            the above, kube-controller-manager,
#                                   kube-scheduler, kwok and kwokctl: a
#                                   simulated cluster (KWOK)
#   hack/k8s-binaries.sh --node     the control plane, kubelet, kube-proxy and
#                                   coredns, no kwok: a node with real pods
#                                   (hack/real-node.sh)
#
# Each call builds only what its set lacks. Why from source: this project is
# developed and tested on machines with no container engine and no internet
# beyond the Go module proxy, so setup-envtest and kwokctl's downloads are
# unreachable.
#
# How it stays quick: what a call lacks of the Kubernetes commands, etcd and
# CoreDNS is built by one `go build` in one module (the packages they share
# compile once, the links run side by side), kwok and kwokctl beside it.
# Cold, on 2 cores, see docs/real-pods.md ("How long the first run takes").
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
K8S_VERSION=${K8S_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
COREDNS_VERSION=${COREDNS_VERSION:-v1.14.7}
CACHE_DIR=${MYOPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/myoperator}

# shellcheck source=hack/lib/progress.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/progress.sh"
say() { progress k8s-binaries "$*"; }
die() { say "ERROR: $*"; exit 1; }

command -v go >/dev/null || die "go is not on PATH; install Go 1.26 first"

bindir="$CACHE_DIR/bin/k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}"
srcdir="$CACHE_DIR/src"
mkdir -p "$bindir" "$srcdir"

envtest=(etcd kube-apiserver kubectl)
control_plane=("${envtest[@]}" kube-controller-manager kube-scheduler)
case "${1:-}" in
  --envtest) want=("${envtest[@]}") ;;
  "") want=("${control_plane[@]}" kwok kwokctl) ;;
  --node) want=("${control_plane[@]}" kubelet kube-proxy coredns) ;;
  *) die "unknown argument $1 (usage: $0 [--envtest|--node])" ;;
esac

# lacking: the wanted binaries not yet in bindir. A binary is moved into
# place only once complete, so one that exists is usable.
lacking() { local b; missing=(); for b in "${want[@]}"; do [ -x "$bindir/$b" ] || missing+=("$b"); done; }
lacking
if [ ${#missing[@]} -eq 0 ]; then
  echo "$bindir"
  exit 0
fi
# One builder at a time (a parallel make test and make dev share the cache);
# only a call that has something to build waits for the lock.
exec 9>"$CACHE_DIR/.lock"
flock 9
lacking
if [ ${#missing[@]} -eq 0 ]; then
  echo "$bindir"
  exit 0
fi
say "building into $bindir: ${missing[*]}"
say "from an empty build cache, all of them took 8 minutes on 2 cores (docs/real-pods.md); the first build also downloads ~1.2 GB of Go modules"

needs() { local b; for b in "$@"; do [[ " ${missing[*]} " == *" $b "* ]] && return 0; done; return 1; }

# build <module dir> <output names> <packages> [ldflags]: one go build of the
# packages (main packages whose names are the output names) into a fresh
# directory, whose binaries are then moved into bindir.
build() {
  local mod=$1 outs=$2 pkgs=$3 ldflags=${4:-} start=$SECONDS tmp
  tmp=$(mktemp -d "$bindir/.build.XXXXXX")
  say "  go build $outs ..."
  # shellcheck disable=SC2086 # word lists on purpose
  if ! (cd "$mod" && CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "-s -w $ldflags" -o "$tmp/" $pkgs); then
    rm -rf "$tmp"
    say "building $outs failed (see the go output above)"
    return 1
  fi
  [ ! -e "$tmp/server" ] || mv "$tmp/server" "$tmp/etcd" # go.etcd.io/etcd/server/v3
  local b
  for b in $outs; do mv "$tmp/$b" "$bindir/$b"; done
  rm -rf "$tmp"
  say "  $outs built in $((SECONDS - start)) s"
}

# new_module <dir> <require line>: a throwaway module in which to resolve main
# packages of another module.
new_module() {
  rm -rf "$1" && mkdir -p "$1"
  (cd "$1" && go mod init example.com/buildonly >/dev/null 2>&1) || die "go mod init in $1 failed"
  echo "require $2" >>"$1/go.mod"
}

pids=()
# Kubernetes, etcd and CoreDNS: one module, one `go build`. They share
# many packages (client-go, k8s.io/api, gRPC, protobuf, OpenTelemetry,
# Prometheus), and the Go build cache reuses a compiled package only where
# it and everything under it have the same versions: in three modules they
# did not (CoreDNS brought its own client-go and k8s.io/api), so those
# compiled two or three times. The module also requires the versions this
# checkout's operator selects (`go list -m all`), so that the operator's
# own build finds most of its packages compiled already. That holds while
# the operator's go.mod has, of each module the two share, the version this
# module selects; when it lags (a new Kubernetes), raise it with go get:
# nothing breaks meanwhile, the operator's first build just takes about a
# minute longer (docs/real-pods.md, "How long the first run takes").
cluster_cmds=()
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy etcd coredns; do
  needs "$b" && cluster_cmds+=("$b")
done
if [ ${#cluster_cmds[@]} -gt 0 ]; then
  mod="$srcdir/cluster-k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_coredns-${COREDNS_VERSION}"
  if [ ! -f "$mod/.complete" ]; then
    new_module "$mod" "k8s.io/kubernetes $K8S_VERSION"
    # Kubernetes's go.mod points its staging modules (k8s.io/api, ...) at
    # local directories, so `go install k8s.io/kubernetes/cmd/...@version` is
    # refused: replace each with the published release of the same minor.
    staging_version="v0${K8S_VERSION#v1}"
    gomod=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
    [ -f "$gomod" ] || die "could not download k8s.io/kubernetes@$K8S_VERSION from the module proxy"
    {
      echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION"
      echo "require github.com/coredns/coredns $COREDNS_VERSION"
      echo "replace ("
      sed -n '/^replace (/,/^)/p' "$gomod" | sed -n "s#^\t\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\t\1 => \1 $staging_version#p"
      echo ")"
      echo "require ("
      (cd "$repo" && go list -m -f '{{if not .Main}}	{{.Path}} {{.Version}}{{end}}' all) || die "go list -m all in $repo failed"
      echo ")"
    } >>"$mod/go.mod"
    # CoreDNS, the cluster DNS of a node with real pods, with only the
    # plugins hack/real-node.sh's Corefile names (CoreDNS's own main links
    # all of them, cloud backends included). Keep the two in step.
    mkdir -p "$mod/coredns"
    cat >"$mod/coredns/main.go" <<'GO'
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

// The plugins' order in CoreDNS's plugin.cfg.
func init() { dnsserver.Directives = []string{"ready", "health", "errors", "cache", "kubernetes"} }

func main() { coremain.Run() }
GO
    touch "$mod/.complete"
  fi
  pkgs=()
  for b in "${cluster_cmds[@]}"; do
    case $b in
      etcd) pkgs+=(go.etcd.io/etcd/server/v3) ;;
      coredns) pkgs+=(example.com/buildonly/coredns) ;;
      *) pkgs+=("k8s.io/kubernetes/cmd/$b") ;;
    esac
  done
  minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  ld="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  ld="$ld -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  build "$mod" "${cluster_cmds[*]}" "${pkgs[*]}" "$ld" &
  pids+=($!)
fi

# KWOK depends on an older k8s.io line, so it gets its own module.
if needs kwok kwokctl; then
  mod="$srcdir/kwok-$KWOK_VERSION"
  new_module "$mod" "sigs.k8s.io/kwok $KWOK_VERSION"
  build "$mod" "kwok kwokctl" "sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl" &
  pids+=($!)
fi

failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
[ "$failed" = 0 ] || die "a build failed (see above)"
say "done: $bindir"
echo "$bindir"
