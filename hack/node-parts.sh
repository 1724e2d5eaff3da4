#!/usr/bin/env bash
# Builds and caches everything a one-node cluster with real pods needs
# (hack/real-node.sh), outside the checkout, once:
#
#   - kubelet, kube-proxy and coredns from the Go module proxy, with the
#     control plane (hack/k8s-binaries.sh --node);
#   - containerd, runc and the CNI plugins from Debian 12's packages,
#     downloaded with `apt-get download` and extracted (never installed as
#     services: the node script starts them as processes);
#   - images, as docker-archive tarballs that `ctr images import` loads
#     (there is no registry and no container engine here):
#       localhost/myoperator/pause:3.10       pause.c of the Kubernetes module, gcc -static
#       localhost/myoperator/coredns:<ver>    the coredns binary alone
#       postgres:17, postgres:17.<minor>      Debian 13 (trixie) postgresql-17,
#                                             with pgvector and pgaudit
#       postgres:15, postgres:15.<minor>      Debian 12 (bookworm) postgresql-15,
#                                             with pgaudit (bookworm has no
#                                             pgvector for 15)
#     The PostgreSQL images are built with mmdebstrap and match the official
#     image where the operator relies on it: user postgres at uid/gid 999,
#     the server's bin directory first on PATH, bash. They carry the names
#     the operator gives by default (postgres:<version>), so a MyDatabase
#     needs no `image` override; the two tags of a major are one image.
#   - host tools the node calls: iptables and conntrack (kubelet, kube-proxy,
#     portmap), mmdebstrap, openssl, iproute2; installed with apt-get when
#     missing.
#
#   hack/node-parts.sh      build what is missing; print shell assignments
#                           (K8S_BIN=..., RUNTIME_DIR=..., NODE_BIN=..., CNI_BIN=...,
#                           IMAGES=...)
#   POSTGRES_MAJORS="17"    only these PostgreSQL images (default "17 15";
#                           make dev needs only its sample's 17)
#   PGBOUNCER_IMAGE=0       no PgBouncer image (make dev's sample has no
#                           pooler; a later call without it builds it)
#
# Nothing is downloaded from outside the package registries: the Go module
# proxy and the Debian mirror. The first run takes about 8 minutes on two
# cores, most of it compiling the Kubernetes binaries (docs/real-pods.md,
# "How long the first run takes"); later runs only check that the files
# exist. Progress goes to stderr.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE_DIR=${MYOPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/myoperator}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# Bump when what an image contains changes, to rebuild the cached ones.
IMAGES_REV=2
PAUSE_TAG=3.10

