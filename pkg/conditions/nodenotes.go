package conditions

import (
	"cmp"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/kubeapi"
	"github.com/netready/netready/pkg/notes"
)

// Reasons of the Node Events for the notes the plugin and the installer
// leave (package notes).
const (
	// ReasonInvalidConfig: ADD refuses the node's netready entry, which
	// STATUS does not report (a typo must not take the node NotReady).
	ReasonInvalidConfig = "NetreadyConfigInvalid"
	// ReasonInstallBackedOff: the installer stopped putting the entry
	// back, as another agent keeps removing it.
	ReasonInstallBackedOff = "NetreadyInstallBackedOff"
)

// nodeNote is one kind of note and how the sidecar raises it.
type nodeNote struct {
	file, reason, action string
	metric               func(*Controller) *prometheus.GaugeVec
}

var nodeNoteKinds = []nodeNote{
	{notes.InvalidConfigFile, ReasonInvalidConfig, "ValidateConfig", func(c *Controller) *prometheus.GaugeVec { return c.metrics.ConfigInvalid }},
	{notes.InstallBackoffFile, ReasonInstallBackedOff, "Install", func(c *Controller) *prometheus.GaugeVec { return c.metrics.InstallBackedOff }},
}

// readNotes follows a network folder's notes: a new message is a Warning
// Event on the Node (again after kubeapi.RepeatWarningAfter while it
// holds) and sets its metric; its removal clears the metric.
// The main loop alone calls it.
func (c *Controller) readNotes(dir string) {
	for _, k := range nodeNoteKinds {
		c.readNote(dir, k)
	}
}

func (c *Controller) readNote(dir string, k nodeNote) {
	network := filepath.Base(dir)
	path := filepath.Join(dir, k.file)
	msg, written := "", time.Time{}
	if data, err := os.ReadFile(path); err == nil {
		msg = strings.TrimSpace(string(data))
		if info, err := os.Stat(path); err == nil {
			written = info.ModTime()
		}
	}
	now := c.now()
	again := false
	changed := c.nodeNotes.update(k.file+" "+network, func(old standing) (*standing, bool) {
		again = old.due(msg, now)
		switch {
		case old.msg == msg && !again:
			return nil, false
		case msg == "":
			return nil, true
		}
		// A note rewritten while it stands (a longer pause) keeps the
		// time it was first written: pods since then may have skipped
		// netready.
		if old.msg != "" && !old.written.IsZero() && (written.IsZero() || old.written.Before(written)) {
			written = old.written
		}
		return &standing{msg: msg, raised: now, written: written}, true
	})
	if !changed {
		return
	}
	if again {
		c.nodeWarning(k.reason, k.action, "%s", msg)
		return
	}
	if k.file == notes.InstallBackoffFile {
		// Pods judged NotObserved while it stood, or after, change.
		c.queueUnjudged()
	}
	if msg == "" {
		k.metric(c).WithLabelValues(network).Set(0)
		c.log.Info("a note is gone", "network", network, "note", k.file)
		return
	}
	k.metric(c).WithLabelValues(network).Set(1)
	c.log.Warn("a note for the operator", "network", network, "note", k.file, "message", msg)
	c.nodeWarning(k.reason, k.action, "%s", msg)
}

// standing is a warning for the operator that holds, and when its Event
// was last recorded.
type standing struct {
	msg    string
	raised time.Time
	// written is when a note was first written, from its file's time.
	written time.Time
}

// due reports whether msg is this warning, unchanged, and its Event is
// due again (kubeapi.RepeatWarningAfter).
func (s standing) due(msg string, now time.Time) bool {
	return msg != "" && s.msg == msg && now.Sub(s.raised) >= kubeapi.RepeatWarningAfter
}

// standings are warnings that hold, by key. Their lock guards only their
// map.
type standings struct {
	mu sync.Mutex
	m  map[string]standing
}

func newStandings() *standings { return &standings{m: map[string]standing{}} }

// update calls fn with key's warning (the zero one if none) and, if fn
// says so, sets it to what fn returns, or removes it on nil; in one step.
// It reports whether fn said so.
func (s *standings) update(key string, fn func(old standing) (next *standing, change bool)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	next, change := fn(s.m[key])
	switch {
	case !change:
	case next == nil:
		delete(s.m, key)
	default:
		s.m[key] = *next
	}
	return change
}

// withPrefix returns the warnings whose key starts with prefix.
func (s *standings) withPrefix(prefix string) []standing {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []standing
	for key, w := range s.m {
		if strings.HasPrefix(key, prefix) {
			out = append(out, w)
		}
	}
	return out
}

// nodeWarning records a Warning Event about this node.
func (c *Controller) nodeWarning(reason, action, note string, args ...any) {
	if c.recorder == nil {
		return
	}
	// As kubelet refers to its Node in Events: the UID is the name.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.opts.NodeName, UID: types.UID(c.opts.NodeName)}}
	c.recorder.Eventf(node, nil, corev1.EventTypeWarning, reason, action, note, args...)
}

// installBackoffs returns the installer's backoffs that stand on any
// network of the node, earliest first: pods started since may have
// skipped netready.
func (c *Controller) installBackoffs() []backoff {
	var out []backoff
	for _, note := range c.nodeNotes.withPrefix(notes.InstallBackoffFile + " ") {
		out = append(out, backoff{Msg: note.msg, Since: note.written})
	}
	slices.SortFunc(out, func(a, b backoff) int { return cmp.Or(a.Since.Compare(b.Since), strings.Compare(a.Msg, b.Msg)) })
	return out
}
