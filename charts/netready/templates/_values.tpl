{{- /* netready.components: the components of deploy/ the values select, in the README's order, as {"v": [names]}. */ -}}
{{- define "netready.components" -}}
{{- $c := list -}}
{{- with .Values.preset -}}{{- $c = append $c . -}}{{- end -}}
{{- if .Values.pool.enabled -}}{{- $c = append $c "pool" -}}{{- end -}}
{{- with .Values.platform -}}{{- $c = append $c . -}}{{- end -}}
{{- if .Values.monitoring.enabled -}}{{- $c = append $c "monitoring" -}}{{- end -}}
{{- if not .Values.mutatingPolicy.enabled -}}{{- $c = append $c "no-mutating-policy" -}}{{- end -}}
{{- if .Values.uninstall -}}{{- $c = append $c "uninstall" -}}{{- end -}}
{{- dict "v" $c | toJson -}}
{{- end -}}

{{- /*
netready.diff: the parts of .want that .have does not already hold, as
{"v": {...}}: the chart writes only what the values change, so that with
deploy/'s defaults the entry is deploy/'s to the byte.
*/ -}}
{{- define "netready.diff" -}}
{{- $out := dict -}}
{{- $have := .have | default dict -}}
{{- range $k, $w := .want -}}
{{- $h := get $have $k -}}
{{- if and (kindIs "map" $w) (kindIs "map" $h) -}}
{{- $d := (include "netready.diff" (dict "want" $w "have" $h) | fromJson).v -}}
{{- if $d -}}{{- $_ := set $out $k $d -}}{{- end -}}
{{- else if ne (toJson $w) (toJson $h) -}}
{{- $_ := set $out $k $w -}}
{{- end -}}
{{- end -}}
{{- dict "v" $out | toJson -}}
{{- end -}}

{{- /* netready.find: the object of .state named by .ref, as {"v": object or null}. */ -}}
{{- define "netready.find" -}}
{{- $found := dict -}}
{{- range .state.objects -}}
{{- if include "netready.same" (dict "o" . "ref" $.ref) -}}{{- $found = . -}}{{- end -}}
{{- end -}}
{{- if not $found -}}{{- fail (printf "netready chart: deploy/ has no %s %s" .ref.kind .ref.metadata.name) -}}{{- end -}}
{{- dict "v" $found | toJson -}}
{{- end -}}

