package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/backup"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// TestEncryptedBackups: two databases write the same rows, with a
// distinctive value, into one real S3 server: one to a plain store (the
// control), one encrypted with age. Every object under each path is read
// back raw, as someone with the store's credentials and no key would: the
// value is found in the plain store's objects (raw, or once zstd
// decompressed), in none of the encrypted store's, whose objects are all
// named .age but the manifests. The plain archive, opened as a store
// switched to encryption, reads its plain WAL and keeps refusing to
// overwrite it (switchedStore). A restore with another key fails, naming
// the backup, the Secret and the recipient; after a rotation (a new
// identity first, the old one second, new WAL encrypted to the new one) the
// backup taken with the old key restores to the end of the archive, across
// both keys, with every row.
func TestEncryptedBackups(t *testing.T) {
	t.Parallel() // doc.go: which tests run side by side
	started := time.Now()
	servers := findServers(t)
	srv := servers[len(servers)-1]
	store := startStore(t, t.TempDir())
	oldKey, newKey, otherKey := ageIdentity(t), ageIdentity(t), ageIdentity(t)
	const marker = "zebra-quartz-7731-encrypted-at-rest"
	const password = "password-of-the-source"

	type source struct {
		c      *cluster
		p      *pod
		db     *databasev1alpha1.MyDatabase
		backup backup.Manifest
	}
	var api *testenv.Env
	run := func(ns string, encrypted bool) source {
		db := newDatabase(srv.major, nil)
		db.Namespace = ns
		db.Spec.Backup = &databasev1alpha1.BackupSpec{ObjectStore: objectStoreOf(store)}
		secrets := []*corev1.Secret{specs.CredentialsSecret(db, password), storeSecret(store, ns)}
		if encrypted {
			db.Spec.Backup.Encryption = &databasev1alpha1.BackupEncryption{Secret: "backup-key"}
			secrets = append(secrets, keySecret(ns, "backup-key", oldKey))
		}
		c := newClusterOn(t, api, srv, db, secrets...)
		api = c.api
		p := c.startPods(t, 1)[0]
		app := tcp(p.port, db.Spec.User, db.Spec.DatabaseName)
		c.query(t, app, password, "CREATE TABLE notes (note text)",
			fmt.Sprintf("INSERT INTO notes SELECT '%s ' || n FROM generate_series(1, 100) n", marker))
		m := takeBackup(t, c, p)
		c.query(t, app, password, fmt.Sprintf("INSERT INTO notes VALUES ('after the backup: %s')", marker))
		archiveNow(t, c, p)
		return source{c: c, p: p, db: db, backup: m}
	}
	plain, enc := run("plain", false), run("encrypted", true)
	t.Logf("both databases archived and backed up in %s", time.Since(started).Round(100*time.Millisecond))

	if plain.backup.Encryption != nil {
		t.Errorf("the plain store's manifest records an encryption: %+v", plain.backup.Encryption)
	}
	if e := enc.backup.Encryption; e == nil || e.Recipient != oldKey.Recipient().String() {
		t.Errorf("the encrypted backup's manifest records %+v, want recipient %s", e, oldKey.Recipient())
	}
	s3, err := minio.New(strings.TrimPrefix(store.Endpoint, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4(store.AccessKeyID, store.SecretAccessKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	objects, hits := readRaw(t, s3, store.Bucket, specs.BackupPath(plain.db), marker)
	t.Logf("plain store: %d objects, %d with the row value", len(objects), len(hits))
	if len(hits) == 0 {
		t.Fatalf("the control failed: no object of the plain store holds %q (%v)", marker, objects)
	}
	objects, hits = readRaw(t, s3, store.Bucket, specs.BackupPath(enc.db), marker)
	t.Logf("encrypted store: %d objects, %d with the row value", len(objects), len(hits))
	if len(hits) != 0 {
		t.Errorf("objects of the encrypted store hold the row value: %v", hits)
	}
	var wal, base int
	for _, o := range objects {
		switch {
		case strings.HasSuffix(o, "/backup.json"):
		case !strings.HasSuffix(o, ".age"):
			t.Errorf("%s: an object of the encrypted store not named .age", o)
		case strings.Contains(o, "/wal/"):
			wal++
		case strings.HasSuffix(o, "/base.tar.zst.age"):
			base++
		}
	}
	if wal == 0 || base != 1 {
		t.Errorf("the encrypted store holds %d WAL objects and %d base backups: %v", wal, base, objects)
	}

	t.Run("a store switched to encryption", func(t *testing.T) {
		switchedStore(t, store, specs.BackupPath(plain.db), oldKey)
	})

	recovery := objectStoreOf(store)
	recovery.Path = specs.BackupPath(enc.db)
	withKey := &databasev1alpha1.BackupEncryption{Secret: "backup-key"}
	t.Run("another key", func(t *testing.T) {
		restoreReported(t, srv, enc.c, store, "restore-other-key", &databasev1alpha1.RecoverySpec{ObjectStore: recovery, Encryption: withKey},
			fmt.Sprintf(`base backup %s: no identity in Secret "backup-key" matches its recipient %s`, enc.backup.ID, oldKey.Recipient()),
			keySecret("restore-other-key", "backup-key", otherKey))
	})

	// The rotation: the new identity first, the old one kept second; the
	// kubelet updates the mounted Secret, wal-push reads it at every call.
	rotated := keySecret(enc.db.Namespace, "backup-key", newKey, oldKey)
	enc.p.updateSecret(t, rotated)
	app := tcp(enc.p.port, enc.db.Spec.User, enc.db.Spec.DatabaseName)
	enc.c.query(t, app, password, fmt.Sprintf("INSERT INTO notes VALUES ('after the rotation: %s')", marker))
	last := archiveNow(t, enc.c, enc.p)
	info, err := s3.StatObject(context.Background(), store.Bucket, recovery.Path+"/wal/"+last+".zst.age", minio.StatObjectOptions{})
	if err != nil || info.UserMetadata["Age-Recipient"] != newKey.Recipient().String() {
		t.Errorf("%s after the rotation: recipient %q (%v), want the new key's %s", last, info.UserMetadata["Age-Recipient"], err, newKey.Recipient())
	}

	t.Run("the old key alone stops at the first file of the new one", func(t *testing.T) {
		restoreReported(t, srv, enc.c, store, "restore-old-key-alone",
			&databasev1alpha1.RecoverySpec{ObjectStore: recovery, BackupID: enc.backup.ID, Encryption: withKey},
			`no identity in Secret "backup-key" matches its recipient `+newKey.Recipient().String(),
			keySecret("restore-old-key-alone", "backup-key", oldKey))
	})
	t.Run("after the rotation, the old backup restores to the end", func(t *testing.T) {
		restored := newDatabase(srv.major, nil)
		restored.Name, restored.Namespace = "restored", "restore-rotated"
		restored.Spec.Bootstrap = &databasev1alpha1.BootstrapSpec{Recovery: &databasev1alpha1.RecoverySpec{
			ObjectStore: recovery, BackupID: enc.backup.ID, Encryption: withKey}}
		rc := newClusterOn(t, enc.c.api, srv, restored, specs.CredentialsSecret(restored, "password-of-the-restore"),
			storeSecret(store, restored.Namespace), keySecret(restored.Namespace, "backup-key", newKey, oldKey))
		p := rc.newPod(0, freePorts(t, 1)[0])
		rc.logsOnFailure(t)
		off := p.start(t)
		p.waitReady(t)
		logContains(t, p.log(off), "restoring base backup "+enc.backup.ID, ", encrypted to "+oldKey.Recipient().String()+")", "recovery reached its target and promoted")
		restoredApp := tcp(p.port, restored.Spec.User, restored.Spec.DatabaseName)
		got := rc.query(t, restoredApp, "password-of-the-restore", fmt.Sprintf("SELECT count(*) FILTER (WHERE note LIKE '%s %%'), "+
			"count(*) FILTER (WHERE note LIKE 'after the backup: %%'), count(*) FILTER (WHERE note LIKE 'after the rotation: %%') FROM notes", marker))
		if got != "100|1|1" {
			t.Errorf("restored rows (backup, after it, after the rotation): %s, want 100|1|1", got)
		}
		p.stop(t)
	})
	t.Logf("TestEncryptedBackups took %s", time.Since(started).Round(100*time.Millisecond))
}

// switchedStore opens the plain archive at path as a store switched to
// encryption (with key): it reads the WAL archived in the clear, takes
// the same file again without writing it, refuses other content under
// its name, writes a new file encrypted (.age), which it reads back; a
// store without the key says that file is encrypted, and to whom.
func switchedStore(t *testing.T, store *testenv.ObjectStore, path string, key *age.X25519Identity) {
	ctx := context.Background()
	dir := t.TempDir()
	file := filepath.Join(dir, "identities")
	if err := os.WriteFile(file, keySecret("", "", key).Data[specs.EncryptionIdentitiesKey], 0o400); err != nil {
		t.Fatal(err)
	}
	cfg := backup.Config{Endpoint: store.Endpoint, Bucket: store.Bucket, Path: path, AccessKeyID: store.AccessKeyID,
		SecretAccessKey: store.SecretAccessKey, Encryption: &backup.Encryption{IdentitiesFile: file, Secret: "backup-key"}}
	switched, err := backup.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	plain := openArchive(t, store, path)
	const first = "000000010000000000000001"
	fetched := filepath.Join(dir, first)
	if err := switched.FetchWAL(ctx, first, fetched); err != nil {
		t.Fatalf("the switched store reads %s, archived in the clear: %v", first, err)
	}
	if err := switched.PushWAL(ctx, fetched); err != nil {
		t.Errorf("archiving %s again, unchanged, into the switched store: %v", first, err)
	}
	other := filepath.Join(t.TempDir(), first)
	if err := os.WriteFile(other, []byte("not the archived segment"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := switched.PushWAL(ctx, other); err == nil || !strings.Contains(err.Error(), "already archived with other content") {
		t.Errorf("other content as %s into the switched store: %v, want it refused", first, err)
	}
	const next = "0000000100000000000000F0"
	segment := filepath.Join(dir, next)
	if err := os.WriteFile(segment, []byte("a new segment, after the switch"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := switched.PushWAL(ctx, segment); err != nil {
		t.Fatal(err)
	}
	s3, err := minio.New(strings.TrimPrefix(store.Endpoint, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4(store.AccessKeyID, store.SecretAccessKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{path + "/wal/" + first + ".zst.age": false, path + "/wal/" + next + ".zst.age": true, path + "/wal/" + next + ".zst": false} {
		if _, err := s3.StatObject(ctx, store.Bucket, key, minio.StatObjectOptions{}); (err == nil) != want {
			t.Errorf("%s in the store: %t, want %t", key, err == nil, want)
		}
	}
	if err := switched.FetchWAL(ctx, next, filepath.Join(dir, "back")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "back")); err != nil || string(b) != "a new segment, after the switch" {
		t.Errorf("fetched back %q, %v", b, err)
	}
	err = plain.FetchWAL(ctx, next, filepath.Join(dir, "no-key"))
	if !errors.Is(err, backup.ErrWrongKey) || !strings.Contains(err.Error(), "is encrypted (to recipient "+key.Recipient().String()+")") {
		t.Errorf("a store without the key fetching %s: %v", next, err)
	}
}

// ageIdentity is a new age X25519 identity.
func ageIdentity(t *testing.T) *age.X25519Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// keySecret is an encryption Secret of namespace ns holding ids, in order,
// as age-keygen writes them.
func keySecret(ns, name string, ids ...*age.X25519Identity) *corev1.Secret {
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "# public key: %s\n%s\n", id.Recipient(), id)
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data: map[string][]byte{specs.EncryptionIdentitiesKey: []byte(b.String())}}
}

// readRaw reads every object under path as it is stored, and returns
// their keys and those that hold value: in their raw bytes, or once
// decompressed when they are zstd streams (what anyone with the store's
// credentials and no key can read).
func readRaw(t *testing.T, s3 *minio.Client, bucket, path, value string) (objects, hits []string) {
	t.Helper()
	ctx := context.Background()
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	for obj := range s3.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: path + "/", Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		r, err := s3.GetObject(ctx, bucket, obj.Key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(r)
		_ = r.Close()
		if err != nil {
			t.Fatal(err)
		}
		objects = append(objects, obj.Key)
		plain, _ := dec.DecodeAll(raw, nil)
		if bytes.Contains(raw, []byte(value)) || bytes.Contains(plain, []byte(value)) {
			hits = append(hits, obj.Key)
		}
	}
	return objects, hits
}
