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
)

func newVerifyCommand(env *Env) *cobra.Command {
	var waitFor time.Duration
	var backup string
	cmd := &cobra.Command{
		Use:   "verify NAME",
		Short: "Prove a backup by a restore: restore it in a pod of its own and check it",
		Long: `Asks for a verification of the newest completed MyDatabaseBackup of NAME
(or of --backup): the operator restores it, with the archive after it to its
end, in a pod of its own, checks its files against its manifest and every
database with pg_amcheck, and writes the result to the backup's
status.verification and its Verified condition. With --wait, waits until it
ends. See docs/backup.md, "Verified backups".`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return env.verify(cmd.Context(), args[0], backup, waitFor)
		},
	}
	cmd.Flags().StringVar(&backup, "backup", "", "the MyDatabaseBackup to verify (default: the newest completed one)")
	cmd.Flags().DurationVar(&waitFor, "wait", 0, "wait up to this long for the verification to end (e.g. --wait=1h)")
	return cmd
}

func (e *Env) verify(ctx context.Context, name, backup string, waitFor time.Duration) error {
	db, err := e.getDB(ctx, name)
	if err != nil {
		return err
	}
	if db.Spec.Backup == nil {
		return fmt.Errorf("MyDatabase %s/%s has no spec.backup: it has no backups to verify (docs/backup.md)", db.Namespace, db.Name)
	}
	b, err := e.backupToVerify(ctx, db, backup)
	if err != nil {
		return err
	}
	request := e.Now().UTC().Format(time.RFC3339)
	patch := client.MergeFrom(b.DeepCopy())
	metav1.SetMetaDataAnnotation(&b.ObjectMeta, databasev1alpha1.AnnotationVerify, request)
	if err := e.c.Patch(ctx, b, patch); err != nil {
		return fmt.Errorf("asking for a verification of MyDatabaseBackup %s: %w", b.Name, err)
	}
	e.printf(e.Stdout, "Verification of MyDatabaseBackup %s/%s (backup %s) requested (%s %s).\n",
		b.Namespace, b.Name, b.Status.BackupID, databasev1alpha1.AnnotationVerify, request)
	if waitFor <= 0 {
		e.printf(e.Stdout, "Follow it with: kubectl get mydatabasebackup %s -n %s -o jsonpath='{.status.verification}'\n", b.Name, b.Namespace)
		return nil
	}
	err = wait.PollUntilContextTimeout(ctx, pollInterval, waitFor, true, func(ctx context.Context) (bool, error) {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			return false, err
		}
		v := b.Status.Verification
		return v != nil && v.Request == request && v.Finished(), nil
	})
	v := b.Status.Verification
	if err != nil {
		says := "not started"
		if v != nil && v.Request == request {
			says = v.Message
		}
		return fmt.Errorf("the verification of %s has not ended after %s: %s (%w)", b.Name, waitFor, says, err)
	}
	e.printf(e.Stdout, "%s in %s: %s\n", v.Result, v.Took(), v.Message)
	if v.Result != databasev1alpha1.VerificationPassed {
		return errors.New("the verification did not pass")
	}
	return nil
}

// backupToVerify is the MyDatabaseBackup name of db, or, without a name,
// its newest completed one; it must be completed.
func (e *Env) backupToVerify(ctx context.Context, db *databasev1alpha1.MyDatabase, name string) (*databasev1alpha1.MyDatabaseBackup, error) {
	if name != "" {
		b := &databasev1alpha1.MyDatabaseBackup{}
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, b); err != nil {
			return nil, err
		}
		if b.Spec.Database != db.Name || b.Status.Phase != databasev1alpha1.BackupCompleted {
			return nil, fmt.Errorf("MyDatabaseBackup %s is a backup of %q, %s: only a completed backup of %s can be verified",
				name, b.Spec.Database, b.Status.Phase, db.Name)
		}
		return b, nil
	}
	list := &databasev1alpha1.MyDatabaseBackupList{}
	if err := e.c.List(ctx, list, client.InNamespace(db.Namespace)); err != nil {
		return nil, err
	}
	newest := databasev1alpha1.NewestCompleted(list.Items, db.Name)
	if newest == nil {
		return nil, fmt.Errorf("MyDatabase %s/%s has no completed MyDatabaseBackup to verify: take one first (kubectl mydb backup %s --wait=30m)",
			db.Namespace, db.Name, db.Name)
	}
	return newest, nil
}
