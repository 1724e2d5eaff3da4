package apply

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// disagreement is the drift check: every field we set must have our value
// in the live object; what others add is theirs.
func TestDisagreement(t *testing.T) {
	live := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Labels: map[string]string{"ours": "1", "theirs": "x"}},
		Data:       map[string]string{"a": "1", "b": "2"},
	}
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 1}, {Port: 2}}}}
	for _, tc := range []struct {
		desired string
		live    client.Object
		want    string
	}{
		{`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","labels":{"ours":"1"}},"data":{"a":"1"}}`, live, ""},
		{`{"metadata":{"labels":{"ours":"2"}}}`, live, ".metadata.labels.ours"},
		{`{"data":{"c":"3"}}`, live, ".data.c"},
		{`{"spec":{"ports":[{"port":1}]}}`, svc, ""},
		{`{"spec":{"ports":[{"port":2}]}}`, svc, ".spec.ports[0].port"},
		{`{"spec":{"ports":[{"port":1},{"port":2},{"port":3}]}}`, svc, ".spec.ports"},
	} {
		if got := disagreement(decode(t, tc.desired), tc.live); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.desired, got, tc.want)
		}
	}
}

// The drift check reads live objects with the unstructured converter
// instead of encoding them to JSON and decoding that: both must read every
// field alike, or a converged child would be written on every pass (or
// drift missed). Each object, as JSON decodes it, must agree with itself
// as the converter reads it, and a changed field must still be found.
func TestDisagreementReadsLiveAsJSONDoes(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	for _, live := range []client.Object{
		&appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "db", CreationTimestamp: created, Labels: map[string]string{"a": "b"},
				OwnerReferences: []metav1.OwnerReference{{UID: "u", Controller: new(true), Kind: "MyDatabase", Name: "db", APIVersion: "v"}}},
			Spec: appsv1.StatefulSetSpec{
				Replicas: new(int32(3)),
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: new(int64(3600)),
					Containers: []corev1.Container{{
						Name: "postgres", Image: "postgres:17", Args: []string{"-c", "x=1"},
						Ports: []corev1.ContainerPort{{ContainerPort: 5432, Protocol: corev1.ProtocolTCP}},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceMemory: resource.MustParse("512Mi"), corev1.ResourceCPU: resource.MustParse("250m")}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Port: intstr.FromString("status"), Path: "/readyz"}}, PeriodSeconds: 5},
						SecurityContext: &corev1.SecurityContext{RunAsNonRoot: new(true), RunAsUser: new(int64(999))},
					}},
				}},
				VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"},
					Spec: corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}},
			},
			Status: appsv1.StatefulSetStatus{ReadyReplicas: 3, ObservedGeneration: 7},
		},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Data: map[string][]byte{"tls.key": {0, 1, 2, 255}},
			Type: corev1.SecretTypeTLS},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "p"},
			Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: new(intstr.FromInt32(1))}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc"}, Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{{Name: "pg", Port: 5432, TargetPort: intstr.FromInt32(5432)}}, ClusterIP: "None"}},
	} {
		raw, err := json.Marshal(live)
		if err != nil {
			t.Fatal(err)
		}
		want := decode(t, string(raw))
		if field := disagreement(want, live); field != "" {
			t.Errorf("%T read unlike JSON at %s", live, field)
		}
		// A change anywhere is still found: every leaf, changed in turn.
		for _, path := range leaves(want, nil) {
			changed := decode(t, string(raw))
			set(changed, path, "changed")
			if disagreement(changed, live) == "" {
				t.Errorf("%T: a change at %v is not seen", live, path)
			}
		}
	}
}

// leaves lists the paths (keys and indexes) to every scalar of v.
func leaves(v any, path []any) [][]any {
	var out [][]any
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			out = append(out, leaves(e, append(append([]any{}, path...), k))...)
		}
	case []any:
		for i, e := range v {
			out = append(out, leaves(e, append(append([]any{}, path...), i))...)
		}
	default:
		out = append(out, path)
	}
	return out
}

func set(v any, path []any, value any) {
	for i, step := range path {
		last := i == len(path)-1
		switch step := step.(type) {
		case string:
			m := v.(map[string]any)
			if last {
				m[step] = value
			}
			v = m[step]
		case int:
			l := v.([]any)
			if last {
				l[step] = value
			}
			v = l[step]
		}
	}
}

