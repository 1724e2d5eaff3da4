// Package postgres runs what internal/specs generates for a MyDatabase (the
// init container and the instance manager it installs, postgresql.conf,
// pg_hba.conf, the container environment and the probe commands) against real PostgreSQL
// server binaries, one subtest per major installed under
// /usr/lib/postgresql/*/bin (15 and later). Run it with `make test-postgres`,
// which first installs the binaries with hack/postgres.sh when none are
// present. It needs no cluster and no container runtime; it must run as root
// (it drops to the postgres OS user) or as the postgres OS user.
package postgres
