#!/usr/bin/env bash
# A one-node Kubernetes cluster whose pods really run, on this machine, for
# `make test-real` and `make dev` (where the machine allows real pods).
#
#   hack/real-node.sh up          start it (parts from hack/node-parts.sh)
#   hack/real-node.sh down        stop it and remove everything it made, then
#                                 check that the machine is as before `up`
#   hack/real-node.sh status      say whether it runs, and where
#   hack/real-node.sh kubeconfig  print the path of its admin kubeconfig
#   hack/real-node.sh load TAR    import an image archive (hack/operator-image.sh)
#   hack/real-node.sh pause NAME SECONDS
#                                 stop a component (SIGSTOP) for SECONDS, then
#                                 resume it (SIGCONT, also if this script is
#                                 interrupted): kube-apiserver to try the
#                                 database's failsafe (docs/high-availability.md)
#
# What runs, each as a process of this machine, stopped by the PID recorded
# at start (never by name): etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler (hack/k8s-binaries.sh), containerd and runc from Debian's
# packages (extracted, not installed), kubelet, kube-proxy (iptables mode);
# CoreDNS runs as a pod. Images are imported into containerd from the
# archives hack/node-parts.sh built: there is no registry.
#
# Network: a host-only bridge (myop0, 10.244.0.1/24) is the node's address
# and the pods' network (CNI bridge + host-local + portmap + loopback);
# Services are 10.96.0.0/24, routed to the bridge. Pod traffic never leaves
# this machine:
#   - pods get no default route, only routes to the pod and Service ranges;
#   - nothing masquerades pod traffic to the outside;
#   - the MYOP-GUARD chain, in mangle's FORWARD (before filter's, where
#     kube-proxy puts its rules), lets only bridge-to-bridge traffic through
#     and drops anything else forwarded to or from the bridge;
#   - OUTPUT drops the pod and Service ranges on any other interface.
# ip_forward and bridge-nf-call-iptables are set to 1 while the node is up
# and restored by `down`.
#
# One such node per machine: /run/lock/myoperator-real-node.lock is the lock;
# /run/myoperator-real-node holds, while a node is up, the owner's state
# directory and a snapshot of the machine taken before `up`
# (interfaces, addresses, routes, iptables rules, sysctls, mounts, cgroups,
# host paths). `down` removes what the node made (processes, pods and their
# network namespaces, mounts, kubepods cgroups, iptables chains, the bridge,
# host paths containerd and the kubelet create when absent: /run/containerd,
# /var/lib/kubelet, /var/lib/cni, /var/log/pods, /var/log/containers,
# /var/run/netns) and then compares the machine with the snapshot: any
# difference fails `down` and is printed.
#
# State (PKI, kubeconfigs, logs, PIDs, etcd, containerd, kubelet, volumes)
# lives in REAL_NODE_STATE (default bin/real-node of this checkout).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${REAL_NODE_STATE:-$repo/bin/real-node}
LOCKDIR=/run/myoperator-real-node
# The lock file itself stays, as lock files in /run/lock do: removing a file
# others may be waiting on would let two of them hold "the" lock.
LOCKFILE=/run/lock/myoperator-real-node.lock
NODE=${REAL_NODE_NAME:-real-node}
BRIDGE=myop0
NODE_IP=10.244.0.1
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/24
KUBERNETES_SVC_IP=10.96.0.1
DNS_IP=10.96.0.10
# Host paths the runtime creates at fixed places; removed by `down` when
# `up` found them absent.
HOST_PATHS=(/run/containerd /var/lib/kubelet /var/lib/cni /var/log/pods /var/log/containers /var/run/netns /run/netns)
SYSCTLS=(net/ipv4/ip_forward net/bridge/bridge-nf-call-iptables)

# shellcheck source=hack/lib/progress.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/progress.sh"
say() { progress real-node "$*"; }
die() { say "ERROR: $*"; exit 1; }

# parts: the binaries and images (built once, cached outside the checkout).
parts() {
  [ -n "${K8S_BIN:-}" ] && return
  eval "$("$repo/hack/node-parts.sh")" || die "hack/node-parts.sh failed"
  export PATH="$K8S_BIN:$NODE_BIN:$PATH"
}

