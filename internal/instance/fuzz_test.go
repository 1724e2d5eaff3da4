package instance

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/myoperator/internal/contract"
)

// Fuzz targets for what an instance manager reads from across a trust
// boundary: the primary Lease's annotations (any pod of the MyDatabase,
// and the operator, write them), the failsafe channel (anything on the pod
// network can send to it), and timeline history files (from the source's
// archive or another server). docs/security.md lists every target; make
// fuzz runs them.

// FuzzFailsafeSet: the failsafe members on the Lease read as nil only when
// the annotation is absent, as names without commas or surrounding space,
// and the holder's own writing of them (take) reads back the same.
func FuzzFailsafeSet(f *testing.F) {
	f.Add("db-1,db-2", true)
	f.Add("", true)
	f.Add("", false)
	f.Add(" db-1 ,, db-2,", true)
	f.Add("db-1,\t,db-2\n", true)
	f.Fuzz(func(t *testing.T, value string, written bool) {
		set := parseFailsafeSet(value, written)
		if (set == nil) != !written {
			t.Fatalf("parseFailsafeSet(%q, %t) = %#v", value, written, set)
		}
		for _, name := range set {
			if name == "" || name != strings.TrimSpace(name) || strings.Contains(name, ",") {
				t.Fatalf("parseFailsafeSet(%q) has the member %q", value, name)
			}
		}
		if again := parseFailsafeSet(strings.Join(set, ","), written); !slices.Equal(again, set) {
			t.Fatalf("parseFailsafeSet(%q) = %q writes back as %q", value, set, again)
		}
	})
}

// FuzzLeaseAnnotations: whatever the Lease's annotations and resource
// version hold, an instance manager reads a view of it without panicking;
// a quorum it cannot read is asynchronous (the zero Quorum, with the
// reason); it never both promotes and follows.
func FuzzLeaseAnnotations(f *testing.F) {
	f.Add("812", "3", "0/5086BF0", contract.Quorum{Instances: 3, Synchronous: 1, Required: true}.String(), "db-1,db-2", true,
		`{"roles":[{"name":"analyst","login":true}]}`, contract.ReplicaPromote, "2/3000060", "db-1", "1,0f6d2e3c=2")
	f.Add("", "x", "1/2xyz", `{"instances":3,"required":"yes"}`, "", false, "{", "", "", "", "")
	f.Add("18446744073709551616", "-1", "", "null", ",,,", true, "null", contract.ReplicaFollow, "0/0", "", "")
	f.Fuzz(func(t *testing.T, version, timeline, handoff, quorum, failsafeSet string, setWritten bool,
		declared, replica, token, switchoverTo, poolers string) {
		ann := map[string]string{
			timelineAnnotation:                timeline,
			handoffAnnotation:                 handoff,
			contract.AnnotationQuorum:         quorum,
			contract.AnnotationDeclared:       declared,
			contract.AnnotationReplica:        replica,
			contract.AnnotationPromotionToken: token,
			contract.AnnotationSwitchoverTo:   switchoverTo,
			contract.AnnotationPoolersPaused:  poolers,
		}
		if setWritten {
			ann[failsafeSetAnnotation] = failsafeSet
		}
		now := time.Unix(1_000_000, 0)
		l := newLeases(nil, "db-1", newTiming(4*time.Second), func() time.Time { return now })
		holder := "db-0"
		l.record(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{ResourceVersion: version, Annotations: ann},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}})
		v := l.view()
		if v.quorumErr != nil && v.quorum != (contract.Quorum{}) {
			t.Fatalf("quorum %q refused (%v) but read as %+v", quorum, v.quorumErr, v.quorum)
		}
		if v.promote && v.follow {
			t.Fatalf("replica annotation %q reads as both promote and follow", replica)
		}
		if (v.failsafeSet == nil) != !setWritten {
			t.Fatalf("failsafe set %q (written: %t) read as %#v", failsafeSet, setWritten, v.failsafeSet)
		}
		_, _ = contract.ParseDeclared(v.declared)
		_, _, _ = contract.ParseToken(v.promotionToken)
		_ = contract.ParsePoolersPaused(poolers)
		if l.held("db-1") == nil {
			t.Fatal("no Lease to write")
		}
	})
}

