#!/usr/bin/env bash
# Builds, in the background and only with CPU time nothing else wants, the
# parts that the later tiers of `make test-all` need, in the order the tiers
# need them, while the earlier tiers run. On a machine whose caches are warm
# every step finds its part built and returns at once; on a fresh machine it
# moves most of the cold builds into the time the tests spend waiting on
# servers and timers (a warm make test-all keeps the 2 cores busy about a
# third of its time). It only fills caches: each tier still runs the script
# it needs, which finds the part built, waits for the build in progress (the
# scripts' locks), or builds it itself.
# A step that fails here is logged and left to the tier, which reports it.
#
# make test-all starts it with setsid, so that it leads a process group of
# its own: when the shell that started it is gone (the tiers passed or
# failed), a watchdog ends that group, this script and every build in it.
# It never signals a process outside its group.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

parent=$PPID
(while kill -0 "$parent" 2>/dev/null; do sleep 2; done; kill -TERM -- -$$) &
watchdog=$!

# SCHED_IDLE for this script and what it starts, and the lowest weight for
# its scheduling autogroup (setsid gave it one of its own; where autogroups
# are on, nice alone would not yield to the tests in another session).
chrt --idle -p 0 $$ >/dev/null 2>&1 || renice -n 19 -p $$ >/dev/null 2>&1 || true
echo 19 >/proc/self/autogroup 2>/dev/null || true

step() {
  local start=$SECONDS
  printf '[prebuild] %s ...\n' "$*"
  if "$@" >/dev/null; then
    printf '[prebuild] %s: done in %d s\n' "$*" $((SECONDS - start))
  else
    printf '[prebuild] %s: failed after %d s (the tier that needs it will report it)\n' "$*" $((SECONDS - start))
  fi
}
# helm_cache: compile helm (make helm's version) into the Go build cache, so
# that make helm only links it.
helm_cache() {
  local gobin
  gobin=$(mktemp -d) && GOBIN=$gobin go install "helm.sh/helm/v3/cmd/helm@$(sed -n 's/^HELM_VERSION ?= //p' Makefile)"
  local rc=$?
  rm -rf "$gobin"
  return $rc
}
# test_binaries: compile the slow tiers' test packages and what they import.
test_binaries() {
  local out
  out=$(mktemp -d) && go test -c -tags e2e,real -o "$out/" ./test/postgres ./test/e2e ./test/real
  local rc=$?
  rm -rf "$out"
  return $rc
}

# fuzz_binaries: compile the fuzz-instrumented test binaries of make
# test-fuzz (hack/fuzz.sh), whose instrumentation rebuilds every package
# they import, and PostgreSQL's parser (cgo) for the SQL ones.
fuzz_binaries() {
  local out pkg rc=0
  out=$(mktemp -d) || return 1
  for pkg in ./internal/contract ./internal/instance ./internal/instance/scram ./internal/backup ./internal/plugin ./internal/specs; do
    go test -c -fuzz . -o "$out/x.test" "$pkg" || rc=1
  done
  go test -c -fuzz . -tags sqlparse -o "$out/x.test" ./internal/instance || rc=1
  rm -rf "$out"
  return $rc
}

step hack/k8s-binaries.sh --envtest  # make test
step hack/k8s-binaries.sh            # make test-heavy (the KWOK tier), make test-e2e
step helm_cache                      # make test-helm, test-e2e, test-real
step hack/prometheus.sh              # make test-monitoring, test-postgres
step hack/s3.sh                      # make test-postgres, test-real
step test_binaries                   # make test-postgres, test-e2e, test-real
if [ "$(id -u)" = 0 ]; then
  step hack/node-parts.sh            # make test-real
fi
step fuzz_binaries                   # make test-fuzz
kill "$watchdog" 2>/dev/null || true
