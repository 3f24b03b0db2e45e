package pool

import (
	"context"
	"encoding/json"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestReadVerdict: STATUS trusts the sidecar's verdict only when it is
// about the same source and at most a minute old; anything else is a
// count that cannot tell, saying what to do, and never exhausted.
func TestReadVerdict(t *testing.T) {
	now := time.Date(2026, 11, 28, 5, 0, 0, 0, time.UTC)
	full := Count{Ranges: []Range{{Set: "10.244.1.0/29", Usable: big.NewInt(4), Used: 4}}, Said: "4 pods hold an address"}
	good := func(source string, at time.Time) string {
		b, _ := json.Marshal(keptCount{Source: source, At: at, Count: full})
		return string(b)
	}
	tests := []struct {
		name    string
		content *string // nil: no file; "DIR": a folder in its place
		want    Count
	}{
		{"fresh", ptr(good("ovn-kubernetes", now.Add(-5*time.Second))), said(full, "4 pods hold an address (netready-sidecar's count, 5s old)")},
		{"a minute old", ptr(good("ovn-kubernetes", now.Add(-time.Minute))), said(full, "4 pods hold an address (netready-sidecar's count, 1m0s old)")},
		{"missing", nil, Count{Unknown: "no verdict from netready-sidecar at PATH: is the sidecar running on this node, with --cni-conf-dir on this network's config folder?"}},
		{"unreadable", ptr("DIR"), Count{Unknown: "netready-sidecar's verdict cannot be read: read PATH: is a directory"}},
		{"garbage", ptr("{not json"), Count{Unknown: "PATH is not a verdict of netready-sidecar (invalid character 'n' looking for beginning of object key string): remove it; the sidecar writes it again within seconds"}},
		{"no capacity", ptr(`{"source":"ovn-kubernetes","at":"2026-11-28T04:59:59Z","count":{"ranges":[{"set":"x","used":3}]}}`),
			Count{Unknown: `PATH is not a verdict of netready-sidecar (range set "x" has no valid count): remove it; the sidecar writes it again within seconds`}},
		{"another source", ptr(good("calico-ipam", now)),
			Count{Unknown: `netready-sidecar's verdict at PATH counts a "calico-ipam" pool, not "ovn-kubernetes": the sidecar has not counted this network's pool since its source changed; is it running a netready of the same version?`}},
		{"from the future", ptr(good("ovn-kubernetes", now.Add(90*time.Second))),
			Count{Unknown: "netready-sidecar's verdict at PATH is dated 2026-11-28T05:01:30Z, 1m30s in the future: the clock went back; the sidecar's next count replaces it"}},
		{"75s old", ptr(good("ovn-kubernetes", now.Add(-75*time.Second))),
			Count{Unknown: "no verdict from netready-sidecar for 1m15s: is the sidecar running on this node? (kubectl -n kube-system get pods -l app=netready --field-selector spec.nodeName=<node>)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), ".pool-verdict")
			switch {
			case tt.content == nil:
			case *tt.content == "DIR":
				os.Mkdir(path, 0o755)
			default:
				os.WriteFile(path, []byte(*tt.content), 0o644)
			}
			got := ReadVerdict(path, "ovn-kubernetes", now)
			got.Unknown = strings.ReplaceAll(got.Unknown, path, "PATH")
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b *big.Int) bool { return a.Cmp(b) == 0 })); diff != "" {
				t.Errorf("ReadVerdict (-want +got):\n%s", diff)
			}
			if got.Unknown != "" && got.Exhausted(1) != nil {
				t.Errorf("a verdict that cannot tell exhausts the pool: %v", got.Exhausted(1))
			}
		})
	}
}

func ptr(s string) *string { return &s }

func said(c Count, s string) Count {
	c.Said = s
	return c
}

// TestVerdictForStatus: the sidecar's verdict, written where the entry's
// stateDir says, is what STATUS counts for calico-ipam and
// ovn-kubernetes, and AllNetworks points the source there.
func TestVerdictForStatus(t *testing.T) {
	stateDir, confDir := t.TempDir(), t.TempDir()
	full := Count{Ranges: []Range{{Set: "10.244.1.0/29", Usable: big.NewInt(4), Used: 4}}}
	if err := WriteVerdict(VerdictPath(stateDir, "ovn"), "ovn-kubernetes", full, time.Now()); err != nil {
		t.Fatal(err)
	}
	cnt, err := ReadForStatus(context.Background(), "ovn", stateDir, json.RawMessage(`{"type":"ovn-kubernetes"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := errString(cnt.Exhausted(1)), "IP pool exhausted (4 of 4 addresses in use): netready-sidecar's count, 0s old"; got != want {
		t.Errorf("Exhausted = %q, want %q", got, want)
	}
	cnt, _ = ReadForStatus(context.Background(), "ovn", stateDir, json.RawMessage(`{"type":"calico-ipam"}`))
	if cnt.Unknown == "" || cnt.Exhausted(1) != nil {
		t.Errorf("calico-ipam read an ovn-kubernetes verdict: %+v", cnt)
	}

	os.WriteFile(filepath.Join(confDir, "10-ovn.conflist"), []byte(`{"cniVersion":"1.1.0","name":"ovn","plugins":[{"type":"ovn-k8s-cni-overlay"},{"type":"netready","stateDir":"`+stateDir+`","status":{"ipam":"auto","poolAction":"notready"}}]}`), 0o644)
	nets, problems, err := AllNetworks(confDir)
	if err != nil || problems != nil || len(nets) != 1 {
		t.Fatalf("AllNetworks = %+v, %v, %v", nets, problems, err)
	}
	n := nets[0]
	if OriginOf(n.Source) != Sidecar || n.Source.Where() != VerdictPath(stateDir, "ovn") || n.Spec != nil {
		t.Errorf("network %s: source %s at %s (from the sidecar: %v), want ovn-kubernetes at %s", n.Network, n.Source.Type(), n.Source.Where(), OriginOf(n.Source) == Sidecar, VerdictPath(stateDir, "ovn"))
	}
	if cnt, _ := n.Source.Read(context.Background(), nil); cnt.Exhausted(1) == nil {
		t.Errorf("the source's Read does not read the verdict: %+v", cnt)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
