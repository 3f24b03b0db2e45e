package attachment

import (
	"strings"
	"testing"
)

// FuzzParsePod: any CNI_ARGS parse without a panic; the pod fields never
// carry a separator of the CNI_ARGS syntax.
func FuzzParsePod(f *testing.F) {
	for _, s := range []string{
		"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_UID=u-1",
		"K8S_POD_NAME=a=b", ";;", "=", "K8S_POD_NAMESPACE", "IgnoreUnknown=true;X=1", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		pod, err := ParsePod(args)
		if err != nil {
			return
		}
		for _, v := range []string{pod.Namespace, pod.Name, pod.UID} {
			if strings.Contains(v, ";") {
				t.Fatalf("field %q carries a separator from %q", v, args)
			}
		}
	})
}
