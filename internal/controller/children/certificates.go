package children

import (
	"bytes"
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/myoperator/internal/pki"
)

// Renewal says why a certificate the operator issued is due to be issued
// again, "" when it is not: its check (against the CA that issues) found
// a problem (a certificate that cannot be read is one) or says it is due,
// or it does not cover exactly names (nil: a client certificate, no names
// to cover).
func Renewal(check pki.Check, names []string) string {
	switch {
	case names != nil && check.Cert != nil && !check.Cert.SameNames(names):
		return "the names clients use changed"
	case len(check.Problems) > 0:
		return strings.Join(check.Problems, "; ")
	case check.Renew:
		return "it is due for renewal"
	}
	return ""
}

// Trust gives secret, whose certificates are good, the CAs to trust:
// each key of cas whose value differs is written, nothing else. It
// patches over the version read (a concurrent change conflicts), and
// says whether it wrote.
func Trust(ctx context.Context, c client.Writer, secret *corev1.Secret, cas map[string][]byte, opts ...client.PatchOption) (bool, error) {
	before := secret.DeepCopy()
	changed := false
	for key, value := range cas {
		if !bytes.Equal(secret.Data[key], value) {
			if secret.Data == nil {
				secret.Data = map[string][]byte{}
			}
			secret.Data[key], changed = value, true
		}
	}
	if !changed {
		return false, nil
	}
	if err := c.Patch(ctx, secret, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}), opts...); err != nil {
		return false, ObjectError("patch", secret, secret.Name, err)
	}
	return true, nil
}
