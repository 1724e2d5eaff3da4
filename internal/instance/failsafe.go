package instance

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"example.com/myoperator/internal/contract"
)

// Failsafe: a primary that cannot reach the API server keeps acknowledging
// commits for as long as every other member of the MyDatabase promises,
// over the pod network, not to take the Lease.
//
// The Lease alone makes the API server a hard dependency for writes: a
// primary that cannot renew closes its fence 3L/5 after its last renewal,
// even when every database pod is healthy and reaches every other. With
// failsafe, a primary whose renewal fails for any reason but a lost race
// asks each member of its failsafe set (failsafeSet, written in the Lease
// with every renewal) for a promise, at t0 on its own clock. A member
// grants it only while it takes the requester for the Lease's holder and
// is not itself taking the Lease; it then refuses to take the Lease for L
// (the holder's Lease duration) from when it granted, on its own clock:
// until t_m + L, with t_m >= t0. It still stands: its candidacy, marked
// promised, keeps a less advanced member from winning. When enough
// members granted to make any election impossible (promisesNeeded), the
// primary opens its fence until t0 + 3L/5, as a renewal at t0 would: the
// same argument as the Lease's (timing), with the promises in place of
// the API server's conditional update. Too few end the round: the fence
// then closes at its deadline as before. An instance outside the set is
// never asked, and never stands (decide). So:
//   - the API server down for everyone, or for the primary only: writes go
//     on, no election, no new timeline;
//   - the primary cut off from the API server and from members it needs:
//     fenced within 3L/5 of its last renewal or round, as without
//     failsafe, and the most advanced member wins the election.
//
// The channel is HTTP on the metrics port, each message authenticated by
// an HMAC keyed by the replication client key, which only this
// MyDatabase's pods mount; a response answers the request's nonce, so an
// old grant cannot be replayed. A request names the member it asks and the
// holder's wall clock when it asked, and a member grants it only within a
// Lease duration of its own clock (promiseWindow): a request captured on
// the pod network and replayed extends a promise by at most one Lease
// duration past the holder's last request, never indefinitely.

// failsafePath is the endpoint on the metrics server.
const failsafePath = "/failsafe"

// failsafeHeader carries a message's HMAC.
const failsafeHeader = "X-Mydatabase-Failsafe"

// promiseRequest is a primary's request for a promise.
type promiseRequest struct {
	Holder string `json:"holder"`
	// Member is the member asked: the request is good for it alone.
	Member string `json:"member"`
	// Sent is the holder's wall clock when it asked.
	Sent  time.Time `json:"sent"`
	Nonce string    `json:"nonce"`
}

// stale says why a member, at its own wall clock now, with the Lease
// duration d, must not consider req: addressed to another member, or sent
// more than d from now (a replay, a clock d apart, or an instance manager
// older than these fields, whose requests have neither); "" when it may.
func (req promiseRequest) stale(member string, now time.Time, d time.Duration) string {
	switch {
	case req.Member != member:
		return fmt.Sprintf("the request is addressed to %q", req.Member)
	case req.Sent.Before(now.Add(-d)) || req.Sent.After(now.Add(d)):
		return fmt.Sprintf("the request was sent at %s, more than the Lease duration (%s) from this member's clock (%s): "+
			"a replay, or clocks that far apart", req.Sent.Format(time.RFC3339Nano), d, now.Format(time.RFC3339Nano))
	}
	return ""
}

// promiseResponse is a member's answer.
type promiseResponse struct {
	Member  string `json:"member"`
	Nonce   string `json:"nonce"`
	Granted bool   `json:"granted"`
	Reason  string `json:"reason,omitempty"`
}

// failsafe is a member's side: the promise it gave, if any.
type failsafe struct {
	mu     sync.Mutex
	now    func() time.Time
	me     string
	holder string // the Lease's holder as this instance last saw it
	// until: the promise not to take the Lease ends then.
	until  time.Time
	taking bool // this instance is taking the Lease
	// uncertain: a take's answer was lost, so it may have succeeded:
	// no promise until the Lease is read again.
	uncertain bool
}

func newFailsafe(me string, now clock) *failsafe { return &failsafe{me: me, now: now} }

