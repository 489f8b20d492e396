//! File-mode outputs of `convert` and `merge` that real perf 6.1 reads:
//! the feature sections its file-mode reader cannot read (it reads a
//! section on past its end, crashing on some, and stops reading features
//! at the first it fails on) are left out with a warning naming them,
//! every other section kept byte for byte.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;

/// The set feature bits of a little-endian file-mode perf.data, ascending.
fn feature_bits(file: &[u8]) -> Vec<u32> {
    let word = |i: usize| u64::from_le_bytes(file[72 + i * 8..80 + i * 8].try_into().unwrap());
    (0..256u32)
        .filter(|&b| word(b as usize / 64) & (1 << (b % 64)) != 0)
        .collect()
}

/// Each feature section's payload of a little-endian file-mode perf.data.
fn sections(file: &[u8]) -> BTreeMap<u32, Vec<u8>> {
    let bits = feature_bits(file).into_iter();
    bits.map(|b| (b, file[feature_range(file, b).unwrap()].to_vec()))
        .collect()
}

/// `file` (little-endian, file mode, its sections after its data) with
/// these feature sections instead of its own, laid out in bit order.
fn with_sections(file: &[u8], secs: &BTreeMap<u32, Vec<u8>>) -> Vec<u8> {
    let u = |o: usize| u64::from_le_bytes(file[o..o + 8].try_into().unwrap());
    let end = (u(40) + u(48)) as usize;
    let mut f = file[..end].to_vec();
    let mut words = [0u64; 4];
    for b in secs.keys() {
        words[*b as usize / 64] |= 1 << (b % 64);
    }
    for (i, w) in words.iter().enumerate() {
        f[72 + i * 8..80 + i * 8].copy_from_slice(&w.to_le_bytes());
    }
    let mut at = (end + 16 * secs.len()) as u64;
    for p in secs.values() {
        f.extend(at.to_le_bytes());
        f.extend((p.len() as u64).to_le_bytes());
        at += p.len() as u64;
    }
    secs.values().for_each(|p| f.extend(p));
    f
}

