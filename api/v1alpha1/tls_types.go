package v1alpha1

import (
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TLSClients says whether clients may connect without TLS.
// +kubebuilder:validation:Enum=Allowed;Required
type TLSClients string

const (
	// TLSClientsAllowed: every server offers TLS, each client chooses.
	TLSClientsAllowed TLSClients = "Allowed"
	// TLSClientsRequired: a connection without TLS is refused.
	TLSClientsRequired TLSClients = "Required"
)

// TLSSpec is how the servers encrypt client connections. TLS is always
// on: with no serverCertSecret the operator issues the certificates from a
// CA of this MyDatabase (the Secret <name>-ca) and renews them.
type TLSSpec struct {
	// clients: Allowed (default) lets each client choose; Required refuses
	// every connection that does not use TLS (pg_hba hostssl only).
	// +kubebuilder:default=Allowed
	// +optional
	Clients TLSClients `json:"clients,omitempty"`

	// serverCertSecret names a Secret of this namespace with the server
	// certificate to present instead of one the operator issues, e.g. made
	// by cert-manager: keys tls.crt, tls.key and ca.crt (the CA clients
	// verify it with). The operator only reads it: the servers reload it
	// when it changes, and status.tls says when it expires or does not
	// cover the names clients use.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ServerCertSecret string `json:"serverCertSecret,omitempty"`
}

// NetworkPolicySpec asks for a NetworkPolicy that admits to the database
// port only the clients listed, the other instances of this MyDatabase
// (replication) and nothing else.
type NetworkPolicySpec struct {
	// enabled creates the NetworkPolicy <name>; false (default) deletes it.
	// +optional
	Enabled bool `json:"enabled,omitempty"`

	// clients may reach the database port: pods, namespaces or address
	// blocks, as in a NetworkPolicy rule. Empty admits no client (only
	// the instances among themselves).
	// +listType=atomic
	// +optional
	Clients []networkingv1.NetworkPolicyPeer `json:"clients,omitempty"`

	// metricsClients may reach the metrics port (9187) of the servers,
	// typically a namespaceSelector of the namespace Prometheus runs in.
	// Empty admits no one to it.
	// +listType=atomic
	// +optional
	MetricsClients []networkingv1.NetworkPolicyPeer `json:"metricsClients,omitempty"`
}

// TLSStatus is where the server certificate stands.
type TLSStatus struct {
	// serverCertSecret holds the certificate the servers present.
	ServerCertSecret string `json:"serverCertSecret"`

	// caSecret holds the CA the operator issues from; absent when the
	// certificate is the user's.
	// +optional
	CASecret string `json:"caSecret,omitempty"`

	// notAfter is when the server certificate expires.
	// +optional
	NotAfter *metav1.Time `json:"notAfter,omitempty"`

	// renewAt is when the operator will issue the next certificate; absent
	// for a user's certificate.
	// +optional
	RenewAt *metav1.Time `json:"renewAt,omitempty"`

	// dnsNames the certificate covers.
	// +listType=atomic
	// +optional
	DNSNames []string `json:"dnsNames,omitempty"`
}

// TLS condition and reasons.
const (
	// ConditionCertificateValid is True while the server certificate
	// verifies against its CA, is valid, and covers every name clients use
	// (status.tls.dnsNames); False says why not. It does not affect Ready:
	// clients that do not verify still connect.
	ConditionCertificateValid = "CertificateValid"
	ReasonCertificateValid    = "Valid"
	ReasonCertificateInvalid  = "Invalid"
	ReasonCertificateExpiring = "Expiring"

	// ReasonTLSSecretNotFound (Stalled): the user's serverCertSecret does
	// not exist or lacks a key; the pods cannot start without it.
	ReasonTLSSecretNotFound = "TLSSecretNotFound"
	// ReasonCALost (Stalled): the CA Secret is gone while certificates it
	// issued are still in use.
	ReasonCALost = "CALost"
)
