package specs

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/pki"
)

// maxReplicas is the largest spec.replicas the CRD accepts
// (+kubebuilder:validation:Maximum=9), so the highest pod ordinal is 8.
const maxReplicas = 9

// revisionHashLength is the longest hash the StatefulSet controller puts in
// the controller-revision-hash label (<statefulset>-<hash>) of its pods and
// in its ControllerRevisions' names: k8s.io/kubernetes/pkg/controller/history
// writes the FNV-32 of the revision in decimal and then maps every character
// to another one (rand.SafeEncodeString), so at most the digits of MaxUint32.
var revisionHashLength = len(strconv.FormatUint(math.MaxUint32, 10))

// derivedName is a name or label value that the children of a MyDatabase, or
// the pods and volumes the StatefulSet controller makes for it, carry, with
// the rule the API server holds it to.
type derivedName struct {
	what  string
	value string
	valid func(string) []string
}

// derivedNames reads every name and label from what the builders return,
// and from what the StatefulSet controller derives from the StatefulSet,
// for a MyDatabase at its largest scale.
func derivedNames(t *testing.T, d *databasev1alpha1.MyDatabase) []derivedName {
	t.Helper()
	var out []derivedName
	add := func(what, value string, valid func(string) []string) {
		out = append(out, derivedName{what, value, valid})
	}
	labels := func(what string, l map[string]string) {
		for _, k := range slices.Sorted(maps.Keys(l)) {
			add(fmt.Sprintf("%s label key %s", what, k), k, validation.IsQualifiedName)
			add(fmt.Sprintf("%s label %s", what, k), l[k], validation.IsValidLabelValue)
		}
	}

	sts := typed[appsv1.StatefulSet](t, StatefulSet(d, Platform{}))
	add("StatefulSet name", sts.Name, dnsSubdomain)
	labels("StatefulSet", sts.Labels)
	labels("StatefulSet selector", sts.Spec.Selector.MatchLabels)
	labels("pod template", sts.Spec.Template.Labels)
	// The StatefulSet controller's ControllerRevisions and the
	// controller-revision-hash label of every pod.
	revision := sts.Name + "-" + strings.Repeat("h", revisionHashLength)
	add("ControllerRevision name", revision, dnsSubdomain)
	add("pods' label "+appsv1.ControllerRevisionHashLabelKey, revision, validation.IsValidLabelValue)
	// Pods, as the StatefulSet controller names and labels them; the pod
	// name is also the hostname and the subdomain is the governing Service.
	add("pod subdomain (spec.serviceName)", sts.Spec.ServiceName, validation.IsDNS1123Label)
	for ordinal := range *sts.Spec.Replicas {
		pod := fmt.Sprintf("%s-%d", sts.Name, ordinal)
		add("pod name and hostname "+pod, pod, validation.IsDNS1123Label)
		podLabels := maps.Clone(sts.Spec.Template.Labels)
		podLabels[appsv1.StatefulSetPodNameLabel] = pod
		podLabels[appsv1.PodIndexLabel] = strconv.Itoa(int(ordinal))
		labels("pod "+pod, podLabels)
		for _, claim := range sts.Spec.VolumeClaimTemplates {
			add("PersistentVolumeClaim of "+pod, claim.Name+"-"+pod, dnsSubdomain)
			labels("PersistentVolumeClaim", claim.Labels)
		}
	}
	// Each pod's address on the headless Service, which the other
	// instances connect to (the kubelet expands $(POD_NAME)).
	for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
		if e.Name != "ADVERTISE_ADDRESS" {
			continue
		}
		host, _, _ := strings.Cut(e.Value, ":")
		for ordinal := range *sts.Spec.Replicas {
			add("ADVERTISE_ADDRESS host", strings.ReplaceAll(host, "$(POD_NAME)", fmt.Sprintf("%s-%d", sts.Name, ordinal)), dnsName)
		}
	}
	// The instance managers' ServiceAccount, Role, RoleBinding and Lease.
	add("instance access objects' name", InstanceAccessName(d), dnsSubdomain)
	add("Lease name", LeaseName(d), dnsSubdomain)
	labels("Lease", Lease(d, "", false).Labels)

	for _, ac := range []any{HeadlessService(d), ReadWriteService(d), ReadOnlyService(d)} {
		svc := typed[corev1.Service](t, ac)
		add("Service name", svc.Name, validation.IsDNS1035Label)
		labels("Service "+svc.Name, svc.Labels)
		labels("Service "+svc.Name+" selector", svc.Spec.Selector)
	}

	cm := typed[corev1.ConfigMap](t, ConfigMap(d))
	add("ConfigMap name", cm.Name, dnsSubdomain)
	labels("ConfigMap", cm.Labels)

	pdb := typed[policyv1.PodDisruptionBudget](t, PodDisruptionBudget(d))
	add("PodDisruptionBudget name", pdb.Name, dnsSubdomain)
	labels("PodDisruptionBudget", pdb.Labels)
	labels("PodDisruptionBudget selector", pdb.Spec.Selector.MatchLabels)

	credentials := CredentialsSecret(d, "password")
	add("credentials Secret name", credentials.Name, dnsSubdomain)
	labels("credentials Secret", credentials.Labels)
	add("credentials Secret host", string(credentials.Data[SecretHostKey]), dnsName)
	replication := ReplicationCertSecret(d, pki.KeyPair{}, nil)
	add("replication certificate Secret name", replication.Name, dnsSubdomain)
	labels("replication certificate Secret", replication.Labels)
	return out
}

