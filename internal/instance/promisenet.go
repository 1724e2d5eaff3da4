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
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
)

// The failsafe's channel (failsafe.go): HTTP on the metrics port, each
// message authenticated by an HMAC keyed by the replication client key.

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
// Lease duration; now is the wall clock a request's time is held against.
func (m *manager) failsafeHandler(d func() time.Duration, now func() time.Time) http.Handler {
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
		if resp.Reason = req.stale(m.c.PodName, now(), d()); resp.Reason == "" {
			resp.Granted, resp.Reason = m.failsafe.grant(req.Holder, d())
		}
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

// httpPromises is the failsafe's channel over the pod network (promiseNet).
type httpPromises struct{ c Config }

// askAll asks every member at its addresses (by name) for a promise, all
// at once, within timeout. It returns how many granted, and why the
// others did not.
func (p httpPromises) askAll(ctx context.Context, holder string, members []string, addresses map[string][]string, timeout time.Duration) (int, error) {
	key, err := p.c.failsafeKey()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	errs := make(chan error, len(members))
	for _, member := range members {
		go func() { errs <- askMember(ctx, key, holder, member, addresses[member]) }()
	}
	granted, all := 0, []error{}
	for range members {
		if err := <-errs; err != nil {
			all = append(all, err)
		} else {
			granted++
		}
	}
	return granted, errors.Join(all...)
}

// askMember asks member at all of its addresses at once and takes the
// first answer: a refusal is an answer, an address where no member
// answers is not. At once, because an address a pod left may hang until
// the round's timeout.
func askMember(ctx context.Context, key []byte, me, member string, addresses []string) error {
	if len(addresses) == 0 {
		return fmt.Errorf("%s: its failsafe address is not known (it has not reported one)", member)
	}
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	req := promiseRequest{Holder: me, Member: member, Sent: time.Now().UTC(), Nonce: hex.EncodeToString(nonce)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		answered bool
		err      error
	}
	results := make(chan result, len(addresses))
	for _, address := range addresses {
		go func() {
			answered, err := askPromise(ctx, key, req, address)
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

// askPromise asks req.Member at address; answered: a member answered
// (granted or refused), as opposed to an address where none did.
func askPromise(ctx context.Context, key []byte, req promiseRequest, address string) (answered bool, err error) {
	member := req.Member
	body, _ := json.Marshal(req) // always marshals
	post, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+address+failsafePath, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	post.Header.Set(failsafeHeader, sign(key, body))
	resp, err := failsafeClient.Do(post)
	if err != nil {
		return false, fmt.Errorf("%s: %w", member, err)
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return false, fmt.Errorf("%s: %w", member, err)
	}
	return readAnswer(key, member, address, req.Nonce, resp.StatusCode, resp.Status, resp.Header.Get(failsafeHeader), out)
}

// readAnswer reads member's answer at address to the request of nonce:
// its status, its signature header and its body. Nothing in an answer
// whose HMAC does not verify is read.
func readAnswer(key []byte, member, address, nonce string, code int, status, signature string, out []byte) (answered bool, err error) {
	if code != http.StatusOK || !verified(key, out, signature) {
		return false, fmt.Errorf("%s at %s: %s: %s", member, address, status, bytes.TrimSpace(out))
	}
	var answer promiseResponse
	if err := json.Unmarshal(out, &answer); err != nil {
		return false, fmt.Errorf("%s: %w", member, err)
	}
	switch {
	case answer.Nonce != nonce || answer.Member != member:
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
func (pg *pgServer) streaming(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	err := pg.withServerFor(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, "SELECT application_name, coalesce(host(client_addr), '') FROM pg_stat_replication")
		if err != nil {
			return err
		}
		var name, host string
		_, err = pgx.ForEachRow(rows, []any{&name, &host}, func() error {
			if pg.c.isInstance(name) && name != pg.c.PodName {
				out[name] = host
			}
			return nil
		})
		return err
	})
	return out, err
}
