package nodewriter

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/kubeapi"
	"github.com/netready/netready/pkg/metrics"
	"github.com/netready/netready/pkg/notes"
)

// Reasons of the Node Events for the notes the plugin and the installer
// leave (package notes), and for presets whose agent writes nothing.
const (
	// ReasonInvalidConfig: ADD refuses the node's netready entry, which
	// STATUS does not report (a typo must not take the node NotReady).
	ReasonInvalidConfig = "NetreadyConfigInvalid"
	// ReasonInstallBackedOff: the installer stopped putting the entry
	// back, as another agent keeps removing it.
	ReasonInstallBackedOff = "NetreadyInstallBackedOff"
	// ReasonPresetNotWriting: a preset's agent is not set up to write
	// what the preset waits for (Calico's Felix without
	// endpointStatusPathPrefix): every pod of the network would wait its
	// whole timeout.
	ReasonPresetNotWriting = "NetreadyPresetNotWriting"
)

// noteKind is one kind of note and how it is raised.
type noteKind struct {
	file, reason, action string
	metric               func(*metrics.Metrics) *prometheus.GaugeVec
}

var noteKinds = []noteKind{
	{notes.InvalidConfigFile, ReasonInvalidConfig, "ValidateConfig", func(m *metrics.Metrics) *prometheus.GaugeVec { return m.ConfigInvalid }},
	{notes.InstallBackoffFile, ReasonInstallBackedOff, "Install", func(m *metrics.Metrics) *prometheus.GaugeVec { return m.InstallBackedOff }},
}

// NoteFiles are the files of a network folder whose notes Warnings
// follows (NoteRead).
var NoteFiles = []string{notes.InvalidConfigFile, notes.InstallBackoffFile}

// Warnings are the warnings for the operator that stand on this Node: the
// notes the plugin and the installer leave, and presets whose agent writes
// nothing. Each is a Warning Event on the Node when it is raised, again
// after kubeapi.RepeatWarningAfter while it holds, and a metric. It is fed
// what was seen (NoteRead, PresetSeen) and owns what it keeps behind its
// one lock; Events are recorded after the lock is released.
type Warnings struct {
	node     string
	recorder kubeapi.EventRecorder
	log      *slog.Logger
	metrics  *metrics.Metrics
	now      func() time.Time
	// unobserved and hold are the sidecar's --unobserved and
	// --not-in-effect-hold-max, which a preset's Event names.
	unobserved string
	hold       time.Duration

	mu sync.Mutex
	// notes: "<note file> <network>" -> the note; presets: network ->
	// why its preset's agent writes nothing.
	notes   map[string]standing
	presets map[string]standing
}

// NewWarnings returns the warnings of Node node. unobserved and hold are
// the sidecar's --unobserved and --not-in-effect-hold-max, which a preset's
// Event names.
func NewWarnings(node string, recorder kubeapi.EventRecorder, log *slog.Logger, m *metrics.Metrics, now func() time.Time, unobserved string, hold time.Duration) *Warnings {
	return &Warnings{node: node, recorder: recorder, log: log, metrics: m, now: now, unobserved: unobserved, hold: hold,
		notes: map[string]standing{}, presets: map[string]standing{}}
}

// standing is a warning that holds, and when its Event was last recorded.
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

