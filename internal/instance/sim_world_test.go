package instance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// The simulator's models of the world the HA loop runs in (seams.go):
// the API server, the pod network and PostgreSQL. The loop itself, ha,
// with its decide, elect, fence, failsafe and leases, is the real one.
// Everything here is a plain function of the world's state and its
// random source, drawn in one goroutine: a seed replays a run exactly.

// simEntry is one commit in a WAL: the write it holds.
type simEntry struct{ write int }

// simServer is one instance's PostgreSQL: its data (a WAL of writes and
// a timeline), and the process, running as a primary or a replica.
type simServer struct {
	n        *simNode
	data     bool
	wal      []simEntry
	timeline int64
	// history is where each timeline of the WAL began, as a timeline
	// history file says: a replica's timeline is that of the WAL it holds
	// (timelineAt), as the instance manager reports it (replicaTimeline).
	history  []simSwitch
	reserved int64 // reserveTimelines: the newest timeline another used
	role     serverRole
	upstream string // the instance a replica streams from
	follows  string // the primary it follows (m.following)
}

// simSwitch: timeline began after the first at entries of the WAL.
type simSwitch struct {
	timeline int64
	at       int
}

// timelineAt is the timeline of a WAL of n entries along history: the
// last one begun before its end (one that ends at a switch point is still
// on the parent's).
func timelineAt(history []simSwitch, n int) int64 {
	t := int64(1)
	for _, s := range history {
		if s.at < n {
			t = s.timeline
		}
	}
	return t
}

// simNode is one instance: its server, its HA loop, and its faults.
type simNode struct {
	w      *simWorld
	name   string
	h      *ha
	pg     *simServer
	member bool // an instance of spec.replicas (scale-down removes it)
	// Faults: the instance manager paused (SIGSTOP: its clock runs, it
	// neither turns nor answers, its fence confirms nothing), crashed
	// (the container down: the server with it, memory lost at restart),
	// suspended (paused with its monotonic clock stopped: a VM suspend),
	// cut from the API server, or with the API server's answers lost
	// after the write was made.
	paused, crashed, suspended, apiCut, answersLost bool
	// slow: the API server answers its requests late, some after the
	// request's timeout, and a write it gave up on may land later
	// (simWorld.late).
	slow         bool
	suspendedFor time.Duration // the clock's lag behind real time
	nextTurn     time.Time
	unhealthyAt  time.Time // the last moment it had a fault
	rewoundAt    time.Time // its WAL last cut back (a rewind or a clone)
	// settled is how long its WAL was when the writes last acknowledged
	// had had time to reach it (simWorld.settle).
	settled int
	// lease is the Lease duration its pod runs with; relaunch: its
	// restart takes the other one (a "relaunch" fault).
	lease    time.Duration
	relaunch bool
}

func (n *simNode) now() time.Time { return n.w.now.Add(-n.suspendedFor) }

func (n *simNode) down() bool { return n.paused || n.crashed || n.suspended }

// simWorld is the whole MyDatabase and its clients.
type simWorld struct {
	now    time.Time
	nodes  []*simNode
	lease  *coordinationv1.Lease
	rv     int
	report map[string]*contract.Report
	// cut[a][b]: nothing a sends reaches b; lossy[a][b]: half of what
	// a sends b is lost, the rest delayed (a stream moves on half the
	// steps).
	cut, lossy map[string]map[string]bool
	// late are writes to the Lease on their way to the API server, their
	// sender having given up on them (slow); rng draws which requests a
	// fault hits, from the schedule's seed.
	late    []simLateWrite
	rng     *rand.Rand
	quorum  contract.Quorum
	window  time.Duration // how long a member must have been healthy to count at a failover
	scaling *simNode      // the instance that exists only while scaled up
	// The history the checkers read.
	takes  []simTake
	writes int
	acked  map[int]simAck
	// settledAt is when the members' WALs were last recorded (settled),
	// two steps after the last acknowledgement: what reached a member
	// later (a link back up to the deposed primary) came after the
	// election could see it.
	settledAt time.Time
	ackedAt   []time.Time      // the steps in which a write was acknowledged
	pending   map[string][]int // writes waiting for the fence, by primary
	trace     []string
}

// simTake is a change of the Lease's holder, with the WAL of every
// member that had been healthy for the window before it, as far as it
// went when the writes last acknowledged before had had time to reach it
// (the asynchronous loss check).
type simTake struct {
	at      time.Time
	holder  string
	healthy map[string][]simEntry
}

