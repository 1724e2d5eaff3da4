#!/usr/bin/env bash
# The local cluster behind `make dev`, and the demo itself.
#
#   hack/dev-cluster.sh up          start the cluster (or reuse it), 3 nodes, volumes
#   hack/dev-cluster.sh demo        up + CRD + operator + sample MyDatabase until Ready
#                                   (make dev; DEV_EXIT=1 stops the operator and exits
#                                   after the demo instead of following its log)
#   hack/dev-cluster.sh down        stop what this script started, delete the cluster
#   hack/dev-cluster.sh kubeconfig  print the path of the cluster's kubeconfig:
#                                   export KUBECONFIG=$(hack/dev-cluster.sh kubeconfig)
#   hack/dev-cluster.sh status      say what is running
#
# Two kinds of cluster, chosen by DEV_RUNTIME (default auto):
#   real  a one-node cluster whose pods really run (hack/real-node.sh: kubelet,
#         containerd, CNI, kube-proxy, CoreDNS; PostgreSQL images built from
#         Debian's packages). Needs Linux, root and apt-get. The demo ends with
#         a psql command that works, and runs it once to show it does.
#   kwok  the simulated cluster below, anywhere Go runs.
# auto picks real where the machine allows it, else kwok. `down` removes
# whichever `up` started (recorded in the state directory).
#
# The KWOK cluster (kwokctl, binary runtime): a real etcd, kube-apiserver,
# kube-controller-manager and kube-scheduler, built from source by
# hack/k8s-binaries.sh, plus kwok-controller, which simulates the nodes. Pods
# scheduled on those nodes are marked Running and Ready, but NO CONTAINER
# EVER RUNS: PostgreSQL itself is not exercised here (make test-postgres
# does that).
#
# Backups: cmd/dev-objectstore runs an S3 server (versitygw, built by
# hack/s3.sh) with a bucket "backups", on the node's bridge for real pods
# (127.0.0.1 for KWOK). The demo gives the sample spec.backup to it, with a
# daily schedule whose first backup is taken at once, and a daily
# verification (spec.backup.verify) whose first restores that backup as
# soon as it completes; with real pods it waits for that backup to
# complete and shows it (the verification runs on, in a pod of its own;
# with KWOK its pod never ends). On a first run the S3
# server may still be building when the sample is applied: then the sample
# goes in without spec.backup, and gets it once the store is up, after the
# psql command.
#
# Nothing is downloaded at run time: kwokctl gets local binaries, every
# component listens on 127.0.0.1 only, on free ports picked at creation.
#
# Volumes: KWOK has no storage, so cmd/dev-provisioner runs as a local
# process next to the cluster. It installs a default StorageClass and
# creates a local PersistentVolume for every claim, and deletes it when
# the claim is deleted. A provisioner rather than a pool of pre-made PVs:
# deletionPolicy Delete and scale-down delete claims, and a pool's Released
# volumes would never be reclaimed (the pool would drain), and tests could
# not check that deleted data really goes.
#
# State (kwokctl work dir, kubeconfig, PIDs, logs, volume directories) lives
# in bin/dev of this checkout (gitignored); override with DEV_STATE_DIR.
# Every process is stopped by the PID this script recorded, never by name.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${DEV_STATE_DIR:-$repo/bin/dev}
CLUSTER=${DEV_CLUSTER_NAME:-myoperator-dev}
NODES=${DEV_NODES:-3}
SAMPLE=${DEV_SAMPLE:-$repo/config/samples/database_v1alpha1_mydatabase.yaml}
READY_TIMEOUT=${DEV_READY_TIMEOUT:-180s}
# Where hack/k8s-binaries.sh and hack/node-parts.sh keep what they build.
CACHE_DIR=${MYOPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/myoperator}
# The node's images: only those the sample needs (every hack/real-node.sh
# command builds what its node lacks, `load` too).
export POSTGRES_MAJORS=${POSTGRES_MAJORS:-17} PGBOUNCER_IMAGE=${PGBOUNCER_IMAGE:-0}

KUBECONFIG_FILE=$STATE/kubeconfig
export KWOK_WORKDIR=$STATE/kwok
# The real-pod node's state; its volumes live there too.
export REAL_NODE_STATE=$STATE/real-node

