package conditions

import (
	"os"
	"path/filepath"
	"strings"
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
	msg := ""
	if data, err := os.ReadFile(filepath.Join(dir, k.file)); err == nil {
		msg = strings.TrimSpace(string(data))
	}
	key := k.file + " " + network
	now := c.now()
	c.mu.Lock()
	old := c.nodeNotes[key]
	again := old.due(msg, now)
	if old.msg == msg && !again {
		c.mu.Unlock()
		return
	}
	if msg == "" {
		delete(c.nodeNotes, key)
	} else {
		c.nodeNotes[key] = standing{msg: msg, raised: now}
	}
	c.mu.Unlock()
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
}

// due reports whether msg is this warning, unchanged, and its Event is
// due again (kubeapi.RepeatWarningAfter).
func (s standing) due(msg string, now time.Time) bool {
	return msg != "" && s.msg == msg && now.Sub(s.raised) >= kubeapi.RepeatWarningAfter
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

// installBackoff returns the installer's backoff message, if any network
// of the node has one: pods started meanwhile may have skipped netready.
func (c *Controller) installBackoff() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, note := range c.nodeNotes {
		if strings.HasPrefix(key, notes.InstallBackoffFile+" ") {
			return note.msg
		}
	}
	return ""
}
