package mydatabase

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// TestArchivingCondition: status.backup and ContinuousArchiving follow
// what the primary reports; a failure says what failed, and why.
func TestArchivingCondition(t *testing.T) {
	ns := namespace(t)
	key := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3-key"},
		Data: map[string][]byte{specs.ObjectStoreAccessKeyIDKey: []byte("AKID"), specs.ObjectStoreSecretAccessKeyKey: []byte("the secret key")}}
	if err := k8s.Create(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	db := create(t, newDB(ns, "wal", func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: databasev1alpha1.ObjectStore{
			Endpoint: "https://s3.example.com", Bucket: "backups", CredentialsSecret: "s3-key"}}
	}))
	eventually(t, "the StatefulSet", exists(ns, "wal", &appsv1.StatefulSet{}))
	instancePod(t, db, "wal-0", "r1", databasev1alpha1.RolePrimary, "0/5000100")
	holdLease(t, db, "wal-0")
	markReady(t, db)
	waitFor(t, db, "Ready", phaseIs(databasev1alpha1.PhaseReady))
	archived := func(c *metav1.Condition, status metav1.ConditionStatus, reason, text string) error {
		if c == nil || c.Status != status || c.Reason != reason || !strings.Contains(c.Message, text) {
			return fmt.Errorf("ContinuousArchiving %+v, want %s %s mentioning %q", c, status, reason, text)
		}
		return nil
	}
	waitFor(t, db, "Pending until the primary reports", func(db *databasev1alpha1.MyDatabase) error {
		return archived(condition(db, databasev1alpha1.ConditionContinuousArchiving), metav1.ConditionUnknown, databasev1alpha1.ReasonArchivingPending, "not reported")
	})
	at := time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)
	later := at.Add(time.Minute)
	publishReport(t, ns, "wal-0", contract.Report{Role: databasev1alpha1.RolePrimary, Ready: true, Time: time.Now().UTC(),
		Archive: &contract.Archive{LastArchivedWAL: "000000010000000000000004", LastArchivedTime: &at,
			LastFailedWAL: "000000010000000000000005", LastFailedTime: &later, Error: "dial tcp 10.0.0.9:443: connect: connection refused"}})
	waitFor(t, db, "ArchivingFailing with the cause", func(db *databasev1alpha1.MyDatabase) error {
		if err := archived(condition(db, databasev1alpha1.ConditionContinuousArchiving), metav1.ConditionFalse,
			databasev1alpha1.ReasonArchivingFailing, "000000010000000000000005 could not be archived to https://s3.example.com"); err != nil {
			return err
		}
		if !strings.Contains(condition(db, databasev1alpha1.ConditionContinuousArchiving).Message, "connection refused") {
			return fmt.Errorf("the message lacks the cause")
		}
		if b := db.Status.Backup; b == nil || b.LastArchivedWAL != "000000010000000000000004" || b.LastFailedWAL != "000000010000000000000005" {
			return fmt.Errorf("status.backup %+v", b)
		}
		return nil
	})
	if c := condition(db, databasev1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("a failing archive changed Ready: %+v", c)
	}
	latest := later.Add(time.Minute)
	publishReport(t, ns, "wal-0", contract.Report{Role: databasev1alpha1.RolePrimary, Ready: true, Time: time.Now().UTC(),
		Archive: &contract.Archive{LastArchivedWAL: "000000010000000000000005", LastArchivedTime: &latest,
			LastFailedWAL: "000000010000000000000005", LastFailedTime: &later,
			Backups: &contract.Backups{Count: 2, LastID: "20261201T040000Z", LastTime: &later, FirstRecoverableTime: &at}}})
	waitFor(t, db, "Archiving again, with the backups", func(db *databasev1alpha1.MyDatabase) error {
		if err := archived(condition(db, databasev1alpha1.ConditionContinuousArchiving), metav1.ConditionTrue,
			databasev1alpha1.ReasonArchiving, "000000010000000000000005"); err != nil {
			return err
		}
		if b := db.Status.Backup; b == nil || b.Backups != 2 || b.LastBackupID != "20261201T040000Z" ||
			b.LastBackupTime == nil || !b.LastBackupTime.Time.Equal(later) || b.FirstRecoverabilityPoint == nil || !b.FirstRecoverabilityPoint.Time.Equal(at) {
			return fmt.Errorf("status.backup %+v", b)
		}
		return nil
	})
}

