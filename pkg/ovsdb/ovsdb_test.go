package ovsdb

import (
	"encoding/json"
	"testing"
)

func TestMapValue(t *testing.T) {
	col := json.RawMessage(`["map",[["iface-id","default_web-0"],["ovn-installed","true"],["sandbox","abc"]]]`)
	tests := []struct {
		key, want string
		ok        bool
	}{
		{"ovn-installed", "true", true},
		{"iface-id", "default_web-0", true},
		{"iface-id-ver", "", false},
	}
	for _, tt := range tests {
		if got, ok := MapValue(col, tt.key); got != tt.want || ok != tt.ok {
			t.Errorf("MapValue(%s) = %q %v, want %q %v", tt.key, got, ok, tt.want, tt.ok)
		}
	}
	for _, bad := range []string{`["set",[]]`, `"x"`, `["map",{}]`, `null`} {
		if _, ok := MapValue(json.RawMessage(bad), "k"); ok {
			t.Errorf("MapValue(%s) found a value", bad)
		}
	}
}