// NoteRead: a network's note file (one of NoteFiles) says msg ("" once it
// is gone), written at written. It reports whether the note changed, not
// only came due again.
func (w *Warnings) NoteRead(network, file, msg string, written time.Time) bool {
	i := slices.IndexFunc(noteKinds, func(k noteKind) bool { return k.file == file })
	if i < 0 {
		return false
	}
	k := noteKinds[i]
	now := w.now()
	key := k.file + " " + network
	w.mu.Lock()
	old := w.notes[key]
	again := old.due(msg, now)
	switch {
	case old.msg == msg && !again:
		w.mu.Unlock()
		return false
	case msg == "":
		delete(w.notes, key)
	default:
		// A note rewritten while it stands (a longer pause) keeps the
		// time it was first written: pods since then may have skipped
		// netready.
		if old.msg != "" && !old.written.IsZero() && (written.IsZero() || old.written.Before(written)) {
			written = old.written
		}
		w.notes[key] = standing{msg: msg, raised: now, written: written}
	}
	w.mu.Unlock()
	if again {
		w.warn(k.reason, k.action, "%s", msg)
		return false
	}
	if msg == "" {
		k.metric(w.metrics).WithLabelValues(network).Set(0)
		w.log.Info("a note is gone", "network", network, "note", k.file)
		return true
	}
	k.metric(w.metrics).WithLabelValues(network).Set(1)
	w.log.Warn("a note for the operator", "network", network, "note", k.file, "message", msg)
	w.warn(k.reason, k.action, "%s", msg)
	return true
}

// Preset is a marker of a network as last checked: why its checks say its
// preset's agent is not set up to write ("" if they do not), and whether
// it is ready.
type Preset struct {
	Network, Why string
	Ready        bool
}

// PresetSeen raises, once per network and message (and again after
// kubeapi.RepeatWarningAfter while it holds), a check that says its
// preset's agent is not set up, as netready_preset_not_writing{network} 1
// and a Node Event; a ready marker of the network clears it. worked says
// netready worked for the network on this node before.
func (w *Warnings) PresetSeen(p Preset, worked bool) {
	now := w.now()
	w.mu.Lock()
	old := w.presets[p.Network]
	switch {
	case p.Why != "" && (p.Why != old.msg || old.due(p.Why, now)):
		w.presets[p.Network] = standing{msg: p.Why, raised: now}
	case p.Why == "" && old.msg != "" && p.Ready:
		delete(w.presets, p.Network)
	default:
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	if p.Why == "" {
		w.metrics.PresetNotWriting.WithLabelValues(p.Network).Set(0)
		w.log.Info("the preset's agent writes what it waits for again", "network", p.Network)
		return
	}
	w.metrics.PresetNotWriting.WithLabelValues(p.Network).Set(1)
	w.log.Warn("a preset's agent is not set up to write what netready waits for: every pod of the network waits its whole timeout", "network", p.Network, "why", p.Why)
	then := ""
	if !worked {
		// As the pod controller gives up on them.
		then = fmt.Sprintf(", and, as it never wrote on this node, its gated pods are judged as pods netready did not see (--unobserved=%s) %s after their ADD began (--not-in-effect-hold-max)",
			w.unobserved, w.hold)
	}
	w.warn(ReasonPresetNotWriting, "Check", "network %s: %s. Until then every ADD of the network waits its whole timeout%s", p.Network, p.Why, then)
}

// warn records a Warning Event about this node.
func (w *Warnings) warn(reason, action, note string, args ...any) {
	if w.recorder == nil {
		return
	}
	// As kubelet refers to its Node in Events: the UID is the name.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: w.node, UID: types.UID(w.node)}}
	w.recorder.Eventf(node, nil, corev1.EventTypeWarning, reason, action, note, args...)
}

// Backoff is the installer's note that it stopped putting the entry back.
type Backoff struct {
	Msg string
	// Since is when the note was first written, as far as the sidecar
	// saw it stand.
	Since time.Time
}

// InstallBackoffs returns the installer's backoffs that stand on any
// network of the node, earliest first: pods started since may have
// skipped netready.
func (w *Warnings) InstallBackoffs() []Backoff {
	w.mu.Lock()
	var out []Backoff
	for key, note := range w.notes {
		if strings.HasPrefix(key, notes.InstallBackoffFile+" ") {
			out = append(out, Backoff{Msg: note.msg, Since: note.written})
		}
	}
	w.mu.Unlock()
	slices.SortFunc(out, func(a, b Backoff) int { return cmp.Or(a.Since.Compare(b.Since), strings.Compare(a.Msg, b.Msg)) })
	return out
}