# ---------------------------------------------------------------- processes

pidfile() { echo "$STATE/pids/$1"; }

# alive <name>: the process recorded for <name> still runs and is ours (its
# executable is the one we started: a PID can be reused).
alive() {
  local f pid exe
  f=$(pidfile "$1")
  [ -f "$f" ] || return 1
  read -r pid exe <"$f"
  [ -n "$pid" ] && [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$exe" ]
}

COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy)
all_alive() { local n; for n in "${COMPONENTS[@]}"; do alive "$n" || return 1; done; }
any_alive() { local n; for n in "${COMPONENTS[@]}"; do alive "$n" && return 0; done; return 1; }

# start <name> <binary> [args...]: run in its own session, log to logs/<name>.
start() {
  local name=$1 bin; bin=$(command -v "$2"); shift 2
  mkdir -p "$STATE/pids" "$STATE/logs"
  # 7>&-: the lock is not theirs to hold.
  setsid "$bin" "$@" >>"$STATE/logs/$name.log" 2>&1 </dev/null 7>&- &
  echo "$! $bin" >"$(pidfile "$name")"
}

# stop <name> [grace seconds]: SIGTERM, then SIGKILL after the grace period.
stop() {
  local name=$1 grace=${2:-15} pid i
  alive "$name" || { rm -f "$(pidfile "$name")"; return 0; }
  read -r pid _ <"$(pidfile "$name")"
  kill -TERM "$pid" 2>/dev/null || true
  kill -CONT "$pid" 2>/dev/null || true # a paused one (cmd_pause) takes the TERM only then
  for ((i = 0; i < grace * 10; i++)); do alive "$name" || break; sleep 0.1; done
  if alive "$name"; then
    say "$name (pid $pid) did not stop in ${grace} s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do alive "$name" || break; sleep 0.1; done
  fi
  rm -f "$(pidfile "$name")"
}

