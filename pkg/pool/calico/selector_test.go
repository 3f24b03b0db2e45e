package calico

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSelector(t *testing.T) {
	labels := map[string]string{"zone": "a", "kubernetes.io/os": "linux", "calico/ippool": "default", "empty": ""}
	type result struct {
		Match bool
		Err   bool
	}
	for _, tc := range []struct {
		sel  string
		want result
	}{
		{"", result{Match: true}},
		{"all()", result{Match: true}},
		{" all( ) ", result{Match: true}},
		{"!all()", result{}},
		{"has(zone)", result{Match: true}},
		{"has(region)", result{}},
		{"!has(region)", result{Match: true}},
		{"!has(zone)", result{}},
		{"zone == 'a'", result{Match: true}},
		{`zone == "a"`, result{Match: true}},
		{"zone == 'b'", result{}},
		{"zone != 'b'", result{Match: true}},
		{"region != 'b'", result{Match: true}},
		{"region == ''", result{}},
		{"empty == ''", result{Match: true}},
		{"calico/ippool == 'default'", result{Match: true}},
		{"kubernetes.io/os == 'linux' && zone == 'a'", result{Match: true}},
		{"kubernetes.io/os == 'linux' && zone == 'b'", result{}},
		{"zone == 'b' || zone == 'a'", result{Match: true}},
		{"zone == 'b' || zone == 'a' && has(nothing)", result{}},
		{"(zone == 'b' || zone == 'a') && !has(nothing)", result{Match: true}},
		{"zone in {'a', 'b'}", result{Match: true}},
		{"zone in {'b'}", result{}},
		{"zone in {}", result{}},
		{"zone not in {'b', \"c\"}", result{Match: true}},
		{"region not in {'b'}", result{Match: true}},
		{"zone starts with 'a'", result{Match: true}},
		{"kubernetes.io/os ends with 'ux'", result{Match: true}},
		{"kubernetes.io/os contains 'nu'", result{Match: true}},
		{"inner == 'x'", result{}},
		{"has(zone) && all()", result{Match: true}},
		// Not Calico (or not the part netready reads): cannot tell.
		{"zone = 'a'", result{Err: true}},
		{"zone =~ 'a'", result{Err: true}},
		{"zone == a", result{Err: true}},
		{"zone == 'a", result{Err: true}},
		{"has(zone", result{Err: true}},
		{"(zone == 'a'", result{Err: true}},
		{"zone in {'a' 'b'}", result{Err: true}},
		{"zone == 'a' &&", result{Err: true}},
		{"zone == 'a' garbage", result{Err: true}},
		{"all", result{Err: true}},
		{"global()", result{Err: true}},
	} {
		sel, err := parseSelector(tc.sel)
		got := result{Err: err != nil}
		if err == nil {
			got.Match = sel.matches(labels)
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%q (-want +got):\n%s (err %v)", tc.sel, d, err)
		}
	}
}
