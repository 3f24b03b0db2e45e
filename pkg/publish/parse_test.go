package publish

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/netready/netready/pkg/marker"
)

// TestParseMessage reads back what ForMarkers writes.
func TestParseMessage(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	ready := &marker.Marker{Network: "a-net", IfName: "eth0", State: marker.StateReady, WaitedMs: 212,
		Checks: []marker.CheckResult{{Kind: "cilium-endpoint-published", Target: "CiliumEndpoint default/w", Ready: true, Note: "published; network x (eth9): waiting for: y"}}}
	pending := &marker.Marker{Network: "b-net", IfName: "net1", State: marker.StatePending, CreatedAt: marker.Time{Time: now.Add(-time.Second)},
		Checks: []marker.CheckResult{{Kind: "route", Ready: true}, {Kind: "file", Target: "/run/x; y", Why: "file does not exist (yet)"}, {Kind: "nftables", Target: "set inet/t/s has 10.0.0.5", Why: "IP not in the set yet"}}}
	late := &marker.Marker{Network: "c-net", IfName: "eth0", State: marker.StatePending, CreatedAt: marker.Time{Time: now.Add(-time.Hour)},
		Checks: []marker.CheckResult{{Kind: "file", Target: "/run/z"}}}
	c := ForMarkers([]*marker.Marker{late, pending, ready}, DefaultConditionType, 10*time.Minute, now)
	want := []Attachment{
		{Network: "a-net", IfName: "eth0", Programmed: true, WaitedMs: 212},
		{Network: "b-net", IfName: "net1", Unmet: "file /run/x; y (file does not exist (yet)), nftables set inet/t/s has 10.0.0.5 (IP not in the set yet)"},
		{Network: "c-net", IfName: "eth0", Late: "still not programmed more than 10m0s after ADD (2026-11-24T11:00:00Z), re-checking at least every minute", Unmet: "file /run/z"},
	}
	if diff := cmp.Diff(want, ParseMessage(c.Message)); diff != "" {
		t.Errorf("ParseMessage(%q) (-want +got):\n%s", c.Message, diff)
	}
	u := WithUnreadable(&c, []Unreadable{{Path: "/run/netready/n/x.json", Err: errString("EIO")}}, DefaultConditionType)
	if diff := cmp.Diff(want, ParseMessage(u.Message)); diff != "" {
		t.Errorf("ParseMessage of an unreadable marker's message (-want +got):\n%s", diff)
	}
	if got := ParseMessage(NotObserved(DefaultConditionType, true, time.Second).Message); got != nil {
		t.Errorf("ParseMessage(NotObserved) = %+v, want nothing", got)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// TestParseLeftBehind reads back the sandboxes and markers a condition
// names as gone, and nothing from conditions that name none.
func TestParseLeftBehind(t *testing.T) {
	type got struct{ Sandboxes, Markers []string }
	long := make([]string, 80)
	for i := range long {
		long[i] = "aaaaaaaaaaaa_net" + strconv.Itoa(i)
	}
	cut := LeftBehind(NotObserved("T", false, time.Second), long)
	for _, tc := range []struct {
		name string
		c    *corev1.PodCondition
		want got
	}{
		{"sandbox changed", ptr(SandboxChanged("T", "aaaaaaaaaaaa,bbbbbbbbbbbb", []string{"aaaaaaaaaaaa_eth0", "bbbbbbbbbbbb_net1"})),
			got{[]string{"aaaaaaaaaaaa", "bbbbbbbbbbbb"}, []string{"aaaaaaaaaaaa_eth0", "bbbbbbbbbbbb_net1"}}},
		{"sandbox changed, none left", ptr(SandboxChanged("T", "aaaaaaaaaaaa", nil)), got{[]string{"aaaaaaaaaaaa"}, nil}},
		{"sandbox changed, unnamed", ptr(SandboxChanged("T", "", nil)), got{}},
		{"not observed", ptr(LeftBehind(NotObservedHeld("T", "why"), []string{"aaaaaaaaaaaa_eth0"})), got{nil, []string{"aaaaaaaaaaaa_eth0"}}},
		{"programmed names nothing gone", ptr(LeftBehind(corev1.PodCondition{Reason: ReasonProgrammed, Message: "sandbox aaaaaaaaaaaa; x"}, []string{"aaaaaaaaaaaa_eth0"})), got{}},
		{"none", nil, got{}},
	} {
		s, m := ParseLeftBehind(tc.c)
		if diff := cmp.Diff(tc.want, got{s, m}); diff != "" {
			t.Errorf("%s: ParseLeftBehind(%q) (-want +got):\n%s", tc.name, tc.c.Message, diff)
		}
	}
	_, m := ParseLeftBehind(&cut)
	if len(cut.Message) > maxMessage || len(m) == 0 || m[0] != long[0] || len(m) >= len(long) {
		t.Errorf("a list cut short: %d names read back from %d bytes, want some and not all", len(m), len(cut.Message))
	}
}

func ptr[T any](v T) *T { return &v }
