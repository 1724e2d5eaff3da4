# Images without a container engine: docker-archive tarballs, the format
# `ctr images import` reads. Sourced by hack/node-parts.sh and
# hack/operator-image.sh.

# docker_archive <layer.tar> <out.tar> <config json, "rootfs" excluded> <tag>...
# writes a one-layer image: manifest.json, the config blob and the layer
# (moved in). Temporary files go next to <out.tar>.
docker_archive() {
  local layer=$1 out=$2 config=$3; shift 3
  local dir diff cfgname tags t
  dir=$(mktemp -d "$(dirname "$out")/.archive.XXXXXX")
  mv "$layer" "$dir/layer.tar"
  diff=$(sha256sum "$dir/layer.tar" | cut -d' ' -f1)
  printf '%s,"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "${config%\}}" "$diff" >"$dir/config.json"
  cfgname=$(sha256sum "$dir/config.json" | cut -d' ' -f1).json
  mv "$dir/config.json" "$dir/$cfgname"
  tags=
  for t in "$@"; do tags="$tags${tags:+,}\"$t\""; done
  printf '[{"Config":"%s","RepoTags":[%s],"Layers":["layer.tar"]}]' "$cfgname" "$tags" >"$dir/manifest.json"
  tar -C "$dir" -cf "$out.tmp" manifest.json "$cfgname" layer.tar
  mv "$out.tmp" "$out"
  rm -rf "$dir"
}

# binary_image <out.tar> <tag> <entrypoint> <file> <path in image> [<file> <path>]...
# writes an image of static binaries only, run as 65532 (distroless's
# nonroot) unless the pod says otherwise.
binary_image() {
  local out=$1 tag=$2 entrypoint=$3 root; shift 3
  root=$(mktemp -d "$(dirname "$out")/.root.XXXXXX")
  while [ $# -ge 2 ]; do
    install -D -m 0755 "$1" "$root$2"
    shift 2
  done
  tar --numeric-owner --owner=0 --group=0 --mtime=@0 --sort=name -C "$root" -cf "$root.layer" .
  docker_archive "$root.layer" "$out" \
    "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Entrypoint\":[\"$entrypoint\"],\"User\":\"65532:65532\"}}" "$tag"
  rm -rf "$root"
}
