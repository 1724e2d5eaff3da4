package mydatabase

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/contract"
	"example.com/myoperator/internal/specs"
)

// Password rotation, the operator's part (docs/password-rotation.md). The
// operator never connects to PostgreSQL; the instance managers set the
// passwords. For a generated Secret, one pass at a time:
//
//  1. a request in spec.passwordRotation that the Secret does not record
//     (AnnotationRotationRequest) gets a staging Secret
//     <secret>-rotation with a new password;
//  2. the primary's instance manager sets it in PostgreSQL; every
//     instance reports the staging Secret's resourceVersion once its
//     server accepts the password (replicas by replaying the change);
//  3. once the primary and every ready replica report it, the Secret
//     receives the password, the request and the time, in one write;
//  4. the staging Secret is deleted.
//
// Each step is decided from what exists, so a crash between any two
// writes resumes where it was; the Secret never holds a password that the
// primary and the ready replicas do not accept. A user-supplied Secret is
// its own source: the instance managers apply its password when it
// changes, and the operator only reports whether the primary has.

// passwordTarget is one role's password Secret.
type passwordTarget struct {
	role, secret string
	// request is the spec's rotation request, "" for none.
	request      string
	userSupplied bool
}

func passwordTargets(db *databasev1alpha1.MyDatabase) []passwordTarget {
	user := passwordTarget{role: db.Spec.User, secret: specs.GeneratedCredentialsSecretName(db), request: specs.UserRotationRequest(db)}
	if specs.UserSuppliedCredentials(db) {
		user = passwordTarget{role: db.Spec.User, secret: db.Spec.Credentials.SecretName, userSupplied: true}
	}
	return []passwordTarget{user}
}

// rotation is the component of password rotation.
type rotation struct {
	*kit
	*scope
}

// reconcile runs the rotation of each password and reports where
// it stands in status.passwords; a rotation under way keeps the MyDatabase
// Reconciling (RotatingPassword).
func (r *rotation) reconcile(ctx context.Context, obs *observation) error {
	db := r.db
	reports := podReports(r.pods)
	primary := r.primaryPod()
	var rotating []string
	for _, t := range passwordTargets(db) {
		var st databasev1alpha1.PasswordStatus
		var err error
		if t.userSupplied {
			st, err = r.followUserSecret(ctx, db, obs, t, reports[primary], primary)
		} else {
			st, err = r.rotate(ctx, db, obs, t, reports, primary)
		}
		if err != nil || obs.blocked() {
			return err
		}
		obs.passwords = append(obs.passwords, st)
		if st.Rotating != "" {
			rotating = append(rotating, fmt.Sprintf("role %s: %s", st.Role, st.Rotating))
		}
	}
	if len(rotating) > 0 {
		obs.waiting = &blocker{Reason: databasev1alpha1.ReasonRotatingPassword, Message: strings.Join(rotating, "; ")}
	}
	return nil
}

// rotate carries a generated Secret's rotation one step further.
func (r *rotation) rotate(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation,
	t passwordTarget, reports map[string]*contract.Report, primary string) (databasev1alpha1.PasswordStatus, error) {
	st := databasev1alpha1.PasswordStatus{Role: t.role, Secret: t.secret}
	final := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: t.secret}, final); err != nil {
		// the credentials component creates it, or stalls: nothing to rotate.
		return st, client.IgnoreNotFound(err)
	}
	st.LastRotationTime = rotatedAt(final)
	name := specs.StagingSecretName(t.secret)
	staging := &corev1.Secret{}
	err := r.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, staging)
	switch {
	case apierrors.IsNotFound(err):
		if t.request == "" || t.request == final.Annotations[databasev1alpha1.AnnotationRotationRequest] {
			return st, nil
		}
		return st, r.stage(ctx, db, obs, t, &st)
	case err != nil:
		return st, objectError("get", staging, name, err)
	}
	if ref := metav1.GetControllerOf(staging); ref != nil && ref.UID != db.UID {
		st.Rotating = fmt.Sprintf("Secret %s belongs to a deleted MyDatabase of the same name; waiting for the garbage collector", name)
		return st, nil
	}
	if waiting := unconfirmed(r.pods, reports, primary, name, staging.ResourceVersion); len(waiting) > 0 {
		st.Rotating = fmt.Sprintf("the new password (Secret %s) is not accepted yet by %s; the primary's instance manager sets it in PostgreSQL",
			name, strings.Join(waiting, ", "))
		return st, nil
	}
	if err := r.receive(ctx, db, final, staging); err != nil {
		return st, err
	}
	st.LastRotationTime = rotatedAt(final)
	err = r.Delete(ctx, staging, client.Preconditions{UID: &staging.UID})
	if err != nil && !apierrors.IsNotFound(err) {
		return st, objectError("delete", staging, name, err)
	}
	return st, nil
}

