//go:build integration

// Package install runs the real netready-install against real CNI folders: inserting the entry, watching, backing off, stock conflists and the README's quick-start rows. It needs root and the binaries that `make test` builds.
package install

import (
	"os"
	"testing"

	"github.com/netready/netready/test/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
