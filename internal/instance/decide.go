package instance

import (
	"cmp"
	"fmt"

	"example.com/myoperator/internal/contract"
)

// The HA loop observes, decides, then acts. decide and elect are the
// decisions: plain functions of what was observed, tested as tables
// (decide_test.go); the loop (manager.go) carries out what they return.

// serverRole is what the local server runs as.
type serverRole int

const (
	stopped serverRole = iota
	asPrimary
	asReplica
)

// situation is what one turn of the loop observed.
type situation struct {
	me        string
	bootstrap bool // this is the pod that makes a new MyDatabase's data
	hasData   bool
	running   serverRole
	following string // the primary a running replica streams from
	ready     bool   // the server answered
	lsn       uint64 // its position, when it answered
	fenceOpen bool
	// designated: the running primary is a replica MyDatabase's designated
	// primary, a standby of its source (replica.go).
	designated bool
	// demote: this is a replica MyDatabase asked to follow its source: a
	// primary that takes writes stops taking them (replica.go).
	demote bool
	// tokenReached: the designated primary has replayed past the Lease's
	// promotion token, or there is none.
	tokenReached bool
	// lapsed: a primary that has not renewed for a whole Lease duration;
	// another instance may hold the Lease by now.
	lapsed    bool
	lease     leaseView
	leaseRead bool // the Lease was read this turn (a primary knows it from its renewals)
	// handoffOverdue: the Lease was handed to this instance half a Lease
	// duration ago or more.
	handoffOverdue bool
	// promised: this instance promised the holder not to take the Lease
	// (failsafe.go), and the promise holds.
	promised bool
	// outsider: the Lease's holder does not ask this instance for
	// failsafe promises (or what it asks cannot be known): it may hold
	// the Lease on the promises of others while this one sees it expire.
	outsider bool
	// stranded: this replica does not stream, its replay has stood still
	// for a Lease duration, and the primary it follows answered that it
	// no longer has the WAL it needs (stranded.go).
	stranded bool
}

type action int

const (
	wait       action = iota
	initialise        // make the data, take the Lease, run as primary
	runPrimary        // become the primary whose Lease this instance holds: promote, or start the server
	renew             // keep the Lease
	fenceOff          // stop the server at once: it may no longer acknowledge commits
	follow            // (re)start as a replica of the holder: clone or rewind first
	runReplica        // start the server as a replica of no one, to learn its position
	stand             // stand for election
	handOver          // a switchover: stop, and hand the Lease to the target
	release           // give the Lease up
	reclone           // clone the primary again: it no longer has the WAL this replica needs, or forked before it
	promote           // promote the designated primary in place: the replica MyDatabase is promoted
	demote            // stop the primary, end its WAL, and run it as the designated primary of the source
)

func (a action) String() string {
	return [...]string{"wait", "initialise", "run as primary", "renew", "fence", "follow", "run as replica", "stand", "hand over", "release", "clone again", "promote", "demote"}[a]
}

