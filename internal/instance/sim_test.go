package instance

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	return fmt.Sprintf("%s for %.2fs", s, f.until.Sub(f.at).Seconds())
}

var simFaultKinds = []string{"api-cut", "partition", "one-way", "pause", "crash", "answers-lost", "isolate"}

// drawFaults draws a schedule's faults from rng.
func drawFaults(rng *rand.Rand, cfg simConfig, names []string) []simFault {
	kinds := simFaultKinds
	if cfg.suspends {
		kinds = append(slices.Clone(kinds), "suspend")
	}
	if cfg.scaling {
		kinds = append(slices.Clone(kinds), "scale")
	}
	var out []simFault
	for range cfg.faults {
		at := simEpoch.Add(simBoot + time.Duration(rng.Int64N(int64(cfg.span))))
		length := time.Duration(rng.Int64N(int64(3*cfg.lease))) + cfg.lease/4
		f := simFault{at: at, until: at.Add(length), kind: kinds[rng.IntN(len(kinds))], a: names[rng.IntN(len(names))]}
		if f.kind == "scale" {
			f.a, f.until = names[len(names)-1], at.Add(length*4)
		}
		if healed := simHealed(cfg); f.until.After(healed) {
			f.until = healed
		}
		if f.kind == "partition" || f.kind == "one-way" {
			for f.b == "" || f.b == f.a {
				f.b = names[rng.IntN(len(names))]
			}
		}
		out = append(out, f)
	}
	return out
}

// newSimWorld makes a MyDatabase of cfg.instances instances.
func newSimWorld(cfg simConfig) *simWorld {
	w := &simWorld{now: simEpoch, report: map[string]*contract.Report{}, cut: map[string]map[string]bool{},
		quorum: cfg.quorum, acked: map[int]simAck{}, pending: map[string][]int{}, rv: 1}
	w.quorum.Instances = int32(cfg.instances - cfg.joins)
	if cfg.scaling {
		w.quorum.Instances--
	}
	w.window = 2 * cfg.lease
	w.lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "db-primary", ResourceVersion: "1",
		Annotations: map[string]string{contract.AnnotationQuorum: w.quorum.String()}}}
	for i := range cfg.instances {
		n := &simNode{w: w, name: "db-" + strconv.Itoa(i), member: true}
		n.pg = &simServer{n: n}
		n.nextTurn = simEpoch.Add(time.Duration(i) * cfg.lease / 15)
		w.nodes = append(w.nodes, n)
		w.cut[n.name] = map[string]bool{}
		n.restart(cfg.lease)
	}
	if cfg.scaling {
		w.scaling = w.nodes[len(w.nodes)-1]
		w.scaling.crashed, w.scaling.member = true, false // not made yet
	}
	return w
}

// restart gives the instance a new HA loop: a new process, nothing of the
// old one's memory.
func (n *simNode) restart(lease time.Duration) {
	c := Config{PodName: n.name, BootstrapPod: "db-0", LeaseName: "db-primary", LeaseDuration: lease}
	log := func(format string, args ...any) { n.w.logf(n.name, format, args...) }
	n.h = newHA(c, log, n.now, simAPI{n}, simNet{n}, n.pg, n.pg)
}

