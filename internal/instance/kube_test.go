package instance

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"example.com/myoperator/internal/contract"
)

// TestPeersAreThisStatefulSetsPods: the peers whose candidacies count in
// an election are the pods of this instance's StatefulSet, by name. A pod
// of another MyDatabase that took this one's labels (its instance manager
// may patch its own pod) and published a candidacy far ahead is not one,
// nor is a pod of a MyDatabase whose name extends this one's.
func TestPeersAreThisStatefulSetsPods(t *testing.T) {
	labels := map[string]string{"app.kubernetes.io/instance": "db"}
	liar := contract.Report{Ready: true, Candidate: &contract.Candidacy{Term: "7", LSN: "FFFFFFFF/FFFFFFFF", Timeline: 99}}
	var objs []runtime.Object
	for _, name := range []string{"db-0", "db-1", "db-10", "other-1", "db-1-0", "db-01"} {
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: labels,
			Annotations: map[string]string{contract.AnnotationInstance: liar.String()}}})
	}
	cs := fake.NewClientset(objs...)
	k := &kube{pods: cs.CoreV1().Pods("shop"), c: Config{PodName: "db-1", PodSelector: "app.kubernetes.io/instance=db"}, timeout: time.Second}
	peers, err := k.peers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range peers {
		names = append(names, p.name)
	}
	slices.Sort(names)
	if want := []string{"db-0", "db-10"}; !slices.Equal(names, want) {
		t.Errorf("peers %v, want %v", names, want)
	}
}
