//go:build tools

// Package tools records the binary built from this module.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
