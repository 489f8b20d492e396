#!/usr/bin/env bash
# What hostile inputs cost: peak memory of a snapshot of processes mapping
# one file at many addresses under a long path, or many hard links to it,
# each under its own long name (any user can make them), of a process
# flooding the watch with maps of a long path while the snapshot is held
# after its scan, pprof's time on a recording of many events all on one
# stack, and archive --from, merge --maps (-a too) and dump --sort of a small file
# whose compressed records expand to 180 MiB of map records.
#
#   benches/hostile.sh           (needs gcc, python3 and zstd;
#                                 M2S_BENCH_SMOKE=1: tiny sizes, for CI)
# Prints GNU time's peak RSS (KiB) and wall time of each run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${BENCH_OUT:-$root/bench-out}/hostile
# M2S_BIN: a binary built elsewhere (CI smoke: the test profile's), not rebuilt
bin=${M2S_BIN:-$root/target/release/mmap2-synth}
if [ -n "${M2S_BENCH_SMOKE:-}" ]; then
    vmas=200 names=200 events=(2000) churn=1 zmib=2
else
    vmas=60000 names=15000 events=(100000 400000) churn=3 zmib=60
fi
mkdir -p "$out"
[ -n "${M2S_BIN:-}" ] || (cd "$root" && cargo build --release --quiet)
gcc -O2 -o "$out/manymaps" "$root/fixtures/manymaps.c"
gcc -O2 -o "$out/churnmap" "$root/fixtures/churnmap.c"
# a 3.8 KB path (15 components of 250 bytes) and a short one, to one file
long="$out/long"
for _ in $(seq 1 15); do long="$long/$(printf 'd%.0s' $(seq 1 250))"; done
mkdir -p "$long"
cp /bin/true "$long/f"
cp /bin/true "$out/f"
# (60,000 VMAs fit under the default vm.max_map_count, 65,530)
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
snapshot() { # FILE NPROCS LABEL [VMAS each]
    local pids=()
    for _ in $(seq 1 "$2"); do
        "$out/manymaps" "$1" "${4:-$vmas}" ${5:-} 2>"$out/made.$_" &
        pids+=($!)
    done
    # each says how many VMAs it made once it has made them
    local deadline=$((SECONDS + 120))
    while [ "$(cat "$out"/made.* | grep -c VMAs)" -lt "$2" ]; do
        [ $SECONDS -lt $deadline ] || { echo "manymaps did not start" >&2; exit 1; }
        sleep 0.1
    done
    local list
    list=$(IFS=,; echo "${pids[*]}")
    /usr/bin/time -f "$3: %M KiB peak, %e s" "$bin" -q -p "$list" -o "$out/s.data" 2>&1 | tail -1
    kill "${pids[@]}"
    wait "${pids[@]}" 2>/dev/null || true
    rm -f "$out"/made.* "$out/s.data"
}
echo "snapshot of processes with $vmas VMAs each of one file (-j default):"
snapshot "$out/f" 6 "6 processes, short path"
snapshot "$long/f" 6 "6 processes, 3.8 KB path"
snapshot "$long/f" 1 "1 process, 3.8 KB path"
# every name is kept once for the BUILD_ID table (written last, in file mode)
python3 -c 'import os, sys; [os.link(sys.argv[1], "%s.%d" % (sys.argv[1], i)) for i in range(int(sys.argv[2]))]' \
    "$long/f" "$names"
snapshot "$long/f" 1 "1 process, $names hard links each under a 3.8 KB name" "$names" each
echo "watched snapshot held after its scan (the test hook) while a process maps and unmaps"
echo "the file under the 3.8 KB path for $churn s (the drain holds at most 16 MiB, the rest is lost):"
coproc CHURN { exec "$out/churnmap" "$long/f" "$churn" 2>"$out/churn.err"; }
read -r _ cpid <&"${CHURN[0]}"
hold="$out/hold"
MMAP2_SYNTH_TEST_HOLD_BEFORE_DRAIN="$hold" /usr/bin/time -f "flood: %M KiB peak, %e s" \
    "$bin" -p "$cpid" -o "$out/s.data" 2>"$out/snap.err" &
snap=$!
deadline=$((SECONDS + 60))
until [ -e "$hold" ]; do
    [ $SECONDS -lt $deadline ] || { echo "the snapshot did not reach its hold" >&2; exit 1; }
    sleep 0.05
done
echo go >&"${CHURN[1]}"
sleep "$churn.5"
rm -f "$hold"
wait "$snap"
echo "$(cat "$out/churn.err"); $(grep -o 'watched during the scan: [^(]*' "$out/snap.err")"
tail -1 "$out/snap.err"
kill "$cpid"; wait "$cpid" 2>/dev/null || true
rm -f "$out/s.data"
echo "pprof --no-symbolize of N events with one sample each, on one stack:"
for n in "${events[@]}"; do
    python3 "$root/benches/gen_many_events.py" "$n" "$out/ev.data"
    /usr/bin/time -f "$n events ($(stat -c %s "$out/ev.data") bytes): %M KiB peak, %e s" \
        "$bin" pprof -q "$out/ev.data" -o "$out/ev.pb.gz" --no-symbolize 2>&1 | tail -1
done
echo "a file of 3 compressed records, each $zmib MiB of four MMAP2 records repeated"
echo "(a process that does not run), as --from, --maps (to a recording without that pid, then -a), dumped:"
python3 "$root/benches/gen_zmmap_bomb.py" "$out/zmaps.data" 3 "$zmib"
z="$out/zmaps.data ($(stat -c %s "$out/zmaps.data") bytes)"
/usr/bin/time -f "archive --from $z: %M KiB peak, %e s" "$bin" archive -q \
    --from "$out/zmaps.data" --no-kernel -o "$out/cache" 2>&1 | tail -1
/usr/bin/time -f "merge --maps $z: %M KiB peak, %e s" "$bin" merge -q \
    "$root/fixtures/pin/rec-file.data" --maps "$out/zmaps.data" -o "$out/m.data" 2>&1 | tail -1
# (-d: three of the four maps are data maps, which the recording does not ask for)
/usr/bin/time -f "merge -a -d --maps $z (every map written): %M KiB peak, %e s" "$bin" merge -q \
    "$root/fixtures/pin/rec-file.data" -a -d --maps "$out/zmaps.data" -o "$out/m.data" 2>&1 | tail -1
/usr/bin/time -f "dump --sort $z: %M KiB peak, %e s" "$bin" dump --sort \
    "$out/zmaps.data" 2>&1 >/dev/null | tail -1
rm -rf "$out"
