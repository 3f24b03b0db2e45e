package publish

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/netready/netready/pkg/marker"
)

// TestParseMessage reads back what ForMarkers writes.
func TestParseMessage(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	ready := &marker.Marker{Network: "a-net", IfName: "eth0", State: marker.StateReady, WaitedMs: 212}
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
