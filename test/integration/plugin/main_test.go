//go:build integration

// Package plugin drives the real netready plugin through its verbs (ADD, CHECK, DEL, GC, STATUS) with the real CNI reference plugins, cnitool and libcni, in network namespaces made for each test, against test agents that program real iptables, nftables and HTTP sources. It needs root and the binaries that `make test` builds.
package plugin

import (
	"os"
	"testing"

	"github.com/netready/netready/test/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
