// Package plugin is `kubectl mydb` (cmd/kubectl-mydb): the verbs a person
// on call types against a MyDatabase. Each verb only reads what the
// operator reports and writes what a user may write in the spec; none of
// them reaches around the operator.
package plugin

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// Streams are the terminal of a command.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// Env is what the verbs run against: the cluster's clients, the time and
// the terminal.
type Env struct {
	// loading and overrides are kubectl's own kubeconfig flags (--kubeconfig,
	// --context, --namespace/-n, ...), from client-go's clientcmd: the same
	// flags as k8s.io/cli-runtime's, without the modules it brings along.
	loading   *clientcmd.ClientConfigLoadingRules
	overrides *clientcmd.ConfigOverrides
	Now       func() time.Time
	Stdin     io.Reader
	Stdout    io.Writer
	Stderr    io.Writer

	// Set by connect, from Flags.
	config    *rest.Config
	namespace string
	c         client.Client
	kube      kubernetes.Interface
}

// NewCommand returns the root command, `kubectl mydb`.
func NewCommand(streams Streams) *cobra.Command {
	env := &Env{
		loading:   clientcmd.NewDefaultClientConfigLoadingRules(),
		overrides: &clientcmd.ConfigOverrides{},
		Now:       time.Now,
		Stdin:     streams.In,
		Stdout:    streams.Out,
		Stderr:    streams.Err,
	}
	root := &cobra.Command{
		Use:   "kubectl-mydb",
		Short: "Inspect and drive MyDatabases (database.example.com/v1alpha1)",
		Long: `kubectl mydb: the everyday verbs for MyDatabases.

  status NAME               phase, conditions, instances, endpoints, recent events
  psql NAME                 psql on the primary (or --replica), password from the Secret
  switchover NAME [TARGET]  a planned change of primary (spec.switchover)
  restart NAME              a rolling restart: replicas first, then a switchover
  rotate-ca NAME            a new CA without downtime (spec.tls.caRotation)
  hibernate NAME [--off]    stop every server and keep the data (spec.hibernate)
  backup NAME               a base backup into spec.backup's store (a MyDatabaseBackup)
  pooler pause|resume NAME  hold or release a MyDatabasePooler's traffic (spec.pgbouncer.paused)
  report NAME               a support bundle, Secret values redacted`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Annotations: map[string]string{
			cobra.CommandDisplayNameAnnotation: "kubectl mydb",
		},
	}
	root.PersistentFlags().StringVar(&env.loading.ExplicitPath, clientcmd.RecommendedConfigPathFlag, "",
		"path to the kubeconfig file to use")
	clientcmd.BindOverrideFlags(env.overrides, root.PersistentFlags(), clientcmd.RecommendedConfigOverrideFlags(""))
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.Err)
	root.AddCommand(
		newStatusCommand(env),
		newPsqlCommand(env),
		newSwitchoverCommand(env),
		newRestartCommand(env),
		newRotateCACommand(env),
		newHibernateCommand(env),
		newBackupCommand(env),
		newVerifyCommand(env),
		newPoolerCommand(env),
		newReportCommand(env),
	)
	return root
}

// Scheme knows the built-in kinds and MyDatabase.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := databasev1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// connect builds the clients from the kubeconfig flags, once.
func (e *Env) connect() error {
	if e.c != nil {
		return nil
	}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(e.loading, e.overrides)
	cfg, err := loader.ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.WarningHandler = rest.NoWarnings{}
	ns, _, err := loader.Namespace()
	if err != nil {
		return fmt.Errorf("namespace: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	e.config, e.namespace, e.c, e.kube = cfg, ns, c, kube
	return nil
}

// getDB reads the MyDatabase name in the current namespace.
func (e *Env) getDB(ctx context.Context, name string) (*databasev1alpha1.MyDatabase, error) {
	if err := e.connect(); err != nil {
		return nil, err
	}
	db := &databasev1alpha1.MyDatabase{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.namespace, Name: name}, db); err != nil {
		return nil, fmt.Errorf("MyDatabase %s/%s: %w", e.namespace, name, err)
	}
	return db, nil
}

// printf tells the user something on a terminal stream; a terminal that
// cannot be written to is no reason to fail a command that did its work.
func (e *Env) printf(w io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(w, format, args...)
}
