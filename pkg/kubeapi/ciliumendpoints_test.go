package kubeapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/netready/netready/pkg/kubeapi"
)

// cep is a CiliumEndpoint as the API server sends it, with fields the
// sidecar does not decode.
const cep = `{"apiVersion":"cilium.io/v2","kind":"CiliumEndpoint","metadata":{"name":"web-0","namespace":"shop","resourceVersion":"%d",
"labels":{"app":"web"},"managedFields":[{"manager":"cilium-agent"}]},
"status":{"id":1234,"state":"ready","identity":{"id":48861,"labels":["k8s:app=web"]},
"networking":{"addressing":[{"ipv4":"10.0.1.200"},{"ipv6":"fd00::5"}],"node":"192.168.1.2"},"policy":{"ingress":{"state":"<status disabled>"}}}}`

// TestCiliumEndpointsListAndWatch: a list answers its resourceVersion, a
// watch from it decodes each event's endpoint into the fields the meter
// reads, and asks for what RetryWatcher asks.
func TestCiliumEndpointsListAndWatch(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.String())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") != "true" {
			fmt.Fprintf(w, `{"apiVersion":"cilium.io/v2","kind":"CiliumEndpointList","metadata":{"resourceVersion":"41","continue":"x"},"items":[`+cep+`]}`, 40)
			return
		}
		fmt.Fprintf(w, `{"type":"ADDED","object":`+cep+"}\n", 42)
		fmt.Fprintf(w, `{"type":"ERROR","object":{"apiVersion":"v1","kind":"Status","status":"Failure","code":410,"reason":"Expired","message":"too old"}}`+"\n")
	}))
	defer srv.Close()
	k, err := kubeapi.NewREST(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := k.ListCiliumEndpoints(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if list.ResourceVersion != "41" {
		t.Errorf("list resourceVersion %q, want 41", list.ResourceVersion)
	}
	timeout := int64(300)
	w, err := k.WatchCiliumEndpoints(ctx, metav1.ListOptions{ResourceVersion: "41", AllowWatchBookmarks: true, TimeoutSeconds: &timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	type got struct {
		Type          watch.EventType
		Key, RV, Node string
		Identity      int64
		IPs           []string
		StatusCode    int32
	}
	var events []got
	for ev := range w.ResultChan() {
		g := got{Type: ev.Type}
		switch o := ev.Object.(type) {
		case *kubeapi.CiliumEndpoint:
			g.Key, g.RV, g.Node, g.Identity, g.IPs = o.Metadata.Namespace+"/"+o.Metadata.Name, o.GetResourceVersion(), o.NodeIP(), o.Identity(), o.IPs()
		case *metav1.Status:
			g.StatusCode = o.Code
		default:
			t.Fatalf("event object %T", ev.Object)
		}
		events = append(events, g)
	}
	want := []got{
		{Type: watch.Added, Key: "shop/web-0", RV: "42", Node: "192.168.1.2", Identity: 48861, IPs: []string{"10.0.1.200", "fd00::5"}},
		{Type: watch.Error, StatusCode: 410},
	}
	if diff := cmp.Diff(want, events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	wantAsked := []string{
		"/apis/cilium.io/v2/ciliumendpoints?limit=1",
		"/apis/cilium.io/v2/ciliumendpoints?allowWatchBookmarks=true&resourceVersion=41&timeoutSeconds=300&watch=true",
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(wantAsked, asked); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}
