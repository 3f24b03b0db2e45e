package conditions

import (
	"context"
	"fmt"
	"io/fs"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/netready/netready/pkg/kubeapi/kubeapitest"
	"github.com/netready/netready/pkg/metrics"
)

// cepAnswer answers every CiliumEndpoint read with err.
type cepAnswer struct {
	kubeapitest.Fake
	err error
}

func (a cepAnswer) GetCiliumEndpoint(context.Context, string, string) ([]byte, error) {
	return nil, a.err
}

// TestCiliumEndpointReadErrorsAreCounted: a refused or failed read counts
// in netready_api_errors_total by reason; "none yet" does not.
func TestCiliumEndpointReadErrorsAreCounted(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "cilium.io", Resource: "ciliumendpoints"}, "web-0", fmt.Errorf("no RBAC"))
	tests := []struct {
		name   string
		err    error
		reason string
		want   float64
	}{
		{"forbidden, wrapped", fmt.Errorf("forbidden: give the sidecar's ClusterRole get: %w", forbidden), "Forbidden", 1},
		{"unreachable", fmt.Errorf("dial tcp: connection refused"), "Unreachable", 1},
		{"none yet", fmt.Errorf("no CiliumEndpoint default/web-0: %w", fs.ErrNotExist), "Unreachable", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := metrics.New(prometheus.NewRegistry())
			c := &Controller{client: cepAnswer{err: tt.err}, metrics: m}
			if _, err := (countedCEPs{c}).GetCiliumEndpoint(context.Background(), "default", "web-0"); err != tt.err {
				t.Fatalf("error %v, want %v passed on", err, tt.err)
			}
			if got := testutil.ToFloat64(m.APIErrors.WithLabelValues(tt.reason)); got != tt.want {
				t.Errorf("netready_api_errors_total{reason=%q} = %v, want %v", tt.reason, got, tt.want)
			}
		})
	}
}
