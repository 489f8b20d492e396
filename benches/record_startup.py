#!/usr/bin/env python3
"""Startup benchmark of issue 11: `mmap2-synth record` against `perf record`
with its own synthesis, on many processes, in a private PID namespace (so
/proc shows only what this script starts).

    benches/record_startup.py [REPS]    (default 5; needs root, gcc and perf;
                                         M2S_BENCH_SMOKE=1: a tiny workload, for CI)

Workload: 2000 processes (fixtures/mapper.c, as benches/run.sh starts it),
each with 20 more executable VMAs than a bare process. Then, interleaved REPS
times:
  - ours: `mmap2-synth record -- -a -e dummy -o F -- stamp S`
  - perf: `perf record -a -e dummy -o F -- stamp S` (default synthesis)
where `stamp` prints CLOCK_MONOTONIC and sleeps S seconds (the same in both,
long enough that perf is enabled before it ends; it is in both wall times).

"Until enabled" is measured from just before the command is started
(CLOCK_MONOTONIC) to:
  - perf: the workload's stamp. perf record starts its workload only after
    synthesis and, for -a, after enabling its events (__cmd_record: synthesize,
    evlist__enable, then evlist__start_workload).
  - ours: perf's own "Events enabled" line on stderr, read as it is written.
    mmap2-synth record runs perf with -D -1 --control, so perf starts the
    workload at once with its events off (the stamp would be too early) and
    prints that line when `enable` has switched them on; the snapshot runs
    after that, while perf records.
"Total" is the command's wall time (workload included). Medians of REPS.
"""
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.environ.get("BENCH_OUT", os.path.join(ROOT, "bench-out"))
# M2S_BIN: a binary built elsewhere (CI smoke: the test profile's), not rebuilt
BIN = os.environ.get("M2S_BIN") or os.path.join(ROOT, "target", "release", "mmap2-synth")
SMOKE = bool(os.environ.get("M2S_BENCH_SMOKE"))
PROCS, EXEC_MAPS, SLEEP = (20, 5, 0.5) if SMOKE else (2000, 20, 1.0)
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"

STAMP_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    printf("%lld.%09ld\n", (long long)t.tv_sec, t.tv_nsec);
    fflush(stdout);
    if (argc > 1) usleep((useconds_t)(atof(argv[1]) * 1e6));
    return 0;
}
"""


def now():
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def fail(what, p, err):
    sys.exit(f"{what} failed ({p.returncode}): {err.decode(errors='replace')}")


def run_ours(data):
    """(until enabled, total) of mmap2-synth record."""
    cmd = [BIN, "record", "--", "-a", "-e", "dummy", "-o", data,
           "--", os.path.join(OUT, "stamp"), str(SLEEP)]
    t0 = now()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    enabled, err = None, b""
    for line in p.stderr:
        if enabled is None and b"Events enabled" in line:
            enabled = now()
        err += line
    p.wait()
    total = now() - t0
    if p.returncode != 0 or enabled is None:
        fail("mmap2-synth record (no 'Events enabled' from perf?)", p, err)
    return enabled - t0, total


def run_perf(data):
    """(until enabled, total) of perf record with its default synthesis."""
    cmd = ["perf", "record", "-a", "-e", "dummy", "-o", data,
           "--", os.path.join(OUT, "stamp"), str(SLEEP)]
    t0 = now()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate()
    total = now() - t0
    if p.returncode != 0:
        fail("perf record", p, err)
    return float(out.split()[0]) - t0, total


def inner(reps):
    """In the namespace: starts the workload, measures, prints one JSON line."""
    ready = os.path.join(OUT, "startup-ready")
    subprocess.run(["rm", "-rf", ready], check=True)
    os.makedirs(ready)
    for i in range(PROCS):
        subprocess.Popen([os.path.join(OUT, "mapper"), "--wait", "forever",
                          "--exec-maps", str(EXEC_MAPS), "--data-maps", "0",
                          "--ready", os.path.join(ready, str(i)), LIBC],
                         stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while len([f for f in os.listdir(ready) if "tmp" not in f]) < PROCS:
        if time.monotonic() > deadline:
            sys.exit("workload did not start in 300 s")
        time.sleep(0.05)
    nexec = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/maps") as f:
                nexec += sum(1 for l in f if l.split()[1][2] == "x")
        except OSError:
            pass
    data = os.path.join(OUT, "startup.data")
    times = {"ours": [], "perf": []}
    for _ in range(reps):
        # interleaved, so the machine's noise hits both alike
        times["ours"].append(run_ours(data))
        times["perf"].append(run_perf(data + ".perf"))
    for f in (data, data + ".perf"):
        if os.path.exists(f):
            os.remove(f)
    med = {k: [statistics.median(t[i] for t in v) for i in (0, 1)] for k, v in times.items()}
    print(json.dumps({"procs": PROCS, "exec": EXEC_MAPS, "nexec": nexec, "reps": reps,
                      "median": med, "runs": times}))


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    if os.environ.get("M2S_BENCH_INNER"):
        inner(reps)
        return
    os.makedirs(OUT, exist_ok=True)
    if not os.environ.get("M2S_BIN"):
        subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "mmap2-synth"],
                       cwd=ROOT, check=True)
    subprocess.run(["gcc", "-O2", "-o", os.path.join(OUT, "mapper"),
                    os.path.join(ROOT, "fixtures", "mapper.c"), "-ldl", "-lpthread"], check=True)
    subprocess.run(["gcc", "-O2", "-x", "c", "-o", os.path.join(OUT, "stamp"), "-"],
                   input=STAMP_C.encode(), check=True)
    if subprocess.run(["sh", "-c", "command -v perf"], stdout=subprocess.DEVNULL).returncode:
        sys.exit("benchmark needs perf (apt-get install linux-perf)")
    env = dict(os.environ, M2S_BENCH_INNER="1")
    p = subprocess.run(["unshare", "-fp", "--mount-proc", sys.executable,
                        os.path.abspath(__file__), str(reps)],
                       env=env, stdout=subprocess.PIPE, check=True)
    r = json.loads(p.stdout.decode().strip().splitlines()[-1])
    (oe, ot), (pe, pt) = r["median"]["ours"], r["median"]["perf"]
    perf_version = subprocess.run(["perf", "version"], stdout=subprocess.PIPE).stdout.decode().strip()
    print(f"workload: {r['procs']} processes x {r['exec']} more exec VMAs ({r['nexec']} exec VMAs"
          f" in the namespace); {os.cpu_count()} CPUs; {os.uname().release}; {perf_version};"
          f" {r['reps']} interleaved runs, medians; workload of both commands sleeps {SLEEP} s\n")
    print("| `record -a -e dummy` | until events enabled (s) | total wall (s) |")
    print("|---|---|---|")
    print(f"| perf record (its synthesis) | {pe:.3f} | {pt:.3f} |")
    print(f"| mmap2-synth record | {oe:.3f} | {ot:.3f} |")
    ratio = lambda a, b: a / b if b > 0 else float("inf")
    print(f"| perf / ours | {ratio(pe, oe):.1f} | {ratio(pt, ot):.2f} |")
    runs = lambda k: " ".join(f"{e:.3f}/{t:.3f}" for e, t in r["runs"][k])
    print(f"\nruns (enabled/total s): perf {runs('perf')}; ours {runs('ours')}")


if __name__ == "__main__":
    main()
