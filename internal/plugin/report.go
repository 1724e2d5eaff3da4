package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// OperatorLabels select the operator's Deployment, as config/manager (and
// the Helm chart rendered from it) label it.
var OperatorLabels = map[string]string{
	"control-plane":          "controller-manager",
	"app.kubernetes.io/name": "main",
}

// operatorLogLimit caps the log of one operator container in a bundle.
const operatorLogLimit = 20 << 20

// childKinds are the kinds of a MyDatabase's children a report collects,
// by the label app.kubernetes.io/instance=NAME.
var childKinds = []struct {
	kind string
	list func() client.ObjectList
}{
	{"StatefulSet", func() client.ObjectList { return &appsv1.StatefulSetList{} }},
	{"Pod", func() client.ObjectList { return &corev1.PodList{} }},
	{"Service", func() client.ObjectList { return &corev1.ServiceList{} }},
	{"EndpointSlice", func() client.ObjectList { return &discoveryv1.EndpointSliceList{} }},
	{"ConfigMap", func() client.ObjectList { return &corev1.ConfigMapList{} }},
	{"PersistentVolumeClaim", func() client.ObjectList { return &corev1.PersistentVolumeClaimList{} }},
	{"PodDisruptionBudget", func() client.ObjectList { return &policyv1.PodDisruptionBudgetList{} }},
	{"Lease", func() client.ObjectList { return &coordinationv1.LeaseList{} }},
	{"Secret", func() client.ObjectList { return &corev1.SecretList{} }},
	{"ServiceAccount", func() client.ObjectList { return &corev1.ServiceAccountList{} }},
	{"Role", func() client.ObjectList { return &rbacv1.RoleList{} }},
	{"RoleBinding", func() client.ObjectList { return &rbacv1.RoleBindingList{} }},
}