# shellcheck source=hack/lib/progress.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/progress.sh"
say() { progress node-parts "$*"; }
die() { say "ERROR: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (mmdebstrap --mode=root, apt-get)"
[ "$(uname -s)" = Linux ] || die "real pods need Linux"

# The Kubernetes binaries compile while the Debian parts below download and
# unpack (mostly network and disk); the two meet before the pause and
# CoreDNS images.
k8s_out=$(mktemp)
"$repo/hack/k8s-binaries.sh" --node >"$k8s_out" &
k8s_pid=$!
parts="$CACHE_DIR/node"
mkdir -p "$parts"
exec 8>"$parts/.lock"
flock 8

apt_updated=
apt_get() {
  if [ -z "$apt_updated" ]; then
    say "apt-get update"
    apt-get update -qq >&2 || die "apt-get update failed"
    apt_updated=1
  fi
  # Quiet unless it fails: dpkg's progress is long.
  DEBIAN_FRONTEND=noninteractive apt-get "$@" >"$parts/apt.log" 2>&1 || { cat "$parts/apt.log" >&2; return 1; }
}

# Host tools.
need_pkgs=()
command -v iptables >/dev/null || need_pkgs+=(iptables)
command -v conntrack >/dev/null || need_pkgs+=(conntrack)
command -v mmdebstrap >/dev/null || need_pkgs+=(mmdebstrap)
command -v openssl >/dev/null || need_pkgs+=(openssl) # the node's certificates
command -v ip >/dev/null || need_pkgs+=(iproute2)     # the bridge, ss
if [ ${#need_pkgs[@]} -gt 0 ]; then
  say "installing ${need_pkgs[*]} with apt-get"
  apt_get install -y -qq --no-install-recommends "${need_pkgs[@]}" || die "apt-get install ${need_pkgs[*]} failed"
fi

# containerd, runc and the CNI plugins, extracted from Debian's packages.
runtime="$parts/runtime-deb12"
if [ ! -x "$runtime/usr/bin/containerd" ] || [ ! -x "$runtime/usr/sbin/runc" ] || [ ! -x "$runtime/usr/lib/cni/bridge" ]; then
  say "downloading and extracting containerd, runc, containernetworking-plugins"
  tmp=$(mktemp -d "$parts/.debs.XXXXXX")
  chmod 0755 "$tmp" # apt-get download writes as the _apt user
  (cd "$tmp" && apt_get download containerd runc containernetworking-plugins) || die "apt-get download failed"
  mkdir -p "$tmp/root"
  for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$tmp/root"; done
  rm -rf "$runtime" && mv "$tmp/root" "$runtime" && rm -rf "$tmp"
fi
NODE_BIN="$runtime/usr/bin:$runtime/usr/sbin"
CNI_BIN="$runtime/usr/lib/cni"

images="$parts/images-r$IMAGES_REV"
mkdir -p "$images"
for old in "$parts"/images-r*; do
  [ "$old" = "$images" ] || rm -rf "$old" # an older revision's images
done
# shellcheck source=hack/lib/image.sh
. "$repo/hack/lib/image.sh"

# postgres_image <major> <Debian suite> [extension package...]
postgres_image() {
  local major=$1 suite=$2 root version minor start=$SECONDS include
  shift 2
  include=$(IFS=,; echo "postgresql-$major${*:+,$*}")
  [ -f "$images/postgres-$major.tar" ] && return
  say "building the postgres:$major image from Debian $suite's $include with mmdebstrap"
  root=$(mktemp -d "$images/.postgres-$major.XXXXXX")
  rmdir "$root"
  # As the official image: the postgres user and group are 999, made before
  # the package would pick its own; no cluster is created at install time;
  # the socket directory is writable by the group.
  mmdebstrap --quiet --mode=root --variant=minbase --format=directory \
    --include="$include" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --essential-hook='echo "postgres:x:999:999:PostgreSQL administrator:/var/lib/postgresql:/bin/bash" >>"$1/etc/passwd"' \
    --essential-hook='echo "postgres:x:999:" >>"$1/etc/group"' \
    --essential-hook='mkdir -p "$1/etc/postgresql-common/createcluster.d" && echo "create_main_cluster = false" >"$1/etc/postgresql-common/createcluster.d/no-main-cluster.conf"' \
    --customize-hook='install -d -o 999 -g 999 -m 2777 "$1/var/run/postgresql"' \
    --customize-hook='install -d -o 999 -g 999 -m 0700 "$1/var/lib/postgresql/data"' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*' \
    "$suite" "$root" "$DEBIAN_MIRROR" >&2 || die "mmdebstrap of $include failed"
  [ "$(chroot "$root" id -u postgres)" = 999 ] || die "the postgres user of the image is not uid 999"
  version=$(dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Version}' "postgresql-$major")
  minor=${version#"$major".}; minor=${minor%%[^0-9]*}
  [ -n "$minor" ] || die "cannot read the minor version of postgresql-$major ($version)"
  tar --numeric-owner -C "$root" -cf "$root.layer" .
  rm -rf "$root"
  docker_archive "$root.layer" "$images/postgres-$major.tar" \
    "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Env\":[\"PATH=/usr/lib/postgresql/$major/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\",\"PGDATA=/var/lib/postgresql/data\",\"LANG=C.UTF-8\"],\"Cmd\":[\"postgres\"],\"StopSignal\":\"SIGINT\"}}" \
    "docker.io/library/postgres:$major" "docker.io/library/postgres:$major.$minor"
  say "postgres:$major and postgres:$major.$minor built in $((SECONDS - start)) s ($(du -h "$images/postgres-$major.tar" | cut -f1))"
}
for major in ${POSTGRES_MAJORS:-17 15}; do
  case $major in
    17) postgres_image 17 trixie postgresql-17-pgvector postgresql-17-pgaudit ;;
    15) postgres_image 15 bookworm postgresql-15-pgaudit ;;
    *) die "POSTGRES_MAJORS: no image recipe for PostgreSQL $major (17, 15)" ;;
  esac
done

# The PgBouncer image of a MyDatabasePooler (docs/pooler.md): Debian's
# pgbouncer package, the postgres user 999 as in the postgres images, named
# as the operator's default (specs.DefaultPoolerImage). The pod runs the
# operator's pooler manager as PID 1, which needs only pgbouncer on the PATH.
pgbouncer_image() {
  local version=1.18.0 root start=$SECONDS have
  [ -f "$images/pgbouncer-$version.tar" ] && return
  say "building the mydatabase-pgbouncer:$version image from Debian bookworm's pgbouncer with mmdebstrap"
  root=$(mktemp -d "$images/.pgbouncer.XXXXXX")
  rmdir "$root"
  mmdebstrap --quiet --mode=root --variant=minbase --format=directory --include=pgbouncer \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --essential-hook='echo "postgres:x:999:999:PostgreSQL administrator:/var/lib/postgresql:/bin/bash" >>"$1/etc/passwd"' \
    --essential-hook='echo "postgres:x:999:" >>"$1/etc/group"' \
    --essential-hook='mkdir -p "$1/etc/postgresql-common/createcluster.d" && echo "create_main_cluster = false" >"$1/etc/postgresql-common/createcluster.d/no-main-cluster.conf"' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*' \
    bookworm "$root" "$DEBIAN_MIRROR" >&2 || die "mmdebstrap of pgbouncer failed"
  have=$(dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Version}' pgbouncer)
  case $have in "$version"-*) ;; *) die "bookworm's pgbouncer is $have, not $version: change pgbouncer_image and specs.DefaultPoolerImage together" ;; esac
  tar --numeric-owner -C "$root" -cf "$root.layer" .
  rm -rf "$root"
  docker_archive "$root.layer" "$images/pgbouncer-$version.tar" \
    '{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"Cmd":["pgbouncer"],"User":"999:999"}}' \
    "docker.io/library/mydatabase-pgbouncer:$version"
  say "mydatabase-pgbouncer:$version built in $((SECONDS - start)) s ($(du -h "$images/pgbouncer-$version.tar" | cut -f1))"
}
[ "${PGBOUNCER_IMAGE:-1}" = 0 ] || pgbouncer_image

