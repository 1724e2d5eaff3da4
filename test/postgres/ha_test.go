package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// TestHighAvailability runs three instances, each a real server under its
// instance manager, behind a read-write front that routes to the pod
// labelled primary (as the Service and kube-proxy do), and injects one
// fault at a time under write load. The write-loss checker
// (checker_test.go) judges each run: no split brain ever; the number of
// acknowledged writes lost is reported (asynchronous replication may lose
// the last ones on a failover) and must be zero where no failover happens,
// and in a switchover.
func TestHighAvailability(t *testing.T) {
	ha := startHA(t, nil)
	results := &haResults{}
	for _, f := range append(ha.faults(), ha.cutFromOneReplica(true)) {
		ha.inject(t, f, f.lossless, results)
	}
	results.write(t, "HA_RESULTS")
	t.Run("a replica stopped under write load catches up through its slot, with no clone", func(t *testing.T) { ha.slotRetention(t) })
	t.Run("a replica whose WAL the primary no longer has clones it again", func(t *testing.T) { ha.stranded(t) })
}

// slotRetention runs after the faults and their failovers: the primary,
// whichever it is by now, keeps a slot for each member and the replicas
// keep none; a replica stopped while the primary writes more WAL than
// wal_keep_size and checkpoints catches up by streaming, with no clone.
// There is no spec.backup here, so no archive to fall back on.
func (ha haCluster) slotRetention(t *testing.T) {
	c := ha.c
	primary := c.waitPrimary(t, ha.pods, 30*time.Second)
	others := without(ha.pods, primary)
	su := func(p *pod) string { return p.socket("postgres", "postgres") }
	slots := func(p *pod) string {
		out, err := c.psql(su(p), "", "SELECT string_agg(slot_name, ' ' ORDER BY slot_name) FROM pg_replication_slots WHERE starts_with(slot_name, 'mydb_')")
		return fmt.Sprint(out, err)
	}
	want := fmt.Sprint(memberSlot(others[0])+" "+memberSlot(others[1]), nil)
	eventually(t, 30*time.Second, "a slot per member on the primary "+primary.name, func() (bool, string) {
		got := slots(primary)
		return got == want, got
	})
	for _, o := range others {
		eventually(t, 30*time.Second, "no slot on the replica "+o.name, func() (bool, string) {
			got := slots(o)
			return got == fmt.Sprint("", nil), got
		})
		waitSlotStreaming(t, c, primary, o)
	}

	replica := others[0]
	replica.stop(t)
	c.query(t, ha.conninfo, "", "CREATE TABLE filler (n int)")
	for range 12 {
		c.query(t, ha.conninfo, "", "INSERT INTO filler VALUES (1)")
		c.query(t, su(primary), "", "SELECT pg_switch_wal()")
	}
	c.query(t, su(primary), "", "CHECKPOINT", "CHECKPOINT")
	if kept := c.query(t, su(primary), "", fmt.Sprintf(`SELECT (SELECT min(name) FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$') <= pg_walfile_name(restart_lsn)
		FROM pg_replication_slots WHERE slot_name = '%s'`, memberSlot(replica))); kept != "t" {
		t.Fatalf("the primary no longer keeps the WAL of %s's slot", replica.name)
	}
	off := replica.start(t)
	replica.waitReady(t)
	waitSlotStreaming(t, c, primary, replica)
	if strings.Contains(replica.log(off), "cloning the primary") {
		t.Errorf("the replica cloned the primary again instead of streaming the WAL its slot kept:\n%s", replica.log(off))
	}
	ha.caughtUp(t, replica)
}

// stranded stops a replica while the primary writes more WAL than its slot
// may hold (max_slot_wal_keep_size) and checkpoints: with no archive, the
// WAL the replica needs is gone, and its instance manager clones the
// primary again instead of waiting for it forever.
func (ha haCluster) stranded(t *testing.T) {
	c := ha.c
	primary := c.waitPrimary(t, ha.pods, 30*time.Second)
	replica := without(ha.pods, primary)[1]
	su := primary.socket("postgres", "postgres")
	replica.stop(t)
	// Where the stopped replica resumes: its slot's, until the slot is
	// invalidated (and then, within slotsEvery, made anew by the primary,
	// so its state is no witness: the WAL files are).
	needs := c.query(t, su, "", fmt.Sprintf("SELECT pg_walfile_name(restart_lsn) FROM pg_replication_slots WHERE slot_name = '%s'", memberSlot(replica)))
	if len(needs) != 24 {
		t.Fatalf("%s's slot on %s: restart_lsn in file %q", replica.name, primary.name, needs)
	}
	for range 24 {
		c.query(t, ha.conninfo, "", "INSERT INTO filler VALUES (2)")
		c.query(t, su, "", "SELECT pg_switch_wal()")
	}
	c.query(t, su, "", "CHECKPOINT", "CHECKPOINT")
	// Segment numbers only (a file name's last 16 digits), as PostgreSQL
	// itself compares them when it removes WAL: the timeline is no order.
	if oldest := c.query(t, su, "", "SELECT min(substr(name, 9)) FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$'"); oldest <= needs[8:] {
		t.Fatalf("the primary still has the WAL file %s, which %s needs (its oldest segment is %s): the slot held it past max_slot_wal_keep_size", needs, replica.name, oldest)
	}
	off := replica.start(t)
	eventually(t, time.Minute, replica.name+" cloning the primary again", func() (bool, string) {
		log := replica.log(off)
		return strings.Contains(log, "no longer has the WAL") && strings.Contains(log, "replica cloned"), ""
	})
	waitSlotStreaming(t, c, primary, replica)
	ha.caughtUp(t, replica)
}

