package plugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

func newBackupCommand(env *Env) *cobra.Command {
	var waitFor time.Duration
	var primary bool
	cmd := &cobra.Command{
		Use:   "backup NAME",
		Short: "Take a base backup into spec.backup's object store (a MyDatabaseBackup)",
		Long: `Creates a MyDatabaseBackup of NAME, named NAME-<time>: the operator asks a
ready replica (or, with --primary or without a ready replica, the primary)
to take a base backup into spec.backup.objectStore; the WAL it needs is
archived continuously. With --wait, waits until it is Completed or Failed.
See docs/backup.md.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			target := databasev1alpha1.BackupTargetPreferReplica
			if primary {
				target = databasev1alpha1.BackupTargetPrimary
			}
			return env.backup(cmd.Context(), args[0], target, waitFor)
		},
	}
	cmd.Flags().BoolVar(&primary, "primary", false, "take the backup on the primary rather than on a ready replica")
	cmd.Flags().DurationVar(&waitFor, "wait", 0, "wait up to this long for the backup to complete or fail (e.g. --wait=30m)")
	return cmd
}

func (e *Env) backup(ctx context.Context, name string, target databasev1alpha1.BackupTarget, waitFor time.Duration) error {
	db, err := e.getDB(ctx, name)
	if err != nil {
		return err
	}
	if db.Spec.Backup == nil {
		return fmt.Errorf("MyDatabase %s/%s has no spec.backup: set spec.backup.objectStore first (docs/backup.md)", db.Namespace, db.Name)
	}
	b := &databasev1alpha1.MyDatabaseBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: fmt.Sprintf("%s-%s", db.Name, e.Now().UTC().Format("20060102150405"))},
		Spec:       databasev1alpha1.MyDatabaseBackupSpec{Database: db.Name, Target: target},
	}
	if err := e.c.Create(ctx, b); err != nil {
		return fmt.Errorf("creating MyDatabaseBackup %s: %w", b.Name, err)
	}
	store := db.Spec.Backup.ObjectStore
	e.printf(e.Stdout, "MyDatabaseBackup %s/%s created: a base backup of %s into %s, bucket %s, path %s.\n",
		b.Namespace, b.Name, db.Name, store.Endpoint, store.Bucket, specs.BackupPath(db))
	if waitFor <= 0 {
		e.printf(e.Stdout, "Follow it with: kubectl get mydatabasebackup %s -n %s\n", b.Name, b.Namespace)
		return nil
	}
	err = wait.PollUntilContextTimeout(ctx, pollInterval, waitFor, true, func(ctx context.Context) (bool, error) {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			return false, err
		}
		return b.Status.Finished(), nil
	})
	st := b.Status
	if err != nil {
		return fmt.Errorf("MyDatabaseBackup %s is still %s after %s: %s (%w)", b.Name, st.Phase, waitFor, st.Message, err)
	}
	if st.Phase == databasev1alpha1.BackupFailed {
		e.printf(e.Stdout, "Backup failed: %s\n", st.Message)
		return errors.New("the backup failed")
	}
	took := ""
	if st.StartedAt != nil && st.StoppedAt != nil {
		took = fmt.Sprintf(", in %s", st.StoppedAt.Sub(st.StartedAt.Time).Round(time.Second))
	}
	e.printf(e.Stdout, "Base backup %s on %s: WAL %s to %s on timeline %d, %s compressed%s%s.\n",
		st.BackupID, st.Instance, st.BeginLSN, st.EndLSN, st.Timeline, bytesOf(st.Size), took, st.BuildsOn())
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
