package instance

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestExpiryUsesTheHoldersDuration: while a change of the Lease duration
// rolls through the pods, a replica already on 4 s must not take the
// Lease from a primary that still fences by 18 s, nor wait 18 s for one
// that wrote 4 s.
func TestExpiryUsesTheHoldersDuration(t *testing.T) {
	at := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name          string
		mine, written time.Duration // 0 written: the holder wrote none
		after         time.Duration
		expired       bool
	}{
		{"the holder's longer duration, not over", 4 * time.Second, 18 * time.Second, 5 * time.Second, false},
		{"the holder's longer duration, over", 4 * time.Second, 18 * time.Second, 18 * time.Second, true},
		{"the holder's shorter duration, over", 18 * time.Second, 4 * time.Second, 5 * time.Second, true},
		{"none written: this instance's own", 4 * time.Second, 0, 5 * time.Second, true},
		{"none written, not over", 18 * time.Second, 0, 5 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := at
			l := &leases{k: &kube{c: Config{PodName: "db-1"}}, t: newTiming(tc.mine), now: func() time.Time { return now }}
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "7"},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: new("db-0"), RenewTime: &metav1.MicroTime{Time: at}}}
			if tc.written > 0 {
				lease.Spec.LeaseDurationSeconds = new(int32(tc.written / time.Second))
			}
			l.record(lease)
			now = at.Add(tc.after)
			if got := l.view().expired; got != tc.expired {
				t.Errorf("expired after %s: %t, want %t", tc.after, got, tc.expired)
			}
			if d, ok := l.expiresIn(); ok == tc.expired {
				t.Errorf("expiresIn after %s: %s, %t; want it to agree with expired %t", tc.after, d, ok, tc.expired)
			}
		})
	}
}
