//go:build tools

// Package tools records krew, which the release tests build to install
// kubectl-netready from the release's own manifest and archive, as the
// README tells operators to.
package tools

import (
	_ "sigs.k8s.io/krew/cmd/krew"
)
