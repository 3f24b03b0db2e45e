package main

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// health is what /healthz and /readyz report besides the pod cache: the
// parts of the sidecar that run on their own and are failing (/healthz:
// kubelet restarts the container when it fails long enough), and work
// that /readyz waits for, such as an uninstall's lifting of the taint,
// which a restart would not help.
type health struct {
	mu      sync.Mutex
	failing map[string]error
	unready map[string]error
}

func newHealth() *health { return &health{failing: map[string]error{}, unready: map[string]error{}} }

// set records a part's state: nil when it runs.
func (h *health) set(part string, err error) { h.record(h.failing, part, err) }

// setUnready records work /readyz waits for: nil when it is done.
func (h *health) setUnready(part string, err error) { h.record(h.unready, part, err) }

func (h *health) record(m map[string]error, part string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		delete(m, part)
	} else {
		m[part] = err
	}
}

// problems lists m's entries, sorted, one a line; "" when there is none.
func (h *health) problems(m map[string]error) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var lines []string
	for part, err := range m {
		lines = append(lines, fmt.Sprintf("%s: %v", part, err))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// unreadyReason says what /readyz waits for, or "".
func (h *health) unreadyReason() string { return h.problems(h.unready) }

func (h *health) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if p := h.problems(h.failing); p != "" {
		http.Error(w, p, http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}
