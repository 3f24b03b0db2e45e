//go:build integration

// Package bench measures netready: ADD overhead, detection and publish latency, storms, pod start, footprints and scale. Its Benchmarks run with make bench. It needs root and the binaries that `make test` builds.
package bench

import (
	"os"
	"testing"

	"github.com/netready/netready/test/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
