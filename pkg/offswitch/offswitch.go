// Package offswitch owns netready's off switch for incidents: the
// ConfigMap that turns it on (ConfigMapName, in netready's own namespace,
// which only cluster operators may write), the matchCondition that keeps
// the mutating policy from adding gates while it is on, and the sidecar's
// watch of it, which tells the condition controller and leaves the plugin
// its note in the state folder (statedir.Off).
//
// While the switch is on, on every node: no new pod gets the readiness
// gate, every gated pod is released (True, reason NetreadyOff, one Warning
// Event each), and ADD waits on no check. A node whose sidecar is not
// running keeps the note as it last was; /run's tmpfs clears it at a
// reboot.
package offswitch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/netready/netready/pkg/atomicfile"
	"github.com/netready/netready/pkg/statedir"
)

// ConfigMapName is the ConfigMap whose existence, in netready's namespace,
// switches netready off. Its data are not read.
const ConfigMapName = "netready-off"

// MatchCondition is the name of the mutating policy's matchCondition
// (expression "false") that stops new gates while the switch is on.
const MatchCondition = "netready-off"

// Client reads ConfigMaps; kubeapi.REST in production.
type Client interface {
	ListConfigMaps(ctx context.Context, namespace string, opts metav1.ListOptions) (*corev1.ConfigMapList, error)
	WatchConfigMaps(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error)
}

// Watch follows the switch in namespace until ctx ends: at every change,
// and once its first list has answered, it writes or removes the plugin's
// note in stateDir, then calls set. Until then the note stays as an
// earlier sidecar left it, and set is called once with what it says, so
// that a restart neither drops nor raises the switch on a guess.
func Watch(ctx context.Context, client Client, namespace, stateDir string, set func(off bool), log *slog.Logger) {
	set(Noted(stateDir))
	selector := fields.OneTermEqualSelector("metadata.name", ConfigMapName).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return client.ListConfigMaps(ctx, namespace, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return client.WatchConfigMaps(ctx, namespace, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	apply := func() {
		off := len(inf.GetStore().ListKeys()) > 0
		if err := Note(stateDir, off, time.Now()); err != nil {
			// The sidecar still releases the gates; only ADD still waits.
			log.Error("cannot note the off switch for the plugin", "off", off, "err", err)
		}
		set(off)
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { apply() },
		UpdateFunc: func(_, _ any) {},
		DeleteFunc: func(any) { apply() },
	}); err != nil {
		log.Error("off switch informer", "err", err)
		return
	}
	go inf.Run(ctx.Done())
	log.Info("following the off switch", "configMap", namespace+"/"+ConfigMapName)
	if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		apply() // also removes a note an earlier sidecar left
	}
}

// Noted reports whether the plugin's note says netready is off.
func Noted(stateDir string) bool {
	_, err := os.Lstat(filepath.Join(stateDir, statedir.Off))
	return err == nil
}

// Note writes the plugin's note (off) or removes it. It also removes
// the note's temps that a sidecar killed while writing it left (older
// than statedir.StaleTempAge at now): nothing else sweeps the state
// folder's root, and each start and each turn of the switch comes here.
// A failed sweep does not keep the note from being written.
func Note(stateDir string, off bool, now time.Time) error {
	_, swept := statedir.Sweep(stateDir, statedir.Off, statedir.Modified, now)
	if swept != nil {
		swept = fmt.Errorf("off switch note: %w", swept)
	}
	return errors.Join(note(stateDir, off), swept)
}

func note(stateDir string, off bool) error {
	path := filepath.Join(stateDir, statedir.Off)
	if !off {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("off switch note: %w", err)
		}
		return nil
	}
	if Noted(stateDir) {
		return nil
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return fmt.Errorf("off switch note: %w", err)
	}
	msg := "netready is switched off (ConfigMap " + ConfigMapName + "): ADD waits on no check\n"
	if err := atomicfile.Write(path, []byte(msg), 0o644); err != nil {
		return fmt.Errorf("off switch note: %w", err)
	}
	return nil
}