// failsafeFuzzKey is the replication client key both sides of the fuzzed
// failsafe channel mount.
func failsafeFuzzKey(f *testing.F) (dir string, key []byte) {
	dir = f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), []byte("-----BEGIN PRIVATE KEY-----\nfuzz\n"), 0o600); err != nil {
		f.Fatal(err)
	}
	key, err := Config{ReplicationTLSDir: dir}.failsafeKey()
	if err != nil {
		f.Fatal(err)
	}
	return dir, key
}

// FuzzFailsafeRequest sends any method, body and signature to a member's
// real failsafe handler. A request whose HMAC does not verify under the
// MyDatabase's key is refused with 403 (405 for a method other than POST)
// and binds the member to nothing; one signed with the key (signed: the
// fuzzer's body signed as a member would) is granted only to the holder
// the member knows, and every answer it sends is signed.
func FuzzFailsafeRequest(f *testing.F) {
	dir, key := failsafeFuzzKey(f)
	f.Add("POST", []byte(`{"holder":"db-0","member":"db-1","sent":"2026-01-02T03:04:05Z","nonce":"00112233445566778899aabbccddeeff"}`), "", true)
	f.Add("POST", []byte(`{"holder":"db-0","member":"db-1","sent":"2026-01-02T03:04:08.5+00:00","nonce":"00"}`), "", true)
	f.Add("POST", []byte(`{"holder":"db-0","member":"db-1","sent":"2026-01-02T03:04:00Z","nonce":"00"}`), "", true)
	f.Add("POST", []byte(`{"holder":"db-0","member":"db-2","sent":"2026-01-02T03:04:05Z","nonce":"00"}`), "", true)
	f.Add("POST", []byte(`{"holder":"db-0","nonce":"00112233445566778899aabbccddeeff"}`), "", true)
	f.Add("POST", []byte(`{"holder":"db-0","nonce":"00112233445566778899aabbccddeeff"}`), strings.Repeat("00", 32), false)
	f.Add("POST", []byte(`{"holder":"db-2","member":"db-1","sent":"2026-01-02T03:04:05Z","nonce":""}`), "", true)
	f.Add("POST", []byte(`{"holder":"db-0"`), "", true)
	f.Add("GET", []byte(`{"holder":"db-0","nonce":"00"}`), "", true)
	f.Add("POST", bytes.Repeat([]byte(" "), 4097), "", true)
	f.Fuzz(func(t *testing.T, method string, body []byte, signature string, signed bool) {
		if !validMethod(method) {
			t.Skip()
		}
		if signed {
			signature = sign(key, body)
		}
		member := &manager{ha: &ha{c: Config{PodName: "db-1", ReplicationTLSDir: dir}, failsafe: newFailsafe("db-1", time.Now)}}
		member.failsafe.observe("db-0")
		req := httptest.NewRequest(method, failsafePath, bytes.NewReader(body))
		req.Header.Set(failsafeHeader, signature)
		rec := httptest.NewRecorder()
		now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		member.failsafeHandler(func() time.Duration { return 4 * time.Second }, func() time.Time { return now }).ServeHTTP(rec, req)

		authentic := len(body) <= 4096 && verified(key, body, signature)
		switch {
		case method != http.MethodPost:
			if rec.Code != http.StatusMethodNotAllowed || member.failsafe.promised() {
				t.Fatalf("%s answered %d, promised: %t", method, rec.Code, member.failsafe.promised())
			}
			return
		case !authentic:
			if rec.Code != http.StatusForbidden || member.failsafe.promised() {
				t.Fatalf("a request without a valid HMAC answered %d, promised: %t", rec.Code, member.failsafe.promised())
			}
			return
		}
		var asked promiseRequest
		if json.Unmarshal(body, &asked) != nil {
			if rec.Code != http.StatusBadRequest || member.failsafe.promised() {
				t.Fatalf("a signed request that is not JSON answered %d, promised: %t", rec.Code, member.failsafe.promised())
			}
			return
		}
		out := rec.Body.Bytes()
		if rec.Code != http.StatusOK || !verified(key, out, rec.Header().Get(failsafeHeader)) {
			t.Fatalf("a signed request answered %d, its answer signed: %t", rec.Code, verified(key, out, rec.Header().Get(failsafeHeader)))
		}
		var answer promiseResponse
		if err := json.Unmarshal(out, &answer); err != nil {
			t.Fatal(err)
		}
		if answer.Nonce != asked.Nonce || answer.Member != "db-1" {
			t.Fatalf("answer %+v to request %+v", answer, asked)
		}
		fresh := asked.Member == "db-1" && asked.Sent.Sub(now).Abs() <= 4*time.Second
		if answer.Granted != (asked.Holder == "db-0" && fresh) || member.failsafe.promised() != answer.Granted {
			t.Fatalf("%+v: granted %t, promised %t; want granted only to db-0, addressed to db-1, sent within 4 s of now",
				asked, answer.Granted, member.failsafe.promised())
		}
	})
}

