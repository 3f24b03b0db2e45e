package pool

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestAllNetworks: the pools an agent answers for come with their
// source and no Spec; Networks (the folders to count) leaves them out.
func TestAllNetworks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("05-cilium.conflist", `{"cniVersion":"1.1.0","name":"cilium","plugins":[{"type":"cilium-cni"},{"type":"netready","status":{"ipam":"auto","minFree":2}}]}`)
	write("10-aws.conflist", `{"cniVersion":"1.1.0","name":"aws-cni","plugins":[{"type":"aws-cni"},{"type":"netready","status":{"ipam":{"type":"aws-vpc-cni","url":"http://127.0.0.1:9"},"poolAction":"notready"}}]}`)
	write("20-hl.conflist", `{"cniVersion":"1.1.0","name":"hl","plugins":[{"type":"bridge","ipam":{"type":"host-local","subnet":"10.1.0.0/29","dataDir":"/data"}},{"type":"netready","status":{"ipam":"auto"}}]}`)
	type view struct {
		Network, Type, Where, Action string
		MinFree                      int
		HasSpec                      bool
	}
	list := func(nets []Network, err error) []view {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var out []view
		for _, n := range nets {
			out = append(out, view{n.Network, n.Source.Type(), n.Source.Where(), n.Action, n.MinFree, n.Spec != nil})
		}
		return out
	}
	all, problems, err := AllNetworks(dir)
	if problems != nil {
		t.Errorf("problems: %v", problems)
	}
	want := []view{
		{"cilium", "cilium", "unix:///var/run/cilium/cilium.sock", "taint", 2, false},
		{"aws-cni", "aws-vpc-cni", "http://127.0.0.1:9 http://127.0.0.1:61678/metrics", "notready", 1, false},
		{"hl", "host-local", "/data/hl", "taint", 1, true},
	}
	if diff := cmp.Diff(want, list(all, err)); diff != "" {
		t.Errorf("AllNetworks (-want +got):\n%s", diff)
	}
	nets, _, err := Networks(dir)
	if diff := cmp.Diff(want[2:], list(nets, err)); diff != "" {
		t.Errorf("Networks (-want +got):\n%s", diff)
	}
}
