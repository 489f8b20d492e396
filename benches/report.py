#!/usr/bin/env python3
"""Turns the result lines of benches/run.sh into the tables and ratios of
issue 8 (printed as Markdown, ready for the README)."""
import sys


def parse(line):
    f = line.split()
    r = {"procs": int(f[0]), "exec": int(f[1]), "data": int(f[2]), "mode": f[3],
         "nexec": int(f[4]), "nall": int(f[5])}
    for kv in f[6:]:
        k, v = kv.split("=")
        if "/" in v:
            wall, cpu = v.split("/")
            r[k] = (float(wall), float(cpu))
        elif k.startswith("pair_"):
            r[k] = float(v)
        else:
            r[k] = int(v)
    return r


def ratio(a, b):
    return a / b if b > 0 else float("inf")


def both(r, of_medians, pair):
    """A ratio as the median of the ratios paired within each run (the
    verdict's figure: it cancels the machine's drift between runs), then the
    ratio of the medians in parentheses."""
    if pair not in r:
        return f"{of_medians:.2f}"
    return f"**{r[pair]:.2f}** ({of_medians:.2f})"


def main():
    rows = [parse(l) for l in open(sys.argv[1]) if l.strip()]
    print("\n## Snapshot: the two shapes (CPU s, wall s)\n")
    print("Ratios: **median of the ratios paired within each run** (ratio of the medians).\n")
    print("| workload | floor | mmap2-synth | -j 1 | --no-buildid | perf synthesis |"
          " ours / floor [<= 1.25] | perf / ours [>= 4] | wall -j2 / -j1 [<= 0.6] |"
          " -d / all-VMA walk [<= 1.25] | -d peak RSS |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["mode"] != "shape":
            continue
        perf = r["perf_synth"][1] - r["perf_nosynth"][1]
        print(f"| {r['procs']} x ({r['exec']} + {r['data']}), {r['nexec']} exec VMAs "
              f"| {r['floor'][1]:.3f} | {r['synth'][1]:.3f} | {r['synth_j1'][1]:.3f} "
              f"| {r['synth_nobuildid'][1]:.3f} | {perf:.3f} "
              f"| {both(r, ratio(r['synth'][1], r['floor'][1]), 'pair_synth_floor')} "
              f"| {both(r, ratio(perf, r['synth'][1]), 'pair_perf_synth')} "
              f"| {both(r, ratio(r['synth'][0], r['synth_j1'][0]), 'pair_j2_j1')} "
              f"| {both(r, ratio(r['synth_d'][1], r['floor_all'][1]), 'pair_d_all')} "
              f"| {r['rss'] / 1024:.1f} MiB |")
    print("\n## Process heads: the BPF task iterator (default) against /proc (CPU s)\n")
    print("| workload | floor | mmap2-synth (iterator) | --task-source proc | perf synthesis |"
          " iterator / proc | iterator / floor | proc / floor | perf / iterator |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "synth_proc" not in r:
            continue
        perf = r["perf_synth"][1] - r["perf_nosynth"][1]
        threads = f" x {r['threads']} threads" if r.get("threads") else ""
        print(f"| {r['procs']} x ({r['exec']} + {r['data']}){threads} "
              f"| {r['floor'][1]:.3f} | {r['synth'][1]:.3f} | {r['synth_proc'][1]:.3f} | {perf:.3f} "
              f"| {ratio(r['synth'][1], r['synth_proc'][1]):.2f} "
              f"| {ratio(r['synth'][1], r['floor'][1]):.2f} "
              f"| {ratio(r['synth_proc'][1], r['floor'][1]):.2f} | {ratio(perf, r['synth'][1]):.2f} |")
    print("\n## Scaling (CPU s of `--all`, default workers)\n")
    print("| workload | exec VMAs | mmap2-synth | per process | per exec VMA | floor | ours / floor | peak RSS (-d) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["mode"] in ("one", "threads"):
            continue
        c = r["synth"][1]
        print(f"| {r['procs']} processes x ({r['exec']} + {r['data']}) | {r['nexec']} | {c:.3f} "
              f"| {1e6 * c / r['procs']:.0f} us | {1e6 * c / max(r['nexec'], 1):.2f} us "
              f"| {r['floor'][1]:.3f} | {ratio(c, r['floor'][1]):.2f} | {r['rss'] / 1024:.1f} MiB |")
    base = next((r for r in rows if r["mode"] == "one" and r["exec"] == 1), None)
    for r in rows:
        if r["mode"] != "one":
            continue
        c = r["synth"][1]
        extra = ""
        if base and r is not base:
            extra = f" (above 1 VMA: {1e6 * (c - base['synth'][1]) / max(r['nexec'] - base['nexec'], 1):.2f} us)"
        print(f"| 1 process, {r['exec']} mapped VMAs | {r['nexec']} | {c:.4f} | - "
              f"| {1e6 * c / max(r['nexec'], 1):.2f} us{extra} "
              f"| {r['floor'][1]:.4f} | {ratio(c, r['floor'][1]):.2f} | {r['rss'] / 1024:.1f} MiB |")


if __name__ == "__main__":
    main()
