//! `mmap2-synth pprof` over hostile binaries that real perf recorded: debug
//! sections that claim or unpack to more than memory holds, and a C++ name
//! that demangles exponentially. Each conversion runs in 1 GiB of address
//! space (so a failure cannot take the machine down) and is killed after a
//! deadline; it must finish, in bounded memory, with every sample and the
//! other binaries' frames named. Profiles are read by `go tool pprof -raw`
//! with its own symbolization off, so every name checked is one we wrote.

mod common;

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mmap2_synth::bytes::{Endian, PutExt};
use mmap2_synth::perf::consts::{attr_flags, misc, sample_type as st, types};

use common::*;

/// Address space the conversion runs in.
const AS_LIMIT: &str = "--as=1073741824";
/// Peak RSS a conversion of these small recordings must stay under (KiB).
const MAX_RSS_KIB: u64 = 256 << 10;
/// How long a conversion may run.
const DEADLINE: Duration = Duration::from_secs(120);

fn needs_go() {
    let ok = Command::new("go")
        .args(["tool", "pprof", "-h"])
        .output()
        .is_ok_and(|o| !o.stdout.is_empty() || !o.stderr.is_empty());
    assert!(
        ok,
        "this test needs `go tool pprof` (Debian's golang-go), which is missing here"
    );
}

/// What a bounded conversion did.
struct Run {
    /// Exit code (`None`: killed by a signal, e.g. an abort).
    code: Option<i32>,
    /// Its stderr (the summary).
    stderr: String,
    /// Peak RSS in KiB.
    rss: u64,
}

/// `mmap2-synth pprof REC -o OUT` under `prlimit --as` and `/usr/bin/time`,
/// killed (failing the test) after [`DEADLINE`].
fn bounded_pprof(rec: &Path, out: &Path) -> Run {
    bounded_pprof_with(rec, out, &[], DEADLINE)
}

