package contract_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/instance"
	"example.com/myoperator/internal/specs"
)

// The two sides of the environment: a MyDatabase with every feature that
// adds a variable (a backup with retention, custom queries, a restore), and
// one with none.
func full() *databasev1alpha1.MyDatabase {
	db := plain()
	store := databasev1alpha1.ObjectStore{Endpoint: "http://s3:8333", Bucket: "b", Path: "shop/old", Region: "r", CredentialsSecret: "s3"}
	key := &databasev1alpha1.BackupEncryption{Secret: "backup-key"}
	db.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: store,
		Retention: &databasev1alpha1.BackupRetention{RecoveryWindow: "7d", Keep: ptr.To[int32](3)}, Encryption: key,
		Incremental: &databasev1alpha1.IncrementalBackups{FullEvery: 7}}
	db.Spec.Monitoring.CustomQueriesConfigMap = "queries"
	db.Spec.WALStorage = &databasev1alpha1.StorageSpec{}
	db.Spec.Bootstrap = &databasev1alpha1.BootstrapSpec{Recovery: &databasev1alpha1.RecoverySpec{ObjectStore: store, BackupID: "20261203T120000", Encryption: key,
		Target: &databasev1alpha1.RecoveryTarget{Time: &metav1.Time{Time: time.Date(2026, 12, 3, 12, 30, 0, 0, time.UTC)}}}}
	// Not a MyDatabase admission accepts (spec.replica excludes
	// spec.bootstrap), but every variable at once.
	source := store
	source.Path = "prod/orders"
	db.Spec.Replica = &databasev1alpha1.ReplicaSpec{Enabled: true, Source: databasev1alpha1.ReplicaSource{ObjectStore: &source, Encryption: key,
		Streaming: &databasev1alpha1.ReplicaStreaming{Host: "orders-rw.prod.svc", Port: 5433, SecretName: "source-tls"}}}
	return db
}

func plain() *databasev1alpha1.MyDatabase {
	db := &databasev1alpha1.MyDatabase{}
	db.Name, db.Namespace = "orders", "shop"
	db.Spec.User, db.Spec.DatabaseName = "app", "appdb"
	return db
}

// contractNames are the variable names env.go declares: every Env
// constant, and every store prefix with every store suffix.
func contractNames(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "env.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]string{}
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, s := range g.Specs {
				v := s.(*ast.ValueSpec)
				for i, n := range v.Names {
					values[n.Name], _ = strconv.Unquote(v.Values[i].(*ast.BasicLit).Value)
				}
			}
		}
	}
	var names []string
	for c, v := range values {
		switch {
		case len(c) > 3 && c[:3] == "Env":
			names = append(names, v)
		case c == "BackupStore" || c == "RestoreStore" || c == "ReplicaStore":
			for s, suffix := range values {
				if len(s) > 5 && s[:5] == "Store" {
					names = append(names, v+suffix)
				}
			}
		}
	}
	slices.Sort(names)
	return names
}

// TestTheOperatorSetsWhatTheContractNames: every variable the operator
// gives the container is one the contract declares, and every one the
// contract declares is set by the operator, but for the two only test
// harnesses set.
func TestTheOperatorSetsWhatTheContractNames(t *testing.T) {
	declared := contractNames(t)
	set := map[string]bool{}
	dbs := []*databasev1alpha1.MyDatabase{plain(), full()}
	for _, target := range []databasev1alpha1.RecoveryTarget{{LSN: "0/3000060"}, {Name: "before-migration"}, {Immediate: true}} {
		db := full()
		db.Spec.Bootstrap.Recovery.Target = &target
		dbs = append(dbs, db)
	}
	for _, db := range dbs {
		for _, e := range specs.Env(db) {
			if !slices.Contains(declared, *e.Name) {
				t.Errorf("the operator sets %s, which internal/contract does not declare", *e.Name)
			}
			set[*e.Name] = true
		}
	}
	for _, name := range declared {
		if !set[name] && name != contract.EnvKubeconfig && name != contract.EnvFailsafeAddress {
			t.Errorf("internal/contract declares %s, which the operator never sets", name)
		}
	}
}

