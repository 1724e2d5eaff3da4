// Command dev-objectstore runs the S3-compatible store of `make dev`, so
// that the sample MyDatabase can archive its WAL and take base backups:
// the Versity S3 Gateway (`versitygw posix`, built from the Go module proxy
// by hack/s3.sh), with one bucket, on --ip (the real-pod node's bridge,
// which its pods reach) and a free port. It writes the endpoint, bucket and keys to --env
// as shell assignments, and runs until SIGINT or SIGTERM, when it stops
// the server. A development tool: its keys are fixed test keys.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"example.com/myoperator/internal/testenv"
)

func main() {
	dir := flag.String("dir", "", "the store's data directory")
	ip := flag.String("ip", "127.0.0.1", "the address to listen on")
	envFile := flag.String("env", "", "where to write ENDPOINT=, BUCKET=, ACCESS_KEY_ID= and SECRET_ACCESS_KEY=")
	gateway := flag.String("versitygw", "", "the S3 server's binary (hack/s3.sh prints it)")
	flag.Parse()
	if *dir == "" || *envFile == "" || *gateway == "" {
		fmt.Fprintln(os.Stderr, "usage: dev-objectstore --versitygw BIN --dir DIR --env FILE [--ip IP]")
		os.Exit(2)
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	store, err := testenv.StartObjectStoreWith(*gateway, *dir, *ip)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dev-objectstore:", err)
		os.Exit(1)
	}
	env := fmt.Sprintf("ENDPOINT=%s\nBUCKET=%s\nACCESS_KEY_ID=%s\nSECRET_ACCESS_KEY=%s\n",
		store.Endpoint, store.Bucket, store.AccessKeyID, store.SecretAccessKey)
	if err := os.WriteFile(*envFile, []byte(env), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "dev-objectstore:", err)
		_ = store.Stop()
		os.Exit(1)
	}
	fmt.Printf("dev-objectstore: serving bucket %s at %s\n", store.Bucket, store.Endpoint)
	<-signals
	if err := store.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "dev-objectstore: stopping:", err)
		os.Exit(1)
	}
}
