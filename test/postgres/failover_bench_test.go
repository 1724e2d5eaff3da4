package postgres

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestFailoverTimes is the failover benchmark (`make bench-ha`), skipped
// unless HA_BENCH_ROUNDS is set: three instances under write load through
// the read-write front, the primary lost HA_BENCH_ROUNDS times (its
// container killed: the Lease must expire) and as many times stopped as a
// deleted pod is (SIGTERM: it gives the Lease up), and HA_BENCH_ROUNDS
// times switched over to a replica. Each time it measures the
// write unavailability (the longest time between two acknowledged writes)
// and the acknowledged writes lost. With HA_BENCH_DOC (file names,
// space-separated) it writes the figures into each between the
// failover-figures markers.
func TestFailoverTimes(t *testing.T) {
	rounds := 0
	if _, err := fmt.Sscan(os.Getenv("HA_BENCH_ROUNDS"), &rounds); err != nil || rounds < 1 {
		t.Skip("HA_BENCH_ROUNDS is not set: run make bench-ha")
	}
	ha := startHA(t, nil)
	c, pods, conninfo, lease := ha.c, ha.pods, ha.conninfo, ha.lease

	type figures struct {
		gaps []time.Duration
		lost int
	}
	measure := func(how string, move func(primary *pod, others []*pod)) figures {
		var f figures
		for i := range rounds {
			primary := c.waitPrimary(t, pods, 30*time.Second)
			others := without(pods, primary)
			w := startWriters(t, conninfo, ha.anyWritable, 4)
			w.waitAcks(t, 200, 30*time.Second)
			move(primary, others)
			c.waitPrimary(t, others, 4*lease)
			w.waitAcks(t, 200, 30*time.Second)
			v := w.check(t, conninfo)
			if len(v.splitBrain) > 0 {
				t.Errorf("%s, round %d: split brain: %v", how, i+1, v.splitBrain[0])
			}
			t.Logf("%s, round %d: primary %s, write gap %s, %d of %d acknowledged writes lost", how, i+1, primary.name,
				v.longestGap.Round(time.Millisecond), v.lost, v.acked)
			f.gaps, f.lost = append(f.gaps, v.longestGap), f.lost+v.lost
			if !primary.running() {
				primary.start(t)
			}
			c.healthy(t, pods)
		}
		return f
	}
	killed := measure("container killed", func(p *pod, _ []*pod) { p.killContainer(t) })
	stopped := measure("pod deleted (SIGTERM)", func(p *pod, _ []*pod) { p.stop(t) })
	switched := measure("switchover", func(_ *pod, others []*pod) { c.requestSwitchover(t, others[0]) })
	if switched.lost > 0 {
		t.Errorf("a switchover lost %d acknowledged writes", switched.lost)
	}

	row := func(how string, f figures) string {
		slices.Sort(f.gaps)
		return fmt.Sprintf("| %s | %d | %s | %s | %s | %d |", how, len(f.gaps), f.gaps[0].Round(10*time.Millisecond),
			f.gaps[len(f.gaps)/2].Round(10*time.Millisecond), f.gaps[len(f.gaps)-1].Round(10*time.Millisecond), f.lost)
	}
	table := fmt.Sprintf("Measured by `make bench-ha` on %s, PostgreSQL %d, default Lease of %s, asynchronous replicas, four writers:\n\n"+
		"| primary moved by | rounds | write gap min | p50 | max | acknowledged writes lost |\n|---|---|---|---|---|---|\n%s\n%s\n%s\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), c.srv.major, lease, row("container killed (the Lease expires)", killed),
		row("pod deleted (SIGTERM: the Lease is given up)", stopped), row("switchover (the Lease is handed over)", switched))
	t.Log("\n" + table)
	for doc := range strings.FieldsSeq(os.Getenv("HA_BENCH_DOC")) {
		if err := splice(doc, "<!-- failover figures -->", "<!-- end of failover figures -->", table); err != nil {
			t.Fatal(err)
		}
	}
}

// splice replaces what stands between two markers of a file.
func splice(path, begin, end, content string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s lacks the markers %s and %s", path, begin, end)
	}
	return os.WriteFile(path, []byte(s[:i+len(begin)]+"\n"+content+s[j:]), 0o644)
}
