package children

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/pki"
	"example.com/myoperator/internal/specs"
)

const ns = "ns"

var owner = &metav1.ObjectMeta{Name: "db", Namespace: ns, UID: "owner-uid"}

// budget is a PodDisruptionBudget named db, labelled with ownerUID and
// controlled by controller ("": neither).
func budget(ownerUID, controller types.UID, finalizers ...string) *policyv1.PodDisruptionBudget {
	b := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns, UID: "child-uid", Finalizers: finalizers}}
	if ownerUID != "" {
		b.Labels = map[string]string{databasev1alpha1.LabelOwnerUID: string(ownerUID)}
	}
	if controller != "" {
		b.OwnerReferences = []metav1.OwnerReference{{APIVersion: "database.example.com/v1alpha1", Kind: "MyDatabase",
			Name: "db", UID: controller, Controller: ptr.To(true)}}
	}
	return b
}

func TestOwnerDelete(t *testing.T) {
	tests := map[string]struct {
		live        client.Object // nil: none
		owns        func(client.Object) bool
		beingGone   bool  // live is being deleted already
		deleteFails error // what the API server answers the delete
		wantDeleted bool
		wantGone    bool
		wantErr     bool
	}{
		"absent":                         {owns: OwnerUIDLabel(owner.UID)},
		"the owner's, by its label":      {live: budget(owner.UID, ""), owns: OwnerUIDLabel(owner.UID), wantDeleted: true, wantGone: true},
		"another's label":                {live: budget("other", ""), owns: OwnerUIDLabel(owner.UID)},
		"the owner's, by its controller": {live: budget("", owner.UID), owns: ControlledBy(owner), wantDeleted: true, wantGone: true},
		"another's controller":           {live: budget("", "other"), owns: ControlledBy(owner)},
		"labelled but not controlled":    {live: budget(owner.UID, ""), owns: ControlledBy(owner)},
		"being deleted already":          {live: budget(owner.UID, ""), owns: OwnerUIDLabel(owner.UID), beingGone: true},
		"made again under the same name": {live: budget(owner.UID, ""), owns: OwnerUIDLabel(owner.UID), wantDeleted: true, deleteFails: apierrors.NewConflict(policyv1.Resource("poddisruptionbudgets"), "db", nil)},
		"the delete fails":               {live: budget(owner.UID, ""), owns: OwnerUIDLabel(owner.UID), wantDeleted: true, deleteFails: apierrors.NewServiceUnavailable("down"), wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			b := fake.NewClientBuilder()
			if tc.live != nil {
				if tc.beingGone {
					tc.live.SetFinalizers([]string{"hold"})
				}
				b = b.WithObjects(tc.live)
			}
			var preconditions []*types.UID
			b = b.WithInterceptorFuncs(interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				o := &client.DeleteOptions{}
				o.ApplyOptions(opts)
				if o.Preconditions != nil {
					preconditions = append(preconditions, o.Preconditions.UID)
				} else {
					preconditions = append(preconditions, nil)
				}
				if tc.deleteFails != nil {
					return tc.deleteFails
				}
				return c.Delete(ctx, obj, opts...)
			}})
			c := b.Build()
			if tc.beingGone {
				if err := c.Delete(ctx, tc.live); err != nil {
					t.Fatal(err)
				}
				preconditions = nil
			}
			deleted, err := Owner{Client: c, Owns: tc.owns}.Delete(ctx, &policyv1.PodDisruptionBudget{}, client.ObjectKey{Namespace: ns, Name: "db"})
			if deleted != tc.wantDeleted || (err != nil) != tc.wantErr {
				t.Fatalf("Delete = %v, %v; want %v, error %v", deleted, err, tc.wantDeleted, tc.wantErr)
			}
			if tc.wantDeleted && (len(preconditions) != 1 || preconditions[0] == nil || *preconditions[0] != "child-uid") {
				t.Errorf("deleted without the child's UID as precondition: %v", preconditions)
			}
			if !tc.wantDeleted && len(preconditions) > 0 {
				t.Errorf("asked to delete an object that is not the owner's")
			}
			err = c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "db"}, &policyv1.PodDisruptionBudget{})
			if gone := apierrors.IsNotFound(err); tc.live != nil && gone != tc.wantGone {
				t.Errorf("gone = %v, want %v", gone, tc.wantGone)
			}
		})
	}
}

// podMonitorClient answers as a cluster with the Prometheus Operator's
// CRD, or as one without (no match for the kind, as the RESTMapper says).
func podMonitorClient(withCRD bool, objs ...client.Object) client.Client {
	b := fake.NewClientBuilder().WithObjects(objs...)
	if !withCRD {
		noMatch := &meta.NoKindMatchError{GroupKind: specs.PodMonitorGVK.GroupKind(), SearchedVersions: []string{"v1"}}
		b = b.WithInterceptorFuncs(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if obj.GetObjectKind().GroupVersionKind() == specs.PodMonitorGVK {
					return noMatch
				}
				return c.Get(ctx, key, obj, opts...)
			}})
	}
	return b.Build()
}