// caughtUp waits until replica has every row of the checker's filler
// table the primary has.
func (ha haCluster) caughtUp(t *testing.T, replica *pod) {
	t.Helper()
	want := ha.c.query(t, ha.conninfo, "", "SELECT count(*) FROM filler")
	eventually(t, 30*time.Second, replica.name+" has every row", func() (bool, string) {
		got, err := ha.c.psql(replica.socket("postgres", ha.c.db.Spec.DatabaseName), "", "SELECT count(*) FROM filler")
		return err == nil && got == want, got
	})
}

// TestSynchronousReplication runs the faults with a required synchronous
// quorum of one replica: not a single acknowledged write may be lost, in
// any of them.
func TestSynchronousReplication(t *testing.T) {
	ha := startHA(t, &databasev1alpha1.SynchronousReplication{Number: 1, Durability: databasev1alpha1.DurabilityRequired})
	c, lease := ha.c, ha.lease
	results := &haResults{}
	// The new primary is lost as soon as it is labelled, as in
	// TestHighAvailability, where that loses the writes it acknowledged
	// before a replica followed it; with one instance of three left, a
	// required quorum cannot be sure of the last commits and no one is
	// elected, so the first lost instance is started again at once. The
	// second election may pick it: the primary then ends where it began, so
	// the test checks the two moves itself.
	faults := []haFault{{"two failovers in a row, the first lost instance restarted after the second", false, true, func(t *testing.T, p *pod, others []*pod) {
		p.killContainer(t)
		second := c.waitPrimary(t, others, 3*lease)
		second.killContainer(t)
		p.start(t)
		c.waitPrimary(t, append(without(others, second), p), 6*lease)
		second.start(t)
	}, true, 0}}
	for _, f := range ha.faults() {
		if !strings.HasPrefix(f.name, "two failovers") {
			faults = append(faults, f)
		}
	}
	// A member left on the older timeline with more WAL than the one on
	// the newer: only a required quorum makes the election wait for it,
	// without one the member on the newer timeline is elected alone.
	faults = append(faults, haFault{"the new primary lost at once, the old one back with more WAL on the older timeline: the newer timeline wins", true, true, func(t *testing.T, p *pod, others []*pod) {
		p.api.Cut()
		p.cutOff(others)
		// 32 MB of WAL that no one receives, in no transaction (nothing
		// waits for the fence): the old primary's WAL ends far past
		// where the new timeline is when the next election comes.
		c.query(t, p.socket("postgres", "postgres"), "", "SELECT count(pg_logical_emit_message(false, 'tail', repeat('x', 1048576))) FROM generate_series(1, 32)")
		lost := c.waitPrimary(t, others, 3*lease)
		newer := without(others, lost)[0]
		// Lost once a commit on its timeline was acknowledged, so flushed
		// by the other replica (p is cut off): electing the old primary
		// would now lose it. (Before, nothing on the new timeline was
		// acknowledged, and electing the old primary would lose nothing.)
		c.query(t, lost.socket("postgres", "postgres"), "", "CREATE TABLE IF NOT EXISTS newer_timeline (at timestamptz); INSERT INTO newer_timeline VALUES (now())")
		lost.killContainer(t)
		p.api.Restore()
		p.reconnect(others)
		if now := c.waitPrimary(t, []*pod{p, newer}, 6*lease); now != newer {
			t.Errorf("%s was elected on the older timeline with the longer WAL, over %s on the newer", now.name, newer.name)
		}
		lost.start(t)
	}, false, 0})
	faults = append(faults, ha.cutFromOneReplica(false), haFault{"a replica restarted during a primary-only API cut: one promise of two is enough for a quorum of one", false, true,
		func(t *testing.T, p *pod, others []*pod) {
			p.api.Cut()
			time.Sleep(lease)
			// Down for longer than the fence's 3L/5: the last round's
			// deadline alone would not cover it.
			others[0].killContainer(t)
			time.Sleep(lease + lease/4)
			others[0].start(t)
			time.Sleep(lease)
			p.api.Restore()
		}, false, 2 * time.Second})
	for _, f := range faults {
		ha.inject(t, f, true, results)
	}
	results.write(t, "HA_SYNC_RESULTS")
	t.Run("a WAL stream that is not a member counts for no quorum", func(t *testing.T) { ha.foreignStream(t) })
	t.Run("a commit waiting for the quorum still waits across the primary's instance manager replacement", func(t *testing.T) {
		ha.quorumAcrossReplace(t)
	})
}

