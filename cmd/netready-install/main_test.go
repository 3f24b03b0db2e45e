package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateNeedsNoFolder: --validate reads the file and nothing else,
// so it runs on a laptop, where --conf-dir and --bin-dir do not exist.
func TestValidateNeedsNoFolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "e.json")
	os.WriteFile(path, []byte(`{"type":"netready","preset":"calico"}`), 0o444)
	if code := run([]string{"--validate", path, "--conf-dir", "/nonexistent", "--bin-dir", "/nonexistent"}, io.Discard, io.Discard); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
}

// TestHelp: --help and -h are an answer (the usage on stdout, exit 0,
// nothing changed); a wrong flag is an error (stderr, exit 2).
func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		code       int
		out, noise string
	}{
		{[]string{"--help"}, 0, "-conf-dir", ""},
		{[]string{"-h"}, 0, "Usage: netready-install", ""},
		{[]string{"--conf-dir", "/nonexistent", "-help"}, 0, "-cni-version", ""},
		{[]string{"--bogus"}, 2, "", "Usage: netready-install"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String(), tc.out) || !strings.Contains(stderr.String(), tc.noise) ||
			(tc.code == 0 && stderr.Len() > 0) || (tc.code != 0 && stdout.Len() > 0) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q", tc.args, code, stdout.String(), stderr.String(), tc.code, tc.out, tc.noise)
		}
	}
}