func TestOwnerPodMonitor(t *testing.T) {
	mine := &unstructured.Unstructured{}
	mine.SetGroupVersionKind(specs.PodMonitorGVK)
	mine.SetNamespace(ns)
	mine.SetName("db")
	mine.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "database.example.com/v1alpha1", Kind: "MyDatabase", Name: "db", UID: owner.UID, Controller: ptr.To(true)}})
	key := client.ObjectKey{Namespace: ns, Name: "db"}
	ctx := context.Background()
	pooler := &databasev1alpha1.MyDatabasePooler{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}}

	t.Run("no CRD, one asked for", func(t *testing.T) {
		got, err := Owner{Client: podMonitorClient(false), Owns: ControlledBy(owner)}.PodMonitor(ctx, key, specs.PoolerPodMonitor(pooler))
		if err != nil || !got.CRDMissing || got.Deleted {
			t.Errorf("PodMonitor = %+v, %v; want CRDMissing and no error", got, err)
		}
	})
	t.Run("no CRD, none asked for", func(t *testing.T) {
		got, err := Owner{Client: podMonitorClient(false), Owns: ControlledBy(owner)}.PodMonitor(ctx, key, nil)
		if err != nil || !got.CRDMissing || got.Deleted {
			t.Errorf("PodMonitor = %+v, %v; want CRDMissing and no error", got, err)
		}
	})
	t.Run("the owner's, none asked for", func(t *testing.T) {
		c := podMonitorClient(true, mine.DeepCopy())
		got, err := Owner{Client: c, Owns: ControlledBy(owner)}.PodMonitor(ctx, key, nil)
		if err != nil || got.CRDMissing || !got.Deleted {
			t.Fatalf("PodMonitor = %+v, %v; want Deleted", got, err)
		}
		if err := c.Get(ctx, key, got.Live); !apierrors.IsNotFound(err) {
			t.Errorf("the PodMonitor is still there: %v", err)
		}
	})
	t.Run("another's, none asked for", func(t *testing.T) {
		c := podMonitorClient(true, mine.DeepCopy())
		got, err := Owner{Client: c, Owns: ControlledBy(&metav1.ObjectMeta{UID: "other"})}.PodMonitor(ctx, key, nil)
		if err != nil || got.Deleted {
			t.Fatalf("PodMonitor = %+v, %v; want kept", got, err)
		}
	})
}

func TestRenewal(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ca, err := pki.NewCA("ca", now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("other", now)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"db", "db.ns.svc"}
	server, err := pki.NewServer(ca, "db", names, now)
	if err != nil {
		t.Fatal(err)
	}
	client, err := pki.NewClient(ca, "role", now)
	if err != nil {
		t.Fatal(err)
	}
	issued, err := pki.ParseCert(server.Cert)
	if err != nil {
		t.Fatal(err)
	}
	late := issued.NotAfter.Add(-time.Hour)
	tests := map[string]struct {
		check pki.Check
		names []string
		due   bool
	}{
		"a good server certificate":            {check: pki.CheckServer(server.Cert, server.Key, ca.Cert, names, now), names: names},
		"a good client certificate":            {check: pki.CheckClient(client.Cert, client.Key, ca.Cert, "role", now)},
		"the names changed":                    {check: pki.CheckServer(server.Cert, server.Key, ca.Cert, names[:1], now), names: names[:1], due: true},
		"another CA issues":                    {check: pki.CheckServer(server.Cert, server.Key, other.Cert, names, now), names: names, due: true},
		"a third of its lifetime left":         {check: pki.CheckServer(server.Cert, server.Key, ca.Cert, names, late), names: names, due: true},
		"no certificate at all":                {check: pki.CheckClient(nil, nil, ca.Cert, "role", now), due: true},
		"a client certificate of another role": {check: pki.CheckClient(client.Cert, client.Key, ca.Cert, "another", now), due: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if why := Renewal(tc.check, tc.names); (why != "") != tc.due {
				t.Errorf("Renewal = %q, want due %v", why, tc.due)
			}
		})
	}
}

func TestTrust(t *testing.T) {
	secret := func() *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns},
			Data: map[string][]byte{"tls.crt": []byte("cert"), "ca.crt": []byte("old"), "server-ca.crt": []byte("server")}}
	}
	tests := map[string]struct {
		cas       map[string][]byte
		wantWrite bool
		want      map[string][]byte
	}{
		"the same CAs": {cas: map[string][]byte{"ca.crt": []byte("old"), "server-ca.crt": []byte("server")},
			want: map[string][]byte{"tls.crt": []byte("cert"), "ca.crt": []byte("old"), "server-ca.crt": []byte("server")}},
		"a new bundle": {cas: map[string][]byte{"ca.crt": []byte("new+old"), "server-ca.crt": []byte("server")}, wantWrite: true,
			want: map[string][]byte{"tls.crt": []byte("cert"), "ca.crt": []byte("new+old"), "server-ca.crt": []byte("server")}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			patches := 0
			c := fake.NewClientBuilder().WithObjects(secret()).WithInterceptorFuncs(interceptor.Funcs{
				Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					patches++
					return c.Patch(ctx, obj, patch, opts...)
				}}).Build()
			live := &corev1.Secret{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, live); err != nil {
				t.Fatal(err)
			}
			wrote, err := Trust(ctx, c, live, tc.cas)
			if err != nil || wrote != tc.wantWrite || patches != map[bool]int{true: 1}[tc.wantWrite] {
				t.Fatalf("Trust = %v, %v after %d patches; want %v", wrote, err, patches, tc.wantWrite)
			}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, live); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, live.Data); diff != "" {
				t.Errorf("data (-want +got):\n%s", diff)
			}
		})
	}
}
