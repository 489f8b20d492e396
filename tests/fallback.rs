//! The automatic fallback from PROCMAP_QUERY to text maps, on a fake /proc
//! whose maps files are regular files (the ioctl then fails with ENOTTY,
//! exactly as on a kernel without it).

use mmap2_synth::model::Selection;
use mmap2_synth::proc::{self as synth, Options, ScanError, SourceChoice, Target};

/// A fake /proc with one two-thread process whose maps are regular files.
fn fake_proc() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let task = root.join("4242/task");
    for tid in ["4242", "4243"] {
        std::fs::create_dir_all(task.join(tid)).unwrap();
        std::fs::write(
            task.join(tid).join("status"),
            format!("Name:\tthr{tid}\nTgid:\t4242\nPPid:\t1\nUid:\t1000\t1000\t1000\t1000\nKthread:\t0\n"),
        )
        .unwrap();
        std::fs::write(task.join(tid).join("comm"), format!("thr{tid}\n")).unwrap();
    }
    std::fs::write(
        root.join("4242/status"),
        "Name:\tfake\nTgid:\t4242\nPPid:\t1\nUid:\t1000\t1000\t1000\t1000\nKthread:\t0\n",
    )
    .unwrap();
    std::fs::write(
        root.join("4242/stat"),
        "4242 (fake) S 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 2 0 12345 0 0\n",
    )
    .unwrap();
    let maps = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 100 /usr/bin/fake
55d0c0a01000-55d0c0a05000 r-xp 00001000 08:01 100 /usr/bin/fake
7f0000000000-7f0000010000 rw-p 00000000 00:00 0 
7f0000010000-7f0000020000 r-xp 00002000 08:01 200 /lib/with space\\012newline.so
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
";
    for tid in ["4242", "4243"] {
        std::fs::write(task.join(tid).join("maps"), maps).unwrap();
    }
    std::fs::write(root.join("4242/maps"), maps).unwrap();
    dir
}

// With --source auto the ENOTTY of the ioctl switches to the text parser,
// which yields the exec VMAs (not [vsyscall]) with their raw names.
#[test]
fn auto_falls_back_to_text_on_enotty() {
    let tmp = fake_proc();
    let root = tmp.path().to_path_buf();
    let opts = Options {
        selection: Selection::Exec,
        source: SourceChoice::Auto,
        build_ids: false,
        jobs: Some(1),
        proc_root: root.clone(),
        ..Options::default()
    };
    let snap = synth::snapshot(&Target::Pids(vec![4242]), &opts).unwrap();
    assert!(snap.skipped.is_empty(), "{:?}", snap.skipped);
    let p = &snap.processes[0];
    assert_eq!(p.source, Some(mmap2_synth::model::Source::Text));
    assert_eq!(p.threads.len(), 2);
    assert_eq!(p.threads[1].comm, b"thr4243");
    assert_eq!(p.start_time, 12345);
    let names: Vec<&[u8]> = p.vmas.iter().map(|v| &v.name[..]).collect();
    assert_eq!(
        names,
        vec![&b"/usr/bin/fake"[..], b"/lib/with space\nnewline.so"]
    );
    // --data adds the readable VMAs (still not the unreadable vsyscall page)
    let data = synth::snapshot(
        &Target::Pids(vec![4242]),
        &Options {
            selection: Selection::ExecAndData,
            ..opts.clone()
        },
    )
    .unwrap();
    assert_eq!(data.processes[0].vmas.len(), 4);
    // --source ioctl refuses instead of falling back
    let err = synth::snapshot(
        &Target::Pids(vec![4242]),
        &Options {
            source: SourceChoice::Ioctl,
            ..opts
        },
    )
    .unwrap_err();
    assert!(matches!(err, ScanError::NoIoctl), "{err}");
}

// A kernel thread (PF_KTHREAD in stat's flags) is read without touching its maps and encoded as COMM (and FORK) only.
#[test]
fn kernel_threads_get_comm_and_fork_only() {
    use mmap2_synth::bytes::Endian;
    use mmap2_synth::perf::consts::types;
    use mmap2_synth::perf::SampleIdLayout;
    use mmap2_synth::snapshot::{self, Encoding};
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    for (pid, kline, flags) in [
        (2u32, "Kthread:\t1\n", 0x0020_8040u64),
        (3, "", 0x0020_8040),
    ] {
        let d = root.join(pid.to_string());
        std::fs::create_dir_all(d.join(format!("task/{pid}"))).unwrap();
        let status =
            format!("Name:\tkworker/{pid}\nTgid:\t{pid}\nPPid:\t2\nUid:\t0\t0\t0\t0\n{kline}");
        std::fs::write(d.join("status"), &status).unwrap();
        std::fs::write(d.join(format!("task/{pid}/status")), &status).unwrap();
        std::fs::write(
            d.join("stat"),
            format!("{pid} (kworker) I 2 0 0 0 -1 {flags} 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0\n"),
        )
        .unwrap();
        // no maps file at all: reading it would fail the process
    }
    let opts = Options {
        build_ids: false,
        jobs: Some(2),
        proc_root: root.clone(),
        max_vmas: None,
        ..Options::default()
    };
    let snap = synth::snapshot(&Target::Pids(vec![2, 3]), &opts).unwrap();
    assert!(snap.skipped.is_empty(), "{:?}", snap.skipped);
    assert!(snap
        .processes
        .iter()
        .all(|p| p.kernel_thread && p.vmas.is_empty() && p.source.is_none()));
    let mut out = Vec::new();
    let enc = Encoding {
        endian: Endian::Little,
        layout: SampleIdLayout::default(),
        id: 0,
        forks: true,
        fill_tid: true,
    };
    snapshot::encode(&snap, &enc, &mut out).unwrap();
    let kinds: Vec<u32> = mmap2_synth::perf::record::split_records(&out, Endian::Little)
        .map(|(h, _)| h.type_)
        .collect();
    assert_eq!(
        kinds,
        vec![types::FORK, types::COMM, types::FORK, types::COMM]
    );
}
