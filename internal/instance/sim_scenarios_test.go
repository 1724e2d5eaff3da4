package instance

import (
	"slices"
	"strings"
	"testing"
	"time"

	"example.com/myoperator/internal/contract"
)

// TestSimulationRegressions replays the schedules that found the holes
// of issue 58 on the code before their fixes.
func TestSimulationRegressions(t *testing.T) {
	// (a) The primary cut off from the API server and from db-1; db-2
	// streams every write it acknowledges. db-2 was promised to db-0 and
	// never stood, so db-1 won alone and db-2 was rewound: acknowledged
	// writes that db-2 held were lost (seed 206 of the first 206).
	t.Run("a promised member that is the most advanced still wins", func(t *testing.T) {
		if _, faults, problems := runSim(206, simDefault); len(problems) > 0 {
			t.Fatalf("%s\nfaults:\n  %s", strings.Join(problems, "\n"), joinFaults(faults))
		}
	})
	// (b) db-3 joined, cloned and streamed, then lost its stream (cut from
	// db-0) before db-0 was cut from the API server: db-0 holds on the
	// promises of db-1 and db-2 and never asks db-3, which stood alone and
	// took the Lease: two primaries.
	t.Run("an instance the holder does not ask never stands", func(t *testing.T) {
		cfg := simDefault
		cfg.instances, cfg.joins = 4, 1
		cfg.schedule = []simFault{at(10, 30, "partition", "db-0", "db-3"), at(12, 27, "api-cut", "db-0", "")}
		if _, faults, problems := runSim(1, cfg); len(problems) > 0 {
			t.Fatalf("%s\nfaults:\n  %s", strings.Join(problems, "\n"), joinFaults(faults))
		}
	})
	// Found after wave 4, by 10,000 schedules of each configuration once
	// the slow API server and lossy links were drawn too (scaling, seed
	// 4247; none of those two faults in it). db-1 paused and db-2
	// isolated, db-0 wrote on alone; db-3, made by a scale-up, cloned it
	// and held every write. db-0's renewal after the operator's new quorum
	// conflicted, read the Lease again and wrote the failsafe set it had
	// worked out from the old quorum, without db-3; then db-0 was cut off
	// from the API server and fenced. db-3, outside the set, never stood;
	// db-2 won and rewound db-3: the writes only db-3 held were lost.
	// Found by the node-lost configuration (required quorum of one, seed
	// 2810 of 10,000): db-0, the primary, isolated, fenced; it stood as
	// a replica, the most advanced of the three, and crashed for good
	// before its take. Its candidacy stayed in its report: db-1 and db-2
	// deferred to it in that term for ever, and no one took the Lease.
	t.Run("a candidate lost after it stood does not stop the election", func(t *testing.T) {
		cfg := simDefault
		cfg.quorum = contract.Quorum{Synchronous: 1, Required: true}
		cfg.schedule = []simFault{at(14.35, 20.64, "isolate", "db-1", ""), at(14.61, 19.37, "isolate", "db-0", ""),
			at(21.02, 1000, "crash", "db-0", "")}
		if _, faults, problems := runSim(2810, cfg); len(problems) > 0 {
			t.Fatalf("%s\nfaults:\n  %s", strings.Join(problems, "\n"), joinFaults(faults))
		}
	})
	t.Run("an instance the operator made is in the failsafe set the next renewal writes", func(t *testing.T) {
		cfg := simDefault
		cfg.instances, cfg.scaling = 4, true
		cfg.schedule = []simFault{at(23.21, 35.35, "pause", "db-1", ""), at(23.61, 29.32, "isolate", "db-2", ""),
			at(24.38, 40, "scale", "db-3", ""), at(25.12, 35, "api-cut", "db-0", "")}
		if _, faults, problems := runSim(4247, cfg); len(problems) > 0 {
			t.Fatalf("%s\nfaults:\n  %s", strings.Join(problems, "\n"), joinFaults(faults))
		}
	})
}

// TestSimulationSuspendLimit shows the documented limit of every deadline
// measured on the monotonic clock (docs/high-availability.md): a primary
// whose machine is suspended past the Lease resumes with its fence open
// by its own clock, and acknowledges the commits that waited before its
// first turn fences it, while another instance holds the Lease.
func TestSimulationSuspendLimit(t *testing.T) {
	cfg := simDefault
	cfg.schedule = []simFault{at(10, 18, "suspend", "db-0", "")}
	_, _, problems := runSim(1, cfg)
	if len(problems) == 0 || !strings.Contains(problems[0], "db-0 acknowledged a write while the Lease's holder of record is") {
		t.Fatalf("a primary resumed after a suspend of 2L: %v, want its acknowledgements past its Lease found", problems)
	}
	cfg.schedule = []simFault{at(10, 18, "pause", "db-0", "")}
	if _, _, problems := runSim(1, cfg); len(problems) > 0 {
		t.Fatalf("a primary paused for 2L, its clock running: %v, want nothing found", problems)
	}
}