// quorumAcrossReplace replaces the primary's instance manager while a
// commit waits for the required quorum: the fence bridge and the new
// process's fence must confirm at the Lease's quorum from their first
// message, never at none, so the commit goes on waiting until a member
// streams again.
func (ha haCluster) quorumAcrossReplace(t *testing.T) {
	primary, stillWaits, restart := ha.waitingCommit(t, "quorum_across_replace")
	stillWaits("before the replacement")
	bin, digest := ha.c.nextInstanceManager(t)
	primary.replaceManager(t, bin, digest)
	stillWaits("across the replacement")
	restart()
}

// foreignStream streams the primary's WAL with pg_receivewal
// --synchronous (which confirms each flush, as a re-clone's pg_basebackup
// --wal-method=stream streams) while no member does: a commit must still
// wait, and is acknowledged only once a member streams again.
func (ha haCluster) foreignStream(t *testing.T) {
	c := ha.c
	primary, stillWaits, restart := ha.waitingCommit(t, "foreign_stream")
	dir := filepath.Join(c.base, "receivewal")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, c.user.uid, c.user.gid); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	streamed := make(chan string, 1)
	go func() {
		out, _ := c.run(ctx, c.baseEnv(), filepath.Join(c.srv.bin, "pg_receivewal"), "--synchronous", "--no-loop",
			"--directory="+dir, "--host="+primary.socketDir(), "--port="+strconv.Itoa(primary.port), "--username=postgres")
		streamed <- out
	}()
	defer func() {
		cancel()
		t.Logf("pg_receivewal: %s", <-streamed)
	}()
	eventually(t, 30*time.Second, "pg_receivewal streaming", func() (bool, string) {
		out, err := c.psql(primary.socket("postgres", "postgres"), "",
			"SELECT count(*) FROM pg_stat_replication WHERE application_name = 'pg_receivewal' AND state = 'streaming'")
		return err == nil && out == "1", out
	})
	stillWaits("with only pg_receivewal streaming")
	restart()
}

