#!/usr/bin/env bash
# Generates the seed corpora under fixtures/fuzz/<target>/ (committed):
# real perf recordings of a workload this script starts (file, pipe, -z,
# dwarf call graphs), snapshots and merges from mmap2-synth (little- and
# big-endian), crafted AUXTRACE and trailing-text files, maps text and ELF
# heads. Needs perf, cc and python3; run from anywhere.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/fixtures/fuzz
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$root" && cargo build --release --quiet)
bin=$root/target/release/mmap2-synth
work() { sh -c 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done'; }
export -f work
mkdir -p "$out"/{perf_file,perf_merge,maps_text,elf_notes,records}

# perf recordings of our own workload only
perf record -q -e cpu-clock -F 500 -o "$tmp/file.data" -- sh -c 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done' 2>/dev/null
perf record -q -e cpu-clock -F 500 -o - -- sh -c 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done' >"$tmp/pipe.data" 2>/dev/null
perf record -q -z -e cpu-clock -F 500 -o "$tmp/z.data" -- sh -c 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done' 2>/dev/null
perf record -q --call-graph dwarf,1024 -e cpu-clock -F 50 -o "$tmp/dwarf.data" -- sh -c 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done' 2>/dev/null
sleep 30 & pid=$!
"$bin" -q -p "$pid" -o "$tmp/snap-le.data"
"$bin" -q -p "$pid" --byte-order big -o "$tmp/snap-be.data"
"$bin" -q -p "$pid" -o - >"$tmp/snap-pipe.data"
"$bin" merge -q "$tmp/snap-be.data" --maps "$tmp/snap-le.data" --all -o "$tmp/merged-be.data"
kill "$pid"
(cat "$tmp/pipe.data"; echo "[ perf record: Woken up 1 times to write data ]") >"$tmp/trailing.data"
python3 - "$tmp/snap-le.data" "$tmp/aux-file.data" "$tmp/snap-pipe.data" "$tmp/aux-pipe.data" <<'PY'
import struct, sys
def aux(n):
    rec = struct.pack("<IHH", 71, 0, 48) + struct.pack("<QQQIIII", n, 0, 7, 0, 100, 0, 0)
    return rec + bytes((i * 7) & 0xff for i in range(n))
# file mode: grow the data section by an AUXTRACE record, moving what follows
b = bytearray(open(sys.argv[1], "rb").read())
off, size = struct.unpack_from("<QQ", b, 40)
end = off + size
extra = aux(200)
tail = b[end:]
ntab = len([1 for w in struct.unpack_from("<4Q", b, 72) for i in range(64) if w >> i & 1])
tab = bytearray(tail[:16 * ntab])
for i in range(ntab):
    o, s = struct.unpack_from("<QQ", tab, 16 * i)
    struct.pack_into("<QQ", tab, 16 * i, o + len(extra), s)
b = b[:end] + extra + tab + tail[16 * ntab:]
struct.pack_into("<Q", b, 48, size + len(extra))
open(sys.argv[2], "wb").write(b)
open(sys.argv[4], "wb").write(open(sys.argv[3], "rb").read() + aux(64))
PY
for f in file pipe z dwarf snap-le snap-be snap-pipe merged-be trailing aux-file aux-pipe; do
    [ "$(stat -c %s "$tmp/$f.data")" -le 200000 ] || continue
    cp "$tmp/$f.data" "$out/perf_file/$f"
    cp "$tmp/$f.data" "$out/perf_merge/$f"
    # the records target gets the raw bytes past the header
    tail -c +105 "$tmp/$f.data" | head -c 65536 >"$out/records/$f"
done

cp /proc/self/maps "$out/maps_text/self"
printf '%s\n' '7f00-7f01 r-xp 00000000 08:01 42 /a b\012c (deleted)' \
    'ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]' >"$out/maps_text/odd"
for l in libc.so.6 libz.so.1 ld-linux-x86-64.so.2; do
    p=/usr/lib/x86_64-linux-gnu/$l
    [ -e "$p" ] && head -c 16384 "$p" >"$out/elf_notes/$l"
done
head -c 16384 "$bin" >"$out/elf_notes/mmap2-synth"
ls -la "$out"/*