func dnsSubdomain(s string) []string { return validation.IsDNS1123Subdomain(s) }

// dnsName checks a host name: a DNS subdomain each of whose labels is at most
// 63 characters (IsDNS1123Subdomain checks only the total length).
func dnsName(s string) []string {
	errs := validation.IsDNS1123Subdomain(s)
	for label := range strings.SplitSeq(s, ".") {
		errs = append(errs, validation.IsDNS1123Label(label)...)
	}
	return errs
}

// namedDB is a MyDatabase with a name of n characters at its largest scale,
// in a namespace of the longest possible name.
func namedDB(n int) *databasev1alpha1.MyDatabase {
	return db(func(d *databasev1alpha1.MyDatabase) {
		d.Name = strings.Repeat("a", n)
		d.Namespace = strings.Repeat("n", validation.DNS1123LabelMaxLength)
		d.UID = types.UID("6f1c1b8e-3a57-4d5e-9a43-0d2b1c9e7f10")
		d.Spec.Replicas = ptr.To[int32](maxReplicas)
	})
}

// invalidNames lists every derived name the API server would refuse.
func invalidNames(t *testing.T, d *databasev1alpha1.MyDatabase) []string {
	t.Helper()
	var bad []string
	for _, n := range derivedNames(t, d) {
		if errs := n.valid(n.value); len(errs) > 0 {
			bad = append(bad, fmt.Sprintf("%s %q (%d characters): %s", n.what, n.value, len(n.value), strings.Join(errs, "; ")))
		}
	}
	return bad
}

// TestMaxNameLength derives the longest workable name from the builders
// themselves: a new child, label or longer suffix that does not fit makes it
// fail, and MaxNameLength (with the CRD rule) must then come down.
func TestMaxNameLength(t *testing.T) {
	if got := len(derivedNames(t, namedDB(1))); got < 50 {
		t.Fatalf("only %d derived names: the builders' output was not read", got)
	}
	for n := 1; n <= databasev1alpha1.MaxNameLength; n++ {
		if bad := invalidNames(t, namedDB(n)); len(bad) > 0 {
			t.Fatalf("a name of %d characters (MaxNameLength is %d) gives invalid children:\n%s",
				n, databasev1alpha1.MaxNameLength, strings.Join(bad, "\n"))
		}
	}
	over := databasev1alpha1.MaxNameLength + 1
	bad := invalidNames(t, namedDB(over))
	if len(bad) == 0 {
		t.Fatalf("a name of %d characters still gives valid children: MaxNameLength (%d) is needlessly low",
			over, databasev1alpha1.MaxNameLength)
	}
	t.Logf("a name of %d characters would give:\n%s", over, strings.Join(bad, "\n"))
}
