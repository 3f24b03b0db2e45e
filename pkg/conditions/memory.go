package conditions

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/atomicfile"
	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/pkg/statedir"
)

// The sidecar keeps what it must remember of each pod between rounds
// (memory) in statedir.PodMemories, one file per pod UID. It lives beside
// the markers, so that the two share a lifetime: a sidecar restart keeps
// both, and a reboot that clears the markers clears it too.

// memoryVersion is the version of a memory file this sidecar writes and
// reads; any other is unreadable, and so ends in not ready.
const memoryVersion = 1

// memory is what the sidecar remembers of one pod. The condition's message
// is for people and cut at a bound; what a later round decides on is kept
// here, in full.
type memory struct {
	Version int `json:"version"`
	// GoneSandboxes (ShortID) and GoneMarkers (<ShortID>_<ifName>) are
	// sandboxes and markers of an older sandbox that a published
	// condition named as gone. A sandbox never comes back, so they only
	// grow: once a new sandbox is up with the same IP, nothing else tells
	// them from its own.
	GoneSandboxes []string `json:"goneSandboxes,omitempty"`
	GoneMarkers   []string `json:"goneMarkers,omitempty"`
	// Judged is the sandboxes (publish.SandboxIDs) of the last condition
	// judged on markers, and NotInEffect whether it was NotInEffect's
	// verdict.
	Judged      string `json:"judged,omitempty"`
	NotInEffect bool   `json:"notInEffect,omitempty"`
	// JudgedIPs are the IPs (without prefix) of those sandboxes' markers:
	// once the markers are gone, a pod IP outside them says that kubelet
	// shows another sandbox.
	JudgedIPs []string `json:"judgedIPs,omitempty"`
	// EndSeen (Unix seconds) is when a pod kubelet makes no other sandbox
	// for (noSandboxAgain) was first seen with its True and no marker:
	// the start of the bounded wait for its phase.
	EndSeen int64 `json:"endSeen,omitempty"`
	// Off says the pod's gate was released while netready was switched
	// off, on the markers of OffSandboxes (publish.SandboxIDs, "" for
	// none): once it is on again, that True stays while those are the
	// pod's markers and they do not earn one themselves.
	Off          bool   `json:"off,omitempty"`
	OffSandboxes string `json:"offSandboxes,omitempty"`
}

// gone reports whether the memory names m's sandbox or m as gone.
func (m memory) gone(sandbox, name string) bool {
	return slices.Contains(m.GoneSandboxes, sandbox) || slices.Contains(m.GoneMarkers, name)
}

// withGone is m also naming sandbox (if any) and markers as gone.
func (m memory) withGone(sandbox string, markers []string) memory {
	if sandbox != "" && !slices.Contains(m.GoneSandboxes, sandbox) {
		m.GoneSandboxes = append(slices.Clone(m.GoneSandboxes), sandbox)
		slices.Sort(m.GoneSandboxes)
	}
	for _, name := range markers {
		if !slices.Contains(m.GoneMarkers, name) {
			m.GoneMarkers = append(slices.Clone(m.GoneMarkers), name)
		}
	}
	slices.Sort(m.GoneMarkers)
	return m
}

// merged is m with what other names as gone: two writers (a sidecar and
// its successor during a rollout) never forget each other's.
func (m memory) merged(other memory) memory {
	for _, s := range other.GoneSandboxes {
		m = m.withGone(s, nil)
	}
	return m.withGone("", other.GoneMarkers)
}

func (m memory) equal(o memory) bool {
	return slices.Equal(m.GoneSandboxes, o.GoneSandboxes) && slices.Equal(m.GoneMarkers, o.GoneMarkers) &&
		m.Judged == o.Judged && m.NotInEffect == o.NotInEffect && slices.Equal(m.JudgedIPs, o.JudgedIPs) && m.EndSeen == o.EndSeen &&
		m.Off == o.Off && m.OffSandboxes == o.OffSandboxes
}

