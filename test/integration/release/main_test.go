//go:build integration

// Package release checks the release: its archives, binaries, image and clients. It needs root and the binaries that `make test` builds.
package release

import (
	"os"
	"testing"

	"github.com/netready/netready/test/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
