package marker

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzReadFile: reading any bytes never panics, and a marker that reads
// back always names the attachment its file is named for.
func FuzzReadFile(f *testing.F) {
	good := `{"version":1,"network":"podnet","containerID":"4f1c","ifName":"eth0","ips":["10.1.0.5/24"],"state":"ready","createdAt":"2026-11-21T12:00:00.000000001Z","checks":[]}`
	for _, s := range []string{good, `{}`, `{"version":1,"network":"podnet","containerID":"x","ifName":"eth0","state":"ready"}`,
		`{"version":1,"network":"podnet","containerID":"4f1c","ifName":"eth0","state":"pending","createdAt":"bad"}`, `[`, ``} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	path := filepath.Join(dir, "podnet", "4f1c_eth0.json")
	os.MkdirAll(filepath.Dir(path), 0o755)
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := ReadFile(path)
		if err != nil {
			return
		}
		k := Key{Network: m.Network, ContainerID: m.ContainerID, IfName: m.IfName}
		if k.FileName() != "4f1c_eth0.json" || m.Network != "podnet" {
			t.Fatalf("trusted a marker naming %+v from %s", k, path)
		}
		if m.State != StateReady && m.State != StatePending {
			t.Fatalf("trusted state %q", m.State)
		}
		if _, err := m.Attachment(); err != nil {
			return
		}
	})
}
