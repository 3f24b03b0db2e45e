// Package marker owns readiness marker files: one JSON file per attachment
// at <stateDir>/<network>/<containerID>_<ifName>.json, written atomically,
// read back by CHECK and the sidecar, removed by DEL and GC.
package marker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/netready/netready/pkg/atomicfile"
	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/statedir"
)

// Version is the marker format version.
const Version = 1

// States of a marker.
const (
	StateReady   = "ready"
	StatePending = "pending"
)

// Marker is the content of one marker file.
type Marker struct {
	Version     int            `json:"version"`
	Network     string         `json:"network"`
	ContainerID string         `json:"containerID"`
	IfName      string         `json:"ifName"`
	NetNS       string         `json:"netns"`
	Pod         attachment.Pod `json:"pod"`
	IPs         []string       `json:"ips"`
	State       string         `json:"state"`
	CreatedAt   Time           `json:"createdAt"`
	ReadyAt     *Time          `json:"readyAt,omitempty"`
	WaitedMs    int64          `json:"waitedMs"`
	Checks      []CheckResult  `json:"checks"`
	// Pending carries what it takes to go on checking; only when pending.
	Pending *Pending `json:"pending,omitempty"`
}

// CheckResult is one check's outcome.
type CheckResult struct {
	Kind     string `json:"kind"`
	Target   string `json:"target"`
	Ready    bool   `json:"ready"`
	WaitedMs int64  `json:"waitedMs"`
	// Why it is not ready, from its last probe.
	Why string `json:"why,omitempty"`
	// Note says, of a ready result that is not a confirmation, what it
	// rests on (crossNode's "settle" with Cilium: a statistical hold).
	Note string `json:"note,omitempty"`
}

// Pending is what the sidecar needs to re-run the checks of a pending
// attachment: the configured checks and the pod IPs' gateways, and with
// the entry's "crossNode", the cross-node part after them.
type Pending struct {
	Checks   []config.CheckConf `json:"checks"`
	Gateways map[string]string  `json:"gateways,omitempty"`
	// CrossNode is the entry's "crossNode" (its keys as written, defaults
	// filled in); nil when it is off, and in markers of plugins before it,
	// whose re-check waits for the local checks alone.
	CrossNode *config.CrossNodeConf `json:"crossNode,omitempty"`
	// OVNIfaceID names the pod's OVN logical port, whose claim the
	// cross-node wait awaits before it raises the barrier.
	OVNIfaceID string `json:"ovnIfaceID,omitempty"`
	// CiliumPublished: the sidecar must see the pod's CiliumEndpoint
	// published before the marker is ready (crossNode with Cilium). A
	// key of its own, not CrossNode, so that a sidecar from before it
	// re-checks such a marker as before (the local checks alone) rather
	// than wait on OVN's barrier.
	CiliumPublished bool `json:"ciliumPublished,omitempty"`
	// CiliumSettleMs is crossNode's "settle" with Cilium: once the
	// CiliumEndpoint is published, the sidecar holds the marker pending
	// this much longer. A sidecar from before it ignores it: no hold.
	CiliumSettleMs int64 `json:"ciliumSettleMs,omitempty"`
}

// Time marshals as RFC 3339 in UTC with nine fraction digits, as the
// contract shows.
type Time struct{ time.Time }

const timeLayout = "2006-01-02T15:04:05.000000000Z07:00"

// MarshalJSON implements json.Marshaler.
func (t Time) MarshalJSON() ([]byte, error) {
	return []byte(`"` + t.UTC().Format(timeLayout) + `"`), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (t *Time) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return err
	}
	t.Time = v
	return nil
}

// New records an attachment and its checks' results, whose wait began at
// start and took waited. It is ready; a caller that gave up makes it
// pending.
func New(att *attachment.Attachment, checks []CheckResult, waited time.Duration, start time.Time) *Marker {
	if checks == nil {
		checks = []CheckResult{}
	}
	return &Marker{
		Version: Version, Network: att.Network, ContainerID: att.ContainerID, IfName: att.IfName,
		NetNS: att.NetNS, Pod: att.Pod, IPs: att.IPStrings(),
		State:     StateReady,
		CreatedAt: Time{start},
		ReadyAt:   &Time{start.Add(waited)},
		WaitedMs:  waited.Milliseconds(),
		Checks:    checks,
	}
}

// Gateways maps each pod IP to its gateway, for a pending marker.
func Gateways(att *attachment.Attachment) map[string]string {
	gws := map[string]string{}
	for _, ip := range att.IPs {
		if ip.Gateway != nil {
			gws[ip.Address.IP.String()] = ip.Gateway.String()
		}
	}
	return gws
}

// Attachment rebuilds the attachment a marker records, for going on with
// its checks.
func (m *Marker) Attachment() (*attachment.Attachment, error) {
	att := &attachment.Attachment{Network: m.Network, ContainerID: m.ContainerID, IfName: m.IfName, NetNS: m.NetNS, Pod: m.Pod}
	for _, s := range m.IPs {
		ip, ipnet, err := net.ParseCIDR(s)
		if err != nil {
			return nil, fmt.Errorf("marker IP %q: %w", s, err)
		}
		ipnet.IP = ip
		a := attachment.IP{Address: *ipnet}
		if m.Pending != nil {
			a.Gateway = net.ParseIP(m.Pending.Gateways[ip.String()])
		}
		att.IPs = append(att.IPs, a)
	}
	return att, nil
}

// Key identifies an attachment's marker.
type Key struct {
	Network, ContainerID, IfName string
}