// observe records the holder of the Lease this instance last read.
func (f *failsafe) observe(holder string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holder, f.uncertain = holder, false
}

// grant gives holder the promise for d, if this instance takes it for the
// Lease's holder and is not taking the Lease itself.
func (f *failsafe) grant(holder string, d time.Duration) (bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case holder == f.me:
		return false, "that is this instance"
	case f.taking:
		return false, "this instance is taking the Lease"
	case f.uncertain:
		return false, "this instance may hold the Lease (its take was not answered)"
	case f.holder != holder:
		return false, fmt.Sprintf("the Lease's holder is %q here", f.holder)
	}
	if until := f.now().Add(d); until.After(f.until) {
		f.until = until
	}
	return true, ""
}

// promised tells whether a promise holds now.
func (f *failsafe) promised() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now().Before(f.until)
}

// left is how long the promise still holds.
func (f *failsafe) left() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return max(0, f.until.Sub(f.now()))
}

// promise makes a promise hold for d more, as one given before this
// process re-executed (reexec.go).
func (f *failsafe) promise(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if until := f.now().Add(d); d > 0 && until.After(f.until) {
		f.until = until
	}
}

// beginTake tells whether this instance may take the Lease now (no
// promise holds), and if so refuses promises until endTake.
func (f *failsafe) beginTake() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.now().Before(f.until) {
		return false
	}
	f.taking = true
	return true
}

// endTake ends a take; took: this instance holds the Lease now; unknown:
// the take may have succeeded (its answer was lost), and no promise is
// given until the Lease is read again (observe).
func (f *failsafe) endTake(took, unknown bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.taking, f.uncertain = false, unknown
	if took {
		f.holder = f.me
	}
}

// keepHold renews the Lease, or, when the API server does not renew it,
// holds it on the promises of every member (failsafe.go). While the API
// server is away, the promises are asked first: a renewal that hangs for
// its timeout must not let the fence close.
func (h *ha) keepHold(ctx context.Context, s situation, timeline int64) error {
	if !h.failsafeSince.IsZero() {
		h.holdByPromises(ctx, s)
	}
	if h.since(h.streamingAt) >= peersEvery {
		// Who streams, for the set the renewal writes: every peersEvery
		// is enough, since one that streams before it is written is only
		// kept from standing (an outsider), never unbound.
		h.streamingSeen, _ = h.db.streaming(ctx)
		h.streamingAt = h.now()
	}
	h.leases.failsafeSet = h.failsafeSet(s.lease, h.streamingSeen)
	start, err := h.leases.renew(ctx, timeline)
	switch {
	case err == nil:
		if !h.failsafeSince.IsZero() {
			h.log("the API server renewed the Lease again, after %s on the members' promises", h.since(h.failsafeSince).Round(time.Millisecond))
			h.failsafeSince = time.Time{}
		}
		h.renewed = start
		h.fence.extend(start, h.t.deadline)
		h.readPeers(ctx)
		return nil
	case errors.Is(err, errLostRace), errors.Is(err, errNotHolder):
		h.fence.close()
		return err
	case h.failsafeSince.IsZero():
		if h.holdByPromises(ctx, s) {
			h.log("the API server does not renew the Lease (%v): holding it on the promises of every member (failsafe)", err)
			h.failsafeSince = h.now()
			return nil
		}
		return err
	}
	h.logOnce(fmt.Errorf("renewing the Lease: %w", err))
	return nil
}

// holdByPromises asks every member, and every other instance that streams
// from this primary, for the promise not to take the Lease; when enough
// grant it to make any election impossible (promisesNeeded), the fence
// stays open as after a renewal at the round's start.
func (h *ha) holdByPromises(ctx context.Context, s situation) bool {
	start := h.now()
	if s.lease.quorum.Instances == 0 {
		h.logOnce(errors.New("failsafe: the Lease names no quorum, so not which members to ask: no round"))
		return false
	}
	streaming, err := h.db.streaming(ctx)
	if err != nil {
		h.logOnce(fmt.Errorf("failsafe: %w", err))
		return false
	}
	// Every member the last renewal wrote as the set, and any other that
	// streams now: only promises bind.
	members := h.failsafeSet(s.lease, streaming)
	for _, name := range s.lease.failsafeSet {
		if name != h.c.PodName && !slices.Contains(members, name) {
			members = append(members, name)
		}
	}
	granted, err := h.net.askAll(ctx, h.c.PodName, members, h.promiseAddresses(streaming), h.t.tick)
	if need := promisesNeeded(s.lease.quorum, len(members)); granted < need {
		h.logOnce(fmt.Errorf("failsafe: %d of %v promised, %d needed to make an election impossible: %w", granted, members, need, err))
		return false
	}
	h.logOnce(err) // the members that did not promise, while enough did
	h.renewed = start
	h.fence.extend(start, h.t.deadline)
	return true
}

