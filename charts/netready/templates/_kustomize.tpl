{{- /*
The chart renders deploy/ itself: files/deploy is a link to deploy/, and
these templates apply its kustomization.yaml and the components the values
select the way `kubectl kustomize` does, for the constructs deploy/ uses
(resources, configMapGenerator, components, strategic-merge patches,
$patch: delete, images, inline replacements; configurations: only tell
kustomize how a namePrefix or namespace: moves references, and the chart
renames nothing). Anything else fails the
render, naming the file, so that deploy/ and the chart cannot drift apart
unnoticed. TestHelmChartRendersEachQuickStartRowAsItsKustomization
compares both renders object by object.

Templates pass JSON ({"v": ...}) between each other, since include returns
a string; "state" is a dict mutated in place (dicts are references).
*/ -}}

{{- /* netready.docs: the YAML documents of .text, as {"v": [objects]}. */ -}}
{{- define "netready.docs" -}}
{{- $out := list -}}
{{- range regexSplit "(?m)^---[ \t]*$" .text -1 -}}
{{- $o := fromYaml . -}}
{{- if hasKey $o "Error" -}}
{{- fail (printf "netready chart: %s: %s" $.path $o.Error) -}}
{{- end -}}
{{- if $o -}}
{{- $out = append $out $o -}}
{{- end -}}
{{- end -}}
{{- dict "v" $out | toJson -}}
{{- end -}}

{{- /*
netready.merge: .patch merged onto .base, as {"v": merged}. Maps merge key
by key and null deletes. In "smp" mode (strategic merge, as kustomize's
patches), lists of maps under the fields below merge item by item on
their key, the patch's items first in its order, then the base's others
in theirs (kustomize's order); every other list is replaced. In "json"
mode (JSON merge patch, as the installer merges entry fragments), every
list is replaced.
*/ -}}
{{- define "netready.merge" -}}
{{- $b := .base -}}{{- $p := .patch -}}
{{- $keys := dict "containers" "name" "initContainers" "name" "volumes" "name" "env" "name" "volumeMounts" "mountPath" "ports" "containerPort" -}}
{{- $mk := "" -}}
{{- if eq .mode "smp" -}}{{- $mk = get $keys (.field | default "") -}}{{- end -}}
{{- if and (kindIs "map" $b) (kindIs "map" $p) -}}
{{- $out := deepCopy $b -}}
{{- range $k, $v := $p -}}
{{- if hasPrefix "$" $k -}}
{{- fail (printf "netready chart: the patch directive %s is not supported; teach templates/_kustomize.tpl" $k) -}}
{{- end -}}
{{- if kindIs "invalid" $v -}}
{{- $_ := unset $out $k -}}
{{- else if hasKey $out $k -}}
{{- $_ := set $out $k (include "netready.merge" (dict "base" (get $out $k) "patch" $v "mode" $.mode "field" $k) | fromJson).v -}}
{{- else -}}
{{- $_ := set $out $k $v -}}
{{- end -}}
{{- end -}}
{{- dict "v" $out | toJson -}}
{{- else if and $mk (kindIs "slice" $b) (kindIs "slice" $p) -}}
{{- $out := list -}}
{{- $seen := dict -}}
{{- range $p -}}
{{- $pi := . -}}
{{- $id := toString (get $pi $mk) -}}
{{- $_ := set $seen $id true -}}
{{- $merged := $pi -}}
{{- range $b -}}
{{- if eq (toString (get . $mk)) $id -}}
{{- $merged = (include "netready.merge" (dict "base" . "patch" $pi "mode" "smp" "field" "") | fromJson).v -}}
{{- end -}}
{{- end -}}
{{- $out = append $out $merged -}}
{{- end -}}
{{- range $b -}}
{{- if not (hasKey $seen (toString (get . $mk))) -}}
{{- $out = append $out . -}}
{{- end -}}
{{- end -}}
{{- dict "v" $out | toJson -}}
{{- else -}}
{{- dict "v" $p | toJson -}}
{{- end -}}
{{- end -}}

{{- /* netready.same: whether object .o is the one .ref names (kind, name, and namespace when .ref gives one). */ -}}
{{- define "netready.same" -}}
{{- $m := .o.metadata | default dict -}}
{{- $r := .ref.metadata | default dict -}}
{{- if and (eq .o.kind .ref.kind) (eq $m.name $r.name) (or (not $r.namespace) (eq ($m.namespace | default "") $r.namespace)) -}}yes{{- end -}}
{{- end -}}