// Validate refuses keys that could escape the state folder.
func (k Key) Validate() error {
	a := attachment.Attachment{Network: k.Network, ContainerID: k.ContainerID, IfName: k.IfName}
	if err := a.Validate(); err != nil {
		return fmt.Errorf("refusing marker name: %w", err)
	}
	return nil
}

// FileName is the marker's name within its network folder.
func (k Key) FileName() string {
	return k.ContainerID + "_" + k.IfName + statedir.MarkerSuffix
}

// Store is the state folder.
type Store struct {
	Dir string
}

// Path returns the marker path for k after validating k.
func (s Store) Path(k Key) (string, error) {
	if err := k.Validate(); err != nil {
		return "", err
	}
	return filepath.Join(s.Dir, k.Network, k.FileName()), nil
}

// Write stores m atomically (see package atomicfile), mode 0644.
func (s Store) Write(m *Marker) error {
	path, data, err := s.encode(m)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create marker folder: %w", err)
	}
	return atomicfile.Write(path, data, 0o644)
}

// Replace stores m over its attachment's marker only if that marker still
// exists and is the one was accepts, in one step (atomicfile.Replace): a
// DEL or a new ADD meanwhile is never undone. The error wraps
// fs.ErrNotExist or atomicfile.ErrChanged when it did not write.
func (s Store) Replace(m *Marker, was func(old *Marker) bool) error {
	path, data, err := s.encode(m)
	if err != nil {
		return err
	}
	return atomicfile.Replace(path, data, 0o644, func(old []byte) bool {
		prev, err := decode(path, old)
		return err == nil && was(prev)
	})
}

// encode returns m's path and file content.
func (s Store) encode(m *Marker) (string, []byte, error) {
	path, err := s.Path(Key{Network: m.Network, ContainerID: m.ContainerID, IfName: m.IfName})
	if err != nil {
		return "", nil, err
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return "", nil, fmt.Errorf("encode marker: %w", err)
	}
	return path, append(data, '\n'), nil
}

// Read returns the marker of k; the error wraps fs.ErrNotExist if none.
func (s Store) Read(k Key) (*Marker, error) {
	path, err := s.Path(k)
	if err != nil {
		return nil, err
	}
	return ReadFile(path)
}

// ReadFile decodes one marker file.
func ReadFile(path string) (*Marker, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read marker: %w", err)
	}
	return decode(path, data)
}

// decode checks and decodes the content of the marker file at path.
func decode(path string, data []byte) (*Marker, error) {
	var m Marker
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("decode marker %s: %w", path, err)
	}
	if m.Version != Version {
		return nil, fmt.Errorf("marker %s has version %d, want %d", path, m.Version, Version)
	}
	// The name is what DEL and GC go by: a file whose content names
	// another attachment must not speak for it. Names are compared whole,
	// as "_" may appear in both the container ID and the interface name.
	k := Key{Network: m.Network, ContainerID: m.ContainerID, IfName: m.IfName}
	if err := k.Validate(); err != nil {
		return nil, fmt.Errorf("marker %s: %w", path, err)
	}
	if filepath.Base(path) != k.FileName() || filepath.Base(filepath.Dir(path)) != k.Network {
		return nil, fmt.Errorf("marker %s names another attachment (network %q, container %q, interface %q): not trusted",
			path, k.Network, k.ContainerID, k.IfName)
	}
	if m.State != StateReady && m.State != StatePending {
		return nil, fmt.Errorf("marker %s has state %q, want %q or %q", path, m.State, StateReady, StatePending)
	}
	return &m, nil
}

// Remove deletes the marker of k, and any temp file that an ADD killed
// while writing it left. A missing marker is not an error.
func (s Store) Remove(k Key) error {
	path, err := s.Path(k)
	if err != nil {
		return err
	}
	var errs []error
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("remove marker: %w", err))
	}
	// Names are compared, not globbed: an interface name may hold '*'.
	entries, _ := os.ReadDir(filepath.Dir(path))
	for _, e := range entries {
		if target, ok := atomicfile.TempTarget(e.Name()); !ok || target != k.FileName() {
			continue
		}
		if err := os.Remove(filepath.Join(filepath.Dir(path), e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove temp file: %w", err))
		}
	}
	return errors.Join(errs...)
}

// GC removes the markers of network whose attachment is not in keep, and
// the temp files in the network's folder unchanged for
// statedir.StaleTempAge before now, whatever they were for: writers killed
// while writing left them. It never looks outside the network's own
// folder. It returns the names it removed.
func (s Store) GC(network string, keep []Key, now time.Time) ([]string, error) {
	if err := (Key{Network: network, ContainerID: "x", IfName: "x"}).Validate(); err != nil {
		return nil, err
	}
	dir := filepath.Join(s.Dir, network)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("gc: %w", err)
	}
	valid := make(map[string]bool, len(keep))
	for _, k := range keep {
		valid[k.FileName()] = true
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasSuffix(name, statedir.MarkerSuffix) || valid[name] ||
			strings.HasPrefix(name, atomicfile.TempPrefix) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("gc: remove %s: %w", name, err))
			continue
		}
		removed = append(removed, name)
	}
	swept, err := statedir.Sweep(dir, "", statedir.Changed, now)
	if err != nil {
		errs = append(errs, fmt.Errorf("gc: %w", err))
	}
	return append(removed, swept...), errors.Join(errs...)
}

// OnlyUnmet reports whether m's results of kind are what it waits on: at
// least one of them is unmet, and every other result is met (with
// Cilium's crossNode, the CiliumEndpoint the sidecar has yet to see).
func (m *Marker) OnlyUnmet(kind string) bool {
	left := false
	for _, c := range m.Checks {
		switch {
		case c.Kind == kind && !c.Ready:
			left = true
		case !c.Ready:
			return false
		}
	}
	return left
}
