package mydatabase

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/metrics"
)

// TestPrimaryChangeKind: a change of primary is a switchover when one was
// under way towards the new primary, or this very status write reports one
// done; any other change is a failover.
func TestPrimaryChangeKind(t *testing.T) {
	at := metav1.Now()
	earlier := metav1.NewTime(at.Add(-time.Hour))
	sw := func(phase databasev1alpha1.SwitchoverPhase, to string, requested metav1.Time) *databasev1alpha1.SwitchoverStatus {
		return &databasev1alpha1.SwitchoverStatus{Phase: phase, From: "db-0", To: to, RequestedAt: &requested}
	}
	cases := map[string]struct {
		before, after *databasev1alpha1.SwitchoverStatus
		want          string
	}{
		"no switchover ever":                     {nil, nil, metrics.Failover},
		"running towards the new primary":        {sw(databasev1alpha1.SwitchoverRunning, "db-1", at), sw(databasev1alpha1.SwitchoverRunning, "db-1", at), metrics.Switchover},
		"done in the same write":                 {sw(databasev1alpha1.SwitchoverRunning, "db-1", at), sw(databasev1alpha1.SwitchoverSucceeded, "db-1", at), metrics.Switchover},
		"started and done in one write":          {nil, sw(databasev1alpha1.SwitchoverSucceeded, "db-1", at), metrics.Switchover},
		"running towards another pod":            {sw(databasev1alpha1.SwitchoverRunning, "db-2", at), sw(databasev1alpha1.SwitchoverRunning, "db-2", at), metrics.Failover},
		"an old switchover to the same pod":      {sw(databasev1alpha1.SwitchoverSucceeded, "db-1", earlier), sw(databasev1alpha1.SwitchoverSucceeded, "db-1", earlier), metrics.Failover},
		"a failed switchover, then the pod lost": {sw(databasev1alpha1.SwitchoverFailed, "db-1", at), sw(databasev1alpha1.SwitchoverFailed, "db-1", at), metrics.Failover},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := &databasev1alpha1.MyDatabase{Status: databasev1alpha1.MyDatabaseStatus{CurrentPrimary: "db-0", Switchover: tc.before}}
			after := &databasev1alpha1.MyDatabase{Status: databasev1alpha1.MyDatabaseStatus{CurrentPrimary: "db-1", Switchover: tc.after}}
			if got := primaryChangeKind(before, after); got != tc.want {
				t.Errorf("primaryChangeKind = %s, want %s", got, tc.want)
			}
		})
	}
}
