#!/usr/bin/env bash
# Builds golangci-lint at the version the Makefile pins into a cache folder
# keyed by that version, once, through the Go module proxy.
# Usage: build-golangci.sh OUTDIR VERSION
set -euo pipefail
out=$1 version=$2
stamp="$out/.built-$version"
[ -f "$stamp" ] && [ -x "$out/golangci-lint" ] && exit 0
echo "golangci-lint: building $version into $out (about a minute, once)"
mkdir -p "$out"
GOBIN="$out" CGO_ENABLED=0 go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$version"
touch "$stamp"
