package instance

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Failsafe: a primary that cannot reach the API server keeps acknowledging
// commits for as long as every other member of the MyDatabase promises,
// over the pod network, not to take the Lease.
//
// The Lease alone makes the API server a hard dependency for writes: a
// primary that cannot renew closes its fence 3L/5 after its last renewal,
// even when every database pod is healthy and reaches every other. With
// failsafe, a primary whose renewal fails for any reason but a lost race
// asks each member (Config.members) for a promise, at t0 on its own
// clock. A member grants it only while it takes the requester for the
// Lease's holder and is not itself taking the Lease; it then refuses to
// stand or take the Lease for L (the holder's Lease duration) from when
// it granted, on its own clock: until t_m + L, with t_m >= t0. When every
// member granted, the primary opens its fence until t0 + 3L/5, as a
// renewal at t0 would: the same argument as the Lease's (timing), with the
// promises in place of the API server's conditional update. A member the
// primary cannot reach, or that refuses, ends the round: the fence then
// closes at its deadline as before. So:
//   - the API server down for everyone, or for the primary only: writes go
//     on, no election, no new timeline;
//   - the primary cut off from the API server and from a member: fenced
//     within 3L/5 of its last renewal or round, as without failsafe.
//
// The channel is HTTP on the metrics port, each message authenticated by
// an HMAC keyed by the replication client key, which only this
// MyDatabase's pods mount; a response answers the request's nonce, so an
// old grant cannot be replayed.

// failsafePath is the endpoint on the metrics server.
const failsafePath = "/failsafe"

// failsafeHeader carries a message's HMAC.
const failsafeHeader = "X-Mydatabase-Failsafe"

// promiseRequest is a primary's request for a promise.
type promiseRequest struct {
	Holder string `json:"holder"`
	Nonce  string `json:"nonce"`
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
	// until: the promise not to stand or take the Lease ends then.
	until  time.Time
	taking bool // this instance is taking the Lease
}

func newFailsafe(me string) *failsafe { return &failsafe{me: me, now: time.Now} }

