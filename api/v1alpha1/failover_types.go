/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// FailoverSpec tunes failover. One number decides every delay, so that the
// timing argument of docs/high-availability.md holds for any value: the
// primary renews its Lease every leaseDurationSeconds/5, stops
// acknowledging commits when it could not renew for 3/5 of it, and another
// instance takes the Lease only after a whole leaseDurationSeconds without
// a renewal.
type FailoverSpec struct {
	// leaseDurationSeconds is how long the primary's Lease is valid without
	// a renewal: a primary lost without a clean shutdown (node lost,
	// container killed, cut off from the API server) is replaced about this
	// long after its last renewal. Lower is faster failover but more Lease
	// writes (one every leaseDurationSeconds/5 per MyDatabase) and a
	// primary that fences itself on shorter API server outages.
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=300
	// +optional
	LeaseDurationSeconds int32 `json:"leaseDurationSeconds,omitempty"`
}

// InstanceStatus is what one server's instance manager last reported
// (the pod annotation AnnotationInstance).
type InstanceStatus struct {
	// name of the pod.
	Name string `json:"name"`

	// role is primary or replica, or empty while the instance manager has
	// not reported (or cannot tell).
	// +optional
	Role string `json:"role,omitempty"`

	// ready is true when the server accepts connections in its role.
	// +optional
	Ready bool `json:"ready,omitempty"`

	// timeline is the server's PostgreSQL timeline.
	// +optional
	Timeline int64 `json:"timeline,omitempty"`

	// lsn is the primary's current write-ahead log position, or the
	// position a replica has replayed.
	// +optional
	LSN string `json:"lsn,omitempty"`

	// lagBytes is how far a replica's replay is behind the primary's
	// position, as of their last reports (they are sent on a change of
	// role or readiness, and at most every 10 s otherwise).
	// +optional
	LagBytes *int64 `json:"lagBytes,omitempty"`

	// reportedAt is when the instance manager sent this report.
	// +optional
	ReportedAt *metav1.Time `json:"reportedAt,omitempty"`
}
