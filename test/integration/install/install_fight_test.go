//go:build integration

package install

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/atomicfile"
	"github.com/netready/netready/pkg/conflist"
	"github.com/netready/netready/pkg/notes"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/kube"
)

// exclusiveAgent stands in for Cilium's agent with cni.exclusive (its
// default): whenever anything changes in the config folder, it writes its
// own 05-cilium.conflist back if the file differs, and renames every
// other CNI config to <name>.cilium_bak, as Cilium's CNI config manager
// does. It counts its rewrites.
func exclusiveAgent(t *testing.T, dir string, own []byte) *atomic.Int32 {
	t.Helper()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var rewrites atomic.Int32
	done := make(chan struct{})
	enforce := func() {
		path := filepath.Join(dir, "05-cilium.conflist")
		if cur, err := os.ReadFile(path); err != nil || !bytes.Equal(cur, own) {
			if atomicfile.Write(path, own, 0o644) == nil {
				rewrites.Add(1)
			}
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if n := e.Name(); n != "05-cilium.conflist" && conflist.IsConfigName(n) {
				os.Rename(filepath.Join(dir, n), filepath.Join(dir, n+".cilium_bak"))
			}
		}
	}
	go func() {
		defer close(done)
		enforce()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				time.Sleep(20 * time.Millisecond) // the agent's reconcile delay
				enforce()
			}
		}
	}()
	t.Cleanup(func() { cancel(); w.Close(); <-done })
	return &rewrites
}

// TestInstallerBacksOffFromAnExclusiveAgent: against an agent that
// rewrites its conflist without netready whenever it changes (Cilium's
// cni.exclusive), the real netready-install --watch does not fight
// forever: after a few reverts it stops putting its entry back, says what
// to do in its log, and leaves a note that the real sidecar, against a
// real API server, raises as a Node Event and netready_install_backed_off
// 1; meanwhile a gated pod that netready never saw, whose sandbox came up
// during the backoff, is kept not ready, whatever --unobserved says.
func TestInstallerBacksOffFromAnExclusiveAgent(t *testing.T) {
	a := kube.StartAPIServer(t)
	conf, bin, state := t.TempDir(), t.TempDir(), t.TempDir()
	own, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "stock", "cilium", "05-cilium.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	rewrites := exclusiveAgent(t, conf, own)
	listen, _ := kube.StartSidecar(t, a, state, kube.SidecarNode, "--unobserved-grace", "1s", "--unobserved", "ready")

	cmd, logs := startInstaller(t, "--conf-dir", conf, "--bin-dir", bin, "--plugin-binary", filepath.Join(harness.BinDir, "netready"),
		"--config", `{"type":"netready","stateDir":"`+state+`"}`, "--watch")
	defer cmd.Process.Kill()
	note := filepath.Join(state, "cilium", notes.InstallBackoffFile)
	harness.Eventually(t, "the installer backs off and leaves its note", func() (bool, string) {
		_, err := os.Stat(note)
		return err == nil, logs.String()
	})
	if !strings.Contains(logs.String(), "stops putting it back") || !strings.Contains(logs.String(), "cni.exclusive=false") {
		t.Errorf("the installer's log does not say it stops and what to do:\n%s", logs.String())
	}
	// The agent's file stays as the agent wrote it: no more fight.
	settled := rewrites.Load()
	time.Sleep(3 * time.Second)
	if n := rewrites.Load(); n != settled {
		t.Errorf("the agent rewrote its file %d more times after the installer backed off", n-settled)
	}
	if got, _ := os.ReadFile(filepath.Join(conf, "05-cilium.conflist")); !bytes.Equal(got, own) {
		t.Errorf("05-cilium.conflist is not the agent's own after the backoff:\n%s", got)
	}
	t.Logf("the agent rewrote its file %d times before the installer backed off", settled)
	// A pod whose sandbox comes up during the backoff may have skipped
	// netready.
	a.NewPod("skipped", kube.SidecarNode)
	kube.SetSandboxStatus(t, a, "skipped", corev1.ConditionTrue, "10.200.9.9")

	c := kube.WaitCondition(t, a, "skipped", 15*time.Second, "an unobserved pod held not ready", func(c *corev1.PodCondition) bool {
		return c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "stops putting it back")
	})
	if c.Reason != "NotObserved" {
		t.Errorf("held condition = %+v, want reason NotObserved", c)
	}
	if got := kube.SumSeries(kube.MetricsText(t, listen), "netready_install_backed_off", `network="cilium"`); got != 1 {
		t.Errorf("netready_install_backed_off = %d, want 1", got)
	}
	var noted bool
	for start := time.Now(); time.Since(start) < 10*time.Second && !noted; time.Sleep(200 * time.Millisecond) {
		list, err := a.Admin.EventsV1().Events("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			noted = noted || (e.Regarding.Kind == "Node" && e.Reason == "NetreadyInstallBackedOff" && strings.Contains(e.Note, "cni.exclusive=false"))
		}
	}
	if !noted {
		t.Error("no Node Event NetreadyInstallBackedOff saying what to do")
	}
}
