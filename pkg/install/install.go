package install

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/pkg/version"
	"github.com/fsnotify/fsnotify"

	"github.com/netready/netready/pkg/atomicfile"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/conflist"
	"github.com/netready/netready/pkg/pool"
)

// installer keeps netready in one node's CNI configuration.
type installer struct {
	opts Options
	log  *slog.Logger
	// written holds what this process last wrote to each path, so that
	// events of its own writes are told apart from another agent's.
	written map[string][]byte
	// fight tracks another agent that keeps removing the entry, and the
	// backoff from it.
	fight fight
	// binaryOK: the binary is in place; each resync checks it again,
	// rather than every config event reading the binary and its copy.
	binaryOK bool
	// warned holds the files (and versions) already warned about.
	warned map[string]bool
	// beforeWrite, when set, runs between reading a config and writing
	// what was made from it; beforeRemove, between writing the conflist
	// made from a .conf and removing the .conf: tests put a vendor's
	// rewrite there.
	beforeWrite, beforeRemove func(path string)
	// versionResets counts, per file, the rewrites that kept the entry
	// but reset the cniVersion that --cni-version auto raised.
	versionResets map[string]int
	now           func() time.Time
	// The entry's stateDir and network as last read, where the sidecar
	// finds the installer's notes.
	lastStateDir, lastNetwork string
}

// changedRetries bounds how often one ensure or uninstall reads a config
// again because it changed between the read and the write; past it, the
// next event or resync tries again.
const changedRetries = 5

func newInstaller(o Options, log *slog.Logger) *installer {
	return &installer{opts: o, log: log, written: map[string][]byte{}, warned: map[string]bool{}, versionResets: map[string]int{}, now: time.Now}
}

// refusal is a problem that waiting cannot fix; the installer exits 1.
type refusal struct{ error }

func refuse(format string, args ...any) error {
	return refusal{fmt.Errorf(format, args...)}
}

// isRefusal reports whether err is a refusal.
func isRefusal(err error) bool {
	var r refusal
	return errors.As(err, &r)
}

// waitable reports errors that a later event or resync may cure: no config
// yet, or an earlier file that is not valid yet.
func waitable(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, conflist.ErrUnsettled)
}

// installOnce waits for a config, then installs.
func (in *installer) installOnce(ctx context.Context) error {
	if in.opts.WaitTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, in.opts.WaitTimeout)
		defer cancel()
	}
	w, err := in.newWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	for {
		err := in.ensure()
		if !waitable(err) {
			return err
		}
		in.log.Warn("waiting for the CNI config the runtime uses", "dir", in.opts.ConfDir, "network", in.opts.Network, "why", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up waiting: %w", err)
		case <-w.Events:
		case <-time.After(5 * time.Second):
		}
	}
}

// ensure copies the binary and puts the entry in place; it writes nothing
// that already holds the right bytes. It returns an error wrapping
// fs.ErrNotExist while there is no config to install into, one wrapping
// conflist.ErrUnsettled while an earlier file is invalid, and a refusal
// when the entry or the mode cannot work with the runtime's file, or a
// .conf's conflist would go over another writer's file.
func (in *installer) ensure() error {
	// A config that cannot take the entry changes nothing, the binary
	// included.
	if _, _, err := in.prepare(); err != nil {
		return err
	}
	// The binary next: copying and comparing it takes long, so the
	// config is read again after it, and written only over what was read.
	if !in.binaryOK {
		if err := in.copyBinary(); err != nil {
			return err
		}
		in.binaryOK = true
	}
	return in.untilUnchanged("adding its entry", in.ensureOnce)
}

// untilUnchanged runs edit again while it reports that a config changed
// under it (atomicfile.ErrChanged), at most changedRetries times.
func (in *installer) untilUnchanged(what string, edit func() error) error {
	var err error
	for range changedRetries {
		if err = edit(); !errors.Is(err, atomicfile.ErrChanged) {
			return err
		}
		in.log.Info("a CNI config changed while netready was "+what+"; reading it again", "err", err)
	}
	return err
}

// ensureOnce reads the runtime's config and writes it back with the entry,
// only over the very content it read: a vendor's rewrite in between (a new
// MTU, IPAM or token) is never lost. It returns an error wrapping
// atomicfile.ErrChanged when the file changed meanwhile.
func (in *installer) ensureOnce() error {
	f, entry, err := in.prepare()
	if err != nil {
		return err
	}
	if in.opts.Mode == ModePluginDir {
		in.warnOldVersion(f)
		changed, err := in.ensurePluginDir(f, entry)
		if err != nil {
			return err
		}
		in.settled(changed)
		return nil
	}
	data, err := f.WithEntry(entry)
	if err != nil {
		return err
	}
	data, raised, err := in.raiseVersion(f, data)
	if err != nil {
		return err
	}
	if !raised {
		in.warnOldVersion(f)
	}
	// A rewrite that kept the entry (a vendor resetting cniVersion) took
	// nothing out: it is no revert, and never leads to a backoff.
	kept := holdsEntry(f, entry)
	if kept && raised {
		in.noteVersionReset(f)
	}
	target := f.ListPath()
	var changed bool
	if target == f.Path {
		if in.beforeWrite != nil {
			in.beforeWrite(f.Path)
		}
		changed, err = in.replace(f, data, !kept)
	} else {
		changed, err = in.writeConverted(f, target, data)
	}
	if err != nil {
		return err
	}
	if target != f.Path {
		if err := in.removeConverted(f, target, data); err != nil {
			return err
		}
	}
	if changed {
		in.log.Info("netready is last in the chain", "file", target, "network", f.Network)
	}
	in.settled(changed)
	return nil
}