// observe records the holder of the Lease this instance last read.
func (f *failsafe) observe(holder string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holder = holder
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

// endTake ends a take; took: this instance holds the Lease now.
func (f *failsafe) endTake(took bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.taking = false
	if took {
		f.holder = f.me
	}
}

// keepHold renews the Lease, or, when the API server does not renew it,
// holds it on the promises of every member (failsafe.go). While the API
// server is away, the promises are asked first: a renewal that hangs for
// its timeout must not let the fence close.
func (m *manager) keepHold(ctx context.Context, s situation, timeline int64) error {
	if !m.failsafeSince.IsZero() {
		m.holdByPromises(ctx, s)
	}
	start, err := m.leases.renew(ctx, timeline)
	switch {
	case err == nil:
		if !m.failsafeSince.IsZero() {
			m.log("the API server renewed the Lease again, after %s on the members' promises", time.Since(m.failsafeSince).Round(time.Millisecond))
			m.failsafeSince = time.Time{}
		}
		m.renewed = start
		m.fence.extend(start, m.t.deadline)
		m.readPeers(ctx)
		return nil
	case errors.Is(err, errLostRace), errors.Is(err, errNotHolder):
		m.fence.close()
		return err
	case m.failsafeSince.IsZero():
		if m.holdByPromises(ctx, s) {
			m.log("the API server does not renew the Lease (%v): holding it on the promises of every member (failsafe)", err)
			m.failsafeSince = time.Now()
			return nil
		}
		return err
	}
	m.logOnce(fmt.Errorf("renewing the Lease: %w", err))
	return nil
}

// holdByPromises asks every member, and every other instance that streams
// from this primary, for the promise not to take the Lease; when all
// grant it, the fence stays open as after a renewal at the round's start.
func (m *manager) holdByPromises(ctx context.Context, s situation) bool {
	start := time.Now()
	members := m.c.members(s.lease.quorum.Instances)
	streaming, err := m.streamingInstances(ctx)
	if err != nil {
		m.logOnce(fmt.Errorf("failsafe: %w", err))
		return false
	}
	for _, name := range slices.Sorted(maps.Keys(streaming)) {
		if !slices.Contains(members, name) {
			members = append(members, name)
		}
	}
	if err := m.askPromises(ctx, members, m.promiseAddresses(streaming), m.t.tick); err != nil {
		m.logOnce(fmt.Errorf("failsafe: not every member promised: %w", err))
		return false
	}
	m.renewed = start
	m.fence.extend(start, m.t.deadline)
	return true
}

// promiseAddresses are where each member may be asked: the address its
// report gave when the peers were last read and, for a member streaming
// from this primary, the host it streams from with the reported port (or
// this instance's: every pod listens on the same one).
// The reports are read every peersEvery, so a member whose pod was
// replaced just before the API server went away may have reported no
// address yet, or the old pod's; it is found where it streams from. Any
// address is safe to ask: only a member signs a grant in its own name.
func (m *manager) promiseAddresses(streaming map[string]string) map[string][]string {
	_, ownPort, _ := net.SplitHostPort(m.c.failsafeAddress())
	out := map[string][]string{}
	for name, address := range m.peers {
		out[name] = []string{address}
	}
	for name, host := range streaming {
		if host == "" {
			continue
		}
		port := ownPort
		if reported := m.peers[name]; reported != "" {
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
// every peersEvery, while the API server answers.
func (m *manager) readPeers(ctx context.Context) {
	if time.Since(m.peersReadAt) < peersEvery {
		return
	}
	peers, err := m.kube.peers(ctx)
	if err != nil {
		return
	}
	m.peers, m.peersReadAt = map[string]string{}, time.Now()
	for _, p := range peers {
		if p.report != nil && p.report.Failsafe != "" {
			m.peers[p.name] = p.report.Failsafe
		}
	}
}

// peersEvery is how often a primary reads its members' failsafe addresses.
const peersEvery = 10 * time.Second

// failsafeKey is the HMAC key: a digest of the replication client key,
// which every instance of the MyDatabase mounts and nothing else does.
func (c Config) failsafeKey() ([]byte, error) {
	pem, err := os.ReadFile(filepath.Join(c.ReplicationTLSDir, "tls.key"))
	if err != nil {
		return nil, fmt.Errorf("the failsafe key: %w", err)
	}
	sum := sha256.Sum256(append([]byte("mydatabase failsafe\x00"), pem...))
	return sum[:], nil
}

func sign(key, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

func verified(key, body []byte, signature string) bool {
	want, err := hex.DecodeString(signature)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	return hmac.Equal(mac.Sum(nil), want)
}

// failsafeHandler answers promise requests with the promise of d, the
// Lease duration.
func (m *manager) failsafeHandler(d func() time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		key, err := m.c.failsafeKey()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 4096))
		if err != nil || !verified(key, body, r.Header.Get(failsafeHeader)) {
			http.Error(w, "not signed by a member", http.StatusForbidden)
			return
		}
		var req promiseRequest
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp := promiseResponse{Member: m.c.PodName, Nonce: req.Nonce}
		resp.Granted, resp.Reason = m.failsafe.grant(req.Holder, d())
		out, _ := json.Marshal(resp) // a promiseResponse always marshals
		w.Header().Set(failsafeHeader, sign(key, out))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	})
}

// failsafeAddress is where the other members reach this instance's
// failsafe endpoint: FAILSAFE_ADDRESS, or the host of ADVERTISE_ADDRESS
// and the port of METRICS_ADDRESS.
func (c Config) failsafeAddress() string {
	if c.FailsafeAddress != "" {
		return c.FailsafeAddress
	}
	host, _, err := net.SplitHostPort(c.AdvertiseAddress)
	_, port, perr := net.SplitHostPort(c.MetricsAddress)
	if err != nil || perr != nil || c.MetricsAddress == "" {
		return ""
	}
	return net.JoinHostPort(host, port)
}

// askPromises asks every member at its addresses (by name) for a
// promise, all at once, within timeout. It returns nil when all granted.
func (m *manager) askPromises(ctx context.Context, members []string, addresses map[string][]string, timeout time.Duration) error {
	key, err := m.c.failsafeKey()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	errs := make(chan error, len(members))
	for _, member := range members {
		go func() { errs <- askMember(ctx, key, m.c.PodName, member, addresses[member]) }()
	}
	var all []error
	for range members {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// askMember asks member at all of its addresses at once and takes the
// first answer: a refusal is an answer, an address where no member
// answers is not. At once, because an address a pod left may hang until
// the round's timeout.
func askMember(ctx context.Context, key []byte, me, member string, addresses []string) error {
	if len(addresses) == 0 {
		return fmt.Errorf("%s: its failsafe address is not known (it has not reported one)", member)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		answered bool
		err      error
	}
	results := make(chan result, len(addresses))
	for _, address := range addresses {
		go func() {
			answered, err := askPromise(ctx, key, me, member, address)
			results <- result{answered, err}
		}()
	}
	var unanswered []error
	for range addresses {
		r := <-results
		if r.answered {
			return r.err
		}
		unanswered = append(unanswered, r.err)
	}
	return errors.Join(unanswered...)
}

// failsafeClient has no proxy and no idle connections kept: a round is a
// few small requests every L/5, and a member's address may move.
var failsafeClient = &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

// askPromise asks member at address; answered: a member answered (granted
// or refused), as opposed to an address where none did.
func askPromise(ctx context.Context, key []byte, me, member, address string) (answered bool, err error) {
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	body, _ := json.Marshal(promiseRequest{Holder: me, Nonce: hex.EncodeToString(nonce)}) // always marshals
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+address+failsafePath, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set(failsafeHeader, sign(key, body))
	resp, err := failsafeClient.Do(req)
	if err != nil {
		return false, fmt.Errorf("%s: %w", member, err)
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return false, fmt.Errorf("%s: %w", member, err)
	}
	if resp.StatusCode != http.StatusOK || !verified(key, out, resp.Header.Get(failsafeHeader)) {
		return false, fmt.Errorf("%s at %s: %s: %s", member, address, resp.Status, bytes.TrimSpace(out))
	}
	var answer promiseResponse
	if err := json.Unmarshal(out, &answer); err != nil {
		return false, fmt.Errorf("%s: %w", member, err)
	}
	switch {
	case answer.Nonce != hex.EncodeToString(nonce) || answer.Member != member:
		return false, fmt.Errorf("%s: the answer at %s is not to this request (from %q)", member, address, answer.Member)
	case !answer.Granted:
		return true, fmt.Errorf("%s refused: %s", member, answer.Reason)
	}
	return true, nil
}

// streamingInstances are the instances of this MyDatabase that stream
// from this primary, by the application names they stream under (their
// pod names), each with the host it streams from ("" over a Unix
// socket): a member the primary's last view of spec.replicas does not
// count yet (a scale-up it could not read) must promise too.
func (m *manager) streamingInstances(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	err := m.withServerFor(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, "SELECT application_name, coalesce(host(client_addr), '') FROM pg_stat_replication")
		if err != nil {
			return err
		}
		var name, host string
		_, err = pgx.ForEachRow(rows, []any{&name, &host}, func() error {
			if m.c.isInstance(name) && name != m.c.PodName {
				out[name] = host
			}
			return nil
		})
		return err
	})
	return out, err
}