// decide is the decision table of one turn.
func decide(s situation) action {
	l := s.lease
	if s.running == asPrimary {
		switch {
		case s.leaseRead && l.holder != s.me:
			return fenceOff
		case !s.fenceOpen && s.lapsed:
			// Another instance may hold the Lease: stop, so that waiting
			// sessions fail and the pod is no longer ready.
			return fenceOff
		case s.designated:
			// A standby: it takes no writes and hands nothing over.
			if s.ready && s.fenceOpen && l.promote && s.tokenReached {
				return promote
			}
			if s.ready {
				return renew
			}
			return wait
		case s.demote:
			return demote
		case s.ready && s.fenceOpen && l.switchoverTo != "" && l.switchoverTo != s.me:
			// Renewing instead while the target catches up (act).
			return handOver
		case s.ready:
			// A successful renewal also reopens a fence that closed at
			// its deadline: the Lease is conditional on its version, so it
			// succeeds only if no one else has taken it meanwhile.
			return renew
		}
		// A primary renews only while its server answers: one that does
		// not come back within the Lease is replaced.
		return wait
	}
	if !s.leaseRead {
		return wait // never act on a Lease not seen
	}
	free := l.holder == "" || l.expired
	switch {
	case !free && l.holder == s.me:
		switch {
		case !s.hasData:
			return wait
		case s.promised:
			// Promised to another holder before this take, whose answer
			// may have been lost: not a primary while the promise holds.
			return wait
		case l.handoff == 0 || s.running == stopped:
			return runPrimary // a stopped replica starts as one first
		case s.ready && s.lsn > l.handoff:
			// Handed over: every commit of the old primary is here.
			return runPrimary
		case s.handoffOverdue:
			// Promoting now would lose commits: let the election pick
			// the most advanced instance, the old primary.
			return release
		}
		return wait
	case !free:
		if s.running == asReplica && s.following == l.holder {
			if s.stranded {
				return reclone
			}
			return wait
		}
		return follow
	case !s.hasData:
		if s.bootstrap && l.transitions == 0 {
			return initialise
		}
		return wait // a replica without data clones a primary, when there is one
	case s.running == stopped:
		return runReplica
	case s.outsider:
		// Never asked, so never bound: the holder may still take writes
		// on the promises of the members it asks.
		return wait
	}
	// A promised member stands too: its candidacy tells the others how
	// far its WAL goes, so that a less advanced one does not win while it
	// may not take the Lease (stand: the take waits for the promise).
	return stand
}

// elect tells whether this instance, a candidate in the election for term
// with position mine, should take the Lease. Every candidate decides the
// same way on the same reports, and only one take of the Lease at term
// succeeds: the most advanced candidate wins, the lowest name among equals.
// Advanced means on a later timeline first, then further in the WAL: a
// member left on timeline T with a long tail the deposed primary wrote
// after the fork holds nothing acknowledged past it, while a member on
// T+1 may, so equal or larger LSNs on an older timeline never win.
// A peer that has not stood in this term is waited for until patient is
// false, if its last report says it is ready (one that is not, a primary
// that gave the Lease up on its way out included, cannot stand); the last
// holder is never waited for. With a required synchronous quorum, no one
// wins before electors candidates (this one included) have stood: only
// then is every acknowledged commit sure to be on one of them
// (contract.Quorum.Electors). When it does not win, the error says why, if
// not simply because another is ahead.
func elect(me string, mine position, term string, peers []peer, lastHolder string, patient bool, electors int) (bool, error) {
	stood := 1
	for _, p := range peers {
		r := p.report
		if r == nil || r.Candidate == nil || r.Candidate.Term != term {
			if patient && p.name != lastHolder && r != nil && r.Ready {
				return false, nil
			}
			continue
		}
		lsn, err := contract.LSN(r.Candidate.LSN)
		if err != nil {
			continue
		}
		if !r.Candidate.Promised {
			// A promised candidacy says how far its WAL goes, but counts
			// for no one's electors: its member may not take the Lease,
			// and the failsafe's arithmetic (promisesNeeded) relies on it.
			stood++
		}
		switch c := mine.compare(position{r.Candidate.Timeline, lsn}); {
		case c < 0, c == 0 && p.name < me:
			return false, nil
		}
	}
	if stood < electors {
		return false, fmt.Errorf("election in term %s: %d of the %d candidates a required synchronous quorum needs have stood: "+
			"without them an acknowledged commit could be missing; waiting", term, stood, electors)
	}
	return true, nil
}

// position is where an instance's WAL ends: its timeline and LSN.
type position struct {
	timeline int64
	lsn      uint64
}

// compare orders positions by timeline, then LSN; a timeline of 0 (a
// candidacy that does not say) compares by LSN alone.
func (a position) compare(b position) int {
	if a.timeline != 0 && b.timeline != 0 && a.timeline != b.timeline {
		return cmp.Compare(a.timeline, b.timeline)
	}
	return cmp.Compare(a.lsn, b.lsn)
}
