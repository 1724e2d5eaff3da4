// Package postgres runs what internal/specs generates for a MyDatabase (the
// init container and the instance manager it installs, postgresql.conf,
// pg_hba.conf, the container environment and the probe commands) against real PostgreSQL
// server binaries, one subtest per major installed under
// /usr/lib/postgresql/*/bin (15 and later). Run it with `make test-postgres`,
// which first installs the binaries with hack/postgres.sh when none are
// present. It needs no cluster and no container runtime; it must run as root
// (it drops to the postgres OS user) or as the postgres OS user.
package postgres

// Which tests run side by side: every cluster has its own API server,
// directories and free ports, so tests could all run in parallel, but the
// faults of TestHighAvailability and TestSynchronousReplication, and the
// pooler's switchovers, bound write gaps and failed transactions in
// hundreds of milliseconds, which a neighbour's CPU would blur on a
// two-core machine. They run alone first; the tests that call t.Parallel
// (bounded only in tens of seconds, if at all) then run in pairs
// (-parallel, GOMAXPROCS by default), which saves CI about a third of this
// package's time.