func newReportCommand(env *Env) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "report NAME",
		Short: "Write a support bundle: the MyDatabase, its children, events and the operator's logs; Secret values redacted",
		Long: `Writes a support bundle of the MyDatabase: the object, its children (StatefulSet,
pods, Services, EndpointSlices, ConfigMap, PVCs, PodDisruptionBudget, Lease,
Secrets, and the instance managers' ServiceAccount, Role and RoleBinding),
the events of all of them, and the log of the operator when it runs in the
cluster (the Deployment labelled control-plane=controller-manager,
app.kubernetes.io/name=main). Every value of every Secret is replaced by
` + Redacted + `; the keys stay. -o ending in .tar.gz or .tgz writes an archive,
anything else a new directory.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return env.report(cmd.Context(), args[0], output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "the bundle to write (default report-NAMESPACE-NAME-TIME.tar.gz)")
	return cmd
}

func (e *Env) report(ctx context.Context, name, output string) (err error) {
	db, err := e.getDB(ctx, name)
	if err != nil {
		return err
	}
	now := e.Now()
	if output == "" {
		output = bundleName(db.Namespace, db.Name, now)
	}
	b, err := openBundle(output, now)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := b.close(); err == nil {
			err = cerr
		}
	}()

	var notes []string
	note := func(format string, args ...any) { notes = append(notes, fmt.Sprintf(format, args...)) }
	add := func(kind string, obj client.Object) error {
		data, err := ObjectYAML(obj, kind)
		if err != nil {
			return err
		}
		return b.add(fmt.Sprintf("objects/%s/%s.yaml", kind, obj.GetName()), data)
	}
	if err := add("MyDatabase", db); err != nil {
		return err
	}
	names := map[string]bool{db.Name: true}
	for _, k := range childKinds {
		list := k.list()
		if err := e.c.List(ctx, list, client.InNamespace(db.Namespace),
			client.MatchingLabels{databasev1alpha1.LabelInstance: db.Name}); err != nil {
			note("%s: not collected: %v", k.kind, err)
			continue
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return err
		}
		for _, item := range items {
			obj := item.(client.Object)
			names[obj.GetName()] = true
			if err := add(k.kind, obj); err != nil {
				return err
			}
		}
	}
	// A user-supplied credentials Secret carries none of our labels.
	if s := db.Status.CredentialsSecret; s != "" && !names[s] {
		secret := &corev1.Secret{}
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: s}, secret); err != nil {
			note("Secret %s (status.credentialsSecret): not collected: %v", s, err)
		} else if err := add("Secret", secret); err != nil {
			return err
		}
	}
	if err := e.reportEvents(ctx, b, db.Namespace, names, note); err != nil {
		return err
	}
	e.reportOperator(ctx, b, note)
	if err := b.add("README.txt", []byte(reportReadme(db, now, notes))); err != nil {
		return err
	}
	e.printf(e.Stdout, "Wrote the support bundle of %s/%s to %s (Secret values redacted).\n", db.Namespace, db.Name, output)
	return nil
}

// reportEvents writes the events of the namespace about the MyDatabase and
// the objects collected, oldest first.
func (e *Env) reportEvents(ctx context.Context, b bundle, ns string, names map[string]bool, note func(string, ...any)) error {
	list := &corev1.EventList{}
	if err := e.c.List(ctx, list, client.InNamespace(ns)); err != nil {
		note("events: not collected: %v", err)
		return nil
	}
	slices.SortStableFunc(list.Items, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	var sb strings.Builder
	for _, ev := range list.Items {
		if !names[ev.InvolvedObject.Name] {
			continue
		}
		fmt.Fprintf(&sb, "%s\t%s\t%s/%s\t%s\t%s\n", eventTime(ev).UTC().Format(time.RFC3339), ev.Type,
			ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, strings.TrimSpace(ev.Message))
	}
	return b.add("events.txt", []byte(sb.String()))
}

// reportOperator writes the logs of the operator's pods, or says why there
// are none.
func (e *Env) reportOperator(ctx context.Context, b bundle, note func(string, ...any)) {
	deployments := &appsv1.DeploymentList{}
	if err := e.c.List(ctx, deployments, client.MatchingLabels(OperatorLabels)); err != nil {
		note("operator: could not look for its Deployment (labels %v): %v", OperatorLabels, err)
		return
	}
	if len(deployments.Items) == 0 {
		note("operator: no Deployment labelled %v in the cluster, so no operator log: "+
			"it does not run in the cluster (make run, or the e2e suite, run it as a local process: its log is where that process writes)", OperatorLabels)
		return
	}
	for _, d := range deployments.Items {
		_ = b.add(fmt.Sprintf("operator/%s/%s.yaml", d.Namespace, d.Name), must(ObjectYAML(&d, "Deployment")))
		pods := &corev1.PodList{}
		if err := e.c.List(ctx, pods, client.InNamespace(d.Namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
			note("operator: pods of Deployment %s/%s: %v", d.Namespace, d.Name, err)
			continue
		}
		if len(pods.Items) == 0 {
			note("operator: Deployment %s/%s has no pod", d.Namespace, d.Name)
		}
		for _, p := range pods.Items {
			for _, c := range p.Spec.Containers {
				path := fmt.Sprintf("operator/%s/%s-%s.log", p.Namespace, p.Name, c.Name)
				log, err := e.podLog(ctx, &p, c.Name)
				if err != nil {
					note("operator: log of pod %s/%s container %s: %v", p.Namespace, p.Name, c.Name, err)
					continue
				}
				_ = b.add(path, log)
			}
		}
	}
}

func (e *Env) podLog(ctx context.Context, pod *corev1.Pod, container string) ([]byte, error) {
	req := e.kube.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{
		Container: container, LimitBytes: ptr.To[int64](operatorLogLimit), Timestamps: true,
	})
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rc, err := req.Stream(ctx)
	if err != nil {
		if apierrors.IsForbidden(err) {
			return nil, errors.New("forbidden: reading it needs get on pods/log in the operator's namespace")
		}
		return nil, err
	}
	defer func() { _ = rc.Close() }()
	return io.ReadAll(rc)
}

func must(b []byte, err error) []byte {
	if err != nil {
		return fmt.Appendf(nil, "error: %v\n", err)
	}
	return b
}

func reportReadme(db *databasev1alpha1.MyDatabase, now time.Time, notes []string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Support bundle of MyDatabase %s/%s (uid %s), written %s by kubectl mydb report.\n\n",
		db.Namespace, db.Name, db.UID, metav1.NewTime(now).UTC().Format(time.RFC3339))
	sb.WriteString("objects/KIND/NAME.yaml  the MyDatabase and every object labelled app.kubernetes.io/instance=" + db.Name + "\n")
	sb.WriteString("                        (managedFields dropped; every Secret value replaced by " + Redacted + ")\n")
	sb.WriteString("events.txt              the events of these objects, oldest first\n")
	sb.WriteString("operator/               the operator's Deployment and its pods' logs, when it runs in the cluster\n")
	if len(notes) > 0 {
		sb.WriteString("\nNot collected, and why:\n")
		for _, n := range notes {
			sb.WriteString("- " + n + "\n")
		}
	}
	return sb.String()
}
