package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestTempTarget(t *testing.T) {
	tests := []struct {
		name, want string
		ok         bool
	}{
		{".tmp-a_eth0.json.123", "a_eth0.json", true},
		{".tmp-.pool.987654", ".pool", true},
		// An interface name may hold dots: the random suffix is the last part.
		{".tmp-a_eth0.json.x.json.42", "a_eth0.json.x.json", true},
		{"a_eth0.json", "", false},
		{".tmp-nodot", "", false},
		{".tmp-.5", "", false},
	}
	for _, tt := range tests {
		got, ok := TempTarget(tt.name)
		if got != tt.want || ok != tt.ok {
			t.Errorf("TempTarget(%q) = %q, %v; want %q, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

// TestReplace: Replace writes only over the content it expects, never
// creates the file, and never brings back a file removed while it runs
// (here: by the comparison itself, right after the swap).
func TestReplace(t *testing.T) {
	tests := []struct {
		name    string
		before  *string // nil: no file
		same    func(path string, old []byte) bool
		wantErr error
		after   *string // nil: no file
	}{
		{"the expected content", ptr("old"), func(_ string, old []byte) bool { return string(old) == "old" }, nil, ptr("new")},
		{"other content is left", ptr("other"), func(_ string, old []byte) bool { return string(old) == "old" }, ErrChanged, ptr("other")},
		{"no file: none made", nil, func(string, []byte) bool { return true }, fs.ErrNotExist, nil},
		{"removed after the swap stays removed", ptr("old"), func(path string, _ []byte) bool { os.Remove(path); return true }, nil, nil},
		{"removed, then refused, stays removed", ptr("old"), func(path string, _ []byte) bool { os.Remove(path); return false }, ErrChanged, nil},
		// Read "old", then another writer wrote "v1" and, while Replace
		// compares, renames "v2" into place: v2 is the newest, and stays.
		{"a newer write while refusing stays", ptr("v1"), func(path string, old []byte) bool { renameInto(path, "v2"); return string(old) == "old" }, ErrChanged, ptr("v2")},
		{"a newer write after the swap stays", ptr("old"), func(path string, old []byte) bool { renameInto(path, "v2"); return string(old) == "old" }, nil, ptr("v2")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "m.json")
			if tt.before != nil {
				os.WriteFile(path, []byte(*tt.before), 0o600)
			}
			err := Replace(path, []byte("new"), 0o644, func(old []byte) bool { return tt.same(path, old) })
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("Replace = %v, want %v", err, tt.wantErr)
			}
			data, err := os.ReadFile(path)
			switch {
			case tt.after == nil && err == nil:
				t.Errorf("file = %q, want none", data)
			case tt.after != nil && string(data) != *tt.after:
				t.Errorf("file = %q (%v), want %q", data, err, *tt.after)
			}
			if entries, _ := os.ReadDir(dir); len(entries) > 1 || len(entries) == 1 && entries[0].Name() != "m.json" {
				t.Errorf("files left: %v", entries)
			}
		})
	}
}

// TestRemoveIf: RemoveIf removes only the content it expects, and a
// writer that renames new content into place while it compares keeps it.
func TestRemoveIf(t *testing.T) {
	tests := []struct {
		name    string
		before  *string // nil: no file
		same    func(path string, old []byte) bool
		wantErr error
		after   *string // nil: no file
	}{
		{"the expected content", ptr("old"), func(_ string, old []byte) bool { return string(old) == "old" }, nil, nil},
		{"other content stays", ptr("other"), func(_ string, old []byte) bool { return string(old) == "old" }, ErrChanged, ptr("other")},
		{"no file", nil, func(string, []byte) bool { return true }, fs.ErrNotExist, nil},
		{"a newer write while refusing stays", ptr("v1"), func(path string, old []byte) bool { renameInto(path, "v2"); return string(old) == "old" }, ErrChanged, ptr("v2")},
		{"a newer write after the take stays", ptr("old"), func(path string, old []byte) bool { renameInto(path, "v2"); return string(old) == "old" }, nil, ptr("v2")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "10-net.conf")
			if tt.before != nil {
				os.WriteFile(path, []byte(*tt.before), 0o644)
			}
			err := RemoveIf(path, func(old []byte) bool { return tt.same(path, old) })
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("RemoveIf = %v, want %v", err, tt.wantErr)
			}
			data, err := os.ReadFile(path)
			switch {
			case tt.after == nil && err == nil:
				t.Errorf("file = %q, want none", data)
			case tt.after != nil && string(data) != *tt.after:
				t.Errorf("file = %q (%v), want %q", data, err, *tt.after)
			}
			if entries, _ := os.ReadDir(dir); len(entries) > 1 || len(entries) == 1 && entries[0].Name() != "10-net.conf" {
				t.Errorf("files left: %v", entries)
			}
		})
	}
}

// renameInto is how a vendor writes its file: a temp file renamed over it.
func renameInto(path, content string) {
	tmp := path + ".vendor"
	os.WriteFile(tmp, []byte(content), 0o644)
	os.Rename(tmp, path)
}

func ptr(s string) *string { return &s }
