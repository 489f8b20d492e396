//! Names shared by file (the walk asks most VMAs without their name once a
//! process shows a file another process showed): a file reached by another
//! name (a hard link, a bind mount, another mount namespace) keeps the name
//! the kernel gives it in each process, as `perf script` reads the
//! snapshot.

mod common;

use std::path::Path;

use common::*;

/// Maps as (start, path).
type Named = Vec<(u64, String)>;

/// The executable maps `perf script` shows for `pid` under `dir`, and the
/// kernel's text maps of it.
fn names_of(data: &Path, pid: u32, dir: &Path) -> (Named, Named) {
    let under = |p: &String| p.starts_with(dir.to_str().unwrap());
    let got = perf_mmaps_of(data)
        .into_iter()
        .filter(|m| m.pid == pid && under(&m.path))
        .map(|m| (m.start, m.path))
        .collect();
    let want = expected_exec_maps(pid, |_| None)
        .into_iter()
        .filter(|m| under(&m.path))
        .map(|m| (m.start, m.path))
        .collect();
    (got, want)
}

// Pairs of processes mapping one file by two names, the first name
// learned first (`-j 1`, pids in order): hard links, a bind mount, a
// tmpfs moved to another place in a process's own mount namespace; and a
// file two processes map by one name. Each process's maps carry the name
// its own maps file gives, never the first process's.
#[test]
#[ignore = "needs root (mount, unshare -m, map_files), perf and PROCMAP_QUERY (Linux 6.11+)"]
fn a_file_known_by_another_name_keeps_its_own() {
    needs_root("mount, unshare -m, and map_files for the names' judgement");
    needs_procmap_query();
    needs_perf();
    let f = fixtures();
    let dir = scratch("names");
    let d: &Path = &dir;
    let at = |p: &str| d.join(p);
    for p in ["links", "bound", "bound2", "moved", "moved2", "plain"] {
        std::fs::create_dir(at(p)).unwrap();
    }
    let mut mounts = Vec::new();
    for p in ["links", "bound", "moved", "plain"] {
        mounts.push(Mounted::new(&["-t", "tmpfs", "none"], &at(p)));
    }
    mounts.push(Mounted::new(
        &["--bind", at("bound").to_str().unwrap()],
        &at("bound2"),
    ));
    for p in [
        "links/lib.so",
        "bound/lib.so",
        "moved/lib.so",
        "plain/lib.so",
    ] {
        std::fs::copy(&f.lib_sha1, at(p)).unwrap();
    }
    std::fs::hard_link(at("links/lib.so"), at("links/link.so")).unwrap();
    let moved = format!(
        "mount --move {} {} && exec {} {}",
        q(&at("moved")),
        q(&at("moved2")),
        q(&f.mapper),
        q(&at("moved2/lib.so"))
    );
    let unshared: [&std::ffi::OsStr; 6] = [
        "-m".as_ref(),
        "--propagation".as_ref(),
        "private".as_ref(),
        "sh".as_ref(),
        "-c".as_ref(),
        moved.as_ref(),
    ];
    // in start order: each pair's first learns the name
    let mappers = [
        Mapper::start(&[at("links/lib.so").as_os_str()]),
        Mapper::start(&[at("links/link.so").as_os_str()]),
        Mapper::start(&[at("bound/lib.so").as_os_str()]),
        Mapper::start(&[at("bound2/lib.so").as_os_str()]),
        Mapper::start(&[at("moved/lib.so").as_os_str()]),
        Mapper::start_as(Path::new("unshare"), &unshared),
        Mapper::start(&[at("plain/lib.so").as_os_str()]),
        Mapper::start(&[at("plain/lib.so").as_os_str()]),
    ];
    let pids: Vec<u32> = mappers.iter().map(|m| m.pid).collect();
    let list = pids.iter().map(u32::to_string).collect::<Vec<_>>();
    let out = d.join("names.data");
    synth_ok([
        "-p",
        &list.join(","),
        "-j",
        "1",
        "--source",
        "ioctl",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ]);
    let want_path = [
        "links/lib.so",
        "links/link.so",
        "bound/lib.so",
        "bound2/lib.so",
    ];
    let want_path = want_path.iter().chain(&[
        "moved/lib.so",
        "moved2/lib.so",
        "plain/lib.so",
        "plain/lib.so",
    ]);
    for (pid, want_path) in pids.iter().zip(want_path) {
        let (got, want) = names_of(&out, *pid, d);
        assert!(!want.is_empty(), "pid {pid} maps its library");
        assert_eq!(got, want, "pid {pid}: {want_path}");
        let path = at(want_path);
        assert!(
            got.iter().all(|(_, p)| Path::new(p) == path),
            "pid {pid}: {got:?}"
        );
    }
    drop(mappers);
    drop(mounts);
}
