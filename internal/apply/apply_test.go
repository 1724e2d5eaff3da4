package apply

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
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
	svc := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: "None", Ports: []corev1.ServicePort{{Port: 1}, {Port: 2}}}}
	monitor := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
		"spec": map[string]any{"podMetricsEndpoints": []any{map[string]any{"port": "metrics", "interval": "30s"}}}}}
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
		{`{"spec":{"clusterIP":{}}}`, svc, ".spec.clusterIP"},
		{`{"apiVersion":"monitoring.coreos.com/v1","spec":{"podMetricsEndpoints":[{"port":"metrics"}]}}`, monitor, ""},
		{`{"spec":{"podMetricsEndpoints":[{"port":"other"}]}}`, monitor, ".spec.podMetricsEndpoints[0].port"},
	} {
		if got := disagreement(decode(t, tc.desired), tc.live); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.desired, got, tc.want)
		}
	}
}

// The drift check walks live objects by reflection instead of encoding
// them to JSON and decoding that: both must read every field alike, or a
// converged child would be written on every pass (or drift missed). Each
// object, as JSON decodes it, must agree with itself as the walk reads
// it, and a changed field must still be found.
func TestDisagreementReadsLiveAsJSONDoes(t *testing.T) {
	for _, live := range liveObjects() {
		raw, err := json.Marshal(live)
		if err != nil {
			t.Fatal(err)
		}
		if field := disagreement(decode(t, string(raw)), live); field != "" {
			t.Errorf("%T read unlike JSON at %s", live, field)
		}
		everyChangeSeen(t, live, raw, func(changed map[string]any) bool { return disagreement(changed, live) != "" })
	}
}

// everyChangeSeen changes each field of the JSON object raw in turn (but
// the top-level type meta, which is not compared) and checks that seen
// finds the changed object differing from obj.
func everyChangeSeen(t *testing.T, obj any, raw []byte, seen func(changed map[string]any) bool) {
	t.Helper()
	for _, path := range leaves(decode(t, string(raw)), nil) {
		if len(path) == 1 && (path[0] == "apiVersion" || path[0] == "kind") {
			continue
		}
		changed := decode(t, string(raw))
		set(changed, path, "changed")
		if !seen(changed) {
			t.Errorf("%T: a change at %v is not seen", obj, path)
		}
	}
}