// memoryPath is where the memory of the pod uid is kept.
func memoryPath(stateDir string, uid types.UID) string {
	return filepath.Join(stateDir, statedir.PodMemories, string(uid)+statedir.MemorySuffix)
}

// Why a memory could not be read: there is none (errNoMemory), or what
// is there is not one this sidecar can read (errMemoryLost). Any other
// error is one of reading, which may clear.
var (
	errNoMemory   = errors.New("no memory of the pod")
	errMemoryLost = errors.New("pod memory lost")
)

// readMemory reads the memory of a pod.
func readMemory(stateDir string, uid types.UID) (memory, error) {
	path := memoryPath(stateDir, uid)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return memory{}, errNoMemory
	}
	if err != nil {
		return memory{}, fmt.Errorf("read pod memory: %w", err)
	}
	var m memory
	if err := json.Unmarshal(data, &m); err != nil {
		return memory{}, fmt.Errorf("%w: %s: %w", errMemoryLost, path, err)
	}
	if m.Version != memoryVersion {
		return memory{}, fmt.Errorf("%w: %s: version %d, want %d", errMemoryLost, path, m.Version, memoryVersion)
	}
	return m, nil
}

// writeMemory keeps m as the memory of the pod uid, with whatever the file
// names as gone already (another sidecar's).
func writeMemory(stateDir string, uid types.UID, m memory) error {
	if old, err := readMemory(stateDir, uid); err == nil {
		m = m.merged(old)
	}
	m.Version = memoryVersion
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(stateDir, statedir.PodMemories), 0o755); err != nil {
		return fmt.Errorf("pod memory: %w", err)
	}
	if err := atomicfile.Write(memoryPath(stateDir, uid), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("pod memory: %w", err)
	}
	return nil
}

// inheritedMemory is the memory a v0.5 sidecar kept in the message of the
// condition cur, for a pod that has no memory file: the gone sandboxes and
// left-behind markers it names, the sandboxes it was judged on, and
// whether NotInEffect judged it. Without it, taking over from that sidecar
// would count a gone sandbox's marker again (a True from it), or take back
// a True that NotInEffect gave. The sidecar reads a message only here,
// once per pod: what it inherits goes into the pod's file, which decides
// from then on. It reports whether cur named anything to inherit.
func inheritedMemory(cur *corev1.PodCondition) (memory, bool) {
	if cur == nil {
		return memory{}, false
	}
	sandboxes, markers := publish.ParseLeftBehind(cur)
	var m memory
	for _, s := range sandboxes {
		m = m.withGone(s, nil)
	}
	m = m.withGone("", slices.DeleteFunc(markers, func(s string) bool { return s == "" }))
	m.Judged = publish.ParseSandbox(cur.Message)
	m.NotInEffect = publish.IsNotInEffect(cur)
	return m, !m.equal(memory{})
}

// forgetMemory removes the memory of a deleted pod.
func forgetMemory(stateDir string, uid types.UID) error {
	if err := os.Remove(memoryPath(stateDir, uid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("pod memory: %w", err)
	}
	return nil
}

// sweepMemory removes the memory of pods that are no longer on the node
// (deleted while the sidecar was down), and temp files writers left.
func sweepMemory(stateDir string, known func(types.UID) bool, now time.Time) error {
	dir := filepath.Join(stateDir, statedir.PodMemories)
	_, err := statedir.Sweep(dir, "", statedir.Modified, now)
	entries, rerr := os.ReadDir(dir)
	if errors.Is(rerr, fs.ErrNotExist) {
		return err
	}
	errs := []error{err, rerr}
	for _, e := range entries {
		uid, ok := strings.CutSuffix(e.Name(), statedir.MemorySuffix)
		if !ok || strings.HasPrefix(e.Name(), ".") || known(types.UID(uid)) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("pod memory: %w", err))
		}
	}
	return errors.Join(errs...)
}
