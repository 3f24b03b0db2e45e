{{- /* netready.labels: Helm's labels, on every object the chart renders. */ -}}
{{- define "netready.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- /*
netready.hashedName: kustomize's name for a generated ConfigMap,
<name>-<hash of its data>, from (dict "name" N "data" D). The pod
template refers to it, so a change of the data renames the ConfigMap and
rolls the DaemonSet, and `kubectl apply -k deploy/` and the chart name it
alike (an adopted install keeps its objects). kustomize's hasher looks
the name up as one path element, "metadata/name", which finds nothing: it
hashes "" as the name.
*/ -}}
{{- define "netready.hashedName" -}}
{{- $hex := sha256sum (toJson (dict "kind" "ConfigMap" "name" "" "data" .data)) | trunc 10 -}}
{{- printf "%s-%s" .name ($hex | replace "0" "g" | replace "1" "h" | replace "3" "k" | replace "a" "m" | replace "e" "t") -}}
{{- end -}}

{{- /* netready.mergeJSON: .patch merged onto .base as a JSON merge patch would (lists replaced), as {"v": merged}; a null stays, so that the installer's merge deletes the key. */ -}}
{{- define "netready.mergeJSON" -}}
{{- $out := deepCopy .base -}}
{{- range $k, $v := .patch -}}
{{- $b := get $out $k -}}
{{- if and (kindIs "map" $v) (kindIs "map" $b) -}}
{{- $_ := set $out $k (include "netready.mergeJSON" (dict "base" $b "patch" $v) | fromJson).v -}}
{{- else -}}
{{- $_ := set $out $k $v -}}
{{- end -}}
{{- end -}}
{{- dict "v" $out | toJson -}}
{{- end -}}

{{- /*
netready.entryData: the entry ConfigMap's fragments, as JSON: the
installer merges them in name order. 10-entry.json is the default;
the preset, the pool and the platform add theirs as deploy/'s components
do, and the values that differ from those go last, as 90-values.json.
*/ -}}
{{- define "netready.entryData" -}}
{{- $V := .Values -}}
{{- $base := .Files.Get "files/10-entry.json" -}}
{{- $data := dict "10-entry.json" $base -}}
{{- with $V.preset -}}{{- $_ := set $data "50-preset.json" (printf "{\"preset\": %q}\n" .) -}}{{- end -}}
{{- if $V.pool.enabled -}}{{- $_ := set $data "60-pool.json" "{\"status\": {\"ipam\": \"auto\"}}\n" -}}{{- end -}}
{{- if eq $V.platform "k3s" -}}{{- $_ := set $data "70-k3s.json" "{\"status\": {\"confDir\": \"/var/lib/rancher/k3s/agent/etc/cni/net.d\"}}\n" -}}{{- end -}}
{{- if and (not $V.pool.enabled) (or (ne (toJson $V.pool.ipam) "\"auto\"") (not (kindIs "invalid" $V.pool.minFree)) $V.pool.poolAction) -}}
{{- fail "netready chart: pool.ipam, pool.minFree and pool.poolAction take effect only with pool.enabled=true; set it, or leave them out" -}}
{{- end -}}
{{- $xnKeys := omit $V.crossNode "enabled" -}}
{{- if and (not $V.crossNode.enabled) $xnKeys -}}
{{- fail "netready chart: crossNode.timeout, crossNode.stallAfter, crossNode.raiseInterval, crossNode.nbSocket and crossNode.sbSocket take effect only with crossNode.enabled=true; set it, or leave them out" -}}
{{- end -}}
{{- if $V.crossNode.enabled -}}{{- $_ := set $data "55-cross-node.json" "{\"crossNode\": {}}\n" -}}{{- end -}}
{{- if or $V.crossNode.enabled (kindIs "map" ($V.entry | default dict).crossNode) -}}
{{- $ovsdb := false -}}
{{- range (($V.entry | default dict).checks | default list) -}}{{- if eq (toString .kind) "ovsdb" -}}{{- $ovsdb = true -}}{{- end -}}{{- end -}}
{{- if not (or (eq $V.preset "ovn-kubernetes") $ovsdb) -}}
{{- fail "netready chart: crossNode needs preset=ovn-kubernetes (or an ovsdb check in entry.checks): only OVN offers a barrier to wait on" -}}
{{- end -}}
{{- end -}}
{{- $defaults := fromJson $base -}}
{{- $frag := dict -}}
{{- if ne $V.timeout $defaults.timeout -}}{{- $_ := set $frag "timeout" $V.timeout -}}{{- end -}}
{{- if ne $V.onTimeout $defaults.onTimeout -}}{{- $_ := set $frag "onTimeout" $V.onTimeout -}}{{- end -}}
{{- if $V.pool.enabled -}}
{{- $status := dict -}}
{{- if ne (toJson $V.pool.ipam) "\"auto\"" -}}{{- $_ := set $status "ipam" $V.pool.ipam -}}{{- end -}}
{{- if not (kindIs "invalid" $V.pool.minFree) -}}{{- $_ := set $status "minFree" $V.pool.minFree -}}{{- end -}}
{{- with $V.pool.poolAction -}}{{- $_ := set $status "poolAction" . -}}{{- end -}}
{{- if $status -}}{{- $_ := set $frag "status" $status -}}{{- end -}}
{{- end -}}
{{- if $xnKeys -}}{{- $_ := set $frag "crossNode" $xnKeys -}}{{- end -}}
{{- $frag = (include "netready.mergeJSON" (dict "base" $frag "patch" ($V.entry | default dict)) | fromJson).v -}}
{{- if $frag -}}{{- $_ := set $data "90-values.json" (printf "%s\n" (toJson $frag)) -}}{{- end -}}
{{- toJson $data -}}
{{- end -}}

