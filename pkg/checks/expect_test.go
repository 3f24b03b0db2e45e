package checks

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/netready/netready/pkg/config"
)

func doc(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestExpectJudge(t *testing.T) {
	expect := []config.Expectation{
		{Path: "status.state", Equals: json.RawMessage(`"ready"`)},
		{Path: "status.policy.realized.policy-revision", AtLeast: "status.policy.spec.policy-revision"},
		{Path: "items.1.ok", Equals: json.RawMessage(`true`)},
	}
	judge := ExpectJudge(expect)
	tests := []struct {
		answer  string
		want    bool
		wantWhy string
	}{
		{`{"status":{"state":"ready","policy":{"realized":{"policy-revision":4},"spec":{"policy-revision":4}}},"items":[{},{"ok":true}]}`, true, ""},
		{`{"status":{"state":"regenerating"}}`, false, `status.state is "regenerating", want "ready"`},
		{`{"status":{"state":"ready","policy":{"realized":{"policy-revision":3},"spec":{"policy-revision":4}}}}`, false, "status.policy.realized.policy-revision is 3, below status.policy.spec.policy-revision (4)"},
		{`{"status":{"state":"ready","policy":{"realized":{"policy-revision":"x"},"spec":{"policy-revision":4}}}}`, false, "are not both numbers"},
		{`{"status":{"state":"ready","policy":{"realized":{"policy-revision":5},"spec":{"policy-revision":4}}},"items":[{}]}`, false, "items.1.ok is not in the answer yet"},
		{`[]`, false, "status.state is not in the answer yet"},
	}
	for _, tt := range tests {
		got, why := judge(doc(t, tt.answer))
		if got != tt.want || !strings.Contains(why, tt.wantWhy) {
			t.Errorf("judge(%s) = %v %q, want %v %q", tt.answer, got, why, tt.want, tt.wantWhy)
		}
	}
	if ExpectJudge(nil) != nil {
		t.Error("an empty expect list must judge nothing")
	}
}

// TestCiliumReady walks an endpoint through the states Cilium reports.
func TestCiliumReady(t *testing.T) {
	tests := []struct {
		answer  string
		want    bool
		wantWhy string
	}{
		{`{"status":{"state":"waiting-for-identity"}}`, false, `endpoint state is "waiting-for-identity"`},
		{`{"status":{"state":"regenerating","identity":{"id":5}}}`, false, `endpoint state is "regenerating"`},
		{`{"status":{"state":"ready","identity":{"id":5,"labels":["reserved:init"]},"policy":{"realized":{"policy-revision":1},"spec":{"policy-revision":1}}}}`, false, "init identity (5)"},
		{`{"status":{"state":"ready","identity":{"id":48861},"policy":{"realized":{"policy-revision":3},"spec":{"policy-revision":4}}}}`, false, "policy revision 3 realized, 4 desired"},
		{`{"status":{"state":"ready","identity":{"id":48861},"policy":{"realized":{"policy-revision":4},"spec":{"policy-revision":4}}}}`, true, ""},
		{`{"status":{"state":"ready","identity":{"id":48861}}}`, false, "policy revision null realized, null desired"},
	}
	for _, tt := range tests {
		got, why := ciliumReady(doc(t, tt.answer))
		if got != tt.want || !strings.Contains(why, tt.wantWhy) {
			t.Errorf("ciliumReady(%s) = %v %q, want %v %q", tt.answer, got, why, tt.want, tt.wantWhy)
		}
	}
}
