package postgres

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"example.com/myoperator/internal/specs"
)

// TestStopDuringBootstrap stops a new primary (SIGTERM, as the kubelet
// does) at several points of its first start, initdb included: it must
// exit by itself, leave no server running and either no data directory or
// a complete one, and the next start must come up with the database.
func TestStopDuringBootstrap(t *testing.T) {
	t.Parallel() // doc.go: which tests run side by side
	srv := findServers(t)[0]
	db := newDatabase(srv.major, parameters)
	appPassword := "app-password"
	creds := specs.CredentialsSecret(db, appPassword)
	user, dbname := string(creds.Data[specs.SecretUsernameKey]), string(creds.Data[specs.SecretDatabaseKey])
	c := newCluster(t, srv, db, creds)
	p := c.newPod(0, freePorts(t, 1)[0])
	// initdb, the private server and the bootstrap SQL take about 1.5 s here.
	for _, after := range []time.Duration{50 * time.Millisecond, 400 * time.Millisecond, 900 * time.Millisecond,
		1200 * time.Millisecond, 1500 * time.Millisecond, 1800 * time.Millisecond} {
		t.Run(fmt.Sprintf("SIGTERM after %s", after), func(t *testing.T) {
			p.start(t)
			time.Sleep(after)
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(30 * time.Second):
				t.Fatalf("still running 30 s after SIGTERM\n%s", p.log(0))
			}
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("container log:\n%s", p.log(0))
				}
			})
			for _, dir := range []string{p.pgdata(), p.pgdata() + ".init"} {
				if pid := postmasterPID(dir); pid > 0 && syscall.Kill(pid, 0) == nil {
					t.Errorf("a server still runs on %s (pid %d)", dir, pid)
				}
			}
			if _, err := os.Stat(p.pgdata()); err == nil && !fileExists(p.pgdata()+"/PG_VERSION") {
				t.Errorf("%s exists without PG_VERSION: a half-made data directory", p.pgdata())
			}
		})
	}
	p.start(t)
	p.waitReady(t)
	if got := c.query(t, tcp(p.port, user, dbname), appPassword, "SELECT current_user"); got != user {
		t.Fatalf("after the interrupted starts: connected as %q, want %s", got, user)
	}
	p.stop(t)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
