//go:build integration

// Package deploy applies the deploy/ manifests to a real kube-apiserver: the admission policies and their parameters, the kustomize components, platforms, monitoring, and an older cluster. It needs root and the binaries that `make test` builds.
package deploy

import (
	"os"
	"testing"

	"github.com/netready/netready/test/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
