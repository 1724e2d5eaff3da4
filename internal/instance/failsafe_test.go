package instance

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"example.com/myoperator/internal/contract"
)

// TestPromises: a member promises only the holder it knows, never while it
// takes the Lease itself, and takes nothing while its promise holds.
func TestPromises(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	f := newFailsafe("db-1", time.Now)
	f.now = func() time.Time { return now }
	if ok, _ := f.grant("db-0", 4*time.Second); ok {
		t.Fatal("granted before this instance saw any holder")
	}
	f.observe("db-0")
	if ok, why := f.grant("db-2", 4*time.Second); ok || !strings.Contains(why, `"db-0"`) {
		t.Fatalf("granted db-2, which does not hold the Lease here: %t %q", ok, why)
	}
	if ok, _ := f.grant("db-0", 4*time.Second); !ok || !f.promised() {
		t.Fatal("the holder's request refused")
	}
	if f.beginTake() {
		t.Fatal("a take while the promise holds")
	}
	now = now.Add(4 * time.Second)
	if f.promised() {
		t.Fatal("the promise outlived its duration")
	}
	if !f.beginTake() {
		t.Fatal("no take once the promise ended")
	}
	if ok, why := f.grant("db-0", 4*time.Second); ok || !strings.Contains(why, "taking") {
		t.Fatalf("granted while taking the Lease: %t %q", ok, why)
	}
	// A take whose answer was lost: no promise until the Lease is read.
	f.endTake(false, true)
	if ok, why := f.grant("db-0", 4*time.Second); ok || !strings.Contains(why, "not answered") {
		t.Fatalf("granted after a take that may have succeeded: %t %q", ok, why)
	}
	f.observe("db-0")
	if !f.beginTake() {
		t.Fatal("no take once the Lease was read again")
	}
	f.endTake(true, false)
	if ok, _ := f.grant("db-0", 4*time.Second); ok {
		t.Fatal("granted the old holder after this instance took the Lease")
	}
	if ok, _ := f.grant("db-1", 4*time.Second); ok {
		t.Fatal("promised itself")
	}
}

