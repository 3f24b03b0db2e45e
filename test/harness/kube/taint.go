//go:build integration

package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/netready/netready/pkg/taint"
)

// HostLocal allocates and releases addresses with the real host-local
// plugin, as a main plugin's ADD and DEL do.
type HostLocal struct {
	Network string
	IPAM    string // the ipam object
	Netns   string // any netns but ours: host-local only checks that
}

// Run runs host-local with CNI_COMMAND cmd for container id.
func (h *HostLocal) Run(cmd, id string) error {
	c := exec.Command(filepath.Join(CNIBinDir, "host-local"))
	c.Env = []string{"CNI_COMMAND=" + cmd, "CNI_CONTAINERID=" + id, "CNI_NETNS=" + h.Netns, "CNI_IFNAME=eth0", "CNI_PATH=" + CNIBinDir}
	c.Stdin = strings.NewReader(fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"bridge","ipam":%s}`, h.Network, h.IPAM))
	out, err := c.CombinedOutput()
	if err != nil {
		return fmt.Errorf("host-local %s %s: %v: %s", cmd, id, err, out)
	}
	return nil
}

// Add allocates an address for each id.
func (h *HostLocal) Add(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := h.Run("ADD", id); err != nil {
			t.Fatal(err)
		}
	}
}

// Del releases the address of each id.
func (h *HostLocal) Del(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := h.Run("DEL", id); err != nil {
			t.Fatal(err)
		}
	}
}

// TaintWatch records what a watch on one Node sees of netready's taint:
// when it first came and first went, and how often it went.
type TaintWatch struct {
	mu             sync.Mutex
	has            bool
	added, removed time.Time
	removals       int
}

// WatchTaint watches node's taints until the test ends.
func WatchTaint(t *testing.T, admin kubernetes.Interface, node string) *TaintWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := admin.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", node).String()})
	if err != nil {
		t.Fatal(err)
	}
	tw := &TaintWatch{}
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			has := taint.Has(ev.Object.(*corev1.Node))
			tw.mu.Lock()
			switch {
			case has && !tw.has && tw.added.IsZero():
				tw.added = time.Now()
			case !has && tw.has:
				tw.removals++
				if tw.removed.IsZero() {
					tw.removed = time.Now()
				}
			}
			tw.has = has
			tw.mu.Unlock()
		}
	}()
	return tw
}

// FirstTimes is when the taint was first seen to come and to go.
func (tw *TaintWatch) FirstTimes() (added, removed time.Time) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return tw.added, tw.removed
}

// RemovalCount is how many times the taint was seen to go.
func (tw *TaintWatch) RemovalCount() int {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return tw.removals
}

// Node gets a Node as the admin.
func (a *APIServer) Node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := a.Admin.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Within waits up to limit for ok, and fails the test if it never holds.
func Within(t *testing.T, what string, limit time.Duration, ok func() bool) {
	t.Helper()
	for start := time.Now(); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %s", what, limit)
		}
	}
}

// GrepLines is the lines of s that hold sub.
func GrepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// KeptCount is the part of a kept pool count (pool.CachePath) that the
// tests read: the folder's mtime it was counted at, and the addresses in use.
type KeptCount struct {
	MtimeNs int64   `json:"mtimeNs"`
	Used    []int64 `json:"used"`
}

// ReadKeptCount reads a kept pool count; false if it is absent or
// unreadable.
func ReadKeptCount(path string) (KeptCount, bool) {
	var c KeptCount
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &c) != nil {
		return KeptCount{}, false
	}
	return c, true
}
