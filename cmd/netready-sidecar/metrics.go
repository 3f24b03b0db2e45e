package main

import (
	"github.com/containernetworking/plugins/pkg/utils/buildversion"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
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
	tainted        prometheus.Gauge
	addWait        *prometheus.HistogramVec
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
		addWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "netready_add_wait_seconds",
			Help:    "How long each ADD that began while the sidecar ran waited for the network, by network and outcome: ready, timeout_proceed (a pending marker), timeout_fail (from the outcome journal: the marker is removed).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
		}, []string{"network", "outcome"}),
		tainted: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "netready_node_tainted",
			Help: "1 while this node carries netready's taint netready.io/pod-ips-exhausted (an IP pool is short), else 0.",
		}),
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "netready_build_info",
		Help:        "Always 1; the version label is the sidecar's version.",
		ConstLabels: prometheus.Labels{"version": buildversion.BuildVersion},
	})
	build.Set(1)
	reg.MustRegister(m.publishLatency, m.markerWait, m.apiErrors, m.refused, m.refusedPods, m.pending, m.published, m.poolFree, m.poolSize,
		m.tainted, m.addWait, build, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
