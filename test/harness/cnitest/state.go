//go:build integration

package cnitest

import (
	"encoding/json"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/marker"
)

// KeptCount is the part of a kept pool count (pool.CachePath) that the
// tests read: the folder's mtime it was counted at, and the addresses in use.
type KeptCount struct {
	MtimeNs int64   `json:"mtimeNs"`
	Used    []int64 `json:"used"`
}

// ReadKeptCount reads a kept pool count; false if it is absent or
// unreadable.
func ReadKeptCount(path string) (KeptCount, bool) {
	var c KeptCount
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &c) != nil {
		return KeptCount{}, false
	}
	return c, true
}

// ReadyMarker is the marker ADD writes for pod's eth0 on network when its
// network was ready at once.
func ReadyMarker(network, containerID string, pod *corev1.Pod, ip string) *marker.Marker {
	now := time.Now()
	return &marker.Marker{Version: marker.Version, Network: network, ContainerID: containerID, IfName: "eth0",
		Pod: attachment.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}, IPs: []string{ip},
		State: marker.StateReady, CreatedAt: marker.Time{Time: now}, ReadyAt: &marker.Time{Time: now}}
}
