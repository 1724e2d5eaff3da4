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

	// caRotation asks for a new CA of this MyDatabase (the Secret
	// <name>-ca), on request or by age, rotated without downtime: trusted
	// next to the old one everywhere first, then issuing, then alone
	// (docs/security.md, CA rotation). It rotates the operator's CA, which
	// issues the replicas' and the poolers' certificates, and the server
	// certificate unless serverCertSecret names the user's.
	// +optional
	CARotation *CARotationSpec `json:"caRotation,omitempty"`
}

// CARotationSpec asks for CA rotations. requestedAt works like `kubectl
// rollout restart`: setting it to a new value (the current time, by
// convention; `kubectl mydb rotate-ca` does) asks for one rotation, and the
// CA Secret records the value it fulfils, so a request is carried out once,
// whatever happens in between. A duration is Go's (8760h, 90m): the
// fields' pattern refuses any other, and the rules below convert only
// one that matches it (FuzzAdmission found "1" failing to evaluate).
// +kubebuilder:validation:XValidation:rule="!has(self.maxAge) || !self.maxAge.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.maxAge) >= duration('24h')",message="caRotation.maxAge must be at least 24h"
// +kubebuilder:validation:XValidation:rule="!has(self.trustPeriod) || !self.trustPeriod.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.trustPeriod) <= duration('720h')",message="caRotation.trustPeriod must be at most 720h"
type CARotationSpec struct {
	// requestedAt asks for one new CA when it changes to a value the CA
	// Secret does not record.
	// +optional
	RequestedAt *metav1.Time `json:"requestedAt,omitempty"`

	// maxAge rotates the CA once it is older than this (from its
	// notBefore), e.g. 8760h for a yearly rotation. Unset: only requests
	// rotate it. At least 24h.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`

	// trustPeriod is how long every trust bundle carries both CAs before
	// the certificates are issued from the new one, and again before the
	// old CA leaves the bundles: the time clients that read ca.crt from a
	// Secret have to read it again. The operator waits at least as long as
	// the kubelet takes to bring a changed Secret into the pods, and until
	// every server reports the new files loaded, whatever this says.
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +optional
	TrustPeriod *metav1.Duration `json:"trustPeriod,omitempty"`
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

	// caNotAfter is when the CA the operator issues from expires; absent
	// when the pass could not read it.
	// +optional
	CANotAfter *metav1.Time `json:"caNotAfter,omitempty"`

	// caRotation is the last or current rotation of the operator's CA;
	// absent when the CA was never rotated.
	// +optional
	CARotation *CARotationStatus `json:"caRotation,omitempty"`
}

// CARotationPhase is the stage of a CA rotation.
// +kubebuilder:validation:Enum=Trusting;Reissuing;Succeeded
type CARotationPhase string

const (
	// CARotationTrusting: the new CA is made and every trust bundle the
	// operator writes carries both CAs; certificates are still issued by
	// the old one. It waits for every server, pooler and client to read
	// the bundle.
	CARotationTrusting CARotationPhase = "Trusting"
	// CARotationReissuing: the new CA issues; every certificate is issued
	// again from it while the bundles still carry both. The old CA's key
	// is deleted on entering it. It waits for every certificate in use to
	// come from the new CA.
	CARotationReissuing CARotationPhase = "Reissuing"
	// CARotationSucceeded: the bundles carry the new CA alone.
	CARotationSucceeded CARotationPhase = "Succeeded"
)

// CARotationStatus is where a rotation of the operator's CA stands.
type CARotationStatus struct {
	// phase: Trusting, Reissuing, then Succeeded.
	Phase CARotationPhase `json:"phase"`

	// request is spec.tls.caRotation.requestedAt this rotation fulfils
	// (RFC 3339), "maxAge" when the CA's age started it.
	// +optional
	Request string `json:"request,omitempty"`

	// startedAt is when the new CA was made; phaseSince when the current
	// phase began; finishedAt when it succeeded.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	PhaseSince *metav1.Time `json:"phaseSince,omitempty"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`

	// newCANotAfter is when the new CA expires.
	// +optional
	NewCANotAfter *metav1.Time `json:"newCANotAfter,omitempty"`

	// message says what the phase waits for, in words.
	// +optional
	Message string `json:"message,omitempty"`
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
	// ReasonRotatingCA (Reconciling): a CA rotation is under way
	// (status.tls.caRotation says which phase, and what it waits for).
	ReasonRotatingCA = "RotatingCA"

	// Annotations of the CA Secret that carry a rotation across passes and
	// restarts (docs/security.md, CA rotation): the spec request the CA
	// fulfils (AnnotationCARotationRequest), what started the last
	// rotation (AnnotationCARotationBy: that request, or "maxAge"), when
	// it started, when its current phase began, and when it finished.
	AnnotationCARotationRequest    = "database.example.com/ca-rotation-request"
	AnnotationCARotationBy         = "database.example.com/ca-rotation-by"
	AnnotationCARotationStarted    = "database.example.com/ca-rotation-started-at"
	AnnotationCARotationPhaseSince = "database.example.com/ca-rotation-phase-since"
	AnnotationCARotationFinished   = "database.example.com/ca-rotation-finished-at"
)
