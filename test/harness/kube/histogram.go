//go:build integration

package kube

import (
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Histogram is one unlabelled histogram a sidecar exports: its count and
// sum, and each bucket's upper bound with its cumulative count, in order.
type Histogram struct {
	Count  uint64
	Sum    float64
	Bounds []float64
	Counts []uint64
}

// ScrapeHistogram reads the histogram name from the sidecar's /metrics
// at listen; empty when it has no sample yet.
func ScrapeHistogram(t testing.TB, listen, name string) Histogram {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(MetricsText(t, listen)))
	if err != nil {
		t.Fatal(err)
	}
	var h Histogram
	f := families[name]
	if f == nil || len(f.GetMetric()) != 1 {
		return h
	}
	ph := f.GetMetric()[0].GetHistogram()
	h.Count, h.Sum = ph.GetSampleCount(), ph.GetSampleSum()
	for _, b := range ph.GetBucket() {
		h.Bounds, h.Counts = append(h.Bounds, b.GetUpperBound()), append(h.Counts, b.GetCumulativeCount())
	}
	return h
}

// UpTo is how many samples were at most bound (a bucket's upper bound).
func (h Histogram) UpTo(bound float64) uint64 {
	for i, b := range h.Bounds {
		if b == bound {
			return h.Counts[i]
		}
	}
	return 0
}

// Quantile is the upper bound of the first bucket that holds q of the
// samples, as histogram_quantile would bound it; 0 with no sample.
func (h Histogram) Quantile(q float64) float64 {
	for i, c := range h.Counts {
		if h.Count > 0 && float64(c) >= q*float64(h.Count) {
			return h.Bounds[i]
		}
	}
	return 0
}