// runSim runs one schedule and returns what the checkers found.
func runSim(seed uint64, cfg simConfig) (*simWorld, []simFault, []string) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	w := newSimWorld(cfg)
	var names []string
	for _, n := range w.nodes {
		names = append(names, n.name)
	}
	faults := drawFaults(rng, cfg, names)
	if cfg.schedule != nil {
		faults = cfg.schedule
	}
	healed := simHealed(cfg)
	end := healed.Add(cfg.settle)
	var problems []string
	problem := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%.3fs: ", w.now.Sub(simEpoch).Seconds())+fmt.Sprintf(format, args...))
	}
	var recovered time.Time
	ctx := context.Background()
	for ; w.now.Before(end) && len(problems) == 0; w.now = w.now.Add(simStep) {
		w.applyFaults(faults, cfg.lease)
		w.replicate()
		w.write()
		if by := w.acknowledge(problem); by != "" && recovered.IsZero() && !w.now.Before(healed) {
			recovered = w.now
		}
		w.settle()
		for _, n := range w.nodes {
			if n.down() || w.now.Before(n.nextTurn) {
				continue
			}
			n.h.turn(ctx)
			n.nextTurn = w.now.Add(n.h.t.tick + time.Duration(rng.Int64N(int64(simStep))))
		}
	}
	if len(problems) == 0 {
		if recovered.IsZero() || recovered.Sub(healed) > simRecoverBound(cfg.lease) {
			problem("no write acknowledged within %s of the faults healing", simRecoverBound(cfg.lease))
		}
		w.checkFinal(cfg, problem)
	}
	return w, faults, problems
}

