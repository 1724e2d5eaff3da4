package mydatabase

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
)

// What the pods report (contract.Report, the annotation each instance
// manager keeps on its own pod), read for the components and the status
// alike. reportOf is still in backup.go, its first user; a report's times
// become a status's with contract.MetaTime.

// podReports parses the pods' instance reports, by pod name.
func podReports(pods []corev1.Pod) map[string]*contract.Report {
	out := map[string]*contract.Report{}
	for i := range pods {
		if v, ok := pods[i].Annotations[contract.AnnotationInstance]; ok {
			if rep, err := contract.Parse(v); err == nil {
				out[pods[i].Name] = &rep
			}
		}
	}
	return out
}

// instanceStatuses turns the pods' reports into status.instances, in name
// order, with each replica's lag behind the primary's reported position.
func instanceStatuses(pods []corev1.Pod, primary string) []databasev1alpha1.InstanceStatus {
	var out []databasev1alpha1.InstanceStatus
	var primaryLSN uint64
	reports := map[string]*contract.Report{}
	for i := range pods {
		v, ok := pods[i].Annotations[contract.AnnotationInstance]
		if !ok {
			continue
		}
		rep, err := contract.Parse(v)
		if err != nil {
			continue
		}
		reports[pods[i].Name] = &rep
		if pods[i].Name == primary && rep.Role == databasev1alpha1.RolePrimary {
			primaryLSN, _ = contract.LSN(rep.LSN)
		}
	}
	for i := range pods {
		rep, ok := reports[pods[i].Name]
		if !ok {
			continue
		}
		st := databasev1alpha1.InstanceStatus{Name: pods[i].Name, Role: rep.Role, Ready: rep.Ready,
			Timeline: rep.Timeline, LSN: rep.LSN, ReportedAt: new(metav1.NewTime(rep.Time)), Manager: short(rep.Manager)}
		if s := rep.Storage; s != nil {
			st.Storage = &databasev1alpha1.InstanceStorage{CapacityBytes: s.CapacityBytes, AvailableBytes: s.AvailableBytes,
				WALBytes: s.WALBytes, WALCapacityBytes: s.WALCapacityBytes, WALAvailableBytes: s.WALAvailableBytes}
		}
		if rep.Role == databasev1alpha1.RoleReplica && primaryLSN > 0 {
			st.LSN = rep.Replayed
			replayed, err := contract.LSN(rep.Replayed)
			if err == nil {
				st.LagBytes = new(int64(primaryLSN) - int64(min(replayed, primaryLSN)))
			}
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b databasev1alpha1.InstanceStatus) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// short is how events and the status name a version.
func short(digest string) string { return digest[:min(len(digest), 12)] }

// podRestore is the restore one pod reports.
type podRestore struct {
	pod string
	*contract.Restore
}

// restoring is the restore a pod of a new MyDatabase reports (only the
// first instance restores), nil when none does.
func restoring(pods []corev1.Pod) *podRestore {
	for name, rep := range podReports(pods) {
		if rep.Restore != nil {
			return &podRestore{name, rep.Restore}
		}
	}
	return nil
}
