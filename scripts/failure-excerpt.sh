#!/usr/bin/env bash
# failure-excerpt.sh LOG: what a failed `go test -v` run in LOG says about
# why, for CI's output (make integration's summary keeps only the
# RUN/PASS/FAIL lines):
#   - for each top-level test that failed, its own output: the first 80
#     lines (its messages come first) and the last 60 (the daemon logs its
#     clean-up prints), with the count of lines left out between;
#   - a panic or a timeout (no --- FAIL line names the test): from the
#     first "panic:" line, 80 lines, which name the running tests;
#   - nothing of the kind: the log's last 60 lines.
set -uo pipefail
log=${1:?usage: failure-excerpt.sh LOG}
found=0
while read -r t; do
	found=1
	echo "=== output of failed $t"
	awk -v t="$t" '
		$0 == "=== RUN   " t { on = 1; next }
		on && index($0, "--- FAIL: " t " ") == 1 { exit }
		on && !/^=== (RUN|PAUSE|CONT|NAME)/ { print }
	' "$log" | awk '{ l[NR] = $0 } END {
		for (i = 1; i <= NR; i++) {
			if (i <= 80 || i > NR - 60) print l[i]
			else if (i == 81) printf "    [... %d lines ...]\n", NR - 140
		}
	}'
done < <(grep -oE '^--- FAIL: Test[^ ]+' "$log" | awk '{print $3}')
if grep -q '^panic:' "$log"; then
	found=1
	echo "=== from the first panic"
	sed -n '/^panic:/,$p' "$log" | head -n 80
fi
if [ "$found" = 0 ]; then
	echo "=== no failed test named: the log's last 60 lines"
	tail -n 60 "$log"
fi
exit 0