// TestObjectStoreCredentials: spec.backup naming a credentials Secret that
// does not exist, or lacks a key, stalls the MyDatabase before any pod is
// made; once the Secret is whole, the servers get the store in their
// environment, the secret key only by reference.
func TestObjectStoreCredentials(t *testing.T) {
	ns := namespace(t)
	db := create(t, newDB(ns, "arch", func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: databasev1alpha1.ObjectStore{
			Endpoint: "https://s3.example.com", Bucket: "backups", CredentialsSecret: "s3-key"}}
	}))
	waitFor(t, db, "Stalled: no Secret", stalledWith(databasev1alpha1.ReasonObjectStoreCredentials, `"s3-key"`))
	if err := get(ns, "arch", &appsv1.StatefulSet{}); err == nil {
		t.Error("a StatefulSet exists although its object store's Secret does not")
	}
	key := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3-key"},
		Data: map[string][]byte{specs.ObjectStoreAccessKeyIDKey: []byte("AKID")}}
	if err := k8s.Create(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	waitFor(t, db, "Stalled: a key missing", stalledWith(databasev1alpha1.ReasonObjectStoreCredentials, specs.ObjectStoreSecretAccessKeyKey))
	key.Data[specs.ObjectStoreSecretAccessKeyKey] = []byte("the secret key")
	if err := k8s.Update(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	sts := &appsv1.StatefulSet{}
	eventually(t, "the StatefulSet", exists(ns, "arch", sts))
	env := map[string]corev1.EnvVar{}
	for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	if env["BACKUP_ENDPOINT"].Value != "https://s3.example.com" || env["BACKUP_BUCKET"].Value != "backups" || env["BACKUP_PATH"].Value != ns+"/arch" {
		t.Errorf("the store in the environment: %+v %+v %+v", env["BACKUP_ENDPOINT"], env["BACKUP_BUCKET"], env["BACKUP_PATH"])
	}
	if ref := env["BACKUP_SECRET_ACCESS_KEY"].ValueFrom; ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != "s3-key" ||
		env["BACKUP_SECRET_ACCESS_KEY"].Value != "" {
		t.Errorf("the secret key is not a reference to the Secret: %+v", env["BACKUP_SECRET_ACCESS_KEY"])
	}
}

// TestBackupEncryptionKey: spec.backup.encryption naming a Secret that
// does not exist, lacks the key identities, or holds no age identity
// there stalls the MyDatabase before any pod is made, and the message
// never quotes the key; once the key is good, the servers mount it as a
// file and take no value of it in their environment.
func TestBackupEncryptionKey(t *testing.T) {
	ns := namespace(t)
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3-key"}, Data: map[string][]byte{
		specs.ObjectStoreAccessKeyIDKey: []byte("AKID"), specs.ObjectStoreSecretAccessKeyKey: []byte("the secret key")}}
	if err := k8s.Create(context.Background(), creds); err != nil {
		t.Fatal(err)
	}
	db := create(t, newDB(ns, "enc", func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: databasev1alpha1.ObjectStore{
			Endpoint: "https://s3.example.com", Bucket: "backups", CredentialsSecret: "s3-key"},
			Encryption: &databasev1alpha1.BackupEncryption{Secret: "enc-backup-key"}}
	}))
	waitFor(t, db, "Stalled: no encryption Secret", stalledWith(databasev1alpha1.ReasonBackupEncryptionKey,
		`Secret "enc-backup-key" named in spec.backup.encryption.secret does not exist`))
	if err := get(ns, "enc", &appsv1.StatefulSet{}); err == nil {
		t.Error("a StatefulSet exists although its encryption Secret does not")
	}
	key := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "enc-backup-key"},
		Data: map[string][]byte{"key.txt": []byte("misplaced")}}
	if err := k8s.Create(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	waitFor(t, db, "Stalled: no key identities", stalledWith(databasev1alpha1.ReasonBackupEncryptionKey, "lacks the key identities"))
	key.Data[specs.EncryptionIdentitiesKey] = []byte("AGE-SECRET-KEY-1SECRETBUTMALFORMED\n")
	if err := k8s.Update(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	waitFor(t, db, "Stalled: not an identity", stalledWith(databasev1alpha1.ReasonBackupEncryptionKey, "line 1 is not an age X25519 identity"))
	if err := get(ns, "enc", db); err != nil {
		t.Fatal(err)
	}
	if c := condition(db, databasev1alpha1.ConditionStalled); c != nil && strings.Contains(c.Message, "SECRETBUTMALFORMED") {
		t.Errorf("the condition quotes the key: %s", c.Message)
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	key.Data[specs.EncryptionIdentitiesKey] = []byte("# created by the test\n" + id.String() + "\n")
	if err := k8s.Update(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	sts := &appsv1.StatefulSet{}
	eventually(t, "the StatefulSet", exists(ns, "enc", sts))
	pod := sts.Spec.Template.Spec
	var mounted bool
	for _, v := range pod.Volumes {
		mounted = mounted || (v.Secret != nil && v.Secret.SecretName == "enc-backup-key")
	}
	if !mounted {
		t.Error("the encryption Secret is not a volume of the pod")
	}
	for _, e := range pod.Containers[0].Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == "enc-backup-key" {
			t.Errorf("env %s takes a value of the encryption Secret", e.Name)
		}
	}
}

// TestReplicaSourceChecks: a replica MyDatabase whose own spec.backup
// would archive into the archive its source is read from stalls
// (ReplicaArchiveClash); one whose streaming Secret is missing, or lacks
// a key, stalls (ReplicaSourceSecretInvalid) before any pod is made; once
// the Secret is whole, the servers get the source's host, port and the
// Secret's volume.
func TestReplicaSourceChecks(t *testing.T) {
	ns := namespace(t)
	store := databasev1alpha1.ObjectStore{Endpoint: "https://s3.example.com", Bucket: "backups", CredentialsSecret: "s3-key"}
	if err := k8s.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3-key"},
		Data: map[string][]byte{specs.ObjectStoreAccessKeyIDKey: []byte("AKID"), specs.ObjectStoreSecretAccessKeyKey: []byte("key")}}); err != nil {
		t.Fatal(err)
	}
	clash := create(t, newDB(ns, "clash", func(db *databasev1alpha1.MyDatabase) {
		source := store
		source.Path = ns + "/clash" // its own default spec.backup path
		db.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: store}
		db.Spec.Replica = &databasev1alpha1.ReplicaSpec{Enabled: true, Source: databasev1alpha1.ReplicaSource{ObjectStore: &source}}
	}))
	waitFor(t, clash, "Stalled: its archive is its source's", stalledWith(databasev1alpha1.ReasonReplicaArchiveClash, "backups/"+ns+"/clash"))

	db := create(t, newDB(ns, "dr", func(db *databasev1alpha1.MyDatabase) {
		db.Spec.Replica = &databasev1alpha1.ReplicaSpec{Enabled: true, Source: databasev1alpha1.ReplicaSource{
			Streaming: &databasev1alpha1.ReplicaStreaming{Host: "shop-rw.prod.svc", Port: 5433, SecretName: "shop-source"}}}
	}))
	waitFor(t, db, "Stalled: no streaming Secret", stalledWith(databasev1alpha1.ReasonReplicaSourceSecretInvalid, `"shop-source"`))
	if err := get(ns, "dr", &appsv1.StatefulSet{}); err == nil {
		t.Error("a StatefulSet exists although the streaming Secret does not")
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop-source"},
		Data: map[string][]byte{specs.TLSCertKey: []byte("cert"), specs.TLSKeyKey: []byte("key")}}
	if err := k8s.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	waitFor(t, db, "Stalled: a key missing", stalledWith(databasev1alpha1.ReasonReplicaSourceSecretInvalid, specs.CACertKey))
	secret.Data[specs.CACertKey] = []byte("ca")
	if err := k8s.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	sts := &appsv1.StatefulSet{}
	eventually(t, "the StatefulSet", exists(ns, "dr", sts))
	env := map[string]string{}
	for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env[contract.EnvReplicaStreamHost] != "shop-rw.prod.svc" || env[contract.EnvReplicaStreamPort] != "5433" ||
		env[contract.EnvReplicaStreamTLSDir] != specs.ReplicaSourceTLSDir {
		t.Errorf("the source in the environment: %v", env)
	}
	mounted := false
	for _, v := range sts.Spec.Template.Spec.Volumes {
		mounted = mounted || (v.Secret != nil && v.Secret.SecretName == "shop-source")
	}
	if !mounted {
		t.Error("the streaming Secret is no volume of the pods")
	}
}
