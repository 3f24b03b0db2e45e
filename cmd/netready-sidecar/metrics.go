package main

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the sidecar's Prometheus series.
type metrics struct {
	publishLatency prometheus.Histogram
	markerWait     *prometheus.HistogramVec
	apiErrors      *prometheus.CounterVec
	refused        *prometheus.CounterVec
	refusedPods    prometheus.Gauge
	pending        prometheus.Gauge
	published      *prometheus.CounterVec
	poolFree       *prometheus.GaugeVec
	poolSize       *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		publishLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "netready_publish_latency_seconds",
			Help:    "Time from a marker being written to its pod condition being published.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		markerWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "netready_marker_wait_seconds",
			Help:    "How long ADD (and the sidecar, for pending attachments) waited for the network, from markers.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 20),
		}, []string{"state"}),
		apiErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "netready_api_errors_total",
			Help: "Failed API server requests, by reason.",
		}, []string{"reason"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "netready_publish_refused_total",
			Help: "Condition patches the API server refused for good (403, 422, 400), by reason; each pod's is sent again after a backoff of minutes.",
		}, []string{"reason"}),
		refusedPods: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "netready_publish_refused_pods",
			Help: "Pods whose condition patch the API server refuses for good: see their PublishRefused Events.",
		}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "netready_pending_attachments",
			Help: "Attachments whose checks the sidecar is still running.",
		}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "netready_conditions_published_total",
			Help: "Pod condition patches applied, by status.",
		}, []string{"status"}),
		poolFree: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "netready_pool_free_addresses",
			Help: "Addresses host-local can still hand out, per network and range set (a pod takes one from each).",
		}, []string{"network", "range"}),
		poolSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "netready_pool_size",
			Help: "Addresses host-local can hand out in all, per network and range set.",
		}, []string{"network", "range"}),
	}
	reg.MustRegister(m.publishLatency, m.markerWait, m.apiErrors, m.refused, m.refusedPods, m.pending, m.published, m.poolFree, m.poolSize)
	return m
}