{{- /* netready.apply: applies the kustomization or component in .dir to .state. */ -}}
{{- define "netready.apply" -}}
{{- $s := .state -}}{{- $dir := .dir -}}{{- $F := .Files -}}
{{- $path := printf "%s/kustomization.yaml" $dir -}}
{{- $k := $F.Get $path | fromYaml -}}
{{- if not $k -}}{{- fail (printf "netready chart: %s is missing or empty" $path) -}}{{- end -}}
{{- if hasKey $k "Error" -}}{{- fail (printf "netready chart: %s: %s" $path $k.Error) -}}{{- end -}}
{{- range $key, $_ := $k -}}
{{- if not (has $key (list "apiVersion" "kind" "resources" "configMapGenerator" "components" "patches" "images" "replacements" "configurations")) -}}
{{- fail (printf "netready chart: %s uses %s, which the chart does not apply; teach templates/_kustomize.tpl" $path $key) -}}
{{- end -}}
{{- end -}}
{{- range $k.resources -}}
{{- $text := $F.Get (printf "%s/%s" $dir .) -}}
{{- if not $text -}}{{- fail (printf "netready chart: resource %s/%s is not a file the chart holds" $dir .) -}}{{- end -}}
{{- range (include "netready.docs" (dict "text" $text "path" (printf "%s/%s" $dir .)) | fromJson).v -}}
{{- $_ := set $s "objects" (append $s.objects .) -}}
{{- end -}}
{{- end -}}
{{- range $g := $k.configMapGenerator -}}
{{- range $key, $_ := $g -}}
{{- if not (has $key (list "name" "namespace" "behavior" "files" "literals" "options")) -}}
{{- fail (printf "netready chart: %s: configMapGenerator %s uses %s; teach templates/_kustomize.tpl" $path $g.name $key) -}}
{{- end -}}
{{- end -}}
{{- $data := dict -}}
{{- range $g.literals -}}
{{- $kv := splitn "=" 2 . -}}
{{- $_ := set $data $kv._0 (trimAll "\"" $kv._1) -}}
{{- end -}}
{{- range $g.files -}}
{{- $kv := splitn "=" 2 . -}}
{{- $key := base . -}}{{- $file := . -}}
{{- if $kv._1 -}}{{- $key = $kv._0 -}}{{- $file = $kv._1 -}}{{- end -}}
{{- $text := $F.Get (printf "%s/%s" $dir $file) -}}
{{- if not $text -}}{{- fail (printf "netready chart: %s/%s is not a file the chart holds" $dir $file) -}}{{- end -}}
{{- $_ := set $data $key $text -}}
{{- end -}}
{{- $ref := dict "kind" "ConfigMap" "metadata" (dict "name" $g.name "namespace" ($g.namespace | default "")) -}}
{{- if eq ($g.behavior | default "create") "merge" -}}
{{- $found := false -}}
{{- range $s.objects -}}
{{- if include "netready.same" (dict "o" . "ref" $ref) -}}
{{- $_ := set . "data" (mergeOverwrite (.data | default dict) $data) -}}
{{- $found = true -}}
{{- end -}}
{{- end -}}
{{- if not $found -}}{{- fail (printf "netready chart: %s merges into ConfigMap %s, which nothing generated" $path $g.name) -}}{{- end -}}
{{- else if eq ($g.behavior | default "create") "create" -}}
{{- $opts := $g.options | default dict -}}
{{- $meta := dict "name" $g.name -}}
{{- if $g.namespace -}}{{- $_ := set $meta "namespace" $g.namespace -}}{{- end -}}
{{- if $opts.labels -}}{{- $_ := set $meta "labels" $opts.labels -}}{{- end -}}
{{- range $key, $_ := $opts -}}
{{- if not (has $key (list "labels" "disableNameSuffixHash")) -}}
{{- fail (printf "netready chart: %s: configMapGenerator %s option %s; teach templates/_kustomize.tpl" $path $g.name $key) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $s "objects" (append $s.objects (dict "apiVersion" "v1" "kind" "ConfigMap" "metadata" $meta "data" $data)) -}}
{{- if not $opts.disableNameSuffixHash -}}
{{- $_ := set $s "hashed" (append $s.hashed $g.name) -}}
{{- end -}}
{{- else -}}
{{- fail (printf "netready chart: %s: configMapGenerator %s behavior %s; teach templates/_kustomize.tpl" $path $g.name $g.behavior) -}}
{{- end -}}
{{- end -}}
{{- /* As kustomize: a kustomization's components after its generators, before its own transformers. */ -}}
{{- range $k.components -}}
{{- $_ := include "netready.apply" (dict "state" $s "dir" (printf "%s/%s" $dir .) "Files" $F) -}}
{{- end -}}
{{- range $k.patches -}}
{{- if .target -}}
{{- $_ := include "netready.targeted" (dict "state" $s "patch" . "dir" $dir "path" $path "Files" $F) -}}
{{- else -}}
{{- $text := .patch -}}
{{- if .path -}}{{- $text = $F.Get (printf "%s/%s" $dir .path) -}}{{- end -}}
{{- if not $text -}}{{- fail (printf "netready chart: %s: an empty patch" $path) -}}{{- end -}}
{{- range $p := (include "netready.docs" (dict "text" $text "path" $path) | fromJson).v -}}
{{- $kept := list -}}
{{- $found := false -}}
{{- range $s.objects -}}
{{- if include "netready.same" (dict "o" . "ref" $p) -}}
{{- $found = true -}}
{{- if ne (get $p "$patch" | default "") "delete" -}}
{{- $kept = append $kept (include "netready.merge" (dict "base" . "patch" (omit $p "apiVersion" "kind") "mode" "smp" "field" "") | fromJson).v -}}
{{- end -}}
{{- else -}}
{{- $kept = append $kept . -}}
{{- end -}}
{{- end -}}
{{- if not $found -}}{{- fail (printf "netready chart: %s patches %s %s, which is not there" $path $p.kind $p.metadata.name) -}}{{- end -}}
{{- $_ := set $s "objects" $kept -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $k.images -}}
{{- $_ := include "netready.image" (dict "state" $s "image" .) -}}
{{- end -}}
{{- /* Replacements are kustomize's last transformer. */ -}}
{{- range $k.replacements -}}
{{- $_ := include "netready.replace" (dict "state" $s "r" . "path" $path) -}}
{{- end -}}
{{- end -}}

