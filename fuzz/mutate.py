#!/usr/bin/env python3
"""Black-box mutation fuzzer of the built `mmap2-synth` binary's perf.data readers.

The cargo-fuzz targets next to this file call the library in process; this
script runs the real binary, as an operator would, on mutated recordings and
snapshots: `dump` (plain, --sort, --json, --salvage, stdin), `merge` (the
mutant as recording and as --maps snapshot, live, --in-place, --salvage),
`convert` (each mode, --in-place), `archive --from` and `pprof`. Each run is
under `timeout 10` and `prlimit --as` (2 GiB), in a scratch directory of its
own (also its TMPDIR). It flags: an exit status other than 0, 2 and 3; a
panic; a hang; an allocation failure (the memory limit); an output (or an
--in-place input changed) left behind by a failed run; a `.m2s-*.tmp` left
behind; an output not 0600; an output of a successful merge/convert that
`dump` then refuses. Each distinct finding (command, kind, signature) is
saved with its mutant, command line and stderr, and minimized.

Seeds: small real recordings made at start (perf record of `true`, `-g`,
`-z`, `--call-graph dwarf`, pipe mode; `mmap2-synth -p` snapshots, file and
pipe, of a process kept alive while fuzzing so archive/merge find it),
plus fixtures/pin/*.data and fixtures/fuzz/perf_file/*.

Mutations: bit flips, bytes set to 0x00/0xff/0x7f/0x80, u16/u32/u64 set to
boundary values at 8-aligned offsets and at the file header's fields, chunk
truncation/deletion/duplication/splicing from another seed, record-level
edits (header size, a field of a record, a record dropped, duplicated or
moved, with the data section and feature table kept consistent) and the
same edits inside the zstd payload of `perf record -z` recordings.

It is a tool, not a test: neither `cargo test` nor .ci/run runs it.
Run it niced, one at a time (it uses one core), as root, after a release
build:

    cargo build --release
    nice -n 19 python3 fuzz/mutate.py --minutes 20 --out /tmp/m2s-fuzz
    python3 fuzz/mutate.py --replay FILE --cmd convert-pipe     # one run, verbose
    python3 fuzz/mutate.py --minimize FILE --cmd dump --kind panic

--bin picks another binary (a build with RUSTFLAGS="-C overflow-checks=on"
also finds arithmetic overflows); --seed makes a run repeatable.
"""
import argparse
import hashlib
import os
import random
import re
import shutil
import signal
import stat
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OK_EXIT = (0, 2, 3)
WORKLOAD = "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"
# record types
COMPRESSED, COMPRESSED2 = 81, 83

# name -> argv after the binary. IN: the mutant (a copy in the scratch dir),
# OUT: an output path there, DIR: a directory there, SNAP/REC: fixed good
# inputs. "stdin" commands get the mutant through a pipe.
COMMANDS = {
    "dump": ["dump", "IN"],
    "dump-sort": ["dump", "--sort", "IN"],
    "dump-json": ["dump", "--json", "IN"],
    "dump-salvage": ["dump", "--salvage", "--sort", "IN"],
    "dump-stdin": ["dump", "-"],
    "merge": ["merge", "-q", "IN", "--maps", "SNAP", "-o", "OUT"],
    "merge-salvage": ["merge", "-q", "--salvage", "IN", "--maps", "SNAP", "-o", "OUT"],
    "merge-as-maps": ["merge", "-q", "REC", "--maps", "IN", "-a", "-o", "OUT"],
    "merge-live": ["merge", "-q", "-j", "1", "IN", "-o", "OUT"],
    "merge-in-place": ["merge", "-q", "--in-place", "--force", "IN", "--maps", "SNAP"],
    "convert": ["convert", "-q", "--buildid-mmap2", "IN", "-o", "OUT"],  # the in-place patch
    "convert-file": ["convert", "-q", "--to", "file", "IN", "-o", "OUT"],
    "convert-pipe": ["convert", "-q", "--to", "pipe", "IN", "-o", "OUT"],
    "convert-decompress": ["convert", "-q", "--decompress", "IN", "-o", "OUT"],
    "convert-buildid": ["convert", "-q", "--buildid-mmap2", "--trust-paths", "--buildid-all", "IN", "-o", "OUT"],
    "convert-portable": ["convert", "-q", "--portable", "--salvage", "IN", "-o", "OUT"],
    "convert-in-place": ["convert", "-q", "--in-place", "--force", "--buildid-mmap2", "IN"],
    "archive": ["archive", "-q", "-j", "1", "--from", "IN", "-o", "DIR"],
    "pprof": ["pprof", "-q", "IN", "-o", "OUT"],
    "pprof-nosym": ["pprof", "-q", "--no-symbolize", "--salvage", "IN", "-o", "OUT"],
}
# whose successful output `dump` must read back
REREAD = ("merge", "merge-salvage", "merge-as-maps", "merge-live", "convert",
          "convert-file", "convert-pipe", "convert-decompress", "convert-buildid",
          "convert-portable")