// TestSimulationFailsafe: the failsafe keeps writes going while the API
// server is away, and, with a required quorum, through a replica's
// restart (promisesNeeded); asynchronous replicas need every promise, so
// the same restart fences the primary and a failover follows, losing
// nothing the checkers protect.
func TestSimulationFailsafe(t *testing.T) {
	required := simDefault
	required.quorum = contract.Quorum{Synchronous: 1, Required: true}
	everyPod := []simFault{at(10, 50, "api-cut", "db-0", ""), at(10, 50, "api-cut", "db-1", ""), at(10, 50, "api-cut", "db-2", "")}
	// The replica's pod deleted and made again: down for 5 s, more than
	// the fence's 3L/5 (a shorter restart is covered by the deadline).
	restart := []simFault{at(10, 40, "api-cut", "db-0", ""), at(20, 25, "crash", "db-1", "")}
	for name, tc := range map[string]struct {
		cfg      simConfig
		schedule []simFault
		failover bool
	}{
		"the API server unreachable from every pod, asynchronous":            {simDefault, everyPod, false},
		"the API server unreachable from every pod, required quorum":         {required, everyPod, false},
		"a replica restarted during a primary-only API cut, required quorum": {required, restart, false},
		"a replica restarted during a primary-only API cut, asynchronous":    {simDefault, restart, true},
	} {
		t.Run(name, func(t *testing.T) {
			tc.cfg.schedule = tc.schedule
			w, _, problems := runSim(1, tc.cfg)
			if len(problems) > 0 {
				t.Fatalf("%s\ntrace:\n%s", strings.Join(problems, "\n"), tail(w.trace, 40))
			}
			from, until := tc.schedule[0].at, tc.schedule[0].until
			gap := w.longestGap(from, until)
			if failedOver := len(w.takes) > 1; failedOver != tc.failover {
				t.Fatalf("failover %t, want %t (longest write gap %s)\ntrace:\n%s", failedOver, tc.failover, gap, tail(w.trace, 40))
			}
			if !tc.failover && gap > 3*simStep {
				t.Fatalf("longest write gap %s during the cut, want writes every step or two\ntrace:\n%s", gap, tail(w.trace, 40))
			}
			t.Logf("longest write gap during the cut: %s", gap)
		})
	}
}

// TestSimulationFailoverBound: a primary lost for good is replaced
// within simFailoverBound, whenever in its turn it is lost, asynchronous
// or with a required quorum.
func TestSimulationFailoverBound(t *testing.T) {
	for name, q := range map[string]contract.Quorum{"asynchronous": {}, "required": {Synchronous: 1, Required: true}} {
		t.Run(name, func(t *testing.T) {
			var slowest time.Duration
			for seed := uint64(1); seed <= 100; seed++ {
				cfg := simDefault
				cfg.quorum = q
				lost := simEpoch.Add(10*time.Second + time.Duration(seed)*cfg.lease/100)
				cfg.schedule = []simFault{{at: lost, until: simEpoch.Add(time.Hour), kind: "crash", a: "db-0"}}
				w, _, problems := runSim(seed, cfg)
				if len(problems) > 0 {
					t.Fatalf("seed %d: %s", seed, strings.Join(problems, "\n"))
				}
				i, _ := slices.BinarySearchFunc(w.ackedAt, lost, func(a, b time.Time) int { return a.Compare(b) })
				if i == len(w.ackedAt) {
					t.Fatalf("seed %d: no write acknowledged after the primary was lost", seed)
				}
				slowest = max(slowest, w.ackedAt[i].Sub(lost))
			}
			if slowest > simFailoverBound(simDefault.lease) {
				t.Fatalf("a new primary took writes %s after the old one was lost, want at most %s", slowest, simFailoverBound(simDefault.lease))
			}
			t.Logf("slowest failover: %s (bound %s)", slowest, simFailoverBound(simDefault.lease))
		})
	}
}

// TestSimulationSlowAPIAndLossyLinks: the faults of the API server's
// latency and of a lossy pod network, in fixed schedules, find nothing,
// and do what they model: a Lease write its sender gave up on (timed
// out) lands later, applied when nothing changed the Lease meanwhile
// (else it conflicts); a lossy link loses failsafe requests and answers
// while the primary holds on promises.
func TestSimulationSlowAPIAndLossyLinks(t *testing.T) {
	for name, tc := range map[string]struct {
		schedule []simFault
		trace    string // what the trace must show the fault did
	}{
		"the primary lost, the replicas' API server slow": {
			[]simFault{at(10, 40, "crash", "db-0", ""), at(9, 30, "api-slow", "db-1", ""), at(9, 30, "api-slow", "db-2", "")},
			"gave up on lands\n"},
		"the API server away, a lossy link to a replica": {
			[]simFault{at(10, 30, "api-cut", "db-0", ""), at(10, 30, "lossy", "db-0", "db-1")},
			"was lost"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := simDefault
			cfg.schedule = tc.schedule
			for seed := uint64(1); seed <= 20; seed++ {
				w, faults, problems := runSim(seed, cfg)
				if len(problems) > 0 {
					t.Fatalf("seed %d: %s\nfaults:\n  %s\ntrace:\n%s", seed, strings.Join(problems, "\n"), joinFaults(faults), tail(w.trace, 60))
				}
				if strings.Contains(strings.Join(w.trace, "\n")+"\n", tc.trace) {
					return
				}
			}
			t.Errorf("in 20 seeds, the trace never shows %q: the fault did nothing", tc.trace)
		})
	}
}
