package specs

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// ConfigDir is where every pod mounts the ConfigMap's files
// (contract.PostgresConfFile, contract.HBAConfFile).
const (
	ConfigDir     = "/etc/mydatabase"
	containerPort = 5432
)

//go:embed files/pg_hba.conf
var hbaConf string

// defaultParameters are the settings every server starts with; spec.parameters
// override them. Settings the operator cannot let go of (listen_addresses,
// port, wal_level, hot_standby, ...) are refused by the CRD's CEL rules.
var defaultParameters = map[string]string{
	"listen_addresses":    "*",
	"password_encryption": "scram-sha-256",
	"wal_level":           "replica",
	"hot_standby":         "on",
	"max_wal_senders":     "10",
	// Keep enough WAL for a replica that restarts to catch up without a
	// replication slot, bounded so that a 1Gi volume cannot fill with WAL.
	"wal_keep_size":   "128MB",
	"log_destination": "stderr",
	// TLS itself (ssl and the files) is the instance manager's to set.
	"ssl_min_protocol_version": "TLSv1.2",
}

// PostgresConf renders postgresql.conf: the defaults overridden by
// spec.parameters, one quoted setting per line in name order, so that the
// same spec always renders the same bytes (and the same config hash).
func PostgresConf(db *databasev1alpha1.MyDatabase) string {
	params := maps.Clone(defaultParameters)
	if db.Spec.Backup != nil {
		// An idle primary still completes, and so archives, a WAL file
		// this often: the bound on what a lost volume loses, and on how
		// long a backup taken on a replica waits for its last WAL file.
		params["archive_timeout"] = "5min"
	}
	if db.Spec.Replication.Logical {
		params["wal_level"] = "logical"
	}
	if db.Spec.Replica == nil {
		params[retryName] = retryValue
	}
	maps.Copy(params, db.Spec.Parameters)
	var b strings.Builder
	b.WriteString("# Managed by the MyDatabase operator: set spec.parameters instead of editing this file.\n")
	for _, name := range slices.Sorted(maps.Keys(params)) {
		fmt.Fprintf(&b, "%s = %s\n", name, quoteSetting(params[name]))
	}
	return b.String()
}

// quoteSetting quotes a value for postgresql.conf: single quotes doubled,
// backslashes escaped, line breaks escaped so that a value can never start
// a setting of its own.
func quoteSetting(v string) string {
	return "'" + settingEscaper.Replace(v) + "'"
}

// settingEscaper is built once: a Replacer builds its tables on first use,
// and building one per setting was a large part of a reconcile pass's
// allocations (docs/benchmarks.md).
var settingEscaper = strings.NewReplacer(`\`, `\\`, `'`, `''`, "\n", `\n`, "\r", `\r`)

// poolerHBALines admit the poolers' role (contract.PoolerRole) with its
// certificate alone.
const poolerHBALines = `# The poolers' role has no password either: PgBouncer logs in with a
# client certificate from the same CA to look up clients' passwords.
hostssl all          mydatabase_pooler all cert
host    all          mydatabase_pooler all reject
`

// A replica whose WAL stream broke (its primary's server restarted, or a
// new primary was promoted) connects again after
// wal_retrieve_retry_interval, 5 s by default, and with a required quorum
// no commit is acknowledged meanwhile: the 5 s write gaps measured after
// a primary's server restart. A replica MyDatabase, fed from its source's
// archive, keeps the default: each try is a fetch from the object store.
// The setting came in an operator version after MyDatabases existed and
// needs no restart, so ConfigHash leaves it out: an operator upgrade
// restarts no pod for it, and running servers take it at their next
// restart.
const (
	retryName  = "wal_retrieve_retry_interval"
	retryValue = "1s"
)

// ConfigData is the content of the ConfigMap.
func ConfigData(db *databasev1alpha1.MyDatabase) map[string]string {
	return map[string]string{
		contract.PostgresConfFile: PostgresConf(db),
		contract.HBAConfFile:      HBAConf(db),
	}
}

// ConfigHash is a digest of ConfigData. It sits on the pod template, so any
// change to the settings or scripts rolls the pods. pg_hba.conf counts
// without poolerHBALines: they came in an operator version after
// MyDatabases existed, and a server needs only a reload for them (the
// instance manager reloads when pg_hba.conf changes), so an operator
// upgrade that brings them restarts no pod. postgresql.conf counts
// without the default wal_retrieve_retry_interval, for the same reason.
func ConfigHash(db *databasev1alpha1.MyDatabase) string {
	data := ConfigData(db)
	data[contract.HBAConfFile] = strings.Replace(data[contract.HBAConfFile], poolerHBALines, "", 1)
	data[contract.PostgresConfFile] = strings.Replace(data[contract.PostgresConfFile], retryName+" = "+quoteSetting(retryValue)+"\n", "", 1)
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(data)) {
		_, _ = fmt.Fprintf(h, "%s\x00%s\x00", k, data[k]) // a hash.Hash never fails to write
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// ConfigMap holds postgresql.conf, pg_hba.conf and the pod entrypoint.
func ConfigMap(db *databasev1alpha1.MyDatabase) *corev1ac.ConfigMapApplyConfiguration {
	return corev1ac.ConfigMap(ConfigMapName(db), db.Namespace).
		WithLabels(Labels(db, ComponentConfig)).
		WithOwnerReferences(ownerReferenceApply(db)).
		WithData(ConfigData(db))
}