// waitingCommit stops every replica and starts a commit into a new table
// on the primary, which must wait for the required quorum. stillWaits
// fails the test if the commit was acknowledged (or is within 2 s);
// restart starts the replicas again, and the commit must be acknowledged
// once the first streams.
func (ha haCluster) waitingCommit(t *testing.T, table string) (primary *pod, stillWaits func(what string), restart func()) {
	c := ha.c
	if primary = c.labelledPrimary(context.Background(), ha.pods); primary == nil {
		t.Fatal("no primary")
	}
	superuser := primary.socket("postgres", "postgres")
	c.query(t, superuser, "", "CREATE TABLE "+table+" (id int)")
	replicas := without(ha.pods, primary)
	for _, p := range replicas {
		p.stop(t)
	}
	committed := make(chan error, 1)
	go func() {
		out, err := c.psql(superuser, "", "INSERT INTO "+table+" VALUES (1)")
		if err != nil {
			err = fmt.Errorf("%w: %s", err, out)
		}
		committed <- err
	}()
	stillWaits = func(what string) {
		t.Helper()
		select {
		case err := <-committed:
			t.Fatalf("a commit was acknowledged %s, no member streaming (err %v)", what, err)
		case <-time.After(2 * time.Second):
		}
	}
	restart = func() {
		t.Helper()
		replicas[0].start(t)
		select {
		case err := <-committed:
			if err != nil {
				t.Fatalf("the commit once a member streams: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("the commit still waits a minute after a member started")
		}
		replicas[1].start(t)
		c.healthy(t, ha.pods)
	}
	return primary, stillWaits, restart
}

// haFault is one fault injected into a running haCluster.
type haFault struct {
	name     string
	failover bool // the fault must move the primary
	lossless bool // no acknowledged write may be lost, even in asynchronous mode
	inject   func(t *testing.T, primary *pod, others []*pod)
	anyEnd   bool // where the primary ends is not checked (inject checks its moves)
	// maxGap, when set, bounds the longest time without an acknowledged
	// write.
	maxGap time.Duration
}

// cutFromOneReplica cuts the primary off from the API server and from one
// replica, a, which then receives no more WAL (its WAL receiver stopped,
// as if its link to the primary were cut); the other, b, still reaches
// the primary and streams every write. b is promised to the primary and
// a is not. Asynchronous (failover): the primary is fenced, and b, the
// more advanced, must win and nothing acknowledged be lost; before
// 2026-12-06 b, promised, never stood, a won alone, and b was rewound
// (14 of 396 acknowledged writes lost on real pods). With a required
// quorum of one, b's promise is enough (promisesNeeded): no failover, and
// writes go on.
func (ha haCluster) cutFromOneReplica(failover bool) haFault {
	c, lease := ha.c, ha.lease
	gap := time.Duration(0)
	if !failover {
		gap = 2 * time.Second
	}
	return haFault{"primary cut off from the API server and from one replica: the other, promised, is the more advanced", failover, true,
		func(t *testing.T, p *pod, others []*pod) {
			a, b := others[0], others[1]
			receiver, err := strconv.Atoi(c.query(t, a.socket("postgres", "postgres"), "", "SELECT pid FROM pg_stat_wal_receiver"))
			if err != nil {
				t.Fatalf("%s's WAL receiver: %v", a.name, err)
			}
			if err := syscall.Kill(receiver, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			off := p.logSize()
			p.api.Cut()
			a.failsafe.Cut()
			// The fault is about a promised b: it holds only if the
			// primary knew b's failsafe address when the API server went
			// away, which its log then shows (b's grant counted).
			defer func() {
				bound := "failsafe: 1 of [" // asynchronous: b's promise, short of the 2 needed
				if !failover {
					bound = "holding it on the promises of every member" // b's promise is enough
				}
				if !strings.Contains(p.log(off), bound) {
					t.Errorf("%s never counted %s's promise (want %q in its log): the fault did not test a promised member\n%s", p.name, b.name, bound, p.log(off))
				}
			}()
			if failover {
				if now := c.waitPrimary(t, others, 4*lease); now != b {
					t.Errorf("%s was elected, not %s, which held every acknowledged write", now.name, b.name)
				}
			} else {
				time.Sleep(3 * lease) // past the Lease: no one takes over
			}
			_ = syscall.Kill(receiver, syscall.SIGCONT)
			p.api.Restore()
			a.failsafe.Restore()
		}, false, gap}
}

func (ha haCluster) faults() []haFault {
	c, lease := ha.c, ha.lease
	return []haFault{
		{"switchover under write load, requested in spec.switchover", true, true, func(t *testing.T, _ *pod, others []*pod) {
			c.requestSwitchover(t, others[0])
			c.waitPrimary(t, others[:1], 3*lease)
		}, false, 0},
		{"the operator down during a failover", true, false, func(t *testing.T, p *pod, others []*pod) {
			c.primaryReported(t, p, false) // so that the operator has a primary to see change
			c.op.stop()
			p.killContainer(t)
			now := c.waitPrimary(t, others, 3*lease)
			p.start(t)
			c.op = c.startOperator(t)
			c.primaryReported(t, now, true)
		}, false, 0},
		{"every instance manager replaced in place, the primary's last: no server restarts, no failover", false, true, func(t *testing.T, p *pod, others []*pod) {
			bin, digest := c.nextInstanceManager(t)
			for _, o := range others {
				o.replaceManager(t, bin, digest)
			}
			p.fenceHeldThrough(t, func() { p.replaceManager(t, bin, digest) })
			time.Sleep(2 * lease) // the new primary's renewals keep the Lease
		}, false, 2 * time.Second},
		// The faults that follow run under the replaced instance managers
		// until their containers restart: this one sees the adopted
		// server's exit.
		// The replicas' WAL receivers connect again within
		// wal_retrieve_retry_interval (1 s, internal/specs): with a
		// required quorum, PostgreSQL's default 5 s was a 5 s write gap.
		{"postgres killed (restarted by its instance manager)", false, true, func(t *testing.T, p *pod, _ []*pod) {
			pid := postmasterPID(p.pgdata())
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}, false, 3 * time.Second},
		{"replica killed", false, true, func(t *testing.T, _ *pod, others []*pod) {
			others[0].killContainer(t)
			time.Sleep(lease)
			others[0].start(t)
		}, false, 0},
		{"primary cut off from its replicas", false, true, func(t *testing.T, p *pod, _ []*pod) {
			p.peers.Cut()
			time.Sleep(2 * lease) // past the Lease: the primary renews it, no one takes over
			p.peers.Restore()
		}, false, 0},
		{"the primary's container restarted within the Lease: it resumes in place", false, true, func(t *testing.T, p *pod, _ []*pod) {
			p.killContainer(t)
			p.start(t)
			time.Sleep(2 * lease) // long enough for its fence to close and someone to take over, were it not renewed
		}, false, 0},
		{"pod lost: instance manager and server killed, back after the failover", true, false, func(t *testing.T, p *pod, others []*pod) {
			p.killContainer(t)
			c.waitPrimary(t, others, 3*lease)
			p.start(t)
		}, false, 0},
		{"primary paused (SIGSTOP) past the Lease, then resumed", true, false, func(t *testing.T, p *pod, others []*pod) {
			if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			c.waitPrimary(t, others, 3*lease)
			if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
		}, false, 0},
		{"primary cut off from the API server only: it holds on its members' promises", false, true, func(t *testing.T, p *pod, _ []*pod) {
			p.api.Cut()
			time.Sleep(3 * lease) // past the Lease: no one takes over
			p.api.Restore()
		}, false, 2 * time.Second},
		{fmt.Sprintf("the API server unreachable from every pod for %s: writes go on", ha.apiOutage), false, true, func(t *testing.T, p *pod, others []*pod) {
			for _, o := range append(others, p) {
				o.api.Cut()
			}
			time.Sleep(ha.apiOutage)
			for _, o := range append(others, p) {
				o.api.Restore()
			}
		}, false, 2 * time.Second},
		{"primary cut off from the API server and its peers", true, false, func(t *testing.T, p *pod, others []*pod) {
			p.api.Cut()
			p.cutOff(others)
			c.waitPrimary(t, others, 3*lease)
			p.api.Restore()
			p.reconnect(others)
		}, false, 0},
		{"mixed Lease durations (the primary's three times its replicas'), then the primary cut off from the API server and its peers", true, false, func(t *testing.T, p *pod, others []*pod) {
			// A change of spec.failover.leaseDurationSeconds rolls the
			// replicas first: they run the new, short duration while the
			// primary still fences at the old, long one. They must wait
			// for the duration the holder wrote in the Lease, not their own.
			long := 3 * lease
			p.setEnv(contract.EnvLeaseDurationSeconds, fmt.Sprint(int(long/time.Second)))
			p.killContainer(t)
			p.start(t) // within the Lease: it resumes as the primary
			c.leaseWritten(t, p, long)
			// The writers back on it, its fence open: what it acknowledges
			// after the cut is what a replica that took over too early
			// would fork from.
			eventually(t, 30*time.Second, "a commit through the front acknowledged by "+p.name, func() (bool, string) {
				out, err := c.psql(ha.conninfo, "", "SELECT inet_server_port(), txid_current() > 0")
				return err == nil && out == fmt.Sprintf("%d|t", p.port), fmt.Sprint(out, err)
			})
			p.api.Cut()
			p.cutOff(others)
			c.waitPrimary(t, others, 3*long)
			p.api.Restore()
			p.reconnect(others)
			// Back to the duration of the others, as the roll ends.
			p.setEnv(contract.EnvLeaseDurationSeconds, fmt.Sprint(int(lease/time.Second)))
			p.killContainer(t)
			p.start(t)
		}, false, 0},
		{"a promotion held up past twice the Lease: its winner keeps the Lease, no second election", true, false, func(t *testing.T, p *pod, others []*pod) {
			// Every replica's startup process, which replays WAL and
			// carries out a promotion, stopped: whichever wins, its
			// promotion cannot end (as with a long replay backlog or a
			// slow disk) until they resume.
			var startups []int
			for _, o := range others {
				pid, err := strconv.Atoi(c.query(t, o.socket("postgres", "postgres"), "", "SELECT pid FROM pg_stat_activity WHERE backend_type = 'startup'"))
				if err != nil {
					t.Fatalf("%s's startup process: %v", o.name, err)
				}
				startups = append(startups, pid)
			}
			signal := func(sig syscall.Signal) {
				for _, pid := range startups {
					_ = syscall.Kill(pid, sig)
				}
			}
			signal(syscall.SIGSTOP)
			defer signal(syscall.SIGCONT)
			p.killContainer(t)
			var won *coordinationv1.Lease
			eventually(t, 3*lease, "a replica holding the Lease", func() (bool, string) {
				l, err := c.readLease()
				if err != nil {
					return false, err.Error()
				}
				won = l
				holder := ptr.Deref(l.Spec.HolderIdentity, "")
				return slices.ContainsFunc(others, func(o *pod) bool { return o.name == holder }), holder
			})
			time.Sleep(2*lease + lease/2)
			l, err := c.readLease()
			if err != nil {
				t.Fatal(err)
			}
			holder, transitions := ptr.Deref(won.Spec.HolderIdentity, ""), ptr.Deref(won.Spec.LeaseTransitions, 0)
			if now := ptr.Deref(l.Spec.HolderIdentity, ""); now != holder || ptr.Deref(l.Spec.LeaseTransitions, 0) != transitions {
				t.Errorf("the Lease went from %s (transition %d) to %s (transition %d) while %s promoted",
					holder, transitions, now, ptr.Deref(l.Spec.LeaseTransitions, 0), holder)
			}
			signal(syscall.SIGCONT)
			if now := c.waitPrimary(t, others, 3*lease); now.name != holder {
				t.Errorf("%s is the primary, but %s won the Lease", now.name, holder)
			}
			p.start(t)
		}, false, 0},
		{"the rewind source killed mid-rewind: the half-rewound instance never starts on its data, and clones", true, false, func(t *testing.T, p *pod, others []*pod) {
			// Cut off, the primary writes WAL no one receives (its
			// commits wait for the fence), so it must be rewound.
			p.api.Cut()
			p.cutOff(others)
			source := c.waitPrimary(t, others, 3*lease)
			third := without(others, source)[0]
			held := make(chan int, 1)
			watching, watched := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(watched)
				for {
					if pid := childNamed(p.cmd.Process.Pid, "pg_rewind"); pid != 0 {
						_ = syscall.Kill(pid, syscall.SIGSTOP)
						held <- pid
						return
					}
					select {
					case <-watching:
						return
					case <-time.After(time.Millisecond):
					}
				}
			}()
			off := p.logSize()
			p.api.Restore()
			p.reconnect(others)
			var rewind int
			select {
			case rewind = <-held:
			case <-time.After(30 * time.Second):
				close(watching)
				<-watched
				t.Fatalf("%s ran no pg_rewind within 30 s:\n%s", p.name, p.log(off))
			}
			source.killContainer(t)
			_ = syscall.Kill(rewind, syscall.SIGCONT)
			eventually(t, 30*time.Second, p.name+"'s pg_rewind failing", func() (bool, string) {
				return strings.Contains(p.log(off), "pg_rewind against"), ""
			})
			// The source back after two Leases: with asynchronous replicas
			// the third instance is elected meanwhile, with a required
			// quorum no one is until it is back; never the half-rewound.
			time.Sleep(2 * lease)
			source.start(t)
			c.waitPrimary(t, []*pod{source, third}, 6*lease)
			eventually(t, time.Minute, p.name+" cloning the primary again", func() (bool, string) {
				return strings.Contains(p.log(off), "replica cloned"), ""
			})
			log := p.log(off)
			if i, j := strings.Index(log, "pg_rewind against"), strings.LastIndex(log, "replica cloned"); strings.Contains(log[i:j], "postgres started") {
				t.Errorf("%s started a server on half-rewound data:\n%s", p.name, log[i:j])
			}
		}, false, 0},
		{"two failovers in a row", true, false, func(t *testing.T, p *pod, others []*pod) {
			p.killContainer(t)
			second := c.waitPrimary(t, others, 3*lease)
			second.killContainer(t)
			c.waitPrimary(t, without(others, second), 3*lease)
			p.start(t)
			second.start(t)
		}, false, 0},
	}
}

// inject runs one fault under write load and judges it.
func (ha haCluster) inject(t *testing.T, f haFault, lossless bool, results *haResults) {
	c, pods, conninfo := ha.c, ha.pods, ha.conninfo
	t.Run(f.name, func(t *testing.T) {
		primary := c.waitPrimary(t, pods, 30*time.Second)
		others := without(pods, primary)
		w := startWriters(t, conninfo, ha.anyWritable, 4)
		w.waitAcks(t, 50, 30*time.Second)
		f.inject(t, primary, others)
		w.waitAcks(t, 100, 60*time.Second)
		c.healthy(t, pods)
		now := c.waitPrimary(t, pods, 30*time.Second)
		c.primaryReported(t, now, false)
		v := w.check(t, conninfo)
		results.add(f.name, primary.name, now.name, v)
		t.Logf("%s: %d writes acknowledged by %v, %d lost, longest gap %s (ended %s), primary %s -> %s",
			f.name, v.acked, v.servers, v.lost, v.longestGap.Round(time.Millisecond), v.gapEnd.UTC().Format("15:04:05.000"), primary.name, now.name)
		if len(v.splitBrain) > 0 {
			t.Errorf("split brain: %d writes acknowledged by an older primary after a newer one had acknowledged one:\n%s",
				len(v.splitBrain), strings.Join(v.splitBrain[:min(5, len(v.splitBrain))], "\n"))
		}
		if moved := now != primary; moved != f.failover && !f.anyEnd {
			t.Errorf("the primary moved from %s to %s: want a failover %t", primary.name, now.name, f.failover)
		}
		if lossless && v.lost > 0 {
			t.Errorf("%d acknowledged writes lost", v.lost)
		}
		if f.maxGap > 0 && v.longestGap > f.maxGap {
			t.Errorf("%s without an acknowledged write, want at most %s", v.longestGap.Round(time.Millisecond), f.maxGap)
		}
	})
}

// haCluster is three instances, every one ready and streaming, behind the
// read-write front, with the checker's table made.
type haCluster struct {
	c        *cluster
	pods     []*pod
	conninfo string        // the application's, through the front
	auth     string        // conninfo but the address: user, password, database
	lease    time.Duration // the Lease duration
	// apiOutage is how long the API server is unreachable from every pod
	// in that fault: 30 s with synchronous replication, 90 s without.
	apiOutage time.Duration
}

// startHA starts the three instances, with synchronous replication when
// synchronous is set.
func startHA(t *testing.T, synchronous *databasev1alpha1.SynchronousReplication) haCluster {
	t.Helper()
	servers := findServers(t)
	srv := servers[len(servers)-1]
	// A slot holds back 16 segments at most: more than slotRetention
	// writes, less than stranded does.
	db := newDatabase(srv.major, map[string]string{"max_slot_wal_keep_size": "256MB"})
	db.Spec.Replicas = new(int32(3))
	db.Spec.Replication.Synchronous = synchronous
	appPassword := "app-password"
	creds := specs.CredentialsSecret(db, appPassword)
	user, dbname := string(creds.Data[specs.SecretUsernameKey]), string(creds.Data[specs.SecretDatabaseKey])
	c := newCluster(t, srv, db, creds)
	pods := c.startPods(t, 3)
	c.op = c.startOperator(t)
	front := c.front(t, pods)
	auth := fmt.Sprintf("user=%s password=%s dbname=%s sslmode=disable connect_timeout=2", user, appPassword, dbname)
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d %s", front.Port(), auth)
	c.healthy(t, pods)
	c.query(t, conninfo, "", checkerTable)
	outage := 90 * time.Second
	if synchronous != nil {
		outage = 30 * time.Second
	}
	return haCluster{c: c, pods: pods, conninfo: conninfo, auth: auth, lease: time.Duration(specs.LeaseDurationSeconds(db)) * time.Second,
		apiOutage: outage}
}

// anyWritable is a connection string to every instance directly, in a
// random order, for a server that accepts writes (target_session_attrs):
// a client that follows a new primary as soon as it is promoted, whatever
// the labels and the front say.
func (ha haCluster) anyWritable() string {
	ports := make([]string, len(ha.pods))
	for i, p := range rand.Perm(len(ha.pods)) {
		ports[i] = fmt.Sprint(ha.pods[p].port)
	}
	hosts := strings.TrimSuffix(strings.Repeat("127.0.0.1,", len(ports)), ",")
	return fmt.Sprintf("host=%s port=%s target_session_attrs=read-write %s", hosts, strings.Join(ports, ","), ha.auth)
}

// startPods starts n instances, one after the other, each ready before
// the next (as OrderedReady does); their logs are shown if the test fails.
func (c *cluster) startPods(t *testing.T, n int) []*pod {
	t.Helper()
	ports := freePorts(t, n)
	pods := make([]*pod, n)
	for i := range pods {
		pods[i] = c.newPod(i, ports[i])
	}
	t.Cleanup(func() {
		if t.Failed() {
			showLogs(t, pods)
		}
	})
	for _, p := range pods {
		p.start(t)
		p.waitReady(t)
	}
	return pods
}

// without is pods but p.
func without(pods []*pod, p *pod) []*pod {
	var out []*pod
	for _, o := range pods {
		if o != p {
			out = append(out, o)
		}
	}
	return out
}

// leaseWritten waits until p holds the Lease with duration d written in it.
func (c *cluster) leaseWritten(t *testing.T, p *pod, d time.Duration) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%s holding the Lease for %s", p.name, d), func() (bool, string) {
		lease, err := c.readLease()
		if err != nil {
			return false, err.Error()
		}
		holder, seconds := ptr.Deref(lease.Spec.HolderIdentity, ""), ptr.Deref(lease.Spec.LeaseDurationSeconds, 0)
		return holder == p.name && time.Duration(seconds)*time.Second == d, fmt.Sprintf("held by %q for %d s", holder, seconds)
	})
}