// simLateWrite is a Lease update that reaches the API server at, after
// its sender's request timed out: applied then if the Lease's
// resourceVersion is still the one it was made from.
type simLateWrite struct {
	at    time.Time
	by    string
	lease *coordinationv1.Lease
}

type simAck struct {
	at time.Time
	by string
}

func (w *simWorld) node(name string) *simNode {
	for _, n := range w.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

func (w *simWorld) reaches(a, b string) bool { return !w.cut[a][b] }

// drops: a message from a to b is lost on a lossy link (one in two).
func (w *simWorld) drops(a, b string) bool { return w.lossy[a][b] && w.rng.IntN(2) == 0 }

// link: a TCP connection between a and b works (both ways).
func (w *simWorld) link(a, b string) bool { return w.reaches(a, b) && w.reaches(b, a) }

func (w *simWorld) logf(who, format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf("%8.3fs %-5s %s", w.now.Sub(simEpoch).Seconds(), who, fmt.Sprintf(format, args...)))
}

var simEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var errSimUnreachable = errors.New("sim: unreachable (timeout)")

// The API server, as each instance reaches it.

type simAPI struct{ n *simNode }

func (a simAPI) reachable() error {
	if a.n.apiCut || a.n.down() {
		return errSimUnreachable
	}
	return nil
}

// timedOut: a request of a slow instance's that it gives up on (one in
// three).
func (a simAPI) timedOut() bool { return a.n.slow && a.n.w.rng.IntN(3) == 0 }

func (a simAPI) getLease(context.Context) (*coordinationv1.Lease, error) {
	if err := a.reachable(); err != nil {
		return nil, err
	}
	if a.timedOut() {
		return nil, errSimUnreachable
	}
	return a.n.w.lease.DeepCopy(), nil
}

func (a simAPI) updateLease(_ context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if err := a.reachable(); err != nil {
		return nil, err
	}
	w := a.n.w
	if a.timedOut() {
		// Given up on by its sender, the write is still on its way: it
		// lands within a Lease duration, if nothing changed the Lease
		// meanwhile.
		delay := simStep + time.Duration(w.rng.Int64N(int64(a.n.lease)))
		w.late = append(w.late, simLateWrite{at: w.now.Add(delay), by: a.n.name, lease: lease.DeepCopy()})
		return nil, errSimUnreachable
	}
	if lease.ResourceVersion != w.lease.ResourceVersion {
		return nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, lease.Name, errors.New("the object has been modified"))
	}
	w.store(lease)
	if a.n.answersLost {
		return nil, errSimUnreachable // written, but the answer never came
	}
	return w.lease.DeepCopy(), nil
}

// land applies the late writes due now, each only if the Lease is still
// the version it was made from.
func (w *simWorld) land() {
	var still []simLateWrite
	for _, lw := range w.late {
		switch {
		case w.now.Before(lw.at):
			still = append(still, lw)
		case lw.lease.ResourceVersion == w.lease.ResourceVersion:
			w.logf("api", "a write of %s's it gave up on lands", lw.by)
			w.store(lw.lease)
		default:
			w.logf("api", "a write of %s's it gave up on lands, and conflicts", lw.by)
		}
	}
	w.late = still
}

// store makes lease the API server's Lease, recording a change of holder
// with what every healthy member held (simTake).
func (w *simWorld) store(lease *coordinationv1.Lease) {
	if before, after := holderOf(w.lease), holderOf(lease); before != after {
		take := simTake{at: w.now, holder: after, healthy: map[string][]simEntry{}}
		for _, n := range w.nodes {
			if n.unhealthyAt.Before(w.now.Add(-w.window)) && !n.rewoundAt.After(w.settledAt) {
				take.healthy[n.name] = slices.Clone(n.pg.wal[:min(n.settled, len(n.pg.wal))])
			}
		}
		w.takes = append(w.takes, take)
		w.logf("api", "Lease %q -> %q", before, after)
	}
	w.rv++
	w.lease = lease.DeepCopy()
	w.lease.ResourceVersion = strconv.Itoa(w.rv)
}

func (a simAPI) peers(context.Context) ([]peer, error) {
	if err := a.reachable(); err != nil {
		return nil, err
	}
	var out []peer
	for _, n := range a.n.w.nodes {
		if n != a.n {
			out = append(out, peer{name: n.name, report: a.n.w.report[n.name]})
		}
	}
	return out, nil
}

// The pod network, for failsafe promises: the real grant, on the member.

