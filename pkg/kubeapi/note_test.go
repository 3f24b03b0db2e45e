package kubeapi_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/netready/netready/pkg/kubeapi"
	"github.com/netready/netready/pkg/kubeapi/kubeapitest"
)

// TestRecorderCutsOnACharacter: a long note is cut before a character
// that the bound would split, whichever of its bytes the bound falls on:
// the note stays valid UTF-8 within 1024 bytes, as the API requires.
func TestRecorderCutsOnACharacter(t *testing.T) {
	for pad := range 3 {
		client := fake.NewClientset()
		r := kubeapi.NewRecorder(kubeapitest.Fake{C: client}, "node-a", slog.New(slog.NewTextHandler(io.Discard, nil)))
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "n1"}}
		r.Eventf(node, nil, corev1.EventTypeWarning, "NetreadyPoolUnknown", "Count", "%s", strings.Repeat("x", pad)+strings.Repeat("€", 600))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); r.Run(ctx) }()
		var note string
		for deadline := time.Now().Add(5 * time.Second); note == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if list, err := client.EventsV1().Events("default").List(ctx, metav1.ListOptions{}); err == nil && len(list.Items) == 1 {
				note = list.Items[0].Note
			}
		}
		cancel()
		<-done
		if !utf8.ValidString(note) || len(note) > 1024 || len(note) < 1024-utf8.UTFMax || !strings.HasSuffix(note, "€...") {
			t.Errorf("pad %d: note of %d bytes, valid UTF-8 %v, ends %q; want valid, within 1024, ending in a whole € and ...",
				pad, len(note), utf8.ValidString(note), note[max(0, len(note)-8):])
		}
	}
}
