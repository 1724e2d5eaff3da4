package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/backup"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// TestEncryptionOverhead measures what encryption at rest costs a base
// backup: two databases of the same size (pgbench at
// ENCRYPTION_BENCH_SCALE and a table of random text a quarter its size,
// as TestBackupFigures), one backed up to a plain store, one to an
// encrypted one, in the same real S3 server, take base backups in turn
// (`instance backup`, ENCRYPTION_BENCH_ROUNDS each, 3 by default); it logs
// each one's median time and their ratio (docs/backup.md, "Encryption at
// rest"). Skipped without ENCRYPTION_BENCH_SCALE.
func TestEncryptionOverhead(t *testing.T) {
	scale, err := strconv.Atoi(os.Getenv("ENCRYPTION_BENCH_SCALE"))
	if err != nil || scale < 1 {
		t.Skip("ENCRYPTION_BENCH_SCALE is not set")
	}
	rounds := 3
	if n, err := strconv.Atoi(os.Getenv("ENCRYPTION_BENCH_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	servers := findServers(t)
	srv := servers[len(servers)-1]
	store := startStore(t, t.TempDir())
	ctx := context.Background()
	var api *testenv.Env
	start := func(ns string, encrypted bool) (*cluster, *pod) {
		db := newDatabase(srv.major, nil)
		db.Namespace = ns
		db.Spec.Replicas = ptr.To[int32](1)
		db.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: objectStoreOf(store)}
		secrets := []*corev1.Secret{specs.CredentialsSecret(db, "password-of-the-bench"), storeSecret(store, ns)}
		if encrypted {
			db.Spec.Backup.Encryption = &databasev1alpha1.BackupEncryption{Secret: "backup-key"}
			secrets = append(secrets, keySecret(ns, "backup-key", ageIdentity(t)))
		}
		c := newClusterOn(t, api, srv, db, secrets...)
		api = c.api
		c.logsOnFailure(t)
		p := c.startPods(t, 1)[0]
		pg := []string{"-h", p.socketDir(), "-p", strconv.Itoa(p.port), "-U", "postgres"}
		if out, err := c.run(ctx, c.baseEnv(), append(append([]string{"pgbench", "-i", "-q", "-s", strconv.Itoa(scale)}, pg...), "postgres")...); err != nil {
			t.Fatalf("pgbench -i: %v\n%s", err, out)
		}
		c.query(t, p.socket("postgres", "postgres"), "", fmt.Sprintf("CREATE TABLE noise AS SELECT md5(random()::text) || md5(random()::text) AS a FROM generate_series(1, %d)", scale*38000),
			"CHECKPOINT")
		return c, p
	}
	type side struct {
		name  string
		c     *cluster
		p     *pod
		times []time.Duration
		size  int64
	}
	sides := []*side{{name: "plain"}, {name: "encrypted"}}
	for _, s := range sides {
		s.c, s.p = start(s.name, s.name == "encrypted")
	}
	for round := range rounds {
		for _, s := range sides {
			if round > 0 {
				time.Sleep(time.Second) // backup IDs are by the second
			}
			begin := time.Now()
			out, err := s.c.run(ctx, s.p.env, s.c.instanceBin, "backup")
			if err != nil {
				t.Fatalf("instance backup (%s): %v\n%s", s.name, err, out)
			}
			s.times = append(s.times, time.Since(begin))
			var m backup.Manifest
			if err := json.Unmarshal([]byte(out), &m); err != nil {
				t.Fatal(err)
			}
			if (m.Encryption != nil) != (s.name == "encrypted") {
				t.Fatalf("%s backup: encryption %+v", s.name, m.Encryption)
			}
			s.size = m.Size
		}
	}
	median := func(d []time.Duration) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[len(d)/2]
	}
	dbBytes, _ := strconv.ParseInt(sides[0].c.query(t, sides[0].p.socket("postgres", "postgres"), "", "SELECT sum(pg_database_size(oid)) FROM pg_database"), 10, 64)
	lines := make([]string, 0, len(sides))
	for _, s := range sides {
		lines = append(lines, fmt.Sprintf("%s: median %s of %v, %s stored", s.name, median(s.times).Round(10*time.Millisecond), s.times, mib(s.size)))
	}
	t.Logf("PostgreSQL %d, pgbench scale %d and random text (%s of databases), %d rounds:\n%s\nencrypted/plain: %.2f×",
		srv.major, scale, mib(dbBytes), rounds, strings.Join(lines, "\n"),
		median(sides[1].times).Seconds()/median(sides[0].times).Seconds())
}