# wait_for <what> <seconds> <command...>
wait_for() {
  local what=$1 secs=$2 i; shift 2
  for ((i = 0; i < secs * 5; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  die "$what not ready after ${secs} s; logs in $STATE/logs"
}

# free_ports <var>...: set each variable to a port nothing listens on, all
# different (picked in this shell, not in a subshell, so that the ports
# already handed out are remembered).
used_ports=" "
free_ports() {
  local var p
  for var in "$@"; do
    while :; do
      p=$(shuf -i 20000-60999 -n 1)
      [[ $used_ports == *" $p "* ]] && continue
      ss -Htan "( sport = :$p )" | grep -q . && continue
      break
    done
    used_ports="$used_ports$p "
    printf -v "$var" '%s' "$p"
  done
}

# ---------------------------------------------------------------- snapshot

# snapshot: the parts of this machine the node changes, normalised so that
# two snapshots of an unchanged machine are equal.
snapshot() {
  local t s p
  echo "## links"; link_names
  echo "## addresses"; ip -o addr show | awk '{print $2, $3, $4}' | sort
  echo "## routes"; ip route show table all | sort
  echo "## rules"; ip rule show | sort
  for t in filter nat mangle raw; do
    echo "## iptables $t"
    # Empty built-in chains are what a table has before anyone used it.
    iptables-save -t "$t" 2>/dev/null | grep -v '^#' | sed -E 's/ \[[0-9]+:[0-9]+\]$//' |
      grep -vE '^(\*|COMMIT$|:(INPUT|OUTPUT|FORWARD|PREROUTING|POSTROUTING) ACCEPT$)' || true
  done
  echo "## sysctls"; for s in "${SYSCTLS[@]}"; do echo "$s=$(cat "/proc/sys/$s" 2>/dev/null)"; done
  echo "## mounts"; awk '{print $5}' /proc/self/mountinfo | sort
  echo "## kubepods cgroups"; find /sys/fs/cgroup -maxdepth 3 -type d -name 'kubepods*' 2>/dev/null | sort
  echo "## host paths"; for p in "${HOST_PATHS[@]}" "$STATE"; do [ -e "$p" ] && echo "$p"; done
  echo "## processes of the node"; node_processes
  true
}

link_names() { ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | sort; }

# node_processes: PID and executable of every process of the node: those
# given the state directory in their arguments (the control plane,
# containerd, kubelet, kube-proxy), the runtime's own (shims, runc) and those
# whose root is a container's, under the state directory.
node_processes() {
  local p exe root
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    root=$(readlink "$p/root" 2>/dev/null) || root=/
    if [[ $exe == "$RUNTIME_DIR"/* || $root == "$STATE"/* ]] ||
      tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "$STATE/"; then
      echo "${p#/proc/} $exe"
    fi
  done
}

# ---------------------------------------------------------------- up

pki() {
  local d=$STATE/pki
  mkdir -p "$d"
  cd "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=real-node-ca" -keyout ca.key -out ca.crt 2>/dev/null
  # cert <name> <subject> [subjectAltName]
  cert() {
    openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
    if [ -n "${3:-}" ]; then
      printf 'subjectAltName=%s\n' "$3" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
    else
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -out "$1.crt" 2>/dev/null
    fi
  }
  cert apiserver "/CN=kube-apiserver" \
    "IP:$NODE_IP,IP:$KUBERNETES_SVC_IP,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin "/O=system:masters/CN=real-node-admin"
  cert kubelet "/O=system:nodes/CN=system:node:$NODE"
  cert kubelet-serving "/CN=$NODE" "IP:$NODE_IP,DNS:$NODE"
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  cd - >/dev/null
}

kubeconfig() { # <file> <client cert name>
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: real-node
  cluster: {server: "https://$NODE_IP:$API_PORT", certificate-authority: "$STATE/pki/ca.crt"}
users:
- name: $2
  user: {client-certificate: "$STATE/pki/$2.crt", client-key: "$STATE/pki/$2.key"}
contexts:
- name: real-node
  context: {cluster: real-node, user: $2}
current-context: real-node
EOF
}

network_up() {
  local r
  for r in "$POD_CIDR" "$SERVICE_CIDR"; do
    ip route show table all | grep -qF -- "$r" && die "a route to $r already exists: the node's ranges would clash"
  done
  ip link add "$BRIDGE" type bridge
  ip addr add "$NODE_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  ip route add "$SERVICE_CIDR" dev "$BRIDGE" src "$NODE_IP"
  # The guard: only bridge-to-bridge traffic is forwarded. In mangle's
  # FORWARD, which the kernel runs before filter's, where kube-proxy and the
  # kubelet put their own rules first.
  iptables -t mangle -N MYOP-GUARD
  iptables -t mangle -A MYOP-GUARD -i "$BRIDGE" -o "$BRIDGE" -j RETURN
  iptables -t mangle -A MYOP-GUARD -i "$BRIDGE" -j DROP
  iptables -t mangle -A MYOP-GUARD -o "$BRIDGE" -j DROP
  iptables -t mangle -I FORWARD 1 -j MYOP-GUARD
  iptables -N MYOP-OUTPUT-GUARD
  iptables -A MYOP-OUTPUT-GUARD -o "$BRIDGE" -j RETURN
  iptables -A MYOP-OUTPUT-GUARD -o lo -j RETURN
  iptables -A MYOP-OUTPUT-GUARD -d "$POD_CIDR" -j DROP
  iptables -A MYOP-OUTPUT-GUARD -d "$SERVICE_CIDR" -j DROP
  iptables -I OUTPUT 1 -j MYOP-OUTPUT-GUARD
  modprobe br_netfilter 2>/dev/null || true
  local s
  for s in "${SYSCTLS[@]}"; do
    [ -f "/proc/sys/$s" ] || die "/proc/sys/$s is missing (br_netfilter not available?)"
    echo 1 >"/proc/sys/$s"
  done
}

cni_config() {
  mkdir -p "$STATE/cni/net.d" "$STATE/cni/ipam"
  cat >"$STATE/cni/net.d/10-myop.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "myop",
  "plugins": [
    {
      "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local", "dataDir": "$STATE/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR", "rangeStart": "10.244.0.10", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "$POD_CIDR"}, {"dst": "$SERVICE_CIDR"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}, "snat": false}
  ]
}
EOF
}

containerd_up() {
  local d=$STATE/containerd
  mkdir -p "$d"
  cat >"$d/config.toml" <<EOF
version = 2
root = "$d/root"
state = "$d/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$d/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/myoperator/pause:3.10"
  # root here lacks CAP_SYS_RESOURCE: runc may not lower oom_score_adj.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$STATE/cni/net.d"
    max_conf_num = 1
EOF
  start containerd containerd --config "$d/config.toml"
  wait_for containerd 30 ctr --address "$d/containerd.sock" version
  local img
  for img in "$IMAGES"/*.tar; do
    ctr --address "$d/containerd.sock" -n k8s.io images import "$img" >/dev/null ||
      die "importing $img into containerd failed"
  done
}

control_plane_up() {
  local etcd_port etcd_peer kcm_port scheduler_port
  free_ports etcd_port etcd_peer API_PORT kcm_port scheduler_port
  echo "$API_PORT" >"$STATE/api-port"
  start etcd etcd --data-dir "$STATE/etcd" --unsafe-no-fsync \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "default=http://127.0.0.1:$etcd_peer" --listen-metrics-urls ""
  local p=$STATE/pki
  start kube-apiserver kube-apiserver --etcd-servers "http://127.0.0.1:$etcd_port" \
    --advertise-address "$NODE_IP" --bind-address "$NODE_IP" --secure-port "$API_PORT" \
    --cert-dir "$p" --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
    --client-ca-file "$p/ca.crt" --authorization-mode Node,RBAC \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --kubelet-client-certificate "$p/admin.crt" --kubelet-client-key "$p/admin.key" \
    --kubelet-certificate-authority "$p/ca.crt" \
    --kubelet-preferred-address-types InternalIP,Hostname
  kubeconfig "$STATE/kubeconfig" admin
  kubeconfig "$STATE/kubelet.kubeconfig" kubelet
  wait_for kube-apiserver 60 kubectl --kubeconfig "$STATE/kubeconfig" get --raw /readyz
  start kube-controller-manager kube-controller-manager --kubeconfig "$STATE/kubeconfig" \
    --authentication-kubeconfig "$STATE/kubeconfig" --authorization-kubeconfig "$STATE/kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$kcm_port" --leader-elect=false \
    --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
    --use-service-account-credentials --service-cluster-ip-range "$SERVICE_CIDR" \
    --cert-dir "$p/kcm"
  start kube-scheduler kube-scheduler --kubeconfig "$STATE/kubeconfig" \
    --authentication-kubeconfig "$STATE/kubeconfig" --authorization-kubeconfig "$STATE/kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$scheduler_port" --leader-elect=false --cert-dir "$p/scheduler"
}

kubelet_up() {
  local d=$STATE/kubelet kubelet_port kubelet_healthz proxy_healthz proxy_metrics
  free_ports kubelet_port kubelet_healthz proxy_healthz proxy_metrics
  mkdir -p "$d"
  : >"$STATE/resolv.conf"
  cat >"$d/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $kubelet_healthz
tlsCertFile: $STATE/pki/kubelet-serving.crt
tlsPrivateKeyFile: $STATE/pki/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $STATE/pki/ca.crt}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$STATE/containerd/containerd.sock
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
clusterDNS: [$DNS_IP]
clusterDomain: cluster.local
resolvConf: $STATE/resolv.conf
# No registry can give an image back: keep every image.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
serializeImagePulls: false
registerNode: true
EOF
  start kubelet kubelet --config "$d/config.yaml" --kubeconfig "$STATE/kubelet.kubeconfig" \
    --root-dir "$d" --cert-dir "$d/pki" --hostname-override "$NODE" --node-ip "$NODE_IP"
  cat >"$STATE/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $STATE/kubeconfig}
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:$proxy_healthz
metricsBindAddress: 127.0.0.1:$proxy_metrics
nodePortAddresses: ["$NODE_IP/32"]
conntrack: {maxPerCore: 0, min: 0}
iptables: {localhostNodePorts: false}
EOF
  start kube-proxy kube-proxy --config "$STATE/kube-proxy.yaml"
  wait_for "node $NODE" 60 kubectl --kubeconfig "$STATE/kubeconfig" wait --for=condition=Ready "node/$NODE" --timeout=1s
}

# coredns_up: the cluster DNS. Its Corefile may use only the plugins that
# hack/k8s-binaries.sh builds into coredns (errors, health, ready,
# kubernetes, cache).
coredns_up() {
  local image
  image=$(cd "$IMAGES" && ls coredns-*.tar | sed 's/^coredns-\(.*\)\.tar$/localhost\/myoperator\/coredns:\1/')
  kubectl --kubeconfig "$STATE/kubeconfig" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:1053 {
        errors
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
        }
        cache 30
    }
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      serviceAccountName: coredns
      dnsPolicy: Default
      securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
      containers:
      - name: coredns
        image: $image
        imagePullPolicy: Never
        args: [-conf, /etc/coredns/Corefile]
        ports:
        - {name: dns, containerPort: 1053, protocol: UDP}
        - {name: dns-tcp, containerPort: 1053, protocol: TCP}
        readinessProbe: {httpGet: {path: /ready, port: 8181}, periodSeconds: 2}
        livenessProbe: {httpGet: {path: /health, port: 8080}}
        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
        volumeMounts: [{name: config, mountPath: /etc/coredns, readOnly: true}]
      volumes: [{name: config, configMap: {name: coredns}}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: $DNS_IP
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, targetPort: 1053, protocol: UDP}
  - {name: dns-tcp, port: 53, targetPort: 1053, protocol: TCP}
EOF
  wait_for CoreDNS 120 kubectl --kubeconfig "$STATE/kubeconfig" -n kube-system wait --for=condition=Available deployment/coredns --timeout=1s
}

cmd_up() {
  [ "$(id -u)" = 0 ] || die "real pods need root"
  parts
  mkdir -p "$(dirname "$LOCKFILE")"
  exec 7>"$LOCKFILE"
  flock -n 7 || die "another hack/real-node.sh is starting or stopping a node"
  if [ -f "$LOCKDIR/owner" ]; then
    local owner; owner=$(cat "$LOCKDIR/owner")
    if [ "$owner" = "$STATE" ] && all_alive; then
      say "already up ($STATE)"
      return 0
    fi
    if [ "$owner" != "$STATE" ] && STATE=$owner any_alive; then
      die "a node is already up on this machine, from $owner: one at a time. Stop it first with REAL_NODE_STATE=$owner $0 down (make dev-down if it is make dev's)"
    fi
    say "the node of $owner was not stopped cleanly: removing what is left of it"
    STATE=$owner cmd_down_locked || die "could not clean up the node of $owner"
  fi
  local start_time=$SECONDS
  rm -rf "$STATE"
  mkdir -p "$LOCKDIR"
  snapshot >"$LOCKDIR/before"
  echo "$STATE" >"$LOCKDIR/owner"
  mkdir -p "$STATE"
  # From here on a failure must not leave half a node behind.
  trap 'if [ $? -ne 0 ]; then say "up failed: stopping what was started"; cmd_down_locked || true; fi' EXIT
  say "starting a one-node cluster with real pods in $STATE"
  pki
  network_up
  cni_config
  control_plane_up
  containerd_up
  kubelet_up
  coredns_up
  trap - EXIT
  say "up in $((SECONDS - start_time)) s: export KUBECONFIG=$STATE/kubeconfig"
}

# ---------------------------------------------------------------- down

# drain: delete every workload and pod so that the kubelet stops their
# containers and tears down their sandboxes (CNI DEL, network namespaces).
drain() {
  local kc=$STATE/kubeconfig
  alive kube-apiserver && alive kubelet && alive containerd || return 0
  kubectl --kubeconfig "$kc" delete statefulsets,deployments,replicasets,daemonsets,jobs --all -A --wait=false >/dev/null 2>&1 || true
  kubectl --kubeconfig "$kc" delete pods --all -A --grace-period=1 --wait=false >/dev/null 2>&1 || true
  local i
  for ((i = 0; i < 300; i++)); do
    [ -z "$(ctr --address "$STATE/containerd/containerd.sock" -n k8s.io tasks ls -q 2>/dev/null)" ] &&
      [ -z "$(kubectl --kubeconfig "$kc" get pods -A -o name 2>/dev/null)" ] && return 0
    sleep 0.2
  done
  say "pods still there after 60 s of draining; removing them through containerd"
}

# remove_containers: whatever the kubelet left, through containerd's API.
remove_containers() {
  local sock=$STATE/containerd/containerd.sock id
  alive containerd || return 0
  for id in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
    ctr --address "$sock" -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
  done
  sleep 1
  for id in $(ctr --address "$sock" -n k8s.io containers ls -q 2>/dev/null); do
    ctr --address "$sock" -n k8s.io tasks delete --force "$id" >/dev/null 2>&1 || true
    ctr --address "$sock" -n k8s.io containers delete "$id" >/dev/null 2>&1 || true
  done
}

iptables_cleanup() {
  local t chain
  kube-proxy --cleanup >/dev/null 2>&1 || true
  iptables -t mangle -D FORWARD -j MYOP-GUARD 2>/dev/null || true
  iptables -D OUTPUT -j MYOP-OUTPUT-GUARD 2>/dev/null || true
  # The kubelet's own chains (KUBE-FIREWALL, KUBE-KUBELET-CANARY, ...),
  # CNI portmap's and our guards: delete every rule that jumps to them, then
  # the chains.
  for t in filter nat mangle raw; do
    { iptables-save -t "$t" 2>/dev/null | grep -E '^-A .* -j (KUBE-|CNI-|MYOP-)' || true; } | sed 's/^-A/-D/' |
      while read -r rule; do eval "iptables -t $t $rule" 2>/dev/null || true; done
    for chain in $(iptables-save -t "$t" 2>/dev/null | sed -n 's/^:\(\(KUBE\|CNI\|MYOP\)-[^ ]*\) .*/\1/p'); do
      iptables -t "$t" -F "$chain" 2>/dev/null || true
    done
    for chain in $(iptables-save -t "$t" 2>/dev/null | sed -n 's/^:\(\(KUBE\|CNI\|MYOP\)-[^ ]*\) .*/\1/p'); do
      iptables -t "$t" -X "$chain" 2>/dev/null || true
    done
  done
}

cmd_down_locked() {
  local before=$LOCKDIR/before
  say "stopping the node of $STATE"
  trap - EXIT
  if [ -d "$STATE" ]; then
    parts
    drain
    stop kube-proxy
    stop kubelet
    remove_containers
    stop containerd
    stop kube-scheduler
    stop kube-controller-manager
    stop kube-apiserver
    stop etcd
    local pid exe
    # Shims and container processes outlive containerd if it was killed.
    while read -r pid exe; do
      [ -n "$pid" ] || continue
      say "stopping leftover process $pid ($exe)"
      kill -KILL "$pid" 2>/dev/null || true
    done < <(node_processes)
    # Mounts under the state directory and the network namespaces'.
    local m
    for m in $(awk '{print $5}' /proc/self/mountinfo | grep -E "^($STATE/|/run/containerd/|/var/run/netns/|/run/netns/|/var/lib/kubelet/)" | sort -r); do
      umount -l "$m" 2>/dev/null || true
    done
    # kubepods cgroups the kubelet made (empty now), deepest first.
    if [ -f "$before" ]; then
      find /sys/fs/cgroup -mindepth 2 -maxdepth 2 -type d -name 'kubepods*' 2>/dev/null | while read -r m; do
        grep -qxF "$m" "$before" || find "$m" -depth -type d -exec rmdir {} + 2>/dev/null || true
      done
    fi
  fi
  iptables_cleanup
  ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE"
  # Veths whose pod namespace is gone disappear with it; any left is ours.
  ip -o link show type veth 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | while read -r m; do
    [ -n "$m" ] && ! grep -qxF "$m" "$before" 2>/dev/null && ip link del "$m" 2>/dev/null || true
  done
  if [ -f "$before" ]; then
    local s v p
    for s in "${SYSCTLS[@]}"; do
      v=$(sed -n "s#^$s=##p" "$before")
      [ -n "$v" ] && echo "$v" >"/proc/sys/$s"
    done
    for p in "${HOST_PATHS[@]}"; do
      grep -qxF "$p" "$before" || rm -rf "$p"
    done
  fi
  rm -rf "$STATE"
  if [ -f "$before" ]; then
    snapshot >"$LOCKDIR/after"
    if ! diff -u "$before" "$LOCKDIR/after" >&2; then
      say "the machine differs from before 'up' (lines above: - before, + now); kept in $LOCKDIR"
      return 1
    fi
  fi
  rm -f "$LOCKDIR/owner" "$LOCKDIR/before" "$LOCKDIR/after"
  rmdir "$LOCKDIR" 2>/dev/null || true
  say "down: nothing of the node is left"
}

cmd_down() {
  [ "$(id -u)" = 0 ] || die "must run as root"
  mkdir -p "$(dirname "$LOCKFILE")"
  exec 7>"$LOCKFILE"
  flock -w 300 7 || die "another hack/real-node.sh has held the lock for 5 minutes"
  if [ -f "$LOCKDIR/owner" ]; then
    STATE=$(cat "$LOCKDIR/owner")
  elif [ ! -d "$STATE" ]; then
    say "no node is up"
    return 0
  fi
  cmd_down_locked
}

cmd_status() {
  if [ -f "$LOCKDIR/owner" ]; then
    STATE=$(cat "$LOCKDIR/owner")
    local n
    for n in "${COMPONENTS[@]}"; do
      if alive "$n"; then echo "$n: running (pid $(cut -d' ' -f1 "$(pidfile "$n")"))"; else echo "$n: not running"; fi
    done
    echo "state: $STATE"
    echo "kubeconfig: $STATE/kubeconfig"
  else
    echo "no node is up"
  fi
}

# pause <name> <seconds>: freeze one of the node's processes, as a hung
# control plane would be (connections open, no answer), and thaw it after
# <seconds>, or as soon as this script is told to stop.
cmd_pause() {
  local name=${1:-} secs=${2:-} pid
  [[ " ${COMPONENTS[*]} " == *" $name "* && $secs =~ ^[0-9]+$ ]] ||
    die "usage: $0 pause NAME SECONDS, NAME one of: ${COMPONENTS[*]}"
  [ -f "$LOCKDIR/owner" ] || die "no node is up"
  STATE=$(cat "$LOCKDIR/owner")
  alive "$name" || die "the node's $name is not running"
  read -r pid _ <"$(pidfile "$name")"
  trap "kill -CONT $pid 2>/dev/null || true" EXIT # $pid expanded now: it is local
  trap 'kill $! 2>/dev/null; exit 143' TERM INT
  kill -STOP "$pid"
  say "$name (pid $pid) paused for $secs s"
  sleep "$secs" &
  wait $!
  kill -CONT "$pid"
  say "$name (pid $pid) resumed"
}

# load <image.tar>: import an image into the node's containerd.
cmd_load() {
  local tar=${1:?usage: $0 load IMAGE.tar}
  [ -f "$LOCKDIR/owner" ] || die "no node is up"
  STATE=$(cat "$LOCKDIR/owner")
  alive containerd || die "the node's containerd is not running"
  parts
  ctr --address "$STATE/containerd/containerd.sock" -n k8s.io images import "$tar" >/dev/null ||
    die "importing $tar failed"
}

case "${1:-}" in
  up) cmd_up ;;
  load) cmd_load "${2:-}" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  kubeconfig) [ -f "$LOCKDIR/owner" ] && STATE=$(cat "$LOCKDIR/owner"); echo "$STATE/kubeconfig" ;;
  pause) cmd_pause "${2:-}" "${3:-}" ;;
  *) die "usage: $0 up|down|status|kubeconfig|load IMAGE.tar|pause NAME SECONDS" ;;
esac