// readLease reads the primary Lease.
func (c *cluster) readLease() (*coordinationv1.Lease, error) {
	lease := &coordinationv1.Lease{}
	return lease, c.api.Client.Get(context.Background(), client.ObjectKey{Namespace: c.db.Namespace, Name: specs.LeaseName(c.db)}, lease)
}

// setEnv sets a variable of p's container environment, for its next start.
func (p *pod) setEnv(name, value string) {
	p.env = append(slices.DeleteFunc(p.env, func(e string) bool { return strings.HasPrefix(e, name+"=") }), name+"="+value)
}

// killContainer kills the container's whole process group, as the end of
// a container (or its node) does: the instance manager and its server.
func (p *pod) killContainer(t *testing.T) {
	t.Helper()
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s still runs 10 s after SIGKILL", p.name)
	}
	// Pdeathsig: the server does not outlive its instance manager.
	eventually(t, 5*time.Second, p.name+"'s server gone", func() (bool, string) {
		pid := postmasterPID(p.pgdata())
		return pid == 0 || syscall.Kill(pid, 0) != nil, fmt.Sprint(pid)
	})
}

// front is the read-write endpoint: a proxy to the pod that is labelled
// primary and reports a ready primary, looked up for each connection.
func (c *cluster) front(t *testing.T, pods []*pod) *testenv.Proxy {
	t.Helper()
	var mu sync.Mutex
	target := ""
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			addr := ""
			if p := c.labelledPrimary(ctx, pods); p != nil {
				addr = fmt.Sprintf("127.0.0.1:%d", p.port)
			}
			mu.Lock()
			target = addr
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()
	proxy, err := testenv.StartProxy(func() string { mu.Lock(); defer mu.Unlock(); return target })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	c.rw = proxy
	return proxy
}

