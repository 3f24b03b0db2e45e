//go:build integration

// Package node runs a whole node: a real kube-apiserver, kubelet, containerd and the released manifests, with gated pods, the pool, the Helm chart and the first-packet test. It needs root and the binaries that `make test` builds.
package node

import (
	"os"
	"testing"

	"github.com/netready/netready/test/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
