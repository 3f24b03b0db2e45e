//go:build tools

// Package tools records the binaries built from this module.
package tools

import (
	_ "github.com/cilium/cilium/cilium-dbg"
	_ "github.com/cilium/cilium/daemon"
	_ "github.com/cilium/cilium/plugins/cilium-cni"
)