// reportOf is what p's instance manager last published on its pod.
func (c *cluster) reportOf(p *pod) (contract.Report, error) {
	obj := &corev1.Pod{}
	if err := c.api.Client.Get(context.Background(), client.ObjectKey{Namespace: c.db.Namespace, Name: p.name}, obj); err != nil {
		return contract.Report{}, err
	}
	return contract.Parse(obj.Annotations[contract.AnnotationInstance])
}

// labelledPrimary is the pod the read-write Service would route to: the
// one labelled primary whose report says it is a ready primary (an
// endpoint must be ready); nil if none.
func (c *cluster) labelledPrimary(ctx context.Context, pods []*pod) *pod {
	list := &corev1.PodList{}
	if err := c.api.Client.List(ctx, list, client.InNamespace(c.db.Namespace),
		client.MatchingLabels{databasev1alpha1.LabelRole: databasev1alpha1.RolePrimary}); err != nil {
		return nil
	}
	for i := range list.Items {
		r, err := contract.Parse(list.Items[i].Annotations[contract.AnnotationInstance])
		if err != nil || !r.Ready || r.Role != databasev1alpha1.RolePrimary {
			continue
		}
		for _, p := range pods {
			if p.name == list.Items[i].Name && p.running() {
				return p
			}
		}
	}
	return nil
}

