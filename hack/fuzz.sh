#!/usr/bin/env bash
# Runs native Go fuzz targets, each for a fixed time:
#
#   hack/fuzz.sh TIME [-tags TAGS] ./pkg:FuzzTarget ...
#
# Go fuzzes one target per invocation, and `go test -fuzz` links its test
# binary again each time (seconds for a package that imports client-go),
# so each package's instrumented test binary is built once (go test -c
# -fuzz .) and run once per target, in the package's directory (where its
# testdata/fuzz corpus is), with go test's own fuzz cache, where the corpus
# the engine grows is kept. A failing input is written to the package's
# testdata/fuzz: commit it, it is a regression test from then on. It prints
# each target's last progress line (executions, corpus), and stops at the
# first failure. TIME is a duration (60s) or a number of executions
# (200x). FUZZ_PARALLEL (default 2) is the number of workers;
# FUZZ_MINIMIZE_TIME (default 60s, Go's) bounds the minimization of each
# new input, which for a target that calls an API server is most of its
# time.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

time=${1:?usage: hack/fuzz.sh TIME [-tags TAGS] ./pkg:FuzzTarget ...}
shift
tags=()
if [ "${1:-}" = -tags ]; then
  tags=(-tags "$2")
  shift 2
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cache="$(go env GOCACHE)/fuzz"

# inputs_in counts the failing inputs kept for a target.
inputs_in() { if [ -d "$1" ]; then find "$1" -type f | wc -l; else echo 0; fi; }

declare -A built=()
for spec in "$@"; do
  pkg=${spec%%:*} target=${spec#*:}
  bin="$dir/$(echo "$pkg" | tr -c 'A-Za-z0-9\n' _).test"
  if [ -z "${built[$pkg]:-}" ]; then
    go test -c -fuzz . "${tags[@]}" -o "$bin" "$pkg"
    built[$pkg]=1
  fi
  importpath=$(go list "${tags[@]}" "$pkg")
  inputs="$pkg/testdata/fuzz/$target"
  before=$(inputs_in "$inputs")
  if ! (cd "$pkg" && "$bin" -test.run '^$' -test.fuzz "^$target\$" -test.fuzztime "$time" \
      -test.fuzzminimizetime "${FUZZ_MINIMIZE_TIME:-60s}" -test.parallel "${FUZZ_PARALLEL:-2}" -test.fuzzcachedir "$cache/$importpath") >"$dir/log" 2>&1; then
    # Go 1.26's fuzz coordinator can fail a target whose -fuzztime
    # duration ends while a worker runs, with "context deadline exceeded"
    # and no failing input (go.dev/issue/75804, fixed in Go 1.27): that is
    # no finding. A count (-fuzztime 200x, as test-fuzz uses) has no
    # deadline to race.
    if [ "$(inputs_in "$inputs")" = "$before" ] && grep -q '^    context deadline exceeded$' "$dir/log" &&
        ! grep -q 'Failing input written' "$dir/log"; then
      echo "$target ($pkg, $time): ended by go.dev/issue/75804 (the duration's deadline, no failing input): no finding"
      continue
    fi
    cat "$dir/log"
    echo "hack/fuzz.sh: $target ($pkg) failed; a failing input is in $inputs" >&2
    exit 1
  fi
  line=$(grep 'execs:' "$dir/log" | tail -n 1 | sed 's/^fuzz: //')
  echo "$target ($pkg, $time): ${line:-its corpus only (the baseline took the time)}"
done
