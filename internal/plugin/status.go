package plugin

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"example.com/myoperator/internal/specs"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// maxEvents is how many of the most recent events status shows.
const maxEvents = 10

func newStatusCommand(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "status NAME",
		Short: "Phase, conditions, instances, endpoints, switchover, passwords, declared roles and databases, and recent events of a MyDatabase",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			view, err := env.statusView(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return writeStatus(env.Stdout, view, env.Now())
		},
	}
}

// statusView is everything status prints, read from the cluster.
type statusView struct {
	DB      *databasev1alpha1.MyDatabase
	Pods    []corev1.Pod
	Poolers []databasev1alpha1.MyDatabasePooler
	Events  []corev1.Event
}

func (e *Env) statusView(ctx context.Context, name string) (*statusView, error) {
	db, err := e.getDB(ctx, name)
	if err != nil {
		return nil, err
	}
	pods, err := e.podsOf(ctx, db)
	if err != nil {
		return nil, err
	}
	events, err := e.eventsOf(ctx, db)
	if err != nil {
		return nil, err
	}
	poolers, err := e.poolersOf(ctx, db)
	if err != nil {
		return nil, err
	}
	return &statusView{DB: db, Pods: pods, Poolers: poolers, Events: events}, nil
}

// poolersOf lists the MyDatabasePoolers that lead to db, sorted by name;
// none when the user may not list them, or their CRD is not installed (an
// older operator): the rest of the status is still worth printing.
func (e *Env) poolersOf(ctx context.Context, db *databasev1alpha1.MyDatabase) ([]databasev1alpha1.MyDatabasePooler, error) {
	list := &databasev1alpha1.MyDatabasePoolerList{}
	if err := e.c.List(ctx, list, client.InNamespace(db.Namespace)); apierrors.IsForbidden(err) || meta.IsNoMatchError(err) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("listing the MyDatabasePoolers of %s: %w", db.Namespace, err)
	}
	var out []databasev1alpha1.MyDatabasePooler
	for _, p := range list.Items {
		if p.Spec.Database == db.Name {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b databasev1alpha1.MyDatabasePooler) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// podsOf lists the server pods of db, sorted by name.
func (e *Env) podsOf(ctx context.Context, db *databasev1alpha1.MyDatabase) ([]corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := e.c.List(ctx, list, client.InNamespace(db.Namespace), client.MatchingLabels{
		databasev1alpha1.LabelInstance:  db.Name,
		databasev1alpha1.LabelManagedBy: databasev1alpha1.ManagedBy,
	}); err != nil {
		return nil, fmt.Errorf("listing the pods: %w", err)
	}
	slices.SortFunc(list.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return list.Items, nil
}

// eventsOf lists the events about db (the MyDatabase itself), oldest first.
func (e *Env) eventsOf(ctx context.Context, db *databasev1alpha1.MyDatabase) ([]corev1.Event, error) {
	list := &corev1.EventList{}
	if err := e.c.List(ctx, list, client.InNamespace(db.Namespace), client.MatchingFieldsSelector{
		Selector: fields.SelectorFromSet(fields.Set{
			"involvedObject.kind": "MyDatabase",
			"involvedObject.name": db.Name,
			"involvedObject.uid":  string(db.UID),
		}),
	}); err != nil {
		return nil, fmt.Errorf("listing the events: %w", err)
	}
	slices.SortStableFunc(list.Items, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	return list.Items, nil
}

// eventTime is when an event last happened, whichever API wrote it.
func eventTime(ev corev1.Event) time.Time {
	switch {
	case ev.Series != nil && !ev.Series.LastObservedTime.IsZero():
		return ev.Series.LastObservedTime.Time
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	}
	return ev.CreationTimestamp.Time
}

// writeStatus prints the summary. It is a plain function of what was read
// and the time, so that tests pin its output.
func writeStatus(out io.Writer, v *statusView, now time.Time) error {
	db, st := v.DB, v.DB.Status
	// Tables are tab-separated lines; the tabwriter aligns each block of
	// them (a line without a tab, such as a section's title, ends one).
	w := &strings.Builder{}
	age := func(t *metav1.Time) string {
		if t == nil || t.IsZero() {
			return "-"
		}
		return duration.HumanDuration(now.Sub(t.Time))
	}
	version := st.CurrentVersion
	if version == "" {
		version = db.Spec.Version
	}
	fmt.Fprintf(w, "MyDatabase\t%s/%s\n", db.Namespace, db.Name)
	fmt.Fprintf(w, "Engine\t%s %s\n", orDash(string(db.Spec.Engine)), orDash(version))
	fmt.Fprintf(w, "Phase\t%s\n", orDash(string(st.Phase)))
	if h := st.Hibernation; h != nil && h.Phase != databasev1alpha1.HibernationResumed {
		fmt.Fprintf(w, "Hibernation\t%s\n", hibernationLine(h, age))
	}
	if r := st.Replica; r != nil {
		fmt.Fprintf(w, "Replica of\t%s\n", replicaLine(r, age))
	}
	fmt.Fprintf(w, "Ready\t%s servers (generation %d, observed %d)\n", orDash(st.Ready), db.Generation, st.ObservedGeneration)
	fmt.Fprintf(w, "Primary\t%s\n", primaryLine(st))
	fmt.Fprintf(w, "Read-write\t%s\n", orDash(st.Endpoint))
	fmt.Fprintf(w, "Read-only\t%s\n", orDash(st.ReadEndpoint))
	fmt.Fprintf(w, "Credentials\tSecret %s (user %s, database %s)\n", orDash(st.CredentialsSecret), orDash(db.Spec.User), orDash(db.Spec.DatabaseName))
	if st.TLS != nil {
		fmt.Fprintf(w, "TLS\t%s\n", tlsLine(db.Spec.TLS.Clients, st.TLS, now))
	}

	section(w, "Conditions")
	if len(st.Conditions) == 0 {
		fmt.Fprintln(w, "  none reported yet")
	} else {
		fmt.Fprintln(w, "  TYPE\tSTATUS\tREASON\tAGE\tMESSAGE")
		for _, c := range st.Conditions {
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, age(&c.LastTransitionTime), c.Message)
		}
	}

	section(w, "Instances (as their instance managers report them)")
	if len(st.Instances) == 0 {
		fmt.Fprintln(w, "  none has reported: no instance manager runs yet, or none could reach the API server")
	} else {
		fmt.Fprintln(w, "  NAME\tROLE\tREADY\tTIMELINE\tLSN\tLAG (BYTES)\tVOLUME USED\tWAL\tMANAGER\tREPORTED")
		for _, i := range st.Instances {
			lag, used, wal := "-", "-", "-"
			if i.LagBytes != nil {
				lag = fmt.Sprint(*i.LagBytes)
			}
			if s := i.Storage; s != nil && s.CapacityBytes > 0 {
				used = fmt.Sprintf("%d%% of %s", 100-100*s.AvailableBytes/s.CapacityBytes, mib(s.CapacityBytes))
				wal = mib(s.WALBytes)
				if s.WALCapacityBytes > 0 { // on a WAL volume of its own
					wal += fmt.Sprintf(", %d%% of %s", 100-100*s.WALAvailableBytes/s.WALCapacityBytes, mib(s.WALCapacityBytes))
				}
			}
			fmt.Fprintf(w, "  %s\t%s\t%t\t%d\t%s\t%s\t%s\t%s\t%s\t%s ago\n", i.Name, orDash(i.Role), i.Ready, i.Timeline, orDash(i.LSN),
				lag, used, wal, orDash(i.Manager), age(i.ReportedAt))
		}
	}

	section(w, "Pods")
	if len(v.Pods) == 0 {
		fmt.Fprintln(w, "  none")
	} else {
		fmt.Fprintln(w, "  NAME\tROLE LABEL\tPHASE\tREADY\tNODE\tAGE")
		for _, p := range v.Pods {
			fmt.Fprintf(w, "  %s\t%s\t%s\t%t\t%s\t%s\n", p.Name, orDash(p.Labels[databasev1alpha1.LabelRole]),
				p.Status.Phase, specs.PodReady(&p), orDash(p.Spec.NodeName), age(&p.CreationTimestamp))
		}
	}

	section(w, "Switchover")
	fmt.Fprintln(w, "  "+switchoverLine(st.Switchover, age))

	section(w, "Passwords")
	if len(st.Passwords) == 0 {
		fmt.Fprintln(w, "  none reported")
	} else {
		fmt.Fprintln(w, "  ROLE\tSECRET\tLAST ROTATION\tROTATING")
		for _, p := range st.Passwords {
			last := "never"
			if p.LastRotationTime != nil {
				last = age(p.LastRotationTime) + " ago"
			}
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", p.Role, p.Secret, last, orDash(p.Rotating))
		}
	}

	if len(st.Roles)+len(st.Databases) > 0 {
		section(w, "Declared (spec.roles, spec.databases; as the primary applied them)")
		fmt.Fprintln(w, "  KIND\tNAME\tAPPLIED\tMESSAGE")
		for _, r := range st.Roles {
			fmt.Fprintf(w, "  role\t%s\t%t\t%s\n", r.Name, r.Applied, orDash(r.Message))
		}
		for _, d := range st.Databases {
			fmt.Fprintf(w, "  database\t%s\t%t\t%s\n", d.Name, d.Applied, orDash(d.Message))
			for _, items := range []struct {
				kind string
				list []databasev1alpha1.ItemStatus
			}{{"extension", d.Extensions}, {"publication", d.Publications}, {"subscription", d.Subscriptions}} {
				for _, i := range items.list {
					fmt.Fprintf(w, "  %s\t%s/%s\t%t\t%s\n", items.kind, d.Name, i.Name, i.Applied, orDash(i.Message))
				}
			}
		}
	}

	if len(v.Poolers) > 0 {
		section(w, "Poolers")
		fmt.Fprintln(w, "  NAME\tTYPE\tMODE\tREADY\tENDPOINT\tSTATUS")
		for _, p := range v.Poolers {
			state := "-"
			if c := meta.FindStatusCondition(p.Status.Conditions, databasev1alpha1.ConditionReady); c != nil {
				state = c.Reason
				if c.Status != metav1.ConditionTrue {
					state += ": " + c.Message
				}
			}
			if p.Spec.PgBouncer.Paused {
				state += " (paused by hand: spec.pgbouncer.paused)"
			}
			if last := p.Status.LastSwitchover; last != nil {
				state += fmt.Sprintf("; %d/%d pods paused through the switchover to %s", last.PausedPods, p.Status.Instances, last.To)
			}
			fmt.Fprintf(w, "  %s\t%s\t%s\t%d/%d\t%s\t%s\n", p.Name, p.Spec.Type, p.Spec.PoolMode, p.Status.ReadyInstances,
				p.Status.Instances, orDash(p.Status.Endpoint), state)
		}
	}

	events := v.Events
	if len(events) > maxEvents {
		events = events[len(events)-maxEvents:]
	}
	section(w, fmt.Sprintf("Events (the last %d)", maxEvents))
	if len(events) == 0 {
		fmt.Fprintln(w, "  none")
	} else {
		fmt.Fprintln(w, "  AGE\tTYPE\tREASON\tMESSAGE")
		for _, ev := range events {
			t := metav1.NewTime(eventTime(ev))
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", age(&t), ev.Type, ev.Reason, strings.TrimSpace(ev.Message))
		}
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if _, err := io.WriteString(tw, w.String()); err != nil {
		return err
	}
	return tw.Flush()
}

func section(w *strings.Builder, title string) { fmt.Fprintf(w, "\n%s:\n", title) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func primaryLine(st databasev1alpha1.MyDatabaseStatus) string {
	line := orDash(st.CurrentPrimary)
	if st.TargetPrimary != "" && st.TargetPrimary != st.CurrentPrimary {
		line += fmt.Sprintf(" (switching over to %s)", st.TargetPrimary)
	}
	return line
}

func hibernationLine(h *databasev1alpha1.HibernationStatus, age func(*metav1.Time) string) string {
	if h.Phase == databasev1alpha1.HibernationHibernated {
		return fmt.Sprintf("no server runs (for %s); %s resumes as the primary (kubectl mydb hibernate NAME --off)", age(h.HibernatedAt), h.Primary)
	}
	return fmt.Sprintf("%s: %s", h.Phase, orDash(h.Message))
}

// replicaLine says what a replica MyDatabase follows and where its replay
// stands.
func replicaLine(r *databasev1alpha1.ReplicaStatus, age func(*metav1.Time) string) string {
	line := r.Source + ": no writes"
	switch {
	case r.Streaming && r.LagBytes != nil:
		line += fmt.Sprintf("; streaming, %d bytes behind", *r.LagBytes)
	case r.Streaming:
		line += "; streaming"
	case r.LastFetchedWAL != "":
		line += "; from the archive, last WAL " + r.LastFetchedWAL
	}
	if r.LastReplayedTime != nil {
		line += "; replayed the source's commits of " + age(r.LastReplayedTime) + " ago"
	}
	if r.DesignatedPrimary != "" {
		line += " (designated primary " + r.DesignatedPrimary + ")"
	}
	return line
}

func switchoverLine(sw *databasev1alpha1.SwitchoverStatus, age func(*metav1.Time) string) string {
	if sw == nil {
		return "none so far"
	}
	line := fmt.Sprintf("%s: %s -> %s (%s", orDash(string(sw.Phase)), orDash(sw.From), orDash(sw.To), orDash(sw.Reason))
	if sw.StartedAt != nil {
		line += ", started " + age(sw.StartedAt) + " ago"
	}
	if sw.FinishedAt != nil {
		line += ", finished " + age(sw.FinishedAt) + " ago"
	}
	line += ")"
	if sw.Message != "" {
		line += ": " + sw.Message
	}
	return line
}

// tlsLine says whether clients must use TLS and where the certificate
// stands.
func tlsLine(clients databasev1alpha1.TLSClients, st *databasev1alpha1.TLSStatus, now time.Time) string {
	line := fmt.Sprintf("clients %s; certificate in Secret %s", orDash(string(clients)), st.ServerCertSecret)
	if st.NotAfter != nil {
		line += fmt.Sprintf(", expires in %s", duration.HumanDuration(st.NotAfter.Sub(now)))
	}
	if st.RenewAt != nil {
		line += fmt.Sprintf(", renewed by the operator in %s", duration.HumanDuration(st.RenewAt.Sub(now)))
	}
	if r := st.CARotation; r != nil && r.Phase != databasev1alpha1.CARotationSucceeded {
		line += fmt.Sprintf("; CA rotation %s: %s", r.Phase, r.Message)
	} else if r != nil && r.FinishedAt != nil {
		line += fmt.Sprintf("; CA rotated %s ago", duration.HumanDuration(now.Sub(r.FinishedAt.Time)))
	}
	return line
}

// mib writes a byte count in whole MiB.
func mib(b int64) string { return fmt.Sprintf("%dMi", b>>20) }
