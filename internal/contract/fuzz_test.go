package contract

import (
	"maps"
	"strings"
	"testing"
)

// Fuzz targets for what crosses the operator–instance boundary: the
// report a database pod writes on itself (AnnotationInstance, read by the
// operator) and the annotations of the primary Lease (read by every
// instance manager, and written by the primary's). A compromised database
// pod can write any of them. docs/security.md lists every target; make fuzz
// runs them.

// FuzzReport: an instance report the operator reads either is refused
// with the zero Report or reads back the same after the operator writes
// it again; its WAL positions read as PostgreSQL's pg_lsn does.
func FuzzReport(f *testing.F) {
	f.Add(`{"role":"primary","ready":true,"timeline":1,"lsn":"0/3000060","replayed":"0/3000060","time":"2026-01-02T03:04:05Z"}`)
	f.Add(`{"role":"replica","ready":true}`)
	f.Add(Report{Role: "primary", Ready: true, SystemID: "7312345678901234567", Timeline: 3, LSN: "1/A0000028",
		Address: "10.0.0.5:5432", Failsafe: "10.0.0.5:9187", Candidate: &Candidacy{Term: "812", LSN: "1/A0000028", Timeline: 3, Promised: true},
		Passwords: map[string]string{"orders-app": "4711", "orders-role-x": PasswordRefused + "12"},
		Declared:  map[string]string{RoleKey("analyst"): "", DatabaseKey("reports"): "permission denied"}, DeclaredOf: DeclaredDigest("{}"),
		Archive: &Archive{LastArchivedWAL: "000000030000000100000009", Error: "timeout", Backups: &Backups{Count: 2, LastID: "20260102T030405Z"}},
		Backup:  &BackupRun{Name: "b1", Phase: "Completed", ID: "20260102T030405Z", Size: 1 << 20, Timeline: 3, BeginLSN: "1/2000028", EndLSN: "1/2000138"},
		Restore: &Restore{BackupID: "20260102T030405Z", Phase: RestoreRunning, LastWAL: "000000010000000000000003"},
		Replica: &ReplicaState{LastWAL: "000000010000000000000003", Streaming: true, SourceLSN: "0/5000000", DemotionToken: "2/3000060"},
		Storage: &Storage{CapacityBytes: 1 << 30, AvailableBytes: 1 << 29, WALBytes: 1 << 24},
		Manager: strings.Repeat("ab", 32)}.String())
	f.Add(`{"role":"primary","timeline":"2"}`)
	f.Add(`{"lsn":"FFFFFFFF/FFFFFFFF","time":"0001-01-01T00:00:00Z"}`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, annotation string) {
		r, err := Parse(annotation)
		if err != nil {
			if r.String() != (Report{}).String() {
				t.Fatalf("Parse(%q) refused it (%v) but returned %s", annotation, err, r)
			}
			return
		}
		again, err := Parse(r.String())
		if err != nil {
			t.Fatalf("the operator cannot read back %s: %v", r, err)
		}
		if again.String() != r.String() {
			t.Fatalf("round trip changed the report:\n%s\n%s", r, again)
		}
		_ = r.Material(again)
		for _, pos := range []string{r.LSN, r.Replayed} {
			checkLSN(t, pos)
		}
	})
}

// checkLSN: a position is accepted only in pg_lsn's form (two groups of 1
// to 8 hex digits), and then writes back to the same number.
func checkLSN(t *testing.T, s string) {
	t.Helper()
	l, err := LSN(s)
	if err != nil {
		if l != 0 {
			t.Fatalf("LSN(%q) refused it (%v) but returned %d", s, err, l)
		}
		return
	}
	if s != "" && !pgLSNForm(s) {
		t.Fatalf("LSN(%q) = %s: accepted what PostgreSQL's pg_lsn refuses", s, FormatLSN(l))
	}
	back, err := LSN(FormatLSN(l))
	if err != nil || back != l {
		t.Fatalf("LSN(%q) = %d writes as %q, which reads %d, %v", s, l, FormatLSN(l), back, err)
	}
}

func pgLSNForm(s string) bool {
	hi, lo, ok := strings.Cut(s, "/")
	hex := func(p string) bool {
		return len(p) >= 1 && len(p) <= 8 && strings.Trim(p, "0123456789abcdefABCDEF") == ""
	}
	return ok && hex(hi) && hex(lo)
}

// FuzzLSN: a WAL position from a report or the Lease (the handoff LSN)
// reads only in pg_lsn's form and writes back to the same number.
func FuzzLSN(f *testing.F) {
	f.Add("0/3000060")
	f.Add("1/A0000028")
	f.Add("FFFFFFFF/FFFFFFFF")
	f.Add("100000000/0")
	f.Add("0/1 and more")
	f.Add("")
	f.Fuzz(checkLSN)
}

