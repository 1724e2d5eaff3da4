package specs

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
)

// Keys of the credentials Secret.
const (
	SecretUsernameKey = "username"
	SecretPasswordKey = "password"
	SecretDatabaseKey = "database"
	SecretHostKey     = "host"
	SecretPortKey     = "port"
	SecretURIKey      = "uri"
)

// PasswordDigest is the value of databasev1alpha1.AnnotationPasswordDigest.
func PasswordDigest(password []byte) string {
	sum := sha256.Sum256(password)
	return hex.EncodeToString(sum[:])
}

// PasswordLength is the length of generated passwords: 32 characters from a
// 62-letter alphabet, about 190 bits.
const PasswordLength = 32

const passwordAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// RandomPassword draws a password from crypto/rand. Letters and digits only,
// so it needs no quoting in a URI, a .pgpass file or a shell.
func RandomPassword() (string, error) {
	// rand.Text-like rejection sampling keeps every letter equally likely.
	out := make([]byte, 0, PasswordLength)
	buf := make([]byte, 64)
	for len(out) < PasswordLength {
		if _, err := rand.Read(buf); err != nil {
			return "", fmt.Errorf("reading crypto/rand: %w", err)
		}
		for _, b := range buf {
			if int(b) < 256-256%len(passwordAlphabet) && len(out) < PasswordLength {
				out = append(out, passwordAlphabet[int(b)%len(passwordAlphabet)])
			}
		}
	}
	return string(out), nil
}

// ReadWriteHost is the DNS name of the read-write Service.
func ReadWriteHost(db *databasev1alpha1.MyDatabase) string {
	return fmt.Sprintf("%s.%s.svc", ReadWriteServiceName(db), db.Namespace)
}

// ReadOnlyHost is the DNS name of the read-only Service.
func ReadOnlyHost(db *databasev1alpha1.MyDatabase) string {
	return fmt.Sprintf("%s.%s.svc", ReadOnlyServiceName(db), db.Namespace)
}

// ServicePort is spec.service.port, 5432 when unset.
func ServicePort(db *databasev1alpha1.MyDatabase) int32 {
	if db.Spec.Service.Port == 0 {
		return containerPort
	}
	return db.Spec.Service.Port
}

// SecretOwnerReferences: under Delete the Secrets go with the MyDatabase;
// under Retain they carry no owner at all, so that even a finalizer removed
// by hand with the operator gone cannot let the garbage collector take them.
func SecretOwnerReferences(db *databasev1alpha1.MyDatabase) []metav1.OwnerReference {
	if db.Spec.DeletionPolicy == databasev1alpha1.DeletionPolicyDelete {
		return []metav1.OwnerReference{OwnerReference(db)}
	}
	return nil
}

// CredentialsSecret is the generated connection Secret. It is created once
// and never rewritten: the data only knows the password it was created with.
func CredentialsSecret(db *databasev1alpha1.MyDatabase, password string) *corev1.Secret {
	host, port := ReadWriteHost(db), strconv.Itoa(int(ServicePort(db)))
	uri := url.URL{
		Scheme: "postgresql",
		User:   url.UserPassword(db.Spec.User, password),
		Host:   net.JoinHostPort(host, port),
		Path:   "/" + db.Spec.DatabaseName,
		// The servers' certificate verifies against ca.crt, which the
		// operator adds to this Secret.
		RawQuery: "sslmode=verify-full",
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:            GeneratedCredentialsSecretName(db),
			Namespace:       db.Namespace,
			Labels:          Labels(db, ComponentCredentials),
			Annotations:     secretAnnotations(password, UserRotationRequest(db)),
			OwnerReferences: SecretOwnerReferences(db),
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			SecretUsernameKey: []byte(db.Spec.User),
			SecretPasswordKey: []byte(password),
			SecretDatabaseKey: []byte(db.Spec.DatabaseName),
			SecretHostKey:     []byte(host),
			SecretPortKey:     []byte(port),
			SecretURIKey:      []byte(uri.String()),
		},
	}
}

// secretAnnotations: the digest of the password, and the rotation request
// a Secret created with a request in the spec already fulfils (its password
// is new).
func secretAnnotations(password, request string) map[string]string {
	a := map[string]string{databasev1alpha1.AnnotationPasswordDigest: PasswordDigest([]byte(password))}
	if request != "" {
		a[databasev1alpha1.AnnotationRotationRequest] = request
	}
	return a
}

// WithVerifyFull is a connection URI that asks for sslmode=verify-full, the
// rest of it as it was (an unparsable one is returned as it is).
func WithVerifyFull(uri []byte) []byte {
	u, err := url.Parse(string(uri))
	if err != nil || len(uri) == 0 {
		return uri
	}
	q := u.Query()
	q.Set("sslmode", "verify-full")
	u.RawQuery = q.Encode()
	return []byte(u.String())
}
