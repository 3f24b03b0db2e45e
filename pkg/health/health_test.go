package health

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestHealth: /healthz fails naming every failing part, sorted, and is ok
// once each is cleared; what /readyz waits for is kept apart.
func TestHealth(t *testing.T) {
	h := New()
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return rec.Code, rec.Body.String()
	}
	h.Set("pool watch", errors.New("inotify: too many open files"))
	h.Set("a part", errors.New("down"))
	h.SetUnready("uninstall", errors.New("the taint is not lifted yet"))
	if code, body := get(); code != http.StatusServiceUnavailable || body != "a part: down\npool watch: inotify: too many open files\n" {
		t.Errorf("/healthz = %d %q, want 503 naming both parts, sorted", code, body)
	}
	if got := h.UnreadyReason(); got != "uninstall: the taint is not lifted yet" {
		t.Errorf("UnreadyReason() = %q", got)
	}
	h.Set("pool watch", nil)
	h.Set("a part", nil)
	if code, body := get(); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz once cleared = %d %q, want 200 ok", code, body)
	}
	h.SetUnready("uninstall", nil)
	if got := h.UnreadyReason(); got != "" {
		t.Errorf("UnreadyReason() once done = %q, want none", got)
	}
	// A note is said while ready, and makes nothing unready.
	h.SetNote("scope", errors.New("cannot be told"))
	if got, why := h.Notes(), h.UnreadyReason(); got != "scope: cannot be told" || why != "" {
		t.Errorf("Notes() = %q, UnreadyReason() = %q, want the note alone", got, why)
	}
	h.SetNote("scope", nil)
	if got := h.Notes(); got != "" {
		t.Errorf("Notes() once cleared = %q, want none", got)
	}
}
