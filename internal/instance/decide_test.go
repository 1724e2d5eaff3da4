package instance

import (
	"testing"

	"example.com/myoperator/internal/contract"
)

func TestDecide(t *testing.T) {
	held := func(holder string) leaseView { return leaseView{holder: holder, version: "7", transitions: 1} }
	expired := func(holder string) leaseView {
		return leaseView{holder: holder, version: "7", expired: true, transitions: 1}
	}
	asked := func(target string) leaseView {
		return leaseView{holder: "db-0", version: "7", transitions: 1, switchoverTo: target}
	}
	handed := func(holder string, end uint64) leaseView {
		return leaseView{holder: holder, version: "8", transitions: 2, handoff: end}
	}
	for name, tc := range map[string]struct {
		s    situation
		want action
	}{
		"a new MyDatabase: the bootstrap pod makes the data": {
			situation{bootstrap: true, leaseRead: true}, initialise},
		"a new MyDatabase: another pod waits for a primary to clone": {
			situation{leaseRead: true}, wait},
		"no data and a Lease once held: never initialise over a lost volume": {
			situation{bootstrap: true, leaseRead: true, lease: expired("")}, wait},
		"the Lease not read: do nothing": {
			situation{hasData: true, lease: expired("db-0")}, wait},
		"a healthy primary renews": {
			situation{me: "db-0", running: asPrimary, ready: true, fenceOpen: true}, renew},
		"a primary whose fence closed but not yet lapsed tries to renew": {
			situation{me: "db-0", running: asPrimary, ready: true}, renew},
		"a primary that lapsed fences itself, ready or not": {
			situation{me: "db-0", running: asPrimary, ready: true, lapsed: true}, fenceOff},
		"a primary that sees another holder fences itself": {
			situation{me: "db-0", running: asPrimary, ready: true, fenceOpen: true, leaseRead: true, lease: held("db-1")}, fenceOff},
		"a designated primary renews": {
			situation{me: "db-0", running: asPrimary, designated: true, ready: true, fenceOpen: true, lease: held("db-0")}, renew},
		"a designated primary asked to promote promotes": {
			situation{me: "db-0", running: asPrimary, designated: true, ready: true, fenceOpen: true, tokenReached: true,
				lease: leaseView{holder: "db-0", version: "7", transitions: 1, promote: true}}, promote},
		"a designated primary asked to promote waits for the token's WAL": {
			situation{me: "db-0", running: asPrimary, designated: true, ready: true, fenceOpen: true,
				lease: leaseView{holder: "db-0", version: "7", transitions: 1, promote: true, promotionToken: "1/0/3000060"}}, renew},
		"a primary asked to follow its source demotes": {
			situation{me: "db-0", running: asPrimary, ready: true, fenceOpen: true, demote: true, lease: held("db-0")}, demote},
		"a primary that sees another holder fences itself, asked to demote or not": {
			situation{me: "db-0", running: asPrimary, ready: true, fenceOpen: true, demote: true, leaseRead: true, lease: held("db-1")}, fenceOff},
		"a designated primary whose fence closed does not promote": {
			situation{me: "db-0", running: asPrimary, designated: true, ready: true,
				lease: leaseView{holder: "db-0", version: "7", transitions: 1, promote: true}}, renew},
		"a designated primary never hands over": {
			situation{me: "db-0", running: asPrimary, designated: true, ready: true, fenceOpen: true, lease: asked("db-1")}, renew},
		"a designated primary that sees another holder stops": {
			situation{me: "db-0", running: asPrimary, designated: true, ready: true, fenceOpen: true, leaseRead: true, lease: held("db-1")}, fenceOff},
		"a promised member stands: its candidacy keeps a less advanced one from winning (the take waits)": {
			situation{me: "db-2", hasData: true, running: asReplica, ready: true, leaseRead: true, promised: true, lease: expired("db-0")}, stand},
		"an instance the holder does not ask for promises never stands": {
			situation{me: "db-3", hasData: true, running: asReplica, ready: true, leaseRead: true, outsider: true, lease: expired("db-0")}, wait},
		"the holder after a take whose answer was lost is no primary while it is promised": {
			situation{me: "db-1", hasData: true, running: asReplica, ready: true, leaseRead: true, promised: true, lease: held("db-1")}, wait},
		"a primary whose server does not answer does not renew": {
			situation{me: "db-0", running: asPrimary, fenceOpen: true}, wait},
		"the holder after a restart runs as primary": {
			situation{me: "db-0", hasData: true, leaseRead: true, lease: held("db-0")}, runPrimary},
		"the holder running as a replica promotes": {
			situation{me: "db-0", hasData: true, running: asReplica, ready: true, leaseRead: true, lease: held("db-0")}, runPrimary},
		"a replica follows the holder": {
			situation{me: "db-1", hasData: true, leaseRead: true, lease: held("db-0")}, follow},
		"a replica of the holder stays": {
			situation{me: "db-1", hasData: true, running: asReplica, following: "db-0", leaseRead: true, lease: held("db-0")}, wait},
		"a replica of a former holder follows the new one": {
			situation{me: "db-2", hasData: true, running: asReplica, following: "db-0", leaseRead: true, lease: held("db-1")}, follow},
		"a replica whose primary no longer has the WAL it needs clones it again": {
			situation{me: "db-2", hasData: true, running: asReplica, following: "db-0", ready: true, leaseRead: true, lease: held("db-0"), stranded: true}, reclone},
		"an empty replica clones the holder": {
			situation{me: "db-1", leaseRead: true, lease: held("db-0")}, follow},
		"the Lease expired: a running replica stands": {
			situation{me: "db-1", hasData: true, running: asReplica, ready: true, leaseRead: true, lease: expired("db-0")}, stand},
		"the Lease expired: a stopped instance with data starts to learn its position": {
			situation{me: "db-0", hasData: true, leaseRead: true, lease: expired("db-0")}, runReplica},
		"the Lease released: a replica stands at once": {
			situation{me: "db-1", hasData: true, running: asReplica, ready: true, leaseRead: true, lease: expired("")}, stand},
		"a switchover asked of a healthy primary: hand over": {
			situation{me: "db-0", running: asPrimary, ready: true, fenceOpen: true, lease: asked("db-1")}, handOver},
		"a switchover to the primary itself: renew": {
			situation{me: "db-0", running: asPrimary, ready: true, fenceOpen: true, lease: asked("db-0")}, renew},
		"a switchover asked of a primary whose fence closed: renew first": {
			situation{me: "db-0", running: asPrimary, ready: true, lease: asked("db-1")}, renew},
		"handed the Lease with all the WAL: promote": {
			situation{me: "db-1", hasData: true, running: asReplica, ready: true, lsn: 0x5000100, leaseRead: true,
				lease: handed("db-1", 0x5000028)}, runPrimary},
		"handed the Lease, the last WAL not here yet: wait": {
			situation{me: "db-1", hasData: true, running: asReplica, ready: true, lsn: 0x5000028, leaseRead: true,
				lease: handed("db-1", 0x5000028)}, wait},
		"handed the Lease, the last WAL never came: give it up": {
			situation{me: "db-1", hasData: true, running: asReplica, ready: true, lsn: 0x5000000, leaseRead: true,
				lease: handed("db-1", 0x5000028), handoffOverdue: true}, release},
		"handed the Lease while stopped: start as a replica first": {
			situation{me: "db-1", hasData: true, leaseRead: true, lease: handed("db-1", 0x5000028)}, runPrimary},
		"the old primary after a handoff follows the new one": {
			situation{me: "db-0", hasData: true, leaseRead: true, lease: handed("db-1", 0x5000028)}, follow},
	} {
		t.Run(name, func(t *testing.T) {
			if got := decide(tc.s); got != tc.want {
				t.Errorf("decide = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestElect(t *testing.T) {
	stood := func(name, term, lsn string) peer {
		return peer{name: name, report: &contract.Report{Ready: true, Candidate: &contract.Candidacy{Term: term, LSN: lsn, Timeline: 1}}}
	}
	// onTimeline is a candidacy on timeline tli; 0: an older instance
	// manager's, which does not say.
	onTimeline := func(name, lsn string, tli int64) peer {
		return peer{name: name, report: &contract.Report{Ready: true, Candidate: &contract.Candidacy{Term: "7", LSN: lsn, Timeline: tli}}}
	}
	silent := func(name string) peer { return peer{name: name, report: &contract.Report{Ready: true}} }
	stopped := func(name string) peer { return peer{name: name, report: &contract.Report{}} }
	for name, tc := range map[string]struct {
		me       string
		mine     uint64
		peers    []peer
		patient  bool
		want     bool
		electors int   // a required quorum's; 0 is 1
		tli      int64 // mine; 0 is 1
	}{
		"alone": {"db-1", 100, nil, true, true, 0, 0},
		"the most advanced wins": {"db-1", 0x3000100,
			[]peer{stood("db-2", "7", "0/3000000")}, true, true, 0, 0},
		"a more advanced peer wins": {"db-1", 0x3000000,
			[]peer{stood("db-2", "7", "0/3000100")}, true, false, 0, 0},
		"equal: the lowest name wins": {"db-2", 0x3000000,
			[]peer{stood("db-1", "7", "0/3000000")}, true, false, 0, 0},
		"equal: the lowest name is me": {"db-1", 0x3000000,
			[]peer{stood("db-2", "7", "0/3000000")}, true, true, 0, 0},
		"a peer's candidacy in an older term does not count, and is waited for": {"db-1", 0x3000000,
			[]peer{stood("db-2", "6", "0/9000000")}, true, false, 0, 0},
		"a silent peer is waited for while patient": {"db-1", 100,
			[]peer{silent("db-2")}, true, false, 0, 0},
		"a silent peer is ignored once patience ran out": {"db-1", 100,
			[]peer{silent("db-2")}, false, true, 0, 0},
		"a peer that is not ready cannot stand: not waited for": {"db-1", 100,
			[]peer{stopped("db-2")}, true, true, 0, 0},
		"a peer that never reported: not waited for": {"db-1", 100,
			[]peer{{name: "db-2"}}, true, true, 0, 0},
		"the last holder is never waited for": {"db-1", 100,
			[]peer{silent("db-0")}, true, true, 0, 0},
		"the last holder still wins if it stands with more": {"db-1", 100,
			[]peer{stood("db-0", "7", "0/200")}, true, false, 0, 0},
		"a required quorum: alone, no one wins, however long": {"db-1", 100,
			[]peer{silent("db-2")}, false, false, 2, 0},
		"a required quorum: with enough candidates, the most advanced wins": {"db-1", 0x3000100,
			[]peer{stood("db-2", "7", "0/3000000")}, false, true, 2, 0},
		"a required quorum: a candidacy of an older term does not count": {"db-1", 0x3000100,
			[]peer{stood("db-2", "6", "0/3000000")}, false, false, 2, 0},
		"a required quorum: a stopped instance cannot make up the count": {"db-1", 0x3000100,
			[]peer{stopped("db-2"), stood("db-3", "7", "0/3000000")}, false, false, 3, 0},
		"a later timeline wins over a longer WAL on an older one": {"db-1", 0x9000000,
			[]peer{onTimeline("db-2", "0/3000000", 2)}, true, false, 0, 0},
		"a longer WAL on an older timeline loses": {"db-2", 0x3000000,
			[]peer{onTimeline("db-1", "0/9000000", 1)}, true, true, 0, 2},
		"equal LSNs on different timelines are not equal": {"db-1", 0x3000000,
			[]peer{onTimeline("db-2", "0/3000000", 2)}, true, false, 0, 0},
		"a candidacy without a timeline compares by LSN": {"db-2", 0x3000000,
			[]peer{onTimeline("db-1", "0/9000000", 0)}, true, false, 0, 2},
	} {
		t.Run(name, func(t *testing.T) {
			won, why := elect(tc.me, position{max(tc.tli, 1), tc.mine}, "7", tc.peers, "db-0", tc.patient, max(tc.electors, 1))
			if won != tc.want {
				t.Errorf("elect = %t (%v), want %t", won, why, tc.want)
			}
		})
	}
}
