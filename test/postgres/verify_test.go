package postgres

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"

	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
	"example.com/myoperator/internal/testenv"
)

// TestVerifyBackup runs `instance verify` as a verification pod would,
// against a base backup and the archive after it in the real S3 store:
//   - intact, it is Passed: recovery went past the backup's end and past
//     the last rows archived, and pg_amcheck checked every database;
//   - one byte flipped in a WAL file after the backup, or in the base
//     backup's object: Failed, the message naming that object;
//   - a backup ID the store does not list: Failed; credentials the store
//     refuses: Error, and no secret in what it says;
//   - encrypted: Passed with the key, Failed with another, naming the
//     Secret.
//
// No run writes anything to the store.
func TestVerifyBackup(t *testing.T) {
	t.Parallel() // doc.go: which tests run side by side
	servers := findServers(t)
	srv := servers[len(servers)-1]
	store := startStore(t, t.TempDir())
	c, primary, insert := archivingSource(t, srv, store, nil)
	su := primary.socket("postgres", "postgres")
	insert("before", 100)
	base := takeBackup(t, c, primary)
	insert("middle", 50)
	middle := archiveNow(t, c, primary)
	insert("after", 30)
	lastRows := c.query(t, su, "", "SELECT pg_current_wal_lsn()")
	archiveNow(t, c, primary)
	databases := c.query(t, su, "", "SELECT count(*) FROM pg_database WHERE datallowconn")
	stampedFile := c.query(t, su, "", "SELECT pg_relation_filepath('stamped')")
	// Stopped, the source archives nothing more: the store changes only
	// by what a verification would write.
	primary.stop(t)
	path := specs.BackupPath(c.db)
	env := func(more ...string) []string {
		return append(restoreEnv(store, path, base.ID), more...)
	}

	t.Run("intact: Passed", func(t *testing.T) {
		v, code, _ := verifyRun(t, c, store, env())
		if v.Result != contract.VerificationPassed || code != 0 {
			t.Fatalf("%s, exit %d: %s", v.Result, code, v.Message)
		}
		if v.BackupID != base.ID {
			t.Errorf("verified backup %q, want %s", v.BackupID, base.ID)
		}
		for what, lsn := range map[string]string{"the backup's end": base.EndLSN, "the last rows archived": lastRows} {
			if !lsnAtLeast(t, v.ReachedLSN, lsn) {
				t.Errorf("recovery reached %s, before %s (%s)", v.ReachedLSN, what, lsn)
			}
		}
		if fmt.Sprint(v.Databases) != databases {
			t.Errorf("pg_amcheck checked %d databases, the source has %s", v.Databases, databases)
		}
		if v.Started.IsZero() || v.Stopped.Before(v.Started) {
			t.Errorf("started %s, stopped %s", v.Started, v.Stopped)
		}
		t.Logf("Passed in %s: %s", v.Stopped.Sub(v.Started).Round(time.Millisecond), v.Message)
	})

	t.Run("a WAL file after the backup damaged: Failed", func(t *testing.T) {
		key := path + "/wal/" + middle + ".zst"
		flipByte(t, store, key)
		defer flipByte(t, store, key) // flipped back
		failedNaming(t, c, store, env(), "WAL file "+middle)
	})

	t.Run("the base backup's object damaged: Failed", func(t *testing.T) {
		key := path + "/base/" + base.ID + "/base.tar.zst"
		flipByte(t, store, key)
		defer flipByte(t, store, key)
		failedNaming(t, c, store, env(), key)
	})

	t.Run("the end of the base backup's object damaged: Failed", func(t *testing.T) {
		// The last byte is zstd's checksum, read only past the tar stream's
		// end: a restore that stops at the end of the tar stream takes
		// the object as intact.
		key := path + "/base/" + base.ID + "/base.tar.zst"
		defer rewriteObject(t, store, key, func(b []byte) []byte { b[len(b)-1] ^= 0x40; return b })()
		failedNaming(t, c, store, env(), key)
	})

	t.Run("a file of the base backup changed: Failed", func(t *testing.T) {
		// Compressed again, the object decompresses: only the backup's
		// own manifest (pg_verifybackup) tells the file changed.
		key := path + "/base/" + base.ID + "/base.tar.zst"
		defer rewriteObject(t, store, key, func(b []byte) []byte { return changeTarFile(t, b, stampedFile) })()
		v, _ := failedNaming(t, c, store, env(), stampedFile)
		if !strings.Contains(v.Message, "backup_manifest") {
			t.Errorf("the message does not say the file differs from the backup's manifest: %s", v.Message)
		}
	})

	t.Run("a backup the store does not list: Failed", func(t *testing.T) {
		failedNaming(t, c, store, restoreEnv(store, path, "20000101T000000Z"), `no backup "20000101T000000Z"`)
	})

	t.Run("credentials the store refuses: Error", func(t *testing.T) {
		const wrong = "not-the-secret-3f9a7c"
		v, code, log := verifyRun(t, c, store, env(contract.RestoreStore+contract.StoreSecretAccessKey+"="+wrong))
		if v.Result != contract.VerificationError || code != 2 {
			t.Fatalf("%s, exit %d: %s", v.Result, code, v.Message)
		}
		for _, secret := range []string{wrong, store.SecretAccessKey} {
			if strings.Contains(log, secret) {
				t.Errorf("a secret key is in the output:\n%s", log)
			}
		}
		t.Logf("Error: %s", v.Message)
	})

	t.Run("encrypted: Passed with the key, Failed with another", func(t *testing.T) {
		testVerifyEncrypted(t, srv)
	})
}