func TestOwnedByAnother(t *testing.T) {
	ref := func(uid string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{UID: types.UID(uid), Controller: new(true), Kind: "MyDatabase", Name: "x", APIVersion: "v"}}
	}
	desired := decode(t, `{"metadata":{"ownerReferences":[{"uid":"other","kind":"Owner","name":"y","apiVersion":"v"},`+
		`{"uid":"new","controller":true,"kind":"MyDatabase","name":"x","apiVersion":"v"}]}}`)
	for uid, want := range map[string]bool{"new": false, "old": true} {
		live := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{OwnerReferences: ref(uid)}}
		if got := ownedByAnother(desired, live); got != want {
			t.Errorf("live owned by %s: %v, want %v", uid, got, want)
		}
	}
	if ownedByAnother(desired, &corev1.ConfigMap{}) {
		t.Error("an object without owner counts as owned by another")
	}
	if ownedByAnother(decode(t, `{"metadata":{}}`), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{OwnerReferences: ref("old")}}) {
		t.Error("a desired object naming no controller counts as owned by another")
	}
}

// withAnnotation adds the spec hash to the body without touching the rest.
func TestWithAnnotation(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":"1"}}`,
			`{"data":{"a":"1"},"kind":"ConfigMap","metadata":{"annotations":{"k":"v"},"name":"c"}}`},
		{`{"metadata":{"name":"c","annotations":{"theirs":"x"}}}`,
			`{"metadata":{"annotations":{"k":"v","theirs":"x"},"name":"c"}}`},
		{`{"spec":{"replicas":1}}`, `{"metadata":{"annotations":{"k":"v"}},"spec":{"replicas":1}}`},
	} {
		got, err := withAnnotation([]byte(tc.in), "k", "v")
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: %s (%v), want %s", tc.in, got, err, tc.want)
		}
	}
	if _, err := withAnnotation([]byte(`[1]`), "k", "v"); err == nil {
		t.Error("a body that is no object was taken")
	}
}

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// The desired object is read with the unstructured converter too, instead
// of decoding the JSON it is sent as: both must give the same fields and
// values (numbers compared by value), or the drift check would test
// fields we do not send, or miss some we do. Every builder of the
// operator's applied children, on a MyDatabase that sets much.
func TestDesiredReadsAsJSONDoes(t *testing.T) {
	db := &databasev1alpha1.MyDatabase{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "ns", UID: "u-1", Generation: 3},
		Spec: databasev1alpha1.MyDatabaseSpec{
			Replicas: new(int32(3)),
			Storage:  databasev1alpha1.StorageSpec{Size: resource.MustParse("5Gi"), StorageClassName: new("fast")},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
			Parameters:   map[string]string{"work_mem": "8MB", "search_path": `"$user", public`},
			NodeSelector: map[string]string{"disk": "ssd"},
			Tolerations:  []corev1.Toleration{{Key: "db", Operator: corev1.TolerationOpExists, TolerationSeconds: new(int64(30))}},
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone",
				WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}}},
			PodLabels:      map[string]string{"team": "shop"},
			PodAnnotations: map[string]string{"note": "x"},
			NetworkPolicy: databasev1alpha1.NetworkPolicySpec{Enabled: true, Clients: []networkingv1.NetworkPolicyPeer{
				{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "shop"}}}}},
		},
	}
	p := specs.Platform{InstanceManagerImage: "example.com/instance:1"}
	for _, desired := range []Configuration{
		specs.StatefulSet(db, p), specs.ConfigMap(db), specs.HeadlessService(db), specs.ReadWriteService(db),
		specs.ReadOnlyService(db), specs.PodDisruptionBudget(db), specs.NetworkPolicy(db), specs.Lease(db),
		specs.InstanceServiceAccount(db), specs.InstanceRole(db), specs.InstanceRoleBinding(db),
		specs.UpgradeJob(db, &databasev1alpha1.MajorUpgradeStatus{From: "16", To: "17"}, p),
	} {
		raw, err := json.Marshal(desired)
		if err != nil {
			t.Fatal(err)
		}
		converted, err := read(desired)
		if err != nil {
			t.Fatalf("%T: %v", desired, err)
		}
		if at, same := sameReading(decode(t, string(raw)), converted); !same {
			t.Errorf("%T read unlike JSON at %s", desired, at)
		}
	}
}

// sameReading compares two readings of an object, numbers by value.
func sameReading(a, b any) (string, bool) {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return "", false
		}
		for k := range a {
			if at, same := sameReading(a[k], b[k]); !same {
				return "." + k + at, false
			}
		}
		return "", true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return "", false
		}
		for i := range a {
			if at, same := sameReading(a[i], b[i]); !same {
				return fmt.Sprintf("[%d]%s", i, at), false
			}
		}
		return "", true
	case int64, float64:
		m, _ := number(a)
		n, ok := number(b)
		return "", ok && m == n
	}
	return "", a == b
}
