package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestHelp: --help is an answer (stdout, exit 0); a wrong call is an error
// (stderr, exit 2), and so is a bad value, before anything starts.
func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		code       int
		out, noise string
	}{
		{[]string{"--help"}, 0, "-not-in-effect-hold-max", ""},
		{[]string{"-h"}, 0, "-unobserved-grace", ""},
		{[]string{"-help"}, 0, "Usage of netready-sidecar", ""},
		{[]string{"--bogus"}, 2, "", "Usage of netready-sidecar"},
		{[]string{"--node-name", "n", "--require-scope", "false"}, 2, "", `netready-sidecar: unexpected argument "false": it takes flags only, and a true/false flag its value as --flag=false`},
		{[]string{"--node-name", "n", "--install-backoff-hold-max", "-1s"}, 2, "", "--not-in-effect-hold-max -1s must be from 0 (holds no pod) to 2m0s"},
		{[]string{"--node-name", "n", "--not-in-effect-hold-max", "15m"}, 2, "", "--not-in-effect-hold-max 15m0s must be from 0 (holds no pod) to 2m0s"},
		{[]string{"--help"}, 0, "so measure on a few nodes", ""},
		{[]string{"--node-name", "n", "--measure-cilium-propagation", "in (x"}, 2, "", `--measure-cilium-propagation \"in (x\" is not a label selector`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String(), tc.out) || !strings.Contains(stderr.String(), tc.noise) ||
			(tc.code == 0 && stderr.Len() > 0) || (tc.code != 0 && stdout.Len() > 0) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q", tc.args, code, stdout.String(), stderr.String(), tc.code, tc.out, tc.noise)
		}
	}
}