{{- /*
netready.replace: one inline replacement .r on .state, as kustomize's: the
value at the source's fieldPath (map keys) written at each target's
fieldPaths (map keys and [key=value] list items), or, with
options.delimiter, into that part of the string there. A target that
selects no object is no error; a field path that finds no field is.
*/ -}}
{{- define "netready.replace" -}}
{{- $s := .state -}}{{- $r := .r -}}{{- $path := .path -}}
{{- range $key, $_ := $r -}}
{{- if not (has $key (list "source" "targets")) -}}
{{- fail (printf "netready chart: %s: a replacement with %s; teach templates/_kustomize.tpl" $path $key) -}}
{{- end -}}
{{- end -}}
{{- range $key, $_ := $r.source -}}
{{- if not (has $key (list "kind" "name" "fieldPath")) -}}
{{- fail (printf "netready chart: %s: a replacement source by %s; teach templates/_kustomize.tpl" $path $key) -}}
{{- end -}}
{{- end -}}
{{- $value := (include "netready.find" (dict "state" $s "ref" (dict "kind" $r.source.kind "metadata" (dict "name" $r.source.name))) | fromJson).v -}}
{{- range splitList "." $r.source.fieldPath -}}
{{- if not (and (kindIs "map" $value) (hasKey $value .)) -}}
{{- fail (printf "netready chart: %s: the replacement source %s %s has no %s" $path $r.source.kind $r.source.name $r.source.fieldPath) -}}
{{- end -}}
{{- $value = get $value . -}}
{{- end -}}
{{- range $t := $r.targets -}}
{{- range $key, $_ := $t -}}
{{- if not (has $key (list "select" "fieldPaths" "options")) -}}
{{- fail (printf "netready chart: %s: a replacement target with %s; teach templates/_kustomize.tpl" $path $key) -}}
{{- end -}}
{{- end -}}
{{- range $key, $_ := $t.select -}}
{{- if not (has $key (list "group" "kind" "name")) -}}
{{- fail (printf "netready chart: %s: a replacement target selected by %s; teach templates/_kustomize.tpl" $path $key) -}}
{{- end -}}
{{- end -}}
{{- $opts := $t.options | default dict -}}
{{- range $key, $_ := $opts -}}
{{- if not (has $key (list "delimiter" "index")) -}}
{{- fail (printf "netready chart: %s: the replacement option %s; teach templates/_kustomize.tpl" $path $key) -}}
{{- end -}}
{{- end -}}
{{- range $o := $s.objects -}}
{{- $group := regexReplaceAll "/?[^/]*$" $o.apiVersion "" -}}
{{- if and (eq $o.kind $t.select.kind) (eq $o.metadata.name $t.select.name) (or (not (hasKey $t.select "group")) (eq $group $t.select.group)) -}}
{{- range $fp := $t.fieldPaths -}}
{{- $segs := splitList "." $fp -}}
{{- $node := $o -}}
{{- range initial $segs -}}
{{- $seg := . -}}
{{- if hasPrefix "[" $seg -}}
{{- $kv := splitn "=" 2 (trimSuffix "]" (trimPrefix "[" $seg)) -}}
{{- $found := "" -}}
{{- if kindIs "slice" $node -}}
{{- range $node -}}
{{- if and (kindIs "map" .) (eq (toString (get . $kv._0)) $kv._1) -}}{{- $found = . -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- if not $found -}}{{- fail (printf "netready chart: %s: %s %s has no %s" $path $o.kind $o.metadata.name $fp) -}}{{- end -}}
{{- $node = $found -}}
{{- else -}}
{{- if not (and (kindIs "map" $node) (hasKey $node $seg)) -}}{{- fail (printf "netready chart: %s: %s %s has no %s" $path $o.kind $o.metadata.name $fp) -}}{{- end -}}
{{- $node = get $node $seg -}}
{{- end -}}
{{- end -}}
{{- $leaf := last $segs -}}
{{- if not (and (kindIs "map" $node) (hasKey $node $leaf)) -}}{{- fail (printf "netready chart: %s: %s %s has no %s" $path $o.kind $o.metadata.name $fp) -}}{{- end -}}
{{- $new := $value -}}
{{- if $opts.delimiter -}}
{{- $parts := splitList $opts.delimiter (toString (get $node $leaf)) -}}
{{- $i := int ($opts.index | default 0) -}}
{{- if ge $i (len $parts) -}}{{- fail (printf "netready chart: %s: %s of %s %s has no part %d" $path $fp $o.kind $o.metadata.name $i) -}}{{- end -}}
{{- $new = join $opts.delimiter (concat (slice $parts 0 $i) (list $value) (slice $parts (add1 $i))) -}}
{{- end -}}
{{- $_ := set $node $leaf $new -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* netready.image: kustomize's images: entry .image, on every container of .state's pod templates. */ -}}
{{- define "netready.image" -}}
{{- $i := .image -}}
{{- range $key, $_ := $i -}}
{{- if not (has $key (list "name" "newName" "newTag" "digest")) -}}
{{- fail (printf "netready chart: images: %s; teach templates/_kustomize.tpl" $key) -}}
{{- end -}}
{{- end -}}
{{- range .state.objects -}}
{{- $spec := dig "spec" "template" "spec" dict . -}}
{{- range concat ($spec.initContainers | default list) ($spec.containers | default list) -}}
{{- $ref := include "netready.imageRef" .image | fromJson -}}
{{- if eq $ref.name $i.name -}}
{{- $name := $i.newName | default $ref.name -}}
{{- $tag := $i.newTag | default $ref.tag -}}
{{- $image := $name -}}
{{- if $i.digest -}}{{- $image = printf "%s@%s" $name $i.digest -}}
{{- else if $tag -}}{{- $image = printf "%s:%s" $name $tag -}}
{{- end -}}
{{- $_ := set . "image" $image -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* netready.imageRef: an image reference split into name, tag and digest, as JSON. */ -}}
{{- define "netready.imageRef" -}}
{{- $name := . -}}{{- $tag := "" -}}{{- $digest := "" -}}
{{- if contains "@" $name -}}
{{- $parts := splitn "@" 2 $name -}}{{- $name = $parts._0 -}}{{- $digest = $parts._1 -}}
{{- end -}}
{{- $last := last (splitList "/" $name) -}}
{{- if contains ":" $last -}}
{{- $tag = last (splitList ":" $last) -}}
{{- $name = trimSuffix (printf ":%s" $tag) $name -}}
{{- end -}}
{{- dict "name" $name "tag" $tag "digest" $digest | toJson -}}
{{- end -}}

