package pending

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/marker"
)

func cep(container string, id, identity int64, ips ...string) ciliumEndpoint {
	var c ciliumEndpoint
	c.Status.ID, c.Status.ExternalIdentifiers.CNIAttachmentID = id, container+":eth0"
	if identity != 0 {
		c.Status.Identity = &struct {
			ID int64 `json:"id"`
		}{identity}
	}
	if ips != nil {
		c.Status.Networking = &struct {
			Addressing []struct {
				IPv4 string `json:"ipv4"`
				IPv6 string `json:"ipv6"`
			} `json:"addressing"`
		}{}
		for _, ip := range ips {
			a := struct {
				IPv4 string `json:"ipv4"`
				IPv6 string `json:"ipv6"`
			}{}
			if strings.Contains(ip, ":") {
				a.IPv6 = ip
			} else {
				a.IPv4 = ip
			}
			c.Status.Networking.Addressing = append(c.Status.Networking.Addressing, a)
		}
	}
	return c
}

// TestPublishedWhy: a CiliumEndpoint counts only when it is this
// sandbox's and holds the identity the agent has now and every IP.
func TestPublishedWhy(t *testing.T) {
	local := checks.CiliumLocal{ID: 42, Identity: 1234}
	ips := []string{"10.0.1.5", "fd00::5"}
	tests := []struct {
		name string
		cep  ciliumEndpoint
		want string
	}{
		{"published", cep("c1", 42, 1234, "10.0.1.5", "fd00::5"), ""},
		{"an older sandbox's", cep("c0", 41, 1234, "10.0.1.5", "fd00::5"), `the CiliumEndpoint is another attachment's ("c0:eth0"), not yet this sandbox's`},
		{"another interface's", func() ciliumEndpoint {
			c := cep("c1", 42, 1234, "10.0.1.5", "fd00::5")
			c.Status.ExternalIdentifiers.CNIAttachmentID = "c1:net1"
			return c
		}(), `the CiliumEndpoint is another attachment's ("c1:net1"), not yet this sandbox's`},
		{"the container alone", func() ciliumEndpoint {
			c := cep("c1", 42, 1234, "10.0.1.5", "fd00::5")
			c.Status.ExternalIdentifiers.CNIAttachmentID = "c1"
			return c
		}(), `the CiliumEndpoint is another attachment's ("c1"), not yet this sandbox's`},
		{"another endpoint id", cep("c1", 7, 1234, "10.0.1.5", "fd00::5"), "the CiliumEndpoint has endpoint id 7, the agent 42"},
		{"no identity yet", cep("c1", 42, 0, "10.0.1.5", "fd00::5"), "the CiliumEndpoint has identity none, the agent 1234: other nodes would not apply the pod's policy yet"},
		{"the init identity", cep("c1", 42, 5, "10.0.1.5", "fd00::5"), "the CiliumEndpoint has identity 5, the agent 1234: other nodes would not apply the pod's policy yet"},
		{"an IP missing", cep("c1", 42, 1234, "10.0.1.5"), "the CiliumEndpoint lacks the pod's IP fd00::5: other nodes would not know its traffic"},
		{"no networking", cep("c1", 42, 1234), "the CiliumEndpoint lacks the pod's IP 10.0.1.5, fd00::5: other nodes would not know its traffic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, publishedWhy(tt.cep, local, "c1:eth0", ips)); diff != "" {
				t.Errorf("publishedWhy (-want +got):\n%s", diff)
			}
		})
	}
	// An agent that answers no id, or the init identity, proves nothing,
	// whatever the CiliumEndpoint holds.
	for _, l := range []checks.CiliumLocal{{}, {ID: 42}, {ID: 42, Identity: 5}, {Identity: 1234}} {
		zero := cep("c1", l.ID, l.Identity, "10.0.1.5", "fd00::5")
		if why := publishedWhy(zero, l, "c1:eth0", ips); !strings.Contains(why, "not final yet") {
			t.Errorf("agent %+v: publishedWhy = %q, want not final yet", l, why)
		}
	}
}

