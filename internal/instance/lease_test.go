package instance

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"example.com/myoperator/internal/contract"
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
			l := &leases{me: "db-1", t: newTiming(tc.mine), now: func() time.Time { return now }}
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

// TestATakeDropsTheSwitchoverRequest: an instance that takes the Lease
// from another holder (an election) drops the switchover request made of
// that holder, so that it does not hand over at once; its own renewals
// keep a request made of it.
func TestATakeDropsTheSwitchoverRequest(t *testing.T) {
	ctx := context.Background()
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db-primary",
		Annotations: map[string]string{contract.AnnotationSwitchoverTo: "db-2"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: new("db-0")}}
	cs := fake.NewClientset(lease)
	k := &kube{leases: cs.CoordinationV1().Leases("shop"), c: Config{PodName: "db-1", LeaseName: "db-primary"}, timeout: time.Second}
	l := newLeases(k, "db-1", newTiming(4*time.Second), time.Now)
	if _, err := l.observe(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.take(ctx, 2); err != nil {
		t.Fatal(err)
	}
	got, err := k.leases.Get(ctx, "db-primary", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if to, ok := got.Annotations[contract.AnnotationSwitchoverTo]; ok || holderOf(got) != "db-1" ||
		got.Annotations[timelineAnnotation] != "2" {
		t.Fatalf("after the take: holder %q, switchover-to %q (%t), timeline %q; want db-1, none, 2",
			holderOf(got), to, ok, got.Annotations[timelineAnnotation])
	}
	// A request made of db-1 while it holds the Lease survives its renewal.
	got.Annotations[contract.AnnotationSwitchoverTo] = "db-2"
	if _, err := k.leases.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The fake does not refuse a stale update as the API server does (a
	// conflict, after which renew reads the Lease again): read it here.
	if _, err := l.observe(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.renew(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if got, _ := k.leases.Get(ctx, "db-primary", metav1.GetOptions{}); got.Annotations[contract.AnnotationSwitchoverTo] != "db-2" {
		t.Fatalf("a renewal dropped the request made of its holder: %v", got.Annotations)
	}
}

// TestRenewAfterALostAnswer: a renewal the API server made but whose
// answer was lost (a connection cut on the way back) leaves the holder
// with an older version; its next renewal conflicts, and it must renew
// the newer version, not take its own renewal for another holder's (it
// did, and held on by the failsafe's promises until its server stopped).
// A Lease taken meanwhile stays lost.
func TestRenewAfterALostAnswer(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		taken bool
	}{{"its own renewal", false}, {"taken by another", true}} {
		t.Run(tc.name, func(t *testing.T) {
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db-primary"},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: new("db-0"), LeaseTransitions: new(int32(3))}}
			cs := fake.NewClientset(lease)
			version := 1
			loseAnswer := true
			cs.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
				// The API server's optimistic concurrency, which the fake lacks.
				obj := action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
				if obj.ResourceVersion != strconv.Itoa(version) {
					return true, nil, apierrors.NewConflict(coordinationv1.Resource("leases"), obj.Name, errors.New("stale"))
				}
				version++
				obj.ResourceVersion = strconv.Itoa(version)
				if err := cs.Tracker().Update(coordinationv1.SchemeGroupVersion.WithResource("leases"), obj, "shop"); err != nil {
					return true, nil, err
				}
				if loseAnswer {
					loseAnswer = false
					return true, nil, errors.New("unexpected EOF")
				}
				return true, obj, nil
			})
			cs.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				obj, err := cs.Tracker().Get(coordinationv1.SchemeGroupVersion.WithResource("leases"), "shop", "db-primary")
				if err != nil {
					return true, nil, err
				}
				got := obj.(*coordinationv1.Lease).DeepCopy()
				if got.ResourceVersion == "" {
					got.ResourceVersion = strconv.Itoa(version)
				}
				return true, got, nil
			})
			k := &kube{leases: cs.CoordinationV1().Leases("shop"), c: Config{PodName: "db-0", LeaseName: "db-primary"}, timeout: time.Second}
			l := newLeases(k, "db-0", newTiming(4*time.Second), time.Now)
			if _, err := l.observe(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := l.renew(ctx, 2); err == nil || errors.Is(err, errLostRace) {
				t.Fatalf("the renewal whose answer is lost: %v, want the transport's error", err)
			}
			if tc.taken {
				taken, _ := k.leases.Get(ctx, "db-primary", metav1.GetOptions{})
				taken.Spec.HolderIdentity, taken.Spec.LeaseTransitions = new("db-1"), new(int32(4))
				if _, err := k.leases.Update(ctx, taken, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			_, err := l.renew(ctx, 2)
			switch {
			case tc.taken && !errors.Is(err, errLostRace):
				t.Fatalf("renewing a Lease another instance took: %v, want errLostRace", err)
			case !tc.taken && err != nil:
				t.Fatalf("renewing after its own renewal's answer was lost: %v", err)
			}
		})
	}
}
