#!/usr/bin/env bash
# Kills `instance upgrade` at a series of moments and runs it again, as the
# upgrade Job's pod lost and retried would, on real PostgreSQL: the
# postgres:15 and postgres:17 images of hack/node-parts.sh unpacked into two
# chroots sharing a data volume and the staged binaries. For each delay it
# makes a PostgreSQL 15 cluster with rows, shut down cleanly, stages 15's
# binaries (instance stage, in the 15 chroot), starts the upgrade in the 17
# chroot in PID and IPC namespaces of its own, SIGKILLs every process of the
# chroot after the delay (a pod dies whole), empties the chroot's /tmp (the
# next pod's emptyDir is new) and runs the upgrade again in new namespaces. It prints, per delay, pg_upgrade's last line
# before the kill, the second run's exit code (0 upgraded, 10 old data
# untouched, 11 past the point of no return) and, after a 0, what the
# upgraded server says (server_version_num|rows).
#
# Usage: hack/upgrade-interrupt.sh [DELAY...]   (seconds; root; Linux)
set -euo pipefail

CACHE_DIR=${MYOPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/myoperator}
images="$CACHE_DIR/node/images-r$(sed -n 's/^IMAGES_REV=//p' "$(dirname "$0")/node-parts.sh")"
say() { printf '[upgrade-interrupt] %s\n' "$*" >&2; }
[ "$(id -u)" = 0 ] || { say "must run as root (chroot, mounts)"; exit 1; }
for m in 15 17; do
  [ -f "$images/postgres-$m.tar" ] || { say "no $images/postgres-$m.tar: run hack/node-parts.sh first"; exit 1; }
done
delays=("$@")
[ ${#delays[@]} -gt 0 ] || delays=(0.3 0.6 0.9 1.2 1.5 1.8 2.1 2.4 2.7 3.0 3.3)

repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/upgrade-interrupt.XXXXXX)
mounts=()
cleanup() {
  kill_chroots
  for ((i=${#mounts[@]}-1; i>=0; i--)); do umount "${mounts[i]}" 2>/dev/null || umount -l "${mounts[i]}" || true; done
  rm -rf "$work"
}
kill_chroots() {
  local p r
  for p in /proc/[0-9]*; do
    r=$(readlink "$p/root" 2>/dev/null) || continue
    case "$r" in "$work"/r15|"$work"/r17) kill -9 "${p#/proc/}" 2>/dev/null || true;; esac
  done
}
trap cleanup EXIT

(cd "$repo" && CGO_ENABLED=0 go build -o "$work/instance" ./cmd/instance)
mkdir -p "$work/vol" "$work/old"
chown 999:999 "$work/vol" "$work/old"
chmod 700 "$work/vol"
for m in 15 17; do
  r="$work/r$m"
  mkdir -p "$r"
  tar -xOf "$images/postgres-$m.tar" layer.tar | tar -x -C "$r"
  mkdir -p "$r/controller" "$r/old" "$r/var/lib/postgresql/data" "$r/proc" "$r/dev"
  chmod 1777 "$r/tmp"
  cp "$work/instance" "$r/controller/instance"
  for b in "$work/vol:$r/var/lib/postgresql/data" "$work/old:$r/old" "/proc:$r/proc" "/dev:$r/dev"; do
    mount --bind "${b%%:*}" "${b#*:}"
    mounts+=("${b#*:}")
  done
done
# in MAJOR CMD...: as postgres (uid 999) in that image's chroot; a script,
# so that setsid can run it too.
cat >"$work/in" <<SCRIPT
#!/bin/sh
m=\$1; shift
exec chroot --userspec=999:999 "$work/r\$m" env -i PATH="/usr/lib/postgresql/\$m/bin:/usr/bin:/bin" \\
  PGDATA=/var/lib/postgresql/data/pgdata HOME=/tmp TMPDIR=/tmp LANG=C.UTF-8 "\$@"
SCRIPT
chmod +x "$work/in"
as_pg() { "$work/in" "$@"; }
sql() { local m=$1; shift; as_pg "$m" psql -h /tmp -U postgres -tAq -c "$1"; }
server() { as_pg "$1" pg_ctl -w -o "-c unix_socket_directories=/tmp -c listen_addresses=" "$2" >/dev/null; }
upgrade=(/controller/instance upgrade --old-major 15 --new-major 17 --staged /old)
# Each run of the upgrade in namespaces of its own, as a pod's: the
# instance manager PID 1, and the System V shared memory of the servers a
# killed run left gone with it.
pod=(unshare --ipc --pid --fork)

as_pg 15 /controller/instance stage --major 15 /old
say "PostgreSQL 15 staged: $(du -sh "$work/old" | cut -f1)"
for d in "${delays[@]}"; do
  rm -rf "${work:?}/vol/"* "$work/r17/tmp/"* "$work/r17/tmp/".s.PGSQL* 2>/dev/null || true
  as_pg 15 initdb --pgdata=/var/lib/postgresql/data/pgdata --username=postgres --encoding=UTF8 --locale=C \
    --data-checksums --auth-local=trust >/dev/null 2>&1
  server 15 start
  sql 15 "CREATE TABLE t (id int); INSERT INTO t SELECT generate_series(1, 1000);
    CREATE TABLE u AS SELECT g, md5(g::text) FROM generate_series(1, 200000) g;"
  server 15 stop
  setsid "${pod[@]}" "$work/in" 17 "${upgrade[@]}" >"$work/first.log" 2>&1 &
  pid=$!
  sleep "$d"
  kill_chroots
  wait "$pid" 2>/dev/null || true # it was killed
  rm -rf "$work/r17/tmp/"* "$work/r17/tmp/".s.PGSQL* 2>/dev/null || true
  # The first run's last step: its own log lines (pg_upgrade's output is
  # logged when it exits).
  last=$(grep -a 'mydatabase\[' "$work/first.log" | grep -av 'pg_upgrade: ' | tail -1 | sed 's/.*mydatabase\[[^]]*\]: *//' | cut -c1-50 || true)
  rc=0
  "${pod[@]}" "$work/in" 17 "${upgrade[@]}" >"$work/second.log" 2>&1 || rc=$?
  said=""
  if [ "$rc" = 0 ]; then
    server 17 start
    said=$(sql 17 "SELECT current_setting('server_version_num') || '|' || count(*) FROM t")
    server 17 stop
  else
    said=$(tail -1 "$work/second.log" | sed 's/.*: upgrade: //' | cut -c1-90)
    [ "$rc" = 11 ] || { say "the second run's log ends:"; grep -av 'pg_upgrade: ' "$work/second.log" | tail -6 >&2; }
  fi
  printf 'killed after %-4s s  last step: %-50s  second run: exit %-2s %s\n' "$d" "${last:-(none yet)}" "$rc" "$said"
done
