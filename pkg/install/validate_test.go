package install

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		file  string // "" reads stdin
		data  string
		want  []string // output lines, after "<path>: "
		wantC int
	}{
		{name: "good entry", file: "e.json", data: `{"type":"netready","preset":"calico","onTimeout":"proceed"}`, want: []string{"ok"}},
		{name: "entry without type", file: "e.json", data: `{"timeout":"3s"}`, want: []string{"ok"}},
		{name: "every problem, one a line", file: "e.json", wantC: 1,
			data: `{"type":"netready","onTimout":"proceed","timeout":"0s","status":{"minFree":-1}}`,
			want: []string{
				`unknown key "onTimout": did you mean "onTimeout"?`,
				`"timeout" "0s" must be > 0 and <= 100s`,
				`status: "minFree" -1 must be >= 0`,
			}},
		{name: "another plugin's entry", file: "e.json", data: `{"type":"bridge"}`, wantC: 1,
			want: []string{`--config: "type" must be "netready", not "bridge"`}},
		{name: "conflist", file: "10-x.conflist", data: `{"cniVersion":"1.0.0","name":"x","plugins":[{"type":"ptp"},{"type":"netready","preset":"cilium"}]}`, want: []string{"ok"}},
		{name: "conflist with a bad entry", file: "10-x.conflist", wantC: 1,
			data: `{"cniVersion":"1.0.0","name":"x","plugins":[{"type":"ptp"},{"type":"netready","preset":"weave"}]}`,
			want: []string{`"preset" "weave" is unknown: use "calico", "cilium" or "ovn-kubernetes"`}},
		{name: "conflist without netready", file: "10-x.conflist", data: `{"cniVersion":"1.0.0","name":"x","plugins":[{"type":"ptp"}]}`, wantC: 1,
			want: []string{`no entry of "type": "netready" in "plugins"`}},
		{name: "netready not last", file: "10-x.conflist", data: `{"cniVersion":"1.0.0","name":"x","plugins":[{"type":"netready"},{"type":"ptp"}]}`, wantC: 1,
			want: []string{`netready's entry must be the last in "plugins": it checks what the plugins before it set up`}},
		{name: "not JSON", file: "e.json", data: `{"type":`, wantC: 1, want: []string{"not a JSON object: unexpected end of JSON input"}},
		{name: "stdin", data: `{"timeout":"1m"}`, want: []string{"ok"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := "-"
			if tt.file != "" {
				path = filepath.Join(t.TempDir(), tt.file)
				os.WriteFile(path, []byte(tt.data), 0o444)
			}
			var out bytes.Buffer
			code := ValidateFile(path, strings.NewReader(tt.data), &out)
			var got []string
			for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				got = append(got, strings.TrimPrefix(l, path+": "))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			if code != tt.wantC {
				t.Errorf("exit code = %d, want %d", code, tt.wantC)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		var out bytes.Buffer
		if code := ValidateFile("/nonexistent/e.json", strings.NewReader(""), &out); code != 1 {
			t.Errorf("exit code = %d, want 1", code)
		}
		if !strings.Contains(out.String(), "no such file") {
			t.Errorf("output %q does not say the file is missing", out.String())
		}
	})
}

// TestConfigFragments: a folder laid out as a ConfigMap volume (keys as
// symlinks into ..data) is merged in name order, later keys winning.
func TestConfigFragments(t *testing.T) {
	write := func(dir string, files map[string]string) {
		data := filepath.Join(dir, "..2026_11_24", "x")
		os.MkdirAll(filepath.Dir(data), 0o755)
		os.Symlink("..2026_11_24", filepath.Join(dir, "..data"))
		for name, body := range files {
			os.WriteFile(filepath.Join(dir, "..2026_11_24", name), []byte(body), 0o644)
			os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name))
		}
	}
	tests := []struct {
		name    string
		files   map[string]string
		want    string
		wantErr string
	}{
		{name: "base, preset and pool", files: map[string]string{
			"10-entry.json":  `{"type":"netready","timeout":"10s","onTimeout":"proceed"}`,
			"50-preset.json": `{"preset":"calico"}`,
			"60-pool.json":   `{"status":{"ipam":"auto"}}`,
		}, want: `{"onTimeout":"proceed","preset":"calico","status":{"ipam":"auto"},"timeout":"10s","type":"netready"}`},
		{name: "a later fragment wins and null removes", files: map[string]string{
			"10-entry.json": `{"type":"netready","timeout":"10s","checks":[{"kind":"address"}],"logFile":"/x"}`,
			"90-site.json":  `{"timeout":"20s","checks":[{"kind":"route"}],"logFile":null}`,
		}, want: `{"checks":[{"kind":"route"}],"timeout":"20s","type":"netready"}`},
		{name: "other files are ignored", files: map[string]string{
			"10-entry.json": `{"type":"netready"}`, "README": "not JSON",
		}, want: `{"type":"netready"}`},
		{name: "a fragment that is not an object", files: map[string]string{
			"10-entry.json": `{"type":"netready"}`, "20-bad.json": `["x"]`,
		}, wantErr: "20-bad.json: must be a JSON object"},
		{name: "no fragment", files: map[string]string{"README": "x"}, wantErr: "holds no *.json fragment"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			write(dir, tt.files)
			got, err := readConfig(dir)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("readConfig = %s, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("merged entry (-want +got):\n%s", diff)
			}
		})
	}
}
