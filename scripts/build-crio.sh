#!/usr/bin/env bash
# Builds CRI-O (crio, pinns, and its test image copier copyimg) from the Go
# module proxy into OUTDIR, once per version.
# Usage: build-crio.sh OUTDIR
# Needs conmon and libseccomp-dev (scripts/deps.sh), gcc and make.
set -euo pipefail
out=$1
root=$(cd "$(dirname "$0")/.." && pwd)
CRIO_VERSION=v1.35.2
TAGS="containers_image_openpgp containers_image_ostree_stub exclude_graphdriver_btrfs btrfs_noversion exclude_graphdriver_devicemapper seccomp"
# The stamp hashes contents only, so that a clone in another folder (CI)
# finds the cache.
stamp="$out/.built-$CRIO_VERSION-$(sha256sum < "$root/scripts/build-crio.sh" | cut -c1-12)"
[ -f "$stamp" ] && exit 0
mkdir -p "$out"
echo "crio: building CRI-O $CRIO_VERSION, pinns and copyimg into $out (about 4 minutes, once)"
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
src=$(GOFLAGS=-mod=mod go mod download -json "github.com/cri-o/cri-o@$CRIO_VERSION" | jq -r .Dir)
cp -r "$src" "$tmp/src" && chmod -R u+w "$tmp/src"
cd "$tmp/src"
# go-criu/v8 v8.1.0, which cri-o v1.35.2 requires, is refused by some
# module proxies; v8.2.0 is API compatible.
if ! GOFLAGS=-mod=mod go mod download github.com/checkpoint-restore/go-criu/v8@v8.1.0 2>/dev/null; then
  GOFLAGS=-mod=mod go get github.com/checkpoint-restore/go-criu/v8@v8.2.0
fi
GOFLAGS=-mod=mod CGO_ENABLED=1 go build -trimpath -tags "$TAGS" -o "$out/crio" ./cmd/crio
# copyimg loads the pause image archive into CRI-O's storage. Its blob-info
# cache and temp files must stay in the test's folders, not
# /var/lib/containers/cache and /var/tmp.
perl -0pi -e 's/SignaturePolicyPath: signaturePolicy,\n/SignaturePolicyPath: signaturePolicy,\n\t\t\tBlobInfoCacheDir:     os.Getenv("COPYIMG_STATE_DIR"),\n\t\t\tBigFilesTemporaryDir: os.Getenv("COPYIMG_STATE_DIR"),\n/; s/options := &copy.Options\{\}/options := &copy.Options{SourceCtx: &systemContext, DestinationCtx: &systemContext}/' test/copyimg/copyimg.go
grep -q COPYIMG_STATE_DIR test/copyimg/copyimg.go || { echo "crio: could not patch copyimg" >&2; exit 1; }
GOFLAGS=-mod=mod CGO_ENABLED=1 go build -trimpath -tags "$TAGS" -o "$out/copyimg" ./test/copyimg
make -s -C pinns >/dev/null
cp pinns/../bin/pinns "$out/pinns" 2>/dev/null || cp bin/pinns "$out/pinns"
"$out/crio" --version | head -1
touch "$stamp"
