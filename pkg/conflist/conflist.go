// Package conflist owns editing a node's CNI configuration folder: finding
// the file the runtime uses, putting the netready entry last in it (or in
// the network's plugin folder), taking it out again, and writing every file
// atomically, on generic JSON so that fields netready does not know survive
// and keep their order.
package conflist

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// PluginType is the type of netready's entry.
const PluginType = "netready"

// File is one CNI configuration file as the runtime reads it.
type File struct {
	Path    string
	Network string
	// List is true for a .conflist; a .conf or .json holds one plugin.
	List bool
	Raw  []byte
	Mode fs.FileMode
	// Plugins are the list's entries (or the single plugin), as written.
	Plugins []json.RawMessage
}

// extensions the runtimes read, in libcni's ConfFiles order (by name).
var extensions = []string{".conf", ".conflist", ".json"}

// IsConfigName reports whether a runtime would read a file of this name.
func IsConfigName(name string) bool {
	return slices.Contains(extensions, filepath.Ext(name))
}

// ErrUnsettled is wrapped by Pick when a file that sorts before the one it
// would edit is not a valid config: the runtime might pick that file once
// it is complete (containerd fails on an invalid first file rather than
// skip it), so the caller must wait, not edit a later file.
var ErrUnsettled = errors.New("an earlier CNI config file is invalid")

// Pick returns the file the runtime would use: the first one by name, or
// the first whose network is network. It returns an error wrapping
// fs.ErrNotExist when there is none, and one wrapping ErrUnsettled when an
// invalid file sorts before it.
func Pick(dir, network string) (*File, error) {
	return find(dir, network, false)
}

// Find returns the first valid file whose network is network, skipping
// invalid ones, as a reader of one network's own config does.
func Find(dir, network string) (*File, error) {
	return find(dir, network, true)
}

func find(dir, network string, skipInvalid bool) (*File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	for _, e := range entries {
		if e.IsDir() || !IsConfigName(e.Name()) {
			continue
		}
		f, err := Load(filepath.Join(dir, e.Name()))
		if err != nil {
			if skipInvalid {
				continue
			}
			return nil, fmt.Errorf("%w: %v; waiting for it to become valid rather than editing a later file", ErrUnsettled, err)
		}
		if network == "" || f.Network == network {
			return f, nil
		}
	}
	what := "no valid CNI config"
	if network != "" {
		what = fmt.Sprintf("no valid CNI config for network %q", network)
	}
	return nil, fmt.Errorf("%s in %s: %w", what, dir, fs.ErrNotExist)
}

// Load reads and validates one file as libcni would.
func Load(path string) (*File, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	f := &File{Path: path, Raw: raw, Mode: info.Mode().Perm(), List: filepath.Ext(path) == ".conflist"}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object: %w", path, err)
	}
	if err := json.Unmarshal(top["name"], &f.Network); err != nil || f.Network == "" {
		return nil, fmt.Errorf("%s: no network name", path)
	}
	if !f.List {
		if pluginType(raw) == "" {
			return nil, fmt.Errorf("%s: no plugin type", path)
		}
		f.Plugins = []json.RawMessage{raw}
		return f, nil
	}
	if err := json.Unmarshal(top["plugins"], &f.Plugins); err != nil || len(f.Plugins) == 0 {
		return nil, fmt.Errorf("%s: no plugins list", path)
	}
	for i, p := range f.Plugins {
		if pluginType(p) == "" {
			return nil, fmt.Errorf("%s: plugins[%d] has no type", path, i)
		}
	}
	return f, nil
}

func pluginType(raw []byte) string {
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(raw, &p) // an entry without a type has none
	return p.Type
}

// HasEntry reports whether netready is in the file's chain.
func (f *File) HasEntry() bool {
	for _, p := range f.Plugins {
		if pluginType(p) == PluginType {
			return true
		}
	}
	return false
}

// Entry returns netready's entry in the file's chain, or nil.
func (f *File) Entry() json.RawMessage {
	for _, p := range f.Plugins {
		if pluginType(p) == PluginType {
			return p
		}
	}
	return nil
}

// ChainEntry returns netready's entry in the chain the runtime builds from
// this file, and the file it was read from: the file's own plugins first,
// then, as libcni 1.3+ appends them unless loadOnlyInlinedPlugins is set,
// the .conf files of <dir>/<network>/ in name order. It returns nil when
// the chain has none, and an error when the plugin folder cannot be read
// (libcni then fails the whole network).
func (f *File) ChainEntry() (json.RawMessage, string, error) {
	if e := f.Entry(); e != nil {
		return e, f.Path, nil
	}
	if ok, _ := f.LoadsPluginDir(); !ok {
		return nil, "", nil
	}
	dir := f.PluginDir()
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("read the plugin folder %s: %w", dir, err)
	}
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".conf" {
			continue
		}
		path := filepath.Join(dir, e.Name())
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, "", err
		}
		if !json.Valid(raw) {
			return nil, "", fmt.Errorf("%s: not valid JSON", path)
		}
		if pluginType(raw) == PluginType {
			return raw, path, nil
		}
	}
	return nil, "", nil
}