# ---------------------------------------------------------------- seeds

def make_seeds(binary, seeds, live_pid):
    """Records the seed recordings into `seeds`; returns their paths."""
    os.makedirs(seeds, exist_ok=True)
    w = ["sh", "-c", WORKLOAD]
    rec = ["perf", "record", "-q", "-e", "cpu-clock", "-F", "500"]
    jobs = {
        "true.data": (rec + ["-o", "@", "--", "true"], False),
        "g.data": (rec + ["-g", "-o", "@", "--"] + w, False),
        "z.data": (rec + ["-z", "-o", "@", "--"] + w, False),
        "dwarf.data": (rec[:-1] + ["50", "--call-graph", "dwarf,1024", "-o", "@", "--"] + w, False),
        "pipe.data": (rec + ["-o", "-", "--"] + w, True),
        "zpipe.data": (rec + ["-z", "-g", "-o", "-", "--"] + w, True),
        "snap.data": ([binary, "-q", "-p", str(live_pid), "-o", "@"], False),
        "snap-be.data": ([binary, "-q", "-p", str(live_pid), "--byte-order", "big", "-o", "@"], False),
        "snap-pipe.data": ([binary, "-q", "-p", str(live_pid), "-o", "-"], True),
    }
    out = []
    for name, (argv, to_stdout) in jobs.items():
        path = os.path.join(seeds, name)
        argv = [path if a == "@" else a for a in argv]
        with open(path if to_stdout else os.devnull, "wb") as so:
            r = subprocess.run(argv, stdout=so, stderr=subprocess.DEVNULL, timeout=120)
        if r.returncode == 0 and os.path.getsize(path) > 0:
            out.append(path)
        else:
            print(f"seed {name}: {argv[0]} failed ({r.returncode}), skipped", file=sys.stderr)
    merged = os.path.join(seeds, "merged.data")
    if subprocess.run([binary, "merge", "-q", os.path.join(seeds, "g.data"), "--maps",
                       os.path.join(seeds, "snap.data"), "-a", "-o", merged]).returncode == 0:
        out.append(merged)
    return out


def fixture_seeds():
    out = []
    for d in ("fixtures/pin", "fixtures/fuzz/perf_file"):
        d = os.path.join(ROOT, d)
        out += [os.path.join(d, f) for f in sorted(os.listdir(d))]
    return [p for p in out if os.path.getsize(p) <= 300_000]


# ---------------------------------------------------------------- perf.data layout

def endian_of(b):
    if b[:8] == b"PERFILE2":
        return "<"
    if b[:8] == b"2ELIFREP":
        return ">"
    return None


