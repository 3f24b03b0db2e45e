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
{{- /* measure is the sidecar's, not the entry's (netready.measureCilium). */ -}}
{{- $xnKeys := omit $V.crossNode "enabled" "measure" -}}
{{- if and (not $V.crossNode.enabled) $xnKeys -}}
{{- $given := list -}}{{- range keys $xnKeys | sortAlpha -}}{{- $given = append $given (printf "crossNode.%s" .) -}}{{- end -}}
{{- $one := eq (len $given) 1 -}}
{{- fail (printf "netready chart: %s %s effect only with crossNode.enabled=true; set it, or leave %s out" (join ", " $given) (ternary "takes" "take" $one) (ternary "it" "them" $one)) -}}
{{- end -}}
{{- if $V.crossNode.enabled -}}{{- $_ := set $data "55-cross-node.json" "{\"crossNode\": {}}\n" -}}{{- end -}}
{{- if include "netready.crossNodeOn" . -}}
{{- include "netready.refuseCrossNodeVia" (include "netready.crossNodeVia" .) -}}
{{- if eq (include "netready.crossNodeVia" .) "cilium" -}}{{- include "netready.refuseCiliumCrossNodeKeys" . -}}{{- end -}}
{{- if eq (include "netready.crossNodeVia" .) "ovn-kubernetes" -}}{{- include "netready.refuseOVNCrossNodeKeys" . -}}{{- end -}}
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
crossNode in entry) and follows ovn-kubernetes, for the sidecar's
re-checks; none otherwise (Cilium's cross-node part reads the API
server, not a socket). A folder the preset mounts already is left out.
*/ -}}
{{- define "netready.crossNodeDirs" -}}
{{- $V := .Values -}}
{{- $dirs := list -}}
{{- $inEntry := ($V.entry | default dict).crossNode -}}
{{- if not (kindIs "map" $inEntry) -}}{{- $inEntry = dict -}}{{- end -}}
{{- if and (include "netready.crossNodeOn" .) (eq (include "netready.crossNodeVia" .) "ovn-kubernetes") -}}
{{- $xn := mergeOverwrite (dict "nbSocket" "/var/run/ovn/ovnnb_db.sock" "sbSocket" "/var/run/ovn/ovnsb_db.sock") (omit $V.crossNode "enabled" "measure") $inEntry -}}
{{- $taken := ternary "/var/run/openvswitch" "" (eq $V.preset "ovn-kubernetes") -}}
{{- range (list (dir $xn.nbSocket) (dir $xn.sbSocket) | uniq) -}}
{{- if ne . $taken -}}{{- $dirs = append $dirs . -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- dict "v" $dirs | toJson -}}
{{- end -}}

{{- /* netready.crossNodeOn: "true" when the entry gets crossNode, from crossNode.enabled or from entry. */ -}}
{{- define "netready.crossNodeOn" -}}
{{- if or .Values.crossNode.enabled (kindIs "map" (.Values.entry | default dict).crossNode) -}}true{{- end -}}
{{- end -}}

{{- /*
netready.crossNodeVia: the plugin whose cross-node part crossNode
follows, as the plugin decides it (pkg/config, CrossNodeVia):
"ovn-kubernetes" (ADD waits on OVN's barrier) when the preset or a
check is OVN's, "cilium" (the sidecar waits for the pod's
CiliumEndpoint) when the preset or an http check's preset is Cilium's,
"both" when the entry checks both, "" when it checks neither.
*/ -}}
{{- define "netready.crossNodeVia" -}}
{{- $ovn := eq .Values.preset "ovn-kubernetes" -}}
{{- $cilium := eq .Values.preset "cilium" -}}
{{- range ((.Values.entry | default dict).checks | default list) -}}
{{- if or (eq (toString .kind) "ovsdb") (eq (toString .preset) "ovn-kubernetes") -}}{{- $ovn = true -}}{{- end -}}
{{- if and (eq (toString .kind) "http") (eq (toString .preset) "cilium") -}}{{- $cilium = true -}}{{- end -}}
{{- end -}}
{{- if and $ovn $cilium -}}both{{- else if $ovn -}}ovn-kubernetes{{- else if $cilium -}}cilium{{- end -}}
{{- end -}}