// fakeAgent serves the one endpoint c1:eth0 on a unix socket, ready, with
// identity, as the Cilium agent's REST API does.
func fakeAgent(t *testing.T, identity int64) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cilium.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.EscapedPath() != "/v1/endpoint/cni-attachment-id:c1:eth0" && r.URL.Path != "/v1/endpoint/cni-attachment-id:c1:eth0" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, `{"id": 42, "status": {"state": "ready", "identity": {"id": %d}, "policy": {"realized": {"policy-revision": 3}, "spec": {"policy-revision": 3}}}}`, identity)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "unix://" + sock
}

// cepSequence answers the CiliumEndpoints in order, then the last for good.
type cepSequence struct {
	mu    sync.Mutex
	steps []func() ([]byte, error)
	calls int
}

func (s *cepSequence) GetCiliumEndpoint(_ context.Context, ns, name string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ns != "default" || name != "web-0" {
		return nil, fmt.Errorf("asked for %s/%s, want default/web-0", ns, name)
	}
	step := s.steps[min(s.calls, len(s.steps)-1)]
	s.calls++
	return step()
}

func notFound() ([]byte, error) {
	return nil, fmt.Errorf("no CiliumEndpoint default/web-0: %w", fs.ErrNotExist)
}

func answer(c ciliumEndpoint) func() ([]byte, error) {
	return func() ([]byte, error) { return json.Marshal(c) }
}