type simNet struct{ n *simNode }

func (s simNet) askAll(_ context.Context, holder string, members []string, addresses map[string][]string, _ time.Duration) (int, error) {
	var errs []error
	granted := 0
	for _, name := range members {
		m := s.n.w.node(name)
		switch {
		case len(addresses[name]) == 0:
			errs = append(errs, fmt.Errorf("%s: its failsafe address is not known", name))
		case m == nil || m.down() || !s.n.w.reaches(s.n.name, name):
			errs = append(errs, fmt.Errorf("%s: %w", name, errSimUnreachable))
		case s.n.w.drops(s.n.name, name):
			errs = append(errs, fmt.Errorf("%s: the request was lost", name))
		default:
			ok, why := m.h.failsafe.grant(holder, m.h.leases.promiseFor())
			switch {
			case !s.n.w.reaches(name, s.n.name) || s.n.w.drops(name, s.n.name):
				errs = append(errs, fmt.Errorf("%s: the answer was lost", name))
			case !ok:
				errs = append(errs, fmt.Errorf("%s refused: %s", name, why))
			default:
				granted++
			}
		}
	}
	return granted, errors.Join(errs...)
}

// PostgreSQL: the loop's database and side concerns.

func (p *simServer) runningAs() serverRole { return p.role }
func (p *simServer) streamsFrom() string   { return p.follows }
func (p *simServer) writable() bool        { return p.role == asPrimary }
func (p *simServer) hasData() bool         { return p.data }

func (p *simServer) observe(context.Context) (serverState, error) {
	if p.role == stopped {
		return serverState{}, errors.New("sim: no server")
	}
	o := serverState{primary: p.role == asPrimary, systemID: "sim", timeline: p.timeline, lsn: uint64(len(p.wal))}
	if p.role == asReplica {
		o.replayed, o.streaming = o.lsn, p.upstream != "" && p.streamable()
	}
	return o, nil
}

func (p *simServer) initialise(context.Context) error {
	p.data, p.wal, p.timeline, p.history = true, nil, 1, nil
	return nil
}

func (p *simServer) start(_ context.Context, role serverRole, upstream string) error {
	p.role, p.upstream, p.follows = role, upstream, ""
	if role == asPrimary {
		p.n.h.fence.setStreaming(true)
	}
	p.n.w.logf(p.n.name, "server started as %v %s", role, upstream)
	return nil
}

func (p *simServer) stop() {
	if p.role != stopped {
		p.n.w.logf(p.n.name, "server stopped")
	}
	p.role, p.upstream, p.follows = stopped, "", ""
	p.n.h.fence.setStreaming(false)
	delete(p.n.w.pending, p.n.name) // waiting sessions fail
}

func (p *simServer) promoteServer(context.Context) error {
	if p.role != asReplica {
		return errors.New("sim: not a replica")
	}
	p.timeline = nextTimeline(p.timeline, p.reserved)
	p.history = append(slices.Clone(p.history), simSwitch{p.timeline, len(p.wal)})
	p.upstream = ""
	return nil
}

func (p *simServer) promoted(context.Context) error {
	p.role, p.follows = asPrimary, ""
	p.n.h.fence.setStreaming(true)
	p.n.w.logf(p.n.name, "promoted to timeline %d at %d", p.timeline, len(p.wal))
	return nil
}

func (p *simServer) reserveTimelines(_, newest int64) error {
	p.reserved = max(p.reserved, newest)
	return nil
}

// follow mirrors manager.follow: the holder's report read, the server
// stopped, the data cloned or rewound to the primary's history, then run
// as its replica.
func (p *simServer) follow(_ context.Context, holder string, ready bool) error {
	if p.role != stopped && !ready {
		return nil
	}
	if err := (simAPI{p.n}).reachable(); err != nil {
		return err
	}
	r := p.n.w.report[holder]
	if r == nil || r.Address == "" || r.Role != databasev1alpha1.RolePrimary {
		return nil
	}
	primary := p.n.w.node(holder)
	p.stop()
	if !p.n.w.link(p.n.name, holder) || primary.pg.role == stopped {
		return fmt.Errorf("sim: the primary %s cannot be reached", holder)
	}
	common := 0
	for common < len(p.wal) && common < len(primary.pg.wal) && p.wal[common] == primary.pg.wal[common] {
		common++
	}
	switch {
	case !p.data:
		p.n.w.logf(p.n.name, "cloned %s", holder)
		p.data, p.wal, p.n.rewoundAt = true, slices.Clone(primary.pg.wal), p.n.w.now
	case common < len(p.wal):
		p.n.w.logf(p.n.name, "rewound from %d to %d to follow %s", len(p.wal), common, holder)
		p.wal, p.n.rewoundAt = p.wal[:common], p.n.w.now
	}
	p.history = primary.pg.history
	p.timeline = timelineAt(p.history, len(p.wal))
	if err := p.start(context.Background(), asReplica, holder); err != nil {
		return err
	}
	p.follows = holder
	return nil
}

