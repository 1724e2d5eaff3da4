package mydatabase

import (
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/apply"
	"example.com/myoperator/internal/controller/children"
)

// maxServerWords bounds the server's own words quoted in a condition
// message: enough for any admission or quota message, not a whole object.
const maxServerWords = 1024

// classify turns the error that ended a pass into what status reports.
// Refusals only a person can lift (quota, admission policies and webhooks,
// RBAC, a spec that derives an invalid child) stall the MyDatabase, with
// what to do; everything else (timeouts, 5xx, throttling, a namespace being
// deleted) is transient and retried with the queue's backoff. Conflicts
// never get here: they are retried at once, with no status (Reconcile).
func classify(db *databasev1alpha1.MyDatabase, err error) (b *blocker, stalled bool) {
	what := "the API server"
	if oe := (*apply.ObjectError)(nil); errors.As(err, &oe) {
		what = fmt.Sprintf("%s %s", oe.Kind, oe.Name)
		err = oe.Err
	}
	words := quote(err.Error())
	reason := ""
	switch {
	case !errors.As(err, new(apierrors.APIStatus)), apierrors.HasStatusCause(err, "NamespaceTerminating"):
	case apierrors.IsForbidden(err) && strings.Contains(words, "exceeded quota"):
		reason = databasev1alpha1.ReasonQuotaExceeded
	case admissionDenial(words):
		reason = databasev1alpha1.ReasonAdmissionDenied
	case apierrors.IsForbidden(err) && strings.Contains(words, " cannot "):
		reason = databasev1alpha1.ReasonForbidden
	case apierrors.IsForbidden(err):
		reason = databasev1alpha1.ReasonAdmissionDenied // a LimitRange, say
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		reason = databasev1alpha1.ReasonInvalidChild
	}
	if reason == "" {
		return &blocker{Reason: databasev1alpha1.ReasonAPIError, Message: fmt.Sprintf("%s: %s; retrying", what, words)}, false
	}
	return &blocker{Reason: reason, Message: fmt.Sprintf("the API server refused %s: %s. %s; the operator retries on its own",
		what, words, whatToDo(db, reason))}, true
}

// whatToDo is the advice of a Stalled message for each refusal.
func whatToDo(db *databasev1alpha1.MyDatabase, reason string) string {
	switch reason {
	case databasev1alpha1.ReasonQuotaExceeded:
		return fmt.Sprintf("Raise the ResourceQuota of namespace %q (kubectl describe resourcequota -n %s) or free what it counts",
			db.Namespace, db.Namespace)
	case databasev1alpha1.ReasonAdmissionDenied:
		return "An admission policy, webhook or plugin of the cluster denies it: change it, or the MyDatabase spec so that it complies"
	case databasev1alpha1.ReasonForbidden:
		return "The operator's service account lacks this permission: apply the RBAC of the installed operator version " +
			"(config/rbac, or dist/install.yaml)"
	default: // InvalidChild
		return "The spec derives an object the API server does not accept: correct the spec field the message names"
	}
}

// quote bounds the server's words for a condition message.
func quote(words string) string {
	if len(words) > maxServerWords {
		return words[:maxServerWords] + "…"
	}
	return words
}

// admissionDenial tells a refusal by a validating admission policy or an
// admission webhook from the server's words: both can answer with any
// status code (403, 422, 400).
func admissionDenial(words string) bool {
	return strings.Contains(words, "admission webhook") || strings.Contains(words, "ValidatingAdmissionPolicy")
}

// objectError names the object a failed request was about, for classify
// (children.ObjectError).
func objectError(verb string, obj client.Object, name string, err error) error {
	return children.ObjectError(verb, obj, name, err)
}
