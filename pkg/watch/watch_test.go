package watch

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/netready/netready/pkg/nftrule"
)

func woken(ch chan Wake) bool {
	select {
	case <-ch:
		return true
	case <-time.After(5 * time.Second):
		return false
	}
}

func drain(ch chan Wake) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// TestDirWakesEveryListener: one inotify stream per folder, fanned out.
func TestDirWakesEveryListener(t *testing.T) {
	before := runtime.NumGoroutine()
	dir := t.TempDir()
	h := NewHub(context.Background())
	a, b := make(chan Wake, 1), make(chan Wake, 1)
	src := Source{Kind: Dir, Path: dir}
	for _, ch := range []chan Wake{a, b} {
		if err := h.SubscribeTo(src, ch); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(h.streams); n != 1 {
		t.Errorf("streams = %d, want one shared stream", n)
	}
	drain(a)
	drain(b)
	os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644)
	if !woken(a) || !woken(b) {
		t.Error("a listener was not woken by a new file")
	}
	h.Close()
	time.Sleep(50 * time.Millisecond)
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("goroutines: %d before, %d after Close", before, after)
	}
	if err := h.SubscribeTo(src, a); err == nil {
		t.Error("SubscribeTo after Close succeeded")
	}
}

// TestDirWakesForItsEntry: a Dir source with a name wakes for that entry
// written in place or renamed into place, and for its removal, never for
// another entry of the folder.
func TestDirWakesForItsEntry(t *testing.T) {
	dir := t.TempDir()
	h := NewHub(context.Background())
	defer h.Close()
	ch := make(chan Wake, 1)
	if err := h.SubscribeTo(Source{Kind: Dir, Path: dir + "/", Name: "pod-a"}, ch); err != nil {
		t.Fatal(err)
	}
	quiet := func(step string) {
		t.Helper()
		select {
		case <-ch:
			t.Errorf("%s woke the listener of pod-a", step)
		case <-time.After(200 * time.Millisecond):
		}
	}
	wakes := func(step string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Errorf("%s did not wake the listener of pod-a", step)
		}
	}
	write := func(name string) {
		t.Helper()
		tmp := filepath.Join(dir, "."+name)
		if err := os.WriteFile(tmp, []byte("ready"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	write("pod-b")
	quiet("another pod's file, renamed into place")
	write("pod-a")
	wakes("its own file, renamed into place")
	drain(ch)
	os.WriteFile(filepath.Join(dir, "pod-a"), []byte("ready, again"), 0o644)
	wakes("its own file, written in place")
	drain(ch)
	os.Remove(filepath.Join(dir, "pod-a"))
	wakes("its own file's removal")
}

func TestMissingDirIsAnError(t *testing.T) {
	h := NewHub(context.Background())
	defer h.Close()
	err := h.SubscribeTo(Source{Kind: Dir, Path: "/nonexistent/netready"}, make(chan Wake, 1))
	if err == nil || !strings.Contains(err.Error(), "folder in /nonexistent/netready") {
		t.Errorf("SubscribeTo a missing folder = %v, want an error naming it", err)
	}
}

// newNetNS makes a network namespace that the test removes.
func newNetNS(t *testing.T) ns.NetNS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root for a network namespace: run `make test` as root")
	}
	netns, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		netns.Close()
		testutils.UnmountNS(netns)
	})
	return netns
}

// nftIn runs an nft script in netns as one transaction.
func nftIn(t *testing.T, netns ns.NetNS, script string) {
	t.Helper()
	cmd := exec.Command("nsenter", "--net="+netns.Path(), "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		if len(script) > 200 {
			script = script[:200] + "…"
		}
		t.Fatalf("nft %q: %v: %s", script, err, out)
	}
}

