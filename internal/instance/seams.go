package instance

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"example.com/myoperator/internal/contract"
)

// The HA loop (ha.go) reaches the world through four seams: the clock,
// the API server, the pod network and the local PostgreSQL server. The
// instance manager plugs in the real ones (the monotonic clock, kube.go,
// promisenet.go, pgServer in server.go); the simulator (sim_test.go)
// plugs in models of them and runs the same loop.

// clock is the instance's monotonic clock: every deadline of the loop,
// the fence and the failsafe is measured on it (timing).
type clock func() time.Time

// apiServer is what the loop asks of the API server: the primary Lease,
// and the reports of the other instances.
type apiServer interface {
	// getLease reads the Lease; updateLease writes it if its
	// resourceVersion is still the one read, and fails with a conflict
	// otherwise.
	getLease(ctx context.Context) (*coordinationv1.Lease, error)
	updateLease(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error)
	// peers lists the other instances and their reports.
	peers(ctx context.Context) ([]peer, error)
}

// promiseNet asks members for failsafe promises over the pod network
// (failsafe.go): every member at its addresses, all within timeout. It
// returns how many granted, and why the others did not.
type promiseNet interface {
	askAll(ctx context.Context, holder string, members []string, addresses map[string][]string, timeout time.Duration) (granted int, err error)
}

// database is the local PostgreSQL server as the loop drives it. Each
// method carries out one step the loop decided; none decides.
type database interface {
	runningAs() serverRole
	// streamsFrom is the primary a running replica streams from.
	streamsFrom() string
	// writable: runs as a primary that takes writes (not a replica
	// MyDatabase's designated primary).
	writable() bool
	hasData() bool
	observe(ctx context.Context) (serverState, error)
	// initialise makes a new MyDatabase's data (initdb, or a restore).
	initialise(ctx context.Context) error
	start(ctx context.Context, role serverRole, upstream string) error
	stop()
	// promoteServer ends the replay and starts a new timeline;
	// promoted then makes the server the primary in the manager's eyes
	// (the fence's standby runs) and finishes the promotion.
	promoteServer(ctx context.Context) error
	promoted(ctx context.Context) error
	// follow restarts the server as a replica of holder, rewound or
	// cloned first as its data requires; reclone clones the primary it
	// follows again.
	follow(ctx context.Context, holder string, ready bool) error
	reclone(ctx context.Context) error
	// reserveTimelines makes the next promotion pick a timeline above
	// newest.
	reserveTimelines(mine, newest int64) error
	// streaming lists the instances that stream from this primary, each
	// with the host it streams from.
	streaming(ctx context.Context) (map[string]string, error)
	// handOver carries out a switchover to target; stopped: the server
	// was stopped (the Lease is then the target's, unless err).
	handOver(ctx context.Context, target string) (stopped bool, err error)
}

// sideConcerns are what the loop leaves to others, each given what the
// turn observed: reports, and everything that is not the HA loop
// (replica MyDatabases, stranded replicas, passwords, declared objects,
// slots, certificates).
type sideConcerns interface {
	// observed completes the situation with what the side concerns
	// observe (stranded, demote, tokenReached).
	observed(ctx context.Context, s *situation, obs serverState)
	// acted runs the side concerns after the action.
	acted(ctx context.Context, a action, s situation, obs serverState)
	// report publishes this instance's report: candidate when it
	// stands; seen is what the server answered, nil to ask it.
	report(ctx context.Context, candidate *contract.Candidacy, seen *serverState)
	// replica MyDatabases (replica.go): the holder's data follows the
	// source; its demotion, its run as the designated primary, and its
	// promotion in place.
	isDesignated() bool
	followsSource(l leaseView) bool
	standby() bool
	demoteData(ctx context.Context) error
	runDesignated(ctx context.Context) error
	promoteReplica(ctx context.Context, mine, newest int64) error
	// mayInitialise is false while a failed restore waits to be tried
	// again.
	mayInitialise() bool
}
