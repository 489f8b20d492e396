#!/usr/bin/env bash
# Snapshot benchmark: mmap2-synth against the raw PROCMAP_QUERY walk (the
# floor) and perf 6.1's own synthesis, side by side, each workload in its own
# PID namespace (so /proc shows only what the script starts).
#
#   benches/run.sh [REPS]            (default 5; needs root, gcc and perf;
#                                     M2S_BENCH_SMOKE=1: tiny workloads, for CI)
#
# Workloads, in one run:
#   - the two shapes of issue 8: 200 x (100 exec + 1000 data VMAs) and
#     2000 x (20 exec + 50 data), with the ratios the targets use (and the
#     default run against --no-watch --no-kernel: the cost of watching);
#   - threads: 500 processes x (20 + 50) x 8 more threads each, where the
#     BPF task iterator (the default for 200+ processes) replaces a comm file
#     per thread (both shapes and this one are also run with --task-source
#     proc, to show what it saves);
#   - scaling: 200 / 2000 / 5000 processes x (20 + 50), and one process with
#     1 / 1,000 / 100,000 executable VMAs (vm.max_map_count is raised for it
#     and restored).
# CPU = perf stat's task-clock of the command, medians of REPS interleaved
# runs; ratios also as the median of the ratios paired within each run (the
# figure the README's verdicts use); peak RSS from GNU time.
set -euo pipefail
REPS=${1:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${BENCH_OUT:-$root/bench-out}
# M2S_BIN: a binary built elsewhere (CI smoke: the test profile's), not rebuilt
bin=${M2S_BIN:-$root/target/release/mmap2-synth}

if [ -n "${M2S_BENCH_SHAPE:-}" ]; then
    # Inside a namespace: start the workload, measure, print one result line.
    read -r PROCS EXEC_MAPS DATA_MAPS MODE THREADS <<<"$M2S_BENCH_SHAPE"
    libs=()
    for l in libc.so.6 libm.so.6 libstdc++.so.6 libz.so.1 libgcc_s.so.1 libcrypto.so.3 libssl.so.3 libzstd.so.1; do
        p=/usr/lib/x86_64-linux-gnu/$l
        [ -e "$p" ] && libs+=("$p")
    done
    [ "$MODE" = one ] && libs=("${libs[0]}")
    rm -rf "$out/ready" && mkdir -p "$out/ready"
    for i in $(seq 1 "$PROCS"); do
        "$out/mapper" --wait forever --threads "${THREADS:-0}" \
            --exec-maps "$EXEC_MAPS" --data-maps "$DATA_MAPS" \
            --ready "$out/ready/$i" "${libs[@]}" >/dev/null &
    done
    deadline=$((SECONDS + 300))
    while [ "$(find "$out/ready" -type f ! -name '*tmp*' | wc -l)" -lt "$PROCS" ]; do
        [ $SECONDS -lt $deadline ] || { echo "workload did not start in 300 s" >&2; exit 1; }
        sleep 0.05
    done
    nexec=$(cat /proc/[0-9]*/maps 2>/dev/null | awk '$2 ~ /x/' | wc -l)
    nall=$(cat /proc/[0-9]*/maps 2>/dev/null | wc -l)
    measure() { # NAME CMD...: appends "wall cpu" (seconds) to NAME.times
        local name=$1
        shift
        # perf stat's task-clock (CPU of the command and its children) and
        # duration_time, to the microsecond: bash's `time` gives
        # milliseconds, too coarse for the one-process rows (a few ms each)
        # every command writes a new file, as a first snapshot does
        # (replacing one costs an fsync, which a new file does not need)
        rm -f "$f" "$f.perf"
        perf stat -x, -e task-clock,duration_time -o "$out/stat.tmp" -- "$@" >/dev/null 2>&1
        awk -F, '/task-clock/ {c = $1 / 1e3} /duration_time/ {w = $1 / 1e9}
                 END {printf "%.6f %.6f\n", w, c}' "$out/stat.tmp" >>"$out/$name.times"
    }
    f="$out/bench.data"
    names=(floor synth synth_nowatch synth_j1 synth_nobuildid perf_synth perf_nosynth)
    [ "$MODE" = shape ] && names+=(floor_all synth_d)
    [ "$MODE" = shape ] || [ "$MODE" = threads ] && names+=(synth_proc)
    for n in "${names[@]}"; do : >"$out/$n.times"; done
    for _ in $(seq 1 "$REPS"); do
        # interleaved, so the machine's noise hits every command alike
        measure floor "$out/procmap_floor"
        measure synth "$bin" -q --all -o "$f"
        measure synth_nowatch "$bin" -q --all --no-watch --no-kernel -o "$f"
        measure synth_j1 "$bin" -q --all -j 1 -o "$f"
        measure synth_nobuildid "$bin" -q --all --no-buildid -o "$f"
        measure perf_synth perf record -q -a -e dummy -o "$f.perf" -- true
        measure perf_nosynth perf record -q -a -e dummy --synth=no -o "$f.perf" -- true
        if [ "$MODE" = shape ] || [ "$MODE" = threads ]; then
            measure synth_proc "$bin" -q --all --task-source proc -o "$f"
        fi
        if [ "$MODE" = shape ]; then
            measure floor_all "$out/procmap_floor" all
            measure synth_d "$bin" -q --all -d -o "$f"
        fi
        rm -f "$f" "$f.perf"
    done
    rss=$( { /usr/bin/time -f '%M' "$bin" -q --all -d -o "$f" >/dev/null; } 2>&1 | tail -1)
    rm -f "$f"
    median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
    line="$PROCS $EXEC_MAPS $DATA_MAPS $MODE $nexec $nall rss=$rss threads=${THREADS:-0}"
    for n in "${names[@]}"; do
        line+=" $n=$(cut -d' ' -f1 "$out/$n.times" | median)/$(cut -d' ' -f2 "$out/$n.times" | median)"
    done
    # Ratios paired within each run (the commands of one run are seconds
    # apart, so they share the machine's state), then their median: the
    # floor moves by up to 1.8x between runs here, and a ratio of medians
    # taken from different runs carries that drift.
    pair() { # EXPR over the fields of the named .times files, pasted
        local expr=$1
        shift
        local files=()
        for n in "$@"; do files+=("$out/$n.times"); done
        paste -d' ' "${files[@]}" | awk "{print $expr}" | median
    }
    line+=" pair_synth_floor=$(pair '($4 > 0) ? $2 / $4 : 0' synth floor)"
    line+=" pair_perf_synth=$(pair '($6 > 0) ? ($2 - $4) / $6 : 0' perf_synth perf_nosynth synth)"
    line+=" pair_j2_j1=$(pair '($3 > 0) ? $1 / $3 : 0' synth synth_j1)"
    if [ "$MODE" = shape ]; then
        line+=" pair_d_all=$(pair '($4 > 0) ? $2 / $4 : 0' synth_d floor_all)"
    fi
    echo "$line"
    exit 0
fi

mkdir -p "$out"
[ -n "${M2S_BIN:-}" ] || (cd "$root" && cargo build --release --quiet)
gcc -O2 -o "$out/mapper" "$root/fixtures/mapper.c" -ldl -lpthread
gcc -O2 -o "$out/procmap_floor" "$root/benches/procmap_floor.c"
command -v perf >/dev/null || { echo "benchmark needs perf (apt-get install linux-perf)" >&2; exit 1; }
old_max=$(cat /proc/sys/vm/max_map_count)
restore() { echo "$old_max" >/proc/sys/vm/max_map_count; }
trap restore EXIT
results="$out/results.txt"
: >"$results"
run_shape() { # PROCS EXEC DATA MODE [THREADS]
    M2S_BENCH_SHAPE="$*" unshare -fp --mount-proc "$0" "$REPS" | tee -a "$results"
}
if [ -n "${M2S_BENCH_SMOKE:-}" ]; then
    # CI: every code path of the script on tiny workloads
    run_shape 5 10 10 shape
    run_shape 5 10 10 threads 2
    run_shape 20 5 5 scale
    run_shape 1 1 0 one
    run_shape 1 100 0 one
else
    run_shape 200 100 1000 shape
    run_shape 2000 20 50 shape
    run_shape 500 20 50 threads 8
    run_shape 5000 20 50 scale
    echo 262144 >/proc/sys/vm/max_map_count
    run_shape 1 1 0 one
    run_shape 1 1000 0 one
    run_shape 1 100000 0 one
fi
restore
echo "workloads: $(nproc) CPUs; $(uname -r); $(perf version); $REPS runs each, medians"
python3 "$root/benches/report.py" "$results"
