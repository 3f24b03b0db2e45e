//go:build integration

package install

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/agents"
	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/kube"
	"github.com/netready/netready/test/harness/runtimes"
)

// pluginQuickStart is one row of the README's per-plugin Quick start: the
// component its kustomization adds, the prerequisite it states first, and
// the plugin's stock config (test/fixtures/stock) the test runs it on.
type pluginQuickStart struct {
	component    string
	prerequisite string // as the README states it
	fixture      string // test/fixtures/stock/<component>/<fixture>
	installed    string // the file netready's entry ends up in
	standIns     []string
	network      string
}

var pluginQuickStarts = []pluginQuickStart{
	{"calico", `'{"spec":{"endpointStatusPathPrefix":"/var/run/calico"}}'`, "10-calico.conflist", "10-calico.conflist", []string{"calico"}, "k8s-pod-network"},
	{"cilium", "`cni.exclusive=false`", "05-cilium.conflist", "05-cilium.conflist", []string{"cilium-cni"}, "cilium"},
	{"ovn-kubernetes", "single-plugin `.conf`", "10-ovn-kubernetes.conf", "10-ovn-kubernetes.conflist", []string{"ovn-k8s-cni-overlay"}, "ovn-kubernetes"},
}

// TestEachPluginsQuickStartRunsOnContainerd runs each plugin's Quick start on containerd with
// the plugin's stock config: the entry is what `kubectl kustomize` makes
// of the README's kustomization for that plugin (deploy/ and the plugin's
// component, with the prerequisite met), installed by the real
// netready-install as the DaemonSet runs it, plus a fragment that points
// the preset at the test's folders, as an operator's overlay does. A
// stand-in plays the vendor's main plugin (test/cmd/standin); the agent is
// real where it can run here (ovn-controller), else the stand-ins the
// preset tests use (Felix's endpoint-status file, Cilium's REST API).
// Each pod's ADD must hold until the agent has programmed it.
func TestEachPluginsQuickStartRunsOnContainerd(t *testing.T) {
	readme, _ := os.ReadFile("../../../README.md")
	for _, qs := range pluginQuickStarts {
		for _, want := range []string{"components: [deploy/components/" + qs.component + "]", qs.prerequisite} {
			if !strings.Contains(string(readme), want) {
				t.Errorf("README.md's Quick start for %s lacks %q", qs.component, want)
			}
		}
	}
	for _, qs := range pluginQuickStarts {
		t.Run(qs.component, func(t *testing.T) {
			dir := t.TempDir()
			conf, bin, state, frags := filepath.Join(dir, "net.d"), filepath.Join(dir, "bin"), filepath.Join(dir, "state"), filepath.Join(dir, "entry")
			for _, d := range []string{conf, bin, state, frags} {
				os.MkdirAll(d, 0o755)
			}
			stock, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "stock", qs.component, qs.fixture))
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(conf, qs.fixture), stock, 0o644)
			for _, p := range []string{"portmap", "bandwidth", "loopback"} {
				harness.CopyFile(t, filepath.Join(harness.CNIBinDir, p), filepath.Join(bin, p), 0o755)
			}

			check, hook, programmedAt := qs.agent(t, dir)
			settings := fmt.Sprintf(`{"subnet": "10.200.94.0/24", "hook": %q}`, hook)
			for _, s := range qs.standIns {
				harness.CopyFile(t, filepath.Join(harness.BinDir, "netready-standin"), filepath.Join(bin, s), 0o755)
				os.WriteFile(filepath.Join(bin, s+".standin.json"), []byte(settings), 0o644)
			}
			for name, data := range entryFragments(t, qs.component) {
				os.WriteFile(filepath.Join(frags, name), []byte(data), 0o644)
			}
			checks := []any{map[string]any{"kind": "address"}, map[string]any{"kind": "route"}, check}
			if qs.component == "ovn-kubernetes" {
				// The pod's host veth is in ovs-vswitchd's netns here, so
				// the host has no route to the pod (ovn-kubernetes routes
				// pods through its management port, which this test has
				// no use for).
				checks = []any{checks[0], check}
			}
			site := map[string]any{"stateDir": state, "logFile": filepath.Join(dir, "netready.log"), "timeout": "20s", "onTimeout": "fail", "checks": checks}
			siteData, _ := json.Marshal(site)
			os.WriteFile(filepath.Join(frags, "90-site.json"), siteData, 0o644)

			if code, out := cnitest.Installer(t, "--conf-dir", conf, "--bin-dir", bin, "--plugin-binary", filepath.Join(harness.BinDir, "netready"), "--config", frags); code != 0 {
				t.Fatalf("netready-install: exit %d\n%s", code, out)
			}
			installed, err := os.ReadFile(filepath.Join(conf, qs.installed))
			if err != nil {
				t.Fatal(err)
			}
			if last, _ := lastPluginType(installed); last != "netready" {
				t.Fatalf("%s after install does not end with netready:\n%s", qs.installed, installed)
			}
			if !strings.Contains(string(installed), `"preset":"`+qs.component+`"`) && !strings.Contains(string(installed), `"preset": "`+qs.component+`"`) {
				t.Errorf("the installed entry lacks the %s component's preset:\n%s", qs.component, installed)
			}

			c := runtimes.StartCRIWith(t, conf, nil, bin)
			start := time.Now()
			id, err := c.RunPod("qs-" + qs.component)
			if err != nil {
				data, _ := os.ReadFile(filepath.Join(dir, "netready.log"))
				t.Fatalf("crictl runp: %v\nnetready.log:\n%s", err, harness.Tail(string(data), 20))
			}
			returned := time.Now()
			m, err := marker.ReadFile(filepath.Join(state, qs.network, id+"_eth0.json"))
			if err != nil {
				t.Fatal(err)
			}
			if m.State != marker.StateReady {
				t.Errorf("marker %s, want ready: %+v", m.State, m.Checks)
			}
			var names []string
			for _, ch := range m.Checks {
				names = append(names, ch.Kind)
			}
			programmed := programmedAt(id)
			if programmed.IsZero() || returned.Before(programmed) {
				t.Errorf("the sandbox was up at %s, before the agent programmed the pod (%s): ADD did not hold", returned.Format(time.StampMicro), programmed.Format(time.StampMicro))
			}
			t.Logf("%s Quick start on its stock %s: sandbox ready %s after runp; ADD waited %d ms for %v; the agent programmed the pod %s after runp",
				qs.component, qs.fixture, returned.Sub(start).Round(time.Millisecond), m.WaitedMs, names, programmed.Sub(start).Round(time.Millisecond))
		})
	}
}