// PluginDir is the network's plugin folder, <dir>/<network>.
func (f *File) PluginDir() string {
	return filepath.Join(filepath.Dir(f.Path), f.Network)
}

// PrimaryTypes are the first plugin's type and its ipam's type ("" when
// it has none).
func (f *File) PrimaryTypes() (string, string) {
	if len(f.Plugins) == 0 {
		return "", ""
	}
	var p struct {
		IPAM json.RawMessage `json:"ipam"`
	}
	_ = json.Unmarshal(f.Plugins[0], &p) // Load parsed it already
	return pluginType(f.Plugins[0]), pluginType(p.IPAM)
}

// PrimaryIPAM returns the first plugin's ipam object if it is host-local.
func (f *File) PrimaryIPAM() json.RawMessage {
	if ipam := f.FirstIPAM(); pluginType(ipam) == "host-local" {
		return ipam
	}
	return nil
}

// FirstIPAM returns the first plugin's ipam object, of whatever type, or
// nil.
func (f *File) FirstIPAM() json.RawMessage {
	if len(f.Plugins) == 0 {
		return nil
	}
	var p struct {
		IPAM json.RawMessage `json:"ipam"`
	}
	if json.Unmarshal(f.Plugins[0], &p) != nil {
		return nil
	}
	return p.IPAM
}

// HostLocalIPAM is status.ipam "auto" resolved against this file: the
// host-local ipam of its first plugin, which allocates the pods' addresses. Anything
// else is an error that names what the chain uses instead.
func (f *File) HostLocalIPAM() (json.RawMessage, error) {
	ipam := f.PrimaryIPAM()
	if ipam == nil {
		first, ipamType := f.PrimaryTypes()
		found := "no ipam object"
		if ipamType != "" {
			found = fmt.Sprintf("IPAM %q", ipamType)
		}
		return nil, fmt.Errorf(`ipam "auto": the first plugin of %s (type %q) has %s, not host-local: netready counts only host-local pools, so leave "status.ipam" out (the pool is not watched), or set it to the host-local ipam object of the pods' range`,
			f.Path, first, found)
	}
	if bytes.Contains(ipam, []byte(`"usePodCidr"`)) {
		return nil, fmt.Errorf(`ipam "auto": the first plugin of %s uses host-local with subnet "usePodCidr", which only Calico's plugin resolves (to the node's pod CIDR): set "status.ipam" to a host-local object with the node's pod CIDR instead`, f.Path)
	}
	return ipam, nil
}

// WithEntry returns the conflist content with every netready entry removed
// and entry appended last. A single-plugin file becomes a conflist whose
// first plugin is the original, less its name and cniVersion.
func (f *File) WithEntry(entry json.RawMessage) ([]byte, error) {
	return f.rewrite(&entry)
}

// WithoutEntry returns the content with every netready entry removed, and
// whether there was one.
func (f *File) WithoutEntry() ([]byte, bool, error) {
	out, err := f.rewrite(nil)
	return out, f.HasEntry(), err
}

