# Progress lines of the hack/ scripts: "[name m:ss] message" on stderr, the
# time counted from MYOPERATOR_T0 (seconds since the epoch) where a caller
# set it (make dev does, so that the lines of every script it runs share its
# clock), else from when the script started.
: "${MYOPERATOR_T0:=$(date +%s)}"
export MYOPERATOR_T0

# progress <name> <message...>
progress() {
  local name=$1 t=$(($(date +%s) - MYOPERATOR_T0))
  shift
  printf '[%s %d:%02d] %s\n' "$name" $((t / 60)) $((t % 60)) "$*" >&2
}
