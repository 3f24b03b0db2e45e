package sidecar

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"

	"github.com/netready/netready/pkg/health"
	"github.com/netready/netready/pkg/kubeapi"
	"github.com/netready/netready/pkg/scopecheck"
	"github.com/netready/netready/pkg/writegate"
)

// TestScopeVerdictsOpenTheGateAndSayWhy: the gate is open exactly when a
// Verdict writes; /readyz fails naming why while held, and is ready but
// says why while the sidecar writes on an unknown scope; a Warn is a
// Warning Event on the Node, naming the other check.
func TestScopeVerdictsOpenTheGateAndSayWhy(t *testing.T) {
	client, err := kubeapi.NewREST(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	gate := writegate.New(errors.New("not yet"), time.Second)
	h := health.New()
	rec := events.NewFakeRecorder(10)
	o := validOptions()
	o.ScopeUnknownHold = time.Minute
	p := newProver(o, client, gate, h, rec, slog.New(slog.NewTextHandler(io.Discard, nil)))
	unknown := fmt.Errorf("%w: ValidatingAdmissionPolicy 'acme'", scopecheck.ErrUnknown)
	type state struct {
		Open          bool
		Unready, Note string
	}
	for _, tc := range []struct {
		name string
		v    scopecheck.Verdict
		want state
	}{
		{"held", scopecheck.Verdict{Err: errors.New("let through")}, state{Unready: "scope: let through"}},
		{"in force", scopecheck.Verdict{Write: true}, state{Open: true}},
		{"writing on an unknown scope", scopecheck.Verdict{Err: unknown, Write: true, Warn: true}, state{Open: true, Note: "scope: " + unknown.Error()}},
		{"held on an unknown scope", scopecheck.Verdict{Err: unknown}, state{Unready: "scope: " + unknown.Error()}},
	} {
		p.Report(tc.v)
		got := state{gate.IsOpen(), h.UnreadyReason(), h.Notes()}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
	select {
	case ev := <-rec.Events:
		if !strings.HasPrefix(ev, "Warning NetreadyScopeUnknown writing after holding every write for 1m0s: ") || !strings.Contains(ev, "'acme'") {
			t.Errorf("Event = %q, want a Warning NetreadyScopeUnknown naming the other check", ev)
		}
	default:
		t.Error("no Event for the Warn")
	}
	select {
	case ev := <-rec.Events:
		t.Errorf("a second Event %q, want one per Warn", ev)
	default:
	}
}