// waitPrimary waits until one of candidates is the labelled primary and,
// if the cluster has a front, the front routes to it: the front looks the
// primary up on its own turn, a Service's endpoints lag the label too.
func (c *cluster) waitPrimary(t *testing.T, candidates []*pod, timeout time.Duration) *pod {
	t.Helper()
	var found *pod
	eventually(t, timeout, "a primary among the candidates", func() (bool, string) {
		found = c.labelledPrimary(context.Background(), candidates)
		if found == nil || c.rw == nil {
			return found != nil, "none labelled"
		}
		return c.rw.Target() == fmt.Sprintf("127.0.0.1:%d", found.port), "the front routes to " + c.rw.Target()
	})
	return found
}

// healthy waits until every pod runs and the primary streams to all the
// others.
func (c *cluster) healthy(t *testing.T, pods []*pod) {
	t.Helper()
	eventually(t, 90*time.Second, "every instance back and streaming", func() (bool, string) {
		p := c.labelledPrimary(context.Background(), pods)
		if p == nil {
			return false, "no primary"
		}
		out, err := c.psql(p.socket("postgres", "postgres"), "",
			"SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND application_name <> 'mydatabase_fence'")
		return err == nil && out == fmt.Sprint(len(pods)-1), p.name + " streams to " + out
	})
}