// promisesNeeded is how many of members promises a round needs so that no
// election can succeed while the primary holds on them.
//   - Asynchronous (or a quorum that is only preferred): one candidate can
//     win alone, so every member must promise.
//   - A required quorum of S: an election needs E = Instances - S
//     candidacies that are not promised (a promised candidacy stands, but
//     counts for no one's electors: elect). With P of the M members
//     promised, M - P are left: an election is impossible when
//     M - P < E, that is P >= M - E + 1 (with M = Instances - 1, P >= S).
//     So with 3 instances and a quorum of 1, one promise is enough, and
//     a replica's restart costs no write.
//   - A sole member after a major upgrade elects alone: every member.
func promisesNeeded(q contract.Quorum, members int) int {
	if !q.Required || q.Synchronous == 0 || q.Sole != "" {
		return members
	}
	return max(0, min(members, members-q.Electors()+1))
}

// failsafeSet is who a round asks: the instances of the quorum, and any
// other instance that streams from this primary (a scale-up it could not
// read). Each renewal writes it into the Lease (failsafeSetAnnotation).
func (h *ha) failsafeSet(l leaseView, streaming map[string]string) []string {
	members := h.c.members(l.quorum.Instances)
	for _, name := range slices.Sorted(maps.Keys(streaming)) {
		if !slices.Contains(members, name) {
			members = append(members, name)
		}
	}
	return members
}

// promiseAddresses are where each member may be asked: the address its
// report gave when the peers were last read and, for a member streaming
// from this primary, the host it streams from with the reported port (or
// this instance's: every pod listens on the same one).
// The reports are read every peersEvery, so a member whose pod was
// replaced just before the API server went away may have reported no
// address yet, or the old pod's; it is found where it streams from. Any
// address is safe to ask: only a member signs a grant in its own name.
func (h *ha) promiseAddresses(streaming map[string]string) map[string][]string {
	_, ownPort, _ := net.SplitHostPort(h.c.failsafeAddress())
	out := map[string][]string{}
	for name, address := range h.peers {
		out[name] = []string{address}
	}
	for name, host := range streaming {
		if host == "" {
			continue
		}
		port := ownPort
		if reported := h.peers[name]; reported != "" {
			_, port, _ = net.SplitHostPort(reported)
		}
		if port == "" {
			continue
		}
		if address := net.JoinHostPort(host, port); !slices.Contains(out[name], address) {
			out[name] = append(out[name], address)
		}
	}
	return out
}

// readPeers reads the members' failsafe addresses from their reports,
// every peersEvery while the API server answers, and every peersRetry
// while a member of the failsafe set has none yet (a new replica, a
// replaced pod that has not reported): a round could not ask it.
func (h *ha) readPeers(ctx context.Context) {
	every := peersEvery
	if slices.ContainsFunc(h.leases.failsafeSet, func(name string) bool { return h.peers[name] == "" }) {
		every = peersRetry
	}
	if !h.peersReadAt.IsZero() && h.since(h.peersReadAt) < every {
		return
	}
	peers, err := h.api.peers(ctx)
	if err != nil {
		return
	}
	h.peers, h.peersReadAt = map[string]string{}, h.now()
	for _, p := range peers {
		if p.report != nil && p.report.Failsafe != "" {
			h.peers[p.name] = p.report.Failsafe
		}
	}
}

// peersEvery is how often a primary reads its members' failsafe
// addresses; peersRetry how often while one of them is unknown, which
// bounds the pod lists while a member stays down.
const (
	peersEvery = 10 * time.Second
	peersRetry = time.Second
)
