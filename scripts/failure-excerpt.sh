#!/usr/bin/env bash
# failure-excerpt.sh LOG: for each top-level test that failed in a
# `go test -v` log, its own output (the harness's messages and the daemon
# logs its cleanup prints), at most 120 lines each. make integration's
# summary keeps only the RUN/PASS/FAIL lines, and a failure must say why.
set -euo pipefail
log=${1:?usage: failure-excerpt.sh LOG}
grep -oE '^--- FAIL: Test[^ ]+' "$log" | awk '{print $3}' | while read -r t; do
	echo "=== output of failed $t (last 120 lines)"
	awk -v t="$t" '
		$0 == "=== RUN   " t { on = 1; next }
		on && index($0, "--- FAIL: " t " ") == 1 { exit }
		on && !/^=== (RUN|PAUSE|CONT|NAME)/ { print }
	' "$log" | tail -n 120
done
