package install

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestConversionNeverWritesOverAnotherWritersFile: a .conf becomes
// <name>.conflist only where no file is, or where the file there is a
// conversion the installer made; beside a vendor's conflist (another
// network, a longer chain, keys a conversion never writes) the installer
// refuses, naming both files, and changes nothing, the binary included.
func TestConversionNeverWritesOverAnotherWritersFile(t *testing.T) {
	single := func(name string, mtu int) string {
		return fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"bridge","mtu":%d,"ipam":{"type":"host-local","subnet":"10.200.0.0/24"}}`, name, mtu)
	}
	// converted is what an earlier installer left: the .conf's plugin,
	// with (entry) or without (after --uninstall) netready's entry.
	converted := func(mtu int, entry bool) string {
		e := ""
		if entry {
			e = `,{"type":"netready"}`
		}
		return fmt.Sprintf(`{"cniVersion":"1.0.0","name":"cbr0","plugins":[{"type":"bridge","mtu":%d,"ipam":{"type":"host-local","subnet":"10.200.0.0/24"}}%s]}`, mtu, e)
	}
	vendor := `{"cniVersion":"1.1.0","name":"vendor-net","plugins":[{"type":"ptp","ipam":{"type":"host-local","subnet":"10.200.1.0/24"}},{"type":"portmap","capabilities":{"portMappings":true}}]}`
	for _, tc := range []struct {
		name, conflist string
		wantErr        string // "" converts
		wantMTU        string
	}{
		{name: "no conflist yet", wantMTU: `"mtu":1500`},
		{name: "another network's conflist", conflist: vendor, wantErr: `is the config of network "vendor-net", not "cbr0"`},
		{name: "a longer chain of the same network", conflist: strings.Replace(vendor, "vendor-net", "cbr0", 1), wantErr: "chains 2 plugins besides netready"},
		{name: "a key a conversion never writes", conflist: `{"cniVersion":"1.0.0","name":"cbr0","disableCheck":true,"plugins":[{"type":"bridge"},{"type":"netready"}]}`, wantErr: `has the key "disableCheck"`},
		{name: "not JSON", conflist: `{"cniVersion":`, wantErr: "is not a JSON object"},
		{name: "no plugins", conflist: `{"cniVersion":"1.0.0","name":"cbr0"}`, wantErr: "has no plugins list"},
		{name: "a conversion of another plugin, without netready", conflist: converted(9000, false), wantErr: "holds neither netready's entry nor the plugin of 10-flannel.conf"},
		{name: "an earlier conversion, the .conf rewritten since", conflist: converted(9000, true), wantMTU: `"mtu":1500`},
		{name: "an earlier conversion that --uninstall emptied", conflist: converted(1500, false), wantMTU: `"mtu":1500`},
		{name: "what this conversion writes", conflist: converted(1500, true), wantMTU: `"mtu":1500`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, bin := t.TempDir(), t.TempDir()
			conf, list := filepath.Join(dir, "10-flannel.conf"), filepath.Join(dir, "10-flannel.conflist")
			if err := os.WriteFile(conf, []byte(single("cbr0", 1500)), 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.conflist != "" {
				if err := os.WriteFile(list, []byte(tc.conflist), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			before := readTree(t, dir)
			err := testInstaller(t, Options{ConfDir: dir, BinDir: bin}).ensure()
			if tc.wantErr != "" {
				if !isRefusal(err) || !strings.Contains(err.Error(), tc.wantErr) ||
					!strings.Contains(err.Error(), conf) || !strings.Contains(err.Error(), list) {
					t.Fatalf("ensure = %v; want a refusal naming %s and %s, with %q", err, conf, list, tc.wantErr)
				}
				if diff := cmp.Diff(before, readTree(t, dir)); diff != "" {
					t.Errorf("a refused conversion changed the folder (-before +after):\n%s", diff)
				}
				if len(readTree(t, bin)) != 0 {
					t.Errorf("a refused conversion installed the binary")
				}
				return
			}
			if err != nil {
				t.Fatalf("ensure: %v", err)
			}
			got := readTree(t, dir)
			compact := strings.Join(strings.Fields(got["10-flannel.conflist"]), "")
			if len(got) != 1 || !strings.Contains(compact, tc.wantMTU) || !strings.HasSuffix(compact, `{"type":"netready"}]}`) {
				t.Errorf("folder after the conversion: %v; want only 10-flannel.conflist, with %s and netready last", got, tc.wantMTU)
			}
		})
	}
}

// TestConversionRacingAVendorsWrite: a vendor that writes the conflist
// between the installer's check and its write keeps its file: a new file
// is created only where none is, an earlier conversion replaced only over
// the content checked. The installer reads the folder again and then
// refuses, or converts over its own file.
func TestConversionRacingAVendorsWrite(t *testing.T) {
	vendor := `{"cniVersion":"1.1.0","name":"vendor-net","plugins":[{"type":"ptp","ipam":{"type":"host-local","subnet":"10.200.1.0/24"}}]}`
	own := `{"cniVersion":"1.0.0","name":"cbr0","plugins":[{"type":"bridge","mtu":9000},{"type":"netready"}]}`
	for _, tc := range []struct {
		name, before string // the conflist before the run; "" for none
		wantErr      string
	}{
		{"created meanwhile", "", `is the config of network "vendor-net"`},
		{"an earlier conversion replaced meanwhile", own, `is the config of network "vendor-net"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			conf, list := filepath.Join(dir, "10-flannel.conf"), filepath.Join(dir, "10-flannel.conflist")
			if err := os.WriteFile(conf, []byte(`{"cniVersion":"1.0.0","name":"cbr0","type":"bridge","mtu":1500}`), 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.before != "" {
				if err := os.WriteFile(list, []byte(tc.before), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			in := testInstaller(t, Options{ConfDir: dir, BinDir: t.TempDir()})
			in.beforeWrite = func(string) {
				if err := os.WriteFile(list, []byte(vendor), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := in.ensure()
			if !isRefusal(err) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ensure = %v; want a refusal with %q", err, tc.wantErr)
			}
			got, _ := os.ReadFile(list)
			if string(got) != vendor {
				t.Errorf("%s = %s; want the vendor's %s", list, got, vendor)
			}
			if _, err := os.Stat(conf); err != nil {
				t.Errorf("the .conf went: %v", err)
			}
		})
	}
}