{{- /*
netready.targeted: a patch with a target, its patch a JSON 6902 list of
operations (add, replace, remove), on every object the target names by
kind, name and, when given, group.
*/ -}}
{{- define "netready.targeted" -}}
{{- $t := .patch.target -}}
{{- range $key, $_ := $t -}}
{{- if not (has $key (list "group" "version" "kind" "name")) -}}
{{- fail (printf "netready chart: %s: a patch target by %s; teach templates/_kustomize.tpl" $.path $key) -}}
{{- end -}}
{{- end -}}
{{- $text := .patch.patch -}}
{{- if .patch.path -}}{{- $text = .Files.Get (printf "%s/%s" .dir .patch.path) -}}{{- end -}}
{{- $ops := fromYamlArray $text -}}
{{- /* As kustomize, a target that matches nothing is no error: components/uninstall's on a cluster without the mutating policy. */ -}}
{{- $out := list -}}
{{- range $o := .state.objects -}}
{{- $group := regexReplaceAll "/?[^/]*$" $o.apiVersion "" -}}
{{- if and (eq $o.kind $t.kind) (eq $o.metadata.name $t.name) (or (not (hasKey $t "group")) (eq $group $t.group)) -}}
{{- range $ops -}}
{{- if not (has .op (list "add" "replace" "remove")) -}}
{{- fail (printf "netready chart: %s: the JSON patch op %s; teach templates/_kustomize.tpl" $.path .op) -}}
{{- end -}}
{{- $segs := list -}}
{{- range rest (splitList "/" .path) -}}{{- $segs = append $segs (. | replace "~1" "/" | replace "~0" "~") -}}{{- end -}}
{{- $o = (include "netready.jsonpatch" (dict "doc" $o "segs" $segs "op" .op "value" .value) | fromJson).v -}}
{{- end -}}
{{- end -}}
{{- $out = append $out $o -}}
{{- end -}}
{{- $_ := set .state "objects" $out -}}
{{- end -}}

