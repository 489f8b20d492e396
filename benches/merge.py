#!/usr/bin/env python3
"""Benchmark for `mmap2-synth merge` against `cp` on two real recordings.

    benches/merge.py [SECONDS] [REPS]      (default 10 s of recording, 7 runs)

Both recordings are made here, of CPU burners this script starts (`perf
record -p`, `--synth=no`, so their maps are missing):
  - dense: two burners, `-g -F 20000 -e cpu-clock`: hundreds of thousands of
    small samples, the shape of a busy `-a -g` recording;
  - dwarf: one burner, `--call-graph dwarf -F 4000`: few, huge samples.
A snapshot of the burners is taken before recording. With the burners
stopped (an idle machine), each recording is then, interleaved REPS times:
copied with `cp`, merged with `--maps SNAP` (maps inserted for every pid), and
its merged output merged again (nothing to insert; compared with `cp` of that
merged file, its own input), and given to `perf inject
--buildid-all` for reference. A third, dense recording with perf's own
synthesis (inode-form MMAP2) is copied, given to `convert --buildid-mmap2`,
`convert --to pipe` and `perf inject --buildid-all`, and its `-z` twin to
`convert --portable` (compared with `cp` of the uncompressed one); the same
recording goes to `pprof` (against `perf report --stdio --sort sym`) and
`pprof --no-symbolize` (against `cp`). Prints medians of wall time, peak RSS (GNU
time) and the ratios of issue 8.
"""
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.environ.get("BENCH_OUT", os.path.join(ROOT, "bench-out"))
# M2S_BIN: a binary built elsewhere (CI smoke: the test profile's), not rebuilt
BIN = os.environ.get("M2S_BIN") or os.path.join(ROOT, "target", "release", "mmap2-synth")


def run(cmd):
    """Runs cmd, returns (wall seconds, peak RSS KiB); fails loudly. The peak
    RSS comes from GNU time (wait4 on a child of this Python would count the
    interpreter's pages from before exec)."""
    rss_file = os.path.join(OUT, "rss.txt")
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss_file] + cmd,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{cmd} failed: {p.stderr.decode(errors='replace')}")
    with open(rss_file) as f:
        return wall, int(f.read().split()[-1])


def warm(cmd):
    """Reads every file cmd names, so each command starts from a cached
    input: this VM drops cached pages of idle files all the time (~2% of a
    25 MB recording in 30 s, with no reclaim counted in /proc/vmstat), and
    a run that meets a few dozen of them waits on the disk (the kernel's
    copy and the walk both stalled in `folio_wait_bit`, seen with `perf
    record -e sched:sched_switch -g`)."""
    for a in [shutil.which(cmd[0]) or cmd[0], *cmd[1:]]:
        if os.path.isfile(a):
            with open(a, "rb") as f:
                while f.read(1 << 20):
                    pass


def time_all(cmds, reps, o):
    """Runs every command of cmds REPS times, interleaved, each to a new
    output o (as `cp` gets), its files read first (see `warm`); returns
    their (wall, RSS) lists by name."""
    res = {k: [] for k in cmds}
    for _ in range(reps):
        for name, cmd in cmds.items():
            if os.path.exists(o):
                os.unlink(o)
            warm(cmd)
            res[name].append(run(cmd))
    if os.path.exists(o):
        os.unlink(o)
    return res


def burners(n, secs):
    """Starts n burners; returns (processes, pids)."""
    ps = [subprocess.Popen([os.path.join(OUT, "burn"), str(secs)], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE) for _ in range(n)]
    return ps, [int(p.stdout.readline().split()[1]) for p in ps]


def stop(ps):
    for p in ps:
        if p.poll() is None:
            p.stdin.close()
            p.wait()


def record(name, n, perf_args, secs, synth=False):
    """Records n burners (perf's own synthesis only if synth); returns
    (recording, snapshot)."""
    rec = os.path.join(OUT, f"merge-{name}.data")
    snap = os.path.join(OUT, f"merge-{name}-snap.data")
    ps, pids = burners(n, secs + 600)
    try:
        subprocess.run([BIN, "-q", *sum((["-p", str(p)] for p in pids), []), "-o", snap], check=True)
        subprocess.run(["perf", "record", "-q", *perf_args, *([] if synth else ["--synth=no"]), "-p",
                        ",".join(map(str, pids)), "-o", rec, "--", "sleep", str(secs)], check=True)
    finally:
        stop(ps)
    return rec, snap


def measure(rec, snap, reps):
    merged = rec + ".merged"
    subprocess.run([BIN, "merge", "-q", rec, "--maps", snap, "-o", merged], check=True)
    o = os.path.join(OUT, "merge-out.data")
    cmds = {
        "cp": ["cp", rec, o],
        "merge --maps SNAP": [BIN, "merge", "-q", rec, "--maps", snap, "-o", o],
        "merge (nothing to insert)": [BIN, "merge", "-q", merged, "-o", o],
        # the baseline of the merge above: `cp` of its own input (a file we
        # wrote with copy_file_range copies 1.1-2x slower from the page cache
        # than perf's own output in this script's runs; cause not pinned down)
        "cp (the merged input)": ["cp", merged, o],
        "perf inject --buildid-all": ["perf", "inject", "--buildid-all", "-i", rec, "-o", o],
    }
    res = time_all(cmds, reps, o)
    os.unlink(merged)
    return res


