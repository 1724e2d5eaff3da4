#!/usr/bin/env bash
# Builds the operator's image from this checkout without a container
# engine, as the Dockerfile lays it out (/manager and /instance, static,
# user 65532), into a docker-archive tarball for `ctr images import`
# (hack/real-node.sh load).
#
#   hack/operator-image.sh OUT.tar           prints the image's name
#   hack/operator-image.sh OUT.tar BINDIR    the same, from the manager and
#                                            instance binaries in BINDIR
#                                            (static: CGO_ENABLED=0)
#
# The tag is a digest of the two binaries, so that a changed instance
# manager changes the pods' template and rolls them.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:?usage: $0 OUT.tar}
# shellcheck source=hack/lib/image.sh
. "$repo/hack/lib/image.sh"

bins=${2:-}
if [ -z "$bins" ]; then
  bins=$(mktemp -d "$(dirname "$out")/.operator-image.XXXXXX")
  trap 'rm -rf "$bins"' EXIT
  (cd "$repo" && CGO_ENABLED=0 go build -trimpath -o "$bins/" ./cmd ./cmd/instance && mv "$bins/cmd" "$bins/manager") >&2
fi
tag=localhost/myoperator/operator:$(cat "$bins/manager" "$bins/instance" | sha256sum | cut -c1-12)
binary_image "$out" "$tag" /manager "$bins/manager" /manager "$bins/instance" /instance
echo "$tag"
