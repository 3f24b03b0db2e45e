// Package metrics owns the Prometheus series netready-sidecar exports:
// their names, units, help and buckets, and the build, Go and process
// collectors beside them.
package metrics

import (
	"github.com/containernetworking/plugins/pkg/utils/buildversion"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the sidecar's Prometheus series.
type Metrics struct {
	PublishLatency prometheus.Histogram
	MarkerWait     *prometheus.HistogramVec
	APIErrors      *prometheus.CounterVec
	Refused        *prometheus.CounterVec
	RefusedPods    prometheus.Gauge
	Pending        prometheus.Gauge
	Published      *prometheus.CounterVec
	PoolFree       *prometheus.GaugeVec
	PoolSize       *prometheus.GaugeVec
	PoolAddresses  *prometheus.GaugeVec
	PoolUnknown    *prometheus.GaugeVec
	PoolFull       *prometheus.GaugeVec
	Tainted        prometheus.Gauge
	PendingOldest  prometheus.Gauge
	GatedPods      prometheus.Gauge
	AddWait        *prometheus.HistogramVec
	ConfigInvalid  *prometheus.GaugeVec
	// CNIStatusActive: whether runtimes call STATUS for the node's
	// conflist.
	CNIStatusActive *prometheus.GaugeVec
	// PresetNotWriting: a preset's agent is not set up to write what the
	// preset waits for.
	PresetNotWriting *prometheus.GaugeVec
	// InstallBackedOff: the installer stopped putting the entry back.
	InstallBackedOff *prometheus.GaugeVec
	// CiliumPropagation: how long after this node's sidecar received a
	// remote pod's CiliumEndpoint its own agent's ipcache held it
	// (package propagation); CiliumPropagationUnmeasured: events it could
	// not measure, by reason.
	CiliumPropagation           prometheus.Histogram
	CiliumPropagationUnmeasured *prometheus.CounterVec
}

// Why a CiliumEndpoint event was not measured (the reason label of
// netready_cilium_propagation_unmeasured_total).
const (
	UnmeasuredBusy    = "busy"    // too many measurements in flight
	UnmeasuredTimeout = "timeout" // the agent did not hold it in time
	UnmeasuredAgent   = "agent"   // the agent answered with an error, or refused
)

// New registers every series with reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		PublishLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "netready_publish_latency_seconds",
			Help:    "Time from a marker being written to its pod condition being published.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		MarkerWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "netready_marker_wait_seconds",
			Help:    "How long ADD (and the sidecar, for pending attachments) waited for the network, from markers.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 20),
		}, []string{"state"}),
		APIErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "netready_api_errors_total",
			Help: "Failed API server requests, by reason.",
		}, []string{"reason"}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "netready_publish_refused_total",
			Help: "Condition patches the API server refused for good (403, 422, 400), by reason; each pod's is sent again after a backoff of minutes.",
		}, []string{"reason"}),
		RefusedPods: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "netready_publish_refused_pods",
			Help: "Pods whose condition patch the API server refuses for good: see their PublishRefused Events.",
		}),
		Pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "netready_pending_attachments",
			Help: "Attachments whose checks the sidecar is still running.",
		}),
		Published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "netready_conditions_published_total",
			Help: "Pod condition patches applied, by status.",
		}, []string{"status"}),
		PoolFree: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "netready_pool_free_addresses",
			Help: "Addresses host-local can still hand out, per network and range set (a pod takes one from each).",
		}, []string{"network", "range"}),
		PoolSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "netready_pool_size",
			Help: "Addresses host-local can hand out in all, per network and range set.",
		}, []string{"network", "range"}),
		PoolAddresses: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "netready_pool_addresses",
			Help: "A watched pool's addresses by state (free, used, capacity), per network and source (host-local, cilium, aws-vpc-cni), for the range set with the fewest free; addresses cooling down count in neither free nor used.",
		}, []string{"network", "source", "state"}),
		PoolUnknown: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "netready_pool_unknown",
			Help: "1 while netready cannot tell whether a watched pool is exhausted (its agent does not answer, or gives no capacity): the pool never taints the node then.",
		}, []string{"network", "source"}),
		PoolFull: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "netready_pool_cluster_full",
			Help: "1 while the pool's source says every pool that serves the node is full cluster-wide (calico-ipam: no free address or block in any node's blocks): every node says the same, so alert on max by (network, source).",
		}, []string{"network", "source"}),
		AddWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "netready_add_wait_seconds",
			Help:    "How long each ADD that began while the sidecar ran waited for the network, by network and outcome: ready, timeout_proceed (a pending marker), timeout_fail (from the outcome journal: the marker is removed).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
		}, []string{"network", "outcome"}),
		PendingOldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "netready_pending_oldest_start_timestamp_seconds",
			Help: "When the ADD of the oldest attachment the sidecar is still re-checking began (Unix time), or 0 when none is pending: time() minus it is the longest wait for a network on this node.",
		}),
		GatedPods: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "netready_gated_pods",
			Help: "Pods of this node that carry netready's readiness gate: while the sidecar is down, they cannot turn Ready (the NetreadyDown alert reads its last value).",
		}),
		ConfigInvalid: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "netready_config_invalid",
			Help: "1 while this node's netready entry for the network is refused by ADD (code 7), which STATUS does not report: pods of that network fail to start. 0 once it is accepted again.",
		}, []string{"network"}),
		CNIStatusActive: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "netready_cni_status_active",
			Help: "1 when the runtime calls CNI STATUS (and GC) for the node's conflist, whose cniVersion is 1.1.0 or later; 0 when it never does (netready-install --cni-version auto raises it where every plugin allows). Labels: the conflist's network and cniVersion.",
		}, []string{"network", "cni_version"}),
		PresetNotWriting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "netready_preset_not_writing",
			Help: "1 while a pending attachment of the network says its preset's agent is not set up to write what the preset waits for (calico: Felix's endpoint-status folder does not exist, endpointStatusPathPrefix unset); 0 once an attachment of the network is ready.",
		}, []string{"network"}),
		InstallBackedOff: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "netready_install_backed_off",
			Help: "1 while netready-install has stopped putting its entry back into the network's conflist because another agent keeps removing it (Cilium's cni.exclusive); pods started meanwhile skip netready and are kept not ready. 0 once the entry stays.",
		}, []string{"network"}),
		CiliumPropagation: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "netready_cilium_propagation_seconds",
			Help:    "Time from this node's sidecar receiving a pod's CiliumEndpoint (a pod on another node; a new IP or identity) to this node's cilium-agent ipcache mapping its IP to that identity.",
			Buckets: []float64{0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30},
		}),
		CiliumPropagationUnmeasured: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "netready_cilium_propagation_unmeasured_total",
			Help: "CiliumEndpoint events of pods on other nodes that the propagation meter did not measure, by reason: busy (too many measurements in flight), timeout (this node's agent did not hold the pod's IP with its identity within 30 s), agent (this node's agent's last answer was an error, or it refused the connection; an agent that answers late counts as timeout).",
		}, []string{"reason"}),
		Tainted: prometheus.NewGauge(prometheus.GaugeOpts{
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
	reg.MustRegister(m.PublishLatency, m.MarkerWait, m.APIErrors, m.Refused, m.RefusedPods, m.Pending, m.Published, m.PoolFree, m.PoolSize, m.PoolAddresses, m.PoolUnknown, m.PoolFull,
		m.Tainted, m.AddWait, m.PendingOldest, m.GatedPods, m.ConfigInvalid, m.CNIStatusActive, m.PresetNotWriting, m.InstallBackedOff,
		m.CiliumPropagation, m.CiliumPropagationUnmeasured, build, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
