#!/usr/bin/env bash
# Packs folders into a one-layer-per-platform OCI image archive that
# `ctr images import` accepts, with no registry.
# Usage: oci-archive.sh ROOTFS ENTRYPOINT NAME OUT.tar
#   ROOTFS is one folder (an image for this host's architecture), or
#   ARCH=FOLDER[,ARCH=FOLDER...]: an image index with one manifest per
#   linux/ARCH.
set -euo pipefail
rootfs=$1 entry=$2 name=$3 out=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/img/blobs/sha256"
blob() { # file -> prints "digest size", stores the blob
  local d s
  d=$(sha256sum "$1" | cut -d' ' -f1); s=$(stat -c %s "$1")
  cp "$1" "$work/img/blobs/sha256/$d"
  echo "$d $s"
}
manifest() { # arch folder -> prints the manifest's "digest size"
  local arch=$1 dir=$2 ldig lsize cdig csize
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$dir" -cf "$work/layer-$arch.tar" .
  read -r ldig lsize < <(blob "$work/layer-$arch.tar")
  printf '{"architecture":"%s","os":"linux","config":{"Entrypoint":["%s"],"Env":["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$arch" "$entry" "$ldig" > "$work/config-$arch.json"
  read -r cdig csize < <(blob "$work/config-$arch.json")
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
    "$cdig" "$csize" "$ldig" "$lsize" > "$work/manifest-$arch.json"
  blob "$work/manifest-$arch.json"
}
names='"io.containerd.image.name":"'$name'","org.opencontainers.image.ref.name":"'${name##*:}'"'
if [[ $rootfs != *=* ]]; then
  read -r mdig msize < <(manifest "$(go env GOARCH)" "$rootfs")
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{%s}}]}' \
    "$mdig" "$msize" "$names" > "$work/img/index.json"
else
  entries=()
  IFS=, read -ra platforms <<<"$rootfs"
  for p in "${platforms[@]}"; do
    read -r mdig msize < <(manifest "${p%%=*}" "${p#*=}")
    entries+=("$(printf '{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"%s","os":"linux"}}' "$mdig" "$msize" "${p%%=*}")")
  done
  (IFS=,; printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[%s]}' "${entries[*]}") > "$work/image-index.json"
  read -r idig isize < <(blob "$work/image-index.json")
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"sha256:%s","size":%s,"annotations":{%s}}]}' \
    "$idig" "$isize" "$names" > "$work/img/index.json"
fi
echo '{"imageLayoutVersion":"1.0.0"}' > "$work/img/oci-layout"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/img" -cf "$out" .