// TestTheInstanceManagerReadsWhatTheOperatorSets: the instance manager
// reads every variable the operator gives the container, and removes the
// passwords from its own environment.
func TestTheInstanceManagerReadsWhatTheOperatorSets(t *testing.T) {
	db := full()
	setEnv(t, specs.Env(db))
	c, err := instance.ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if c.BootstrapPod != "orders-0" || c.User != "app" || c.Database != "appdb" || c.PGData != specs.PGDATA ||
		c.SocketDir != specs.SocketDir || c.Port != "5432" || c.ConfigDir != specs.ConfigDir || c.Namespace != "shop" ||
		c.LeaseName != "orders-primary" || c.LeaseDuration != specs.DefaultLeaseDurationSeconds*time.Second ||
		c.PodSelector != specs.Selector(db) || c.PasswordSecrets != specs.PasswordSources(db) ||
		c.AdvertiseAddress != "$(POD_NAME).orders-headless.shop.svc:5432" || c.TLSDir != specs.TLSDir || c.ReplicationTLSDir != specs.ReplicationTLSDir ||
		c.MetricsAddress != ":9187" || c.CustomQueries == "" {
		t.Errorf("read %+v", c)
	}
	if c.Password != "secret of POSTGRES_PASSWORD" || c.ReplicationPassword != "secret of REPLICATION_PASSWORD" {
		t.Errorf("passwords %q, %q", c.Password, c.ReplicationPassword)
	}
	if c.Backup == nil || c.Backup.Endpoint != "http://s3:8333" || c.Backup.Path != specs.BackupPath(db) ||
		c.Backup.SecretAccessKey != "secret of BACKUP_SECRET_ACCESS_KEY" || c.Retention.Keep != 3 || c.Retention.Window != 7*24*time.Hour ||
		c.FullEvery != 7 {
		t.Errorf("backup %+v, retention %+v", c.Backup, c.Retention)
	}
	if r := c.Restore; r == nil || r.Store.Path != "shop/old" || r.BackupID != "20261203T120000" ||
		!r.Target.Time.Equal(db.Spec.Bootstrap.Recovery.Target.Time.Time) || r.Store.AccessKeyID != "secret of RESTORE_ACCESS_KEY_ID" {
		t.Errorf("restore %+v", c.Restore)
	}
	if r, s := c.Replica, c.ReplicaStream; r == nil || r.Path != "prod/orders" || r.SecretAccessKey != "secret of REPLICA_SECRET_ACCESS_KEY" ||
		s == nil || s.Host != "orders-rw.prod.svc" || s.Port != "5433" || s.TLSDir != specs.ReplicaSourceTLSDir {
		t.Errorf("replica %+v, stream %+v", c.Replica, c.ReplicaStream)
	}
	for _, v := range []string{contract.EnvPassword, contract.EnvReplicationPassword, contract.BackupStore + contract.StoreSecretAccessKey,
		contract.RestoreStore + contract.StoreSecretAccessKey, contract.ReplicaStore + contract.StoreSecretAccessKey} {
		if _, set := os.LookupEnv(v); set {
			t.Errorf("%s is still in the environment", v)
		}
	}
}

// setEnv sets env as the kubelet would for pod orders-1, with "secret of
// NAME" for each value taken from a Secret.
func setEnv(t *testing.T, env []*corev1ac.EnvVarApplyConfiguration) {
	for _, e := range env {
		switch {
		case e.Value != nil:
			t.Setenv(*e.Name, *e.Value)
		case *e.Name == contract.EnvPodName:
			t.Setenv(*e.Name, "orders-1")
		case *e.Name == contract.EnvNamespace:
			t.Setenv(*e.Name, "shop")
		default:
			t.Setenv(*e.Name, "secret of "+*e.Name)
		}
	}
}

// TestQuorumRoundTrips: what the operator writes on the Lease, the
// instance managers read back.
func TestQuorumRoundTrips(t *testing.T) {
	q := contract.Quorum{Instances: 5, Synchronous: 2, Required: true}
	got, err := contract.ParseQuorum(q.String())
	if err != nil || got != q {
		t.Errorf("ParseQuorum(%s) = %+v, %v", q, got, err)
	}
	if got, err := contract.ParseQuorum(""); err != nil || got != (contract.Quorum{}) {
		t.Errorf("an empty annotation is %+v, %v; want asynchronous", got, err)
	}
}

