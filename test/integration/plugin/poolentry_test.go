//go:build integration

package plugin

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/netready/netready/pkg/notes"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/runtimes"
)

// readNote is the network's .config-invalid note, "" when there is none.
func readNote(t *testing.T, n *cnitest.TestNet) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(n.StateDir, n.Name, notes.InvalidConfigFile))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(data)
}

// TestStatusNotesAnEntryItCannotCount: with poolAction "notready", an
// entry whose pool STATUS cannot count is netready's own problem. For a
// host-local object without ranges, with "ranges" misspelt, and "auto" on
// a chain whose host-local uses usePodCidr, the real STATUS through
// libcni succeeds and leaves the message, naming what to fix, for the
// sidecar. The first two are refused by ADD (code 7, naming the key); the
// third is an entry ADD accepts, and its ADD keeps the note rather than
// clearing it for the next STATUS to raise anew. Once the entry names a
// pool STATUS counts, STATUS clears the note.
func TestStatusNotesAnEntryItCannotCount(t *testing.T) {
	for _, tc := range []struct {
		name string
		// edit sets the entry's status block (and the chain).
		edit func(n *cnitest.TestNet, list map[string]any) map[string]any
		note string // in the note
		add  string // in ADD's code 7; "" when ADD accepts the entry
	}{
		{"host-local without ranges", func(n *cnitest.TestNet, _ map[string]any) map[string]any {
			return map[string]any{"ipam": map[string]any{"type": "host-local"}}
		}, `"ipam" (type "host-local"): "ranges" is required`, `"ranges" is required`},
		{"ranges misspelt", func(n *cnitest.TestNet, _ map[string]any) map[string]any {
			return map[string]any{"ipam": map[string]any{"type": "host-local", "rnages": []any{[]any{map[string]any{"subnet": n.Subnet}}}}}
		}, `unknown key "rnages": did you mean "ranges"?`, `"rnages"`},
		{"auto on a chain whose host-local uses usePodCidr", func(n *cnitest.TestNet, list map[string]any) map[string]any {
			ipam := cnitest.Plugins(list)[0]["ipam"].(map[string]any)
			ipam["ranges"] = []any{[]any{map[string]any{"subnet": "usePodCidr"}}}
			return map[string]any{"ipam": "auto", "confDir": n.ConfDir}
		}, `uses host-local with subnet "usePodCidr"`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := cnitest.NewNet(t, "bridge.conflist", func(n *cnitest.TestNet, list map[string]any) {
				n.Netready()["checks"] = []any{}
				st := tc.edit(n, list)
				st["poolAction"] = "notready"
				n.Netready()["status"] = st
			})
			if e, _ := n.Status(t); e != nil {
				t.Fatalf("STATUS = %+v, want success: a pool netready cannot count is its own problem, never the node's", e)
			}
			note := readNote(t, n)
			if !strings.Contains(note, tc.note) || !strings.Contains(note, "status") {
				t.Fatalf("the note for the sidecar = %q, want it to say %q", note, tc.note)
			}
			prev := cnitest.PrevResult100(n.Prefix+"5/24", n.Prefix+"1", "/var/run/netns/x")
			_, e := cnitest.Invoke(t, "ADD", n.PluginConf(prev), "CNI_CONTAINERID=uncounted", "CNI_IFNAME=eth0", "CNI_NETNS=/var/run/netns/x")
			if tc.add != "" {
				if e == nil || e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, tc.add) {
					t.Errorf("ADD = %+v, want code 7 naming %s", e, tc.add)
				}
				return
			}
			if e != nil {
				t.Fatalf("ADD = %+v, want success: the entry is valid", e)
			}
			if after := readNote(t, n); after != note {
				t.Errorf("the note after ADD = %q, want STATUS's %q kept", after, note)
			}
			// The operator names the pool with the node's pod CIDR.
			n.Netready()["status"] = map[string]any{"poolAction": "notready",
				"ipam": map[string]any{"type": "host-local", "ranges": []any{[]any{map[string]any{"subnet": n.Subnet}}}, "dataDir": t.TempDir()}}
			n.Write()
			if e, _ := n.Status(t); e != nil {
				t.Fatalf("STATUS with a pool it counts, with room: %+v", e)
			}
			if after := readNote(t, n); after != "" {
				t.Errorf("the note once the pool can be counted = %q, want none", after)
			}
		})
	}
}

