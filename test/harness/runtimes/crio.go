//go:build integration

package runtimes

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/netready/netready/test/harness"
)

// CRI-O's fixed places: scripts/preserve-host.sh knows them, and removes
// what a test that died half-way left there.
const (
	CRIORoot   = "/run/nr-crio"
	crioCgroup = "nr-crio"
)

// CRIO is a private CRI-O 1.35 with its own config, storage, socket and
// CNI folders (never /etc/crio, /etc/containers, /etc/cni or /opt/cni),
// driven through crictl. It can be stopped and started again with its
// state kept, as a restart of the service does.
type CRIO struct {
	*CRI
	bin     string // crio, pinns, copyimg
	cmd     *exec.Cmd
	logPath string
	network string
}

// crioConfig is CRI-O's config: every path under crioRoot, CNI at the
// test's folders; the settings that are not defaults are the ones this
// machine needs (TESTBED.md).
const crioConfig = `[crio]
root = "{{root}}/storage"
runroot = "{{root}}/runroot"
storage_driver = "vfs"
storage_option = []
log_dir = "{{root}}/podlogs"
version_file = "{{root}}/version"
version_file_persist = ""
clean_shutdown_file = "{{root}}/clean.shutdown"
internal_wipe = true
internal_repair = false

[crio.api]
listen = "{{root}}/crio.sock"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
conmon_cgroup = "pod"
drop_infra_ctr = false
namespaces_dir = "{{root}}/ns"
pinns_path = "{{bin}}/pinns"
container_exits_dir = "{{root}}/exits"
container_attach_socket_dir = "{{root}}/attach"
decryption_keys_path = "{{root}}/keys"
hooks_dir = ["{{root}}/hooks.d"]
cdi_spec_dirs = ["{{root}}/cdi"]
irqbalance_config_file = ""
irqbalance_config_restore_file = "disable"
enable_criu_support = false
selinux = false
apparmor_profile = "unconfined"
log_level = "info"

[crio.runtime.runtimes.runc]
runtime_path = "{{root}}/runc-wrap"
runtime_type = "oci"
runtime_root = "{{root}}/runc"
monitor_path = "/usr/bin/conmon"
monitor_cgroup = "pod"
disable_hostport_mapping = true

[crio.image]
pause_image = "netready.test/pause:1"
pause_image_auth_file = ""
pause_command = "/pause"
pinned_images = ["netready.test/pause:1"]
signature_policy = "{{root}}/policy.json"
signature_policy_dir = "{{root}}/policies"
global_auth_file = ""
namespaced_auth_dir = "{{root}}/auth"
big_files_temporary_dir = "{{root}}/tmp"

[crio.network]
network_dir = "{{confdir}}"
plugin_dirs = ["{{bindir}}"]

[crio.metrics]
enable_metrics = false

[crio.nri]
enable_nri = false
`

// runcWrap drops the negative oomScoreAdj CRI-O asks for on the pause
// container: without CAP_SYS_RESOURCE (this machine) runc cannot set it.
const runcWrap = `#!/bin/sh
prev=""
for a in "$@"; do
  if [ "$prev" = "--bundle" ] || [ "$prev" = "-b" ]; then
    cfg="$a/config.json"
    if [ -f "$cfg" ] && jq -e '.process.oomScoreAdj // 0 | . < 0' "$cfg" >/dev/null 2>&1; then
      jq -c 'del(.process.oomScoreAdj)' "$cfg" > "$cfg.tmp" && mv "$cfg.tmp" "$cfg"
    fi
  fi
  prev="$a"
done
exec runc "$@"
`

