#!/usr/bin/env bash
# Prints the bin directory of every installed PostgreSQL server major that
# test/postgres supports (15 or later), one per line, e.g.
#   /usr/lib/postgresql/15/bin
# When there is none, installs Debian's postgresql package first (which also
# creates the postgres OS user the test runs the servers as). Fails with a
# message saying what to do when that is not possible.
set -euo pipefail

min_major=15

servers() {
	local dir major
	for dir in /usr/lib/postgresql/*/bin; do
		major=$(basename "$(dirname "$dir")")
		[[ $major =~ ^[0-9]+$ ]] && ((major >= min_major)) || continue
		[ -x "$dir/postgres" ] && [ -x "$dir/initdb" ] && [ -x "$dir/psql" ] || continue
		echo "$dir"
	done | sort -t/ -k4,4n
}

found=$(servers)
if [ -z "$found" ]; then
	if ! command -v apt-get >/dev/null; then
		echo "hack/postgres.sh: no PostgreSQL server >= $min_major under /usr/lib/postgresql/*/bin and no apt-get to install one:" \
			"install PostgreSQL $min_major or later server binaries there (Debian/Ubuntu layout)" >&2
		exit 1
	fi
	if [ "$(id -u)" != 0 ]; then
		echo "hack/postgres.sh: no PostgreSQL server >= $min_major under /usr/lib/postgresql/*/bin;" \
			"run this script as root to install Debian's postgresql package (apt-get install postgresql)" >&2
		exit 1
	fi
	echo "hack/postgres.sh: no PostgreSQL server >= $min_major found; installing Debian's postgresql package" >&2
	if ! { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql; } >&2; then
		echo "hack/postgres.sh: apt-get install postgresql failed (see above)" >&2
		exit 1
	fi
	found=$(servers)
	if [ -z "$found" ]; then
		echo "hack/postgres.sh: installed the postgresql package, but it brought no server >= $min_major" \
			"(this distribution's PostgreSQL is too old: Debian 12 or later ships 15+)" >&2
		exit 1
	fi
fi
echo "$found"
