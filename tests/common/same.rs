//! Comparing snapshots that must be the same: what differs when they are
//! not (their dumps' diff, in the assertion message), and snapshots of an
//! unchanged pid namespace taken again when the kernel's BPF programs or
//! modules, which no pid namespace confines, changed between them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{bin, feature_range};

/// How many times [`take_while_the_kernel_holds`] takes its snapshots at
/// most.
pub const KERNEL_ATTEMPTS: u32 = 8;

/// The most diff lines an assertion message shows.
const DIFF_LINES: usize = 80;

/// Asserts two file-mode snapshots made with different command lines (`-j`)
/// are the same bytes but for the CMDLINE feature, which must differ. When
/// they are not, the message gives both sizes, the first byte differing
/// outside CMDLINE and the diff of their dumps (every record, in order).
pub fn assert_same_but_cmdline(a: &[u8], b: &[u8]) {
    let cmdline = feature_range(a, 11).expect("CMDLINE present");
    let differ: Vec<usize> = (0..a.len().min(b.len()))
        .filter(|&i| a[i] != b[i])
        .collect();
    let outside = differ.iter().find(|i| !cmdline.contains(i));
    assert!(
        a.len() == b.len() && outside.is_none(),
        "snapshots differ outside CMDLINE: {} and {} bytes, the first differing byte \
         outside CMDLINE at {outside:?}; their dumps (- first, + second):\n{}",
        a.len(),
        b.len(),
        bytes_diff(a, b)
    );
    assert!(!differ.is_empty(), "the command lines differ in CMDLINE");
}

/// The diff of the dumps of two recordings held in memory (see
/// [`dump_diff`]), or why one could not be dumped: evidence for a failing
/// assertion.
pub fn bytes_diff(a: &[u8], b: &[u8]) -> String {
    match (dump_bytes(a), dump_bytes(b)) {
        (Ok(a), Ok(b)) => dump_diff(&a, &b),
        (a, b) => format!("(no diff: {:?}, {:?})", a.err(), b.err()),
    }
}

/// `mmap2-synth dump` of a recording held in memory (through a temporary
/// file: file mode needs a seekable input), or what dump said if it failed.
pub fn dump_bytes(bytes: &[u8]) -> Result<String, String> {
    let mut file = tempfile::Builder::new()
        .prefix("dump-")
        .tempfile_in(env!("CARGO_TARGET_TMPDIR"))
        .map_err(|e| format!("a temporary file: {e}"))?;
    file.write_all(bytes)
        .map_err(|e| format!("writing a temporary file: {e}"))?;
    let out = Command::new(bin())
        .arg("dump")
        .arg(file.path())
        .output()
        .map_err(|e| format!("running mmap2-synth dump: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `mmap2-synth dump FILE`, asserting it succeeds.
pub fn dump_file(path: &Path) -> String {
    let out = Command::new(bin())
        .arg("dump")
        .arg(path)
        .output()
        .expect("run mmap2-synth dump");
    assert!(
        out.status.success(),
        "dump {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("dump writes UTF-8")
}

/// The lines of dump `a` that `b` lacks (`-`) and of `b` that `a` lacks
/// (`+`), each with its line number, from a longest common subsequence of
/// lines; at most [`DIFF_LINES`] of them, then how many more.
pub fn dump_diff(a: &str, b: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    // common[i][j]: the longest common subsequence of a[i..] and b[j..]
    let mut common = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            common[i][j] = if a[i] == b[j] {
                common[i + 1][j + 1] + 1
            } else {
                common[i + 1][j].max(common[i][j + 1])
            };
        }
    }
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            (i, j) = (i + 1, j + 1);
        } else if j == b.len() || (i < a.len() && common[i + 1][j] >= common[i][j + 1]) {
            out.push(format!("- {}: {}", i + 1, a[i]));
            i += 1;
        } else {
            out.push(format!("+ {}: {}", j + 1, b[j]));
            j += 1;
        }
    }
    if out.is_empty() {
        return "(the dumps are the same: the bytes differ in the header or features)".into();
    }
    let more = out.len().saturating_sub(DIFF_LINES);
    out.truncate(DIFF_LINES);
    if more > 0 {
        out.push(format!("({more} more lines differ)"));
    }
    out.join("\n")
}

/// Whether a dump line is of the kernel's part of a snapshot: the kernel's
/// and modules' maps and build ids (cpumode 1) and the loaded BPF programs
/// (KSYMBOL, BPF_EVENT). Every `--all` snapshot has them, and no pid
/// namespace confines them: any process on the machine (another suite's
/// BPF tests, another run's task iterator) may load a program between two
/// snapshots of an unchanged namespace.
pub fn is_kernel_line(l: &str) -> bool {
    l.starts_with("ksymbol ") || l.starts_with("bpf_event ") || l.contains(" cpumode=1 ")
}

/// A dump's lines of one part: the kernel's (`kernel`) or the rest.
fn part(dump: &str, kernel: bool) -> Vec<&str> {
    dump.lines()
        .filter(|l| is_kernel_line(l) == kernel)
        .collect()
}

/// Runs `take` in a new directory `attempt-N` under `dir`. It starts
/// processes, snapshots them, and returns a value and the snapshot files in
/// groups, each group's files to be compared with each other by the caller
/// (one mode each). Returns that value and directory once every group's
/// snapshots saw the same kernel part ([`is_kernel_line`]). When one did
/// not, the kernel changed between its snapshots, which then cannot be the
/// same bytes: asserts the rest of their dumps agree and takes them all
/// again, up to [`KERNEL_ATTEMPTS`] times in all; fails with each attempt's
/// kernel difference.
pub fn take_while_the_kernel_holds<T>(
    dir: &Path,
    mut take: impl FnMut(&Path) -> (T, Vec<Vec<PathBuf>>),
) -> (T, PathBuf) {
    let mut changes = String::new();
    for attempt in 1..=KERNEL_ATTEMPTS {
        let here = dir.join(format!("attempt-{attempt}"));
        std::fs::create_dir(&here).expect("create an attempt's directory");
        let (value, groups) = take(&here);
        let mut held = true;
        for group in &groups {
            let dumps: Vec<String> = group.iter().map(|f| dump_file(f)).collect();
            let (first, name) = (&dumps[0], group[0].display());
            for (d, f) in dumps.iter().zip(group).skip(1) {
                assert!(
                    part(d, false) == part(first, false),
                    "{name} and {} differ outside the kernel's records (- first, + second):\n{}",
                    f.display(),
                    dump_diff(first, d)
                );
                if part(d, true) != part(first, true) {
                    held = false;
                    changes += &format!(
                        "attempt {attempt}, {name} and {}:\n{}\n",
                        f.display(),
                        dump_diff(&part(first, true).join("\n"), &part(d, true).join("\n"))
                    );
                }
            }
        }
        if held {
            if !changes.is_empty() {
                eprintln!("the kernel changed between snapshots, taken again:\n{changes}");
            }
            return (value, here);
        }
    }
    panic!(
        "the kernel's BPF programs or modules changed between the snapshots in each of \
         {KERNEL_ATTEMPTS} attempts:\n{changes}"
    );
}