// haResults collects one line per fault for docs/high-availability.md.
type haResults struct{ lines []string }

func (r *haResults) add(fault, from, to string, v verdict) {
	r.lines = append(r.lines, fmt.Sprintf("| %s | %s → %s | %d | %d | %d | %s |", fault, from, to, v.acked, v.lost,
		len(v.splitBrain), v.longestGap.Round(10*time.Millisecond)))
}

// write writes the table to the file the environment variable names, if
// set.
func (r *haResults) write(t *testing.T, variable string) {
	path := os.Getenv(variable)
	if path == "" {
		return
	}
	out := "| fault | primary | acknowledged | lost | split brain | longest write gap |\n|---|---|---|---|---|---|\n" +
		strings.Join(r.lines, "\n") + "\n"
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Error(err)
	}
}

// childNamed is the PID of a child of parent whose command is comm, 0 if
// there is none.
func childNamed(parent int, comm string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		open, close := strings.IndexByte(string(stat), '('), strings.LastIndexByte(string(stat), ')')
		if open < 0 || close < open {
			continue
		}
		fields := strings.Fields(string(stat[close+1:]))
		if string(stat[open+1:close]) == comm && len(fields) > 1 && fields[1] == strconv.Itoa(parent) {
			return pid
		}
	}
	return 0
}
