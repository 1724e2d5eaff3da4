package postgres

import (
	"bytes"
	"context"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"example.com/myoperator/internal/backup"
	"example.com/myoperator/internal/specs"
)

// TestPushWALAhead: a wal-push uploads the segments PostgreSQL marked
// ready after its own beside the archive (wal-ahead/), not into it, so
// the archive never holds a segment whose predecessor is still on its way
// (Gap sees no hole); each segment's own wal-push then publishes it with
// its content and metadata (a fetch reads it back, decrypted where
// encrypted), and leaves nothing beside the archive. Other content under
// a pushed-ahead name is uploaded, not published; retention deletes what
// was pushed ahead and never published.
func TestPushWALAhead(t *testing.T) {
	t.Parallel() // doc.go: which tests run side by side
	store := startStore(t, t.TempDir())
	s3, err := minio.New(strings.TrimPrefix(store.Endpoint, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4(store.AccessKeyID, store.SecretAccessKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	key := ageIdentity(t)
	identities := filepath.Join(t.TempDir(), "identities")
	if err := os.WriteFile(identities, keySecret("", "", key).Data[specs.EncryptionIdentitiesKey], 0o400); err != nil {
		t.Fatal(err)
	}
	for _, encrypted := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "encrypted"}[encrypted]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			cfg := backup.Config{Endpoint: store.Endpoint, Bucket: store.Bucket, Path: name,
				AccessKeyID: store.AccessKeyID, SecretAccessKey: store.SecretAccessKey}
			if encrypted {
				cfg.Encryption = &backup.Encryption{IdentitiesFile: identities, Secret: "backup-key"}
			}
			archive, err := backup.Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			objects := func(dir string) []string {
				var names []string
				for obj := range s3.ListObjects(ctx, store.Bucket, minio.ListObjectsOptions{Prefix: name + "/" + dir + "/"}) {
					if obj.Err != nil {
						t.Fatal(obj.Err)
					}
					names = append(names, path.Base(obj.Key))
				}
				return names
			}
			suffix := ".zst"
			if encrypted {
				suffix += ".age"
			}
			// pg_wal with segments 1 to 5 ready, each of its own content.
			wal := t.TempDir()
			if err := os.Mkdir(filepath.Join(wal, "archive_status"), 0o700); err != nil {
				t.Fatal(err)
			}
			seg := func(n int) string { return "00000001000000000000000" + string(rune('0'+n)) }
			content := func(n int) []byte { return bytes.Repeat([]byte(seg(n)), 1000) }
			for n := 1; n <= 5; n++ {
				if err := os.WriteFile(filepath.Join(wal, seg(n)), content(n), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(wal, "archive_status", seg(n)+".ready"), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := archive.PushWALAhead(ctx, filepath.Join(wal, seg(1)), 3); err != nil {
				t.Fatal(err)
			}
			if got, want := objects("wal"), []string{seg(1) + suffix}; !slices.Equal(got, want) {
				t.Errorf("the archive after the first push: %v, want %v", got, want)
			}
			if got, want := objects("wal-ahead"), []string{seg(2) + suffix, seg(3) + suffix, seg(4) + suffix}; !slices.Equal(got, want) {
				t.Errorf("beside the archive: %v, want %v", got, want)
			}
			if missing, next, err := archive.Gap(ctx, seg(1)); err != nil || missing != "" {
				t.Errorf("Gap after %s: %q, %q, %v; segments pushed ahead are no part of the archive", seg(1), missing, next, err)
			}
			// Segment 3's file now holds other content (as it would not in
			// PostgreSQL): its own push uploads it, never publishing what
			// was pushed ahead.
			if err := os.WriteFile(filepath.Join(wal, seg(3)), []byte("other content"), 0o600); err != nil {
				t.Fatal(err)
			}
			for n := 2; n <= 3; n++ {
				if err := archive.PushWAL(ctx, filepath.Join(wal, seg(n))); err != nil {
					t.Fatalf("pushing %s: %v", seg(n), err)
				}
			}
			if got, want := objects("wal-ahead"), []string{seg(3) + suffix, seg(4) + suffix}; !slices.Equal(got, want) {
				t.Errorf("beside the archive after the pushes of 2 and 3: %v, want %v", got, want)
			}
			for n, want := range map[int][]byte{1: content(1), 2: content(2), 3: []byte("other content")} {
				fetched := filepath.Join(t.TempDir(), seg(n))
				if err := archive.FetchWAL(ctx, seg(n), fetched); err != nil {
					t.Fatalf("fetching %s: %v", seg(n), err)
				}
				if got, _ := os.ReadFile(fetched); !bytes.Equal(got, want) {
					t.Errorf("%s fetched back: %d bytes, not what was pushed", seg(n), len(got))
				}
			}
			// What was pushed ahead keeps the digest a push again checks.
			if err := os.WriteFile(filepath.Join(wal, seg(2)), []byte("not what was archived"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := archive.PushWAL(ctx, filepath.Join(wal, seg(2))); err == nil || !strings.Contains(err.Error(), "already archived with other content") {
				t.Errorf("other content as %s, published from beside the archive: %v, want it refused", seg(2), err)
			}
			if encrypted {
				plain := openArchive(t, store, name)
				if err := plain.FetchWAL(ctx, seg(2), filepath.Join(t.TempDir(), seg(2))); err == nil ||
					!strings.Contains(err.Error(), "is encrypted (to recipient "+key.Recipient().String()+")") {
					t.Errorf("a store without the key fetching %s, published from beside the archive: %v", seg(2), err)
				}
			}
			// Retention: what was pushed ahead before the first segment it
			// keeps goes with the archive's.
			if _, err := archive.PruneWAL(ctx, seg(5)); err != nil {
				t.Fatal(err)
			}
			if got := objects("wal-ahead"); len(got) != 0 {
				t.Errorf("beside the archive after pruning before %s: %v, want nothing", seg(5), got)
			}
		})
	}
}
