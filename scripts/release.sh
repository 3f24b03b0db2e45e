#!/usr/bin/env bash
# make release VERSION=vX.Y.Z: writes OUT (dist/) with, for linux/amd64 and
# linux/arm64, the static binaries (a tar.gz per architecture) and a
# CycloneDX SBOM of each binary, made from its Go build info by
# cyclonedx-gomod; one OCI image-index archive holding both architectures'
# images, built without Docker; deploy/ with the image pinned to VERSION;
# the operator's tools (kubectl-netready, and netready-install for
# --validate) for darwin/amd64, darwin/arm64 and windows/amd64 too, each in
# its own archive with an SBOM; a krew plugin manifest (netready.yaml) with
# every kubectl-netready archive's sha256; the Helm chart
# (netready-VERSION.tgz, rendering the pinned deploy/); and SHA256SUMS of
# all of it.
# Usage: release.sh VERSION OUT CACHE
set -euo pipefail
version=$1 out=$2 cache=$3
die() { echo "release: $*" >&2; exit 1; }
[[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || die "VERSION must be a semantic version tag such as v0.3.0, not '$version'"
root=$(cd "$(dirname "$0")/.." && pwd)
image=ghcr.io/netready/netready
# What a release needs, and nothing else: no root, no test tools.
for need in go tar sha256sum apt-get dpkg-deb readelf; do
  command -v "$need" >/dev/null || die "$need is not on PATH: a release needs Go, tar and coreutils, and Debian's apt, dpkg and binutils (apt-get, dpkg-deb, readelf) for the image's iptables"
done
arches=(amd64 arm64)

# The SBOM tool, pinned by test/release-tools, built once.
tools="$cache/release-tools"
stamp="$tools/.built-$(sha256sum <"$root/test/release-tools/go.sum" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "release: building cyclonedx-gomod into $tools"
  mkdir -p "$tools"
  (cd "$root/test/release-tools" && CGO_ENABLED=0 go build -trimpath -o "$tools/" github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod)
  touch "$stamp"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$out" && mkdir -p "$out"
ldflags="-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$version"
platforms=()
for arch in "${arches[@]}"; do
  bin="$work/$arch/bin"
  (cd "$root" && GOOS=linux GOARCH=$arch CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin/" ./plugins/meta/netready ./cmd/...)
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$bin" -czf "$out/netready-$version-linux-$arch.tar.gz" \
    netready netready-install netready-sidecar kubectl-netready
  for b in netready netready-install netready-sidecar kubectl-netready; do
    # cyclonedx-gomod takes the purl's goos/goarch from its environment,
    # not from the binary's build info.
    GOOS=linux GOARCH=$arch "$tools/cyclonedx-gomod" bin -json -version "$version" -output "$out/$b-$version-linux-$arch.cdx.json" "$bin/$b" \
      || die "SBOM of $b ($arch) failed"
  done
  rootfs="$work/$arch/rootfs"
  mkdir -p "$rootfs/bin" "$rootfs/tmp" && chmod 1777 "$rootfs/tmp"
  install -m 0755 "$bin"/netready "$bin"/netready-install "$bin"/netready-sidecar "$rootfs/bin/"
  "$root/scripts/iptables-rootfs.sh" "$arch" "$rootfs" "$cache/release-debs"
  platforms+=("$arch=$rootfs")
done
(IFS=,; "$root/scripts/oci-archive.sh" "${platforms[*]}" /bin/netready-sidecar "$image:$version" "$out/netready-image.tar")

# The operator's tools, for every platform krew serves: an archive per
# tool and platform holding the binary and LICENSE, which krew installs.
clients=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64)
for p in "${clients[@]}"; do
  os=${p%/*} arch=${p#*/} ext=
  [ "$os" = windows ] && ext=.exe
  cbin="$work/clients/$os-$arch"
  mkdir -p "$cbin"
  (cd "$root" && GOOS=$os GOARCH=$arch CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$cbin/" ./cmd/kubectl-netready ./cmd/netready-install)
  cp "$root/LICENSE" "$cbin/"
  for b in kubectl-netready netready-install; do
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$cbin" -czf "$out/$b-$version-$os-$arch.tar.gz" "$b$ext" LICENSE
    if [ "$os" != linux ]; then
      GOOS=$os GOARCH=$arch "$tools/cyclonedx-gomod" bin -json -version "$version" -output "$out/$b-$version-$os-$arch.cdx.json" "$cbin/$b$ext" \
        || die "SBOM of $b ($os/$arch) failed"
    fi
  done
done
"$root/scripts/krew-manifest.sh" "$version" "$out" "${clients[@]}" > "$out/netready.yaml"


# deploy/, with the image pinned to this release.
cp -r "$root/deploy" "$work/deploy"
sed -i "s|^    newTag: dev$|    newTag: $version|" "$work/deploy/kustomization.yaml"
grep -q "newTag: $version" "$work/deploy/kustomization.yaml" || die "deploy/kustomization.yaml has no images entry with newTag: dev to pin"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work" -czf "$out/netready-$version-deploy.tar.gz" deploy

# The Helm chart, netready-$version.tgz: deploy/'s source, its image the
# chart's appVersion, set here to the release's.
"$root/scripts/build-helm.sh" "$cache/helm" >&2
mkdir -p "$work/charts" && cp -r "$root/charts/netready" "$work/charts/"
"$cache/helm/helm" package "$work/charts/netready" --version "$version" --app-version "$version" -d "$out" 2>&1 >/dev/null \
  | { grep -v 'found symbolic link in path' || true; } >&2
[ -f "$out/netready-$version.tgz" ] || die "helm package wrote no $out/netready-$version.tgz"

(cd "$out" && sha256sum -- * > SHA256SUMS)
echo "release: $version -> $out"
ls -l "$out"
