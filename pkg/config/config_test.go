package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/go-cmp/cmp"
)

func conf(extra string) []byte {
	s := `{"cniVersion":"1.1.0","name":"podnet","type":"netready"`
	if extra != "" {
		s += "," + extra
	}
	return []byte(s + "}")
}

func TestParseDefaults(t *testing.T) {
	c, err := Parse(conf(""))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	type view struct {
		Timeout   time.Duration
		OnTimeout string
		StateDir  string
		LogFile   string
		Checks    []CheckConf
		Status    *StatusConf
	}
	want := view{
		Timeout: 10 * time.Second, OnTimeout: "fail", StateDir: "/run/netready",
		Checks: []CheckConf{{Kind: "address"}, {Kind: "route"}},
	}
	got := view{c.Timeout, c.OnTimeout, c.StateDir, c.LogFile, c.Checks, c.Status}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}

func TestParseFull(t *testing.T) {
	c, err := Parse(conf(`"timeout":"1500ms","onTimeout":"proceed","stateDir":"/tmp/x","logFile":"/tmp/x.log",
		"checks":[{"kind":"gateway"},{"kind":"iptables","chain":"FWD","match":"{{.IP}}"},
		{"kind":"nftables","table":"t","set":"pods"},{"kind":"file","preset":"calico"},
		{"kind":"http","url":"unix:///run/a.sock","path":"/ready"},
		{"kind":"http","preset":"cilium"},{"kind":"ovsdb","preset":"ovn-kubernetes"}],
		"status":{"ipam":"auto","agents":[{"kind":"file","path":"/run/hb","maxAge":"30s"}]}`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if c.Timeout != 1500*time.Millisecond || c.OnTimeout != "proceed" {
		t.Errorf("timeout/onTimeout = %v/%q", c.Timeout, c.OnTimeout)
	}
	wantChecks := []CheckConf{
		{Kind: "gateway"},
		{Kind: "iptables", Table: "filter", Chain: "FWD", Match: "{{.IP}}"},
		{Kind: "nftables", Family: "inet", Table: "t", Set: "pods"},
		{Kind: "file", Preset: "calico", Path: DefaultCalicoStatusDir},
		{Kind: "http", URL: "unix:///run/a.sock", Path: "/ready"},
		{Kind: "http", Preset: "cilium", URL: DefaultCiliumSocket},
		{Kind: "ovsdb", Preset: "ovn-kubernetes", Socket: DefaultOVSDBSocket},
	}
	if diff := cmp.Diff(wantChecks, c.Checks); diff != "" {
		t.Errorf("checks (-want +got):\n%s", diff)
	}
	if !c.Status.IPAMAuto() || *c.Status.MinFree != 1 || c.Status.ConfDir != "/etc/cni/net.d" || c.Status.PoolAction != PoolTaint ||
		c.Status.Agents[0].MaxAgeDuration != 30*time.Second {
		t.Errorf("status = %+v", c.Status)
	}
	if !c.Checks[1].UsesIP() || c.Checks[2].UsesIP() {
		t.Errorf("UsesIP: iptables=%v nftables=%v, want true false", c.Checks[1].UsesIP(), c.Checks[2].UsesIP())
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name  string
		extra string
		want  []string // every fragment must be in the message
	}{
		{"unknown kind", `"checks":[{"kind":"ebpf"}]`, []string{`checks[0]`, `unknown check "kind" "ebpf"`}},
		{"missing kind", `"checks":[{}]`, []string{`checks[0]`, `"kind" is required`}},
		{"timeout not a duration", `"timeout":"ten"`, []string{`"timeout" "ten" is not a Go duration`}},
		{"timeout zero", `"timeout":"0s"`, []string{`"timeout" "0s" must be > 0 and <= 100s`}},
		{"timeout negative", `"timeout":"-1s"`, []string{`"timeout" "-1s" must be > 0`}},
		{"timeout over kubelet's share", `"timeout":"101s"`, []string{`"timeout" "101s" must be > 0 and <= 100s`}},
		{"timeout too long", `"timeout":"5m1s"`, []string{`"timeout" "5m1s" must be > 0 and <= 100s`}},
		{"timeout empty", `"timeout":""`, []string{`"timeout" is empty`}},
		{"timeout not a string", `"timeout":10`, []string{`"timeout": must be a string, not a JSON number`}},
		{"bad onTimeout", `"onTimeout":"retry"`, []string{`"onTimeout" "retry" must be "fail" or "proceed"`}},
		{"relative stateDir", `"stateDir":"run/netready"`, []string{`"stateDir" "run/netready" must be an absolute path`}},
		{"relative logFile", `"logFile":"x.log"`, []string{`"logFile" "x.log" must be an absolute path`}},
		{"unknown field in check", `"checks":[{"kind":"address","tabel":"x"}]`, []string{`checks[0]`, `unknown key "tabel"`}},
		{"check key in the wrong case", `"checks":[{"kind":"iptables","Chain":"X","match":"m"}]`, []string{`checks[0]`, `unknown key "Chain": did you mean "chain"?`}},
		{"top-level key in the wrong case", `"onTimeOut":"proceed"`, []string{`unknown key "onTimeOut": did you mean "onTimeout"?`}},
		{"status key in the wrong case", `"status":{"minfree":3}`, []string{`status`, `unknown key "minfree": did you mean "minFree"?`}},
		{"field of another kind", `"checks":[{"kind":"route","chain":"X"}]`, []string{`checks[0] (route)`, `"chain" does not apply to kind "route"`}},
		{"iptables without chain", `"checks":[{"kind":"iptables","match":"x"}]`, []string{`"chain" is required`}},
		{"nftables set and chain", `"checks":[{"kind":"nftables","table":"t","set":"s","chain":"c","match":"m"}]`, []string{`either "set" or "chain"`}},
		{"nftables bad family", `"checks":[{"kind":"nftables","family":"ipx","table":"t","set":"s"}]`, []string{`"family" "ipx"`}},
		{"file relative", `"checks":[{"kind":"file","path":"x"}]`, []string{`"path" "x" must be absolute`}},
		{"file bad preset", `"checks":[{"kind":"file","preset":"cilium"}]`, []string{`"preset" "cilium" is unknown`}},
		{"http not loopback", `"checks":[{"kind":"http","url":"http://10.0.0.1/x"}]`, []string{`the host must be an IP literal in 127.0.0.0/8`}},
		{"http name that looks like loopback", `"checks":[{"kind":"http","url":"http://127.attacker.example/x"}]`, []string{`"http://127.attacker.example/x": the host must be an IP literal`}},
		{"http localhost with a dot", `"checks":[{"kind":"http","url":"http://localhost./x"}]`, []string{`the host must be an IP literal`}},
		{"http mapped v6 loopback", `"checks":[{"kind":"http","url":"http://[::ffff:127.0.0.1]/x"}]`, []string{`the host must be an IP literal`}},
		{"expect without equals or atLeast", `"checks":[{"kind":"http","url":"http://127.0.0.1:1/x","expect":[{"path":"a.b"}]}]`, []string{`expect[0]: "equals" or "atLeast" is required`}},
		{"expect with both", `"checks":[{"kind":"http","url":"http://127.0.0.1:1/x","expect":[{"path":"a","equals":1,"atLeast":"b"}]}]`, []string{`give either "equals" or "atLeast"`}},
		{"expect empty path segment", `"checks":[{"kind":"http","url":"http://127.0.0.1:1/x","expect":[{"path":"a..b","equals":1}]}]`, []string{`"path" "a..b": has an empty segment`}},
		{"expect unknown key", `"checks":[{"kind":"http","url":"http://127.0.0.1:1/x","expect":[{"path":"a","equal":1}]}]`, []string{`unknown key "equal"`}},
		{"expect on a file check", `"checks":[{"kind":"file","path":"/x","expect":[{"path":"a","equals":1}]}]`, []string{`"expect" does not apply to kind "file"`}},
		{"cilium preset with path", `"checks":[{"kind":"http","preset":"cilium","path":"/v1/x"}]`, []string{`do not apply to "preset": "cilium"`}},
		{"cilium preset over http", `"checks":[{"kind":"http","preset":"cilium","url":"http://127.0.0.1:1/"}]`, []string{`serves its API on a unix:// socket`}},
		{"unknown http preset", `"checks":[{"kind":"http","preset":"calico","url":"http://127.0.0.1:1/"}]`, []string{`"preset" "calico" is unknown for kind "http"`}},
		{"status agent expect", `"status":{"agents":[{"kind":"http","url":"http://127.0.0.1:1/","expect":[{"path":"x"}]}]}`, []string{`agents[0]`, `expect[0]`}},
		{"ovsdb without preset", `"checks":[{"kind":"ovsdb"}]`, []string{`kind "ovsdb" needs "preset": "ovn-kubernetes"`}},
		{"ovsdb relative socket", `"checks":[{"kind":"ovsdb","preset":"ovn-kubernetes","socket":"db.sock"}]`, []string{`"socket" "db.sock" must be an absolute path`}},
		{"socket on another kind", `"checks":[{"kind":"file","path":"/x","socket":"/y"}]`, []string{`"socket" does not apply to kind "file"`}},
		{"status agent name", `"status":{"agents":[{"kind":"http","url":"http://localhost.localdomain:9099/"}]}`, []string{`agents[0]`, `the host must be an IP literal`}},
		{"http relative unix socket", `"checks":[{"kind":"http","url":"unix://run/a.sock"}]`, []string{`must be unix:///absolute/path.sock`}},
		{"bad placeholder", `"checks":[{"kind":"iptables","chain":"C","match":"{{.PodIP}}"}]`, []string{`"match"`, `bad placeholder`}},
		{"unknown status key", `"status":{"minimumFree":1}`, []string{`status`, `unknown key "minimumFree"`}},
		{"status ipam not host-local", `"status":{"ipam":{"type":"dhcp"}}`, []string{`only "type": "host-local"`}},
		{"status poolAction", `"status":{"poolAction":"evict"}`, []string{`"poolAction" "evict" must be "taint" (the sidecar taints the node) or "notready" (STATUS fails)`}},
		{"status poolAction in the wrong case", `"status":{"poolaction":"taint"}`, []string{`unknown key "poolaction": did you mean "poolAction"?`}},
		{"status negative minFree", `"status":{"minFree":-1}`, []string{`"minFree" -1 must be >= 0`}},
		{"status agent bad maxAge", `"status":{"agents":[{"kind":"file","path":"/x","maxAge":"soon"}]}`, []string{`agents[0]`, `"maxAge" "soon"`}},
		{"top-level key one letter short", `"onTimout":"proceed"`, []string{`unknown key "onTimout": did you mean "onTimeout"?`}},
		{"top-level key two edits away", `"timout":"5s","chekcs":[]`, []string{`unknown key "timout": did you mean "timeout"?`, `unknown key "chekcs": did you mean "checks"?`}},
		{"near miss in another case", `"StateDr":"/x"`, []string{`unknown key "StateDr": did you mean "stateDir"?`}},
		{"injected key in the wrong case", `"runtimeconfig":{}`, []string{`unknown key "runtimeconfig": did you mean "runtimeConfig"?`}},
		{"preset near miss", `"presets":"calico"`, []string{`unknown key "presets": did you mean "preset"?`}},
		{"unknown preset", `"preset":"weave"`, []string{`"preset" "weave" is unknown: use "calico", "cilium" or "ovn-kubernetes"`}},
		{"preset not a string", `"preset":["calico"]`, []string{`"preset": must be a string`}},
		{"every problem at once", `"timeout":"0s","onTimeout":"x","stateDir":"y"`, []string{`"timeout"`, `"onTimeout"`, `"stateDir"`}},
		{"decode and validation errors together", `"timeout":5,"onTimeout":"x","checks":[{"kind":"file","path":7},{"kind":"route","tabel":1}],"status":{"minFree":-2}`,
			[]string{`"timeout": must be a string`, `"onTimeout" "x"`, `checks[0]: "path" must be a string`, `checks[1]: unknown key "tabel"`, `"minFree" -2 must be >= 0`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(conf(tt.extra))
			var e *types.Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse = %v, want a CNI error", err)
			}
			if e.Code != types.ErrInvalidNetworkConfig {
				t.Errorf("code = %d, want %d", e.Code, types.ErrInvalidNetworkConfig)
			}
			if strings.Contains(e.Msg, "\n") {
				t.Errorf("message spans lines: %q", e.Msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(e.Msg, w) {
					t.Errorf("message %q does not contain %q", e.Msg, w)
				}
			}
		})
	}
}

// TestAcceptedKeys: the keys runtimes inject, and unknown keys that are
// no near miss of netready's, never fail an ADD.
func TestAcceptedKeys(t *testing.T) {
	var extra []string
	for _, k := range InjectedKeys {
		if k != "cniVersion" && k != "name" && k != "type" {
			extra = append(extra, fmt.Sprintf("%q:null", k))
		}
	}
	extra = append(extra, `"vendorOption":true`, `"mtu":1400`, `"kubernetes":{}`)
	if _, err := Parse(conf(strings.Join(extra, ","))); err != nil {
		t.Errorf("Parse with injected and foreign keys: %v", err)
	}
}

func TestPreset(t *testing.T) {
	calico := CheckConf{Kind: KindFile, Preset: PresetCalico, Path: DefaultCalicoStatusDir}
	tests := []struct {
		name  string
		extra string
		want  []CheckConf
	}{
		{"calico alone", `"preset":"calico"`, []CheckConf{{Kind: KindAddress}, {Kind: KindRoute}, calico}},
		{"cilium alone", `"preset":"cilium"`, []CheckConf{{Kind: KindAddress}, {Kind: KindRoute}, {Kind: KindHTTP, Preset: PresetCilium, URL: DefaultCiliumSocket}}},
		{"ovn-kubernetes alone", `"preset":"ovn-kubernetes"`, []CheckConf{{Kind: KindAddress}, {Kind: KindRoute}, {Kind: KindOVSDB, Preset: PresetOVNKubernetes, Socket: DefaultOVSDBSocket}}},
		{"with checks, both apply", `"preset":"calico","checks":[{"kind":"gateway"}]`, []CheckConf{{Kind: KindGateway}, calico}},
		{"the preset's own check is not doubled", `"preset":"calico","checks":[{"kind":"file","preset":"calico","path":"/x"}]`,
			[]CheckConf{{Kind: KindFile, Preset: PresetCalico, Path: "/x"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse(conf(tt.extra))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, c.Checks); diff != "" {
				t.Errorf("checks (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParsePrevResult(t *testing.T) {
	c, err := Parse(conf(""))
	if err != nil {
		t.Fatal(err)
	}
	err = c.ParsePrevResult()
	var e *types.Error
	if !errors.As(err, &e) || e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, "chained plugin") {
		t.Errorf("ParsePrevResult without prevResult = %v, want code 7 naming a chained plugin", err)
	}
}

func TestExpand(t *testing.T) {
	p := Placeholders{IP: "10.1.0.5", ContainerID: "abc", IfName: "eth0", Network: "podnet",
		PodNamespace: "default", PodName: "web-0", PodUID: "u-1"}
	tests := []struct {
		in, want string
		err      string // a part of the error; "" for none
	}{
		{in: "plain", want: "plain"},
		{in: "-s {{.IP}}/32 -j ACCEPT", want: "-s 10.1.0.5/32 -j ACCEPT"},
		{in: "{{ .PodNamespace }}/{{.PodName}} {{.PodUID}} {{.ContainerID}} {{.IfName}} {{.Network}}", want: "default/web-0 u-1 abc eth0 podnet"},
		{in: "{{.IP}}{{.IP}}", want: "10.1.0.510.1.0.5"},
		{in: "ip saddr { 10.0.0.1 } }} {", want: "ip saddr { 10.0.0.1 } }} {"},
		{in: "{{.PodIP}}", err: "bad placeholder {{.PodIP}} (known: {{.IP}} {{.ContainerID}}"},
		{in: "{{IP}}", err: "bad placeholder {{IP}}"},
		{in: "{{.ip}}", err: "bad placeholder {{.ip}}"},
		{in: "{{- .IP -}}", err: "bad placeholder {{- .IP -}}"},
		{in: `{{.IP | printf "%s"}}`, err: "bad placeholder"},
		{in: "-s {{.IP", err: `"{{.IP" has no closing }}`},
	}
	for _, tt := range tests {
		got, err := Expand(tt.in, p)
		if tt.err == "" && err != nil {
			t.Errorf("Expand(%q): %v", tt.in, err)
		}
		if tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("Expand(%q) error = %v, want one containing %q", tt.in, err, tt.err)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Expand(%q) (-want +got):\n%s", tt.in, diff)
		}
	}
}

// TestEveryPlaceholder: each field of Placeholders expands by its own name
// and is listed in the message of a bad placeholder.
func TestEveryPlaceholder(t *testing.T) {
	var p Placeholders
	v := reflect.ValueOf(&p).Elem()
	for i := range v.NumField() {
		v.Field(i).SetString("value-of-" + v.Type().Field(i).Name)
	}
	_, err := Expand("{{.Nope}}", p)
	if err == nil {
		t.Fatal("Expand({{.Nope}}) succeeded")
	}
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if got, err := Expand("{{."+name+"}}", p); err != nil || got != "value-of-"+name {
			t.Errorf("Expand({{.%s}}) = %q, %v; want %q", name, got, err, "value-of-"+name)
		}
		if !strings.Contains(err.Error(), "{{."+name+"}}") {
			t.Errorf("the bad placeholder message does not list {{.%s}}: %v", name, err)
		}
	}
}

func TestUsesIP(t *testing.T) {
	tests := map[string]bool{
		"-s {{.IP}}/32": true, "-s {{ .IP }}/32": true, "{{.PodName}}": false, "plain": false, "{{.IPX}}": false,
	}
	for match, want := range tests {
		c := CheckConf{Kind: KindIPTables, Chain: "C", Match: match}
		if got := c.UsesIP(); got != want {
			t.Errorf("UsesIP with match %q = %v, want %v", match, got, want)
		}
	}
}

func TestParseCleanup(t *testing.T) {
	tests := []struct {
		name         string
		stdin        string
		want         Cleanup
		wantProblems string // "" means none
		wantKeepErr  bool
	}{
		{
			name:  "valid entry",
			stdin: `{"cniVersion":"1.1.0","name":"podnet","type":"netready","stateDir":"/tmp/s","logFile":"/tmp/l"}`,
			want:  Cleanup{Name: "podnet", StateDir: "/tmp/s", LogFile: "/tmp/l"},
		},
		{
			name:         "typo in a check does not matter",
			stdin:        `{"cniVersion":"1.1.0","name":"podnet","type":"netready","checks":[{"kind":"iptables","tabel":"x"}],"timeout":"1h"}`,
			want:         Cleanup{Name: "podnet", StateDir: DefaultStateDir},
			wantProblems: `unknown key "tabel"`,
		},
		{
			name:         "relative stateDir means no marker was ever written",
			stdin:        `{"cniVersion":"1.1.0","name":"podnet","type":"netready","stateDir":"run/x","logFile":"rel.log"}`,
			want:         Cleanup{Name: "podnet"},
			wantProblems: `"stateDir" "run/x"`,
		},
		{
			name:  "keep-list",
			stdin: `{"cniVersion":"1.1.0","name":"podnet","type":"netready","cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]}`,
			want:  Cleanup{Name: "podnet", StateDir: DefaultStateDir, ValidAttachments: []types.GCAttachment{{ContainerID: "a", IfName: "eth0"}}, KeepListGiven: true},
		},
		{
			name:  "empty keep-list: remove every marker",
			stdin: `{"cniVersion":"1.1.0","name":"podnet","type":"netready","cni.dev/valid-attachments":[]}`,
			want:  Cleanup{Name: "podnet", StateDir: DefaultStateDir, ValidAttachments: []types.GCAttachment{}, KeepListGiven: true},
		},
		{
			name:  "null keep-list: remove nothing",
			stdin: `{"cniVersion":"1.1.0","name":"podnet","type":"netready","cni.dev/valid-attachments":null}`,
			want:  Cleanup{Name: "podnet", StateDir: DefaultStateDir},
		},
		{
			name:  "no keep-list: remove nothing",
			stdin: `{"cniVersion":"1.1.0","name":"podnet","type":"netready"}`,
			want:  Cleanup{Name: "podnet", StateDir: DefaultStateDir},
		},
		{
			name:         "unreadable keep-list",
			stdin:        `{"cniVersion":"1.1.0","name":"podnet","type":"netready","cni.dev/valid-attachments":{"containerID":"a"}}`,
			want:         Cleanup{Name: "podnet", StateDir: DefaultStateDir},
			wantProblems: `valid-attachments`,
			wantKeepErr:  true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, problems := ParseCleanup([]byte(tt.stdin))
			if (got.KeepListErr != nil) != tt.wantKeepErr {
				t.Errorf("KeepListErr = %v, want set: %v", got.KeepListErr, tt.wantKeepErr)
			}
			got.KeepListErr = nil
			if diff := cmp.Diff(&tt.want, got); diff != "" {
				t.Errorf("ParseCleanup (-want +got):\n%s", diff)
			}
			switch {
			case tt.wantProblems == "" && problems != nil:
				t.Errorf("problems = %v, want none", problems)
			case tt.wantProblems != "" && (problems == nil || !strings.Contains(problems.Error(), tt.wantProblems)):
				t.Errorf("problems = %v, want one containing %q", problems, tt.wantProblems)
			}
		})
	}
}
