package instance

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"example.com/myoperator/internal/contract"
)

// simHealed is when every fault of a schedule has ended.
func simHealed(cfg simConfig) time.Time { return simEpoch.Add(simBoot + cfg.span + 3*cfg.lease) }

// simConfig sizes a schedule.
type simConfig struct {
	instances int
	lease     time.Duration
	quorum    contract.Quorum
	faults    int           // how many faults the schedule draws
	span      time.Duration // the faults fall within this, after the start
	settle    time.Duration // the run goes on this long after they heal
	suspends  bool          // draw VM suspends too (a documented limit)
	// schedule, when set, is the faults to run instead of drawn ones;
	// joins, instances that join (a scale-up) only once they have cloned,
	// outside the quorum the Lease names.
	schedule []simFault
	joins    int
	// scaling: the last instance exists only during "scale" faults (a
	// scale-up, then a scale-down), the quorum on the Lease following.
	scaling bool
	// durations: draw "relaunch" faults too, a pod restarted with the
	// other of two Lease durations (lease and twice it), as while a
	// change of spec.failover.leaseDurationSeconds rolls the pods.
	durations bool
	// lost: one instance, drawn, is lost for good at a drawn time, as a
	// node that never comes back (its pod stuck Terminating); the
	// others must carry on without it once the other faults heal.
	lost bool
	// switchovers: draw "switchover" events too: the operator asks the
	// primary, in the Lease, to hand over to an instance, and withdraws
	// the request when the event ends if no one took it up.
	switchovers bool
}

// maxLease is the longest Lease duration an instance may run with.
func (cfg simConfig) maxLease() time.Duration {
	if cfg.durations {
		return 2 * cfg.lease
	}
	return cfg.lease
}

// simStep is the simulator's resolution: the world moves every step.
const simStep = 20 * time.Millisecond

// simBoot is the fault-free start: the MyDatabase made and cloned.
const simBoot = 8 * time.Second

// simRecoverBound is the liveness bound after the faults heal: a lapsed
// Lease (L) plus the election's patience and the turns (2L).
func simRecoverBound(lease time.Duration) time.Duration { return 3 * lease }

type simFault struct {
	at, until time.Time
	kind      string
	a, b      string
}

func (f simFault) String() string {
	s := fmt.Sprintf("%s %s", f.kind, f.a)
	if f.b != "" {
		s += "->" + f.b
	}
	if f.until == simForever {
		return s + " for good"
	}
	return fmt.Sprintf("%s for %.2fs", s, f.until.Sub(f.at).Seconds())
}

var simFaultKinds = []string{"api-cut", "partition", "one-way", "pause", "crash", "answers-lost", "isolate", "api-slow", "lossy"}

// drawFaults draws a schedule's faults from rng.
func drawFaults(rng *rand.Rand, cfg simConfig, names []string) []simFault {
	kinds := simFaultKinds
	if cfg.suspends {
		kinds = append(slices.Clone(kinds), "suspend")
	}
	if cfg.scaling {
		kinds = append(slices.Clone(kinds), "scale")
	}
	if cfg.durations {
		// Drawn three times as often as another kind: the configuration
		// is there to explore them, among nine other kinds.
		kinds = append(slices.Clone(kinds), "relaunch", "relaunch", "relaunch")
	}
	if cfg.switchovers {
		kinds = append(slices.Clone(kinds), "switchover", "switchover", "switchover")
	}
	var out []simFault
	for range cfg.faults {
		at := simEpoch.Add(simBoot + time.Duration(rng.Int64N(int64(cfg.span))))
		length := time.Duration(rng.Int64N(int64(3*cfg.lease))) + cfg.lease/4
		f := simFault{at: at, until: at.Add(length), kind: kinds[rng.IntN(len(kinds))], a: names[rng.IntN(len(names))]}
		switch f.kind {
		case "scale":
			f.a, f.until = names[len(names)-1], at.Add(length*4)
		case "relaunch": // a quick restart: a holder resumes in place, with its new duration
			f.until = at.Add(length / 4)
		}
		if healed := simHealed(cfg); f.until.After(healed) {
			f.until = healed
		}
		if f.kind == "partition" || f.kind == "one-way" || f.kind == "lossy" {
			for f.b == "" || f.b == f.a {
				f.b = names[rng.IntN(len(names))]
			}
		}
		out = append(out, f)
	}
	if cfg.lost {
		// Drawn after the others: a configuration without it draws the
		// same schedules as before it came.
		at := simEpoch.Add(simBoot + time.Duration(rng.Int64N(int64(cfg.span))))
		out = append(out, simFault{at: at, until: simForever, kind: "lost", a: names[rng.IntN(len(names))]})
	}
	return out
}

// simForever is the end of a fault that never heals.
var simForever = simEpoch.Add(1000 * time.Hour)

