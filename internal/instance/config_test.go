/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package instance

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// TestConfigFromEnvReadsWhatSpecsSets checks that the instance manager reads
// every variable internal/specs gives the container, and removes the
// passwords from its own environment.
func TestConfigFromEnvReadsWhatSpecsSets(t *testing.T) {
	db := &databasev1alpha1.MyDatabase{}
	db.Name, db.Namespace = "orders", "shop"
	db.Spec.User, db.Spec.DatabaseName = "app", "appdb"
	for _, e := range specs.Env(db) {
		switch {
		case e.Value != nil:
			t.Setenv(*e.Name, *e.Value)
		case *e.Name == "POD_NAME":
			t.Setenv(*e.Name, "orders-1")
		case *e.Name == "NAMESPACE":
			t.Setenv(*e.Name, "shop")
		default: // the Secrets' values
			t.Setenv(*e.Name, "secret of "+*e.Name)
		}
	}
	c, err := ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if c.BootstrapPod != "orders-0" || c.User != "app" || c.Database != "appdb" || c.PGData != specs.PGDATA ||
		c.LeaseName != "orders-primary" || c.LeaseDuration != specs.DefaultLeaseDurationSeconds*time.Second ||
		c.AdvertiseAddress != "$(POD_NAME).orders-headless.shop.svc:5432" || c.TLSDir != specs.TLSDir || c.ReplicationTLSDir != specs.ReplicationTLSDir {
		t.Errorf("read %+v", c)
	}
	if c.Password != "secret of POSTGRES_PASSWORD" || c.ReplicationPassword != "secret of REPLICATION_PASSWORD" {
		t.Errorf("passwords %q, %q", c.Password, c.ReplicationPassword)
	}
	for _, v := range secretVars {
		if _, set := os.LookupEnv(v); set {
			t.Errorf("%s is still in the environment", v)
		}
	}
}

func TestConfigFromEnvNamesWhatIsMissing(t *testing.T) {
	for _, v := range []string{"POD_NAME", "PGDATA", "PGHOST", "PGPORT", "CONFIG_DIR", "POSTGRES_USER", "POSTGRES_DB",
		"POSTGRES_PASSWORD", "REPLICATION_TLS_DIR", "BOOTSTRAP_POD", "NAMESPACE", "LEASE_NAME", "POD_SELECTOR",
		"ADVERTISE_ADDRESS", "LEASE_DURATION_SECONDS"} {
		t.Setenv(v, "x")
	}
	t.Setenv("PGDATA", "")
	t.Setenv("REPLICATION_TLS_DIR", "")
	t.Setenv("REPLICATION_PASSWORD", "") // optional: a MyDatabase made before replication by certificate
	_, err := ConfigFromEnv()
	if err == nil || err.Error() != "the container environment lacks PGDATA, REPLICATION_TLS_DIR" {
		t.Fatalf("error %v", err)
	}
}

// TestConfigFilesAreTheConfigMaps: the server reads the files the operator
// writes into its ConfigMap.
func TestConfigFilesAreTheConfigMaps(t *testing.T) {
	if postgresConf != specs.PostgresConfKey || hbaConf != specs.HBAConfKey {
		t.Errorf("the instance manager reads %s and %s, the ConfigMap holds %s and %s",
			postgresConf, hbaConf, specs.PostgresConfKey, specs.HBAConfKey)
	}
}

// TestPassfileEscapes checks the libpq password file format: a backslash
// and a colon in the password are escaped, the file is the owner's only.
func TestPassfileEscapes(t *testing.T) {
	c := Config{SocketDir: t.TempDir(), ReplicationPassword: `a:b\c`}
	if err := c.writePassfile(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(c.SocketDir, ".pgpass-replication"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `*:*:*:replicator:a\:b\\c`+"\n"; got != want {
		t.Errorf("passfile %q, want %q", got, want)
	}
	fi, _ := os.Stat(c.passfile())
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("passfile mode %v, want 0600", fi.Mode().Perm())
	}
}