// TestPromiseOverTheWire: a primary gets the promise of a member over
// HTTP with the shared key; without it, nothing is granted, either way.
func TestPromiseOverTheWire(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "tls.key")
	if err := os.WriteFile(keyFile, []byte("the replication client key"), 0o600); err != nil {
		t.Fatal(err)
	}
	member := &manager{ha: &ha{c: Config{PodName: "db-1", ReplicationTLSDir: dir}, failsafe: newFailsafe("db-1", time.Now)}}
	member.failsafe.observe("db-0")
	srv := httptest.NewServer(member.failsafeHandler(func() time.Duration { return 4 * time.Second }, time.Now))
	defer srv.Close()
	address := strings.TrimPrefix(srv.URL, "http://")
	primary := httpPromises{Config{PodName: "db-0", ReplicationTLSDir: dir}}
	ctx := context.Background()

	if _, err := primary.askAll(ctx, "db-0", []string{"db-1"}, map[string][]string{"db-1": {address}}, time.Second); err != nil {
		t.Fatalf("a member's promise: %v", err)
	}
	if !member.failsafe.promised() {
		t.Fatal("granted, but the member holds no promise")
	}
	// A member's pod replaced: the address last read is another pod's or
	// nobody's; the member is asked where it streams from next.
	other := &manager{ha: &ha{c: Config{PodName: "db-2", ReplicationTLSDir: dir}, failsafe: newFailsafe("db-2", time.Now)}}
	other.failsafe.observe("db-0")
	otherSrv := httptest.NewServer(other.failsafeHandler(func() time.Duration { return 4 * time.Second }, time.Now))
	defer otherSrv.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	goneAddress := strings.TrimPrefix(gone.URL, "http://")
	gone.Close()
	hung, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hung.Close() }()
	stale := []string{goneAddress, strings.TrimPrefix(otherSrv.URL, "http://"), hung.Addr().String(), address}
	if _, err := primary.askAll(ctx, "db-0", []string{"db-1"}, map[string][]string{"db-1": stale}, time.Second); err != nil {
		t.Fatalf("a member found at its last address: %v", err)
	}
	if other.failsafe.promised() {
		t.Fatal("db-2, reached at an address db-1 left, promised on a request addressed to db-1")
	}
	if _, err := primary.askAll(ctx, "db-0", []string{"db-1"}, map[string][]string{"db-1": stale[:3]}, time.Second); err == nil ||
		!strings.Contains(err.Error(), "not to this request") {
		t.Fatalf("a member at none of its addresses: %v, want no promise", err)
	}
	if _, err := primary.askAll(ctx, "db-0", []string{"db-1", "db-2"}, map[string][]string{"db-1": {address}}, time.Second); err == nil {
		t.Fatal("a round with a member whose address is unknown succeeded")
	}
	stranger := httpPromises{Config{PodName: "db-0", ReplicationTLSDir: t.TempDir()}}
	if err := os.WriteFile(filepath.Join(stranger.c.ReplicationTLSDir, "tls.key"), []byte("another key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := stranger.askAll(ctx, "db-0", []string{"db-1"}, map[string][]string{"db-1": {address}}, time.Second); err == nil ||
		!strings.Contains(err.Error(), "403") {
		t.Fatalf("a request without the key: %v, want it refused", err)
	}
	// A member that refuses says why.
	member.failsafe.observe("db-2")
	if _, err := primary.askAll(ctx, "db-0", []string{"db-1"}, map[string][]string{"db-1": {address}}, time.Second); err == nil ||
		!strings.Contains(err.Error(), "db-1 refused") {
		t.Fatalf("a member that takes another for the holder: %v", err)
	}
}

// TestPromiseAddresses: a member is asked at its reported address first,
// then where it streams from, on its reported port or this instance's.
func TestPromiseAddresses(t *testing.T) {
	m := &ha{
		c:     Config{PodName: "db-0", AdvertiseAddress: "10.0.0.10:5432", MetricsAddress: ":9187"},
		peers: map[string]string{"db-1": "10.0.0.11:9187", "db-2": "10.0.0.12:9300"},
	}
	got := m.promiseAddresses(map[string]string{"db-1": "10.0.0.11", "db-2": "10.0.0.22", "db-3": "10.0.0.13", "db-4": ""})
	want := map[string][]string{
		"db-1": {"10.0.0.11:9187"},                   // streams from where it reported
		"db-2": {"10.0.0.12:9300", "10.0.0.22:9300"}, // replaced: its new host, its port
		"db-3": {"10.0.0.13:9187"},                   // not reported yet: this instance's port
	}
	if len(got) != len(want) {
		t.Fatalf("addresses %v, want %v", got, want)
	}
	for name, addresses := range want {
		if !slices.Equal(got[name], addresses) {
			t.Errorf("%s: %v, want %v", name, got[name], addresses)
		}
	}
}

// podLister is an apiServer that only lists peers, and counts the lists.
type podLister struct {
	apiServer
	reports map[string]string // name: failsafe address ("" not reported)
	lists   int
}

func (p *podLister) peers(context.Context) ([]peer, error) {
	p.lists++
	var out []peer
	for name, address := range p.reports {
		out = append(out, peer{name: name, report: &contract.Report{Failsafe: address}})
	}
	return out, nil
}

// TestReadPeers: the members' addresses are read every peersEvery, and
// every peersRetry while a member of the failsafe set has none: a round
// could not ask it, so a holder that waited peersEvery would fence on a
// new replica's missing address.
func TestReadPeers(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	api := &podLister{reports: map[string]string{"db-1": "10.0.0.11:9187", "db-2": ""}}
	h := &ha{now: func() time.Time { return now }, api: api,
		leases: &leases{failsafeSet: []string{"db-1", "db-2"}}}
	step := func(d time.Duration, wantLists int, wantPeers map[string]string) {
		t.Helper()
		now = now.Add(d)
		h.readPeers(context.Background())
		if api.lists != wantLists || !maps.Equal(h.peers, wantPeers) {
			t.Fatalf("after %s: %d lists, peers %v; want %d, %v", d, api.lists, h.peers, wantLists, wantPeers)
		}
	}
	step(0, 1, map[string]string{"db-1": "10.0.0.11:9187"})
	step(peersRetry/2, 1, map[string]string{"db-1": "10.0.0.11:9187"}) // db-2 unknown, but read just now
	api.reports["db-2"] = "10.0.0.12:9187"
	step(peersRetry/2, 2, map[string]string{"db-1": "10.0.0.11:9187", "db-2": "10.0.0.12:9187"})
	step(peersEvery-time.Millisecond, 2, map[string]string{"db-1": "10.0.0.11:9187", "db-2": "10.0.0.12:9187"})
	api.reports["db-1"] = "10.0.0.21:9187" // replaced
	step(time.Millisecond, 3, map[string]string{"db-1": "10.0.0.21:9187", "db-2": "10.0.0.12:9187"})
	// A member outside the failsafe set with no address is not waited for.
	api.reports["db-3"] = ""
	step(peersRetry, 3, map[string]string{"db-1": "10.0.0.21:9187", "db-2": "10.0.0.12:9187"})
}

// TestPromiseRequestReplayed: a signed request captured on the pod network
// binds no member outside a Lease duration of the time it was sent, nor a
// member it was not addressed to; inside, it binds as the holder's own.
func TestPromiseRequestReplayed(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), []byte("the replication client key"), 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := Config{ReplicationTLSDir: dir}.failsafeKey()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const lease = 4 * time.Second
	for name, tc := range map[string]struct {
		member string
		sent   time.Time
		grant  bool
		reason string
	}{
		"fresh":                          {"db-1", now.Add(-lease / 2), true, ""},
		"a clock a little ahead":         {"db-1", now.Add(lease / 2), true, ""},
		"replayed a Lease duration late": {"db-1", now.Add(-lease - time.Millisecond), false, "a replay"},
		"from a clock far ahead":         {"db-1", now.Add(lease + time.Millisecond), false, "a replay"},
		"from an older instance manager": {"db-1", time.Time{}, false, "a replay"},
		"addressed to another member":    {"db-2", now, false, `addressed to "db-2"`},
	} {
		t.Run(name, func(t *testing.T) {
			member := &manager{ha: &ha{c: Config{PodName: "db-1", ReplicationTLSDir: dir}, failsafe: newFailsafe("db-1", time.Now)}}
			member.failsafe.observe("db-0")
			body, _ := json.Marshal(promiseRequest{Holder: "db-0", Member: tc.member, Sent: tc.sent, Nonce: "00"})
			req := httptest.NewRequest(http.MethodPost, failsafePath, bytes.NewReader(body))
			req.Header.Set(failsafeHeader, sign(key, body))
			rec := httptest.NewRecorder()
			member.failsafeHandler(func() time.Duration { return lease }, func() time.Time { return now }).ServeHTTP(rec, req)
			var answer promiseResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil || rec.Code != http.StatusOK {
				t.Fatalf("answer %d %s (%v)", rec.Code, rec.Body, err)
			}
			if answer.Granted != tc.grant || member.failsafe.promised() != tc.grant || !strings.Contains(answer.Reason, tc.reason) {
				t.Errorf("granted %t (%q), promised %t; want granted %t, a reason with %q",
					answer.Granted, answer.Reason, member.failsafe.promised(), tc.grant, tc.reason)
			}
		})
	}
}