// testVerifyEncrypted verifies an encrypted backup with the key it was
// encrypted to, and with another, named as a Secret would name it.
func testVerifyEncrypted(t *testing.T, srv server) {
	key, other := newIdentity(t), newIdentity(t)
	store := startStore(t, t.TempDir())
	c, primary, insert := archivingSource(t, srv, store, key)
	insert("before", 100)
	base := takeBackup(t, c, primary)
	insert("after", 30)
	archiveNow(t, c, primary)
	primary.stop(t)
	env := append(restoreEnv(store, specs.BackupPath(c.db), base.ID), contract.RestoreStore+contract.StoreEncryptionSecret+"=backup-key")

	right := contract.RestoreStore + contract.StoreIdentitiesFile + "=" + primary.getenv("BACKUP_IDENTITIES_FILE")
	v, code, _ := verifyRun(t, c, store, append(slices.Clone(env), right))
	if v.Result != contract.VerificationPassed || code != 0 {
		t.Fatalf("with the key: %s, exit %d: %s", v.Result, code, v.Message)
	}

	file := filepath.Join(c.base, "other-key")
	if err := os.WriteFile(file, fmt.Appendf(nil, "# public key: %s\n%s\n", other.Recipient(), other), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(file, c.user.uid, c.user.gid); err != nil {
		t.Fatal(err)
	}
	v, log := failedNaming(t, c, store, append(slices.Clone(env), contract.RestoreStore+contract.StoreIdentitiesFile+"="+file),
		`Secret "backup-key"`)
	if strings.Contains(log, other.String()) || strings.Contains(log, key.String()) {
		t.Errorf("an identity is in the output:\n%s", log)
	}
	if !strings.Contains(v.Message, key.Recipient().String()) {
		t.Errorf("the message does not name the recipient the backup is encrypted to (%s): %s", key.Recipient(), v.Message)
	}
}

func newIdentity(t *testing.T) *age.X25519Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// restoreEnv is the store and backup of a verification, as the RESTORE_
// variables of a restore name them.
func restoreEnv(store *testenv.ObjectStore, path, id string) []string {
	r := contract.RestoreStore
	return []string{r + contract.StoreEndpoint + "=" + store.Endpoint, r + contract.StoreBucket + "=" + store.Bucket,
		r + contract.StorePath + "=" + path, r + contract.StoreAccessKeyID + "=" + store.AccessKeyID,
		r + contract.StoreSecretAccessKey + "=" + store.SecretAccessKey, contract.EnvRestoreBackupID + "=" + id}
}

// failedNaming runs a verification that must be Failed (exit 1), its
// message holding says; it returns the result and the output.
func failedNaming(t *testing.T, c *cluster, store *testenv.ObjectStore, env []string, says string) (contract.Verification, string) {
	t.Helper()
	v, code, log := verifyRun(t, c, store, env)
	if v.Result != contract.VerificationFailed || code != 1 {
		t.Fatalf("%s, exit %d, want Failed, exit 1: %s", v.Result, code, v.Message)
	}
	if !strings.Contains(v.Message, says) {
		t.Fatalf("the message does not say %q: %s", says, v.Message)
	}
	t.Logf("Failed in %s: %s", v.Stopped.Sub(v.Started).Round(time.Millisecond), v.Message)
	return v, log
}

// verifyRun runs `instance verify` as the postgres OS user with env, an
// empty PGDATA and a result file of its own, and returns its result (the
// file's, which must be what it printed), its exit code and all it
// wrote. The store must hold the same objects after as before.
func verifyRun(t *testing.T, c *cluster, store *testenv.ObjectStore, env []string) (contract.Verification, int, string) {
	t.Helper()
	dir, err := os.MkdirTemp(c.base, "verify-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, c.user.uid, c.user.gid); err != nil {
		t.Fatal(err)
	}
	result := filepath.Join(dir, "termination-log")
	env = append([]string{"PATH=" + c.srv.bin + ":/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + dir,
		contract.EnvPodName + "=verify", contract.EnvPGData + "=" + filepath.Join(dir, "pgdata"),
		contract.EnvVerifyResultFile + "=" + result}, env...)
	before := storeObjects(t, store)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	argv := append(slices.Clone(c.user.wrap), c.instanceBin, contract.VerifyCommand)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	code := 0
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("instance verify: %v\n%s", err, stderr.String())
	}
	log := stdout.String() + stderr.String()
	written, err := os.ReadFile(result)
	if err != nil {
		t.Fatalf("instance verify (exit %d) wrote no result: %v\n%s", code, err, log)
	}
	if !bytes.Equal(written, stdout.Bytes()) {
		t.Errorf("it printed %q, and wrote %q", stdout.String(), written)
	}
	if len(written) > 4096 {
		t.Errorf("the result is %d bytes, more than a termination message holds", len(written))
	}
	var v contract.Verification
	if err := json.Unmarshal(written, &v); err != nil {
		t.Fatalf("the result %q: %v\n%s", written, err, log)
	}
	if want := contract.VerificationExitCode[v.Result]; code != want {
		t.Errorf("%s, exit %d, want %d", v.Result, code, want)
	}
	if after := storeObjects(t, store); !maps.Equal(before, after) {
		t.Errorf("the verification changed the store:\nbefore %v\nafter  %v", before, after)
	}
	if t.Failed() || v.Result != contract.VerificationPassed {
		t.Logf("instance verify's output:\n%s", stderr.String())
	}
	return v, code, log
}

