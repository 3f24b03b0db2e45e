package checks

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/netready/netready/pkg/config"
)

// ExpectJudge is the Judge of an http check's "expect" list: ready when
// every expectation holds; nil when the list is empty.
func ExpectJudge(expect []config.Expectation) Judge {
	if len(expect) == 0 {
		return nil
	}
	return func(doc any) (bool, string) {
		for _, e := range expect {
			if ok, why := holds(doc, e); !ok {
				return false, why
			}
		}
		return true, ""
	}
}

func holds(doc any, e config.Expectation) (bool, string) {
	got, found := Lookup(doc, e.Path)
	if !found {
		return false, fmt.Sprintf("%s is not in the answer yet", e.Path)
	}
	if e.AtLeast != "" {
		min, found := Lookup(doc, e.AtLeast)
		if !found {
			return false, fmt.Sprintf("%s is not in the answer yet", e.AtLeast)
		}
		a, aok := got.(float64)
		b, bok := min.(float64)
		if !aok || !bok {
			return false, fmt.Sprintf("%s (%s) and %s (%s) are not both numbers", e.Path, show(got), e.AtLeast, show(min))
		}
		if a < b {
			return false, fmt.Sprintf("%s is %s, below %s (%s)", e.Path, show(got), e.AtLeast, show(min))
		}
		return true, ""
	}
	var want any
	if err := json.Unmarshal(e.Equals, &want); err != nil {
		return false, fmt.Sprintf("expectation on %s: %v", e.Path, err)
	}
	if !reflect.DeepEqual(got, want) {
		return false, fmt.Sprintf("%s is %s, want %s", e.Path, show(got), show(want))
	}
	return true, ""
}

// Lookup finds the value at a dot-separated path of keys and array indices.
func Lookup(doc any, path string) (any, bool) {
	cur := doc
	for _, seg := range strings.Split(path, ".") {
		switch v := cur.(type) {
		case map[string]any:
			next, ok := v[seg]
			if !ok {
				return nil, false
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(v) {
				return nil, false
			}
			cur = v[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