// liveObjects are typed objects as the cache holds them, with defaulted
// and status fields, quantities, int-or-strings, times and bytes.
func liveObjects() []client.Object {
	created := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	return []client.Object{
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

// set puts value at path (keys and indexes) in v.
func set(v any, path []any, value any) {
	for _, step := range path[:len(path)-1] {
		v = child(v, step)
	}
	setChild(v, path[len(path)-1], value)
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

// The desired side is walked as JSON reads it: every builder's child
// agrees with its own JSON, decoded as the API server's answer would be
// (a typed object) or as an unstructured one, and a change of any field
// of that JSON is seen.
func TestDisagreementReadsDesiredAsJSONDoes(t *testing.T) {
	for _, desired := range builtChildren() {
		raw, err := json.Marshal(desired)
		if err != nil {
			t.Fatal(err)
		}
		asJSON := decode(t, string(raw))
		if field := disagreement(desired, asJSON); field != "" {
			t.Errorf("%T read unlike JSON at %s", desired, field)
		}
		if field := disagreement(desired, typed(t, raw)); field != "" {
			t.Errorf("%T read unlike its typed object at %s", desired, field)
		}
		everyChangeSeen(t, desired, raw, func(changed map[string]any) bool { return disagreement(desired, changed) != "" })
	}
}

// typed decodes an object's JSON into the Go type of its kind.
func typed(t *testing.T, raw []byte) client.Object {
	t.Helper()
	meta := decode(t, string(raw))
	obj, err := clientgoscheme.Scheme.New(schema.FromAPIVersionAndKind(meta["apiVersion"].(string), meta["kind"].(string)))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, obj); err != nil {
		t.Fatal(err)
	}
	return obj.(client.Object)
}

// builtChildren are the desired objects of every builder of an applied
// child, on a MyDatabase that sets much.
func builtChildren() []Configuration {
	db := &databasev1alpha1.MyDatabase{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "ns", UID: "u-1", Generation: 3},
		Spec: databasev1alpha1.MyDatabaseSpec{
			Replicas:     new(int32(3)),
			User:         "app",
			DatabaseName: "shop",
			Storage:      databasev1alpha1.StorageSpec{Size: resource.MustParse("5Gi"), StorageClassName: new("fast")},
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
	return []Configuration{
		specs.StatefulSet(db, p), specs.ConfigMap(db), specs.HeadlessService(db), specs.ReadWriteService(db),
		specs.ReadOnlyService(db), specs.PodDisruptionBudget(db), specs.NetworkPolicy(db), specs.Lease(db, "", false),
		specs.InstanceServiceAccount(db), specs.InstanceRole(db), specs.InstanceRoleBinding(db),
		specs.UpgradeJob(db, &databasev1alpha1.MajorUpgradeStatus{From: "16", To: "17",
			FromImage: "postgres:16", ToImage: "postgres:17"}, p),
	}
}

// The drift check walks both objects along the desired fields instead of
// reading each whole with the unstructured converter and comparing the
// readings: both ways must give the same verdict on any pair. The pairs
// are each object and its reading, varied on the desired side, the live
// side or both alike (every leaf changed or zeroed, every key dropped,
// every list shortened, a key added), each side typed or unstructured.
// The objects are the typed live objects above and every builder's child
// as its typed kind, which is also compared as its apply configuration.
func TestDisagreementAgreesWithWholeReadings(t *testing.T) {
	type object struct {
		live    client.Object
		applied Configuration
	}
	objects := make([]object, 0, len(liveObjects())+len(builtChildren()))
	for _, live := range liveObjects() {
		objects = append(objects, object{live: live})
	}
	for _, desired := range builtChildren() {
		raw, err := json.Marshal(desired)
		if err != nil {
			t.Fatal(err)
		}
		objects = append(objects, object{live: typed(t, raw), applied: desired})
	}
	pairs, differing := 0, 0
	compare := func(desired, live any, what string) {
		pairs++
		want := map[string]any{}
		for k, v := range wholeReading(t, desired) {
			if k != "apiVersion" && k != "kind" {
				want[k] = v
			}
		}
		agrees := subset(want, wholeReading(t, live))
		if !agrees {
			differing++
		}
		if walked := disagreement(desired, live) == ""; walked != agrees {
			t.Errorf("%s: the walk says %v, the whole readings %v", what, walked, agrees)
		}
	}
	for _, o := range objects {
		reading := wholeReading(t, o.live)
		for name, variant := range variants(reading) {
			what := fmt.Sprintf("%T, %s", o.live, name)
			compare(variant, o.live, what+" desired")
			other := reflect.New(reflect.TypeOf(o.live).Elem()).Interface().(client.Object)
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(variant, other); err != nil {
				continue // a change the type cannot hold
			}
			compare(other, o.live, what+" desired, typed")
			compare(reading, other, what+" live")
			compare(o.live, other, what+" live, typed")
			compare(variant, other, what+" both")
			if o.applied != nil {
				compare(o.applied, other, what+" live, against the apply configuration")
			}
		}
	}
	// Most variants must differ, or the test would compare agreements only.
	if differing < pairs/3 {
		t.Errorf("only %d of %d pairs differ", differing, pairs)
	}
	t.Logf("%d pairs, %d differing", pairs, differing)
}

// wholeReading reads a whole object as the unstructured converter does;
// an unstructured one is its own reading.
func wholeReading(t *testing.T, obj any) map[string]any {
	t.Helper()
	if m, ok := obj.(map[string]any); ok {
		return m
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// subset compares two whole readings: got holds every field of want with
// want's value (numbers by value), lists by prefix. It is the drift
// check as it was before the walk, kept here as its reference.
func subset(want, got any) bool {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return false
		}
		for k, v := range w {
			if !subset(v, g[k]) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) < len(w) {
			return false
		}
		for i := range w {
			if !subset(w[i], g[i]) {
				return false
			}
		}
		return true
	case int64, float64:
		m, _ := readNumber(w)
		n, ok := readNumber(got)
		return ok && m == n
	}
	return want == got
}

func readNumber(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

// variants returns copies of a reading, each with one change, by name.
func variants(reading map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{"itself": runtime.DeepCopyJSON(reading)}
	var walk func(v any, path []any)
	vary := func(path []any, name string, change func(parent any, step any)) {
		c := runtime.DeepCopyJSON(reading)
		var parent any = c
		for _, step := range path[:len(path)-1] {
			parent = child(parent, step)
		}
		change(parent, path[len(path)-1])
		out[fmt.Sprint(name, path)] = c
	}
	walk = func(v any, path []any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				p := append(append([]any{}, path...), k)
				vary(p, "drop ", func(parent, step any) { delete(parent.(map[string]any), step.(string)) })
				walk(e, p)
			}
			if len(path) > 0 {
				vary(append(append([]any{}, path...), "extra"), "add ", func(parent, step any) {
					parent.(map[string]any)[step.(string)] = "x"
				})
			}
		case []any:
			if len(v) > 0 && len(path) > 0 {
				vary(path, "shorten ", func(parent, step any) { setChild(parent, step, v[:len(v)-1]) })
			}
			for i, e := range v {
				walk(e, append(append([]any{}, path...), i))
			}
		default:
			if len(path) > 0 {
				vary(path, "change ", func(parent, step any) { setChild(parent, step, changed(v)) })
				vary(path, "zero ", func(parent, step any) { setChild(parent, step, zero(v)) })
			}
		}
	}
	walk(reading, nil)
	return out
}

// changed is another value of the same type as v.
func changed(v any) any {
	switch v := v.(type) {
	case string:
		return v + "x"
	case int64:
		return v + 1
	case float64:
		return v + 0.5
	case bool:
		return !v
	}
	return "x"
}

// zero is the zero value of v's type, which omitempty leaves out.
func zero(v any) any {
	switch v.(type) {
	case string:
		return ""
	case int64:
		return int64(0)
	case float64:
		return 0.0
	case bool:
		return false
	}
	return nil
}

func child(parent, step any) any {
	if i, ok := step.(int); ok {
		return parent.([]any)[i]
	}
	return parent.(map[string]any)[step.(string)]
}

func setChild(parent, step, value any) {
	if i, ok := step.(int); ok {
		parent.([]any)[i] = value
		return
	}
	parent.(map[string]any)[step.(string)] = value
}