// TestContainerdStaysReadyForAPoolItCannotCount: under a real containerd,
// which runs STATUS on each CRI Status call, "auto" with poolAction
// "notready" on a chain whose host-local uses usePodCidr leaves
// NetworkReady true, and the note for the sidecar.
func TestContainerdStaysReadyForAPoolItCannotCount(t *testing.T) {
	n := cnitest.NewNet(t, "containerd.conflist", func(n *cnitest.TestNet, list map[string]any) {
		ipam := cnitest.Plugins(list)[0]["ipam"].(map[string]any)
		ipam["ranges"] = []any{[]any{map[string]any{"subnet": "usePodCidr"}}}
		n.Netready()["checks"] = []any{map[string]any{"kind": "address"}}
		n.Netready()["status"] = map[string]any{"ipam": "auto", "confDir": n.ConfDir, "poolAction": "notready"}
	})
	bin := cnitest.PluginDir(t, "bridge", "host-local", "loopback", "portmap")
	harness.CopyFile(t, filepath.Join(harness.BinDir, "netready"), filepath.Join(bin, "netready"), 0o755)
	c := runtimes.StartCRIWith(t, n.ConfDir, nil, bin)
	harness.Eventually(t, "NetworkReady=true and STATUS's note of a pool it cannot count", func() (bool, string) {
		ready, msg := c.NetworkReady() // a CRI Status call: containerd runs STATUS
		note := readNote(t, n)
		return ready && strings.Contains(note, `uses host-local with subnet "usePodCidr"`), fmt.Sprintf("NetworkReady=%v %q; note %q", ready, msg, note)
	})
	for start := time.Now(); time.Since(start) < 6*time.Second; time.Sleep(500 * time.Millisecond) {
		if ok, msg := c.NetworkReady(); !ok {
			t.Fatalf("NetworkReady=false after %s: %s", time.Since(start).Round(time.Millisecond), msg)
		}
	}
}

// TestCalicoIPAMSourceTakesCalicosKeys: an explicit calico-ipam source
// takes the keys of Calico's own ipam object with Calico's types, so that
// a dual-stack node's IPv6 family is counted. The real installer's
// --validate and the real plugin's ADD and STATUS accept them; a boolean
// where Calico takes a string is refused by both, naming the key.
func TestCalicoIPAMSourceTakesCalicosKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		ipam map[string]any
		bad  string // the key named when refused; "" when accepted
	}{
		{"IPv6 assigned", map[string]any{"type": "calico-ipam", "assign_ipv6": "true"}, ""},
		{"all four keys", map[string]any{"type": "calico-ipam", "assign_ipv4": "false", "assign_ipv6": "true",
			"ipv4_pools": []any{"default-ipv4-ippool"}, "ipv6_pools": []any{"fd00:10:200::/48"}}, ""},
		{"a boolean for assign_ipv6", map[string]any{"type": "calico-ipam", "assign_ipv6": true}, `"assign_ipv6" must be a string`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := cnitest.NewNet(t, "bridge.conflist", func(n *cnitest.TestNet, _ map[string]any) {
				n.Netready()["checks"] = []any{}
				n.Netready()["status"] = map[string]any{"ipam": tc.ipam, "poolAction": "notready"}
			})
			entry, _ := json.Marshal(n.Netready())
			file := filepath.Join(t.TempDir(), "entry.json")
			if err := os.WriteFile(file, entry, 0o644); err != nil {
				t.Fatal(err)
			}
			code, out := cnitest.Installer(t, "--validate", file)
			prev := cnitest.PrevResult100(n.Prefix+"6/24", n.Prefix+"1", "/var/run/netns/x")
			_, e := cnitest.Invoke(t, "ADD", n.PluginConf(prev), "CNI_CONTAINERID=calico-keys", "CNI_IFNAME=eth0", "CNI_NETNS=/var/run/netns/x")
			if tc.bad == "" {
				if code != 0 || !strings.Contains(out, ": ok") {
					t.Errorf("netready-install --validate = exit %d\n%s\nwant 0", code, out)
				}
				if e != nil {
					t.Errorf("ADD = %+v, want success", e)
				}
			} else {
				if code != 1 || !strings.Contains(out, tc.bad) {
					t.Errorf("netready-install --validate = exit %d\n%s\nwant 1 naming %s", code, out, tc.bad)
				}
				if e == nil || e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, tc.bad) {
					t.Errorf("ADD = %+v, want code 7 naming %s", e, tc.bad)
				}
			}
			// No sidecar verdict: can't tell, never a failure.
			if e, _ := n.Status(t); e != nil {
				t.Errorf("STATUS = %+v, want success", e)
			}
		})
	}
}