// applyFaults starts and ends the faults due now; every fault ends by
// healed.
func (w *simWorld) applyFaults(faults []simFault, lease time.Duration) {
	for _, n := range w.nodes {
		if n.crashed || n.paused || n.suspended || n.apiCut || n.answersLost {
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
		n.apiCut, n.answersLost, n.suspended = false, false, false
		clear(w.cut[n.name])
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
		case "crash":
			crash[n] = true
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
			w.logf(n.name, "fault: restarted")
			n.crashed = false
			n.restart(lease)
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
		n.restart(lease)
		n.nextTurn = w.now
	} else {
		n.pg.stop()
	}
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

// replicate streams every primary's new WAL to its streaming replicas.
func (w *simWorld) replicate() {
	for _, n := range w.nodes {
		if n.pg.role == asReplica && n.pg.upstream != "" && n.pg.streamable() {
			up := w.node(n.pg.upstream)
			n.pg.wal = append(n.pg.wal, up.pg.wal[len(n.pg.wal):]...)
			n.pg.timeline = up.pg.timeline
		}
	}
}

// write is a client's commit on every server that runs as a primary: the
// WAL takes it at once; it waits for the fence's confirmation.
func (w *simWorld) write() {
	for _, n := range w.nodes {
		if n.pg.role == asPrimary {
			w.writes++
			n.pg.wal = append(n.pg.wal, simEntry{write: w.writes})
			w.pending[n.name] = append(w.pending[n.name], len(n.pg.wal))
		}
	}
}

// acknowledge confirms the waiting commits the way the fence's standby
// does (fence.go, witness): only while the fence is open on the
// instance's clock, the instance manager running, and with a synchronous
// quorum as far as enough members flushed (quorumPosition). It checks
// every acknowledgement against the Lease's holder of record, and returns
// who acknowledged.
func (w *simWorld) acknowledge(problem func(string, ...any)) string {
	var by []string
	for _, n := range w.nodes {
		waiting := w.pending[n.name]
		if len(waiting) == 0 || n.down() || n.pg.role != asPrimary || !n.h.fence.open() {
			continue
		}
		upto := uint64(len(n.pg.wal))
		if q := n.h.fence.quorumNow(); q.Synchronous > 0 {
			var flushed []uint64
			for _, name := range n.h.c.members(q.Instances) {
				if r := w.node(name); r != nil && r.pg.role == asReplica && r.pg.upstream == n.name && r.pg.streamable() {
					flushed = append(flushed, uint64(len(r.pg.wal)))
				}
			}
			slices.SortFunc(flushed, func(a, b uint64) int { return int(b) - int(a) })
			upto = quorumPosition(q, flushed, upto)
		}
		i := 0
		for ; i < len(waiting) && uint64(waiting[i]) <= upto; i++ {
			write := n.pg.wal[waiting[i]-1].write
			w.acked[write] = simAck{at: w.now, by: n.name}
		}
		w.pending[n.name] = waiting[i:]
		if i > 0 {
			by = append(by, n.name)
			w.ackedAt = append(w.ackedAt, w.now)
			if holder := w.holderOfRecord(); holder != n.name {
				problem("%s acknowledged a write while the Lease's holder of record is %q", n.name, holder)
			}
		}
	}
	if len(by) > 1 {
		problem("two instances acknowledged writes in one step: %v", by)
	}
	if len(by) == 0 {
		return ""
	}
	return by[0]
}

// settle records how far each member's WAL goes while writes are
// acknowledged, and for two steps after the last (replication's lag).
func (w *simWorld) settle() {
	if len(w.ackedAt) == 0 || w.now.Sub(w.ackedAt[len(w.ackedAt)-1]) > 2*simStep {
		return
	}
	for _, n := range w.nodes {
		n.settled = len(n.pg.wal)
	}
	w.settledAt = w.now
}

func (w *simWorld) holderOfRecord() string {
	if len(w.takes) == 0 {
		return ""
	}
	return w.takes[len(w.takes)-1].holder
}

// holds tells whether write is in n's WAL.
func (n *simNode) holds(write int) bool {
	return slices.ContainsFunc(n.pg.wal, func(e simEntry) bool { return e.write == write })
}

// checkFinal: every acknowledged write is in the final primary's
// history, unless (asynchronous) no healthy member held it at a failover.
func (w *simWorld) checkFinal(cfg simConfig, problem func(string, ...any)) {
	holder := w.node(holderOfRecordName(w))
	if holder == nil || holder.pg.role != asPrimary {
		problem("no primary at the end (Lease holder %q)", holderOfRecordName(w))
		return
	}
	for _, write := range slices.Sorted(maps.Keys(w.acked)) {
		ack := w.acked[write]
		if holder.holds(write) {
			continue
		}
		if cfg.quorum.Required {
			problem("acknowledged write %d (by %s at %.3fs) is not in the final primary %s's history", write, ack.by, ack.at.Sub(simEpoch).Seconds(), holder.name)
			continue
		}
		// Asynchronous: lost only if, at the failover that dropped it, a
		// member healthy through the election held it.
		for _, take := range w.takes {
			if !take.at.After(ack.at) || take.holder == ack.by || take.holder == "" {
				continue
			}
			for _, name := range slices.Sorted(maps.Keys(take.healthy)) {
				if name != ack.by && name != take.holder && slices.Contains(take.healthy[name], simEntry{write}) {
					problem("acknowledged write %d (by %s at %.3fs) lost: %s held it, healthy, when %s took the Lease at %.3fs",
						write, ack.by, ack.at.Sub(simEpoch).Seconds(), name, take.holder, take.at.Sub(simEpoch).Seconds())
					return
				}
			}
			break
		}
	}
}

func holderOfRecordName(w *simWorld) string { return holderOf(w.lease) }

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
}

// at is a fault of a fixed schedule, in seconds from the start.
func at(from, until float64, kind, a, b string) simFault {
	second := func(s float64) time.Time { return simEpoch.Add(time.Duration(s * float64(time.Second))) }
	return simFault{at: second(from), until: second(until), kind: kind, a: a, b: b}
}

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

// longestGap is the longest time between two acknowledgements from from
// to until.
func (w *simWorld) longestGap(from, until time.Time) time.Duration {
	longest, last := time.Duration(0), from
	for _, t := range w.ackedAt {
		if t.Before(from) || t.After(until) {
			continue
		}
		longest, last = max(longest, t.Sub(last)), t
	}
	if w.now.Before(until) {
		until = w.now
	}
	return max(longest, until.Sub(last))
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

// simFailoverBound is the longest a lost primary may take to be replaced
// by one that acknowledges writes: the Lease (L, from the last renewal the
// replicas saw), a turn to see it expired, the election's patience for a
// ready peer (two turns), and the promotion's turn: L + 3L/5. The
// simulator reads the Lease once a turn; the instance manager also wakes
// at the expiry (awaitTurn), so it is faster by up to a turn.
func simFailoverBound(lease time.Duration) time.Duration { return lease + 3*lease/5 }

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
