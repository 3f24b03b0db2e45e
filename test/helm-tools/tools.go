//go:build tools

// Package tools records the tool `make test` builds to check the Helm
// chart: Helm itself (lint, template, install, upgrade, rollback,
// uninstall against the real API server).
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
