// Package health owns what netready-sidecar's /healthz and /readyz say
// of its parts that run on their own.
package health

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// Health is what /healthz and /readyz report besides the pod cache: the
// parts of the sidecar that run on their own and are failing (/healthz:
// kubelet restarts the container when it fails long enough), and work
// that /readyz waits for, such as an uninstall's lifting of the taint,
// which a restart would not help.
type Health struct {
	mu      sync.Mutex
	failing map[string]error
	unready map[string]error
	// notes are what /readyz says while it is ready: a part that works,
	// but not as it should.
	notes map[string]error
}

// New returns a Health with nothing failing.
func New() *Health {
	return &Health{failing: map[string]error{}, unready: map[string]error{}, notes: map[string]error{}}
}

// Set records a part's state: nil when it runs.
func (h *Health) Set(part string, err error) { h.record(h.failing, part, err) }

// SetUnready records work /readyz waits for: nil when it is done.
func (h *Health) SetUnready(part string, err error) { h.record(h.unready, part, err) }

// SetNote records what /readyz says besides "ok": nil clears it.
func (h *Health) SetNote(part string, err error) { h.record(h.notes, part, err) }

func (h *Health) record(m map[string]error, part string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		delete(m, part)
	} else {
		m[part] = err
	}
}

// problems lists m's entries, sorted, one a line; "" when there is none.
func (h *Health) problems(m map[string]error) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var lines []string
	for part, err := range m {
		lines = append(lines, fmt.Sprintf("%s: %v", part, err))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// UnreadyReason says what /readyz waits for, or "".
func (h *Health) UnreadyReason() string { return h.problems(h.unready) }

// Notes lists what /readyz says besides "ok", one a line, or "".
func (h *Health) Notes() string { return h.problems(h.notes) }

// ServeHTTP is /healthz's part: 503 naming every failing part.
func (h *Health) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if p := h.problems(h.failing); p != "" {
		http.Error(w, p, http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}
