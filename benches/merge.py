#!/usr/bin/env python3
"""Benchmark for `mmap2-synth merge` on a ~100 MB real recording.

    benches/merge.py [SECONDS] [REPS]      (default 3 s of recording, 7 runs)

Records a CPU burner the script starts (perf record --synth=no, DWARF call
graphs, so the file is large: about 33 MB per second), then times side by side,
interleaved, REPS times: `cp` of the file, `mmap2-synth merge` (live maps of
the burner inserted), and `perf inject --buildid-all`. Prints medians of wall
time, the peak RSS of each command (from wait4) and the ratios.
"""
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.environ.get("BENCH_OUT", os.path.join(ROOT, "bench-out"))


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


def measure(cmds, res, reps):
    """Runs every command once per round, interleaved, REPS rounds."""
    for _ in range(reps):
        for name, mk in cmds.items():
            o = os.path.join(OUT, "merge-out.data")
            if os.path.exists(o):
                os.unlink(o)
            res[name].append(run(mk(o)))


def main():
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    os.makedirs(OUT, exist_ok=True)
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    fx = os.path.join(ROOT, "fixtures")
    lib = os.path.join(OUT, "libburn.so")
    burn = os.path.join(OUT, "burn")
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", lib, os.path.join(fx, "libburn.c")], check=True)
    subprocess.run(["cc", "-O1", "-o", burn, os.path.join(fx, "burn.c"), f"-L{OUT}", "-lburn",
                    f"-Wl,-rpath,{OUT}"], check=True)
    burner = subprocess.Popen([burn, "600"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    pid = int(burner.stdout.readline().split()[1])
    rec = os.path.join(OUT, "merge-rec.data")
    snap = os.path.join(OUT, "merge-snap.data")
    bin_ = os.path.join(ROOT, "target", "release", "mmap2-synth")
    try:
        subprocess.run([bin_, "-q", "-p", str(pid), "-o", snap], check=True)
        subprocess.run(["perf", "record", "-q", "-F", "4000", "--call-graph", "dwarf", "--synth=no",
                        "-p", str(pid), "-o", rec, "--", "sleep", str(secs)], check=True)
        size = os.path.getsize(rec)
        # The burner keeps running for the live merge; it takes one core.
        cmds = {
            "cp": lambda o: ["cp", rec, o],
            "mmap2-synth merge": lambda o: [bin_, "merge", "-q", rec, "-o", o],
            "perf inject --buildid-all": lambda o: ["perf", "inject", "--buildid-all", "-i", rec, "-o", o],
        }
        res = {k: [] for k in cmds}
        measure(cmds, res, reps)
        burner.stdin.close()
        burner.wait()
        # Snapshot at start, merge after the run: the machine is idle.
        idle = {
            "cp (idle)": lambda o: ["cp", rec, o],
            "merge --maps SNAP (idle)": lambda o: [bin_, "merge", "-q", rec, "--maps", snap, "-o", o],
            "perf inject (idle)": lambda o: ["perf", "inject", "--buildid-all", "-i", rec, "-o", o],
        }
        for k in idle:
            res[k] = []
        measure(idle, res, reps)
        print(f"recording: {size / 1e6:.1f} MB, {reps} runs each, {os.cpu_count()} CPUs; "
              f"{subprocess.run(['perf', 'version'], capture_output=True, text=True).stdout.strip()}")
        print(f"{'command':28} {'wall s (median)':>16} {'peak RSS MiB':>13}")
        med = {}
        for name, rs in res.items():
            med[name] = statistics.median(w for w, _ in rs)
            print(f"{name:28} {med[name]:16.3f} {max(m for _, m in rs) / 1024:13.1f}")
        merge_rss = max(m for k in ("mmap2-synth merge", "merge --maps SNAP (idle)") for _, m in res[k]) / 1024
        print("ratios (target in brackets):")
        print(f"  live merge wall / cp wall (burner running)   {med['mmap2-synth merge'] / med['cp']:.2f}  [<= 1.5]")
        print(f"  merge --maps wall / cp wall (idle)           {med['merge --maps SNAP (idle)'] / med['cp (idle)']:.2f}  [<= 1.5]")
        print(f"  merge peak RSS                               {merge_rss:.1f} MiB  [<= 32]")
        print(f"  perf inject wall / live merge wall           {med['perf inject --buildid-all'] / med['mmap2-synth merge']:.1f}")
        print(f"  perf inject wall / cp wall                   {med['perf inject --buildid-all'] / med['cp']:.1f}")
    finally:
        if burner.poll() is None:
            burner.stdin.close()
            burner.wait()
        for f in ("merge-out.data",):
            p = os.path.join(OUT, f)
            if os.path.exists(p):
                os.unlink(p)


if __name__ == "__main__":
    main()