// ciliumMarker writes a pending marker as a Cilium ADD with crossNode
// leaves it: the local check met, the CiliumEndpoint left to the sidecar.
func ciliumMarker(t *testing.T, s marker.Store, socket string) *marker.Marker {
	t.Helper()
	data := `{"version": 1, "network": "podnet", "containerID": "c1", "ifName": "eth0", "netns": "",
		"pod": {"namespace": "default", "name": "web-0", "uid": "u1"}, "ips": ["10.200.0.5/24"],
		"state": "pending", "createdAt": "` + time.Now().UTC().Format(time.RFC3339Nano) + `", "waitedMs": 20,
		"checks": [{"kind": "http", "target": "cilium", "ready": true, "waitedMs": 20},
			{"kind": "` + checks.KindCiliumPublished + `", "target": "t", "ready": false, "waitedMs": 0, "why": "left to the sidecar"}],
		"pending": {"checks": [{"kind": "http", "preset": "cilium", "url": "` + socket + `"}], "ciliumPublished": true}}`
	if err := os.MkdirAll(filepath.Join(s.Dir, "podnet"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Dir, "podnet", "c1_eth0.json"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := s.Read(marker.Key{Network: "podnet", ContainerID: "c1", IfName: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRecheckWaitsForTheCiliumEndpoint: the marker turns ready only once
// the CiliumEndpoint holds the agent's identity; before, each round's
// progress names what is missing.
func TestRecheckWaitsForTheCiliumEndpoint(t *testing.T) {
	s := marker.Store{Dir: filepath.Join(t.TempDir(), "state")}
	m := ciliumMarker(t, s, fakeAgent(t, 1234))
	// A round of 60 ms reads about twice: each answer outlasts a round.
	init := answer(cep("c1", 42, 5, "10.200.0.5"))
	ceps := &cepSequence{steps: []func() ([]byte, error){notFound, notFound, notFound, init, init, init, init, answer(cep("c1", 42, 1234, "10.200.0.5"))}}
	var mu sync.Mutex
	var shown []string
	progress := func(p *marker.Marker) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range p.Checks {
			if c.Kind == checks.KindCiliumPublished && (len(shown) == 0 || shown[len(shown)-1] != c.Why) {
				shown = append(shown, c.Why)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	in := Inputs{Store: s, CiliumEndpoints: ceps}
	got, err := Recheck(ctx, in, m, Schedule{Round: 60 * time.Millisecond, Patience: time.Minute, MaxGap: time.Second}, progress)
	if err != nil {
		t.Fatal(err)
	}
	published := readyPublished(t, got)
	if want := checks.CiliumPublishedTarget("default", "web-0"); published.Target != want {
		t.Errorf("target %q, want %q", published.Target, want)
	}
	mu.Lock()
	defer mu.Unlock()
	wantShown := []string{"not published yet: the API server has no CiliumEndpoint default/web-0",
		"the CiliumEndpoint has identity 5, the agent 1234: other nodes would not apply the pod's policy yet"}
	for _, w := range wantShown {
		if !strings.Contains(strings.Join(shown, "\n"), w) {
			t.Errorf("progress never said %q; it said %q", w, shown)
		}
	}
}

// TestRecheckOfCiliumWithoutAReaderStaysPending: a sidecar that cannot read
// CiliumEndpoints never calls the pod ready, and says so.
func TestRecheckOfCiliumWithoutAReaderStaysPending(t *testing.T) {
	s := marker.Store{Dir: filepath.Join(t.TempDir(), "state")}
	m := ciliumMarker(t, s, fakeAgent(t, 1234))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var why string
	_, err := Recheck(ctx, Inputs{Store: s}, m, Schedule{Round: 100 * time.Millisecond, Patience: time.Minute, MaxGap: time.Second}, func(p *marker.Marker) {
		for _, c := range p.Checks {
			if c.Kind == checks.KindCiliumPublished {
				why = c.Why
			}
		}
	})
	if err == nil {
		t.Fatal("Recheck returned ready without a CiliumEndpoints reader")
	}
	if why != "this sidecar cannot read CiliumEndpoints" {
		t.Errorf("progress said %q", why)
	}
	if back, _ := s.Read(marker.Key{Network: "podnet", ContainerID: "c1", IfName: "eth0"}); back == nil || back.State != marker.StatePending {
		t.Errorf("the marker is %+v, want still pending", back)
	}
}

// TestCiliumPublishedNeedsAnIP: an attachment with no IP has nothing the
// CiliumEndpoint could be found to hold, so it is never published.
func TestCiliumPublishedNeedsAnIP(t *testing.T) {
	x := &ciliumPublished{socket: "unix:///nowhere", pod: attachment.Pod{Namespace: "default", Name: "web-0"}, att: &attachment.Attachment{ContainerID: "c1", IfName: "eth0"},
		cilium: &cepSequence{steps: []func() ([]byte, error){answer(cep("c1", 42, 1234))}}}
	why, failed := x.unmet(context.Background())
	if why != "the attachment has no IP to find in the CiliumEndpoint" || !failed {
		t.Errorf("unmet = %q, %v", why, failed)
	}
}

// TestRecheckHoldsForSettleOncePublished: with crossNode's "settle", the
// marker stays pending once the CiliumEndpoint is published, saying it
// holds for a statistical wait, and its ready result says what it rests
// on; a look that finds it gone starts the hold over.
func TestRecheckHoldsForSettleOncePublished(t *testing.T) {
	s := marker.Store{Dir: filepath.Join(t.TempDir(), "state")}
	m := ciliumMarker(t, s, fakeAgent(t, 1234))
	m.Pending.CiliumSettleMs = 300
	ok := answer(cep("c1", 42, 1234, "10.200.0.5"))
	ceps := &cepSequence{steps: []func() ([]byte, error){ok, notFound, ok}}
	var mu sync.Mutex
	var shown []string
	progress := func(p *marker.Marker) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range p.Checks {
			if c.Kind == checks.KindCiliumPublished && !c.Ready {
				shown = append(shown, c.Why)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	got, err := Recheck(ctx, Inputs{Store: s, CiliumEndpoints: ceps}, m, Schedule{Round: 100 * time.Millisecond, Patience: time.Minute, MaxGap: time.Second}, progress)
	if err != nil {
		t.Fatal(err)
	}
	published := readyPublished(t, got)
	want := "published, then held 300ms (crossNode.settle): statistical, whether the other nodes' agents have learned it is not confirmed"
	if diff := cmp.Diff(want, published.Note); diff != "" {
		t.Errorf("ready result's note (-want +got):\n%s", diff)
	}
	if published.Why != "" {
		t.Errorf("ready result still says why not: %q", published.Why)
	}
	// Published, gone, published: the hold restarted at the second, so it
	// ended no sooner than 300 ms after the third read (at least 50 ms in).
	if took := time.Since(start); took < 350*time.Millisecond {
		t.Errorf("ready after %s: the hold did not start over when the CiliumEndpoint went away", took)
	}
	mu.Lock()
	defer mu.Unlock()
	joined := strings.Join(shown, "\n")
	for _, w := range []string{"published; holding for crossNode.settle 300ms after it, a statistical wait for the other nodes' agents, not a confirmation"} {
		if !strings.Contains(joined, w) {
			t.Errorf("progress never said %q; it said %q", w, shown)
		}
	}
}

// TestCiliumPublishedReadsNothingWhileOff: while netready is switched off
// the re-check asks the API server nothing, and says why it waits.
func TestCiliumPublishedReadsNothingWhileOff(t *testing.T) {
	ceps := &cepSequence{steps: []func() ([]byte, error){answer(cep("c1", 42, 1234, "10.200.0.5"))}}
	off := true
	x := &ciliumPublished{socket: "unix:///nowhere", pod: attachment.Pod{Namespace: "default", Name: "web-0"},
		att: &attachment.Attachment{ContainerID: "c1", IfName: "eth0"}, ips: []string{"10.200.0.5"}, cilium: ceps, off: func() bool { return off }}
	why, failed := x.unmet(context.Background())
	if why != "netready is switched off: the CiliumEndpoint is not read until it is on again" || !failed {
		t.Errorf("unmet while off = %q, %v", why, failed)
	}
	if ceps.calls != 0 {
		t.Errorf("%d CiliumEndpoint reads while off, want none", ceps.calls)
	}
	off = false
	if x.unmet(context.Background()); ceps.calls != 1 {
		t.Errorf("%d CiliumEndpoint reads once on again, want 1", ceps.calls)
	}
}

// readyPublished is the Cilium cross-node result of got, which must be
// ready with it met.
func readyPublished(t *testing.T, got *marker.Marker) *marker.CheckResult {
	t.Helper()
	var published *marker.CheckResult
	for i, c := range got.Checks {
		if c.Kind == checks.KindCiliumPublished {
			published = &got.Checks[i]
		}
	}
	if got.State != marker.StateReady || published == nil || !published.Ready {
		t.Fatalf("marker %s with cross-node result %+v, want ready with it met", got.State, published)
	}
	return published
}

// TestSettleHoldSurvivesAReadThatCannotTell: a read that fails during the
// hold (the API server refused it) neither ends the hold nor calls the pod
// ready; the next read that finds the CiliumEndpoint still published, once
// the hold is over, does. Had the failure restarted the hold, the read
// after the new hold would find the CiliumEndpoint gone for good.
func TestSettleHoldSurvivesAReadThatCannotTell(t *testing.T) {
	s := marker.Store{Dir: filepath.Join(t.TempDir(), "state")}
	m := ciliumMarker(t, s, fakeAgent(t, 1234))
	m.Pending.CiliumSettleMs = 300
	refused := func() ([]byte, error) { return nil, fmt.Errorf("forbidden: the test refuses this read") }
	ok := answer(cep("c1", 42, 1234, "10.200.0.5"))
	ceps := &cepSequence{steps: []func() ([]byte, error){ok, refused, ok, notFound}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := Recheck(ctx, Inputs{Store: s, CiliumEndpoints: ceps}, m, Schedule{Round: time.Second, Patience: time.Minute, MaxGap: time.Second}, func(*marker.Marker) {})
	if err != nil {
		t.Fatalf("Recheck: %v (the failed read restarted the hold?)", err)
	}
	readyPublished(t, got)
	if ceps.calls != 3 {
		t.Errorf("%d CiliumEndpoint reads, want 3: published, refused, published", ceps.calls)
	}
}
