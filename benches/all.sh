#!/usr/bin/env bash
# Every benchmark in one run, each printing its ratios side by side (medians):
# the snapshot against the raw PROCMAP_QUERY walk and perf's synthesis
# (run.sh), merge/convert/pprof against `cp` and perf (merge.py), and
# `record`'s start-up against `perf record` (record_startup.py), and what
# hostile inputs cost in memory and time (hostile.sh).
#
#   benches/all.sh [REPS]     (default 5; needs root, gcc and perf;
#                              M2S_BENCH_SMOKE=1: tiny workloads, for CI)
set -euo pipefail
REPS=${1:-5}
here=$(cd "$(dirname "$0")" && pwd)
section() { printf '\n==== %s ====\n' "$1"; }
section "snapshot: benches/run.sh $REPS"
"$here/run.sh" "$REPS"
if [ -n "${M2S_BENCH_SMOKE:-}" ]; then
    secs=0.3
else
    secs=10
fi
section "merge, convert, pprof: benches/merge.py $secs $REPS"
"$here/merge.py" "$secs" "$REPS"
section "record start-up: benches/record_startup.py $REPS"
"$here/record_startup.py" "$REPS"
section "hostile inputs: benches/hostile.sh"
"$here/hostile.sh"
