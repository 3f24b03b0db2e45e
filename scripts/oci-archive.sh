#!/usr/bin/env bash
# Packs a folder into a one-layer OCI image archive that `ctr images import`
# accepts, with no registry. Usage: oci-archive.sh ROOTFS ENTRYPOINT NAME OUT.tar
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
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$rootfs" -cf "$work/layer.tar" .
read -r ldig lsize < <(blob "$work/layer.tar")
printf '{"architecture":"%s","os":"linux","config":{"Entrypoint":["%s"],"Env":["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
  "$(go env GOARCH)" "$entry" "$ldig" > "$work/config.json"
read -r cdig csize < <(blob "$work/config.json")
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
  "$cdig" "$csize" "$ldig" "$lsize" > "$work/manifest.json"
read -r mdig msize < <(blob "$work/manifest.json")
printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
  "$mdig" "$msize" "$name" "${name##*:}" > "$work/img/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' > "$work/img/oci-layout"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/img" -cf "$out" .