/// [`bounded_pprof`] with more arguments, killed after `deadline`.
fn bounded_pprof_with(rec: &Path, out: &Path, args: &[&str], deadline: Duration) -> Run {
    let mut child = Command::new("prlimit")
        .arg(AS_LIMIT)
        .args(["/usr/bin/time", "-f", "maxrss=%M"])
        .arg(bin())
        .arg("pprof")
        .arg(rec)
        .arg("-o")
        .arg(out)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("prlimit (util-linux) and GNU time (/usr/bin/time)");
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > deadline {
            // the whole group: killing `time` alone left pprof running
            let group = format!("-{}", child.id());
            let _ = Command::new("kill")
                .args(["-s", "KILL", "--", &group])
                .status();
            let _ = child.wait();
            panic!("pprof still running after {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = reader.join().unwrap();
    let rss = stderr
        .lines()
        .find_map(|l| l.strip_prefix("maxrss="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no maxrss line: {stderr}"));
    // time reports a killed child as its own failure; the code is pprof's
    let code = status
        .code()
        .filter(|_| !stderr.contains("Command terminated by signal"));
    Run { code, stderr, rss }
}

/// Asserts the run exited 0 within [`MAX_RSS_KIB`].
fn assert_bounded(run: &Run) {
    assert_eq!(run.code, Some(0), "pprof failed: {}", run.stderr);
    assert!(
        run.rss < MAX_RSS_KIB,
        "peak RSS {} KiB: {}",
        run.rss,
        run.stderr
    );
}

/// One location of a profile: its mapping's path, its innermost function
/// and that function's `file:line` (`:0` without one).
#[derive(Debug)]
struct Loc {
    path: String,
    function: String,
    line: String,
}

/// The locations of `profile` (by `-raw`) and its samples (the sum of the
/// first count column).
fn raw_profile(profile: &Path) -> (Vec<Loc>, u64) {
    let text = go_pprof(&["-raw"], profile);
    // "Samples:", "Locations" and "Mappings" head the sections, in order
    let between = |from: &str, to: &str| {
        let rest = text.split_once(from).map_or("", |(_, r)| r);
        rest.split(to).next().unwrap_or("").to_string()
    };
    let mut paths = BTreeMap::new();
    for l in text.rsplit("\nMappings\n").next().unwrap_or("").lines() {
        let mut w = l.split_whitespace();
        if let (Some(id), Some(_), Some(path)) = (w.next(), w.next(), w.next()) {
            paths.insert(id.trim_end_matches(':').to_string(), path.to_string());
        }
    }
    let mut locs = Vec::new();
    for l in between("\nLocations\n", "\nMappings\n").lines() {
        // "  N: 0xADDR M=K FUNCTION FILE:LINE s=0"; FUNCTION may have spaces
        let Some(rest) = l.trim().split_once(": 0x").map(|(_, r)| r) else {
            continue;
        };
        let Some((_, rest)) = rest.split_once(" M=") else {
            continue;
        };
        let Some((m, rest)) = rest.split_once(' ') else {
            continue;
        };
        let Some((function, line)) = rest.trim_end_matches(" s=0").rsplit_once(' ') else {
            continue;
        };
        let path = paths.get(m).cloned().unwrap_or_default();
        let (function, line) = (function.to_string(), line.to_string());
        locs.push(Loc {
            path,
            function,
            line,
        });
    }
    let samples = between("\nSamples:\n", "\nLocations\n")
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    (locs, samples)
}

/// Samples in a recording, by `perf script`.
fn perf_samples(rec: &Path) -> u64 {
    perf(&[
        "script".as_ref(),
        "-F".as_ref(),
        "pid".as_ref(),
        "-i".as_ref(),
        rec.as_os_str(),
    ])
    .lines()
    .filter(|l| !l.trim().is_empty())
    .count() as u64
}

/// Two burners with compressed DWARF (`kind`: `zlib` from `-g -gz=zlib`,
/// `zstd` by objcopy, gcc here having no `-gz=zstd`), built apart (their
/// ids differ: one has an MD5 build id); `spoil` edits the second's
/// libburn.so before both start. Both are recorded with -g for a second,
/// converted in bounds; returns (the libraries, the run, the profile's
/// locations and samples, the recording's samples).
fn two_burners(kind: &str, spoil: impl FnOnce(&Path)) -> ([PathBuf; 2], Run, Vec<Loc>, u64, u64) {
    needs_perf_record();
    needs_go();
    let (honest, hostile) = (scratch("pprof-gz"), scratch("pprof-gz-hostile"));
    let gz = match kind {
        "zlib" => "-gz=zlib",
        _ => "-gz=none",
    };
    let (burn_a, lib_a) = build_burner(&honest, &["-g", gz]);
    let (burn_b, lib_b) = build_burner(&hostile, &["-g", gz, "-Wl,--build-id=md5"]);
    assert_ne!(readelf_build_id(&lib_a), readelf_build_id(&lib_b));
    for lib in [&lib_a, &lib_b] {
        compress_debug_sections(lib, kind);
    }
    spoil(&lib_b);
    let a = Mapper::start_as(&burn_a, &["120".as_ref()]);
    let b = Mapper::start_as(&burn_b, &["120".as_ref()]);
    let rec = hostile.join("rec.data");
    let pids = format!("{},{}", a.pid, b.pid);
    perf_record_to(&rec, &["-g"], &["-p", &pids, "--", "sleep", "1"]);
    drop((a, b));
    let profile = hostile.join("p.pb.gz");
    let run = bounded_pprof(&rec, &profile);
    assert_bounded(&run);
    let (locs, samples) = raw_profile(&profile);
    ([lib_a, lib_b], run, locs, samples, perf_samples(&rec))
}

/// The checks both hostile-DWARF cases share: every sample kept; the
/// honest library's burn_work named with its compressed DWARF's line, the
/// hostile one's from its symbol table (no line), and the summary says why.
fn check_hostile_dwarf(libs: &[PathBuf; 2], run: &Run, locs: &[Loc], samples: (u64, u64)) {
    assert_eq!(samples.0, samples.1, "profile samples vs perf script's");
    let of = |lib: &Path| {
        let lib = lib.to_str().unwrap();
        locs.iter()
            .filter(|l| l.path == lib && l.function == "burn_work")
            .collect::<Vec<_>>()
    };
    let (honest, hostile) = (of(&libs[0]), of(&libs[1]));
    assert!(!honest.is_empty() && !hostile.is_empty(), "{locs:?}");
    assert!(
        honest.iter().all(|l| l.line.contains("libburn.c:")),
        "{honest:?}"
    );
    assert!(hostile.iter().all(|l| l.line == ":0"), "{hostile:?}");
    let said = run
        .stderr
        .lines()
        .find(|l| l.contains("DWARF not read for 1 binaries"))
        .unwrap_or_else(|| panic!("no DWARF line: {}", run.stderr));
    assert!(said.contains(libs[1].to_str().unwrap()), "{said}");
}

// A library whose compressed .debug_info claims 1 TiB unpacked (blazesym
// allocated that at once: "memory allocation failed", SIGABRT, no profile)
// gets no DWARF: pprof exits 0 in bounded memory with every sample, that
// library named from its symbol table, the other's compressed DWARF read.
#[test]
#[ignore = "needs root, perf and go tool pprof"]
fn debug_info_claiming_a_tebibyte_is_not_read() {
    let (libs, run, locs, samples, perf) = two_burners("zlib", |lib| {
        let mut img = std::fs::read(lib).unwrap();
        let (_, off, _) = elf_section(&img, ".debug_info");
        let at = off as usize + 8; // Elf64_Chdr's ch_size
        img[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        std::fs::write(lib, img).unwrap();
    });
    assert!(run.stderr.contains("more than 268435456"), "{}", run.stderr);
    check_hostile_dwarf(&libs, &run, &locs, (samples, perf));
}

// A library whose .debug_info is a zlib bomb (1 GiB of zeros in 1 MB, its
// header claiming the original few hundred bytes; blazesym unpacked it all:
// 8 GB for a 4 GiB one, and a larger one exhausts memory) gets no DWARF,
// found while unpacking it here without keeping anything: exit 0 in
// bounded memory, every sample, the other library's DWARF read.
#[test]
#[ignore = "needs root, perf and go tool pprof"]
fn zlib_bomb_in_debug_info_is_not_read() {
    let (libs, run, locs, samples, perf) = two_burners("zlib", |lib| {
        let dir = lib.parent().unwrap();
        let bomb = dir.join("bomb.z");
        let py = "import sys, zlib\n\
                  c = zlib.compressobj(9); m = bytes(1 << 20)\n\
                  with open(sys.argv[1], 'wb') as f:\n\
                  \x20   for _ in range(1024): f.write(c.compress(m))\n\
                  \x20   f.write(c.flush())\n";
        let st = Command::new("python3")
            .args(["-c", py])
            .arg(&bomb)
            .status()
            .unwrap();
        assert!(st.success());
        replace_debug_info_stream(lib, &std::fs::read(&bomb).unwrap());
    });
    assert!(
        run.stderr.contains("unpacks to more than"),
        "{}",
        run.stderr
    );
    check_hostile_dwarf(&libs, &run, &locs, (samples, perf));
}

/// Replaces the `.debug_info` stream of `lib` (an ELF64 little-endian
/// file) by `stream`, placed at its end after the section's own
/// compression header (which keeps claiming the original size).
fn replace_debug_info_stream(lib: &Path, stream: &[u8]) {
    let mut img = std::fs::read(lib).unwrap();
    let (header, off, _) = elf_section(&img, ".debug_info");
    let chdr = img[off as usize..off as usize + 24].to_vec();
    img.resize(img.len().next_multiple_of(8), 0);
    let at = img.len() as u64;
    img.extend_from_slice(&chdr);
    img.extend_from_slice(stream);
    let size = 24 + stream.len() as u64;
    img[header + 24..header + 32].copy_from_slice(&at.to_le_bytes());
    img[header + 32..header + 40].copy_from_slice(&size.to_le_bytes());
    std::fs::write(lib, img).unwrap();
}

// A library whose zstd-compressed .debug_info claims 1 TiB unpacked gets
// no DWARF, as the zlib one: exit 0 in bounded memory, every sample, that
// library named from its symbol table, the other's zstd DWARF read.
#[test]
#[ignore = "needs root, perf and go tool pprof"]
fn zstd_debug_info_claiming_a_tebibyte_is_not_read() {
    let (libs, run, locs, samples, perf) = two_burners("zstd", |lib| {
        let mut img = std::fs::read(lib).unwrap();
        let (_, off, _) = elf_section(&img, ".debug_info");
        let at = off as usize + 8; // Elf64_Chdr's ch_size
        img[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        std::fs::write(lib, img).unwrap();
    });
    assert!(run.stderr.contains("more than 268435456"), "{}", run.stderr);
    check_hostile_dwarf(&libs, &run, &locs, (samples, perf));
}

// A library whose zstd .debug_info is a bomb (1 GiB of zeros in one frame
// of a few dozen KB giving no size, its header claiming the original few
// hundred bytes) gets no DWARF, found while counting what it unpacks to:
// exit 0 in bounded memory, every sample, the other library's zstd DWARF
// read.
#[test]
#[ignore = "needs root, perf and go tool pprof"]
fn zstd_bomb_in_debug_info_is_not_read() {
    let (libs, run, locs, samples, perf) = two_burners("zstd", |lib| {
        let mut z = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
        let mib = vec![0u8; 1 << 20];
        for _ in 0..1024 {
            std::io::Write::write_all(&mut z, &mib).unwrap();
        }
        let bomb = z.finish().unwrap();
        assert!(bomb.len() < 1 << 20, "{} bytes", bomb.len());
        replace_debug_info_stream(lib, &bomb);
    });
    assert!(
        run.stderr.contains("unpacks to more than"),
        "{}",
        run.stderr
    );
    check_hostile_dwarf(&libs, &run, &locs, (samples, perf));
}

// A library extended by `fallocate` to 3 GiB (every block allocated, so
// st_blocks found it whole; none written beyond its own bytes) is not
// copied for symbolization (it was: 3 GiB read and written to a temporary
// file): pprof exits 0 in bounded memory with every sample, names it in
// the summary as sparse, and leaves its frames unnamed.
#[test]
#[ignore = "needs root, perf and go tool pprof"]
fn a_fallocated_library_is_not_copied() {
    needs_perf_record();
    needs_go();
    let dir = scratch("pprof-fallocated");
    let (burn, lib) = build_burner(&dir, &["-g"]);
    let o = Command::new("fallocate")
        .args(["-l", "3GiB"])
        .arg(&lib)
        .output()
        .expect("fallocate (util-linux)");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&lib).unwrap();
        assert!(m.blocks() * 512 >= 3 << 30, "not allocated: {m:?}");
    }
    let p = Mapper::start_as(&burn, &["120".as_ref()]);
    let rec = dir.join("rec.data");
    // perf's own build-id cache would copy the 3 GiB file (as root, into
    // ~/.debug: every run of this test filled 3 GiB of it)
    perf_record_to(
        &rec,
        &["-g", "--no-buildid-cache"],
        &["-p", &p.pid.to_string(), "--", "sleep", "1"],
    );
    drop(p);
    let profile = dir.join("p.pb.gz");
    let run = bounded_pprof(&rec, &profile);
    assert_bounded(&run);
    let said = run
        .stderr
        .lines()
        .find(|l| l.contains(lib.to_str().unwrap()))
        .unwrap_or_else(|| panic!("the library is not named: {}", run.stderr));
    assert!(said.contains("sparse file"), "{said}");
    let (locs, samples) = raw_profile(&profile);
    assert_eq!(
        samples,
        perf_samples(&rec),
        "profile samples vs perf script's"
    );
    // (-raw prints its unnamed locations without a function: not in `locs`)
    assert!(!locs.iter().any(|l| l.function == "burn_work"), "{locs:?}");
}

// A stripped library whose MiniDebugInfo (`.gnu_debugdata`) is an xz bomb
// (256 MiB of zeros in about 40 KB) keeps its own symbols: pprof exits 0
// in bounded memory with every sample, burn_work named from .dynsym (the
// whole file was left unnamed), the bomb refused once past its bound and
// the summary naming the file and why.
#[test]
#[ignore = "needs root, perf and go tool pprof"]
fn minidebuginfo_xz_bomb_is_not_unpacked() {
    needs_perf_record();
    needs_go();
    let dir = scratch("pprof-minidebug-bomb");
    let bomb = dir.join("bomb.xz");
    let script = format!("head -c 268435456 /dev/zero | xz -0 -T1 > {}", q(&bomb));
    let st = Command::new("sh").args(["-c", &script]).status().unwrap();
    assert!(st.success());
    assert!(std::fs::metadata(&bomb).unwrap().len() < 1 << 20);
    let (burn, lib) = build_minidebug_burner(&dir, Some(&bomb));
    let p = Mapper::start_as(&burn, &["120".as_ref()]);
    let rec = dir.join("rec.data");
    // perf's own build-id cache would copy the 3 GiB file (as root, into
    // ~/.debug: every run of this test filled 3 GiB of it)
    perf_record_to(
        &rec,
        &["-g", "--no-buildid-cache"],
        &["-p", &p.pid.to_string(), "--", "sleep", "1"],
    );
    drop(p);
    let profile = dir.join("p.pb.gz");
    let run = bounded_pprof(&rec, &profile);
    assert_bounded(&run);
    let said = run
        .stderr
        .lines()
        .find(|l| l.contains("MiniDebugInfo (.gnu_debugdata) not read for 1 binaries"))
        .unwrap_or_else(|| panic!("no MiniDebugInfo line: {}", run.stderr));
    assert!(said.contains(lib.to_str().unwrap()), "{said}");
    assert!(said.contains("unpacks to more than"), "{said}");
    let (locs, samples) = raw_profile(&profile);
    assert_eq!(
        samples,
        perf_samples(&rec),
        "profile samples vs perf script's"
    );
    let lib = lib.to_str().unwrap();
    let named = |f: &str| locs.iter().any(|l| l.path == lib && l.function == f);
    assert!(named("burn_work"), "{locs:?}");
    assert!(!named("burn_hidden"), "{locs:?}");
}

/// C++ whose hot function `hot` is named, in assembly, `_Z1f1a` and 20
/// parameters each a pointer to a function taking the one before twice
/// (the name demangles to 54 MB), unrolled over 4,000 statements so
/// samples land on thousands of addresses (and not a leaf, so it has a
/// frame pointer and its caller is in the callchain); it is called by
/// `ns::outer<int>` from `main`, for SECONDS (argv[1]).
fn exponential_cpp() -> (String, String) {
    let b36 = |mut v: usize| {
        let digits = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
        let mut out = Vec::new();
        loop {
            out.insert(0, digits[v % 36]);
            v /= 36;
            if v == 0 {
                break String::from_utf8(out).unwrap();
            }
        }
    };
    let mut name = String::from("_Z1f1a");
    for i in 1..=20 {
        let back = match i {
            1 => "S_".to_string(),
            _ => format!("S{}_", b36(2 * (i - 1) - 1)),
        };
        name.push_str(&format!("PFv{back}{back}E"));
    }
    let body: String = (0..4000)
        .map(|i| format!("    v = v * 3 + {i};\n"))
        .collect();
    let src = format!(
        r#"#include <stdlib.h>
#include <time.h>
volatile unsigned long v;
__attribute__((noinline)) void tick(void) {{ v++; }}
__attribute__((noinline)) void hot(void) __asm__("{name}");
void hot(void) {{
    tick();
{body}}}
namespace ns {{
template <class T> __attribute__((noinline)) unsigned long outer(T n, const char *tag) {{
    for (T i = 0; i < n; i++) hot();
    return v + (tag != 0);
}}
}}
int main(int argc, char **argv) {{
    double secs = argc > 1 ? atof(argv[1]) : 1;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {{
        ns::outer<int>(100, "x");
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 > secs) break;
    }}
    return 0;
}}
"#
    );
    (name, src)
}

// A hot function whose C++ name demangles exponentially, sampled at
// thousands of addresses (blazesym demangled it once per address, 0.3 s
// each: over 20 minutes), converts in seconds: its frames keep the
// mangled name, its caller's ordinary C++ name is demangled, every sample
// is kept.
#[test]
#[ignore = "needs root, perf and go tool pprof"]
fn exponential_cpp_name_is_demangled_once_within_bounds() {
    needs_perf_record();
    needs_go();
    let dir = scratch("pprof-demangle");
    let (name, src) = exponential_cpp();
    let (cc_src, prog) = (dir.join("hostile.cc"), dir.join("hostile"));
    std::fs::write(&cc_src, src).unwrap();
    let o = Command::new("g++")
        .args(["-O1", "-fno-omit-frame-pointer", "-o"])
        .arg(&prog)
        .arg(&cc_src)
        .output()
        .expect("run g++");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rec = dir.join("rec.data");
    perf_record_to(&rec, &["-g"], &["--", prog.to_str().unwrap(), "2"]);
    let profile = dir.join("p.pb.gz");
    let started = Instant::now();
    let run = bounded_pprof(&rec, &profile);
    assert_bounded(&run);
    let took = started.elapsed();
    let (locs, samples) = raw_profile(&profile);
    assert_eq!(
        samples,
        perf_samples(&rec),
        "profile samples vs perf script's"
    );
    let hot = locs.iter().filter(|l| l.function == name).count();
    assert!(hot > 500, "{hot} locations in the hot function: {took:?}");
    assert!(
        locs.iter()
            .any(|l| l.function == "unsigned long ns::outer<int>(int, char const*)"),
        "{:?}",
        locs.iter()
            .filter(|l| l.function != name)
            .collect::<Vec<_>>()
    );
    assert!(!locs.iter().any(|l| l.function.len() > 64 << 10));
}

/// A hostile perf map: its name, how it is made at a path, what the
/// summary says of it.
type Case<'a> = (&'a str, &'a dyn Fn(&Path), &'a str);

// A JIT's /tmp/perf-PID.map made hostile, each in turn: 65 MiB (sparse),
// a FIFO nobody writes, a symlink to /dev/zero, a directory, binary junk
// (NULs, 0xff bytes, over-long lines) with one real line at its end.
// Each conversion ends in bounds, exit 0, with every sample, the summary
// naming the file and what was wrong; only the junk's real line names the
// JIT's code (perf reads the same way), the others leave it an address.
#[test]
#[ignore = "needs root (a file in /tmp named for another process), perf and go tool pprof"]
fn hostile_perf_maps_are_refused_or_read_in_bounds() {
    needs_perf_record();
    needs_go();
    let dir = scratch("pprof-perfmap");
    let jit = build_fixture("jit", &dir, &[]);
    let p = Mapper::start_as(&jit, &[]);
    let (start, _) = anon_exec_range(p.pid);
    let rec = dir.join("rec.data");
    perf_record_pid(p.pid, &rec, &[], "1");
    let recorded = perf_samples(&rec);
    let map = PathBuf::from(format!("/tmp/perf-{}.map", p.pid));
    let mut junk: Vec<u8> = (0..200_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    junk.extend(b"\n\0\0\0 1 2\n");
    junk.extend(vec![b'7'; 100_000]);
    junk.extend(format!("\n{start:x} 1000 real_jit_fn\n").as_bytes());
    let cases: [Case; 5] = [
        (
            "huge",
            &|m| std::fs::File::create(m).unwrap().set_len(65 << 20).unwrap(),
            "68157440 bytes, more than the 67108864 a perf map is read to: not read",
        ),
        ("fifo", &|m| mkfifo(m), "a FIFO: not read"),
        (
            "link",
            &|m| std::os::unix::fs::symlink("/dev/zero", m).unwrap(),
            "a symbolic link: not followed",
        ),
        (
            "dir",
            &|m| std::fs::create_dir(m).unwrap(),
            "a directory: not read",
        ),
        (
            "junk",
            &|m| std::fs::write(m, &junk).unwrap(),
            "lines not `START SIZE NAME` skipped, the first at byte 0",
        ),
    ];
    for (what, make, why) in cases {
        make(&map);
        let profile = dir.join(format!("{what}.pb.gz"));
        let run = bounded_pprof(&rec, &profile);
        let _ = std::fs::remove_file(&map).or_else(|_| std::fs::remove_dir(&map));
        assert_bounded(&run);
        let said = format!("{} (", map.display());
        let line = run
            .stderr
            .lines()
            .find(|l| l.contains("perf maps not read, or read in part"))
            .unwrap_or_else(|| panic!("{what}: no perf map line: {}", run.stderr));
        assert!(line.contains(&said) && line.contains(why), "{what}: {line}");
        let (locs, samples) = raw_profile(&profile);
        assert_eq!(
            samples, recorded,
            "{what}: profile samples vs perf script's"
        );
        let named = locs.iter().any(|l| l.function == "real_jit_fn");
        assert_eq!(named, what == "junk", "{what}: {locs:?}");
    }
}

/// Records of one process (never a live one's pid) for the crafted inversions: sample_type
/// IP|TID|TIME with sample_id_all, so every other record ends in pid, tid,
/// time. The walks these shapes made were quadratic: K later changes read
/// first, then K records each earlier than the last, each walking all K.
mod inverted {
    use super::*;

    const E: Endian = Endian::Little;
    /// The process (past any pid_max: no live process's files are looked
    /// for), and when its late changes begin.
    pub const P: u32 = 2_000_000_000;
    pub const T0: u64 = 1_000_000_000_000;
    /// Records of each kind: a quadratic walk (K * K / 2 steps, minutes at
    /// this size; 80,000 took 30-95 s) is far past [`DEADLINE`],
    /// a linear one takes seconds (most of them asking /proc, twice a map,
    /// for the files of a process that is not there).
    pub const K: u64 = 240_000;

    fn record(out: &mut Vec<u8>, type_: u32, misc: u16, body: &[u8]) {
        out.put_u32(E, type_);
        out.put_u16(E, misc);
        out.put_u16(E, u16::try_from(8 + body.len()).unwrap());
        out.extend_from_slice(body);
    }

    fn trailer(b: &mut Vec<u8>, pid: u32, tid: u32, time: u64) {
        b.put_u32(E, pid);
        b.put_u32(E, tid);
        b.put_u64(E, time);
    }

    /// A MMAP2 of `/tmp/x` over one page at `addr` in [`P`].
    pub fn mmap2(out: &mut Vec<u8>, addr: u64, time: u64) {
        let mut b = Vec::new();
        b.put_u32(E, P);
        b.put_u32(E, P);
        for v in [addr, 0x1000, 0] {
            b.put_u64(E, v);
        }
        b.put_u32(E, 8);
        b.put_u32(E, 1);
        b.put_u64(E, 1234);
        b.put_u64(E, 0);
        b.put_u32(E, 5); // PROT_READ | PROT_EXEC
        b.put_u32(E, 2); // MAP_PRIVATE
        b.extend_from_slice(b"/tmp/x\0");
        b.pad_to(8);
        trailer(&mut b, P, P, time);
        record(out, types::MMAP2, misc::USER, &b);
    }

    /// A user sample of [`P`] at 0x1100.
    pub fn sample(out: &mut Vec<u8>, time: u64) {
        let mut b = Vec::new();
        b.put_u64(E, 0x1100);
        trailer(&mut b, P, P, time);
        record(out, types::SAMPLE, misc::USER, &b);
    }

    /// [`P`] makes thread or process `pid`, thread `tid`.
    pub fn fork(out: &mut Vec<u8>, pid: u32, tid: u32, time: u64) {
        let mut b = Vec::new();
        for v in [pid, P, tid, P] {
            b.put_u32(E, v);
        }
        b.put_u64(E, time);
        trailer(&mut b, pid, tid, time);
        record(out, types::FORK, 0, &b);
    }

    /// [`P`] is named `name`.
    pub fn comm(out: &mut Vec<u8>, name: &str, time: u64) {
        let mut b = Vec::new();
        b.put_u32(E, P);
        b.put_u32(E, P);
        b.extend_from_slice(name.as_bytes());
        b.push(0);
        b.pad_to(8);
        trailer(&mut b, P, P, time);
        record(out, types::COMM, misc::USER, &b);
    }

    /// [`P`] named, its binary mapped at 0x1000 (perf's synthesized
    /// records, time 0), then `rest`.
    pub fn recording(rest: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut data = Vec::new();
        comm(&mut data, "victim", 0);
        mmap2(&mut data, 0x1000, 0);
        rest(&mut data);
        data
    }

    /// `data` converted (unsymbolized) within bounds and
    /// [`DEADLINE`]: exit 0 with `samples` samples.
    pub fn converts_in_bounds(name: &str, data: &[u8], samples: u64) {
        let dir = scratch(name);
        let rec = dir.join("rec.data");
        let attr = mmap2_synth::perf::Attr {
            type_: 1,
            sample_type: st::IP | st::TID | st::TIME,
            flags: attr_flags::SAMPLE_ID_ALL,
            sample_period: 1,
            ..Default::default()
        };
        write_recording(&rec, attr, vec![], data);
        let out = dir.join("p.pb.gz");
        let run = bounded_pprof_with(&rec, &out, &["--no-symbolize"], DEADLINE);
        assert_bounded(&run);
        let said = format!("pprof: {samples} samples ->");
        assert!(run.stderr.contains(&said), "{}", run.stderr);
    }
}

// K samples read after K later map changes of their process, each sample
// earlier than the last, convert in linear time (each walked every change:
// 80,000 of each took 95 s).
#[test]
fn late_samples_after_many_later_maps_are_linear() {
    use inverted::*;
    let data = recording(|d| {
        (0..K).for_each(|i| mmap2(d, 0x1000_0000 + i * 0x1000, T0 + i));
        (0..K).for_each(|j| sample(d, T0 - 1 - j));
    });
    converts_in_bounds("pprof-late-samples", &data, K);
}

// K thread FORKs read after K later map changes of their process, each
// earlier than the last, convert in linear time (each walked every
// change: 80,000 of each took 82 s).
#[test]
fn late_thread_forks_after_many_later_maps_are_linear() {
    use inverted::*;
    let data = recording(|d| {
        (0..K).for_each(|i| mmap2(d, 0x1000_0000 + i * 0x1000, T0 + i));
        for j in 0..K {
            let tid = 1000 + u32::try_from(j).unwrap();
            fork(d, P, tid, T0 - 1 - j);
        }
        sample(d, T0 + K + 5);
    });
    converts_in_bounds("pprof-late-spawns", &data, 1);
}

// K child FORKs read after K later COMMs of their parent, each earlier than
// the last, convert in linear time (each walked every COMM: 80,000 of each
// took 30 s).
#[test]
fn late_forks_after_many_later_comms_are_linear() {
    use inverted::*;
    let data = recording(|d| {
        (0..K).for_each(|i| comm(d, &format!("n{}", i % 10), T0 + i));
        for j in 0..K {
            let child = 200_000 + u32::try_from(j).unwrap();
            fork(d, child, child, T0 - 1 - j);
        }
        sample(d, T0 + K + 5);
    });
    converts_in_bounds("pprof-late-forks", &data, 1);
}
