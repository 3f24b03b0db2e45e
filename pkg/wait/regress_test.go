package wait

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/config"
)

// nft runs an nft script in the host netns as one transaction. The tests'
// tables hold sets and chains without hooks: no packet passes them.
func nft(t *testing.T, script string) {
	t.Helper()
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft %q: %v: %s", script, err, out)
	}
}

// TestMetCheckThatRegressesIsNotReady, on the real kernel: an nftables set
// check met early (its element added) whose table an agent then deletes
// and re-creates empty, while a slower file check still waits, does not
// end in ready once the file appears; nor does a single set check whose
// element is added and its table re-created in the same transaction.
func TestMetCheckThatRegressesIsNotReady(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root for nftables: run `make test` as root")
	}
	table := fmt.Sprintf("nrwait%d", os.Getpid())
	create := fmt.Sprintf("add table inet %s\nadd set inet %s pods { type ipv4_addr; }\n", table, table)
	nft(t, create)
	t.Cleanup(func() { exec.Command("nft", "delete", "table", "inet", table).Run() })
	dir := t.TempDir()
	ip := net.ParseIP("10.200.9.5")
	att := &attachment.Attachment{Network: "n", ContainerID: "c", IfName: "eth0",
		IPs: []attachment.IP{{Address: net.IPNet{IP: ip, Mask: net.CIDRMask(24, 32)}}}}
	set := config.CheckConf{Kind: config.KindNFTables, Family: "inet", Table: table, Set: "pods"}
	file := config.CheckConf{Kind: config.KindFile, Path: filepath.Join(dir, "programmed")}

	run := func(confs []config.CheckConf, timeout time.Duration, during func()) Outcome {
		t.Helper()
		env := checks.NewEnv("")
		defer env.Close()
		cs, err := checks.Build(confs, att, env)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		done := make(chan Outcome, 1)
		go func() {
			out, err := Until(ctx, cs, Options{})
			if err != nil {
				t.Error(err)
			}
			done <- out
		}()
		during()
		return <-done
	}

	out := run([]config.CheckConf{set, file}, 3*time.Second, func() {
		time.Sleep(200 * time.Millisecond) // both waiting
		nft(t, fmt.Sprintf("add element inet %s pods { %s }", table, ip))
		time.Sleep(200 * time.Millisecond) // the set check met
		nft(t, fmt.Sprintf("delete table inet %s\n%s", table, create))
		os.WriteFile(file.Path, nil, 0o644)
	})
	if out.Ready() {
		t.Errorf("a set check whose table was re-created empty before the file appeared ended ready: %+v", out.Results)
	} else if !strings.Contains(out.Unmet(), "IP not in the set yet") {
		t.Errorf("unmet = %q, want the set check, not in the set", out.Unmet())
	}

	out = run([]config.CheckConf{set}, 2*time.Second, func() {
		time.Sleep(200 * time.Millisecond)
		nft(t, fmt.Sprintf("add element inet %s pods { %s }\ndelete table inet %s\n%s", table, ip, table, create))
	})
	if out.Ready() {
		t.Errorf("element added and its table re-created in one transaction ended ready: %+v", out.Results)
	}

	// The control: a set check met and kept is ready.
	out = run([]config.CheckConf{set, file}, 3*time.Second, func() {
		nft(t, fmt.Sprintf("add element inet %s pods { %s }", table, ip))
	})
	if !out.Ready() {
		t.Errorf("set and file both met: not ready: %s", out.Unmet())
	}
}

// regressing is met on its first probe and unmet on every one after.
type regressing struct{ fakeCheck }

func (r *regressing) Probe(context.Context) (bool, string, error) {
	return r.probes.Add(1) == 1, "gone again", nil
}

// TestConfirmProbesEveryMetCheck: a check met before a slower one, which
// no longer holds when the slower one is met, is not reported ready; the
// reason is its latest probe's.
func TestConfirmProbesEveryMetCheck(t *testing.T) {
	early := &regressing{fakeCheck{target: "early"}}
	late := &fakeCheck{target: "late", readyAt: 3}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	out, err := Until(ctx, []checks.Check{early, late}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if out.Ready() || out.Unmet() != "fake early (gone again)" {
		t.Errorf("Until = ready %v, unmet %q; want not ready, \"fake early (gone again)\"", out.Ready(), out.Unmet())
	}
}
