//go:build tools

// Package tools records the tools `make release` builds: the SBOM
// generator, which reads the Go build info of each released binary.
package tools

import (
	_ "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod"
)
