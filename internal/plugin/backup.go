package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"example.com/myoperator/internal/backup"
	"example.com/myoperator/internal/specs"
)

func newBackupCommand(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "backup NAME",
		Short: "Take a base backup of the primary into spec.backup's object store",
		Long: `Runs the instance manager's backup in the primary's database container
(the same as kubectl exec POD -c postgres -- /controller/instance backup):
pg_basebackup of the primary, compressed, into spec.backup.objectStore. The
WAL it needs is archived continuously. Needs the right to exec in the pod
(pods/exec). See docs/backup.md.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return env.backup(cmd.Context(), args[0])
		},
	}
}

func (e *Env) backup(ctx context.Context, name string) error {
	db, err := e.getDB(ctx, name)
	if err != nil {
		return err
	}
	if db.Spec.Backup == nil {
		return fmt.Errorf("MyDatabase %s/%s has no spec.backup: set spec.backup.objectStore first (docs/backup.md)", db.Namespace, db.Name)
	}
	pod, err := e.pickPod(ctx, db, false)
	if err != nil {
		return err
	}
	if err := e.runsContainers(ctx, pod, "so there is no PostgreSQL server to back up. kubectl mydb backup works on a cluster whose nodes run containers"); err != nil {
		return err
	}
	store := db.Spec.Backup.ObjectStore
	e.printf(e.Stderr, "Taking a base backup of %s (primary) into %s, bucket %s, path %s.\n",
		pod.Name, store.Endpoint, store.Bucket, specs.BackupPath(db))
	start := e.Now()
	var stdout, stderr bytes.Buffer
	req := e.kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: specs.ContainerName, Command: []string{specs.InstanceManagerPath, "backup"},
			Stdout: true, Stderr: true}, scheme.ParameterCodec)
	exec, err := remotecommand.NewSPDYExecutor(e.config, "POST", req.URL())
	if err != nil {
		return err
	}
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		return fmt.Errorf("the backup in pod %s failed (%v): %s", pod.Name, err, strings.TrimSpace(stderr.String()))
	}
	var m backup.Manifest
	if err := json.Unmarshal(stdout.Bytes(), &m); err != nil {
		return fmt.Errorf("the backup in pod %s printed no manifest (%v): %s", pod.Name, err, strings.TrimSpace(stdout.String()))
	}
	e.printf(e.Stdout, "Base backup %s: WAL %s to %s on timeline %d, %s compressed, in %s.\n",
		m.ID, m.BeginLSN, m.EndLSN, m.Timeline, bytesOf(m.Size), e.Now().Sub(start).Round(time.Second))
	return nil
}

// bytesOf is a size for people.
func bytesOf(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
