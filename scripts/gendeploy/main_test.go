package main

import "testing"

func TestStripLeavesDeployNeitherHelmsLabelsNorTheHashedEntryName(t *testing.T) {
	in := `---
# Source: netready/templates/daemonset.yaml
# A comment stays.
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: netready
  labels:
    app: netready
    app.kubernetes.io/name: netready
    helm.sh/chart: netready-v0.0.0-dev
spec:
  template:
    spec:
      volumes:
        - name: entry
          configMap: {name: netready-entry-5bk4f2m8gt}
---
# Source: netready/templates/rbac.yaml
apiVersion: v1
kind: ServiceAccount
metadata:
  name: netready-sidecar
  labels:
    app.kubernetes.io/managed-by: Helm
    app.kubernetes.io/instance: netready
`
	want := `# A comment stays.
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: netready
  labels:
    app: netready
spec:
  template:
    spec:
      volumes:
        - name: entry
          configMap: {name: netready-entry}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: netready-sidecar
`
	if got := strip(in); got != want {
		t.Errorf("strip =\n%s\nwant\n%s", got, want)
	}
}
