package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/specs"
)

// The keys of the credentials Secret psql reads.
const (
	secretUsernameKey = specs.SecretUsernameKey
	secretPasswordKey = specs.SecretPasswordKey
	secretDatabaseKey = specs.SecretDatabaseKey
)

// postgresPortName names PostgreSQL's port in the server pods
// (internal/specs); defaultPostgresPort is used when a pod names none.
const (
	postgresPortName    = "postgres"
	defaultPostgresPort = 5432
)

// ExitError carries the exit code of a program the plugin ran (psql), so
// that kubectl-mydb exits with it.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

func newPsqlCommand(env *Env) *cobra.Command {
	var replica bool
	var psqlPath string
	cmd := &cobra.Command{
		Use:   "psql NAME [--replica] [-- PSQL ARGS...]",
		Short: "Open psql on the primary (or a replica), with the password from the credentials Secret",
		Long: `Opens your local psql on the primary, or with --replica on a ready replica,
through a port-forward to the pod (127.0.0.1, a free port) that lasts as long
as psql runs. The user, database and password come from the credentials
Secret (status.credentialsSecret); the password reaches psql in its
environment (PGPASSWORD) only: it is never printed and never on a command
line. Needs psql installed where you run kubectl, and the right to read the
Secret and to port-forward to the pod (pods/portforward).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return env.psql(cmd.Context(), args[0], replica, psqlPath, args[1:])
		},
	}
	cmd.Flags().BoolVar(&replica, "replica", false, "connect to a ready replica instead of the primary")
	cmd.Flags().StringVar(&psqlPath, "psql", "psql", "the psql program to run")
	return cmd
}

func (e *Env) psql(ctx context.Context, name string, replica bool, psqlPath string, psqlArgs []string) error {
	db, err := e.getDB(ctx, name)
	if err != nil {
		return err
	}
	pod, err := e.pickPod(ctx, db, replica)
	if err != nil {
		return err
	}
	if err := e.runsContainers(ctx, pod, "so there is no PostgreSQL server to connect to. psql works on a cluster whose nodes run containers"); err != nil {
		return err
	}
	bin, err := exec.LookPath(psqlPath)
	if err != nil {
		return fmt.Errorf("psql is not installed here (%v): kubectl mydb psql runs your local psql through a port-forward", err)
	}
	creds, err := e.credentials(ctx, db)
	if err != nil {
		return err
	}

	// Ctrl-C belongs to psql, which cancels the running query with it: the
	// terminal sends it to psql too, and neither the port-forward nor psql
	// may end with this command's context (which the signal cancels).
	pfCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	port, err := e.portForward(pfCtx, pod)
	if err != nil {
		return fmt.Errorf("port-forward to pod %s: %w", pod.Name, err)
	}
	e.printf(e.Stderr, "Connecting to %s (%s) as %s, through a port-forward to 127.0.0.1:%d.\n",
		pod.Name, orDash(pod.Labels[databasev1alpha1.LabelRole]), creds[secretUsernameKey], port)

	cmd := exec.Command(bin, psqlArgs...) // not tied to ctx: see above
	cmd.Env = append(os.Environ(),
		"PGHOST=127.0.0.1",
		"PGPORT="+strconv.Itoa(port),
		"PGUSER="+creds[secretUsernameKey],
		"PGDATABASE="+creds[secretDatabaseKey],
		"PGPASSWORD="+creds[secretPasswordKey],
	)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.Stdin, e.Stdout, e.Stderr
	if err := cmd.Run(); err != nil {
		if exit, ok := errors.AsType[*exec.ExitError](err); ok {
			return &ExitError{Code: exit.ExitCode()}
		}
		return err
	}
	return nil
}

// runsContainers says plainly when pod is on one of KWOK's nodes, where
// there is nothing to talk to, and what follows.
func (e *Env) runsContainers(ctx context.Context, pod *corev1.Pod, consequence string) error {
	if pod.Spec.NodeName == "" {
		return nil
	}
	node := &corev1.Node{}
	if err := e.c.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, node); err == nil && SimulatedNode(node) {
		return fmt.Errorf("pod %s runs on node %s, a KWOK node: KWOK only simulates pods and runs no container, %s",
			pod.Name, node.Name, consequence)
	}
	return nil
}

// SimulatedNode tells whether node is one of KWOK's fake nodes, on which
// pods are marked Running but nothing runs.
func SimulatedNode(node *corev1.Node) bool {
	return node.Annotations["kwok.x-k8s.io/node"] == "fake" || node.Labels["type"] == "kwok"
}

// pickPod is the primary (the pod labelled primary, which the read-write
// Service selects) or, with replica, the first ready replica.
func (e *Env) pickPod(ctx context.Context, db *databasev1alpha1.MyDatabase, replica bool) (*corev1.Pod, error) {
	pods, err := e.podsOf(ctx, db)
	if err != nil {
		return nil, err
	}
	want := databasev1alpha1.RolePrimary
	if replica {
		want = databasev1alpha1.RoleReplica
	}
	var seen []string
	for i := range pods {
		p := &pods[i]
		seen = append(seen, fmt.Sprintf("%s (role %s, ready %t)", p.Name, orDash(p.Labels[databasev1alpha1.LabelRole]), specs.PodReady(p)))
		if p.Labels[databasev1alpha1.LabelRole] == want && specs.PodReady(p) && p.DeletionTimestamp == nil {
			return p, nil
		}
	}
	return nil, fmt.Errorf("MyDatabase %s/%s has no ready %s; pods: %s", db.Namespace, db.Name, want, orDash(strings.Join(seen, ", ")))
}

// credentials reads user, database and password from the credentials
// Secret.
func (e *Env) credentials(ctx context.Context, db *databasev1alpha1.MyDatabase) (map[string]string, error) {
	name := db.Status.CredentialsSecret
	if name == "" {
		return nil, fmt.Errorf("MyDatabase %s/%s reports no credentials Secret yet (status.credentialsSecret)", db.Namespace, db.Name)
	}
	secret := &corev1.Secret{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, secret); err != nil {
		return nil, fmt.Errorf("reading the credentials Secret %s: %w", name, err)
	}
	out := map[string]string{}
	for _, k := range []string{secretUsernameKey, secretPasswordKey, secretDatabaseKey} {
		if len(secret.Data[k]) == 0 {
			return nil, fmt.Errorf("the credentials Secret %s has no %q key", name, k)
		}
		out[k] = string(secret.Data[k])
	}
	return out, nil
}

// portForward forwards a free port of 127.0.0.1 to PostgreSQL in pod until
// ctx ends, and returns the local port.
func (e *Env) portForward(ctx context.Context, pod *corev1.Pod) (int, error) {
	transport, upgrader, err := spdy.RoundTripperFor(e.config)
	if err != nil {
		return 0, err
	}
	url := e.kube.CoreV1().RESTClient().Post().Resource("pods").
		Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	ready := make(chan struct{})
	errOut := &strings.Builder{}
	pf, err := portforward.NewOnAddressesWithContext(ctx, dialer, []string{"127.0.0.1"},
		[]string{fmt.Sprintf("0:%d", PostgresPort(pod))}, ready, io.Discard, errOut)
	if err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		return 0, fmt.Errorf("%v %s", err, errOut.String())
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) == 0 {
		return 0, fmt.Errorf("no local port: %v", err)
	}
	return int(ports[0].Local), nil
}

// PostgresPort is the container port named postgres in pod.
func PostgresPort(pod *corev1.Pod) int32 {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == postgresPortName {
				return p.ContainerPort
			}
		}
	}
	return defaultPostgresPort
}
