// Package contract is everything the operator and the instance manager
// say to each other, in one place that both import:
//
//   - the pod's environment, which the operator writes (internal/specs.Env)
//     and the instance manager reads (internal/instance.ConfigFromEnv):
//     env.go;
//   - the annotations each side writes for the other: the report of an
//     instance on its pod, the switchover request, the quorum and a replica
//     MyDatabase's promotion on the primary Lease, the backup request on a
//     pod: annotations.go;
//   - the report itself: report.go;
//   - what synchronous replication asks of the instances: quorum.go;
//   - the roles and databases the MyDatabase declares, which the primary
//     applies, and whether a pooler leads to the MyDatabase: declared.go;
//   - what the operator says to a pooler manager (internal/pooler): its
//     configuration, its environment, the keys of its Secret, and how its
//     pods' pauses through a switchover are counted: pooler.go;
//   - which pods are a MyDatabase's servers: by name, never by labels
//     alone, which a pod may change on itself: pods.go;
//   - the exit codes of the major upgrade Job: annotations.go.
//
// The report is JSON in the pod annotation AnnotationInstance, which the
// instance manager patches on its own pod, rather than an HTTP endpoint
// the operator polls: the operator never connects into the pod network (a
// NetworkPolicy may forbid it, and test harnesses need not route to pods),
// it reads the reports from the pod cache it already has, a watch wakes it
// on a change, and the instance manager needs only RBAC on its own pods.
// The cost is an API write per report, so reports are sent on a change of
// role, readiness or timeline, and at most every MinInterval for WAL
// positions alone.
//
// The package imports only the API (api/v1alpha1); a test in
// internal/layers_test.go keeps it so, and contract_test.go ties both sides
// to it.
package contract
