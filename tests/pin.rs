//! Byte pins: a snapshot of a fake /proc with fixed host facts, and merges of
//! it into two real perf recordings, must produce exactly the committed bytes
//! in `fixtures/pin/`. A restructure that moves one byte fails here.
//! `MMAP2_SYNTH_UPDATE_PINS=1 cargo test --test pin` rewrites the pins (only
//! when a format change is intended; say so in the commit).

use std::path::{Path, PathBuf};

use mmap2_synth::bytes::Endian;
use mmap2_synth::model::Selection;
use mmap2_synth::proc::{self, HostFacts, Options, SourceChoice, Target};
use mmap2_synth::rewrite::{self, MergeOptions, Which};
use mmap2_synth::snapshot::{self, Out, WriteOptions};

fn pins() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pin")
}

/// A minimal ELF64 little-endian file with one PT_NOTE holding a GNU build id.
fn elf_with_build_id(id: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 0x100];
    b[..6].copy_from_slice(b"\x7fELF\x02\x01");
    b[32..40].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
    b[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
    b[56..58].copy_from_slice(&1u16.to_le_bytes()); // e_phnum
    let mut note = Vec::new();
    note.extend(4u32.to_le_bytes());
    note.extend((id.len() as u32).to_le_bytes());
    note.extend(3u32.to_le_bytes());
    note.extend(b"GNU\0");
    note.extend(id);
    while note.len() % 4 != 0 {
        note.push(0);
    }
    b[64..68].copy_from_slice(&4u32.to_le_bytes()); // PT_NOTE
    b[72..80].copy_from_slice(&0x80u64.to_le_bytes()); // p_offset
    b[96..104].copy_from_slice(&(note.len() as u64).to_le_bytes()); // p_filesz
    b[0x80..0x80 + note.len()].copy_from_slice(&note);
    b
}

/// A fake /proc with two processes (one with two threads) whose `root` links
/// to a directory of files with known build ids.
fn fake_proc(dir: &Path) -> PathBuf {
    let files = dir.join("files");
    std::fs::create_dir_all(files.join("lib")).unwrap();
    std::fs::create_dir_all(files.join("usr/bin")).unwrap();
    std::fs::write(files.join("lib/libpin.so"), elf_with_build_id(&[0x11; 20])).unwrap();
    std::fs::write(files.join("lib/libshort.so"), elf_with_build_id(&[0x22; 8])).unwrap();
    std::fs::write(files.join("usr/bin/pinned"), b"#!/bin/sh\n").unwrap();
    let root = dir.join("proc");
    // The ELF files' maps lines carry their real device and inode, as the
    // kernel's would (a build id is only trusted from the file that was
    // mapped); build-id MMAP2s hold no inode, so the pinned bytes do not vary.
    let id = |p: &str| {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(files.join(p)).unwrap();
        let (dev, ino) = (m.dev(), m.ino());
        let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
        let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
        format!("{major:02x}:{minor:02x} {ino}")
    };
    let maps = format!(
        "\
55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 100 /usr/bin/pinned
55d0c0a01000-55d0c0a05000 r-xp 00001000 08:01 100 /usr/bin/pinned
55d0c0b00000-55d0c0b21000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000010000 rw-p 00000000 00:00 0 
7f0000010000-7f0000020000 r-xp 00002000 {} /lib/libpin.so
7f0000020000-7f0000030000 r-xs 00000000 {} /lib/libshort.so
7f0000030000-7f0000031000 r-xp 00000000 08:01 202 /lib/gone.so (deleted)
7f0000040000-7f0000041000 r-xp 00000000 00:00 0 
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
",
        id("lib/libpin.so"),
        id("lib/libshort.so")
    );
    for (pid, tids) in [(100u32, &[100u32, 101][..]), (200, &[200][..])] {
        let d = root.join(pid.to_string());
        for &tid in tids {
            let t = d.join(format!("task/{tid}"));
            std::fs::create_dir_all(&t).unwrap();
            std::fs::write(
                t.join("status"),
                format!("Name:\tpin{tid}\nTgid:\t{pid}\nPPid:\t1\nUid:\t0\t0\t0\t0\nKthread:\t0\n"),
            )
            .unwrap();
            std::fs::write(t.join("comm"), format!("pin{tid}\n")).unwrap();
            std::fs::write(t.join("maps"), &maps).unwrap();
        }
        std::fs::copy(d.join(format!("task/{pid}/status")), d.join("status")).unwrap();
        std::fs::write(d.join("maps"), &maps).unwrap();
        std::fs::write(
            d.join("stat"),
            format!("{pid} (pin{pid}) S 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 2 0 5 0 0\n"),
        )
        .unwrap();
        std::os::unix::fs::symlink(&files, d.join("root")).unwrap();
    }
    root
}

