package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// TestPasswordRotation rotates the application user's password on three
// real servers under their instance managers, with the test in the operator's place (the controller's own
// steps are tested in internal/controller/mydatabase and
// test/reliability): it creates the staging Secret, waits until every
// instance reports that its server accepts it, and only then copies the
// password into the Secret and deletes the staging Secret, as the
// operator does.
func TestPasswordRotation(t *testing.T) {
	t.Parallel() // doc.go: which tests run side by side
	ha := startHA(t, nil)
	c, pods := ha.c, ha.pods
	// The test is the operator here: the real one would finish the
	// rotations it stages as soon as every instance accepts them.
	c.op.stop()
	ctx := context.Background()
	api := c.api.Client
	credsName := specs.GeneratedCredentialsSecretName(c.db)
	user, dbname := c.db.Spec.User, c.db.Spec.DatabaseName
	front := strings.Split(strings.Fields(ha.conninfo)[1], "=")[1]
	app := func(password string) string {
		return fmt.Sprintf("host=127.0.0.1 port=%s user=%s dbname=%s sslmode=disable password=%s connect_timeout=5",
			front, user, dbname, password)
	}
	oldApp := string(c.secrets[credsName].Data[specs.SecretPasswordKey])

	t.Run("application user", func(t *testing.T) {
		const newApp = "rotated-app-password-1"
		staged := stage(t, c, credsName, user, newApp)
		waitAccepted(t, c, pods, staged)
		// PostgreSQL changed first: the Secret still has the old password,
		// which no longer works, and the new one does.
		c.refused(t, app(oldApp), "", "password authentication failed", "SELECT 1")
		if got := c.query(t, app(newApp), "", "SELECT current_user"); got != user {
			t.Fatalf("logged in as %q", got)
		}
		finish(t, c, credsName, staged)
		// A client that reads the Secret again reconnects.
		s := &corev1.Secret{}
		if err := api.Get(ctx, client.ObjectKey{Namespace: c.db.Namespace, Name: credsName}, s); err != nil {
			t.Fatal(err)
		}
		if got := c.query(t, app(string(s.Data[specs.SecretPasswordKey])), "", "SELECT count(*) >= 0 FROM pg_class"); got != "t" {
			t.Fatalf("a client with the Secret's new password read %q", got)
		}
		if !strings.Contains(string(s.Data[specs.SecretURIKey]), ":"+newApp+"@") {
			t.Fatal("the Secret's uri does not carry the new password")
		}
		// The plaintext never reached the server's log: ALTER ROLE was sent
		// with a verifier.
		for _, p := range pods {
			if log := p.log(0); strings.Contains(log, newApp) {
				t.Fatalf("%s's container log holds the new password", p.name)
			}
		}
	})

	t.Run("a new primary finishes a rotation the old one never applied", func(t *testing.T) {
		// The primary is lost at once after the staging Secret appears,
		// before its instance manager could look: the next primary sets it.
		primary := c.labelledPrimary(ctx, pods)
		primary.killContainer(t)
		const newApp = "rotated-app-password-2"
		staged := stage(t, c, credsName, user, newApp)
		var others []*pod
		for _, p := range pods {
			if p != primary {
				others = append(others, p)
			}
		}
		c.waitPrimary(t, others, 3*ha.lease)
		waitAccepted(t, c, others, staged)
		c.query(t, app(newApp), "", "SELECT 1")
		finish(t, c, credsName, staged)
		primary.start(t)
		c.healthy(t, pods)
		waitAccepted(t, c, pods, nil)
	})
}

// stage creates the staging Secret of target, as the operator does.
func stage(t *testing.T, c *cluster, target, role, password string) *corev1.Secret {
	t.Helper()
	s := specs.StagingSecret(c.db, target, role, password, time.Now().UTC().Format(time.RFC3339))
	if err := c.api.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

// waitAccepted waits until each pod reports that its server accepts the
// staging Secret at its resourceVersion (nil: reports nothing pending,
// every staging Secret gone from the reports).
func waitAccepted(t *testing.T, c *cluster, pods []*pod, staged *corev1.Secret) {
	t.Helper()
	eventually(t, 60*time.Second, "every instance accepting the staged password", func() (bool, string) {
		var missing []string
		for _, p := range pods {
			r, err := c.reportOf(p)
			switch {
			case err != nil:
				missing = append(missing, p.name+": "+err.Error())
			case staged == nil && len(r.Passwords) > 0:
				missing = append(missing, fmt.Sprintf("%s still reports %v", p.name, r.Passwords))
			case staged != nil && r.Passwords[staged.Name] != staged.ResourceVersion:
				missing = append(missing, fmt.Sprintf("%s reports %v", p.name, r.Passwords))
			}
		}
		return len(missing) == 0, strings.Join(missing, "; ")
	})
}

// finish copies the staged password into the Secret and deletes the
// staging Secret, the operator's last two steps.
func finish(t *testing.T, c *cluster, target string, staged *corev1.Secret) {
	t.Helper()
	ctx := context.Background()
	s := &corev1.Secret{}
	if err := c.api.Client.Get(ctx, client.ObjectKey{Namespace: c.db.Namespace, Name: target}, s); err != nil {
		t.Fatal(err)
	}
	s.Data = specs.WithPassword(s.Data, string(staged.Data[specs.SecretPasswordKey]))
	if err := c.api.Client.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := c.api.Client.Delete(ctx, staged); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// TestUserSecretPasswordChange: a MyDatabase with its own Secret
// (spec.credentials.secretName). When the user puts a new password in it,
// the primary's instance manager sets it: the old one stops working, the
// new one works on the primary and, replayed, on the replica.
func TestUserSecretPasswordChange(t *testing.T) {
	t.Parallel() // doc.go: which tests run side by side
	servers := findServers(t)
	srv := servers[len(servers)-1]
	db := newDatabase(srv.major, nil)
	db.Spec.Credentials = &databasev1alpha1.CredentialsSpec{SecretName: "shop-owner"}
	const first, second = "first-password-of-the-user", "second-password-of-the-user"
	own := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "shop-owner", Namespace: db.Namespace},
		Data:       map[string][]byte{specs.SecretUsernameKey: []byte(db.Spec.User), specs.SecretPasswordKey: []byte(first)},
	}
	c := newCluster(t, srv, db, own)
	pods := c.startPods(t, 2)
	c.healthy(t, pods)
	app := func(p *pod) string { return tcp(p.port, db.Spec.User, db.Spec.DatabaseName) }
	c.query(t, app(pods[0]), first, "SELECT 1")
	ctx := context.Background()
	live := &corev1.Secret{}
	if err := c.api.Client.Get(ctx, client.ObjectKeyFromObject(own), live); err != nil {
		t.Fatal(err)
	}
	waitAcceptedAt(t, c, pods, live.Name, live.ResourceVersion)

	live.Data[specs.SecretPasswordKey] = []byte(second)
	if err := c.api.Client.Update(ctx, live); err != nil {
		t.Fatal(err)
	}
	waitAcceptedAt(t, c, pods, live.Name, live.ResourceVersion)
	for _, p := range pods {
		c.refused(t, app(p), first, "password authentication failed", "SELECT 1")
		c.query(t, app(p), second, "SELECT 1")
	}
}

// waitAcceptedAt waits until each pod reports that its server accepts the
// password of Secret name at resourceVersion rv.
func waitAcceptedAt(t *testing.T, c *cluster, pods []*pod, name, rv string) {
	t.Helper()
	waitAccepted(t, c, pods, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}})
}