def split_records(b):
    """(endian, pipe?, data start, data end, [(offset, size)]) or None."""
    e = endian_of(b)
    if e is None or len(b) < 16:
        return None
    (hsize,) = struct.unpack_from(e + "Q", b, 8)
    if hsize == 16:
        start, end, pipe = 16, len(b), True
    elif hsize == 104 and len(b) >= 104:
        start, size = struct.unpack_from(e + "QQ", b, 40)
        end, pipe = start + size, False
        if end > len(b):
            return None
    else:
        return None
    recs, o = [], start
    while o + 8 <= end:
        (size,) = struct.unpack_from(e + "H", b, o + 6)
        if size < 8 or o + size > end:
            break
        recs.append((o, size))
        o += size
    return e, pipe, start, end, recs


def replace_data(b, lay, new):
    """`b` with its data section (records) replaced by `new`, the file header's
    data size and the feature table's offsets moved to match."""
    e, pipe, start, end, _ = lay
    if pipe:
        return b[:start] + new
    delta = len(new) - (end - start)
    out = bytearray(b[:start] + new + b[end:])
    struct.pack_into(e + "Q", out, 48, len(new))
    feats = struct.unpack_from(e + "4Q", b, 72)
    n = sum(bin(w).count("1") for w in feats)
    tab = start + len(new)
    for i in range(n):
        o = tab + 16 * i
        if o + 16 > len(out):
            break
        off, sz = struct.unpack_from(e + "QQ", out, o)
        if off >= end:
            struct.pack_into(e + "Q", out, o, (off + delta) % (1 << 64))
    (aoff,) = struct.unpack_from(e + "Q", out, 24)
    if aoff >= end:
        struct.pack_into(e + "Q", out, 24, (aoff + delta) % (1 << 64))
    return bytes(out)


def zstd(args, data):
    r = subprocess.run(["zstd", "-q", "-c"] + args, input=data, stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, timeout=30)
    return r.stdout if r.returncode == 0 else None


# ---------------------------------------------------------------- mutations

BOUNDS = {
    2: [0, 1, 7, 8, 9, 0x7f, 0x80, 0xff, 0x100, 0x7fff, 0x8000, 0xfff8, 0xffff],
    4: [0, 1, 8, 0x7fffffff, 0x80000000, 0xfffffff8, 0xffffffff, 0x10000, 0xffff],
    8: [0, 1, 8, 16, 104, 0x7fffffffffffffff, 0x8000000000000000, 0xffffffffffffffff,
        0xfffffffffffffff8, 0xffffffff, 0x100000000, 1 << 40, 1 << 31],
}
# the file header's u64 fields: size, attr_size, attrs {off, size},
# data {off, size}, event_types, adds_features
HEADER_FIELDS = [8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96]


def boundary(width, filelen, rng):
    vals = BOUNDS[width] + [filelen, filelen - 8, filelen + 8, rng.randrange(1 << (8 * width))]
    return rng.choice(vals) % (1 << (8 * width))


def m_bitflip(b, rng, _):
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)


def m_byteset(b, rng, _):
    for _ in range(rng.randint(1, 4)):
        b[rng.randrange(len(b))] = rng.choice((0x00, 0xff, 0x7f, 0x80, 0x01, 0xfe))


def m_int(b, rng, _):
    width = rng.choice((2, 4, 8))
    if len(b) < width:
        return
    off = rng.randrange(0, len(b) - width + 1, 8) + rng.choice((0, 0, 0, 4, 2, 6))
    off = min(off, len(b) - width)
    e = endian_of(b) or "<"
    if rng.random() < 0.2:
        e = "<" if e == ">" else ">"
    struct.pack_into(e + {2: "H", 4: "I", 8: "Q"}[width], b, off, boundary(width, len(b), rng))


def m_header(b, rng, _):
    if len(b) < 104:
        return m_int(b, rng, None)
    e = endian_of(b) or "<"
    off = rng.choice(HEADER_FIELDS)
    if rng.random() < 0.5:
        struct.pack_into(e + "Q", b, off, boundary(8, len(b), rng))
    else:
        (v,) = struct.unpack_from(e + "Q", b, off)
        struct.pack_into(e + "Q", b, off, (v + rng.choice((-16, -8, -1, 1, 8, 16, 4096))) % (1 << 64))


