//go:build integration

// Package helm checks the Helm chart: lint, rendering against the kustomizations, and install, upgrade, rollback and uninstall on a real kube-apiserver. It needs root and the binaries that `make test` builds.
package helm

import (
	"os"
	"testing"

	"github.com/netready/netready/test/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
