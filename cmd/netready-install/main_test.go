package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
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

// The tests run this test binary as the command itself: main, with its
// exit code, stdout and stderr, as a shell sees them.
const asCommand = "NETREADY_INSTALL_TEST_AS_COMMAND"

func TestMain(m *testing.M) {
	if os.Getenv(asCommand) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// TestEveryUsageErrorNamesTheProblem: the command, run as a shell runs it,
// exits 2 on a wrong call, with a message on stderr naming what is wrong,
// and changes nothing: a stray word is no flag to ignore.
func TestEveryUsageErrorNamesTheProblem(t *testing.T) {
	conf, bin := t.TempDir(), t.TempDir()
	plugin := filepath.Join(t.TempDir(), "netready")
	os.WriteFile(plugin, []byte("#!/bin/true\n"), 0o755)
	list := filepath.Join(conf, "10-net.conflist")
	vendor := `{"cniVersion":"1.1.0","name":"net","plugins":[{"type":"bridge"},{"type":"netready"}]}`
	os.WriteFile(list, []byte(vendor), 0o644)
	dirs := []string{"--conf-dir", conf, "--bin-dir", bin, "--plugin-binary", plugin}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "flag provided but not defined: -bogus\n"},
		{[]string{"--resync=abc"}, `invalid value "abc" for flag -resync: parse error`},
		{[]string{"--mode", "x", "--conf-dir", conf, "--bin-dir", bin, "--plugin-binary", plugin}, `--mode \"x\" must be \"conflist\" or \"plugin-dir\"`},
		{append(dirs, "--uninstall", "false"), `netready-install: unexpected argument "false": it takes flags only, and a true/false flag its value as --flag=false` + "\n"},
		{append(dirs, "extra"), `netready-install: unexpected argument "extra"`},
	} {
		cmd := exec.Command(os.Args[0], tc.args...)
		cmd.Env = append(os.Environ(), asCommand+"=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || stdout.Len() > 0 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%q: %v, stdout %q, stderr %q; want exit 2 and stderr with %q", tc.args, err, stdout.String(), stderr.String(), tc.want)
		}
		if got, _ := os.ReadFile(list); string(got) != vendor {
			t.Errorf("%q changed %s:\n%s", tc.args, list, got)
		}
	}
}
