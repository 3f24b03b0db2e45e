//go:build integration

package harness

import (
	"fmt"
	"slices"
	"time"
)

// Benchmarks print figures measured in one run, side by side with a
// baseline measured in the same run. They assert nothing about time.
// Run with `make bench`.

// Percentile is the p-quantile (0..1) of d, 0 for no samples.
func Percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// Ms formats d in milliseconds.
func Ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }
