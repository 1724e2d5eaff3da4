package apply

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