{{- /*
netready.values: applies the values that are not components: the
condition type, the entry's keys (90-values.json), the monitoring objects
left out, and the image.
*/ -}}
{{- define "netready.values" -}}
{{- $s := .state -}}{{- $V := .Values -}}
{{- /* As the README's overlay: the type merged into netready-settings, then components/condition-type writes it where it is used. */ -}}
{{- range $s.objects -}}
{{- if and (eq .kind "ConfigMap") (eq .metadata.name "netready-settings") -}}
{{- $_ := set .data "conditionType" $V.conditionType -}}
{{- end -}}
{{- end -}}
{{- $_ := include "netready.apply" (dict "state" $s "dir" "files/deploy/components/condition-type" "Files" .Files) -}}
{{- range $s.objects -}}
{{- if and (eq .kind "ConfigMap") (eq .metadata.name "netready-entry") -}}
{{- $entry := dict -}}
{{- $data := .data -}}
{{- range $key := keys $data | sortAlpha -}}
{{- $frag := fromJson (get $data $key) -}}
{{- if hasKey $frag "Error" -}}{{- fail (printf "netready chart: the entry fragment %s: %s" $key $frag.Error) -}}{{- end -}}
{{- $entry = (include "netready.merge" (dict "base" $entry "patch" $frag "mode" "json") | fromJson).v -}}
{{- end -}}
{{- $want := dict "timeout" $V.timeout "onTimeout" $V.onTimeout -}}
{{- if and (not $V.pool.enabled) (or (ne (toJson $V.pool.ipam) "\"auto\"") (not (kindIs "invalid" $V.pool.minFree)) $V.pool.poolAction) -}}
{{- fail "netready chart: pool.ipam, pool.minFree and pool.poolAction take effect only with pool.enabled=true; set it, or leave them out" -}}
{{- end -}}
{{- if $V.pool.enabled -}}
{{- $status := dict "ipam" $V.pool.ipam -}}
{{- if not (kindIs "invalid" $V.pool.minFree) -}}{{- $_ := set $status "minFree" $V.pool.minFree -}}{{- end -}}
{{- if $V.pool.poolAction -}}{{- $_ := set $status "poolAction" $V.pool.poolAction -}}{{- end -}}
{{- $_ := set $want "status" $status -}}
{{- end -}}
{{- $frag := (include "netready.diff" (dict "want" $want "have" $entry) | fromJson).v -}}
{{- $frag = (include "netready.merge" (dict "base" $frag "patch" ($V.entry | default dict) "mode" "json") | fromJson).v -}}
{{- if $frag -}}{{- $_ := set $data "90-values.json" (printf "%s\n" (toJson $frag)) -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- $kept := list -}}
{{- range $s.objects -}}
{{- if not (or (and (eq .kind "ServiceMonitor") (not $V.monitoring.serviceMonitor)) (and (eq .kind "PrometheusRule") (not $V.monitoring.prometheusRule)) (and (eq .kind "ConfigMap") (hasKey (dig "metadata" "labels" dict .) "grafana_dashboard") (not $V.monitoring.dashboard))) -}}
{{- $kept = append $kept . -}}
{{- end -}}
{{- end -}}
{{- $_ := set $s "objects" $kept -}}
{{- $k := .Files.Get "files/deploy/kustomization.yaml" | fromYaml -}}
{{- if ne (len ($k.images | default list)) 1 -}}{{- fail "netready chart: deploy/kustomization.yaml must pin netready's image in one images: entry" -}}{{- end -}}
{{- $pinned := index $k.images 0 -}}
{{- $_ := include "netready.image" (dict "state" $s "image" (dict "name" ($pinned.newName | default $pinned.name) "newName" $V.image.repository "newTag" ($V.image.tag | default $pinned.newTag) "digest" $V.image.digest)) -}}
{{- end -}}

{{- /*
netready.names: gives each generated ConfigMap whose generator hashes
its name kustomize's name, <name>-<hash of its data>, and points
the pod templates' references at it: an edit of the entry renames it and
so rolls the DaemonSet.
*/ -}}
{{- define "netready.names" -}}
{{- $s := .state -}}
{{- $renamed := dict -}}
{{- range $s.objects -}}
{{- if and (eq .kind "ConfigMap") (has .metadata.name $s.hashed) -}}
{{- /* kustomize's hasher looks the name up as one path element, "metadata/name", which finds nothing: it hashes "" as the name. */ -}}
{{- $hex := sha256sum (toJson (dict "kind" "ConfigMap" "name" "" "data" (.data | default ""))) | trunc 10 -}}
{{- $hash := $hex | replace "0" "g" | replace "1" "h" | replace "3" "k" | replace "a" "m" | replace "e" "t" -}}
{{- $name := printf "%s-%s" .metadata.name $hash -}}
{{- $_ := set $renamed .metadata.name $name -}}
{{- $_ := set .metadata "name" $name -}}
{{- end -}}
{{- end -}}
{{- range $s.objects -}}
{{- $spec := dig "spec" "template" "spec" dict . -}}
{{- range $spec.volumes | default list -}}
{{- if and .configMap (hasKey $renamed .configMap.name) -}}{{- $_ := set .configMap "name" (get $renamed .configMap.name) -}}{{- end -}}
{{- end -}}
{{- range concat ($spec.initContainers | default list) ($spec.containers | default list) -}}
{{- range .env | default list -}}
{{- $ref := dig "valueFrom" "configMapKeyRef" dict . -}}
{{- if and $ref (hasKey $renamed $ref.name) -}}{{- $_ := set $ref "name" (get $renamed $ref.name) -}}{{- end -}}
{{- end -}}
{{- range .envFrom | default list -}}
{{- if and .configMapRef (hasKey $renamed .configMapRef.name) -}}{{- $_ := set .configMapRef "name" (get $renamed .configMapRef.name) -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "netready.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}