if [ -t 2 ]; then bold=$'\033[1m' red=$'\033[1;31m' off=$'\033[0m'; else bold='' red='' off=''; fi
# Every line says how long the run has taken so far, and so do those of the
# scripts it runs (the clock they share starts here).
# shellcheck source=hack/lib/progress.sh
. "$repo/hack/lib/progress.sh"
say() { progress "${bold}dev" "$off$*"; }
die() { printf '%s[dev] ERROR:%s %s\n' "$red" "$off" "$*" >&2; exit 1; }

# binaries [--envtest|--node]: build (once) the Kubernetes binaries of that
# set (hack/k8s-binaries.sh; the KWOK cluster's by default) and put them
# first on PATH.
binaries() {
  [ -n "${BINDIR:-}" ] && return
  # Prints its progress when it has to build (the first time only), nothing
  # when the binaries are cached.
  BINDIR=$("$repo/hack/k8s-binaries.sh" "$@") || die "hack/k8s-binaries.sh $* failed"
  say "Kubernetes binaries: $BINDIR"
  export PATH="$BINDIR:$PATH"
}

# alive <pidfile> <expected substring of the command line>: the recorded
# process still runs and is the one we started (a PID can be reused).
alive() {
  local pid
  [ -f "$1" ] || return 1
  pid=$(cat "$1")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$2"
}

