#!/usr/bin/env bash
# Builds the Kubernetes binaries the tests and the local cluster need, from the
# Go module proxy, once per version, into a cache outside the checkout.
#
#   hack/k8s-binaries.sh            build what is missing, print the bin dir
#   hack/k8s-binaries.sh --node     also kubelet, kube-proxy and coredns, for a
#                                   node with real pods (hack/real-node.sh)
#
# Why from source: this project is developed and tested on machines with no
# container engine and no internet beyond the Go module proxy, so
# setup-envtest and kwokctl's downloads are unreachable. The first build takes
# about six minutes on two cores (kube-apiserver alone ~4 min, ~1.2 GB of
# modules); every later call only checks that the files exist.
#
# Output: one directory (printed on stdout) holding etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, kwok and kwokctl (and with
# --node kubelet, kube-proxy and coredns: about 6 more minutes cold). It is
# usable as KUBEBUILDER_ASSETS. Progress goes to stderr.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
COREDNS_VERSION=${COREDNS_VERSION:-v1.14.7}
CACHE_DIR=${MYOPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/myoperator}

say() { printf '[k8s-binaries] %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

command -v go >/dev/null || die "go is not on PATH; install Go 1.26 first"

bindir="$CACHE_DIR/bin/k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}"
srcdir="$CACHE_DIR/src"
mkdir -p "$bindir" "$srcdir"

# One builder at a time: a parallel `make test` and `make dev` share the cache.
exec 9>"$CACHE_DIR/.lock"
flock 9

k8s_bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
all=(etcd kwok kwokctl)
case "${1:-}" in
  "") ;;
  --node) k8s_bins+=(kubelet kube-proxy); all+=(coredns) ;;
  *) die "unknown argument $1 (usage: $0 [--node])" ;;
esac
all+=("${k8s_bins[@]}")

missing=()
for b in "${all[@]}"; do [ -x "$bindir/$b" ] || missing+=("$b"); done
if [ ${#missing[@]} -eq 0 ]; then
  echo "$bindir"
  exit 0
fi
say "building into $bindir: ${missing[*]}"
say "the first build takes ~6 minutes on 2 cores and downloads ~1.2 GB of Go modules"

needs() { local b; for b in "$@"; do [[ " ${missing[*]} " == *" $b "* ]] && return 0; done; return 1; }

# build <module dir> <package> <output name> [ldflags]
build() {
  local mod=$1 pkg=$2 out=$3 ldflags=${4:-}
  local start=$SECONDS
  say "  go build $pkg ..."
  (cd "$mod" && CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "-s -w $ldflags" -o "$bindir/.$out.tmp" "$pkg") \
    || die "building $out failed (see the go output above)"
  mv "$bindir/.$out.tmp" "$bindir/$out"
  say "  $out built in $((SECONDS - start)) s"
}

# new_module <dir>: an empty throwaway module in which to resolve a main package.
new_module() {
  local dir=$1
  rm -rf "$dir" && mkdir -p "$dir"
  (cd "$dir" && go mod init example.com/buildonly >/dev/null 2>&1) || die "go mod init in $dir failed"
}

# Kubernetes: its go.mod points its staging modules (k8s.io/api, ...) at local
# directories, so `go install k8s.io/kubernetes/cmd/...@version` is refused.
# Replace each of them with the published release of the same minor.
if needs "${k8s_bins[@]}"; then
  mod="$srcdir/kubernetes-$K8S_VERSION"
  new_module "$mod"
  staging_version="v0${K8S_VERSION#v1}"
  gomod=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
  [ -f "$gomod" ] || die "could not download k8s.io/kubernetes@$K8S_VERSION from the module proxy"
  {
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo "replace ("
    sed -n '/^replace (/,/^)/p' "$gomod" | sed -n "s#^\t\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\t\1 => \1 $staging_version#p"
    echo ")"
  } >>"$mod/go.mod"
  minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  ld="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  ld="$ld -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  for b in "${k8s_bins[@]}"; do
    needs "$b" && build "$mod" "k8s.io/kubernetes/cmd/$b" "$b" "$ld"
  done
fi

# etcd: server/v3 is etcd's main package; its go.mod also uses local replaces.
if needs etcd; then
  mod="$srcdir/etcd-$ETCD_VERSION"
  new_module "$mod"
  echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION" >>"$mod/go.mod"
  build "$mod" go.etcd.io/etcd/server/v3 etcd
fi

# KWOK depends on an older k8s.io line, so it gets its own module too.
if needs kwok kwokctl; then
  mod="$srcdir/kwok-$KWOK_VERSION"
  new_module "$mod"
  echo "require sigs.k8s.io/kwok $KWOK_VERSION" >>"$mod/go.mod"
  for b in kwok kwokctl; do
    needs "$b" && build "$mod" "sigs.k8s.io/kwok/cmd/$b" "$b"
  done
fi

# CoreDNS, the cluster DNS of a node with real pods.
if needs coredns; then
  mod="$srcdir/coredns-$COREDNS_VERSION"
  new_module "$mod"
  echo "require github.com/coredns/coredns $COREDNS_VERSION" >>"$mod/go.mod"
  build "$mod" github.com/coredns/coredns coredns
fi

say "done: $bindir"
echo "$bindir"