def measure_convert(rec, zrec, reps):
    """convert of a recording with perf's inode-form maps, and --portable of
    its `-z` twin, against `cp` of the uncompressed recording."""
    o = os.path.join(OUT, "convert-out.data")
    cmds = {
        "cp": ["cp", rec, o],
        "convert --buildid-mmap2": [BIN, "convert", "-q", "--buildid-mmap2", rec, "-o", o],
        "convert --to pipe": [BIN, "convert", "-q", "--to", "pipe", rec, "-o", o],
        "convert --portable (-z twin)": [BIN, "convert", "-q", "--portable", zrec, "-o", o],
        "perf inject --buildid-all": ["perf", "inject", "--buildid-all", "-i", rec, "-o", o],
    }
    inject_help = subprocess.run(["perf", "inject", "-h"], capture_output=True, text=True)
    if "mmap2-buildid-all" in inject_help.stdout + inject_help.stderr:
        cmds["perf inject --mmap2-buildid-all"] = ["perf", "inject", "--mmap2-buildid-all",
                                                   "-i", rec, "-o", o]
    return time_all(cmds, reps, o)


def measure_pprof(rec, reps):
    """pprof of the dense recording (perf's own maps): without symbolization
    against `cp`, with it against `perf report --stdio --sort sym`."""
    o = os.path.join(OUT, "pprof-out.pb.gz")
    cmds = {
        "cp": ["cp", rec, o],
        "pprof --no-symbolize": [BIN, "pprof", "-q", "--no-symbolize", rec, "-o", o],
        "pprof": [BIN, "pprof", "-q", rec, "-o", o],
        "perf report --stdio --sort sym": ["perf", "report", "--stdio", "--sort", "sym", "-i", rec],
    }
    return time_all(cmds, reps, o)


def table(res):
    med = {k: statistics.median(w for w, _ in v) for k, v in res.items()}
    print(f"| command | wall s | peak RSS MiB | wall / cp |")
    print("|---|---|---|---|")
    for k, v in res.items():
        print(f"| {k} | {med[k]:.3f} | {max(m for _, m in v) / 1024:.1f} | {med[k] / med['cp']:.2f} |")
    return med


def main():
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    os.makedirs(OUT, exist_ok=True)
    if not os.environ.get("M2S_BIN"):
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    fx = os.path.join(ROOT, "fixtures")
    lib = os.path.join(OUT, "libburn.so")
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", lib, os.path.join(fx, "libburn.c")], check=True)
    subprocess.run(["cc", "-O1", "-o", os.path.join(OUT, "burn"), os.path.join(fx, "burn.c"),
                    f"-L{OUT}", "-lburn", f"-Wl,-rpath,{OUT}"], check=True)
    recordings = {
        "dense": record("dense", 2, ["-g", "-F", "20000", "-e", "cpu-clock"], secs),
        "dwarf": record("dwarf", 1, ["-F", "4000", "--call-graph", "dwarf"], min(secs, 3.0)),
    }
    perf_version = subprocess.run(["perf", "version"], capture_output=True, text=True).stdout.strip()
    print(f"{os.cpu_count()} CPUs; {perf_version}; {reps} runs each, medians")
    for name, (rec, snap) in recordings.items():
        res = measure(rec, snap, reps)
        nrec = subprocess.run([BIN, "merge", rec, "--maps", snap, "-o", os.path.join(OUT, "n.data")],
                              capture_output=True, text=True, check=True)
        nrec = (nrec.stdout + nrec.stderr).split()[3]
        os.unlink(os.path.join(OUT, "n.data"))
        print(f"\n{name}: {os.path.getsize(rec) / 1e6:.1f} MB, {nrec} records")
        med = table(res)
        rss = max(m for k in ("merge --maps SNAP", "merge (nothing to insert)") for _, m in res[k]) / 1024
        print(f"targets: merge --maps / cp {med['merge --maps SNAP'] / med['cp']:.2f} [<= 1.3], "
              f"nothing to insert / cp of its input "
              f"{med['merge (nothing to insert)'] / med['cp (the merged input)']:.2f} [<= 1.3], "
              f"merge peak RSS {rss:.1f} MiB [<= 32]")
        os.unlink(rec)
    # convert: a dense recording with perf's own (inode-form) maps, and its -z twin.
    dense = ["-g", "-F", "20000", "-e", "cpu-clock"]
    rec, snap = record("dense-synth", 2, dense, secs, synth=True)
    os.unlink(snap)
    zrec, snap = record("dense-synth-z", 2, dense + ["-z"], secs, synth=True)
    os.unlink(snap)
    print(f"\ndense with perf's synthesis: {os.path.getsize(rec) / 1e6:.1f} MB; "
          f"its -z twin {os.path.getsize(zrec) / 1e6:.1f} MB")
    res = measure_convert(rec, zrec, reps)
    med = table(res)
    rss = max(m for k in res if k.startswith("convert") for _, m in res[k]) / 1024
    print(f"targets: convert --buildid-mmap2 / cp {med['convert --buildid-mmap2'] / med['cp']:.2f} [<= 1.5], "
          f"--portable of the -z twin / cp {med['convert --portable (-z twin)'] / med['cp']:.2f} [<= 3], "
          f"convert peak RSS {rss:.1f} MiB [<= 32]; perf inject --buildid-all / convert "
          f"{med['perf inject --buildid-all'] / med['convert --buildid-mmap2']:.2f}")
    print(f"\npprof of the same recording:")
    res = measure_pprof(rec, reps)
    med = table(res)
    print(f"targets: pprof / perf report {med['pprof'] / med['perf report --stdio --sort sym']:.2f} [<= 1], "
          f"pprof --no-symbolize / cp {med['pprof --no-symbolize'] / med['cp']:.2f} [<= 2], "
          f"peak RSS {max(m for _, m in res['pprof']) / 1024:.1f} MiB")
    os.unlink(rec)
    os.unlink(zrec)


if __name__ == "__main__":
    main()