// storeObjects is every object of the store's bucket, by key, with its
// ETag and size.
func storeObjects(t *testing.T, store *testenv.ObjectStore) map[string]string {
	t.Helper()
	objects := map[string]string{}
	for obj := range storeClient(t, store).ListObjects(context.Background(), store.Bucket, minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		objects[obj.Key] = fmt.Sprintf("%s %d", obj.ETag, obj.Size)
	}
	if len(objects) == 0 {
		t.Fatal("the store holds no object")
	}
	return objects
}

// lsnAtLeast tells whether WAL position a is at or past b.
func lsnAtLeast(t *testing.T, a, b string) bool {
	t.Helper()
	x, errA := contract.LSN(a)
	y, errB := contract.LSN(b)
	if errA != nil || errB != nil || a == "" {
		t.Fatalf("WAL positions %q, %q: %v, %v", a, b, errA, errB)
	}
	return x >= y
}

// rewriteObject replaces the object key by change of its bytes, keeping
// its metadata, and returns what puts the original back.
func rewriteObject(t *testing.T, store *testenv.ObjectStore, key string, change func([]byte) []byte) func() {
	t.Helper()
	s3 := storeClient(t, store)
	ctx := context.Background()
	obj, err := s3.GetObject(ctx, store.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := obj.Stat()
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	original, err := io.ReadAll(obj)
	_ = obj.Close()
	if err != nil {
		t.Fatal(err)
	}
	put := func(data []byte) {
		if _, err := s3.PutObject(ctx, store.Bucket, key, bytes.NewReader(data), int64(len(data)),
			minio.PutObjectOptions{ContentType: info.ContentType, UserMetadata: info.UserMetadata}); err != nil {
			t.Fatal(err)
		}
	}
	put(change(bytes.Clone(original)))
	return func() { put(original) }
}

// changeTarFile flips a byte in the middle of the file name in the
// zstd-compressed tar stream compressed, and compresses it again.
func changeTarFile(t *testing.T, compressed []byte, name string) []byte {
	t.Helper()
	dec, err := zstd.NewReader(bytes.NewReader(compressed))
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	var out bytes.Buffer
	enc, err := zstd.NewWriter(&out)
	if err != nil {
		t.Fatal(err)
	}
	tr, tw := tar.NewReader(dec), tar.NewWriter(enc)
	changed := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == name && len(data) > 0 {
			data[len(data)/2] ^= 0x40
			changed = true
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(tw.Close(), enc.Close()); err != nil {
		t.Fatal(err)
	}
	if !changed {
		t.Fatalf("the base backup holds no file %s, or it is empty", name)
	}
	return out.Bytes()
}
