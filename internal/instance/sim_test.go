package instance

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"example.com/myoperator/internal/contract"
)

// The deterministic simulator: the real HA loop of every instance (ha,
// with decide, elect, the fence, the failsafe and the Lease code) against
// the models of sim_world_test.go, under a fault schedule drawn from one
// seed. After every schedule the checkers state the promises:
//   - every acknowledged write is by the Lease's holder of record at that
//     instant, and never by two instances in one step (no split brain, no
//     acknowledgement past a fence's deadline);
//   - no acknowledged write is missing from the final primary's history
//     (with a required synchronous quorum), or, asynchronous, where a
//     member that was healthy through the election held it when the new
//     primary took the Lease;
//   - once the faults heal, writes are acknowledged again within a bound.
//
// go test -run TestSimulation explores -sim.schedules schedules (or
// SIM_SCHEDULES); a failure prints its seed and trace, and -sim.seed
// replays that one schedule.

var (
	simSchedules = flag.Int("sim.schedules", 0, "schedules TestSimulation explores (default SIM_SCHEDULES, else 100, 10 under the race detector)")
	simSeed      = flag.Uint64("sim.seed", 0, "replay only this seed, with its trace")
	simFirst     = flag.Uint64("sim.first", 1, "the first seed TestSimulation explores")
)

// simDefault is the schedule the CI explores: three instances, the
// default Lease, asynchronous replication.
var simDefault = simConfig{instances: 3, lease: 4 * time.Second, faults: 4, span: 20 * time.Second, settle: 20 * time.Second}

func simCount() int {
	if *simSchedules > 0 {
		return *simSchedules
	}
	if n, err := strconv.Atoi(os.Getenv("SIM_SCHEDULES")); err == nil && n > 0 {
		return n
	}
	if raceDetector {
		return 10
	}
	return 100
}

// explore runs schedules from seed first on, and fails on the first that a
// checker rejects, with its seed and trace.
func explore(t *testing.T, cfg simConfig, first uint64, count int) {
	t.Helper()
	for seed := first; seed < first+uint64(count); seed++ {
		w, faults, problems := runSim(seed, cfg)
		if len(problems) > 0 {
			t.Fatalf("seed %d (of %d explored; replay: go test ./internal/instance -run '%s' -sim.seed %d):\n%s\nfaults:\n  %s\ntrace (last 60 lines):\n%s",
				seed, seed-first+1, t.Name(), seed, strings.Join(problems, "\n"), joinFaults(faults), tail(w.trace, 60))
		}
	}
}

func joinFaults(faults []simFault) string {
	var out []string
	for _, f := range faults {
		out = append(out, fmt.Sprintf("%.2fs %s", f.at.Sub(simEpoch).Seconds(), f))
	}
	return strings.Join(out, "\n  ")
}

func tail(lines []string, n int) string { return strings.Join(lines[max(0, len(lines)-n):], "\n") }

func simRun(t *testing.T, cfg simConfig) {
	if *simSeed != 0 {
		w, faults, problems := runSim(*simSeed, cfg)
		t.Logf("faults:\n  %s\ntrace:\n%s", joinFaults(faults), strings.Join(w.trace, "\n"))
		if len(problems) > 0 {
			t.Fatalf("seed %d:\n%s", *simSeed, strings.Join(problems, "\n"))
		}
		return
	}
	explore(t, cfg, *simFirst, simCount())
}

func TestSimulation(t *testing.T) {
	t.Run("asynchronous", func(t *testing.T) { simRun(t, simDefault) })
	sync := simDefault
	sync.quorum = contract.Quorum{Synchronous: 1, Required: true}
	t.Run("required", func(t *testing.T) { simRun(t, sync) })
	scaling := simDefault
	scaling.instances, scaling.scaling = 4, true
	t.Run("scaling", func(t *testing.T) { simRun(t, scaling) })
	durations := simDefault
	durations.durations = true
	t.Run("lease-durations", func(t *testing.T) { simRun(t, durations) })
	// An instance lost for good, with a required quorum: an election
	// then needs both others, so each must be in the set the primary
	// asked before it went.
	lost := sync
	lost.lost = true
	t.Run("node-lost", func(t *testing.T) { simRun(t, lost) })
	// Switchovers asked in the middle of the faults, asynchronous: a
	// handed-over Lease must carry every acknowledged write.
	switchovers := simDefault
	switchovers.switchovers = true
	t.Run("switchovers", func(t *testing.T) { simRun(t, switchovers) })
}
