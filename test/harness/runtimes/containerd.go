//go:build integration

// Package runtimes runs private container runtimes, containerd and CRI-O,
// with their own state, sockets and CNI folders, driven through crictl.
package runtimes

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/netready/netready/test/harness"
)

// CRI is a private containerd with its CRI plugin, driven through crictl.
type CRI struct {
	T    testing.TB
	dir  string
	bins string
	sock string
	cmd  *exec.Cmd
	// hadRun: /run/containerd existed before; shims put their sockets
	// there whatever the state dir.
	hadRun bool
	// cgroupParent, when set, holds every pod's processes.
	cgroupParent string
}

// containerdConfig points every path containerd would use at dir, and CNI
// at the test's folders; the settings that are not defaults are the ones
// this machine needs (TESTBED.md).
const containerdConfig = `version = 3
root = '{{dir}}/root'
state = '{{dir}}/state'
imports = []

[grpc]
  address = '{{dir}}/containerd.sock'
[ttrpc]
  address = '{{dir}}/containerd.sock.ttrpc'
[debug]
  address = ''

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = '{{dir}}/opt'
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'native'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = 'netready.test/pause:1'
  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    cdi_spec_dirs = []
    enable_cdi = false
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        Root = '{{dir}}/runc'
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [{{bindirs}}]
      conf_dir = '{{confdir}}'
      max_conf_num = 1
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
`

// StartCRIWith starts a private containerd whose CNI config folder is
// confDir and CNI bin folders binDirs, with edit (when not nil) applied to
// its config, and imports the pause image. Cleanup removes every pod, stops
// containerd and unmounts what it left.
func StartCRIWith(t testing.TB, confDir string, edit func(string) string, binDirs ...string) *CRI {
	t.Helper()
	bins := os.Getenv("NETREADY_CONTAINERD_BIN")
	if bins == "" {
		t.Fatal("NETREADY_CONTAINERD_BIN must name the containerd, ctr, shim and crictl build; run `make test`")
	}
	dir, err := os.MkdirTemp("", "nr-cri-")
	if err != nil {
		t.Fatal(err)
	}
	c := &CRI{T: t, dir: dir, bins: bins, sock: filepath.Join(dir, "containerd.sock")}
	if _, err := os.Stat("/run/containerd"); err == nil {
		c.hadRun = true
	}
	var quoted []string
	for _, d := range binDirs {
		quoted = append(quoted, "'"+d+"'")
	}
	cfg := strings.NewReplacer("{{dir}}", dir, "{{bindirs}}", strings.Join(quoted, ", "), "{{confdir}}", confDir).Replace(containerdConfig)
	if edit != nil {
		cfg = edit(cfg)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, _ := os.Create(filepath.Join(dir, "containerd.log"))
	c.cmd = exec.Command(filepath.Join(bins, "containerd"), "--config", filepath.Join(dir, "config.toml"))
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	// The shim is found on PATH.
	c.cmd.Env = append(os.Environ(), "PATH="+bins+":"+os.Getenv("PATH"))
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.stop)
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		if _, err := c.Crictl("version"); err == nil {
			break
		}
		if time.Since(start) > 30*time.Second {
			data, _ := os.ReadFile(filepath.Join(dir, "containerd.log"))
			t.Fatalf("containerd did not start:\n%s", harness.Tail(string(data), 40))
		}
	}
	if err := c.ImportImage(filepath.Join(bins, "pause.tar")); err != nil {
		t.Fatalf("import pause image: %v", err)
	}
	return c
}

// Socket is the CRI socket's path, for a kubelet's config.
func (c *CRI) Socket() string { return c.sock }

// ImportImage loads an OCI archive into containerd's k8s.io namespace.
func (c *CRI) ImportImage(archive string) error {
	out, err := exec.Command(filepath.Join(c.bins, "ctr"), "--address", c.sock, "-n", "k8s.io", "images", "import", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %w\n%s", archive, err, out)
	}
	return nil
}

// Crictl runs crictl against this containerd, bounded to 90 s.
func (c *CRI) Crictl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	full := append([]string{"--runtime-endpoint", "unix://" + c.sock, "--image-endpoint", "unix://" + c.sock, "--timeout", "60s"}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(c.bins, "crictl"), full...)
	cmd.Env = append(os.Environ(), "CRI_CONFIG_FILE=/dev/null")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("crictl %s: %v: %s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out), nil
}

// stop removes every pod, stops containerd, then unmounts whatever is
// still mounted under its folders and removes them.
func (c *CRI) stop() {
	if out, err := c.Crictl("rmp", "-fa"); err != nil {
		c.T.Errorf("crictl rmp -fa: %v %s", err, out)
	}
	c.cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		c.cmd.Process.Kill()
		<-done
	}
	// Shims outlive containerd; they exit once their pods are gone.
	exec.Command("pkill", "-f", "containerd-shim-runc-v2 .*"+c.dir).Run()
	left := harness.MountsUnder(c.dir)
	for _, m := range left {
		exec.Command("umount", "-l", m).Run()
	}
	if len(left) > 0 {
		c.T.Errorf("containerd left mounts behind (now unmounted): %v", left)
	}
	if c.T.Failed() {
		data, _ := os.ReadFile(filepath.Join(c.dir, "containerd.log"))
		c.T.Logf("containerd log:\n%s", harness.Tail(string(data), 60))
	}
	if err := os.RemoveAll(c.dir); err != nil {
		c.T.Errorf("remove %s: %v", c.dir, err)
	}
	if !c.hadRun {
		os.RemoveAll("/run/containerd")
	}
}

// RunPod creates a pod sandbox and returns its ID.
func (c *CRI) RunPod(name string) (string, error) {
	spec := map[string]any{
		"metadata":      map[string]any{"name": name, "namespace": "default", "uid": "uid-" + name, "attempt": 0},
		"log_directory": filepath.Join(c.dir, "logs", name),
		"linux":         map[string]any{},
	}
	if c.cgroupParent != "" {
		spec["linux"] = map[string]any{"cgroup_parent": c.cgroupParent,
			"security_context": map[string]any{"namespace_options": map[string]any{"network": 0, "pid": 1, "ipc": 0}}}
	}
	data, _ := json.Marshal(spec)
	path := filepath.Join(c.dir, name+".json")
	os.WriteFile(path, data, 0o644)
	out, err := c.Crictl("runp", path)
	return strings.TrimSpace(out), err
}

// PodIP is a pod sandbox's IP as crictl inspectp reports it.
func (c *CRI) PodIP(id string) string {
	out, err := c.Crictl("inspectp", "-o", "json", id)
	if err != nil {
		c.T.Fatal(err)
	}
	var v struct {
		Status struct {
			Network struct {
				IP string `json:"ip"`
			} `json:"network"`
		} `json:"status"`
	}
	json.Unmarshal([]byte(out), &v)
	return v.Status.Network.IP
}

// NetworkReady returns crictl info's NetworkReady condition.
func (c *CRI) NetworkReady() (bool, string) {
	out, err := c.Crictl("info")
	if err != nil {
		c.T.Fatal(err)
	}
	var v struct {
		Status struct {
			Conditions []struct {
				Type    string `json:"type"`
				Status  bool   `json:"status"`
				Message string `json:"message"`
			} `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		c.T.Fatalf("crictl info: %v\n%s", err, out)
	}
	for _, cond := range v.Status.Conditions {
		if cond.Type == "NetworkReady" {
			return cond.Status, cond.Message
		}
	}
	c.T.Fatalf("crictl info has no NetworkReady:\n%s", out)
	return false, ""
}