// TestDeclaredRoundTrips: what the operator writes on the Lease for
// spec.roles and spec.databases (specs.Lease) is what the instance manager
// reads (ParseDeclared), defaults resolved; nothing is written when the
// spec declares nothing.
func TestDeclaredRoundTrips(t *testing.T) {
	until := metav1.NewTime(time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC))
	db := &databasev1alpha1.MyDatabase{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "prod"},
		Spec: databasev1alpha1.MyDatabaseSpec{User: "app", DatabaseName: "app"}}
	if _, ok := specs.Lease(db, "", false).Annotations[contract.AnnotationDeclared]; ok {
		t.Error("a Lease declares roles and databases for a spec without any")
	}
	db.Spec.Roles = []databasev1alpha1.RoleSpec{{Name: "analyst", ValidUntil: &until, InRoles: []string{"pg_monitor"}}}
	db.Spec.Databases = []databasev1alpha1.DatabaseSpec{{Name: "reports", Locale: "C",
		Extensions: []databasev1alpha1.ExtensionSpec{{Name: "vector", Ensure: databasev1alpha1.EnsureAbsent}},
		Subscriptions: []databasev1alpha1.SubscriptionSpec{
			{Name: "stock", Publications: []string{"stock"}, Source: databasev1alpha1.SubscriptionSource{MyDatabase: "warehouse", Database: "inventory"}},
			{Name: "legacy", Publications: []string{"all"}, Source: databasev1alpha1.SubscriptionSource{SecretName: "legacy-db"},
				Enabled: ptr.To(false), Failover: ptr.To(false)}}}}
	got, err := contract.ParseDeclared(specs.Lease(db, "", false).Annotations[contract.AnnotationDeclared])
	if err != nil {
		t.Fatal(err)
	}
	want := contract.Declared{
		Roles: []contract.Role{{Name: "analyst", Login: true, Inherit: true, ConnectionLimit: -1, ValidUntil: &until.Time,
			InRoles: []string{"pg_monitor"}, PasswordSecret: "shop-role-analyst"}},
		Databases: []contract.Database{{Name: "reports", Owner: "app", Locale: "C",
			Extensions: []contract.Extension{{Name: "vector", Absent: true}},
			Subscriptions: []contract.Subscription{
				{Name: "stock", Publications: []string{"stock"}, Secret: "warehouse-role-mydatabase-logical", Database: "inventory",
					Enabled: true, CopyData: true, Failover: true},
				{Name: "legacy", Publications: []string{"all"}, Secret: "legacy-db", CopyData: true}}}},
	}
	if got.String() != want.String() {
		t.Errorf("read back\n%s\nwant\n%s", got, want)
	}
}

// TestMaterial: a report that differs only in WAL positions, storage, time
// or a replica's progress waits for MinInterval; a new role, whether a
// replica MyDatabase streams, and its rejoin are reported at once.
func TestMaterial(t *testing.T) {
	base := contract.Report{Role: databasev1alpha1.RolePrimary, LSN: "0/3000000", Time: time.Now(),
		Replica: &contract.ReplicaState{LastWAL: "000000010000000000000003", Streaming: true}}
	for _, tc := range []struct {
		name   string
		change func(*contract.Report)
		want   bool
	}{
		{"WAL positions and time", func(r *contract.Report) {
			r.LSN, r.Replayed, r.Time = "0/4000000", "0/4000000", r.Time.Add(time.Second)
		}, false},
		{"replay progress", func(r *contract.Report) {
			r.Replica = &contract.ReplicaState{LastWAL: "000000010000000000000004", Streaming: true, SourceLSN: "0/5000000"}
		}, false},
		{"the role", func(r *contract.Report) { r.Role = databasev1alpha1.RoleReplica }, true},
		{"streaming", func(r *contract.Report) { r.Replica = &contract.ReplicaState{LastWAL: "000000010000000000000003"} }, true},
		{"a rejoin", func(r *contract.Report) {
			r.Replica = &contract.ReplicaState{LastWAL: "000000010000000000000003", Streaming: true, Rejoined: "rewound: ..."}
		}, true},
	} {
		next := base
		tc.change(&next)
		if got := base.Material(next); got != tc.want {
			t.Errorf("%s: Material = %t, want %t", tc.name, got, tc.want)
		}
	}
}
