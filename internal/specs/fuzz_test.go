package specs

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/pki"
)

var confLine = regexp.MustCompile(`^[a-z][a-z0-9_.]* = '([^'\\]|''|\\\\|\\n|\\r)*'$`)

// FuzzBuilders builds every child from random specs: no panic, and every
// result keeps its invariants: the StatefulSet's selector matches its pod
// template, the pods stay restricted, and postgresql.conf has exactly one
// well-formed line per setting whatever the values contain.
// Run longer with: go test ./internal/specs -fuzz FuzzBuilders -fuzztime 60s
func FuzzBuilders(f *testing.F) {
	f.Add("orders", int32(3), "17", "max_connections", "200", "team", "payments", "1Gi", "")
	f.Add("a", int32(1), "15.4", "application_name", "it's\nport = 1", "x", "", "20Gi", "registry/pg:15")
	f.Add("db-1", int32(9), "18", "search_path", `"$user", public\`, "k", "v", "512Mi", "")
	f.Fuzz(func(t *testing.T, name string, replicas int32, version, pkey, pval, lkey, lval, size, image string) {
		q, err := resource.ParseQuantity(size)
		if err != nil {
			t.Skip()
		}
		d := db(func(d *databasev1alpha1.MyDatabase) {
			d.Name, d.Spec.Version, d.Spec.Image = name, version, image
			d.Spec.Replicas = new(replicas)
			d.Spec.Storage.Size = q
			d.Spec.Parameters = map[string]string{pkey: pval}
			d.Spec.PodLabels = map[string]string{lkey: lval}
		})
		for _, child := range []any{ConfigMap(d), HeadlessService(d), ReadWriteService(d), ReadOnlyService(d),
			StatefulSet(d, Platform{}), PodDisruptionBudget(d), CredentialsSecret(d, "pw"), ReplicationCertSecret(d, pki.KeyPair{}, nil)} {
			if _, err := json.Marshal(child); err != nil {
				t.Fatalf("%T does not encode: %v", child, err)
			}
		}
		sts := typed[appsv1.StatefulSet](t, StatefulSet(d, Platform{}))
		for k, v := range sts.Spec.Selector.MatchLabels {
			if sts.Spec.Template.Labels[k] != v {
				t.Fatalf("selector %s=%s does not match the pod template %v", k, v, sts.Spec.Template.Labels)
			}
		}
		if sc := sts.Spec.Template.Spec.SecurityContext; !ptr.Deref(sc.RunAsNonRoot, false) {
			t.Fatal("pod may run as root")
		}
		if !regexp.MustCompile(`^[a-z][a-z0-9_.]*$`).MatchString(pkey) {
			return // the CRD refuses such names; the rest of the conf is checked below anyway
		}
		lines := strings.Split(strings.TrimSuffix(PostgresConf(d), "\n"), "\n")[1:]
		params := map[string]bool{}
		for _, line := range lines {
			if !confLine.MatchString(line) {
				t.Fatalf("malformed postgresql.conf line %q", line)
			}
			name := line[:strings.Index(line, " = ")]
			if params[name] {
				t.Fatalf("setting %s appears twice", name)
			}
			params[name] = true
		}
		if !params[pkey] {
			t.Fatalf("setting %s missing from postgresql.conf", pkey)
		}
	})
}
