package config

import (
	"reflect"
	"testing"
)

// TestExpandedFillsEveryString: every string of a check takes
// placeholders, as the contract says, a field added later included; the
// kind is not one of them.
func TestExpandedFillsEveryString(t *testing.T) {
	var c CheckConf
	v := reflect.ValueOf(&c).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.String && v.Type().Field(i).Name != "Kind" {
			f.SetString("/x/{{ .PodName }}-{{.IP}}")
		}
	}
	c.Kind = "{{.PodName}}"
	got, err := c.Expanded(Placeholders{PodName: "web-0", IP: "10.1.0.5"})
	if err != nil {
		t.Fatal(err)
	}
	g := reflect.ValueOf(got)
	for i := range g.NumField() {
		name := g.Type().Field(i).Name
		if f := g.Field(i); f.Kind() == reflect.String && name != "Kind" && f.String() != "/x/web-0-10.1.0.5" {
			t.Errorf("%s = %q, want it expanded", name, f.String())
		}
	}
	if got.Kind != "{{.PodName}}" {
		t.Errorf("Kind = %q, want it as it was", got.Kind)
	}
	if !c.UsesIP() {
		t.Errorf("UsesIP = false for a check whose every string uses {{.IP}}")
	}
	if _, err := (CheckConf{Kind: KindFile, Path: "/x/{{.Nope}}"}).Expanded(Placeholders{}); err == nil {
		t.Errorf("Expanded accepted an unknown placeholder")
	}
}