{{- /* netready.refuseCrossNodeVia fails the render when crossNode follows no plugin, or two; its argument is netready.crossNodeVia. */ -}}
{{- define "netready.refuseCrossNodeVia" -}}
{{- if eq . "both" -}}
{{- fail "netready chart: crossNode: the entry checks both ovn-kubernetes and cilium, and the cross-node part follows one plugin; keep the checks (preset, entry.checks) of the one the nodes run" -}}
{{- else if eq . "" -}}
{{- fail "netready chart: crossNode needs preset=ovn-kubernetes or cilium, or their checks in entry.checks (an ovsdb check, or an http check with preset cilium): ADD waits on OVN's barrier, and with Cilium the sidecar waits for the pod's CiliumEndpoint; calico and the address and route checks alone have neither" -}}
{{- end -}}
{{- end -}}

{{- /*
netready.refuseCiliumCrossNodeKeys fails the render, naming each, when a
crossNode key of OVN's is given with Cilium: they bound and steer ADD's wait on
OVN's barrier, and with Cilium ADD does not wait across nodes (the
plugin would refuse them on every node).
*/ -}}
{{- define "netready.refuseCiliumCrossNodeKeys" -}}
{{- $given := list -}}
{{- $inEntry := (.Values.entry | default dict).crossNode | default dict -}}
{{- range list "timeout" "stallAfter" "raiseInterval" "nbSocket" "sbSocket" -}}
{{- if hasKey $.Values.crossNode . -}}{{- $given = append $given (printf "crossNode.%s" .) -}}{{- end -}}
{{- if hasKey $inEntry . -}}{{- $given = append $given (printf "entry.crossNode.%s" .) -}}{{- end -}}
{{- end -}}
{{- if $given -}}
{{- fail (printf "netready chart: %s %s to preset=ovn-kubernetes only; leave %s out: with cilium, ADD does not wait across nodes (the sidecar holds the pod's readiness until its CiliumEndpoint is published), so of crossNode's keys only settle applies" (join ", " $given) (ternary "applies" "apply" (eq (len $given) 1)) (ternary "it" "them" (eq (len $given) 1))) -}}
{{- end -}}
{{- end -}}

{{- /*
netready.refuseOVNCrossNodeKeys fails the render, naming it, when
crossNode.settle is given with ovn-kubernetes: OVN's barrier confirms
what the other chassis have, so there is no statistical wait to add (the
plugin would refuse it on every node).
*/ -}}
{{- define "netready.refuseOVNCrossNodeKeys" -}}
{{- $given := list -}}
{{- $inEntry := (.Values.entry | default dict).crossNode | default dict -}}
{{- if hasKey .Values.crossNode "settle" -}}{{- $given = append $given "crossNode.settle" -}}{{- end -}}
{{- if hasKey $inEntry "settle" -}}{{- $given = append $given "entry.crossNode.settle" -}}{{- end -}}
{{- if $given -}}
{{- $one := eq (len $given) 1 -}}
{{- fail (printf "netready chart: %s %s to preset=cilium only; leave %s out: with ovn-kubernetes, ADD waits on OVN's barrier until the other chassis have programmed the pod, which confirms what settle would only wait for (bound that wait with crossNode.timeout and crossNode.stallAfter)" (join ", " $given) (ternary "applies" "apply" $one) (ternary "it" "them" $one)) -}}
{{- end -}}
{{- end -}}

{{- /*
netready.measureCilium: "true" when the sidecar measures how fast
Cilium's agents learn CiliumEndpoints (crossNode.measure.enabled); it
fails the render, naming the value, without preset=cilium: the sidecar
asks its own agent through the socket folder that preset=cilium mounts,
and an http check with preset cilium in entry.checks mounts nothing.
*/ -}}
{{- define "netready.measureCilium" -}}
{{- $m := .Values.crossNode.measure | default dict -}}
{{- if $m.enabled -}}
{{- if ne .Values.preset "cilium" -}}
{{- fail (printf "netready chart: crossNode.measure.enabled needs preset=cilium (preset is %q): the sidecar times how fast this node's Cilium agent learns CiliumEndpoints, through the agent's socket that preset=cilium mounts; set preset=cilium, or leave crossNode.measure.enabled false" .Values.preset) -}}
{{- end -}}
true
{{- end -}}
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
