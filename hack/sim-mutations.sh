#!/usr/bin/env bash
# The simulator's mutation check (docs/high-availability.md): takes out, one
# at a time, a check the HA loop's safety rests on, runs the simulator's
# exploration (SCHEDULES per configuration, 2,000 by default) and prints
# the first seed each configuration fails at; the source is restored after
# each, and on exit. A mutation that no configuration catches is a hole in
# the simulator's checkers.
set -euo pipefail
cd "$(dirname "$0")/../internal/instance"
schedules=${SCHEDULES:-2000}
backup=$(mktemp -d)
trap 'cp "$backup"/*.go . 2>/dev/null || true; rm -rf "$backup"' EXIT

mutate() { # name file old new [file old new ...]: every edit, then one run
	local name=$1 files=()
	shift
	while (($# >= 3)); do
		local file=$1 old=$2 new=$3
		shift 3
		[[ -e "$backup/$file" ]] || cp "$file" "$backup/"
		files+=("$file")
		python3 - "$file" "$old" "$new" <<'PY'
import sys
path, old, new = sys.argv[1:4]
text = open(path).read()
if old not in text:
    sys.exit(f"{path}: the code to take out is not there any more: {old!r}")
open(path, "w").write(text.replace(old, new, 1))
PY
	done
	echo "== $name"
	# One line per configuration that caught it: its first failing seed,
	# and the first thing its checkers found.
	# A mutation that does not compile is an error of this script, never
	# "not caught" (the quorum's instances were once reported so).
	(cd ../.. && go test ./internal/instance/ -run '^TestSimulation$' -count=1 -sim.schedules "$schedules" 2>&1) |
		awk '/\[build failed\]|\[setup failed\]/ { print "  ERROR: the mutated code does not build"; broken = 1; exit 1 }
		     /seed [0-9]+ \(of/ { match($0, /TestSimulation\/[a-z-]+/); config = substr($0, RSTART + 15, RLENGTH - 15)
		                           match($0, /seed [0-9]+/); seed = substr($0, RSTART + 5, RLENGTH - 5); getline
		                           sub(/^[ \t]+/, ""); print "  " config ": caught at seed " seed ": " $0; found = 1 }
		     END { if (!found && !broken) print "  not caught" }' || true
	for file in "${files[@]}"; do
		cp "$backup/$file" "$file" && rm "$backup/$file"
	done
}

mutate "the fence's deadline" fence.go "return f.now().Before(f.until)" "return !f.until.IsZero()"
mutate "the timeline comparison in the election" decide.go \
	"if a.timeline != 0 && b.timeline != 0 && a.timeline != b.timeline {" "if false {"
mutate "the promise check of a take" failsafe.go $'\tif f.now().Before(f.until) {\n\t\treturn false\n\t}\n\tf.taking = true' $'\tf.taking = true'
# The quorum's instances are asked from two places since the set a renewal
# writes takes them from the Lease it writes (leases.setFor): both go.
mutate "the quorum's instances in the failsafe round" failsafe.go \
	"members := h.c.members(l.quorum.Instances)" "var members []string" \
	lease.go "for _, name := range l.members(q.Instances) {" $'_ = q\n\tfor _, name := range l.members(0) {'
mutate "expiry by the holder's Lease duration" lease.go \
	"l.now().Sub(l.seenAt) >= l.duration()" "l.now().Sub(l.seenAt) >= l.t.lease"
mutate "the handed-over position a switchover's target waits for" decide.go \
	"case s.ready && s.lsn > l.handoff:" "case s.ready:"