// agent starts what plays the plugin's node agent, and returns the
// preset's check pointed at it, the stand-in's hook (run after the main
// plugin's ADD, as the agent works then) and when the agent finished
// programming a sandbox, as the agent itself records it.
func (qs pluginQuickStart) agent(t *testing.T, dir string) (check map[string]any, hook string, programmedAt func(sandbox string) time.Time) {
	hook = filepath.Join(dir, "agent-hook.sh")
	switch qs.component {
	case "calico":
		// The prerequisite met: Felix writes endpoint status here.
		felix := filepath.Join(dir, "calico", "endpoint-status")
		os.MkdirAll(felix, 0o755)
		os.WriteFile(hook, []byte(fmt.Sprintf("#!/bin/sh\nsleep 0.5\nf=\"%s/k8s ${K8S_POD_NAMESPACE}%%2F${K8S_POD_NAME} ${CNI_IFNAME}\"\necho '{}' > \"$f.tmp\" && mv \"$f.tmp\" \"$f\"\n", felix)), 0o755)
		return map[string]any{"kind": "file", "preset": "calico", "path": felix}, hook, func(string) time.Time {
			st, err := os.Stat(filepath.Join(felix, "k8s default%2Fqs-calico eth0"))
			if err != nil {
				return time.Time{}
			}
			return st.ModTime()
		}
	case "cilium":
		sock := filepath.Join(dir, "cilium.sock")
		agent := agents.StartCiliumAgent(t, sock, 150*time.Millisecond, -1)
		os.WriteFile(hook, []byte("#!/bin/sh\n"), 0o755)
		return map[string]any{"kind": "http", "preset": "cilium", "url": "unix://" + sock}, hook, func(sandbox string) time.Time {
			return agent.LastStageAt("cni-attachment-id:" + sandbox + ":eth0")
		}
	case "ovn-kubernetes":
		// As ovnkube-node does for the pod: its logical switch port, and
		// the pod's host veth on br-int named by iface-id; ovn-controller
		// then sets ovn-installed.
		ovn := agents.StartRealOVN(t)
		script := fmt.Sprintf(`#!/bin/sh
set -e
port="${K8S_POD_NAMESPACE}_${K8S_POD_NAME}"
ovn-nbctl --db=unix:%[1]s --timeout=10 --may-exist lsp-add nr-node "$port" -- lsp-set-addresses "$port" "$POD_MAC $POD_IP"
ip link set "$HOST_VETH" netns %[2]s
ip -n %[2]s link set "$HOST_VETH" up
ovs-vsctl --db=unix:%[3]s --timeout=10 --no-wait add-port br-int "$HOST_VETH" -- set Interface "$HOST_VETH" \
  external_ids:iface-id="$port" external_ids:attached_mac="$POD_MAC" external_ids:sandbox="$CNI_CONTAINERID"
`, ovn.NB, ovn.VswitchdNS, ovn.Conf)
		os.WriteFile(hook, []byte(script), 0o755)
		return map[string]any{"kind": "ovsdb", "preset": "ovn-kubernetes", "socket": ovn.Conf}, hook, func(sandbox string) time.Time {
			ids := ovn.Output("ovs-vsctl", "--db=unix:"+ovn.Conf, "--timeout=10", "--columns=external_ids", "find", "Interface", "external_ids:sandbox="+sandbox)
			ms, err := strconv.ParseInt(agents.OVSMapValue(ids, "ovn-installed-ts"), 10, 64)
			if err != nil {
				return time.Time{}
			}
			return time.UnixMilli(ms)
		}
	}
	t.Fatalf("no agent for %s", qs.component)
	return nil, "", nil
}

// entryFragments is netready-entry's data as `kubectl kustomize` builds it
// for deploy/ with component: the files the DaemonSet mounts for the
// installer's --config.
func entryFragments(t *testing.T, component string) map[string]string {
	t.Helper()
	for _, doc := range kube.KustomizeWith(t, component)["ConfigMap"] {
		var cm corev1.ConfigMap
		if yaml.Unmarshal([]byte(doc), &cm) == nil && strings.HasPrefix(cm.Name, "netready-entry") {
			return cm.Data
		}
	}
	t.Fatalf("kubectl kustomize with %s built no netready-entry", component)
	return nil
}