{{- /* netready.jsonpatch: one JSON 6902 operation at .segs of .doc, as {"v": doc}. */ -}}
{{- define "netready.jsonpatch" -}}
{{- $doc := .doc -}}{{- $seg := first .segs -}}
{{- if kindIs "slice" $doc -}}
{{- $i := len $doc -}}
{{- if ne $seg "-" -}}{{- $i = atoi $seg -}}{{- end -}}
{{- if gt (len .segs) 1 -}}
{{- $child := (include "netready.jsonpatch" (dict "doc" (index $doc $i) "segs" (rest .segs) "op" .op "value" .value) | fromJson).v -}}
{{- $doc = concat (slice $doc 0 $i) (list $child) (slice $doc (add1 $i)) -}}
{{- else if eq .op "add" -}}
{{- $doc = concat (slice $doc 0 $i) (list .value) (slice $doc $i) -}}
{{- else if eq .op "replace" -}}
{{- $doc = concat (slice $doc 0 $i) (list .value) (slice $doc (add1 $i)) -}}
{{- else -}}
{{- $doc = concat (slice $doc 0 $i) (slice $doc (add1 $i)) -}}
{{- end -}}
{{- else if kindIs "map" $doc -}}
{{- $doc = deepCopy $doc -}}
{{- if gt (len .segs) 1 -}}
{{- if not (hasKey $doc $seg) -}}{{- fail (printf "netready chart: a JSON patch path through %s, which is not there" $seg) -}}{{- end -}}
{{- $_ := set $doc $seg (include "netready.jsonpatch" (dict "doc" (get $doc $seg) "segs" (rest .segs) "op" .op "value" .value) | fromJson).v -}}
{{- else if eq .op "remove" -}}
{{- $_ := unset $doc $seg -}}
{{- else -}}
{{- $_ := set $doc $seg .value -}}
{{- end -}}
{{- else -}}
{{- fail (printf "netready chart: a JSON patch path through %s, which is no list or map" $seg) -}}
{{- end -}}
{{- dict "v" $doc | toJson -}}
{{- end -}}
