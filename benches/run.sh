#!/usr/bin/env bash
# Benchmark: mmap2-synth --all against a raw PROCMAP_QUERY loop (the floor)
# and against perf 6.1's own synthesis, side by side in one PID namespace.
#
#   benches/run.sh [PROCS] [EXEC_MAPS] [DATA_MAPS] [REPS]    (default 200 100 1000 7)
#
# Needs root (unshare -fp --mount-proc), gcc and perf. Prints one table of
# medians (CPU = user + sys of the command) and the ratios the targets use.
set -euo pipefail
PROCS=${1:-200}
EXEC_MAPS=${2:-100}
DATA_MAPS=${3:-1000}
REPS=${4:-7}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${BENCH_OUT:-$root/bench-out}

if [ -z "${M2S_BENCH_IN_NS:-}" ]; then
    mkdir -p "$out"
    (cd "$root" && cargo build --release --quiet)
    gcc -O2 -o "$out/mapper" "$root/fixtures/mapper.c" -ldl -lpthread
    gcc -O2 -o "$out/procmap_floor" "$root/benches/procmap_floor.c"
    command -v perf >/dev/null || { echo "benchmark needs perf (apt-get install linux-perf)" >&2; exit 1; }
    export M2S_BENCH_IN_NS=1 M2S_ROOT="$root" M2S_OUT="$out"
    exec unshare -fp --mount-proc "$0" "$@"
fi

# Inside the namespace: /proc shows only what this script starts.
bin="$M2S_ROOT/target/release/mmap2-synth"
libs=()
for l in libc.so.6 libm.so.6 libstdc++.so.6 libz.so.1 libgcc_s.so.1 libcrypto.so.3 libssl.so.3 libzstd.so.1; do
    p=/usr/lib/x86_64-linux-gnu/$l
    [ -e "$p" ] && libs+=("$p")
done
rm -rf "$M2S_OUT/ready" && mkdir -p "$M2S_OUT/ready"
for i in $(seq 1 "$PROCS"); do
    "$M2S_OUT/mapper" --wait forever --exec-maps "$EXEC_MAPS" --data-maps "$DATA_MAPS" \
        --ready "$M2S_OUT/ready/$i" "${libs[@]}" >/dev/null &
done
while [ "$(ls "$M2S_OUT/ready" | grep -vc tmp)" -lt "$PROCS" ]; do sleep 0.05; done
nexec=$(cat /proc/[0-9]*/maps 2>/dev/null | awk '$2 ~ /x/' | wc -l)
nall=$(cat /proc/[0-9]*/maps 2>/dev/null | wc -l)
echo "workload: $PROCS processes, $nexec exec VMAs, $nall VMAs in all, ${#libs[@]} libraries; $REPS runs each; $(nproc) CPUs; $(uname -r); $(perf version)"

TIMEFORMAT='%R %U %S'
# measure NAME CMD...: appends "wall cpu" to $M2S_OUT/NAME.times
measure() {
    local name=$1
    shift
    local t
    t=$({ time "$@" >/dev/null 2>&1; } 2>&1 | tail -1)
    echo "$t" | awk '{printf "%.4f %.4f\n", $1, $2 + $3}' >>"$M2S_OUT/$name.times"
}
names=(floor synth synth_j1 synth_nobuildid perf_synth perf_nosynth)
for n in "${names[@]}"; do : >"$M2S_OUT/$n.times"; done
f="$M2S_OUT/bench.data"
for r in $(seq 1 "$REPS"); do
    # interleaved, so the machine's noise hits every command alike
    measure floor "$M2S_OUT/procmap_floor"
    measure synth "$bin" -q --all -o "$f"
    measure synth_j1 "$bin" -q --all -j 1 -o "$f"
    measure synth_nobuildid "$bin" -q --all --no-buildid -o "$f"
    measure perf_synth perf record -q -a -e dummy -o "$f.perf" -- true
    measure perf_nosynth perf record -q -a -e dummy --synth=no -o "$f.perf" -- true
done

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
declare -A wall cpu
for n in "${names[@]}"; do
    wall[$n]=$(cut -d' ' -f1 "$M2S_OUT/$n.times" | median)
    cpu[$n]=$(cut -d' ' -f2 "$M2S_OUT/$n.times" | median)
done
perf_cost=$(awk -v a="${cpu[perf_synth]}" -v b="${cpu[perf_nosynth]}" 'BEGIN{print a-b}')
printf '\n%-34s %10s %10s\n' "command (median of $REPS)" "wall s" "CPU s"
for n in "${names[@]}"; do printf '%-34s %10s %10s\n' "$n" "${wall[$n]}" "${cpu[$n]}"; done
printf '%-34s %10s %10s\n' "perf synthesis (synth - nosynth)" "" "$perf_cost"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.2f", a/b; else print "inf" }'; }
echo
echo "ratios (target in brackets):"
echo "  mmap2-synth CPU / floor CPU               $(ratio "${cpu[synth]}" "${cpu[floor]}")  [<= 1.5]"
echo "  perf synthesis CPU / mmap2-synth CPU      $(ratio "$perf_cost" "${cpu[synth]}")  [>= 4]"
echo "  wall -j 2 (default) / wall -j 1           $(ratio "${wall[synth]}" "${wall[synth_j1]}")  [<= 0.65]"
echo "  mmap2-synth --no-buildid CPU / floor CPU  $(ratio "${cpu[synth_nobuildid]}" "${cpu[floor]}")"
