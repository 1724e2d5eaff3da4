package reliability

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/myoperator/internal/pki"
	"example.com/myoperator/internal/specs"
)

// secretKey reads one key of a Secret, nil if there is none.
func secretKey(t *testing.T, ns, name, key string) []byte {
	t.Helper()
	s := &corev1.Secret{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		return nil
	}
	return s.Data[key]
}

// Scenario: the operator dies after each write of a certificate renewal
// (the server certificate past two thirds of its life). The restarted one
// reaches the state of an undisturbed renewal: a fresh certificate from
// the same CA, which no crash makes again; no private key in events,
// errors or status.
func TestCrashAtEveryWriteDuringCertificateRenewal(t *testing.T) {
	// age the server certificate of a converged MyDatabase.
	age := func(t *testing.T, ns string) {
		t.Helper()
		s := &corev1.Secret{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "pg-server-tls"}, s); err != nil {
			t.Fatal(err)
		}
		ca := pki.KeyPair{Cert: secretKey(t, ns, "pg-ca", specs.CACertKey), Key: secretKey(t, ns, "pg-ca", specs.CAKeyKey)}
		old, err := pki.NewServer(ca, "pg-rw", []string{"pg-rw"}, time.Date(2025, 11, 1, 0, 0, 0, 0, time.UTC))
		if err != nil {
			t.Fatal(err)
		}
		s.Data[specs.TLSCertKey], s.Data[specs.TLSKeyKey] = old.Cert, old.Key
		if err := env.Client.Update(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	refNS := namespace(t)
	ref := newDB(refNS)
	newOperator(env.Client, env.Client).converge(t, client.ObjectKeyFromObject(ref))
	age(t, refNS)
	newOperator(env.Client, env.Client).converge(t, client.ObjectKeyFromObject(ref))
	want := snapshot(t, refNS)

	for k := 0; ; k++ {
		ns := namespace(t)
		db := newDB(ns)
		key := client.ObjectKeyFromObject(db)
		newOperator(env.Client, env.Client).converge(t, key)
		caKey := secretKey(t, ns, "pg-ca", specs.CAKeyKey)
		age(t, ns)
		crashed := runUntilCrash(key, k)
		o := newOperator(env.Client, env.Client)
		o.converge(t, key)
		if diff := cmp.Diff(want, snapshot(t, ns)); diff != "" {
			t.Fatalf("crash after write %d of the renewal: end state differs from an undisturbed one (-want +got):\n%s", k, diff)
		}
		if !bytes.Equal(secretKey(t, ns, "pg-ca", specs.CAKeyKey), caKey) {
			t.Fatalf("crash after write %d of the renewal: the CA was made again", k)
		}
		assertNoLeak(t, o, key, string(caKey), string(secretKey(t, ns, "pg-server-tls", specs.TLSKeyKey)))
		if !crashed {
			t.Logf("a renewal takes %d writes; crashed after each of them", k)
			if k < 1 {
				t.Fatal("the renewal wrote nothing: the crash points were not exercised")
			}
			return
		}
	}
}