// validMethod: what httptest.NewRequest takes as a method (an HTTP
// token); a client cannot send anything else.
func validMethod(m string) bool {
	return m != "" && !strings.ContainsFunc(m, func(r rune) bool {
		return r <= ' ' || r >= 0x7f || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r)
	})
}

// FuzzFailsafeAnswer: a primary counts an answer as a promise only when
// its HMAC verifies under the MyDatabase's key, it is a 200, it answers
// this request's nonce, it comes from the member asked, and it grants.
// signed: the fuzzer's body signed as a member would.
func FuzzFailsafeAnswer(f *testing.F) {
	_, key := failsafeFuzzKey(f)
	const nonce = "00112233445566778899aabbccddeeff"
	f.Add(200, []byte(`{"member":"db-1","nonce":"`+nonce+`","granted":true}`), "", true)
	f.Add(200, []byte(`{"member":"db-1","nonce":"`+nonce+`","granted":true}`), strings.Repeat("0", 64), false)
	f.Add(200, []byte(`{"member":"db-1","nonce":"ffff","granted":true}`), "", true)
	f.Add(200, []byte(`{"member":"db-2","nonce":"`+nonce+`","granted":true}`), "", true)
	f.Add(200, []byte(`{"member":"db-1","nonce":"`+nonce+`","granted":false,"reason":"this instance is taking the Lease"}`), "", true)
	f.Add(403, []byte("not signed by a member\n"), "", true)
	f.Add(200, []byte(`{"member":"db-1",`), "", true)
	f.Fuzz(func(t *testing.T, code int, body []byte, signature string, signed bool) {
		if signed {
			signature = sign(key, body)
		}
		answered, err := readAnswer(key, "db-1", "10.0.0.6:9187", nonce, code, http.StatusText(code), signature, body)
		if err != nil {
			return // not a promise
		}
		if !answered {
			t.Fatal("a promise from no one")
		}
		var answer promiseResponse
		if code != http.StatusOK || !verified(key, body, signature) || json.Unmarshal(body, &answer) != nil {
			t.Fatalf("a promise from an answer %d whose HMAC verifies: %t: %q", code, verified(key, body, signature), body)
		}
		if !answer.Granted || answer.Nonce != nonce || answer.Member != "db-1" {
			t.Fatalf("a promise from %+v", answer)
		}
	})
}

// FuzzTimelineHistory: a timeline history file (from the source's archive,
// or over a replication connection) gives where a timeline ended only
// from a line of that timeline with a position in pg_lsn's form.
func FuzzTimelineHistory(f *testing.F) {
	f.Add("1\t0/3000158\tno recovery target specified\n\n2\t0/5086BF0\tno recovery target specified\n", int64(2))
	f.Add("1\t0/3000158\tno recovery target specified\n", int64(1))
	f.Add("1\t0/3000158garbage\n", int64(1))
	f.Add("01\t0/1\n1\t0/2\n", int64(1))
	f.Fuzz(func(t *testing.T, history string, tli int64) {
		end, found := timelineEnd(history, tli)
		if !found {
			if end != 0 {
				t.Fatalf("timeline %d not found, but ended at %d", tli, end)
			}
			return
		}
		for line := range strings.Lines(history) {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == strconv.FormatInt(tli, 10) {
				if l, err := contract.LSN(f[1]); err != nil || l != end {
					t.Fatalf("timeline %d ended at %d, but its first line says %q", tli, end, f[1])
				}
				return
			}
		}
		t.Fatalf("timeline %d found in a history without it: %q", tli, history)
	})
}
