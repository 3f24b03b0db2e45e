//go:build integration

package harness

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/marker"
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

// ReadyMarker is the marker ADD writes for pod's eth0 on network when its
// network was ready at once.
func ReadyMarker(network, containerID string, pod *corev1.Pod, ip string) *marker.Marker {
	now := time.Now()
	return &marker.Marker{Version: marker.Version, Network: network, ContainerID: containerID, IfName: "eth0",
		Pod: attachment.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}, IPs: []string{ip},
		State: marker.StateReady, CreatedAt: marker.Time{Time: now}, ReadyAt: &marker.Time{Time: now}}
}