wait "$k8s_pid" || die "hack/k8s-binaries.sh --node failed"
K8S_BIN=$(cat "$k8s_out")
rm -f "$k8s_out"
if [ ! -f "$images/pause.tar" ]; then
  k8s_version=$("$K8S_BIN/kube-apiserver" --version | sed -n 's/^Kubernetes \(v[0-9.]*\)$/\1/p')
  src=$(cd / && go mod download -json "k8s.io/kubernetes@$k8s_version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "$src" ] || die "the k8s.io/kubernetes module ($k8s_version) is not in the module cache"
  say "building the pause image from $src/build/pause/linux/pause.c"
  gcc -Os -static -o "$images/.pause" -DVERSION="$PAUSE_TAG" "$src/build/pause/linux/pause.c" ||
    die "gcc -static pause.c failed (is gcc's libc6-dev installed?)"
  binary_image "$images/pause.tar" "localhost/myoperator/pause:$PAUSE_TAG" /pause "$images/.pause" /pause
  rm -f "$images/.pause"
fi

coredns_version=$("$K8S_BIN/coredns" -version | sed -n 's/^CoreDNS-\([0-9.]*\)$/\1/p')
[ -n "$coredns_version" ] || die "cannot read the version of $K8S_BIN/coredns"
if [ ! -f "$images/coredns-$coredns_version.tar" ]; then
  say "building the coredns image"
  binary_image "$images/coredns-$coredns_version.tar" "localhost/myoperator/coredns:$coredns_version" \
    /coredns "$K8S_BIN/coredns" /coredns
fi

echo "K8S_BIN=$K8S_BIN"
echo "RUNTIME_DIR=$runtime"
echo "NODE_BIN=$NODE_BIN"
echo "CNI_BIN=$CNI_BIN"
echo "IMAGES=$images"