// FuzzToken: a promotion token (the Lease's AnnotationPromotionToken, and
// the demotion token a designated primary reports) is refused with zeros,
// or written back the same by FormatToken, up to the case of its hex.
func FuzzToken(f *testing.F) {
	f.Add("2/3000060")
	f.Add("1/0")
	f.Add(FormatToken(9, 0x1A0000028))
	f.Add("0/3000060")
	f.Add("3/1/2")
	f.Fuzz(func(t *testing.T, token string) {
		tli, lsn, err := ParseToken(token)
		if err != nil {
			if tli != 0 || lsn != 0 {
				t.Fatalf("ParseToken(%q) refused it (%v) but returned %d, %d", token, err, tli, lsn)
			}
			return
		}
		if tli < 1 {
			t.Fatalf("ParseTokens(%q): timeline %d", token, tli)
		}
		again := FormatToken(tli, lsn)
		if t2, l2, err := ParseToken(again); err != nil || t2 != tli || l2 != lsn {
			t.Fatalf("ParseToken(%q) = %d, %d writes as %q, which reads %d, %d, %v", token, tli, lsn, again, t2, l2, err)
		}
	})
}

// FuzzLeaseQuorum: the Lease's quorum annotation is refused with the zero
// Quorum (asynchronous replication, as lease.go's leaseView says), never a
// half-read one, or read back the same after it is written again.
func FuzzLeaseQuorum(f *testing.F) {
	f.Add(Quorum{Instances: 5, Synchronous: 2, Required: true}.String())
	f.Add(Quorum{Instances: 3, Synchronous: 1, Sole: "orders-0"}.String())
	f.Add(`{"instances":3,"synchronous":1,"required":"yes"}`)
	f.Add("")
	f.Fuzz(func(t *testing.T, annotation string) {
		q, err := ParseQuorum(annotation)
		if err != nil {
			if q != (Quorum{}) {
				t.Fatalf("ParseQuorum(%q) refused it (%v) but returned %+v", annotation, err, q)
			}
			return
		}
		if again, err := ParseQuorum(q.String()); err != nil || again != q {
			t.Fatalf("ParseQuorum(%q) = %+v writes as %s, which reads %+v, %v", annotation, q, q, again, err)
		}
		_ = q.ElectorsFor("orders-0")
	})
}

// FuzzLeaseDeclared: the declared roles and databases on the Lease are
// refused with the zero Declared, or read back the same.
func FuzzLeaseDeclared(f *testing.F) {
	f.Add(`{"roles":[{"name":"analyst","login":true,"inherit":true,"connectionLimit":-1,"validUntil":"2027-01-31T00:00:00Z",` +
		`"inRoles":["pg_monitor"],"passwordSecret":"shop-role-analyst"}],"databases":[{"name":"reports","owner":"app","locale":"C",` +
		`"extensions":[{"name":"vector","absent":true}],"subscriptions":[{"name":"stock","publications":["stock"],` +
		`"secret":"warehouse-role-mydatabase-logical","database":"inventory","enabled":true,"copyData":true,"failover":true}]}]}`)
	f.Add(`{"pooler":true}`)
	f.Add(`{"roles":[{"name":"a","connectionLimit":"x"}]}`)
	f.Add("")
	f.Fuzz(func(t *testing.T, annotation string) {
		d, err := ParseDeclared(annotation)
		if err != nil {
			if d.String() != (Declared{}).String() {
				t.Fatalf("ParseDeclared(%q) refused it (%v) but returned %s", annotation, err, d)
			}
			return
		}
		again, err := ParseDeclared(d.String())
		if err != nil || again.String() != d.String() {
			t.Fatalf("ParseDeclared(%q) = %s reads back as %s, %v", annotation, d, again, err)
		}
	})
}

// FuzzLeasePoolersPaused: the paused poolers a primary writes on the Lease
// read as valid pooler IDs with positive counts only, and what the operator
// reads writes back as the same.
func FuzzLeasePoolersPaused(f *testing.F) {
	f.Add("1,0f6d2e3c=2,9a51aaaa=1")
	f.Add("2")
	f.Add("x=1,0f6d2e3c=z")
	f.Add("0f6d2e3c=9223372036854775807,0f6d2e3c=1")
	f.Fuzz(func(t *testing.T, annotation string) {
		paused := ParsePoolersPaused(annotation)
		for id, n := range paused {
			if n <= 0 || (id != "" && !validPoolerID(id)) {
				t.Fatalf("ParsePoolersPaused(%q) = %v: pooler %q with %d pods", annotation, paused, id, n)
			}
		}
		value := FormatPoolersPaused(paused)
		if again := ParsePoolersPaused(value); !maps.Equal(again, paused) {
			t.Fatalf("ParsePoolersPaused(%q) = %v writes as %q, which reads %v", annotation, paused, value, again)
		}
	})
}

// FuzzPoolerApp: the application_name of a connection (any client of the
// server may choose one) reads as a pooler's control connection only when
// PoolerApp writes exactly it.
func FuzzPoolerApp(f *testing.F) {
	f.Add(PoolerApp("1a2b3c4d", false))
	f.Add(PoolerApp("1a2b3c4d", true))
	f.Add(PoolerApp("", true))
	f.Add(PoolerProbeApp)
	f.Add("mydatabase-pooler 1A2B3C4D")
	f.Fuzz(func(t *testing.T, app string) {
		id, paused, ok := ParsePoolerApp(app)
		if !ok {
			if id != "" || paused {
				t.Fatalf("ParsePoolerApp(%q) refused it but returned %q, %t", app, id, paused)
			}
			return
		}
		if PoolerApp(id, paused) != app {
			t.Fatalf("ParsePoolerApp(%q) = %q, %t, which PoolerApp writes as %q", app, id, paused, PoolerApp(id, paused))
		}
	})
}
