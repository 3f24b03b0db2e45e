package watch

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/netready/netready/pkg/pool"
)

// TestClusterSources: a source is made at its first need, once, and runs
// until the sidecar stops; an unreachable API server is a count that
// cannot tell, and a type netready cannot count from the API server is
// an error, never a crash.
func TestClusterSources(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newClusterSources(ctx, &rest.Config{Host: "http://127.0.0.1:1"}, "n1", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(c.made) != 0 {
		t.Fatalf("sources made before any was asked for: %v", c.made)
	}
	for _, typ := range []string{"ovn-kubernetes", "calico-ipam"} {
		a, err := c.get(typ)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		b, _ := c.get(typ)
		if a != b || a.Type() != typ {
			t.Errorf("%s: made twice, or of type %s", typ, a.Type())
		}
		if cnt := a.Count(ctx, pool.Scope{IPv4: true}); cnt.Unknown == "" || cnt.Exhausted(1) != nil {
			t.Errorf("%s with no API server: %+v, want cannot tell", typ, cnt)
		}
	}
	if _, err := c.get("dhcp"); err == nil || !strings.Contains(err.Error(), `cannot count a pool of type "dhcp"`) {
		t.Errorf("dhcp: %v", err)
	}
}

// TestClusterSourceRelease: a released source stops its watches and is
// forgotten, so the next need makes a new one.
func TestClusterSourceRelease(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newClusterSources(ctx, &rest.Config{Host: "http://127.0.0.1:1"}, "n1", slog.New(slog.NewTextHandler(io.Discard, nil)))
	a, err := c.get("calico-ipam")
	if err != nil {
		t.Fatal(err)
	}
	r, ok := a.(Releaser)
	if !ok {
		t.Fatalf("%T is not a Releaser: the pool watch could never stop its watches", a)
	}
	r.Release()
	if len(c.made) != 0 {
		t.Errorf("released, still made: %v", c.made)
	}
	if b, _ := c.get("calico-ipam"); b == a {
		t.Error("the released source was handed out again")
	}
}