/// Asserts perf 6.1 reads `data`: `perf script` exits 0 printing samples,
/// `perf report --stdio` exits 0 counting some.
fn assert_perf_reads_samples(data: &Path, what: &str) {
    for args in [&["script", "-i"][..], &["report", "--stdio", "-i"][..]] {
        let out = Command::new("perf").args(args).arg(data).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{what}: perf {args:?} exit {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        let samples = match args[0] {
            "script" => stdout.lines().count(),
            // "# Samples: 930 of event ...", or "1K", "2M" past 999
            _ => stdout
                .lines()
                .filter_map(|l| l.strip_prefix("# Samples: "))
                .filter_map(|l| l.split_whitespace().next())
                .filter(|n| *n != "0")
                .count(),
        };
        assert!(samples > 0, "{what}: perf {args:?} shows no samples");
    }
}

/// How many samples linux-perf-data reads from the file-mode perf.data
/// `data` (uncompressed).
fn linux_perf_data_samples(data: &[u8]) -> usize {
    use linux_perf_data::linux_perf_event_reader::EventRecord;
    use linux_perf_data::{PerfFileReader, PerfFileRecord};
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_file(std::io::Cursor::new(data)).unwrap();
    let mut n = 0;
    while let Some(r) = record_iter.next_record(&mut perf_file).unwrap() {
        if let PerfFileRecord::EventRecord { record, .. } = r {
            n += matches!(record.parse(), Ok(EventRecord::Sample(_))) as usize;
        }
    }
    n
}

/// Runs mmap2-synth with `args`, asserting exit 0; returns stderr.
fn run_ok(args: &[&std::ffi::OsStr]) -> String {
    String::from_utf8(synth_ok(args).stderr).unwrap()
}

/// Asserts the output `out` has no section `gone` (Some: the bit and the
/// feature's name, which the warning `err` names), and every other
/// section of `input` but those in `changed` as it was.
fn assert_left_out(
    input: &[u8],
    out: &Path,
    gone: Option<(u32, &str)>,
    changed: &[u32],
    err: &str,
) {
    let (was, now) = (sections(input), sections(&std::fs::read(out).unwrap()));
    if let Some((bit, name)) = gone {
        let warning = format!("warning: feature {name} (bit {bit}) left out of the file");
        assert!(err.contains(&warning), "{}: {err}", out.display());
        assert!(!now.contains_key(&bit), "{}: bit {bit} kept", out.display());
    }
    for (bit, p) in &was {
        if Some(*bit) != gone.map(|g| g.0) && !changed.contains(bit) {
            assert_eq!(
                now.get(bit),
                Some(p),
                "{}: section {bit} changed",
                out.display()
            );
        }
    }
}

/// A BUILD_ID table entry (user, pid -1, zero id) naming `/x`, `size`
/// bytes long.
fn build_id_entry(size: u16) -> Vec<u8> {
    let mut e = Vec::new();
    e.extend(0u32.to_le_bytes());
    e.extend(2u16.to_le_bytes());
    e.extend(size.to_le_bytes());
    e.extend((-1i32).to_le_bytes());
    e.extend([0; 24]);
    e.extend(b"/x");
    e.resize(usize::from(size), 0);
    e
}

// A real recording with a section perf 6.1's file-mode reader crashes on
// (an empty CMDLINE: it sizes its buffer by the section and reads the
// strings after it; a CMDLINE, EVENT_DESC or PMU_MAPPINGS count of 2^32-1;
// a BUILD_ID entry longer than its 4 KiB stack buffer) converts (`--to
// file`, and the in-place patch of `--buildid-mmap2`) and merges into
// files perf and linux-perf-data read, samples and all: the section (the
// entry) is left out with a warning naming it, every other section kept
// byte for byte.
#[test]
#[ignore = "needs perf"]
fn sections_perf_crashes_on_are_left_out_of_files() {
    needs_perf();
    let dir = scratch("filefeat-crash");
    let rec = std::fs::read(pin("rec-file.data")).unwrap();
    let secs = sections(&rec);
    let with = |bit: u32, p: Vec<u8>| {
        let mut s = secs.clone();
        s.insert(bit, p);
        with_sections(&rec, &s)
    };
    let mut emptied = rec.clone();
    let idx = feature_bits(&rec).iter().position(|&b| b == 11).unwrap();
    let at = (u64::from_le_bytes(rec[40..48].try_into().unwrap())
        + u64::from_le_bytes(rec[48..56].try_into().unwrap())) as usize
        + idx * 16
        + 8;
    emptied[at..at + 8].copy_from_slice(&0u64.to_le_bytes());
    let max = u32::MAX.to_le_bytes();
    let mut cmdline = secs[&11].clone();
    cmdline[..4].copy_from_slice(&max);
    let table = [secs[&2].clone(), build_id_entry(65528), build_id_entry(64)].concat();
    // what, the input, the section left out (bit and name)
    type Case<'a> = (&'a str, Vec<u8>, Option<(u32, &'a str)>);
    let cases: [Case; 5] = [
        ("empty CMDLINE", emptied, Some((11, "CMDLINE"))),
        ("CMDLINE count", with(11, cmdline), Some((11, "CMDLINE"))),
        (
            "EVENT_DESC count",
            with(12, [max, 128u32.to_le_bytes()].concat()),
            Some((12, "EVENT_DESC")),
        ),
        (
            "PMU_MAPPINGS count",
            with(16, max.to_vec()),
            Some((16, "PMU_MAPPINGS")),
        ),
        ("long BUILD_ID entry", with(2, table), None),
    ];
    let input = dir.join("in.data");
    for (what, bytes, gone) in cases {
        std::fs::write(&input, &bytes).unwrap();
        for (i, cmd) in [
            &["convert", "--to", "file"][..],
            &["convert", "--buildid-mmap2"],
            &["merge", "--no-kernel"],
        ]
        .iter()
        .enumerate()
        {
            let out = dir.join(format!("out{i}.data"));
            let mut args: Vec<&std::ffi::OsStr> = cmd.iter().map(|a| a.as_ref()).collect();
            args.extend([input.as_os_str(), "-o".as_ref(), out.as_os_str()]);
            let err = run_ok(&args);
            let what = format!("{what}, {cmd:?}");
            assert_perf_reads_samples(&out, &what);
            let lpd = linux_perf_data_samples(&std::fs::read(&out).unwrap());
            assert_eq!(lpd, 19, "{what}: linux-perf-data's samples");
            if gone.is_some() {
                assert_left_out(&bytes, &out, gone, &[], &err);
                continue;
            }
            // the long entry alone left out of the table
            assert!(
                err.contains("warning: 1 BUILD_ID entries left out"),
                "{what}: {err}"
            );
            assert_left_out(&bytes, &out, None, &[2], &err);
            let now = sections(&std::fs::read(&out).unwrap());
            let want = [secs[&2].clone(), build_id_entry(64)].concat();
            assert_eq!(now[&2], want, "{what}: BUILD_ID");
        }
    }
}

/// Runs `sh -c SCRIPT` in the background (killed when dropped).
struct Bg(std::process::Child);

impl Drop for Bg {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// perf 6.1's file-mode reader reads no section after one it fails on: a
// `perf record -z` recording whose HOSTNAME claims 2 GiB has no sample
// perf can decompress (COMPRESSED comes later). Its file-mode outputs
// (`convert --to file`, `merge -o`, `merge --in-place`) leave HOSTNAME out
// with a warning and keep every other section as it was; perf reads their
// samples. An `--in-place` merge with nothing to add leaves the recording
// as it was, and says perf cannot read the section.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2)"]
fn a_section_perf_stops_at_is_left_out_of_compressed_recordings() {
    needs_perf_record();
    let dir = scratch("filefeat-z");
    // a process that started before the recording: a merge inserts it
    let live = Bg(Command::new("sleep")
        .arg("60")
        .stdout(Stdio::null())
        .spawn()
        .unwrap());
    let pid = live.0.id().to_string();
    let rec = dir.join("rec.data");
    let work = "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done";
    perf_record_to(&rec, &["-z"], &["--", "sh", "-c", work]);
    let mut bad = std::fs::read(&rec).unwrap();
    let host = feature_range(&bad, 3).unwrap();
    bad[host.start..host.start + 4].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    let input = dir.join("in.data");
    std::fs::write(&input, &bad).unwrap();
    let out = dir.join("out.data");
    let hostname = Some((3, "HOSTNAME"));
    for cmd in [
        &["convert", "--to", "file"][..],
        &["merge", "--no-kernel", "-p", &pid],
    ] {
        let mut args: Vec<&std::ffi::OsStr> = cmd.iter().map(|a| a.as_ref()).collect();
        args.extend([input.as_os_str(), "-o".as_ref(), out.as_os_str()]);
        let err = run_ok(&args);
        assert_perf_reads_samples(&out, &format!("{cmd:?}"));
        // a merge adds the process's build ids to the table
        assert_left_out(&bad, &out, hostname, &[2], &err);
    }
    let args = ["merge", "--no-kernel", "--in-place", "-p", &pid];
    let mut args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
    args.push(input.as_os_str());
    let err = run_ok(&args);
    assert!(!err.contains("inserted 0 records"), "{err}");
    assert_perf_reads_samples(&input, "merge --in-place");
    assert_left_out(&bad, &input, hostname, &[2], &err);
    // nothing to add (its maps are in now): left as it was, bad HOSTNAME
    // put back, and said why perf cannot read it
    let merged = std::fs::read(&input).unwrap();
    let mut secs = sections(&merged);
    secs.insert(3, bad[host].to_vec());
    let again = with_sections(&merged, &secs);
    std::fs::write(&input, &again).unwrap();
    let err = run_ok(&args);
    assert!(err.contains("nothing to add"), "{err}");
    let warning = "feature HOSTNAME (bit 3) cannot be read by perf";
    assert!(err.contains(warning), "{err}");
    assert_eq!(std::fs::read(&input).unwrap(), again, "left as it was");
}
