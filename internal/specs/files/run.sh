#!/bin/bash
# Entrypoint of every MyDatabase PostgreSQL pod.
#
# The operator owns this script instead of relying on the official image's
# docker-entrypoint.sh: the very same file runs in the pod and in the
# operator's tests against real PostgreSQL binaries (test/postgres), so
# what the tests prove is what runs in production. It only uses initdb,
# pg_ctl, psql, pg_isready, pg_basebackup, pg_controldata and postgres with options that are
# stable across every supported major (15 to 18).
#
# The pod named PRIMARY_POD is the primary (the operator decides which: see
# specs.PrimaryPod); every other pod is a streaming hot standby.
# On the first start the primary initialises its data directory and the
# replicas clone it with pg_basebackup; both steps work in a scratch
# directory that is renamed into place only when complete, so a crash half
# way is retried from scratch and never leaves a half-made PGDATA behind.
# Later starts find PG_VERSION and go straight to postgres.
set -Eeuo pipefail

: "${PGDATA:?}" "${PGHOST:?}" "${PGPORT:?}" "${POD_NAME:?}" "${CONFIG_DIR:?}"
: "${POSTGRES_USER:?}" "${POSTGRES_DB:?}" "${POSTGRES_PASSWORD:?}"
: "${REPLICATION_PASSWORD:?}" "${PRIMARY_POD:?}" "${PRIMARY_HOST:?}" "${PRIMARY_PORT:?}"

passfile="$PGHOST/.pgpass-replication"

log() { printf '%s mydatabase[%s]: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$POD_NAME" "$*" >&2; }

# The replication password reaches libpq through a password file, never the
# command line or the server's environment (where dblink could read it).
write_passfile() {
	local p=${REPLICATION_PASSWORD//\\/\\\\}
	p=${p//:/\\:}
	(umask 077 && printf '*:*:*:replicator:%s\n' "$p" >"$passfile")
}

init_primary() {
	local scratch="$PGDATA.init"
	log "initialising a new primary in $PGDATA"
	rm -rf "$scratch"
	initdb --pgdata="$scratch" --username=postgres --encoding=UTF8 --locale=C \
		--data-checksums --auth-local=trust --auth-host=scram-sha-256 >/dev/null
	# A private server: no TCP listener, and its socket in the scratch
	# directory (mode 0700), not in $PGHOST where the probes would take it
	# for the real server and report the pod ready before it is.
	pg_ctl --pgdata="$scratch" --wait --silent \
		-o "-c listen_addresses='' -c unix_socket_directories='$scratch' -c port=$PGPORT" start
	psql --no-psqlrc --quiet --set=ON_ERROR_STOP=1 --host="$scratch" --username=postgres --dbname=postgres <<'SQL'
\getenv app_user POSTGRES_USER
\getenv app_password POSTGRES_PASSWORD
\getenv app_db POSTGRES_DB
\getenv replication_password REPLICATION_PASSWORD
CREATE ROLE :"app_user" LOGIN PASSWORD :'app_password';
CREATE DATABASE :"app_db" OWNER :"app_user";
REVOKE ALL ON DATABASE :"app_db" FROM PUBLIC;
CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD :'replication_password';
SQL
	pg_ctl --pgdata="$scratch" --wait --silent --mode=fast stop
	mv "$scratch" "$PGDATA"
	log "primary initialised"
}

clone_replica() {
	local scratch="$PGDATA.clone"
	rm -rf "$scratch"
	until pg_isready --quiet --host="$PRIMARY_HOST" --port="$PRIMARY_PORT"; do
		log "waiting for the primary at $PRIMARY_HOST:$PRIMARY_PORT"
		sleep 2
	done
	log "cloning the primary at $PRIMARY_HOST:$PRIMARY_PORT"
	PGPASSFILE="$passfile" pg_basebackup --pgdata="$scratch" --host="$PRIMARY_HOST" \
		--port="$PRIMARY_PORT" --username=replicator --no-password \
		--wal-method=stream --checkpoint=fast
	mv "$scratch" "$PGDATA"
	log "replica cloned"
}

# A standby may not run with a lower max_connections, max_worker_processes,
# max_wal_senders, max_prepared_transactions or max_locks_per_transaction
# than the primary whose WAL it replays: PostgreSQL aborts recovery. The
# primary's values, as of the last change replayed, are in pg_control. A
# standby starts with the larger of those and its own, so that lowering one
# (the replicas restart first) or re-creating the MyDatabase from an older
# manifest never leaves a replica failing at every start. It takes its own
# value at the first restart after the primary has run with it.
keep_primary_minimums() {
	local field recorded name configured
	while IFS=: read -r field recorded; do
		case "$field" in
		"max_connections setting") name=max_connections ;;
		"max_worker_processes setting") name=max_worker_processes ;;
		"max_wal_senders setting") name=max_wal_senders ;;
		"max_prepared_xacts setting") name=max_prepared_transactions ;;
		"max_locks_per_xact setting") name=max_locks_per_transaction ;;
		*) continue ;;
		esac
		recorded=${recorded//[[:space:]]/}
		configured=$(postgres "${args[@]}" -C "$name")
		if [ "$recorded" -gt "$configured" ]; then
			log "$name: keeping the primary's $recorded until it runs with the configured $configured"
			args+=(-c "$name=$recorded")
		fi
	done < <(LC_ALL=C pg_controldata "$PGDATA")
}

write_passfile
if [ ! -s "$PGDATA/PG_VERSION" ]; then
	if [ "$POD_NAME" = "$PRIMARY_POD" ]; then init_primary; else clone_replica; fi
fi

args=(-D "$PGDATA" -c "config_file=$CONFIG_DIR/postgresql.conf" -c "hba_file=$CONFIG_DIR/pg_hba.conf"
	-c "unix_socket_directories=$PGHOST" -c "port=$PGPORT")
if [ "$POD_NAME" != "$PRIMARY_POD" ]; then
	touch "$PGDATA/standby.signal"
	keep_primary_minimums
	args+=(-c "primary_conninfo=host=$PRIMARY_HOST port=$PRIMARY_PORT user=replicator passfile=$passfile application_name=$POD_NAME")
fi
# The server needs neither password: keep them out of its environment, which
# every backend and every program it runs would inherit.
unset POSTGRES_PASSWORD REPLICATION_PASSWORD
log "starting postgres as $([ "$POD_NAME" = "$PRIMARY_POD" ] && echo primary || echo replica)"
exec postgres "${args[@]}"