// stage creates the staging Secret with a new password.
func (r *rotation) stage(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation,
	t passwordTarget, st *databasev1alpha1.PasswordStatus) error {
	password, err := r.NewPassword()
	if err != nil {
		return err
	}
	staging := specs.StagingSecret(db, t.secret, t.role, password, t.request)
	err = r.Create(ctx, staging, client.FieldOwner(FieldOwner))
	if apierrors.IsAlreadyExists(err) {
		return r.explainExistingSecret(ctx, db, obs, staging.Name)
	}
	if err != nil {
		return objectError("create", staging, staging.Name, err)
	}
	r.event(db, corev1.EventTypeNormal, "PasswordRotationStarted",
		"New password of role %s staged in Secret %s for request %s; Secret %s receives it once PostgreSQL accepts it",
		t.role, staging.Name, t.request, t.secret)
	st.Rotating = fmt.Sprintf("new password staged in Secret %s; waiting for the primary's instance manager to set it", staging.Name)
	return nil
}

// receive writes the staged password into the Secret, with the request it
// fulfils, the time and the digest, in one write; a Secret that has them
// already (a pass that stopped before deleting the staging Secret) is not
// written again.
func (r *rotation) receive(ctx context.Context, db *databasev1alpha1.MyDatabase, final, staging *corev1.Secret) error {
	password := string(staging.Data[specs.SecretPasswordKey])
	request := staging.Annotations[databasev1alpha1.AnnotationRotationRequest]
	if string(final.Data[specs.SecretPasswordKey]) == password && final.Annotations[databasev1alpha1.AnnotationRotationRequest] == request {
		return nil
	}
	before := final.DeepCopy()
	final.Data = specs.WithPassword(final.Data, password)
	final.Annotations = withEntries(final.Annotations, map[string]string{
		databasev1alpha1.AnnotationPasswordDigest:  specs.PasswordDigest([]byte(password)),
		databasev1alpha1.AnnotationRotationRequest: request,
		databasev1alpha1.AnnotationRotatedAt:       r.Clock.Now().UTC().Format(time.RFC3339),
	})
	if err := r.Patch(ctx, final, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return objectError("patch", final, final.Name, err)
	}
	r.event(db, corev1.EventTypeNormal, "PasswordRotated",
		"Secret %s has the new password of role %s, which PostgreSQL accepts; the old one no longer works", final.Name,
		staging.Annotations[databasev1alpha1.AnnotationRole])
	return nil
}

// followUserSecret reports whether the primary accepts the password of a
// user-supplied Secret as it is now. The instance managers read it
// themselves; the operator writes nothing.
func (r *rotation) followUserSecret(ctx context.Context, db *databasev1alpha1.MyDatabase, obs *observation, t passwordTarget,
	primaryReport *contract.Report, primary string) (databasev1alpha1.PasswordStatus, error) {
	st := databasev1alpha1.PasswordStatus{Role: t.role, Secret: t.secret}
	// An instance manager that reports no password at all predates
	// rotation, or has not looked yet: nothing can be said.
	if primaryReport == nil || len(primaryReport.Passwords) == 0 {
		return st, nil
	}
	secret := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: t.secret}, secret); err != nil {
		return st, client.IgnoreNotFound(err) // checkUserSecret has said what is wrong
	}
	switch primaryReport.Passwords[t.secret] {
	case secret.ResourceVersion:
	case contract.PasswordRefused + secret.ResourceVersion:
		obs.stalled = refusedPassword(t)
	default:
		st.Rotating = fmt.Sprintf("Secret %s changed; waiting for the instance manager of %s to set its password in PostgreSQL", t.secret, primary)
	}
	return st, nil
}

func refusedPassword(t passwordTarget) *blocker {
	return &blocker{Reason: databasev1alpha1.ReasonPasswordNotApplied, Message: fmt.Sprintf(
		"the password in Secret %s has characters other than printable ASCII, which the instance manager does not set "+
			"(PostgreSQL normalises them with SASLprep); PostgreSQL still accepts the previous password of role %s: "+
			"put a printable ASCII password in the Secret", t.secret, t.role)}
}

// unconfirmed names the instances that must accept the staged password
// (Secret name at resourceVersion rv) before the Secret receives it: the
// primary, and every replica whose last report says it is ready. A
// replica that is down is not waited for: it reads the password file it
// needs when it comes back (docs/password-rotation.md).
func unconfirmed(pods []corev1.Pod, reports map[string]*contract.Report, primary, name, rv string) []string {
	var out []string
	if rep := reports[primary]; rep == nil || rep.Passwords[name] != rv {
		out = append(out, primary)
	}
	for _, p := range pods {
		rep := reports[p.Name]
		if p.Name == primary || rep == nil || !rep.Ready || rep.Role != databasev1alpha1.RoleReplica {
			continue
		}
		if rep.Passwords[name] != rv {
			out = append(out, p.Name)
		}
	}
	slices.Sort(out)
	return out
}

func rotatedAt(s *corev1.Secret) *metav1.Time {
	t, err := time.Parse(time.RFC3339, s.Annotations[databasev1alpha1.AnnotationRotatedAt])
	if err != nil {
		return nil
	}
	return new(metav1.NewTime(t))
}
