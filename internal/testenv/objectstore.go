package testenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
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

// ObjectStore is a real S3 server, the Versity S3 Gateway (`versitygw
// posix`, built by hack/s3.sh), run as a process of the test on a free port
// of 127.0.0.1, with one bucket and one access key (its root account: every
// request's signature is checked against it).
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

// StartObjectStoreOn starts the server (built once by hack/s3.sh) on the
// address ip (where pods can reach it: the real-pod node's bridge) with its
// data under dir, makes the bucket, and waits until its S3 endpoint answers.
func StartObjectStoreOn(dir, ip string) (*ObjectStore, error) {
	out, err := exec.Command(filepath.Join(RepoRoot(), "hack", "s3.sh")).Output()
	if err != nil {
		return nil, fmt.Errorf("hack/s3.sh: %w", err)
	}
	return StartObjectStoreWith(strings.TrimSpace(string(out)), dir, ip)
}

// StartObjectStoreWith is StartObjectStoreOn with the server's binary
// (versitygw) given, for a program that does not run from the checkout.
func StartObjectStoreWith(gateway, dir, ip string) (*ObjectStore, error) {
	s := &ObjectStore{Bucket: "backups", AccessKeyID: "mydatabase-test", SecretAccessKey: "secret-key-of-the-test-store"}
	ports, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	host := net.JoinHostPort(ip, strconv.Itoa(ports[0]))
	s.Endpoint = "http://" + host
	// The buckets are the directories of data; object metadata is kept in
	// extended attributes (every Linux filesystem the tests use has them).
	// Its IAM directory (empty: the root account is the only user) makes it
	// answer an unknown access key with S3's InvalidAccessKeyId.
	data, iam := filepath.Join(dir, "data"), filepath.Join(dir, "iam")
	for _, d := range []string{data, iam} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	args := []string{"--access", s.AccessKeyID, "--secret", s.SecretAccessKey, "--port", host, "--iam-dir", iam,
		"--quiet", "posix", data}
	s.start = func() (*Proc, error) {
		return StartProc("versitygw", filepath.Join(dir, "versitygw.log"), filepath.Join(dir, "versitygw.pid"), gateway, args...)
	}
	client, err := s.Client()
	if err != nil {
		return nil, err
	}
	// Ready once the bucket exists as the test's credentials see it (made
	// on the first start; an anonymous request is refused either way).
	s.ready = func() error {
		deadline := time.Now().Add(90 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			exists, err := client.BucketExists(ctx, s.Bucket)
			if err == nil && !exists {
				err = client.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{})
			}
			cancel()
			if err == nil && exists {
				return nil
			}
			if s.proc.Exited() || time.Now().After(deadline) {
				return fmt.Errorf("the object store did not come up with bucket %q (last: exists %t, %v); its log:\n%s",
					s.Bucket, exists, err, Tail(s.proc.Log, 30))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if err := s.Restart(); err != nil {
		return nil, err
	}
	return s, nil
}

// Client is an S3 client of the store with the test's credentials.
func (s *ObjectStore) Client() (*minio.Client, error) {
	return minio.New(strings.TrimPrefix(s.Endpoint, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4(s.AccessKeyID, s.SecretAccessKey, "")})
}

// FlipByte flips one byte in the middle of object key, keeping its
// metadata: what a disk or a careless hand does to a store.
func (s *ObjectStore) FlipByte(ctx context.Context, key string) error {
	client, err := s.Client()
	if err != nil {
		return err
	}
	obj, err := client.GetObject(ctx, s.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return err
	}
	defer func() { _ = obj.Close() }()
	info, err := obj.Stat()
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	data, err := io.ReadAll(obj)
	if err != nil {
		return err
	}
	data[len(data)/2] ^= 0x40
	_, err = client.PutObject(ctx, s.Bucket, key, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: info.ContentType, UserMetadata: info.UserMetadata})
	return err
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
