#!/usr/bin/env bash
# Interleaved A/B of snapshot commands on one workload: the way to compare two
# builds on this machine, where the floor itself moves by up to 1.8x between
# workloads started alike (see README, "Noise").
#
#   benches/ab.sh PROCS EXEC_MAPS DATA_MAPS REPS -- CMD...     (as root)
#
# Starts PROCS mappers (fixtures/mapper.c: EXEC_MAPS + DATA_MAPS extra VMAs each,
# real system libraries) in a private PID namespace, then runs each CMD (a
# shell command line) REPS times, interleaved, under `perf stat`, and prints
# per command the medians of task-clock (CPU), wall, user and system time.
# $FLOOR names the floor (benches/procmap_floor.c) and $M2S the release
# binary in the commands, e.g.
#   benches/ab.sh 2000 20 50 11 -- '$FLOOR' '$M2S -q --all -o /tmp/a.data' \
#       '/tmp/old-m2s -q --all -o /tmp/a.data'
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${BENCH_OUT:-$root/bench-out}
if [ -z "${M2S_AB_INSIDE:-}" ]; then
    [ $# -ge 6 ] && [ "$5" = "--" ] || { sed -n '2,16p' "$0" >&2; exit 2; }
    mkdir -p "$out"
    gcc -O2 -o "$out/mapper" "$root/fixtures/mapper.c" -ldl -lpthread
    gcc -O2 -o "$out/procmap_floor" "$root/benches/procmap_floor.c"
    (cd "$root" && cargo build --release --quiet)
    M2S_AB_INSIDE=1 exec unshare -fp --mount-proc "$0" "$@"
fi
PROCS=$1 EXEC=$2 DATA=$3 REPS=$4
shift 5
export FLOOR="$out/procmap_floor" M2S="$root/target/release/mmap2-synth"
libs=()
for l in libc.so.6 libm.so.6 libstdc++.so.6 libz.so.1 libgcc_s.so.1 libcrypto.so.3 libssl.so.3 libzstd.so.1; do
    p=/usr/lib/x86_64-linux-gnu/$l
    [ -e "$p" ] && libs+=("$p")
done
ready="$out/ab-ready"
rm -rf "$ready" && mkdir -p "$ready"
for i in $(seq 1 "$PROCS"); do
    "$out/mapper" --wait forever --exec-maps "$EXEC" --data-maps "$DATA" \
        --ready "$ready/$i" "${libs[@]}" >/dev/null &
done
deadline=$((SECONDS + 300))
while [ "$(find "$ready" -type f ! -name '*tmp*' | wc -l)" -lt "$PROCS" ]; do
    [ $SECONDS -lt $deadline ] || { echo "workload did not start in 300 s" >&2; exit 1; }
    sleep 0.05
done
n=0
for _ in "$@"; do : >"$out/ab.$n"; n=$((n + 1)); done
for _ in $(seq 1 "$REPS"); do
    n=0
    for c in "$@"; do
        perf stat -x, -e task-clock,duration_time,user_time,system_time -o "$out/ab.stat" \
            -- bash -c "$c" >/dev/null 2>&1
        awk -F, '/task-clock/ {t = $1} /duration_time/ {d = $1 / 1e6}
                 /user_time/ {u = $1 / 1e6} /system_time/ {s = $1 / 1e6}
                 END {print t, d, u, s}' "$out/ab.stat" >>"$out/ab.$n"
        n=$((n + 1))
    done
done
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
echo "$PROCS x ($EXEC + $DATA), $REPS interleaved runs, medians (ms): cpu wall user sys"
n=0
for c in "$@"; do
    printf '%8.1f %8.1f %7.1f %7.1f  %s\n' \
        "$(cut -d' ' -f1 "$out/ab.$n" | median)" "$(cut -d' ' -f2 "$out/ab.$n" | median)" \
        "$(cut -d' ' -f3 "$out/ab.$n" | median)" "$(cut -d' ' -f4 "$out/ab.$n" | median)" "$c"
    n=$((n + 1))
done
