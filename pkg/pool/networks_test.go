package pool

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNetworks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ipam := `{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/29"}]],"dataDir":"/data"}`
	write("10-a.conflist", `{"cniVersion":"1.1.0","name":"a","plugins":[{"type":"bridge","ipam":`+ipam+`},{"type":"netready","status":{"ipam":"auto","minFree":2}}]}`)
	write("11-a.conflist", `{"cniVersion":"1.1.0","name":"a","plugins":[{"type":"bridge","ipam":`+ipam+`},{"type":"netready","status":{"ipam":"auto","minFree":9}}]}`)
	write("20-b.conflist", `{"cniVersion":"1.1.0","name":"b","plugins":[{"type":"bridge","ipam":`+ipam+`},{"type":"netready","status":{"ipam":"auto","poolActon":"taint"}}]}`)
	write("30-c.conflist", `{"cniVersion":"1.1.0","name":"c","plugins":[{"type":"bridge","ipam":`+ipam+`},{"type":"netready"}]}`)
	write("40-d.conflist", `{"cniVersion":"1.1.0","name":"d","plugins":[{"type":"bridge","ipam":`+ipam+`}]}`)
	write("50-e.conflist", `{"cniVersion":"1.1.0","name":"e","plugins":[{"type":"bridge","ipam":{"type":"dhcp"}},{"type":"netready","status":{"ipam":"auto"}}]}`)
	write("60-f.conflist", `{"cniVersion":"1.1.0","name":"f","plugins":[{"type":"ptp"},{"type":"netready","status":{"poolAction":"notready","ipam":`+ipam+`}}]}`)
	write("70-g.conflist", `{not json`)
	// --mode plugin-dir: the entry is in the network's plugin folder,
	// which libcni appends to a .conflist unless loadOnlyInlinedPlugins.
	write("80-h.conflist", `{"cniVersion":"1.1.0","name":"h","plugins":[{"type":"bridge","ipam":`+ipam+`}]}`)
	write("81-i.conflist", `{"cniVersion":"1.1.0","name":"i","loadOnlyInlinedPlugins":true,"plugins":[{"type":"bridge","ipam":`+ipam+`}]}`)
	write("82-j.conflist", `{"cniVersion":"1.1.0","name":"j","plugins":[{"type":"bridge","ipam":`+ipam+`}]}`)
	for _, n := range []string{"h", "i", "j"} {
		os.Mkdir(filepath.Join(dir, n), 0o755)
	}
	write("h/00-other.conf", `{"type":"tuning"}`)
	write("h/netready.conf", `{"type":"netready","status":{"ipam":"auto","minFree":3}}`)
	write("i/netready.conf", `{"type":"netready","status":{"ipam":"auto"}}`)
	write("j/netready.conf", `{"type":"netready","status":{"ipam":"auto","minFre":3}}`)

	nets, problems, err := Networks(dir)
	if err != nil {
		t.Fatal(err)
	}
	type view struct {
		Network, Dir, Action, File string
		MinFree                    int
	}
	var got []view
	for _, n := range nets {
		got = append(got, view{n.Network, n.Dir, n.Action, filepath.Base(n.File), n.MinFree})
	}
	want := []view{
		{"a", "/data/a", "taint", "10-a.conflist", 2},
		{"f", "/data/f", "notready", "60-f.conflist", 1},
		{"h", "/data/h", "taint", "netready.conf", 3},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("networks (-want +got):\n%s", diff)
	}
	for _, p := range []string{`20-b.conflist: netready: invalid configuration: status: unknown key "poolActon"`, `50-e.conflist: ipam "auto": the first plugin of`, `70-g.conflist: not a JSON object`, "82-j.conflist: " + filepath.Join(dir, "j", "netready.conf") + ` (netready's entry of this network): netready: invalid configuration: status: unknown key "minFre"`} {
		if problems == nil || !strings.Contains(problems.Error(), p) {
			t.Errorf("problems = %v, want %q", problems, p)
		}
	}
	if _, _, err := Networks(filepath.Join(dir, "none")); err == nil {
		t.Error("Networks of a missing folder: no error")
	}
}
