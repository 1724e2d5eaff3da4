package reliability

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/myoperator/internal/testenv"
)

// namespacedInstall is what config/namespaced renders for the operator
// itself: its ServiceAccount, the Role and RoleBinding that replace the
// ClusterRole, every ClusterRoleBinding, and the manager's container.
type namespacedInstall struct {
	sa              *corev1.ServiceAccount
	role            *rbacv1.Role
	binding         *rbacv1.RoleBinding
	clusterBindings []*rbacv1.ClusterRoleBinding
	manager         corev1.Container
}

func renderNamespacedInstall(t *testing.T) namespacedInstall {
	t.Helper()
	out, err := testenv.Kustomize("config/namespaced")
	if err != nil {
		t.Fatal(err)
	}
	var in namespacedInstall
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(u); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		into := func(obj any) {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
				t.Fatal(err)
			}
		}
		switch name := u.GetName(); {
		case u.GetKind() == "ServiceAccount" && name == "main-controller-manager":
			in.sa = &corev1.ServiceAccount{}
			into(in.sa)
		case u.GetKind() == "Role" && name == "main-manager-role":
			in.role = &rbacv1.Role{}
			into(in.role)
		case u.GetKind() == "RoleBinding" && name == "main-manager-rolebinding":
			in.binding = &rbacv1.RoleBinding{}
			into(in.binding)
		case u.GetKind() == "ClusterRoleBinding":
			b := &rbacv1.ClusterRoleBinding{}
			into(b)
			in.clusterBindings = append(in.clusterBindings, b)
		case u.GetKind() == "Deployment" && name == "main-controller-manager":
			d := &appsv1.Deployment{}
			into(d)
			in.manager = d.Spec.Template.Spec.Containers[0]
		}
	}
	if in.sa == nil || in.role == nil || in.binding == nil || in.manager.Name == "" {
		t.Fatalf("config/namespaced lacks the ServiceAccount, Role, RoleBinding or manager Deployment:\n%s", out)
	}
	return in
}

// Scenario 11, namespace-scoped: config/namespaced grants the operator a
// Role in its own namespace and no ClusterRole with access to any object;
// run with exactly that Role and watching only its namespace, the operator
// goes through the whole lifecycle there and never touches a MyDatabase
// elsewhere.
func TestNamespaceScopedInstall(t *testing.T) {
	in := renderNamespacedInstall(t)

	// The only cluster-wide grant is the metrics endpoint's authentication.
	for _, b := range in.clusterBindings {
		if b.RoleRef.Name != "main-metrics-auth-role" {
			t.Errorf("config/namespaced binds ClusterRole %q cluster-wide", b.RoleRef.Name)
		}
	}
	if in.binding.RoleRef.Kind != "Role" || in.binding.RoleRef.Name != in.role.Name {
		t.Errorf("RoleBinding refers to %s %q, want Role %q", in.binding.RoleRef.Kind, in.binding.RoleRef.Name, in.role.Name)
	}
	watches := slices.ContainsFunc(in.manager.Env, func(e corev1.EnvVar) bool {
		return e.Name == "WATCH_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil &&
			e.ValueFrom.FieldRef.FieldPath == "metadata.namespace"
	})
	if !watches {
		t.Errorf("the manager does not get WATCH_NAMESPACE from its own namespace: env %+v", in.manager.Env)
	}
	// The database pods' init container needs the operator's image.
	if !slices.ContainsFunc(in.manager.Env, func(e corev1.EnvVar) bool {
		return e.Name == "INSTANCE_MANAGER_IMAGE" && e.Value == in.manager.Image
	}) {
		t.Errorf("the manager's INSTANCE_MANAGER_IMAGE is not its own image %q: env %+v", in.manager.Image, in.manager.Env)
	}

	// Install the rendered Role, RoleBinding and ServiceAccount into a test
	// namespace, as kustomize would with `namespace:` changed.
	ns := namespace(t)
	in.sa.Namespace, in.role.Namespace, in.binding.Namespace = ns, ns, ns
	for i := range in.binding.Subjects {
		in.binding.Subjects[i].Namespace = ns
	}
	createAll(t, in.sa, in.role, in.binding)

	elsewhere := newDB(namespace(t))
	runLifecycle(t, ns, asServiceAccount(in.sa), ns)

	ctx := context.Background()
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(elsewhere), elsewhere); err != nil {
		t.Fatal(err)
	}
	if len(elsewhere.Finalizers) > 0 || elsewhere.Status.Phase != "" || len(elsewhere.Status.Conditions) > 0 {
		t.Errorf("a MyDatabase in another namespace was touched: finalizers %v, status %+v", elsewhere.Finalizers, elsewhere.Status)
	}
	err := env.Client.Get(ctx, client.ObjectKey{Namespace: elsewhere.Namespace, Name: elsewhere.Name}, &appsv1.StatefulSet{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("a StatefulSet was created in another namespace (err %v)", err)
	}
}