// prepare reads the config the runtime uses and the entry, and checks that
// the two work together.
func (in *installer) prepare() (*conflist.File, json.RawMessage, error) {
	f, err := conflist.Pick(in.opts.ConfDir, in.opts.Network)
	if err != nil {
		return nil, nil, err
	}
	entry, err := conflist.Entry(in.opts.snippet)
	if err != nil {
		return nil, nil, refusal{err}
	}
	// The runtime hands the plugin the entry with the file's name and
	// cniVersion: validate exactly that, with the plugin's own rules.
	merged, err := f.Merged(entry)
	if err != nil {
		return nil, nil, refusal{err}
	}
	conf, err := config.Parse(merged)
	if err != nil {
		return nil, nil, refuse("%s: %s", f.Path, config.InvalidMessage(err))
	}
	in.lastStateDir, in.lastNetwork = conf.StateDir, conf.Name
	// "auto" counts the pool of the chain's first plugin: a chain whose
	// pool netready cannot count would leave it unwatched while the entry
	// says it is.
	if conf.Status != nil && conf.Status.IPAMAuto() {
		ipam, err := pool.AutoIPAM(f)
		if err != nil {
			return nil, nil, refusal{err}
		}
		in.log.Info(`status.ipam "auto": counting the pool of the chain's first plugin`, "file", f.Path, "source", pool.TypeOf(ipam))
	}
	if in.opts.Mode == ModePluginDir {
		if ok, why := f.LoadsPluginDir(); !ok {
			return nil, nil, refuse("--mode plugin-dir: %s; use --mode conflist", why)
		}
	} else if !f.List {
		if _, err := checkConvertTarget(f, f.ListPath()); err != nil {
			return nil, nil, err
		}
	}
	return f, entry, nil
}

// minVerbsVersion is the first cniVersion for which runtimes call STATUS
// and GC.
const minVerbsVersion = "1.1.0"

// warnOldVersion warns, once per file and version, that runtimes never
// call STATUS or GC for a conflist below 1.1.0. It never changes the
// version: some main plugins break on a version they do not know.
func (in *installer) warnOldVersion(f *conflist.File) {
	v := f.CNIVersion()
	if ok, err := version.GreaterThanOrEqualTo(v, minVerbsVersion); err == nil && ok {
		return
	}
	key := f.Path + "@" + v
	if in.warned[key] {
		return
	}
	in.warned[key] = true
	in.log.Warn(fmt.Sprintf("%s has cniVersion %q, below %s: runtimes never call STATUS or GC for it, so netready cannot report pool or agent problems and stale markers wait for DEL. ADD, CHECK and DEL work. netready leaves cniVersion as the vendor wrote it: raise it in the network plugin's own config if that plugin supports %s, or run netready-install with --cni-version auto",
		f.Path, v, minVerbsVersion, minVerbsVersion))
}

// write stores data at path (netready's own plugin-dir file) if it
// differs, and notes reverts: a rewrite of a file this process had written.
func (in *installer) write(path string, data []byte, mode fs.FileMode) (bool, error) {
	changed, err := atomicfile.WriteIfChanged(path, data, mode)
	if err != nil {
		return false, err
	}
	if changed {
		if _, before := in.written[path]; before {
			// Written already: the revert counts, the write
			// stands.
			in.noteRevert(path)
		}
		in.written[path] = data
	}
	return changed, nil
}

// replace writes data over the config f was read from, only if the file
// still holds what was read (atomicfile.Replace). With revert, a rewrite
// of a file this process wrote counts as a revert, as in write, and may
// make it back off; uninstall and a rewrite that kept the entry never do.
// It returns an error wrapping atomicfile.ErrChanged when the file changed
// meanwhile, and false when data is what it holds already or it backs off.
func (in *installer) replace(f *conflist.File, data []byte, revert bool) (bool, error) {
	if bytes.Equal(data, f.Raw) {
		return false, nil
	}
	if _, before := in.written[f.Path]; before && revert && in.noteRevert(f.Path) {
		// Backing off: the vendor's file stays as the vendor wrote it.
		return false, nil
	}
	err := atomicfile.Replace(f.Path, data, f.Mode, func(old []byte) bool { return bytes.Equal(old, f.Raw) })
	if errors.Is(err, fs.ErrNotExist) {
		// Removed meanwhile: read the folder again.
		err = fmt.Errorf("%s went away: %w", f.Path, atomicfile.ErrChanged)
	}
	if err != nil {
		return false, err
	}
	in.written[f.Path] = data
	return true, nil
}

