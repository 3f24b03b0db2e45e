//go:build integration

// Package ovn runs the plugin's OVN-Kubernetes preset against a real OVSDB and a real ovn-controller. It needs root and the binaries that `make test` builds.
package ovn

import (
	"os"
	"testing"

	"github.com/netready/netready/test/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
