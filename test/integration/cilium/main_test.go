//go:build integration

// Package cilium runs the plugin's Cilium preset against a stand-in agent and the real cilium-agent, including the pool with Cilium's IPAM. It needs root and the binaries that `make test` builds.
package cilium

import (
	"os"
	"testing"

	"github.com/netready/netready/test/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