def m_truncate(b, rng, _):
    del b[rng.randrange(len(b)):]


def m_delete(b, rng, _):
    i = rng.randrange(len(b))
    del b[i:i + rng.choice((1, 8, 16, 64, rng.randint(1, 4096)))]


def m_duplicate(b, rng, _):
    i = rng.randrange(len(b))
    chunk = b[i:i + rng.choice((8, 16, 64, rng.randint(1, 4096)))]
    j = rng.randrange(len(b) + 1)
    b[j:j] = chunk * rng.choice((1, 1, 2, 16))


def m_splice(b, rng, other):
    i = rng.randrange(len(other))
    chunk = other[i:i + rng.randint(8, 4096)]
    j = rng.randrange(len(b) + 1)
    if rng.random() < 0.5:
        b[j:j + len(chunk)] = chunk
    else:
        b[j:j] = chunk


def edit_records(raw, lay, rng, other):
    """One record-level edit of the records in `raw` (a data section)."""
    e = lay[0]
    recs = [bytearray(raw[o:o + s]) for o, s in lay[4]]
    if not recs:
        return raw
    k = rng.randrange(len(recs))
    r = recs[k]
    op = rng.randrange(7)
    if op == 0:  # the header's size
        s = boundary(2, len(r), rng) if rng.random() < 0.5 else len(r) + rng.choice((-8, -1, 1, 8, 16))
        struct.pack_into(e + "H", r, 6, s % 0x10000)
    elif op == 1 and len(r) > 8:  # a field of the body
        width = rng.choice((2, 4, 8))
        off = 8 + rng.randrange(0, max(1, len(r) - 8 - width + 1), 4 if width > 2 else 2)
        if off + width <= len(r):
            struct.pack_into(e + {2: "H", 4: "I", 8: "Q"}[width], r, off, boundary(width, len(r), rng))
    elif op == 2:
        del recs[k]
    elif op == 3:
        recs.insert(rng.randrange(len(recs) + 1), bytearray(r))
    elif op == 4:
        recs.insert(rng.randrange(len(recs) + 1), recs.pop(k))
    elif op == 5:  # the type, or misc
        if rng.random() < 0.5:
            struct.pack_into(e + "I", r, 0, rng.choice((0, 1, 3, 7, 9, 10, 64, 67, 68, 69, 71, 73, 74,
                                                       78, 79, 80, 81, 82, 83, 100, 0xffffffff)))
        else:
            struct.pack_into(e + "H", r, 4, rng.choice((0, 1, 2, 3, 0x2000, 0x4000, 0x8000, 0xffff)))
    else:  # a record of another seed of the same byte order
        ol = split_records(other)
        if ol and ol[0] == e and ol[4]:
            o, s = rng.choice(ol[4])
            recs.insert(rng.randrange(len(recs) + 1), bytearray(other[o:o + s]))
    return b"".join(recs)


def m_records(b, rng, other):
    lay = split_records(bytes(b))
    if not lay or not lay[4]:
        return m_int(b, rng, None)
    s, e = lay[2], lay[3]
    rel = lay[:4] + ([(o - s, n) for o, n in lay[4]],)
    b[:] = replace_data(bytes(b), lay, edit_records(bytes(b[s:e]), rel, rng, other))