{{- /*
netready.crossNodeDirs: the folders of OVN's NB and SB sockets, as
{"v": [...]}, when the cross-node wait is on (crossNode.enabled, or a
crossNode in entry), for the sidecar's re-checks; none otherwise. A
folder the preset mounts already is left out.
*/ -}}
{{- define "netready.crossNodeDirs" -}}
{{- $V := .Values -}}
{{- $dirs := list -}}
{{- $inEntry := ($V.entry | default dict).crossNode -}}
{{- if not (kindIs "map" $inEntry) -}}{{- $inEntry = dict -}}{{- end -}}
{{- if or $V.crossNode.enabled (kindIs "map" ($V.entry | default dict).crossNode) -}}
{{- $xn := mergeOverwrite (dict "nbSocket" "/var/run/ovn/ovnnb_db.sock" "sbSocket" "/var/run/ovn/ovnsb_db.sock") (omit $V.crossNode "enabled") $inEntry -}}
{{- $taken := ternary "/var/run/openvswitch" "" (eq $V.preset "ovn-kubernetes") -}}
{{- range (list (dir $xn.nbSocket) (dir $xn.sbSocket) | uniq) -}}
{{- if ne . $taken -}}{{- $dirs = append $dirs . -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- dict "v" $dirs | toJson -}}
{{- end -}}

{{- define "netready.entryName" -}}
{{- include "netready.hashedName" (dict "name" "netready-entry" "data" (include "netready.entryData" . | fromJson)) -}}
{{- end -}}

{{- /* netready.dashboardData: the dashboard ConfigMap's data, as JSON. */ -}}
{{- define "netready.dashboardData" -}}
{{- dict "netready.json" (.Files.Get "files/dashboard.json") | toJson -}}
{{- end -}}

{{- /*
netready.mutatingPolicy: "true" when the MutatingAdmissionPolicy is
rendered: asked for, and served by the cluster (helm install asks the API
server; helm template assumes its own Kubernetes version unless told
--kube-version or --api-versions). admissionregistration.k8s.io/v1 has it
from Kubernetes 1.36.
*/ -}}
{{- define "netready.mutatingPolicy" -}}
{{- if and .Values.mutatingPolicy.enabled (not (include "netready.mutatingPolicyMissing" .)) -}}true{{- end -}}
{{- end -}}

{{- /*
netready.mutatingPolicyMissing: "true" when the cluster does not serve
the MutatingAdmissionPolicy. An API server's discovery lists kinds
(admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy is GA from
1.30); helm template's own list has versions only, and then the
Kubernetes version decides.
*/ -}}
{{- define "netready.mutatingPolicyMissing" -}}
{{- $api := .Capabilities.APIVersions -}}
{{- $kinds := $api.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy" -}}
{{- if not (or ($api.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy") (and (not $kinds) (semverCompare ">=1.36.0-0" .Capabilities.KubeVersion.Version))) -}}true{{- end -}}
{{- end -}}
