package specs

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	databasev1alpha1 "example.com/myoperator/api/v1alpha1"
	"example.com/myoperator/internal/pki"
)

// TLS: every server offers it, with the certificate of the Secret
// ServerCertSecretName, mounted at TLSDir, and the replicas authenticate
// to the primary with the client certificate of ReplicationCertSecretName,
// mounted at ReplicationTLSDir: the replication role has no password. The
// instance manager copies the files to a directory of its own with the
// modes PostgreSQL demands, and reloads the server when a Secret changes
// (internal/instance, tls.go).
const (
	// ComponentTLS labels the CA and server certificate Secrets the
	// operator issues.
	ComponentTLS = "tls"
	// TLSDir is where the server certificate Secret is mounted.
	TLSDir = "/etc/mydatabase-tls"
	// ReplicationTLSDir is where the replication client certificate
	// Secret is mounted.
	ReplicationTLSDir = "/etc/mydatabase-replication-tls"

	// Keys of the server certificate Secret (those of a kubernetes.io/tls
	// Secret, and cert-manager's ca.crt), and of the CA Secret.
	TLSCertKey = corev1.TLSCertKey
	TLSKeyKey  = corev1.TLSPrivateKeyKey
	CACertKey  = "ca.crt"
	CAKeyKey   = "ca.key"
)

// CASecretName is the Secret of the CA the operator issues from.
func CASecretName(db *databasev1alpha1.MyDatabase) string { return db.Name + "-ca" }

// IssuedServerCertSecretName is the server certificate Secret the operator
// issues when the spec names none.
func IssuedServerCertSecretName(db *databasev1alpha1.MyDatabase) string {
	return db.Name + "-server-tls"
}

// UserSuppliedServerCert reports whether spec.tls names the certificate.
func UserSuppliedServerCert(db *databasev1alpha1.MyDatabase) bool {
	return db.Spec.TLS.ServerCertSecret != ""
}

// ServerCertSecretName is the Secret the servers' certificate comes from.
func ServerCertSecretName(db *databasev1alpha1.MyDatabase) string {
	if UserSuppliedServerCert(db) {
		return db.Spec.TLS.ServerCertSecret
	}
	return IssuedServerCertSecretName(db)
}

// ServerDNSNames are the names clients reach the servers by, each of
// which the server certificate must cover for sslmode=verify-full: the
// read-write, read-only and headless Services and every pod on the
// headless Service, each short, with its namespace, and in .svc and
// .svc.cluster.local form.
func ServerDNSNames(db *databasev1alpha1.MyDatabase) []string {
	headless := HeadlessServiceName(db)
	hosts := make([]string, 0, 3+Replicas(db))
	hosts = append(hosts, ReadWriteServiceName(db), ReadOnlyServiceName(db), headless)
	for i := range Replicas(db) {
		hosts = append(hosts, PodName(db, i)+"."+headless)
	}
	names := make([]string, 0, 4*len(hosts))
	for _, h := range hosts {
		ns := h + "." + db.Namespace
		names = append(names, h, ns, ns+".svc", ns+".svc.cluster.local")
	}
	return names
}

// CASecret holds a newly made CA. Like the password Secrets it follows
// the deletion policy: a retained CA keeps the clients that trust it
// working with a MyDatabase that adopts the retained data. A CA made
// while spec.tls.caRotation asks for one already fulfils the request.
func CASecret(db *databasev1alpha1.MyDatabase, ca pki.KeyPair) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:            CASecretName(db),
			Namespace:       db.Namespace,
			Labels:          Labels(db, ComponentTLS),
			Annotations:     caRequestAnnotation(db),
			OwnerReferences: SecretOwnerReferences(db),
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{CACertKey: ca.Cert, CAKeyKey: ca.Key},
	}
}

// ServerCertSecret holds a server certificate issued by the CA caCert.
// It follows the deletion policy with the CA (a retained one is adopted
// again, or issued anew if it no longer fits).
func ServerCertSecret(db *databasev1alpha1.MyDatabase, server pki.KeyPair, caCert []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:            IssuedServerCertSecretName(db),
			Namespace:       db.Namespace,
			Labels:          Labels(db, ComponentTLS),
			OwnerReferences: SecretOwnerReferences(db),
		},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{TLSCertKey: server.Cert, TLSKeyKey: server.Key, CACertKey: caCert},
	}
}

// ReplicationCertSecretName is the Secret of the client certificate the
// replicas authenticate with (pg_hba.conf: cert), issued by the CA.
func ReplicationCertSecretName(db *databasev1alpha1.MyDatabase) string {
	return db.Name + "-replication-tls"
}

// ReplicationCertSecret holds the replicas' client certificate, for the
// role contract.ReplicationRole, and the CA that issued it: the servers verify
// client certificates with that ca.crt (ssl_ca_file). The CA's key never
// leaves its own Secret. It follows the deletion policy with the CA.
func ReplicationCertSecret(db *databasev1alpha1.MyDatabase, client pki.KeyPair, caCert []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:            ReplicationCertSecretName(db),
			Namespace:       db.Namespace,
			Labels:          Labels(db, ComponentTLS),
			OwnerReferences: SecretOwnerReferences(db),
		},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{TLSCertKey: client.Cert, TLSKeyKey: client.Key, CACertKey: caCert},
	}
}

// ServerCommonName is the subject of the server certificate.
func ServerCommonName(db *databasev1alpha1.MyDatabase) string { return ReadWriteServiceName(db) }

// CACommonName is the subject of the CA.
func CACommonName(db *databasev1alpha1.MyDatabase) string {
	return fmt.Sprintf("%s/%s MyDatabase CA", db.Namespace, db.Name)
}

// HBAConf is pg_hba.conf for the spec: with spec.tls.clients Required, a
// client's network login must come over TLS.
func HBAConf(db *databasev1alpha1.MyDatabase) string {
	if db.Spec.TLS.Clients != databasev1alpha1.TLSClientsRequired {
		return hbaConf
	}
	return strings.Replace(hbaConf, clientHBALine,
		"hostnossl all          all         all      reject\nhostssl all          all         all      scram-sha-256", 1)
}

// clientHBALine admits clients of every database over the network.
const clientHBALine = "host    all          all         all      scram-sha-256"

// caRequestAnnotation records the rotation request a new CA fulfils, nil
// when the spec makes none.
func caRequestAnnotation(db *databasev1alpha1.MyDatabase) map[string]string {
	if r := CARotationRequest(db); r != "" {
		return map[string]string{databasev1alpha1.AnnotationCARotationRequest: r}
	}
	return nil
}
