//go:build integration

// Package sidecar runs the real netready-sidecar against a real kube-apiserver: its pod conditions, scope, sandboxes, presets that cannot tell, and the pool taint. It needs root and the binaries that `make test` builds.
package sidecar

import (
	"os"
	"testing"

	"github.com/netready/netready/test/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