def m_compressed(b, rng, other):
    """A record-level edit inside the zstd payload of the COMPRESSED records,
    recompressed (one frame, split across records of at most 60 KiB)."""
    lay = split_records(bytes(b))
    if not lay:
        return m_int(b, rng, None)
    e, pipe, start, end, recs = lay
    z = [(o, s) for o, s in recs if struct.unpack_from(e + "I", b, o)[0] in (COMPRESSED, COMPRESSED2)]
    if not z:
        return m_records(b, rng, other)
    two = struct.unpack_from(e + "I", b, z[0][0])[0] == COMPRESSED2
    body = 16 if two else 8
    payload = b"".join(bytes(b[o + body:o + s]) for o, s in z)
    inner = zstd(["-d"], payload)
    if inner is None:
        return m_records(b, rng, other)
    ilay = (e, True, 0, len(inner), _inner_records(inner, e))
    inner = edit_records(inner, ilay, rng, other)
    if rng.random() < 0.2:
        inner = inner * rng.choice((2, 50))
    packed = zstd(["-19"], inner)
    if packed is None:
        return
    out, first = bytearray(), True
    for o, s in recs:
        t = struct.unpack_from(e + "I", b, o)[0]
        if t not in (COMPRESSED, COMPRESSED2):
            out += b[o:o + s]
        elif first:
            first = False
            for i in range(0, len(packed), 60000):
                part = packed[i:i + 60000]
                n = body + len(part)
                head = struct.pack(e + "IHH", t, 0, n)
                if two:
                    head += struct.pack(e + "Q", len(part))
                out += head + part
    b[:] = replace_data(bytes(b), lay, bytes(out))


def _inner_records(data, e):
    recs, o = [], 0
    while o + 8 <= len(data):
        (size,) = struct.unpack_from(e + "H", data, o + 6)
        if size < 8 or o + size > len(data):
            break
        recs.append((o, size))
        o += size
    return recs


MUTATORS = [m_bitflip, m_byteset, m_int, m_int, m_header, m_truncate, m_delete,
            m_duplicate, m_splice, m_records, m_records, m_records, m_compressed]


def mutate(seed_bytes, rng, seeds):
    b = bytearray(seed_bytes)
    names = []
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
        if not b:
            break
        m = rng.choice(MUTATORS)
        names.append(m.__name__[2:])
        m(b, rng, rng.choice(seeds))
    return bytes(b), names


# ---------------------------------------------------------------- running