// TestLinksInNetns: link events inside a pod netns wake the listener; the
// hub ends with its context.
func TestLinksInNetns(t *testing.T) {
	netns := newNetNS(t)
	ctx, cancel := context.WithCancel(context.Background())
	h := NewHub(ctx)
	ch := make(chan Wake, 1)
	if err := h.SubscribeTo(Source{Kind: Links, NetNS: netns.Path()}, ch); err != nil {
		t.Fatal(err)
	}
	drain(ch)
	err := netns.Do(func(ns.NetNS) error {
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "w0"}, PeerName: "w1"})
	})
	if err != nil {
		t.Fatal(err)
	}
	if !woken(ch) {
		t.Error("a new link in the netns did not wake the listener")
	}
	cancel()
	done := make(chan struct{})
	go func() { h.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung after the context ended")
	}
}

// TestNFTSetWakes: an NFTSet stream, on the real kernel in a netns, wakes
// only for changes that may add its key to its set, and Shows only the
// committed key itself. Listeners have room for every wake.
func TestNFTSetWakes(t *testing.T) {
	netns := newNetNS(t)
	nft := func(script string) { nftIn(t, netns, script) }
	nft(`add table inet t
add set inet t pods { type ipv4_addr; }
add set inet t other { type ipv4_addr; }
add set inet t ranges { type ipv4_addr; flags interval; }
add table ip t
add set ip t pods { type ipv4_addr; }`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := NewHub(ctx)
	defer h.Close()
	subscribe := func(set string) chan Wake {
		ch := make(chan Wake, 16)
		src := Source{Kind: NFTSet, NetNS: netns.Path(), Element: NFTElement{
			Family: unix.NFPROTO_INET, Table: "t", Set: set, Key: string(net.ParseIP("10.9.0.5").To4())}}
		if err := h.SubscribeTo(src, ch); err != nil {
			t.Fatal(err)
		}
		return ch
	}
	pods, ranges := subscribe("pods"), subscribe("ranges")

	// Each step's wake is read in turn: a decoy that woke would be read in
	// the place of a later step's wake, whose Shows differs. The first
	// step for a listener also proves that the decoys before it (all the
	// other listener's steps) did not wake it.
	nft("add element inet t pods { 10.9.0.6 }")  // another key
	nft("add element inet t other { 10.9.0.5 }") // another set
	nft("add element ip t pods { 10.9.0.5 }")    // another family
	for _, step := range []struct {
		name, script string
		ch           chan Wake
		shows        bool
	}{
		{"pods: the key's own element", "add element inet t pods { 10.9.0.5 }", pods, true},
		{"pods: its removal", "delete element inet t pods { 10.9.0.5 }", pods, false},
		{"pods: added and removed in one transaction", "add element inet t pods { 10.9.0.5 }\ndelete element inet t pods { 10.9.0.5 }", pods, false},
		// An interval set holds a single key as [key, key+1).
		{"ranges: the key's own interval", "add element inet t ranges { 10.9.0.5 }", ranges, true},
		{"ranges: its removal", "delete element inet t ranges { 10.9.0.5 }", ranges, false},
		{"ranges: a range around the key, which only a probe can judge", "add element inet t ranges { 10.9.0.0/24 }", ranges, false},
	} {
		nft(step.script)
		expectWake(t, step.name, step.ch, step.shows)
	}
	if len(pods) != 0 || len(ranges) != 0 {
		t.Errorf("wakes left over: pods %d, ranges %d", len(pods), len(ranges))
	}
}

// TestNFTRuleWakes: an NFTRule stream, on rules that the real iptables-nft
// and nft write in a netns, wakes only for a transaction that added a rule
// to its chain that matches (and Shows it), or one the match cannot judge.
func TestNFTRuleWakes(t *testing.T) {
	netns := newNetNS(t)
	ipt := func(args ...string) {
		t.Helper()
		cmd := exec.Command("nsenter", append([]string{"--net=" + netns.Path(), "iptables-nft"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("iptables-nft %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ipt("-N", "PODS")
	ipt("-N", "OTHER")
	nftIn(t, netns, "add table inet t\nadd chain inet t pods")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := NewHub(ctx)
	defer h.Close()
	subscribe := func(fam uint8, table, chain string, m nftrule.Match) chan Wake {
		ch := make(chan Wake, 16)
		src := Source{Kind: NFTRule, NetNS: netns.Path(), Rule: NFTRuleMatch{Family: fam, Table: table, Chain: chain, Match: m}}
		if err := h.SubscribeTo(src, ch); err != nil {
			t.Fatal(err)
		}
		return ch
	}
	addr := subscribe(unix.NFPROTO_IPV4, "filter", "PODS", nftrule.IPTables("-s 10.9.0.5/32"))
	text := subscribe(unix.NFPROTO_INET, "t", "pods", nftrule.NFTText("ip saddr 10.9.0.5 accept"))
	// Decoys, before any step: the first step of each listener proves that
	// none of them woke it.
	ipt("-A", "PODS", "-s", "10.9.0.6/32", "-j", "ACCEPT")  // another address
	ipt("-A", "PODS", "-s", "10.9.0.0/24", "-j", "ACCEPT")  // a range holding it, which iptables -S does not print as it
	ipt("-A", "OTHER", "-s", "10.9.0.5/32", "-j", "ACCEPT") // another chain
	ipt("-D", "PODS", "-s", "10.9.0.6/32", "-j", "ACCEPT")  // a deletion
	nftIn(t, netns, "add rule inet t pods ip saddr 10.9.0.6 accept")
	nftIn(t, netns, "add rule inet t pods ip saddr 10.9.0.5 counter accept") // not the text
	for _, step := range []struct {
		name  string
		do    func()
		ch    chan Wake
		shows bool
	}{
		{"iptables: the pod's own rule", func() { ipt("-A", "PODS", "-s", "10.9.0.5/32", "-j", "ACCEPT") }, addr, true},
		{"iptables: added and deleted in one transaction", func() {
			cmd := exec.Command("nsenter", "--net="+netns.Path(), "iptables-nft-restore", "--noflush")
			cmd.Stdin = strings.NewReader("*filter\n-A PODS -s 10.9.0.5/32 -j DROP\n-D PODS -s 10.9.0.5/32 -j DROP\nCOMMIT\n")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("iptables-nft-restore: %v: %s", err, out)
			}
		}, addr, false},
		// The address only as text, which Excludes must not skip.
		{"iptables: a comment holding the form", func() {
			ipt("-A", "PODS", "-m", "comment", "--comment", "-s 10.9.0.5/32", "-j", "ACCEPT")
		}, addr, true},
		{"nft text: the rule the text names", func() { nftIn(t, netns, "add rule inet t pods ip saddr 10.9.0.5 accept") }, text, true},
	} {
		step.do()
		expectWake(t, step.name, step.ch, step.shows)
	}
	if len(addr) != 0 || len(text) != 0 {
		t.Errorf("wakes left over: iptables %d, nft %d", len(addr), len(text))
	}

	// A chain renamed to the watched name brings its rules with no rule
	// message: the listener probes.
	renamed := subscribe(unix.NFPROTO_IPV4, "filter", "LATER", nftrule.IPTables("-s 10.9.0.5/32"))
	ipt("-N", "EARLY")
	ipt("-A", "EARLY", "-s", "10.9.0.5/32", "-j", "ACCEPT")
	ipt("-E", "EARLY", "LATER")
	expectWake(t, "a chain renamed to the watched name", renamed, false)

	// A match that only iptables can judge wakes on any new rule of its
	// chain, and never on another chain's.
	other := subscribe(unix.NFPROTO_IPV4, "filter", "PODS", nftrule.IPTables("-m comment --comment web-0"))
	ipt("-A", "OTHER", "-s", "10.9.0.7/32", "-j", "ACCEPT")
	ipt("-A", "PODS", "-s", "10.9.0.8/32", "-j", "ACCEPT")
	if w, ok := nextWake(other); !ok || w.Shows {
		t.Errorf("a match only iptables can judge: wake %v (%+v), want a wake that does not show", ok, w)
	}
	if len(other) != 0 {
		t.Errorf("a match only iptables can judge woke for another chain's rule")
	}
}

// nextWake returns ch's next wake, waiting up to 5 s.
func nextWake(ch chan Wake) (Wake, bool) {
	select {
	case w := <-ch:
		return w, true
	case <-time.After(5 * time.Second):
		return Wake{}, false
	}
}

// expectWake: one step's wake arrived on ch and shows what it should. A
// decoy that woke the listener before would be read in its place.
func expectWake(t *testing.T, step string, ch chan Wake, shows bool) {
	t.Helper()
	if w, ok := nextWake(ch); !ok {
		t.Errorf("%s: no wake", step)
	} else if w.Shows != shows {
		t.Errorf("%s: wake shows = %v, want %v (a decoy before it woke, or it was misread)", step, w.Shows, shows)
	}
}

// TestSendKeepsLatest: a listener's channel holds one wake, and it is the
// latest one sent. A wake that shows the element must not outlive a later
// one that does not: the element may have been removed since.
func TestSendKeepsLatest(t *testing.T) {
	for _, tc := range []struct {
		sent []Wake
		want Wake
	}{
		{[]Wake{{}, {Shows: true}}, Wake{Shows: true}},
		{[]Wake{{Shows: true}, {}}, Wake{}},
		{[]Wake{{Shows: true}, {Shows: true}}, Wake{Shows: true}},
		{[]Wake{{Shows: true}, {}, {Shows: true}}, Wake{Shows: true}},
	} {
		ch := make(chan Wake, 1)
		for _, w := range tc.sent {
			send(ch, w)
		}
		if got := <-ch; got != tc.want || len(ch) != 0 {
			t.Errorf("after %v: read %+v with %d left, want %+v alone", tc.sent, got, len(ch), tc.want)
		}
	}
}

// TestNFTSetAddThenRemoveBeforeRead: on the kernel, the pod's element is
// added by one transaction and removed by the next before the listener
// reads its channel (it was busy probing). The wake it then reads must not
// show the element, or its wait would end ready with the element absent.
// A second listener, subscribed after it to the same stream, is woken in
// the same pass of the hub after it: once that one has read the removal's
// wake, the first one's channel holds its final word.
func TestNFTSetAddThenRemoveBeforeRead(t *testing.T) {
	netns := newNetNS(t)
	nft := func(script string) { nftIn(t, netns, script) }
	nft("add table inet t\nadd set inet t pods { type ipv4_addr; }")
	h := NewHub(context.Background())
	defer h.Close()
	src := Source{Kind: NFTSet, NetNS: netns.Path(), Element: NFTElement{
		Family: unix.NFPROTO_INET, Table: "t", Set: "pods", Key: string(net.ParseIP("10.9.0.5").To4())}}
	busy, observer := make(chan Wake, 1), make(chan Wake, 16)
	for _, ch := range []chan Wake{busy, observer} {
		if err := h.SubscribeTo(src, ch); err != nil {
			t.Fatal(err)
		}
	}
	nft("add element inet t pods { 10.9.0.5 }")
	nft("delete element inet t pods { 10.9.0.5 }")
	for _, want := range []bool{true, false} {
		select {
		case w := <-observer:
			if w.Shows != want {
				t.Fatalf("observer: wake shows = %v, want %v", w.Shows, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("observer: no wake for the transaction that shows = %v", want)
		}
	}
	if w := <-busy; w.Shows {
		t.Error("after add then remove, the busy listener reads a wake that shows the element: its wait would end ready with the element absent")
	}
	nft("add element inet t pods { 10.9.0.5 }")
	select {
	case w := <-busy:
		if !w.Shows {
			t.Error("the element added again: the wake does not show it")
		}
	case <-time.After(5 * time.Second):
		t.Error("the element added again woke no one")
	}
}

// TestNFTSetAfterOverflow: a transaction too large for the socket's buffer
// (60,000 elements of another set, one message each) loses notifications.
// The listener is woken to probe, the stream is reopened and woken again,
// and the next element of its own shows as before.
func TestNFTSetAfterOverflow(t *testing.T) {
	netns := newNetNS(t)
	nft := func(script string) { nftIn(t, netns, script) }
	nft("add table inet t\nadd set inet t pods { type ipv4_addr; }\nadd set inet t big { type ipv4_addr; }")
	h := NewHub(context.Background())
	defer h.Close()
	ch := make(chan Wake, 16)
	src := Source{Kind: NFTSet, NetNS: netns.Path(), Element: NFTElement{
		Family: unix.NFPROTO_INET, Table: "t", Set: "pods", Key: string(net.ParseIP("10.9.0.5").To4())}}
	if err := h.SubscribeTo(src, ch); err != nil {
		t.Fatal(err)
	}
	var flood strings.Builder
	flood.WriteString("add element inet t big { 10.255.255.255")
	for i := range 60000 {
		fmt.Fprintf(&flood, ", 10.%d.%d.%d", 100+i/65536, (i/256)%256, i%256)
	}
	flood.WriteString(" }\n")
	nft(flood.String())
	for _, step := range []string{"the overflow", "the reopened stream"} {
		select {
		case w := <-ch:
			if w.Shows {
				t.Fatalf("%s: a wake that shows the element", step)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no wake (another set's elements alone wake no one; only a lost message can)", step)
		}
	}
	nft("add element inet t pods { 10.9.0.5 }")
	select {
	case w := <-ch:
		if !w.Shows {
			t.Errorf("after the stream was reopened, the element's own wake = %+v, want one that shows it", w)
		}
	case <-time.After(5 * time.Second):
		t.Error("after the overflow, the element's own change woke no one")
	}
}

// TestNFTDeletionUndoesShows: on the real kernel, an element added and
// then its table (or set) deleted and re-created in the same transaction,
// or a matching rule added and then its chain deleted and re-created,
// wakes with a wake that does not show the check met: the listener
// probes, and finds the table empty. Deletions of another table's objects
// wake no one.
func TestNFTDeletionUndoesShows(t *testing.T) {
	netns := newNetNS(t)
	nftIn(t, netns, "add table inet t\nadd set inet t pods { type ipv4_addr; }\nadd chain inet t rules\nadd table inet u\nadd set inet u pods { type ipv4_addr; }\nadd chain inet u rules")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := NewHub(ctx)
	defer h.Close()
	set := make(chan Wake, 16)
	if err := h.SubscribeTo(Source{Kind: NFTSet, NetNS: netns.Path(), Element: NFTElement{
		Family: unix.NFPROTO_INET, Table: "t", Set: "pods", Key: string(net.ParseIP("10.9.0.5").To4())}}, set); err != nil {
		t.Fatal(err)
	}
	rule := make(chan Wake, 16)
	if err := h.SubscribeTo(Source{Kind: NFTRule, NetNS: netns.Path(), Rule: NFTRuleMatch{
		Family: unix.NFPROTO_INET, Table: "t", Chain: "rules", Match: nftrule.NFTText("ip saddr 10.9.0.5 accept")}}, rule); err != nil {
		t.Fatal(err)
	}
	// Decoys: another table's set and chain deleted.
	nftIn(t, netns, "delete set inet u pods\ndelete chain inet u rules")
	for _, step := range []struct {
		name, script string
		ch           chan Wake
	}{
		{"set: element added, then its table deleted and re-created", "add element inet t pods { 10.9.0.5 }\ndelete table inet t\nadd table inet t\nadd set inet t pods { type ipv4_addr; }\nadd chain inet t rules", set},
		{"set: element added, then its set deleted and re-created", "add element inet t pods { 10.9.0.5 }\ndelete set inet t pods\nadd set inet t pods { type ipv4_addr; }", set},
		{"rule: rule added, then its chain flushed, deleted and re-created", "add rule inet t rules ip saddr 10.9.0.5 accept\nflush chain inet t rules\ndelete chain inet t rules\nadd chain inet t rules", rule},
	} {
		nftIn(t, netns, step.script)
		expectWake(t, step.name, step.ch, false)
	}
	// The table deletion of the first step woke the rule listener too.
	drain(rule)
	nftIn(t, netns, "delete table inet u")
	// A wake, if any, arrives within this; none must.
	time.Sleep(300 * time.Millisecond)
	if len(set) != 0 || len(rule) != 0 {
		t.Errorf("another table's deletion woke: set %d, rule %d", len(set), len(rule))
	}
}
