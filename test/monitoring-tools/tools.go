//go:build tools

// Package tools records the tool `make test` builds to check the
// monitoring component: Prometheus's promtool (check metrics on a real
// scrape, check and test rules for the alerts).
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