/// The layout a pin is written in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    File,
    Pipe,
}

fn write_opts(endian: Endian) -> WriteOptions {
    WriteOptions {
        endian,
        forks: true,
        cmdline: vec![b"mmap2-synth".to_vec(), b"--pin".to_vec()],
        host: HostFacts {
            hostname: b"pinhost".to_vec(),
            osrelease: b"6.99.0-pin".to_vec(),
            cpus_online: 4,
            cpus_available: 8,
        },
        kernel: None,
        watch: false,
        watch_pages: None,
    }
}

/// Compares `got` with the pin `name`, or rewrites the pin when asked.
fn check_pin(name: &str, got: &[u8]) {
    let path = pins().join(name);
    if std::env::var_os("MMAP2_SYNTH_UPDATE_PINS").is_some() {
        // Renamed into place: the merge test may be reading the snapshot pin.
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, got).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        return;
    }
    let want = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if want != got {
        let at = want.iter().zip(got).position(|(a, b)| a != b);
        panic!(
            "{name}: output moved ({} bytes, pinned {}; first difference at {at:?})",
            got.len(),
            want.len()
        );
    }
}

// A snapshot of fixed input is byte-identical to the pins in both byte
// orders, file and pipe mode, with and without data VMAs.
#[test]
fn snapshot_bytes_are_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let root = fake_proc(dir.path());
    for (name, selection, endian, mode) in [
        ("snap-le.data", Selection::Exec, Endian::Little, Mode::File),
        ("snap-be.data", Selection::Exec, Endian::Big, Mode::File),
        (
            "snap-pipe.data",
            Selection::Exec,
            Endian::Little,
            Mode::Pipe,
        ),
        (
            "snap-data.data",
            Selection::ExecAndData,
            Endian::Little,
            Mode::File,
        ),
    ] {
        let opts = Options {
            selection,
            source: SourceChoice::Text,
            build_ids: true,
            jobs: Some(2),
            proc_root: root.clone(),
            ..Options::default()
        };
        let snap = proc::snapshot(&Target::Pids(vec![200, 100]), &opts).unwrap();
        assert!(snap.skipped.is_empty(), "{:?}", snap.skipped);
        let mut file = std::io::Cursor::new(Vec::new());
        let mut pipe = Vec::new();
        let out = match mode {
            Mode::File => Out::File(&mut file),
            Mode::Pipe => Out::Pipe(&mut pipe),
        };
        snapshot::write_snapshot(out, &snap, &write_opts(endian)).unwrap();
        let got = if mode == Mode::File {
            file.into_inner()
        } else {
            pipe
        };
        check_pin(name, &got);
    }
}

// Merging the pinned snapshot into real perf recordings (file and pipe mode)
// gives exactly the pinned bytes.
#[test]
fn merge_bytes_are_pinned() {
    let dir = tempfile::tempdir().unwrap();
    for (rec, name) in [
        ("rec-file.data", "merged-file.data"),
        ("rec-pipe.data", "merged-pipe.data"),
    ] {
        let out = dir.path().join(name);
        let opts = MergeOptions {
            which: Which::Pids(vec![100]),
            maps: Some(pins().join("snap-le.data")),
            snapshot: Options::default(),
            in_place: false,
            kernel: false,
            salvage: false,
        };
        let report = rewrite::merge(&pins().join(rec), &out, &opts).unwrap();
        assert_eq!(report.processes, 1, "{report:?}");
        check_pin(name, &std::fs::read(&out).unwrap());
    }
}