class Runner:
    def __init__(self, binary, scratch, fixed, mem, timeout):
        self.binary, self.scratch, self.fixed = binary, scratch, fixed
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        self.mem = int(mem[:-1]) * units[mem[-1].upper()] if mem[-1].upper() in units else int(mem)
        self.timeout = timeout
        self.n = 0

    def run(self, cmd, data):
        """Runs `cmd` on `data`; returns (findings [(kind, signature)], rc, stderr, argv)."""
        self.n += 1
        work = os.path.join(self.scratch, "w")
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        inp, out, dire = (os.path.join(work, n) for n in ("in.data", "out.data", "cache"))
        with open(inp, "wb") as f:
            f.write(data)
        subst = {"IN": inp, "OUT": out, "DIR": dire, **self.fixed}
        argv = [self.binary] + [subst.get(a, a) for a in COMMANDS[cmd]]
        full = ["prlimit", f"--as={self.mem}", "--", "timeout", "-k", "2", str(self.timeout)] + argv
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUST_")}
        env["TMPDIR"] = work
        stdin = subprocess.PIPE if cmd.endswith("-stdin") else subprocess.DEVNULL
        p = subprocess.Popen(full, cwd=work, env=env, stdin=stdin, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
        try:
            _, err = p.communicate(data if stdin == subprocess.PIPE else None, timeout=self.timeout + 10)
        except BrokenPipeError:
            _, err = p.communicate(timeout=self.timeout + 10)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        rc = p.returncode
        err = err.decode("utf-8", "replace")
        found = []
        if "panicked" in err or "RUST_BACKTRACE" in err:
            m = re.search(r"panicked at ([^\n]*)\n([^\n]*)", err)
            found.append(("panic", m.group(1) + " " + m.group(2)[:80] if m else ""))
        if "memory allocation of" in err or "out of memory" in err.lower():
            found.append(("oom", ""))
        if rc in (124, 137, -9, None):
            found.append(("timeout", ""))
        elif rc not in OK_EXIT and not found:
            found.append((f"exit {rc}", ""))
        if rc != 0:
            if os.path.lexists(out):
                found.append(("output left", ""))
            if cmd.endswith("in-place") and open(inp, "rb").read() != data:
                found.append(("input changed", ""))
        elif os.path.isfile(out):
            mode = stat.S_IMODE(os.stat(out).st_mode)
            if mode & 0o077:
                found.append(("output mode", oct(mode)))
        for dp, dn, fn in os.walk(work):
            for n in fn + dn:
                if n.startswith(".m2s-") and n.endswith(".tmp"):
                    found.append(("tmp left", ""))
        if rc == 0 and cmd in REREAD and os.path.isfile(out):
            r = subprocess.run(["timeout", str(self.timeout), self.binary, "dump", out],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=work)
            if r.returncode != 0:
                msg = r.stderr.decode("utf-8", "replace").strip().splitlines()
                found.append(("unreadable output", norm(msg[-1] if msg else str(r.returncode))))
        return found, rc, err, argv


def norm(s):
    s = s.replace(os.path.dirname(os.path.abspath(__file__)), "")
    return re.sub(r"0x[0-9a-f]+|\d+", "N", s)[:160]


def reproduces(runner, cmd, data, kind, sig):
    found, _, _, _ = runner.run(cmd, data)
    return any(k == kind and (not sig or s == sig) for k, s in found)


def minimize(runner, cmd, data, kind, sig, budget):
    """Shrinks `data` while `cmd` still gives the finding: truncation, then
    removal of chunks of halving size, then zeroing of 8-byte words; first,
    whole records dropped with the data size and feature table kept right."""
    deadline = time.time() + budget
    i = 0
    while time.time() < deadline:  # whole records dropped, the layout kept
        lay = split_records(data)
        if not lay or i >= len(lay[4]):
            break
        o, n = lay[4][i]
        cand = replace_data(data, lay, data[lay[2]:o] + data[o + n:lay[3]])
        if reproduces(runner, cmd, cand, kind, sig):
            data = cand
        else:
            i += 1
    lo, hi = 0, len(data)
    while lo < hi and time.time() < deadline:  # shortest prefix (not monotonic: a guess)
        mid = (lo + hi) // 2
        if reproduces(runner, cmd, data[:mid], kind, sig):
            hi = mid
        else:
            lo = mid + 1
    if hi < len(data) and reproduces(runner, cmd, data[:hi], kind, sig):
        data = data[:hi]
    chunk = max(8, len(data) // 2)
    while chunk >= 1 and time.time() < deadline:
        i = 0
        while i < len(data) and time.time() < deadline:
            cand = data[:i] + data[i + chunk:]
            if cand and reproduces(runner, cmd, cand, kind, sig):
                data = cand
            else:
                i += chunk
        chunk //= 2
    i = 0
    while i + 8 <= len(data) and time.time() < deadline:
        if data[i:i + 8] != b"\0" * 8:
            cand = data[:i] + b"\0" * 8 + data[i + 8:]
            if reproduces(runner, cmd, cand, kind, sig):
                data = cand
        i += 8
    return data


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")),
                                                  "release", "mmap2-synth"))
    ap.add_argument("--out", default="/tmp/m2s-fuzz", help="findings, seeds and scratch go here")
    ap.add_argument("--minutes", type=float, default=20)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--cmds", default=",".join(COMMANDS), help="comma-separated subset of: " + ",".join(COMMANDS))
    ap.add_argument("--mem", default="2G", help="prlimit --as")
    ap.add_argument("--timeout", type=int, default=10)
    ap.add_argument("--minimize-secs", type=int, default=180)
    ap.add_argument("--replay", help="run --cmd on this file and print what it found")
    ap.add_argument("--minimize", help="minimize this file for --cmd and --kind")
    ap.add_argument("--cmd")
    ap.add_argument("--kind")
    a = ap.parse_args()
    if not os.access(a.bin, os.X_OK):
        sys.exit(f"{a.bin}: no binary (cargo build --release, or --bin)")
    os.makedirs(a.out, exist_ok=True)
    fixed = {"SNAP": os.path.join(ROOT, "fixtures/pin/snap-le.data"),
             "REC": os.path.join(ROOT, "fixtures/pin/rec-file.data")}
    runner = Runner(os.path.abspath(a.bin), os.path.join(a.out, "scratch"), fixed, a.mem, a.timeout)
    if a.replay or a.minimize:
        data = open(a.replay or a.minimize, "rb").read()
        if a.replay:
            found, rc, err, argv = runner.run(a.cmd, data)
            print(" ".join(argv), f"\nexit {rc}\n{err}findings: {found}")
            return
        small = minimize(runner, a.cmd, data, a.kind, None, a.minimize_secs)
        dst = a.minimize + ".min"
        open(dst, "wb").write(small)
        print(f"{len(data)} -> {len(small)} bytes: {dst}")
        return

    helper = subprocess.Popen(["sleep", "100000"])
    try:
        seeds = make_seeds(runner.binary, os.path.join(a.out, "seeds"), helper.pid) + fixture_seeds()
        fixed["SNAP"] = os.path.join(a.out, "seeds", "snap.data")
        seed_bytes = [open(p, "rb").read() for p in seeds]
        cmds = a.cmds.split(",")
        seed = a.seed if a.seed is not None else random.randrange(1 << 32)
        rng = random.Random(seed)
        print(f"{len(seeds)} seeds, {len(cmds)} commands, rng seed {seed}", flush=True)
        # what the seeds themselves give is reported once, not as findings
        findings, mutants = {}, 0
        passed = dict.fromkeys(cmds, 0)  # exit 0: the mutant got past the checks
        for p, d in zip(seeds, seed_bytes):
            for c in cmds:
                f, rc, err, _ = runner.run(c, d)
                for kind, sig in f:
                    findings[(c, kind, sig)] = 0
                    print(f"SEED {os.path.basename(p)} {c}: {kind} {sig} (exit {rc}) {err[-300:]}", flush=True)
        end = time.time() + 60 * a.minutes
        while time.time() < end:
            k = rng.randrange(len(seeds))
            try:
                data, how = mutate(seed_bytes[k], rng, seed_bytes)
            except (struct.error, ValueError, IndexError) as err:  # a mutator's own limits
                print(f"mutator failed on {os.path.basename(seeds[k])}: {err!r}", flush=True)
                continue
            mutants += 1
            for c in cmds:
                found, rc, err, argv = runner.run(c, data)
                passed[c] += rc == 0
                for kind, sig in found:
                    key = (c, kind, sig)
                    if key in findings:
                        findings[key] += 1
                        continue
                    findings[key] = 1
                    h = hashlib.sha1(data).hexdigest()[:10]
                    base = os.path.join(a.out, "findings", f"{c}-{kind.replace(' ', '_')}-{h}")
                    os.makedirs(os.path.dirname(base), exist_ok=True)
                    open(base + ".data", "wb").write(data)
                    with open(base + ".txt", "w") as t:
                        t.write(f"seed {seeds[k]}\nmutations {how}\n{' '.join(argv)}\nexit {rc}\n"
                                f"{kind} {sig}\n{err}")
                    print(f"FOUND {c}: {kind} {sig} (exit {rc}) from {os.path.basename(seeds[k])} {how}",
                          flush=True)
                    small = minimize(runner, c, data, kind, sig, a.minimize_secs)
                    open(base + ".min.data", "wb").write(small)
                    print(f"  minimized {len(data)} -> {len(small)} bytes: {base}.min.data", flush=True)
            if mutants % 100 == 0:
                print(f"{mutants} mutants, {runner.n} runs, {len(findings)} findings", flush=True)
        print(f"done: {mutants} mutants, each run by every command; exit 0 per command: {passed}")
        for (c, kind, sig), n in sorted(findings.items()):
            print(f"  {n:5d}  {c}: {kind} {sig}")
    finally:
        helper.send_signal(signal.SIGKILL)
        helper.wait()


if __name__ == "__main__":
    main()