// StartCRIO writes CRI-O's config, loads the pause image into its storage
// and starts it. Cleanup removes every pod and everything CRI-O left.
func StartCRIO(t *testing.T, confDir, binDir, network string) *CRIO {
	t.Helper()
	bin := os.Getenv("NETREADY_CRIO_BIN")
	for _, b := range []string{"crio", "pinns", "copyimg"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("NETREADY_CRIO_BIN: %v; run `make test`, which runs scripts/build-crio.sh", err)
		}
	}
	if _, err := os.Stat("/usr/bin/conmon"); err != nil {
		t.Fatalf("conmon: %v; run `make test`, which runs scripts/deps.sh", err)
	}
	if _, err := os.Stat(CRIORoot); err == nil {
		t.Fatalf("%s exists: a previous CRI-O test did not clean up; scripts/preserve-host.sh removes it", CRIORoot)
	}
	c := &CRIO{bin: bin, logPath: filepath.Join(CRIORoot, "crio.log"), network: network,
		CRI: &CRI{T: t, dir: CRIORoot, bins: os.Getenv("NETREADY_CONTAINERD_BIN"), sock: filepath.Join(CRIORoot, "crio.sock"), cgroupParent: "/" + crioCgroup}}
	for _, d := range []string{"storage", "runroot", "podlogs", "keys", "hooks.d", "cdi", "policies", "auth", "tmp", "copyimg"} {
		if err := os.MkdirAll(filepath.Join(CRIORoot, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.remove)
	cfg := strings.NewReplacer("{{root}}", CRIORoot, "{{bin}}", bin, "{{confdir}}", confDir, "{{bindir}}", binDir).Replace(crioConfig)
	files := map[string]string{
		"crio.conf":       cfg,
		"runc-wrap":       runcWrap,
		"policy.json":     `{"default":[{"type":"insecureAcceptAnything"}]}`,
		"registries.conf": "",
		"storage.conf":    fmt.Sprintf("[storage]\ndriver = \"vfs\"\nrunroot = %q\ngraphroot = %q\n", CRIORoot+"/runroot", CRIORoot+"/storage"),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(CRIORoot, name), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(CRIORoot, "crio.conf.d"), 0o755)
	load := exec.Command(filepath.Join(bin, "copyimg"), "--root", CRIORoot+"/storage", "--runroot", CRIORoot+"/runroot", "--storage-driver", "vfs",
		"--signature-policy", CRIORoot+"/policy.json", "--image-name", "netready.test/pause:1",
		"--import-from", "oci-archive:"+filepath.Join(c.CRI.bins, "pause.tar"))
	load.Env = append(c.env(), "COPYIMG_STATE_DIR="+CRIORoot+"/copyimg")
	if out, err := load.CombinedOutput(); err != nil {
		t.Fatalf("copyimg (load the pause image): %v\n%s", err, out)
	}
	c.Start()
	return c
}

// env keeps containers/image and storage away from /etc/containers.
func (c *CRIO) env() []string {
	return append(os.Environ(), "CONTAINERS_STORAGE_CONF="+CRIORoot+"/storage.conf", "CONTAINERS_REGISTRIES_CONF="+CRIORoot+"/registries.conf")
}

// Start runs crio and waits until it answers crictl version.
func (c *CRIO) Start() {
	c.T.Helper()
	logf, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.T.Fatal(err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "---- netready test: crio start at %s\n", time.Now().Format(time.RFC3339Nano))
	c.cmd = exec.Command(filepath.Join(c.bin, "crio"), "--config", CRIORoot+"/crio.conf", "--config-dir", CRIORoot+"/crio.conf.d")
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	c.cmd.Env = c.env()
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.cmd.Start(); err != nil {
		c.T.Fatal(err)
	}
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		if _, err := c.Crictl("version"); err == nil {
			return
		}
		if time.Since(start) > time.Minute {
			c.T.Fatalf("crio did not start:\n%s", harness.Tail(c.Log(), 40))
		}
	}
}

// Stop ends crio as a service stop does; pods go on running.
func (c *CRIO) Stop() {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		c.cmd.Process.Kill()
		<-done
	}
	c.cmd = nil
}

// Restart stops and starts crio, keeping its state.
func (c *CRIO) Restart() {
	c.T.Helper()
	c.Stop()
	c.Start()
}