func (p *simServer) reclone(context.Context) error { return nil }

func (p *simServer) streaming(context.Context) (map[string]string, error) {
	out := map[string]string{}
	for _, n := range p.n.w.nodes {
		if n != p.n && n.pg.role == asReplica && n.pg.upstream == p.n.name && n.pg.streamable() {
			out[n.name] = n.name
		}
	}
	return out, nil
}

// streamable: this replica can stream from its upstream now: the link
// works, the upstream runs as a primary, and this WAL is a prefix of its.
func (p *simServer) streamable() bool {
	up := p.n.w.node(p.upstream)
	if up == nil || up.pg.role != asPrimary || !p.n.w.link(p.n.name, up.name) {
		return false
	}
	return len(p.wal) <= len(up.pg.wal) && slices.Equal(p.wal, up.pg.wal[:len(p.wal)])
}

// handOver mirrors pgServer.handOver: only once target streams from this
// primary (the real one also waits for it to be close behind; here a
// stream keeps it so), a fast shutdown: waiting sessions fail, a shutdown
// checkpoint ends the WAL, and the WAL up to it goes to every standby
// whose stream works (unless a lossy link loses it), before the server
// exits. Then the Lease goes to
// target with where the WAL ended, through the real leases.handOver.
func (p *simServer) handOver(ctx context.Context, target string) (bool, error) {
	t := p.n.w.node(target)
	if t == nil || t.pg.role != asReplica || t.pg.upstream != p.n.name || !t.pg.streamable() {
		return false, fmt.Errorf("sim: switchover to %s: it does not stream from %s", target, p.n.name)
	}
	end := len(p.wal) // where the shutdown checkpoint starts
	p.wal = append(p.wal, simEntry{})
	for _, n := range p.n.w.nodes {
		// On a lossy link the last of the stream may not arrive: the
		// target must then not promote (decide), and gives the Lease up.
		if n != p.n && n.pg.role == asReplica && n.pg.upstream == p.n.name && n.pg.streamable() && !p.n.w.drops(p.n.name, n.name) {
			n.pg.wal = slices.Clone(p.wal)
		}
	}
	p.stop()
	p.n.w.logf(p.n.name, "switchover to %s: stopped, WAL ends at %d", target, end)
	if err := p.n.h.leases.handOver(ctx, target, uint64(end), nil); err != nil {
		return true, fmt.Errorf("sim: switchover to %s: handing over the Lease: %w", target, err)
	}
	return true, nil
}

func (p *simServer) observed(context.Context, *situation, serverState)     {}
func (p *simServer) acted(context.Context, action, situation, serverState) {}

// report publishes what manager.report does of the fields the loop and
// the elections read.
func (p *simServer) report(ctx context.Context, candidate *contract.Candidacy, _ *serverState) {
	if (simAPI{p.n}).reachable() != nil {
		return
	}
	r := &contract.Report{Address: p.n.name, Failsafe: p.n.name, Candidate: candidate}
	if o, err := p.observe(ctx); err == nil {
		r.Ready, r.Timeline, r.LSN = true, o.timeline, contract.FormatLSN(o.lsn)
		r.Role = databasev1alpha1.RoleReplica
		if o.primary {
			r.Role = databasev1alpha1.RolePrimary
		}
	}
	p.n.w.report[p.n.name] = r
}

func (p *simServer) isDesignated() bool           { return false }
func (p *simServer) followsSource(leaseView) bool { return false }
func (p *simServer) standby() bool                { return false }
func (p *simServer) mayInitialise() bool          { return true }
func (p *simServer) demoteData(context.Context) error {
	return errors.New("sim: no replica MyDatabase")
}
func (p *simServer) runDesignated(context.Context) error {
	return errors.New("sim: no replica MyDatabase")
}
func (p *simServer) promoteReplica(context.Context, int64, int64) error {
	return errors.New("sim: no replica MyDatabase")
}