// copyBinary puts the plugin into the bin folder atomically.
func (in *installer) copyBinary() error {
	data, err := os.ReadFile(in.opts.PluginBinary)
	if err != nil {
		return fmt.Errorf("read plugin binary: %w", err)
	}
	changed, err := atomicfile.WriteIfChanged(filepath.Join(in.opts.BinDir, conflist.PluginType), data, 0o755)
	if err != nil {
		return fmt.Errorf("install plugin binary: %w", err)
	}
	if changed {
		in.log.Info("installed the plugin binary", "path", filepath.Join(in.opts.BinDir, conflist.PluginType))
	}
	return nil
}

// newWatcher watches the config folder (and, in plugin-dir mode, the
// network's plugin folder once it exists).
func (in *installer) newWatcher() (*fsnotify.Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if err := w.Add(in.opts.ConfDir); err != nil {
		w.Close()
		return nil, fmt.Errorf("watch %s: %w", in.opts.ConfDir, err)
	}
	return w, nil
}

// debounce lets a burst of events (write, rename, remove) settle.
const debounce = 20 * time.Millisecond

// watch keeps the entry in place (with Uninstall: out) until ctx ends:
// inotify events, a re-check right after the watch is armed, and a
// periodic resync as a safety net.
func (in *installer) watch(ctx context.Context) error {
	w, err := in.newWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	resync := time.NewTicker(in.opts.Resync)
	defer resync.Stop()
	waiting := false
	apply, stopping := in.ensure, "stopping; the entry stays in place"
	if in.opts.Uninstall {
		// An uninstall DaemonSet: the entry stays out while it runs, even
		// if a late installer or a vendor's copy brings it back.
		apply, stopping = in.uninstall, "stopping; the entry stays out"
	}
	check := func() error {
		if !in.opts.Uninstall && in.backingOff() {
			return nil
		}
		err := apply()
		switch {
		case waitable(err):
			if !waiting {
				in.log.Warn("waiting for the CNI config the runtime uses", "dir", in.opts.ConfDir, "network", in.opts.Network, "why", err)
			}
			waiting = true
			return nil
		case isRefusal(err):
			return err
		case err != nil:
			// A primary writing its file non-atomically can be caught
			// half-written; the next event or resync tries again.
			in.log.Warn("could not install; will retry", "err", err)
			return nil
		}
		waiting = false
		if in.opts.Mode == ModePluginDir && !in.opts.Uninstall {
			if f, err := conflist.Pick(in.opts.ConfDir, in.opts.Network); err == nil {
				if err := w.Add(filepath.Join(in.opts.ConfDir, f.Network)); err != nil {
					in.log.Warn("cannot watch the network's plugin folder; the resync keeps it", "err", err)
				}
			}
		}
		return nil
	}
	if err := check(); err != nil {
		return err
	}
	var settle <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			in.log.Info(stopping)
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("inotify watch closed")
			}
			if in.ownEvent(ev) {
				continue
			}
			settle = time.After(debounce)
		case err := <-w.Errors:
			in.log.Warn("inotify", "err", err)
			settle = time.After(debounce)
		case <-settle:
			settle = nil
			if err := check(); err != nil {
				return err
			}
		case <-resync.C:
			in.binaryOK = false
			if err := check(); err != nil {
				return err
			}
		}
	}
}

// ownEvent reports events that this process's own writes caused: its temp
// files, and files that hold exactly what it wrote.
func (in *installer) ownEvent(ev fsnotify.Event) bool {
	base := filepath.Base(ev.Name)
	if len(base) > 0 && base[0] == '.' {
		return true
	}
	want, ok := in.written[ev.Name]
	if !ok || ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 {
		return false
	}
	got, err := os.ReadFile(ev.Name)
	return err == nil && string(got) == string(want)
}

// Run installs (or uninstalls) once, or with o.Watch keeps the entry in
// place until ctx ends. A bad entry is refused before anything is written.
func Run(ctx context.Context, o Options, log *slog.Logger) error {
	if !o.Uninstall {
		if err := validateEntry(o.snippet); err != nil {
			return fmt.Errorf("nothing was written: %w", err)
		}
	}
	in := newInstaller(o, log)
	var err error
	switch {
	case o.Uninstall && !o.Watch:
		err = in.uninstall()
	case o.Watch:
		// A stop is a restart or an upgrade, not an uninstall: the entry
		// stays.
		err = in.watch(ctx)
	default:
		err = in.installOnce(ctx)
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
