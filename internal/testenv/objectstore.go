package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// ObjectStore is a real S3-compatible server, SeaweedFS (`weed mini`,
// built by hack/s3.sh), run as a process of the test on free ports of
// 127.0.0.1, with one bucket and one access key.
type ObjectStore struct {
	Endpoint        string
	Bucket          string
	AccessKeyID     string
	SecretAccessKey string
	proc            *Proc
	// start starts the process again, as it first did; ready waits for it.
	start func() (*Proc, error)
	ready func() error
}

// StartObjectStore starts the server on 127.0.0.1 with its data under dir
// and waits until its S3 endpoint answers.
func StartObjectStore(dir string) (*ObjectStore, error) { return StartObjectStoreOn(dir, "127.0.0.1") }

// StartObjectStoreOn starts the server on the address ip (where pods can
// reach it: the real-pod node's bridge) with its data under dir, and waits
// until its S3 endpoint answers.
func StartObjectStoreOn(dir, ip string) (*ObjectStore, error) {
	out, err := exec.Command(filepath.Join(RepoRoot(), "hack", "s3.sh")).Output()
	if err != nil {
		return nil, fmt.Errorf("hack/s3.sh: %w", err)
	}
	weed := strings.TrimSpace(string(out))
	s := &ObjectStore{Bucket: "backups", AccessKeyID: "mydatabase-test", SecretAccessKey: "secret-key-of-the-test-store"}
	identities := fmt.Sprintf(`{"identities":[{"name":"test","credentials":[{"accessKey":%q,"secretKey":%q}],`+
		`"actions":["Admin","Read","List","Tagging","Write"]}]}`, s.AccessKeyID, s.SecretAccessKey)
	config := filepath.Join(dir, "s3.json")
	if err := os.WriteFile(config, []byte(identities), 0o600); err != nil {
		return nil, err
	}
	// Every listener on a port of its own: weed's defaults are fixed
	// ports, and its gRPC ports the HTTP ones plus 10000.
	names := []string{"s3.port", "s3.port.grpc", "master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
		"filer.port", "filer.port.grpc", "admin.port", "admin.port.grpc", "debug.port"}
	ports, err := FreePorts(len(names))
	if err != nil {
		return nil, err
	}
	args := []string{"mini", "-dir=" + filepath.Join(dir, "data"), "-ip=" + ip, "-ip.bind=" + ip,
		"-s3.config=" + config, "-bucket=" + s.Bucket, "-admin.ui=false", "-webdav=false",
		"-admin.port.legacy=0", "-s3.port.iceberg=0", "-s3.port.lance=0"}
	for i, name := range names {
		args = append(args, "-"+name+"="+strconv.Itoa(ports[i]))
	}
	host := net.JoinHostPort(ip, strconv.Itoa(ports[0]))
	s.Endpoint = "http://" + host
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, err
	}
	s.start = func() (*Proc, error) {
		return StartProc("seaweedfs", filepath.Join(dir, "weed.log"), filepath.Join(dir, "weed.pid"), weed, args...)
	}
	// Ready once the bucket exists, as the test's credentials see it (an
	// anonymous request is refused whether it exists or not).
	client, err := minio.New(host, &minio.Options{
		Creds: credentials.NewStaticV4(s.AccessKeyID, s.SecretAccessKey, "")})
	if err != nil {
		return nil, err
	}
	s.ready = func() error {
		deadline := time.Now().Add(90 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			exists, err := client.BucketExists(ctx, s.Bucket)
			cancel()
			if err == nil && exists {
				return nil
			}
			if s.proc.Exited() || time.Now().After(deadline) {
				return fmt.Errorf("the object store did not come up with bucket %q (last: exists %t, %v); its log:\n%s",
					s.Bucket, exists, err, Tail(s.proc.Log, 30))
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	if err := s.Restart(); err != nil {
		return nil, err
	}
	return s, nil
}

// Restart starts the server again after Stop, on the same ports with the
// same data, and waits until it answers.
func (s *ObjectStore) Restart() error {
	var err error
	if s.proc, err = s.start(); err != nil {
		return err
	}
	if err := s.ready(); err != nil {
		_ = s.Stop()
		return err
	}
	return nil
}

// Stop stops the server.
func (s *ObjectStore) Stop() error { return s.proc.Stop(30 * time.Second) }
