package config

import (
	"errors"
	"strings"
	"testing"
	"text/template"

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

// FuzzExpand: whatever Expand accepts, Go's text/template (which expanded
// placeholders before netready had its own expander) expands to the same
// string, so no accepted configuration changed meaning.
func FuzzExpand(f *testing.F) {
	for _, s := range []string{
		"plain", "-s {{.IP}}/32", "{{ .PodName }}/{{.PodUID}}", "{{.IP}}{{.Network}}", "} }} {", "{{\t.IfName\n}}",
		"{{.PodIP}}", "{{- .IP -}}", "{{.IP", "{{/* c */}}", "{{.ContainerID | len}}",
	} {
		f.Add(s)
	}
	p := Placeholders{IP: "10.1.0.5", ContainerID: "abc", IfName: "eth0", Network: "podnet",
		PodNamespace: "default", PodName: "web-0", PodUID: "u-1"}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := Expand(s, p)
		if err != nil {
			return
		}
		tmpl, err := template.New("").Option("missingkey=error").Parse(s)
		if err != nil {
			t.Fatalf("Expand(%q) = %q, but text/template refuses it: %v", s, got, err)
		}
		var want strings.Builder
		if err := tmpl.Execute(&want, p); err != nil {
			t.Fatalf("Expand(%q) = %q, but text/template fails: %v", s, got, err)
		}
		if got != want.String() {
			t.Fatalf("Expand(%q) = %q, text/template gives %q", s, got, want.String())
		}
	})
}
