package main

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// health is what /healthz reports: the parts of the sidecar that run on
// their own and are failing, with why. kubelet restarts the container
// when it fails long enough.
type health struct {
	mu      sync.Mutex
	failing map[string]error
}

func newHealth() *health { return &health{failing: map[string]error{}} }

// set records a part's state: nil when it runs.
func (h *health) set(part string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		delete(h.failing, part)
	} else {
		h.failing[part] = err
	}
}

func (h *health) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.mu.Lock()
	var problems []string
	for part, err := range h.failing {
		problems = append(problems, fmt.Sprintf("%s: %v", part, err))
	}
	h.mu.Unlock()
	if len(problems) > 0 {
		slices.Sort(problems)
		http.Error(w, strings.Join(problems, "\n"), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}
