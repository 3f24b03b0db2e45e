//go:build integration

// Package runtimes runs the real plugin under real container runtimes (containerd and CRI-O through the CRI). It needs root and the binaries that `make test` builds.
package runtimes

import (
	"os"
	"testing"

	"github.com/netready/netready/test/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
