//go:build integration

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// CRI-O's fixed places: scripts/preserve-host.sh knows them, and removes
// what a test that died half-way left there.
const (
	crioRoot   = "/run/nr-crio"
	crioCgroup = "nr-crio"
)

// crio is a private CRI-O 1.35 with its own config, storage, socket and
// CNI folders (never /etc/crio, /etc/containers, /etc/cni or /opt/cni),
// driven through crictl. It can be stopped and started again with its
// state kept, as a restart of the service does.
type crio struct {
	*cri
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

// startCRIO writes CRI-O's config, loads the pause image into its storage
// and starts it. Cleanup removes every pod and everything CRI-O left.
func startCRIO(t *testing.T, confDir, binDir, network string) *crio {
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
	if _, err := os.Stat(crioRoot); err == nil {
		t.Fatalf("%s exists: a previous CRI-O test did not clean up; scripts/preserve-host.sh removes it", crioRoot)
	}
	c := &crio{bin: bin, logPath: filepath.Join(crioRoot, "crio.log"), network: network,
		cri: &cri{t: t, dir: crioRoot, bins: os.Getenv("NETREADY_CONTAINERD_BIN"), sock: filepath.Join(crioRoot, "crio.sock"), cgroupParent: "/" + crioCgroup}}
	for _, d := range []string{"storage", "runroot", "podlogs", "keys", "hooks.d", "cdi", "policies", "auth", "tmp", "copyimg"} {
		if err := os.MkdirAll(filepath.Join(crioRoot, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.remove)
	cfg := strings.NewReplacer("{{root}}", crioRoot, "{{bin}}", bin, "{{confdir}}", confDir, "{{bindir}}", binDir).Replace(crioConfig)
	files := map[string]string{
		"crio.conf":       cfg,
		"runc-wrap":       runcWrap,
		"policy.json":     `{"default":[{"type":"insecureAcceptAnything"}]}`,
		"registries.conf": "",
		"storage.conf":    fmt.Sprintf("[storage]\ndriver = \"vfs\"\nrunroot = %q\ngraphroot = %q\n", crioRoot+"/runroot", crioRoot+"/storage"),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(crioRoot, name), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(crioRoot, "crio.conf.d"), 0o755)
	load := exec.Command(filepath.Join(bin, "copyimg"), "--root", crioRoot+"/storage", "--runroot", crioRoot+"/runroot", "--storage-driver", "vfs",
		"--signature-policy", crioRoot+"/policy.json", "--image-name", "netready.test/pause:1",
		"--import-from", "oci-archive:"+filepath.Join(c.cri.bins, "pause.tar"))
	load.Env = append(c.env(), "COPYIMG_STATE_DIR="+crioRoot+"/copyimg")
	if out, err := load.CombinedOutput(); err != nil {
		t.Fatalf("copyimg (load the pause image): %v\n%s", err, out)
	}
	c.start()
	return c
}

// env keeps containers/image and storage away from /etc/containers.
func (c *crio) env() []string {
	return append(os.Environ(), "CONTAINERS_STORAGE_CONF="+crioRoot+"/storage.conf", "CONTAINERS_REGISTRIES_CONF="+crioRoot+"/registries.conf")
}

// start runs crio and waits until it answers crictl version.
func (c *crio) start() {
	c.t.Helper()
	logf, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "---- netready test: crio start at %s\n", time.Now().Format(time.RFC3339Nano))
	c.cmd = exec.Command(filepath.Join(c.bin, "crio"), "--config", crioRoot+"/crio.conf", "--config-dir", crioRoot+"/crio.conf.d")
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	c.cmd.Env = c.env()
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		if _, err := c.crictl("version"); err == nil {
			return
		}
		if time.Since(start) > time.Minute {
			c.t.Fatalf("crio did not start:\n%s", tail(c.log(), 40))
		}
	}
}

// stop ends crio as a service stop does; pods go on running.
func (c *crio) stop() {
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

func (c *crio) restart() {
	c.t.Helper()
	c.stop()
	c.start()
}

func (c *crio) log() string {
	data, _ := os.ReadFile(c.logPath)
	return string(data)
}

// remove stops every pod and crio, then kills what is left in the pods'
// cgroup, unmounts what is left under crioRoot, and removes it and CRI-O's
// entries in libcni's cache (hard-coded to /var/lib/cni).
func (c *crio) remove() {
	if c.cmd != nil {
		if out, err := c.crictl("rmp", "-fa"); err != nil {
			c.t.Errorf("crictl rmp -fa: %v %s", err, out)
		}
	}
	c.stop()
	if c.t.Failed() {
		c.t.Logf("crio log:\n%s", tail(c.log(), 60))
	}
	killed := killCgroup(crioCgroup)
	for _, p := range procsMentioning(crioRoot) {
		syscall.Kill(p, syscall.SIGKILL)
		killed++
	}
	if killed > 0 {
		c.t.Logf("crio: killed %d processes left in its pods' cgroup or running from %s", killed, crioRoot)
		time.Sleep(200 * time.Millisecond)
	}
	for _, m := range mountsUnder(crioRoot) {
		if err := syscall.Unmount(m, 0); err != nil {
			syscall.Unmount(m, syscall.MNT_DETACH)
		}
	}
	if err := os.RemoveAll(crioRoot); err != nil {
		c.t.Errorf("remove %s: %v", crioRoot, err)
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

// procsMentioning lists processes whose command line mentions s (conmon
// runs with crioRoot's paths).
func procsMentioning(s string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		data, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.Contains(string(data), s) {
			out = append(out, pid)
		}
	}
	return out
}

// waitLog waits until CRI-O's log, after mark bytes, holds want.
func (c *crio) waitLog(mark int, want string, limit time.Duration) string {
	c.t.Helper()
	for start := time.Now(); time.Since(start) < limit; time.Sleep(100 * time.Millisecond) {
		if l := c.log(); len(l) >= mark && strings.Contains(l[mark:], want) {
			return l[mark:]
		}
	}
	c.t.Fatalf("crio log: no %q within %s:\n%s", want, limit, tail(c.log()[mark:], 30))
	return ""
}
