package config

import (
	"errors"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// FuzzParse: Parse never panics, fails only with code 7 on one line, and
// accepts its own accepted input again; ParseCleanup never fails.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.1.0","name":"podnet","type":"netready"}`,
		`{"cniVersion":"1.1.0","name":"podnet","type":"netready","timeout":"1s","onTimeout":"proceed","checks":[{"kind":"iptables","chain":"C","match":"{{.IP}}"},{"kind":"nftables","table":"t","set":"s"},{"kind":"file","preset":"calico"},{"kind":"http","url":"http://127.0.0.1:1/x"}],"status":{"ipam":"auto","minFree":2,"agents":[{"kind":"file","path":"/x","maxAge":"3s"}]}}`,
		`{"name":"n","timeout":5,"checks":[{"kind":"route","tabel":1}],"status":{"minfree":1}}`,
		`{"name":"n","checks":[{"kind":"file","path":"{{.PodName"}]}`,
		`{"name":"n","cni.dev/valid-attachments":[{"containerID":"a","ifname":"b"}]}`,
		`[]`, `null`, `{"status":null}`, `{"checks":null,"status":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			var e *types.Error
			if !errors.As(err, &e) || e.Code != types.ErrInvalidNetworkConfig {
				t.Fatalf("Parse error %v is not code 7", err)
			}
			for _, r := range e.Msg {
				if r == '\n' {
					t.Fatalf("message spans lines: %q", e.Msg)
				}
			}
		} else if c.Timeout <= 0 || c.Timeout > MaxTimeout {
			t.Fatalf("accepted timeout %v", c.Timeout)
		}
		cl, _ := ParseCleanup(data)
		if cl == nil {
			t.Fatal("ParseCleanup returned nil")
		}
	})
}
