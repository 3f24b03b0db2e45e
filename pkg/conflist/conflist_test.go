package conflist

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const (
	listA = `{"cniVersion":"1.1.0","name":"a","plugins":[{"type":"bridge"}]}`
	listB = `{"cniVersion":"1.0.0","name":"b","plugins":[{"type":"ptp"}]}`
	bad   = `{"name":"broken","plugins":[`
)

func TestPickAndFind(t *testing.T) {
	tests := []struct {
		name     string
		files    map[string]string
		network  string
		wantPick string // file name, or an error fragment after "!"
		wantFind string
	}{
		{"first by name", map[string]string{"20-b.conflist": listB, "10-a.conflist": listA}, "", "10-a.conflist", "10-a.conflist"},
		{"by network", map[string]string{"10-a.conflist": listA, "20-b.conflist": listB}, "b", "20-b.conflist", "20-b.conflist"},
		{"invalid first: wait", map[string]string{"00-bad.conflist": bad, "10-a.conflist": listA}, "", "!an earlier CNI config file is invalid", "10-a.conflist"},
		{"invalid before the network's file: wait", map[string]string{"00-bad.conflist": bad, "20-b.conflist": listB}, "b", "!an earlier CNI config file is invalid", "20-b.conflist"},
		{"invalid after: fine", map[string]string{"10-a.conflist": listA, "99-bad.conflist": bad}, "", "10-a.conflist", "10-a.conflist"},
		{"other extensions ignored", map[string]string{"10-a.conflist.bak": bad, "20-b.conflist": listB}, "", "20-b.conflist", "20-b.conflist"},
		{"none", map[string]string{}, "", "!no valid CNI config", "!no valid CNI config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeFiles(t, tt.files)
			check := func(verb string, f *File, err error, want string) {
				if strings.HasPrefix(want, "!") {
					if err == nil || !strings.Contains(err.Error(), want[1:]) {
						t.Errorf("%s = %v, %v; want an error containing %q", verb, f, err, want[1:])
					}
					return
				}
				if err != nil {
					t.Fatalf("%s: %v", verb, err)
				}
				if got := filepath.Base(f.Path); got != want {
					t.Errorf("%s = %s, want %s", verb, got, want)
				}
			}
			f, err := Pick(dir, tt.network)
			check("Pick", f, err, tt.wantPick)
			f, err = Find(dir, tt.network)
			check("Find", f, err, tt.wantFind)
		})
	}
	if _, err := Pick(writeFiles(t, map[string]string{"00-bad.conflist": bad}), ""); !errors.Is(err, ErrUnsettled) {
		t.Errorf("Pick with only a bad file = %v, want ErrUnsettled", err)
	}
	if _, err := Pick(t.TempDir(), ""); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Pick in an empty folder = %v, want fs.ErrNotExist", err)
	}
}

func TestMergedAndVersion(t *testing.T) {
	dir := writeFiles(t, map[string]string{"10-a.conflist": listA})
	f, err := Load(filepath.Join(dir, "10-a.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	merged, err := f.Merged(json.RawMessage(`{"type":"netready","timeout":"5s","name":"ignored"}`))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	json.Unmarshal(merged, &got)
	want := map[string]any{"type": "netready", "timeout": "5s", "name": "a", "cniVersion": "1.1.0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Merged (-want +got):\n%s", diff)
	}
	if v := f.CNIVersion(); v != "1.1.0" {
		t.Errorf("CNIVersion = %q", v)
	}
}

func TestLoadsPluginDir(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"10-a.conflist":     listA,
		"20-i.conflist":     `{"cniVersion":"1.1.0","name":"i","loadOnlyInlinedPlugins":true,"plugins":[{"type":"bridge"}]}`,
		"30-single.conf":    `{"cniVersion":"1.1.0","name":"s","type":"bridge"}`,
		"40-false.conflist": `{"cniVersion":"1.1.0","name":"f","loadOnlyInlinedPlugins":false,"plugins":[{"type":"bridge"}]}`,
	})
	for name, want := range map[string]bool{"10-a.conflist": true, "20-i.conflist": false, "30-single.conf": false, "40-false.conflist": true} {
		f, err := Load(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if ok, why := f.LoadsPluginDir(); ok != want || (!ok && why == "") {
			t.Errorf("%s: LoadsPluginDir = %v %q, want %v with a reason when false", name, ok, why, want)
		}
	}
}

func TestEntry(t *testing.T) {
	tests := []struct {
		snippet, want, wantErr string
	}{
		{"", `{"type":"netready"}`, ""},
		{`{"timeout":"5s"}`, `{"timeout":"5s","type":"netready"}`, ""},
		{`{"type":"netready","status":{"minFree":2}}`, `{"type":"netready","status":{"minFree":2}}`, ""},
		{`{"type":"bridge"}`, "", `"type" must be "netready"`},
		{`[1]`, "", "must be a JSON object"},
	}
	for _, tt := range tests {
		got, err := Entry([]byte(tt.snippet))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Entry(%s) = %s, %v; want error %q", tt.snippet, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("Entry(%s) = %s, %v; want %s", tt.snippet, got, err, tt.want)
		}
	}
}

// FuzzEdit: any file that loads can take the entry and give it back: the
// result loads, holds netready exactly once and last, keeps every other
// plugin in order, and removing the entry again leaves no netready.
func FuzzEdit(f *testing.F) {
	for _, s := range []string{listA, listB,
		`{"cniVersion":"1.1.0","name":"c","plugins":[{"type":"netready"},{"type":"bridge","x":{"y":[1,2]}},{"type":"netready"}]}`,
		`{"cniVersion":"0.4.0","name":"s","type":"flannel","delegate":{"isDefaultGateway":true}}`,
		`{"name":"u","plugins":[{"type":"a"}],"unknown":{"keep":"me"}}`,
	} {
		f.Add([]byte(s), true)
	}
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"s","type":"bridge"}`), false)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte, list bool) {
		name := "x.conflist"
		if !list {
			name = "x.conf"
		}
		path := filepath.Join(dir, name)
		os.WriteFile(path, data, 0o644)
		defer os.Remove(path)
		file, err := Load(path)
		if err != nil {
			return
		}
		out, err := file.WithEntry(json.RawMessage(`{"type":"netready"}`))
		if err != nil {
			return // e.g. only netready entries: the chain would be empty
		}
		outPath := filepath.Join(dir, "out.conflist")
		os.WriteFile(outPath, out, 0o644)
		defer os.Remove(outPath)
		edited, err := Load(outPath)
		if err != nil {
			t.Fatalf("the edited file does not load: %v\n%s", err, out)
		}
		types := func(f *File) []string {
			var ts []string
			for _, p := range f.Plugins {
				ts = append(ts, pluginType(p))
			}
			return ts
		}
		var others []string
		for _, ty := range types(file) {
			if ty != PluginType {
				others = append(others, ty)
			}
		}
		if diff := cmp.Diff(append(others, PluginType), types(edited)); diff != "" {
			t.Fatalf("plugins after WithEntry (-want +got):\n%s", diff)
		}
		if edited.Network != file.Network {
			t.Fatalf("network %q became %q", file.Network, edited.Network)
		}
		if len(others) == 0 {
			return // netready alone: taking it out would leave an empty chain
		}
		back, had, err := edited.WithoutEntry()
		if err != nil || !had || strings.Contains(string(back), `"type": "netready"`) {
			t.Fatalf("WithoutEntry = %s, %v, %v", back, had, err)
		}
	})
}
