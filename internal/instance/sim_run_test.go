package instance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"example.com/myoperator/internal/contract"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// newSimWorld makes a MyDatabase of cfg.instances instances.
func newSimWorld(cfg simConfig) *simWorld {
	w := &simWorld{now: simEpoch, report: map[string]*contract.Report{}, cut: map[string]map[string]bool{}, lossy: map[string]map[string]bool{},
		quorum: cfg.quorum, acked: map[int]simAck{}, pending: map[string][]int{}, rv: 1}
	w.quorum.Instances = int32(cfg.instances - cfg.joins)
	if cfg.scaling {
		w.quorum.Instances--
	}
	w.window = 2 * cfg.maxLease()
	w.lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "db-primary", ResourceVersion: "1",
		Annotations: map[string]string{contract.AnnotationQuorum: w.quorum.String()}}}
	for i := range cfg.instances {
		n := &simNode{w: w, name: "db-" + strconv.Itoa(i), member: true, lease: cfg.lease}
		n.pg = &simServer{n: n}
		n.nextTurn = simEpoch.Add(time.Duration(i) * cfg.lease / 15)
		w.nodes = append(w.nodes, n)
		w.cut[n.name], w.lossy[n.name] = map[string]bool{}, map[string]bool{}
		n.restart()
	}
	if cfg.scaling {
		w.scaling = w.nodes[len(w.nodes)-1]
		w.scaling.crashed, w.scaling.member = true, false // not made yet
	}
	return w
}

// restart gives the instance a new HA loop: a new process, nothing of the
// old one's memory, with its pod's Lease duration.
func (n *simNode) restart() {
	c := Config{PodName: n.name, BootstrapPod: "db-0", LeaseName: "db-primary", LeaseDuration: n.lease}
	log := func(format string, args ...any) { n.w.logf(n.name, format, args...) }
	n.h = newHA(c, log, n.now, simAPI{n}, simNet{n}, n.pg, n.pg)
}

// runSim runs one schedule and returns what the checkers found.
func runSim(seed uint64, cfg simConfig) (*simWorld, []simFault, []string) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	w := newSimWorld(cfg)
	w.rng = rng
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
		w.land()
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
		if recovered.IsZero() || recovered.Sub(healed) > simRecoverBound(cfg.maxLease()) {
			problem("no write acknowledged within %s of the faults healing", simRecoverBound(cfg.maxLease()))
		}
		w.checkFinal(cfg, problem)
	}
	return w, faults, problems
}

// replicate streams every primary's new WAL to its streaming replicas.
func (w *simWorld) replicate() {
	for _, n := range w.nodes {
		if n.pg.role == asReplica && n.pg.upstream != "" && n.pg.streamable() && !w.drops(n.pg.upstream, n.name) {
			up := w.node(n.pg.upstream)
			n.pg.wal = append(n.pg.wal, up.pg.wal[len(n.pg.wal):]...)
			n.pg.history, n.pg.timeline = up.pg.history, up.pg.timeline
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
