package specs

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

func TestHBARequiresTLSWhenAsked(t *testing.T) {
	if !strings.Contains(hbaConf, clientHBALine) {
		t.Fatalf("pg_hba.conf lacks the clients' line %q, which Required turns into hostssl", clientHBALine)
	}
	if got := HBAConf(db()); got != hbaConf {
		t.Error("clients Allowed changed pg_hba.conf")
	}
	required := HBAConf(db(func(d *databasev1alpha1.MyDatabase) { d.Spec.TLS.Clients = databasev1alpha1.TLSClientsRequired }))
	var clients []string
	for line := range strings.Lines(required) {
		if f := strings.Fields(line); len(f) == 5 && f[1] == "all" && f[2] == "all" {
			clients = append(clients, f[0]+" "+f[4])
		}
	}
	// pg_hba.conf is read top down: the plain connection is refused before
	// anything could accept it.
	if want := []string{"hostnossl reject", "hostssl scram-sha-256"}; !slices.Equal(clients, want) {
		t.Errorf("client lines with clients Required: %v, want %v", clients, want)
	}
}

func TestServerDNSNames(t *testing.T) {
	d := db(func(d *databasev1alpha1.MyDatabase) { d.Spec.Replicas = ptr.To[int32](2) })
	names := ServerDNSNames(d)
	for _, want := range []string{"orders-rw", "orders-rw.shop", "orders-rw.shop.svc", "orders-ro.shop.svc.cluster.local",
		"orders-headless.shop.svc", "orders-0.orders-headless.shop.svc", "orders-1.orders-headless"} {
		if !slices.Contains(names, want) {
			t.Errorf("no %s in %v", want, names)
		}
	}
	if len(names) != 4*5 {
		t.Errorf("%d names, want 4 forms of 3 Services and 2 pods", len(names))
	}
}

func TestWithVerifyFull(t *testing.T) {
	got := string(WithVerifyFull([]byte("postgresql://app:p%40ss@orders-rw.shop.svc:5432/app")))
	if got != "postgresql://app:p%40ss@orders-rw.shop.svc:5432/app?sslmode=verify-full" {
		t.Errorf("got %s", got)
	}
	if got := string(WithVerifyFull([]byte(got))); strings.Count(got, "sslmode") != 1 {
		t.Errorf("twice: %s", got)
	}
}
