package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestValidateNeedsNoFolder: --validate reads the file and nothing else,
// so it runs on a laptop, where --conf-dir and --bin-dir do not exist.
func TestValidateNeedsNoFolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "e.json")
	os.WriteFile(path, []byte(`{"type":"netready","preset":"calico"}`), 0o444)
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	old := os.Stdout
	os.Stdout = devNull
	defer func() { os.Stdout = old }()
	if code := run([]string{"--validate", path, "--conf-dir", "/nonexistent", "--bin-dir", "/nonexistent"}); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
}