func (f *File) rewrite(entry *json.RawMessage) ([]byte, error) {
	var plugins []json.RawMessage
	for _, p := range f.Plugins {
		if pluginType(p) != PluginType {
			plugins = append(plugins, p)
		}
	}
	if entry != nil {
		plugins = append(plugins, *entry)
	}
	if len(plugins) == 0 {
		return nil, errors.New("the chain would be empty")
	}
	var top *object
	if f.List {
		var err error
		if top, err = parseObject(f.Raw); err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
	} else {
		// The single plugin keeps every field but the list's own.
		single, err := parseObject(f.Raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		top = &object{}
		for _, k := range []string{"cniVersion", "name"} {
			if v, ok := single.get(k); ok {
				top.set(k, v)
				single.del(k)
			}
		}
		first, err := single.marshal()
		if err != nil {
			return nil, err
		}
		plugins[0] = first
	}
	list, err := json.Marshal(plugins)
	if err != nil {
		return nil, err
	}
	top.set("plugins", list)
	return top.indented()
}

// PluginTypes lists the chain's plugin types and their IPAM plugins' types,
// each once, in chain order: every binary a runtime runs for the network.
func (f *File) PluginTypes() []string {
	var out []string
	add := func(t string) {
		if t != "" && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	for _, p := range f.Plugins {
		add(pluginType(p))
		var withIPAM struct {
			IPAM struct {
				Type string `json:"type"`
			} `json:"ipam"`
		}
		_ = json.Unmarshal(p, &withIPAM) // a plugin without ipam has none
		add(withIPAM.IPAM.Type)
	}
	return out
}

// WithCNIVersion returns a conflist's content with its top-level
// cniVersion set to v, every other key kept as written.
func WithCNIVersion(data []byte, v string) ([]byte, error) {
	top, err := parseObject(data)
	if err != nil {
		return nil, err
	}
	quoted, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	top.set("cniVersion", quoted)
	return top.indented()
}

// indented is the object as a config file holds it: indented by two
// spaces, with a final newline.
func (o *object) indented() ([]byte, error) {
	out, err := o.marshal()
	if err != nil {
		return nil, err
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, out, "", "  "); err != nil {
		return nil, err
	}
	pretty.WriteByte('\n')
	return pretty.Bytes(), nil
}

// ListPath is where a single-plugin file's conflist goes.
func (f *File) ListPath() string {
	if f.List {
		return f.Path
	}
	return strings.TrimSuffix(f.Path, filepath.Ext(f.Path)) + ".conflist"
}

// object is a JSON object that keeps its keys' order and values as written.
type object struct {
	keys   []string
	values map[string]json.RawMessage
}

func parseObject(raw []byte) (*object, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	o := &object{values: map[string]json.RawMessage{}}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		o.set(t.(string), v)
	}
	return o, nil
}

func (o *object) get(k string) (json.RawMessage, bool) {
	v, ok := o.values[k]
	return v, ok
}

func (o *object) set(k string, v json.RawMessage) {
	if o.values == nil {
		o.values = map[string]json.RawMessage{}
	}
	if _, ok := o.values[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.values[k] = v
}

func (o *object) del(k string) {
	delete(o.values, k)
	o.keys = slices.DeleteFunc(o.keys, func(x string) bool { return x == k })
}

func (o *object) marshal() (json.RawMessage, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		key, _ := json.Marshal(k)
		b.Write(key)
		b.WriteByte(':')
		b.Write(o.values[k])
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Entry builds netready's entry from the operator's snippet; the type
// defaults to netready. It adds nothing else: pool checks are opt-in
// ("status": {"ipam": "auto"}), as a full pool has consequences.
func Entry(snippet []byte) (json.RawMessage, error) {
	if len(bytes.TrimSpace(snippet)) == 0 {
		snippet = []byte(`{"type":"netready"}`)
	}
	o, err := parseObject(snippet)
	if err != nil {
		return nil, fmt.Errorf("--config must be a JSON object: %w", err)
	}
	if t, ok := o.get("type"); !ok {
		o.set("type", json.RawMessage(`"netready"`))
	} else if pluginType(snippet) != PluginType {
		return nil, fmt.Errorf(`--config: "type" must be "netready", not %s`, t)
	}
	return o.marshal()
}

// Merged is the entry as the runtime hands it to the plugin: with the
// file's cniVersion and name.
func (f *File) Merged(entry json.RawMessage) ([]byte, error) {
	o, err := parseObject(entry)
	if err != nil {
		return nil, err
	}
	top, err := parseObject(f.Raw)
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"cniVersion", "name"} {
		if v, ok := top.get(k); ok {
			o.set(k, v)
		}
	}
	return o.marshal()
}

// CNIVersion is the file's cniVersion ("" when it has none).
func (f *File) CNIVersion() string {
	var top struct {
		CNIVersion string `json:"cniVersion"`
	}
	_ = json.Unmarshal(f.Raw, &top) // Load parsed it already
	return top.CNIVersion
}

// LoadsPluginDir reports whether libcni (1.3+) would append the network's
// plugin folder to this file's chain, and if not, why.
func (f *File) LoadsPluginDir() (bool, string) {
	if !f.List {
		return false, fmt.Sprintf("%s is a single-plugin .conf; libcni reads the plugin folder only for a .conflist", f.Path)
	}
	var top struct {
		Inlined bool `json:"loadOnlyInlinedPlugins"`
	}
	_ = json.Unmarshal(f.Raw, &top) // Load parsed it already
	if top.Inlined {
		return false, fmt.Sprintf(`%s sets "loadOnlyInlinedPlugins": true, so libcni ignores the plugin folder`, f.Path)
	}
	return true, ""
}
