package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCrossNodeOffByDefault(t *testing.T) {
	c, err := Parse(conf(`"preset":"ovn-kubernetes"`))
	if err != nil {
		t.Fatal(err)
	}
	if c.CrossNode != nil {
		t.Errorf("crossNode = %+v without the key, want nil (off by default)", c.CrossNode)
	}
}

func TestCrossNodeParse(t *testing.T) {
	tests := []struct {
		name, extra string
		want        CrossNodeConf
	}{
		{"defaults", `"preset":"ovn-kubernetes","crossNode":{}`, CrossNodeConf{TimeoutRaw: "5s", StallAfterRaw: "3s", RaiseIntervalRaw: "200ms",
			NBSocket: DefaultOVNNBSocket, SBSocket: DefaultOVNSBSocket, Timeout: 5 * time.Second, StallAfter: 3 * time.Second, RaiseInterval: 200 * time.Millisecond}},
		{"an ovsdb check instead of the preset", `"checks":[{"kind":"ovsdb","preset":"ovn-kubernetes"}],
			"crossNode":{"timeout":"2s","stallAfter":"500ms","raiseInterval":"0s","nbSocket":"/t/nb.sock","sbSocket":"/t/sb.sock"}`,
			CrossNodeConf{TimeoutRaw: "2s", StallAfterRaw: "500ms", RaiseIntervalRaw: "0s", NBSocket: "/t/nb.sock", SBSocket: "/t/sb.sock",
				Timeout: 2 * time.Second, StallAfter: 500 * time.Millisecond}},
		// ADD returns within timeout; the sidecar's re-check goes on and
		// leaves a stalled chassis out after stallAfter.
		{"proceed: stallAfter beyond timeout", `"preset":"ovn-kubernetes","onTimeout":"proceed","crossNode":{"timeout":"500ms","stallAfter":"4s"}`,
			CrossNodeConf{TimeoutRaw: "500ms", StallAfterRaw: "4s", RaiseIntervalRaw: "200ms", NBSocket: DefaultOVNNBSocket, SBSocket: DefaultOVNSBSocket,
				Timeout: 500 * time.Millisecond, StallAfter: 4 * time.Second, RaiseInterval: 200 * time.Millisecond}},
		// With Cilium, ADD does not wait across nodes: nothing to default.
		{"cilium preset", `"preset":"cilium","crossNode":{}`, CrossNodeConf{}},
		{"a cilium http check instead of the preset", `"checks":[{"kind":"address"},{"kind":"http","preset":"cilium"}],"crossNode":{}`, CrossNodeConf{}},
		{"cilium with settle", `"preset":"cilium","crossNode":{"settle":"300ms"}`, CrossNodeConf{SettleRaw: "300ms", Settle: 300 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse(conf(tt.extra))
			if err != nil {
				t.Fatal(err)
			}
			if c.CrossNode == nil {
				t.Fatal("crossNode is nil")
			}
			if diff := cmp.Diff(tt.want, *c.CrossNode); diff != "" {
				t.Errorf("crossNode (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCrossNodeProblems(t *testing.T) {
	tests := []struct {
		name, extra string
		want        []string // each must appear in the message
	}{
		{"no OVN preset", `"crossNode":{}`, []string{`crossNode: needs the "ovn-kubernetes" preset`, `or the "cilium" preset`}},
		{"cilium with OVN's keys", `"preset":"cilium","crossNode":{"timeout":"2s","nbSocket":"/x.sock"}`,
			[]string{`crossNode: "timeout" applies to the ovn-kubernetes preset only`, `crossNode: "nbSocket" applies to the ovn-kubernetes preset only`, `Write "crossNode": {}`}},
		{"settle with ovn-kubernetes", `"preset":"ovn-kubernetes","crossNode":{"settle":"300ms"}`,
			[]string{`crossNode: "settle" applies to the cilium preset only`, `remove "settle"`}},
		{"settle not a duration", `"preset":"cilium","crossNode":{"settle":"300"}`,
			[]string{`crossNode: "settle" "300" is not a Go duration`}},
		{"settle out of range", `"preset":"cilium","crossNode":{"settle":"11s"}`,
			[]string{`crossNode: "settle" "11s" must be > 0 and <= 10s`}},
		{"settle zero", `"preset":"cilium","crossNode":{"settle":"0s"}`,
			[]string{`crossNode: "settle" "0s" must be > 0`}},
		{"both plugins' checks", `"preset":"cilium","checks":[{"kind":"ovsdb","preset":"ovn-kubernetes"}],"crossNode":{}`,
			[]string{`crossNode: the entry checks both ovn-kubernetes and cilium`}},
		{"bad durations", `"preset":"ovn-kubernetes","crossNode":{"timeout":"5","stallAfter":"-1s"}`,
			[]string{`crossNode: "timeout" "5" is not a Go duration`, `"stallAfter" "-1s" must be > 0`}},
		{"stallAfter not below timeout", `"preset":"ovn-kubernetes","crossNode":{"timeout":"2s","stallAfter":"2s"}`,
			[]string{`"stallAfter" "2s" must be shorter than "timeout" "2s" under onTimeout "fail"`}},
		{"raiseInterval out of range", `"preset":"ovn-kubernetes","crossNode":{"raiseInterval":"2s"}`,
			[]string{`crossNode: "raiseInterval" "2s" must be a Go duration >= 0 and <= 1s`}},
		{"raiseInterval not a duration", `"preset":"ovn-kubernetes","crossNode":{"raiseInterval":"fast"}`,
			[]string{`"raiseInterval" "fast" must be a Go duration`}},
		{"raiseInterval not below timeout", `"preset":"ovn-kubernetes","crossNode":{"timeout":"500ms","stallAfter":"400ms","raiseInterval":"500ms"}`,
			[]string{`"raiseInterval" "500ms" must be shorter than "timeout" "500ms"`}},
		{"stallAfter not below timeout, fail said", `"preset":"ovn-kubernetes","onTimeout":"fail","crossNode":{"timeout":"2s","stallAfter":"3s"}`,
			[]string{`"stallAfter" "3s" must be shorter than "timeout" "2s"`}},
		{"over kubelet's share", `"preset":"ovn-kubernetes","timeout":"90s","crossNode":{"timeout":"20s"}`,
			[]string{`plus the top-level "timeout" "1m30s" must be <= 1m40s`}},
		{"relative socket", `"preset":"ovn-kubernetes","crossNode":{"nbSocket":"nb.sock"}`,
			[]string{`"nbSocket" "nb.sock" must be the absolute path`}},
		{"unknown inner key", `"preset":"ovn-kubernetes","crossNode":{"timout":"1s"}`, []string{`crossNode: unknown key "timout"`}},
		{"near miss of the key", `"preset":"ovn-kubernetes","crossnode":{}`, []string{`unknown key "crossnode": did you mean "crossNode"?`}},
		{"not an object", `"preset":"ovn-kubernetes","crossNode":true`, []string{`crossNode: `}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(conf(tt.extra))
			if err == nil {
				t.Fatal("Parse accepted it")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestCrossNodeVia: the cross-node part follows the one plugin the entry
// checks.
func TestCrossNodeVia(t *testing.T) {
	tests := []struct{ extra, want string }{
		{`"preset":"ovn-kubernetes"`, PresetOVNKubernetes},
		{`"checks":[{"kind":"ovsdb","preset":"ovn-kubernetes"}]`, PresetOVNKubernetes},
		{`"preset":"cilium"`, PresetCilium},
		{`"checks":[{"kind":"http","preset":"cilium"}]`, PresetCilium},
		{`"preset":"calico"`, ""},
		{``, ""},
	}
	for _, tt := range tests {
		c, err := Parse(conf(tt.extra))
		if err != nil {
			t.Fatalf("%s: %v", tt.extra, err)
		}
		if got := c.CrossNodeVia(); got != tt.want {
			t.Errorf("%s: CrossNodeVia() = %q, want %q", tt.extra, got, tt.want)
		}
	}
}