// Log is CRI-O's log so far.
func (c *CRIO) Log() string {
	data, _ := os.ReadFile(c.logPath)
	return string(data)
}

// remove stops every pod and crio, then kills what is left in the pods'
// cgroup, unmounts what is left under crioRoot, and removes it and CRI-O's
// entries in libcni's cache (hard-coded to /var/lib/cni).
func (c *CRIO) remove() {
	if c.cmd != nil {
		if out, err := c.Crictl("rmp", "-fa"); err != nil {
			c.T.Errorf("crictl rmp -fa: %v %s", err, out)
		}
	}
	c.Stop()
	if c.T.Failed() {
		c.T.Logf("crio log:\n%s", harness.Tail(c.Log(), 60))
	}
	killed := killCgroup(crioCgroup)
	for _, p := range harness.ProcsMentioning(CRIORoot) {
		syscall.Kill(p, syscall.SIGKILL)
		killed++
	}
	if killed > 0 {
		c.T.Logf("crio: killed %d processes left in its pods' cgroup or running from %s", killed, CRIORoot)
		time.Sleep(200 * time.Millisecond)
	}
	for _, m := range harness.MountsUnder(CRIORoot) {
		if err := syscall.Unmount(m, 0); err != nil {
			syscall.Unmount(m, syscall.MNT_DETACH)
		}
	}
	if err := os.RemoveAll(CRIORoot); err != nil {
		c.T.Errorf("remove %s: %v", CRIORoot, err)
	}
	removeCgroup(crioCgroup)
	results, _ := filepath.Glob("/var/lib/cni/results/" + c.network + "-*")
	for _, r := range results {
		os.Remove(r)
	}
}

// killCgroup kills every process in the cgroup (any hierarchy) and returns
// how many it found.
func killCgroup(name string) int {
	n := 0
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + name)
	if d := "/sys/fs/cgroup/" + name; dirExists(d) {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		filepath.Walk(d, func(path string, info os.FileInfo, err error) error {
			if err != nil || info.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					syscall.Kill(pid, syscall.SIGKILL)
					n++
				}
			}
			return nil
		})
	}
	return n
}

// removeCgroup removes the cgroup's folders, deepest first, in every
// hierarchy.
func removeCgroup(name string) {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + name)
	dirs = append(dirs, "/sys/fs/cgroup/"+name)
	for _, d := range dirs {
		var all []string
		filepath.Walk(d, func(path string, info os.FileInfo, err error) error {
			if err == nil && info.IsDir() {
				all = append(all, path)
			}
			return nil
		})
		for i := len(all) - 1; i >= 0; i-- {
			os.Remove(all[i])
		}
	}
}

func dirExists(p string) bool {
	info, err := os.Stat(p)
	return err == nil && info.IsDir()
}

// WaitLog waits until CRI-O's log, after mark bytes, holds want.
func (c *CRIO) WaitLog(mark int, want string, limit time.Duration) string {
	c.T.Helper()
	for start := time.Now(); time.Since(start) < limit; time.Sleep(100 * time.Millisecond) {
		if l := c.Log(); len(l) >= mark && strings.Contains(l[mark:], want) {
			return l[mark:]
		}
	}
	c.T.Fatalf("crio log: no %q within %s:\n%s", want, limit, harness.Tail(c.Log()[mark:], 30))
	return ""
}

// SandboxPID is the pause process of a pod sandbox.
func (c *CRIO) SandboxPID(id string) int {
	c.T.Helper()
	out, err := c.Crictl("inspectp", "-o", "json", id)
	if err != nil {
		c.T.Fatal(err)
	}
	var v struct {
		Info struct {
			PID int `json:"pid"`
		} `json:"info"`
	}
	json.Unmarshal([]byte(out), &v)
	if v.Info.PID == 0 {
		c.T.Fatalf("no pid in crictl inspectp %s", id)
	}
	return v.Info.PID
}