# stop <pidfile> <expected command line substring> <what> [grace seconds]:
# after the grace period (for a process already stopping after a Ctrl-C),
# SIGTERM, then SIGKILL if it is still there 10 s later.
stop() {
  local pidfile=$1 expect=$2 what=$3 grace=${4:-0} pid i
  if alive "$pidfile" "$expect"; then
    pid=$(cat "$pidfile")
    for i in $(seq 1 $((grace * 5))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  fi
  if alive "$pidfile" "$expect"; then
    say "Stopping $what (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      say "  $what did not stop within 10 s; killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$pidfile"
}

healthy() {
  [ -f "$KUBECONFIG_FILE" ] && kubectl --kubeconfig "$KUBECONFIG_FILE" --request-timeout=5s get --raw /readyz >/dev/null 2>&1
}

cluster_exists() {
  [ -d "$KWOK_WORKDIR/clusters/$CLUSTER" ]
}

# free_port: a port nothing listens on, outside the ephemeral range
# (32768+), not yet handed out by this script.
picked=" "
free_port() {
  local p i
  for i in $(seq 1 200); do
    p=$((20000 + RANDOM % 12000))
    [[ "$picked" == *" $p "* ]] && continue
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      picked+="$p "
      echo "$p"
      return
    fi
  done
  die "found no free port"
}

create_cluster() {
  mkdir -p "$STATE"
  local cfg=$STATE/kwokctl.yaml
  # Everything on 127.0.0.1 (kwokctl's default is 0.0.0.0, which would put an
  # unauthenticated etcd on the network) and on ports picked here, so that
  # two clusters created at once (make dev while make test-e2e runs) cannot
  # both take kwokctl's first-free default.
  cat >"$cfg" <<EOF
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  runtime: binary
  bindAddress: 127.0.0.1
  etcdPort: $(free_port)
  etcdPeerPort: $(free_port)
  kubeApiserverPort: $(free_port)
  kubeControllerManagerPort: $(free_port)
  kubeSchedulerPort: $(free_port)
  kwokControllerPort: $(free_port)
  etcdBinary: $BINDIR/etcd
  kubeApiserverBinary: $BINDIR/kube-apiserver
  kubeControllerManagerBinary: $BINDIR/kube-controller-manager
  kubeSchedulerBinary: $BINDIR/kube-scheduler
  kwokControllerBinary: $BINDIR/kwok
  kubectlBinary: $BINDIR/kubectl
EOF
  say "Creating KWOK cluster '$CLUSTER' (state in ${STATE#"$repo"/}) ..."
  if ! kwokctl -c "$cfg" create cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG_FILE" --wait 2m >>"$STATE/kwokctl.log" 2>&1; then
    cat "$STATE/kwokctl.log" >&2
    die "kwokctl create cluster failed (logs of the components: $KWOK_WORKDIR/clusters/$CLUSTER/logs)"
  fi
}

# components_alive: every component kwokctl recorded still runs.
components_alive() {
  local f dir=$KWOK_WORKDIR/clusters/$CLUSTER n=0
  for f in "$dir"/pids/*.pid; do
    [ -e "$f" ] || return 1
    alive "$f" "$dir/bin/" || return 1
    n=$((n + 1))
  done
  [ "$n" -gt 0 ]
}

# clear_component_pids: kwokctl start skips a component whose PID file
# exists, even if that process is long gone (killed, machine restarted).
# Stop what still runs from this cluster's directory (a half-dead cluster)
# and remove the PID files, so that start brings every component up.
clear_component_pids() {
  local f dir=$KWOK_WORKDIR/clusters/$CLUSTER
  for f in "$dir"/pids/*.pid; do
    [ -e "$f" ] || continue
    alive "$f" "$dir/bin/" && stop "$f" "$dir/bin/" "$(basename "$f" .pid)"
    rm -f "$f"
  done
}

delete_cluster() {
  if cluster_exists; then
    say "Deleting KWOK cluster '$CLUSTER'"
    kwokctl delete cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG_FILE" >>"$STATE/kwokctl.log" 2>&1 ||
      { cat "$STATE/kwokctl.log" >&2; die "kwokctl delete cluster failed"; }
  fi
}

# start_provisioner [volume root]
start_provisioner() {
  local pidfile=$STATE/provisioner.pid bin=$STATE/dev-provisioner root=${1:-$STATE/volumes}
  if alive "$pidfile" "$bin"; then
    say "Volume provisioner already running (pid $(cat "$pidfile"))"
    return
  fi
  say "Starting the volume provisioner (cmd/dev-provisioner) ..."
  if [ -f "$STATE/new/dev-provisioner" ]; then mv -f "$STATE/new/dev-provisioner" "$bin"; fi # else the last run's
  mkdir -p "$root"
  # setsid: its own session, so that Ctrl-C on `make dev` (which stops the
  # operator) leaves the cluster's storage running, like the cluster itself.
  setsid "$bin" --kubeconfig "$KUBECONFIG_FILE" --root "$root" >>"$STATE/provisioner.log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  sleep 0.5
  alive "$pidfile" "$bin" || { tail -20 "$STATE/provisioner.log" >&2; die "the volume provisioner exited at once"; }
}

# start_object_store <ip>: the S3 store the sample backs up to
# (cmd/dev-objectstore: versitygw, bucket "backups"), on ip: the bridge of
# the real-pod node, which its pods reach, or 127.0.0.1 for KWOK, whose pods
# run nothing. Its endpoint and keys are in $STATE/s3.env.
start_object_store() {
  local pidfile=$STATE/s3.pid bin=$STATE/dev-objectstore
  if alive "$pidfile" "$bin" && [ -f "$STATE/s3.env" ]; then
    say "Object store already running (pid $(cat "$pidfile"))"
    return
  fi
  local start=$SECONDS
  say "Starting the object store (cmd/dev-objectstore; versitygw from hack/s3.sh) ..."
  if [ -f "$STATE/new/dev-objectstore" ]; then mv -f "$STATE/new/dev-objectstore" "$bin"; fi # else the last run's
  rm -f "$STATE/s3.env"
  mkdir -p "$STATE/s3"
  setsid "$bin" --versitygw "$("$repo/hack/s3.sh")" --dir "$STATE/s3" --ip "$1" --env "$STATE/s3.env" >>"$STATE/s3.log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  local i
  for i in $(seq 1 120); do
    [ -f "$STATE/s3.env" ] && break
    # kill -0, not alive: until the started shell has exec'd the store, its
    # command line is this script's.
    kill -0 "$(cat "$pidfile")" 2>/dev/null || { tail -20 "$STATE/s3.log" >&2; die "the object store exited"; }
    sleep 0.5
  done
  [ -f "$STATE/s3.env" ] || die "the object store did not come up (log: $STATE/s3.log)"
  say "Object store at $(sed -n 's/^ENDPOINT=//p' "$STATE/s3.env"), bucket backups (up in $((SECONDS - start)) s)"
}

# sample_with_backup: the sample, with spec.backup to the dev object store
# (and a daily schedule and verification) unless it has one.
sample_with_backup() {
  local endpoint bucket
  endpoint=$(sed -n 's/^ENDPOINT=//p' "$STATE/s3.env")
  bucket=$(sed -n 's/^BUCKET=//p' "$STATE/s3.env")
  kubectl patch --local -f "$SAMPLE" --type merge -o yaml -p \
    '{"spec":{"backup":{"objectStore":{"endpoint":"'"$endpoint"'","bucket":"'"$bucket"'","credentialsSecret":"'"$1"'"},"schedule":{"cron":"@daily"},"verify":{"cron":"@daily"},"retention":{"keep":7}}}}'
}

# runtime: real or kwok, as recorded by the `up` that made the cluster, else
# as DEV_RUNTIME asks.
runtime() {
  if [ -f "$STATE/runtime" ]; then cat "$STATE/runtime"; return; fi
  case "${DEV_RUNTIME:-auto}" in
    real | kwok) echo "$DEV_RUNTIME" ;;
    auto)
      if [ "$(uname -s)" = Linux ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then echo real; else echo kwok; fi ;;
    *) die "DEV_RUNTIME must be real, kwok or auto, not '$DEV_RUNTIME'" ;;
  esac
}

up() {
  start_local_build
  start_s3_build
  if [ "$(runtime)" = real ]; then
    say "Starting (or reusing) a one-node cluster with real pods (hack/real-node.sh; DEV_RUNTIME=kwok for the simulated one) ..."
    if ! compgen -G "$CACHE_DIR/bin/k8s-*/kubelet" >/dev/null; then
      say "First run on this machine: Kubernetes, etcd, CoreDNS, the postgres:17 image, the operator and the S3"
      say "  server build from source, about 10 minutes on 2 cores (docs/real-pods.md). Later runs take under a minute."
    fi
    "$repo/hack/real-node.sh" up || die "hack/real-node.sh up failed"
    binaries --node # built by the node's parts: only puts them on PATH
    echo real >"$STATE/runtime"
    cp "$REAL_NODE_STATE/kubeconfig" "$KUBECONFIG_FILE"
    alive "$STATE/provisioner.pid" "$STATE/dev-provisioner" || wait_local_build
    start_provisioner "$REAL_NODE_STATE/volumes"
    STORE_IP=10.244.0.1 # the node's bridge (hack/real-node.sh)
    object_store || say "The object store starts once its S3 server is built (in the background)."
    say "Cluster ready: 1 node with real pods, default StorageClass 'standard' (dev-provisioner)."
    say "  export KUBECONFIG=$KUBECONFIG_FILE"
    return
  fi
  binaries
  echo kwok >"$STATE/runtime"
  if healthy || { components_alive && say "Waiting for the KWOK cluster to answer ..." && wait_healthy 30; }; then
    say "Reusing the running KWOK cluster '$CLUSTER'"
  elif cluster_exists; then
    say "KWOK cluster '$CLUSTER' exists but does not answer (machine restarted?); starting it again ..."
    clear_component_pids
    if ! { kwokctl start cluster --name "$CLUSTER" --timeout 90s >>"$STATE/kwokctl.log" 2>&1 && wait_healthy 60; }; then
      say "  it did not come back; recreating it"
      stop "$STATE/provisioner.pid" "$STATE/dev-provisioner" "volume provisioner"
      delete_cluster
      create_cluster
    fi
  else
    create_cluster
  fi
  wait_healthy 60 || die "the cluster's API server does not answer (logs: $KWOK_WORKDIR/clusters/$CLUSTER/logs)"
  kwokctl scale node --replicas "$NODES" --name "$CLUSTER" >>"$STATE/kwokctl.log" 2>&1 || die "kwokctl scale node failed"
  alive "$STATE/provisioner.pid" "$STATE/dev-provisioner" || wait_local_build
  start_provisioner
  STORE_IP=127.0.0.1
  object_store || say "The object store starts once its S3 server is built (in the background)."
  say "Cluster ready: $NODES simulated nodes, default StorageClass 'standard' (dev-provisioner)."
  say "  export KUBECONFIG=$KUBECONFIG_FILE"
}

wait_healthy() {
  local i
  for i in $(seq 1 "$1"); do healthy && return 0; sleep 1; done
  return 1
}

down() {
  stop "$STATE/operator.pid" "$STATE/manager" "operator"
  stop "$STATE/provisioner.pid" "$STATE/dev-provisioner" "volume provisioner"
  stop "$STATE/s3.pid" "$STATE/dev-objectstore" "object store" 30
  if [ "$(runtime)" = real ]; then
    "$repo/hack/real-node.sh" down || die "hack/real-node.sh down failed; the state is kept in $STATE"
  fi
  if cluster_exists; then
    binaries
    delete_cluster
  fi
  if [ -d "$STATE" ]; then
    rm -rf -- "$STATE"
  fi
  say "Local cluster removed."
}

status() {
  [ "$(runtime)" = real ] && "$repo/hack/real-node.sh" status
  if healthy; then say "cluster '$CLUSTER': running (KUBECONFIG=$KUBECONFIG_FILE)"
  elif cluster_exists; then say "cluster '$CLUSTER': exists, not answering"
  else say "cluster '$CLUSTER': none"; fi
  if alive "$STATE/provisioner.pid" "$STATE/dev-provisioner"; then
    say "volume provisioner: pid $(cat "$STATE/provisioner.pid")"
  else say "volume provisioner: not running"; fi
  if alive "$STATE/s3.pid" "$STATE/dev-objectstore"; then
    say "object store: pid $(cat "$STATE/s3.pid"), $(sed -n 's/^ENDPOINT=//p' "$STATE/s3.env" 2>/dev/null)"
  else say "object store: not running"; fi
  if alive "$STATE/operator.pid" "$STATE/manager"; then
    say "operator: pid $(cat "$STATE/operator.pid") (log: $STATE/operator.log)"
  else say "operator: not running"; fi
}

# stop_operator [grace seconds]
stop_operator() {
  stop "$STATE/operator.pid" "$STATE/manager" "operator" "${1:-0}"
  say "Operator stopped. The cluster keeps running: make dev starts the operator again in seconds, make dev-down removes everything."
}

# build_local: what make dev builds from this checkout besides the cluster,
# into $STATE/new: the operator (manager and instance), the volume
# provisioner and the object store's wrapper unless they run already, and
# for real pods the operator's image (its name in
# $STATE/operator-image.name). One go build, with the flags of the image's
# binaries, so shared packages compile once and the links run side by side;
# most of its packages are in the Go build cache already, compiled with the
# cluster's binaries (hack/k8s-binaries.sh).
build_local() {
  cd "$repo"
  mkdir -p "$STATE/new" "$STATE/build"
  local pkgs=(./cmd ./cmd/instance) p b
  alive "$STATE/provisioner.pid" "$STATE/dev-provisioner" || pkgs+=(./cmd/dev-provisioner)
  alive "$STATE/s3.pid" "$STATE/dev-objectstore" || pkgs+=(./cmd/dev-objectstore)
  # Into a directory that is kept, so that go build links again only what
  # changed; copied from there, since the running ones are replaced later.
  CGO_ENABLED=0 go build -trimpath -o "$STATE/build/" "${pkgs[@]}" || return 1
  for p in "${pkgs[@]}"; do
    b=${p##*/}
    cp "$STATE/build/$b" "$STATE/new/${b/#cmd/manager}"
  done
  if [ "$(runtime)" = real ]; then
    hack/operator-image.sh "$STATE/operator-image.tar" "$STATE/new" >"$STATE/operator-image.name" || return 1
  fi
}

# idle <log> <command...>: run the command in the background with
# SCHED_IDLE (else nice 19), so that it gets the CPU only when the cluster's
# own parts leave it idle (they compile, download and start meanwhile); its
# PID is in $!.
idle() {
  local log=$1; shift
  (chrt --idle -p 0 "$BASHPID" >/dev/null 2>&1 || renice -n 19 -p "$BASHPID" >/dev/null; "$@") >"$log" 2>&1 </dev/null &
}

# start_local_build: build_local in the background; wait_local_build waits
# for it.
start_local_build() {
  [ -n "${LOCAL_BUILD:-}" ] && return
  mkdir -p "$STATE"
  idle "$STATE/build.log" build_local
  LOCAL_BUILD=$!
}
wait_local_build() {
  [ -n "${LOCAL_BUILT:-}" ] && return
  say "Building the operator, its image and the volume provisioner (started in the background; log: ${STATE#"$repo"/}/build.log) ..."
  wait "$LOCAL_BUILD" || { tail -30 "$STATE/build.log" >&2; die "the build failed (log: $STATE/build.log)"; }
  LOCAL_BUILT=1
}

# start_s3_build: the object store's S3 server (hack/s3.sh: versitygw, a
# module of its own that shares few packages with the rest) builds in a
# background job of its own. Only the backups need it, so a first run
# shows the database first and enables the backups when it is built.
start_s3_build() {
  [ -n "${S3_BUILD:-}" ] && return
  mkdir -p "$STATE"
  idle "$STATE/s3-build.log" "$repo/hack/s3.sh"
  S3_BUILD=$!
}

# object_store [--wait]: the object store runs, started here if need be.
# Fails while its S3 server is still building, unless --wait.
object_store() {
  alive "$STATE/s3.pid" "$STATE/dev-objectstore" && [ -f "$STATE/s3.env" ] && return
  if [ -z "${S3_BUILT:-}" ]; then
    if [ "${1:-}" != --wait ] && kill -0 "$S3_BUILD" 2>/dev/null; then return 1; fi
    kill -0 "$S3_BUILD" 2>/dev/null && say "Waiting for the S3 server's build (started in the background; log: ${STATE#"$repo"/}/s3-build.log) ..."
    wait "$S3_BUILD" || { tail -30 "$STATE/s3-build.log" >&2; die "building the S3 server failed (log: $STATE/s3-build.log)"; }
    S3_BUILT=1
  fi
  wait_local_build # the object store's wrapper
  start_object_store "$STORE_IP"
}

# apply_sample [--backup]: apply the sample; with --backup, its spec.backup
# goes to the dev object store (a Secret with the store's keys first).
apply_sample() {
  if [ "${1:-}" = --backup ]; then
    say "Secret '$BACKUP_SECRET': the keys of the dev object store"
    kubectl create secret generic "$BACKUP_SECRET" --dry-run=client -o yaml \
      --from-literal=ACCESS_KEY_ID="$(sed -n 's/^ACCESS_KEY_ID=//p' "$STATE/s3.env")" \
      --from-literal=SECRET_ACCESS_KEY="$(sed -n 's/^SECRET_ACCESS_KEY=//p' "$STATE/s3.env")" | kubectl apply -f - >/dev/null
    sample_with_backup "$BACKUP_SECRET" | kubectl apply -f -
  else
    kubectl apply -f "$SAMPLE"
  fi
}

demo() {
  local start=$SECONDS
  up
  export KUBECONFIG=$KUBECONFIG_FILE

  # Beside the build. make install regenerates the CRDs from api/ first;
  # until its tools are built (a first run), the generated CRDs of the
  # checkout are what it would apply, and building the tools would delay
  # the demo by minutes.
  local install=(make -s -C "$repo" install) what="make install"
  if [ ! -x "$repo/bin/controller-gen" ] || [ ! -x "$repo/bin/kustomize" ]; then
    install=(kubectl apply -k "$repo/config/crd") what="kubectl apply -k config/crd: make install's tools are not built yet"
  fi
  say "Installing the CRDs ($what) ..."
  "${install[@]}" >"$STATE/install.log" 2>&1 &
  local installing=$!
  wait_local_build
  wait "$installing" || { cat "$STATE/install.log" >&2; die "${install[*]} failed"; }
  # Until the CRD is served the operator refuses to start. (kubectl wait
  # fails at once, rather than waiting, while a new CRD has no conditions.)
  local i
  for i in $(seq 1 60); do
    kubectl wait --for=condition=Established crd/mydatabases.database.example.com crd/mydatabasebackups.database.example.com \
      --timeout=10s >/dev/null 2>&1 && break
    [ "$i" = 60 ] && die "the CRDs are not established"
    sleep 0.5
  done

  local flags=(--health-probe-bind-address=0 --metrics-bind-address=0)
  if [ "$(runtime)" = real ]; then
    # The pods copy the instance manager out of the operator's image, built
    # from this checkout: put it into the node (no registry).
    local image
    image=$(cat "$STATE/operator-image.name")
    if [ "$(cat "$REAL_NODE_STATE/operator-image.loaded" 2>/dev/null)" != "$image" ]; then
      "$repo/hack/real-node.sh" load "$STATE/operator-image.tar" || die "loading the operator's image failed"
      echo "$image" >"$REAL_NODE_STATE/operator-image.loaded"
    fi
    say "Operator image $image in the node"
    flags+=(--instance-manager-image="$image")
  fi
  stop "$STATE/operator.pid" "$STATE/manager" "the operator of a previous make dev"
  mv -f "$STATE/new/manager" "$STATE/manager"
  # Beside the manager, the instance manager it replaces older ones with, in
  # place, without restarting their servers (spec.instanceManagerUpdate).
  mv -f "$STATE/new/instance" "$STATE/instance"
  : >"$STATE/operator.log"
  "$STATE/manager" "${flags[@]}" >>"$STATE/operator.log" 2>&1 </dev/null &
  local op=$!
  echo "$op" >"$STATE/operator.pid"
  say "Operator running as a local process (pid $op), log: ${STATE#"$repo"/}/operator.log"
  # Ctrl-C reaches the operator too (same process group) and it shuts down
  # by itself; a SIGTERM to this script alone is passed on by stop. A second
  # signal (make sends its children one more SIGTERM) must not cut the
  # cleanup short.
  trap stop_operator EXIT
  trap 'trap "" INT TERM; trap "stop_operator 5" EXIT; exit 130' INT TERM

  local name ns
  name=$(kubectl create --dry-run=client -o jsonpath='{.metadata.name}' -f "$SAMPLE")
  ns=$(kubectl config view --minify -o jsonpath='{..namespace}'); ns=${ns:-default}
  BACKUP_SECRET=$name-backup
  # Backups need the object store from the start (turning WAL archiving on
  # later restarts PostgreSQL), but on a first run its S3 server may still
  # be building: then the database comes first and the backups after.
  local later=
  if object_store; then
    say "Applying ${SAMPLE#"$repo"/} (MyDatabase '$name' in namespace '$ns'), backing up to the dev object store ..."
    apply_sample --backup
  else
    later=1
    say "Applying ${SAMPLE#"$repo"/} (MyDatabase '$name' in namespace '$ns') without backups for now:"
    say "  the object store's S3 server is still building; they are turned on once it is up."
    apply_sample
  fi
  say "Waiting until mydatabase/$name is Ready (timeout $READY_TIMEOUT) ..."
  if ! kubectl wait --for=condition=Ready "mydatabase/$name" --timeout="$READY_TIMEOUT"; then
    kubectl get mydatabase "$name" -o yaml >&2 || true
    kubectl get events --sort-by=.lastTimestamp >&2 || true
    say "operator log (last 40 lines):"; tail -40 "$STATE/operator.log" >&2
    die "mydatabase/$name did not become Ready"
  fi
  echo
  kubectl get mydatabase,statefulset,pod,pvc,svc
  echo
  local secret
  secret=$(kubectl get mydatabase "$name" -o jsonpath='{.status.credentialsSecret}')
  say "Connection Secret '$secret' holds the keys (values not shown; kubectl get secret $secret -o yaml):"
  # shellcheck disable=SC2016 # a Go template, not shell
  kubectl get secret "$secret" -o go-template='{{range $k, $v := .data}}  {{$k}}{{"\n"}}{{end}}'
  echo
  if [ "$(runtime)" = real ]; then
    show_psql "$name" "$secret"
  fi
  if [ -n "$later" ]; then
    object_store --wait
    say "Turning backups on: spec.backup to the dev object store (PostgreSQL restarts once, to archive its WAL) ..."
    apply_sample --backup
  fi
  if [ "$(runtime)" = real ]; then
    show_backup "$name"
  else
    say "NOTE: the nodes are simulated by KWOK. Pods on them run NO containers: KWOK only marks them"
    say "      Running and Ready, so the database is not actually reachable. Everything the operator"
    say "      does with Kubernetes objects is real (make test-postgres exercises PostgreSQL itself;"
    say "      DEV_RUNTIME=real make dev runs real pods where the machine allows it). For the same"
    say "      reason the sample's first scheduled MyDatabaseBackup waits, Pending: no instance reports."
  fi
  say "Ready in $((SECONDS - start)) s. Try, in another terminal:"
  say "  export KUBECONFIG=$KUBECONFIG_FILE"
  say "  kubectl scale mydatabase/$name --replicas=3 && kubectl get mydatabase,pod,pvc,pdb -w"
  if [ "${DEV_EXIT:-}" = 1 ]; then
    say "DEV_EXIT=1: exiting after the demo."
    return 0
  fi
  say "Following the operator log. Ctrl-C stops the operator; the cluster keeps running (make dev-down removes it)."
  tail -n 0 -f "$STATE/operator.log" --pid="$op" &
  local rc=0
  wait "$op" || rc=$?
  rm -f "$STATE/operator.pid"
  trap - EXIT
  say "Operator stopped (exit $rc; log: ${STATE#"$repo"/}/operator.log). The cluster keeps running:"
  say "make dev starts the operator again in seconds, make dev-down removes everything."
  return "$rc"
}

# show_psql <MyDatabase> <Secret>: print a psql command that reaches the
# database through its read-write Service, as the app user with the
# Secret's password, and run it once to show that it works. From this
# machine when it has psql (the Service's ClusterIP is routed to the node's
# bridge), else from inside the primary's pod.
show_psql() {
  local name=$1 secret=$2 ip cmd
  ip=$(kubectl get service "$name-rw" -o jsonpath='{.spec.clusterIP}')
  if command -v psql >/dev/null; then
    # shellcheck disable=SC2016 # printed for the user, expanded when run
    cmd='PGPASSWORD="$(kubectl get secret '"$secret"' -o jsonpath={.data.password} | base64 -d)" psql -h '"$ip"' -U "$(kubectl get secret '"$secret"' -o jsonpath={.data.username} | base64 -d)" "$(kubectl get secret '"$secret"' -o jsonpath={.data.database} | base64 -d)"'
  else
    cmd="kubectl exec -it $name-0 -c postgres -- psql -U postgres"
  fi
  say "The database runs in real pods. Connect with:"
  echo "  $cmd"
  say "Running it once with -c 'SELECT version()':"
  # The Service routes to the pod a moment after it is Ready (kube-proxy
  # programs the node once it sees the new endpoint), so a refusal is
  # retried for up to 30 s.
  local run="${cmd/ -it / -i } -c 'SELECT version()'" i
  for i in $(seq 1 30); do
    eval "$run" </dev/null 2>/dev/null && return
    sleep 1
  done
  eval "$run" </dev/null || die "the psql command did not work"
}

# show_backup <MyDatabase>: wait for the schedule's first backup (a new
# schedule backs up at once) and show it.
show_backup() {
  local name=$1 backup
  say "Waiting for the first scheduled base backup (spec.backup.schedule) ..."
  for _ in $(seq 1 60); do
    backup=$(kubectl get mydatabasebackups -l database.example.com/scheduled-by="$name" -o jsonpath='{.items[0].metadata.name}' 2>/dev/null)
    [ -n "$backup" ] && break
    sleep 1
  done
  [ -n "$backup" ] || die "the schedule made no MyDatabaseBackup"
  kubectl wait --for=jsonpath='{.status.phase}'=Completed "mydatabasebackup/$backup" --timeout=5m >/dev/null ||
    { kubectl get mydatabasebackup "$backup" -o yaml >&2; die "backup $backup did not complete"; }
  kubectl get mydatabasebackup "$backup" -o wide
  say "Take another with: kubectl create -f - <<<'{\"apiVersion\":\"database.example.com/v1alpha1\",\"kind\":\"MyDatabaseBackup\",\"metadata\":{\"generateName\":\"$name-\"},\"spec\":{\"database\":\"$name\"}}'"
  say "  (or kubectl mydb backup $name --wait=5m, with the plugin: make plugin)"
}

case "${1:-}" in
  up) up && wait_local_build && object_store --wait ;;
  demo) demo ;;
  down) down ;;
  kubeconfig) echo "$KUBECONFIG_FILE" ;;
  status) binaries --envtest; status ;;
  *) echo "usage: $0 up|demo|down|kubeconfig|status" >&2; exit 2 ;;
esac