// applyFaults starts and ends the faults due now; every fault ends by
// healed.
func (w *simWorld) applyFaults(faults []simFault, lease time.Duration) {
	for _, n := range w.nodes {
		if n.crashed || n.paused || n.suspended || n.apiCut || n.answersLost || n.slow {
			n.unhealthyAt = w.now
		}
		if n.suspended {
			n.suspendedFor += simStep
		}
	}
	// Every fault's effect is worked out again from the faults that hold
	// now, so that overlapping faults compose (the end of one never lifts
	// another's).
	crash := map[*simNode]bool{}
	exists := map[*simNode]bool{}
	for _, n := range w.nodes {
		n.apiCut, n.answersLost, n.suspended, n.slow = false, false, false, false
		clear(w.cut[n.name])
		clear(w.lossy[n.name])
		if n == w.scaling {
			exists[n] = false
		}
	}
	paused := map[*simNode]bool{}
	for _, f := range faults {
		if w.now.Before(f.at) || !w.now.Before(f.until) {
			continue
		}
		n := w.node(f.a)
		switch f.kind {
		case "api-cut":
			n.apiCut = true
		case "answers-lost":
			n.answersLost = true
		case "partition":
			w.cut[f.a][f.b], w.cut[f.b][f.a] = true, true
		case "one-way":
			w.cut[f.a][f.b] = true
		case "lossy": // both ways
			w.lossy[f.a][f.b], w.lossy[f.b][f.a] = true, true
		case "api-slow":
			n.slow = true
		case "isolate": // from the API server and every other instance
			n.apiCut = true
			for _, o := range w.nodes {
				if o != n {
					w.cut[n.name][o.name], w.cut[o.name][n.name] = true, true
				}
			}
		case "pause":
			paused[n] = true
		case "suspend":
			n.suspended = true
		case "scale":
			exists[n] = true
		case "crash", "lost":
			crash[n] = true
		case "relaunch":
			crash[n], n.relaunch = true, true
		case "switchover":
			w.askSwitchover(f)
		}
	}
	for _, f := range faults {
		if f.kind == "switchover" && w.now.Equal(f.until.Truncate(simStep)) {
			w.withdrawSwitchover(f.a)
		}
	}
	for _, n := range w.nodes {
		if n.paused != paused[n] {
			w.logf(n.name, "fault: paused %t", paused[n])
			n.paused = paused[n]
		}
		if e, scaled := exists[n]; scaled {
			w.scale(n, e, lease)
			if !e {
				continue
			}
		}
		switch {
		case crash[n] && !n.crashed:
			w.logf(n.name, "fault: crashed")
			n.crashed = true
			n.pg.stop()
		case !crash[n] && n.crashed:
			if n.relaunch {
				n.lease, n.relaunch = map[bool]time.Duration{true: 2 * lease, false: lease}[n.lease == lease], false
			}
			w.logf(n.name, "fault: restarted (Lease duration %s)", n.lease)
			n.crashed = false
			n.restart()
			n.nextTurn = w.now
		}
	}
}

// scale makes the instance n exist or not, as the operator does for a
// change of spec.replicas: the quorum on the Lease first (a write that
// changes its resourceVersion), then the pod made, or deleted (its volume
// kept).
func (w *simWorld) scale(n *simNode, exists bool, lease time.Duration) {
	if exists == n.member {
		return
	}
	n.member = exists
	w.quorum.Instances += map[bool]int32{true: 1, false: -1}[exists]
	w.rv++
	w.lease.Annotations[contract.AnnotationQuorum] = w.quorum.String()
	w.lease.ResourceVersion = strconv.Itoa(w.rv)
	w.logf("op", "spec.replicas %d", w.quorum.Instances)
	n.crashed = !exists
	if exists {
		n.restart()
		n.nextTurn = w.now
	} else {
		n.pg.stop()
	}
}

// askSwitchover is the operator's request of switchover f, written once,
// at its start, when the Lease has a holder other than its target: a
// write that changes the Lease's resourceVersion, as the operator's
// does.
func (w *simWorld) askSwitchover(f simFault) {
	holder := ""
	if w.lease.Spec.HolderIdentity != nil {
		holder = *w.lease.Spec.HolderIdentity
	}
	if w.now.Sub(f.at) >= simStep || holder == "" || holder == f.a || w.lease.Annotations[contract.AnnotationSwitchoverTo] != "" {
		return
	}
	w.rv++
	w.lease.Annotations[contract.AnnotationSwitchoverTo] = f.a
	w.lease.ResourceVersion = strconv.Itoa(w.rv)
	w.logf("op", "switchover from %s to %s asked", holder, f.a)
}

// withdrawSwitchover: the operator calls a switchover to target off that
// no one took up while its event lasted.
func (w *simWorld) withdrawSwitchover(target string) {
	if w.lease.Annotations[contract.AnnotationSwitchoverTo] != target {
		return
	}
	w.rv++
	delete(w.lease.Annotations, contract.AnnotationSwitchoverTo)
	w.lease.ResourceVersion = strconv.Itoa(w.rv)
	w.logf("op", "switchover to %s withdrawn", target)
}

// active tells whether another fault of kind on the same instances holds
// now (faults overlap).
func (w *simWorld) active(faults []simFault, kind string, ab ...string) bool {
	for _, f := range faults {
		if f.kind == kind && f.a == ab[0] && (len(ab) == 1 || f.b == ab[1]) && !w.now.Before(f.at) && w.now.Before(f.until) {
			return true
		}
	}
	return false
}

// at is a fault of a fixed schedule, in seconds from the start.
func at(from, until float64, kind, a, b string) simFault {
	second := func(s float64) time.Time { return simEpoch.Add(time.Duration(s * float64(time.Second))) }
	return simFault{at: second(from), until: second(until), kind: kind, a: a, b: b}
}
