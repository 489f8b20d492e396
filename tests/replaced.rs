//! Deleted and replaced binaries: a mapped library deleted, or replaced on
//! disk by another build at the same path (a new inode, as package managers
//! do), keeps the id of the file that is mapped in a snapshot from either
//! source, and perf reads that id; the new file's id appears nowhere.

mod common;

use std::path::Path;

use common::*;

/// Snapshots `pid` from `source` into `out` and returns [`ids_of`] it.
fn snapshot_ids(
    pid: &str,
    source: &str,
    out: &Path,
    prefix: &str,
) -> Vec<(String, Option<String>)> {
    synth_ok([
        "-p",
        pid,
        "--source",
        source,
        "-q",
        "-o",
        out.to_str().unwrap(),
    ]);
    ids_of(out, prefix)
}

/// The build ids `perf script --show-mmap-events` shows for maps of paths
/// starting with `prefix`.
fn ids_of(data: &Path, prefix: &str) -> Vec<(String, Option<String>)> {
    perf_mmaps_of(data)
        .into_iter()
        .filter(|m| m.path.starts_with(prefix))
        .map(|m| (m.path, m.build_id))
        .collect()
}

// One library deleted and one replaced (renamed over by another build)
// while mapped: with --source ioctl and --source text the snapshot gives
// each the id of its mapped file ("... (deleted)" paths, as the kernel names
// them), never the replacement's.
#[test]
#[ignore = "needs root (map_files), perf and PROCMAP_QUERY (Linux 6.11+)"]
fn deleted_and_replaced_libraries_keep_their_mapped_ids() {
    needs_root("map_files, for the mapped file of a deleted or replaced library");
    needs_procmap_query();
    needs_perf();
    let f = fixtures();
    let dir = scratch("replaced");
    let (gone, swapped) = (dir.join("libgone.so"), dir.join("libswapped.so"));
    std::fs::copy(&f.lib_sha1, &gone).unwrap();
    std::fs::copy(&f.lib_hex8, &swapped).unwrap();
    let m = Mapper::start(&[gone.as_os_str(), swapped.as_os_str()]);
    std::fs::remove_file(&gone).unwrap();
    let new = dir.join("new.so");
    std::fs::copy(&f.lib_md5, &new).unwrap();
    std::fs::rename(&new, &swapped).unwrap(); // a new inode at the path
    let (want_gone, want_swapped) = (readelf_build_id(&f.lib_sha1), readelf_build_id(&f.lib_hex8));
    let replacement = readelf_build_id(&f.lib_md5).unwrap();
    let pid = m.pid.to_string();
    for source in ["ioctl", "text"] {
        let out = dir.join(format!("{source}.data"));
        let got = snapshot_ids(&pid, source, &out, dir.to_str().unwrap());
        let find = |name: &Path| {
            let want = format!("{} (deleted)", name.display());
            got.iter()
                .filter(|(p, _)| *p == want)
                .map(|(_, id)| id.clone())
                .collect::<Vec<_>>()
        };
        let g = find(&gone);
        let s = find(&swapped);
        assert!(!g.is_empty() && !s.is_empty(), "{source}: {got:?}");
        assert!(g.iter().all(|id| *id == want_gone), "{source}: {got:?}");
        assert!(s.iter().all(|id| *id == want_swapped), "{source}: {got:?}");
        assert!(
            got.iter()
                .all(|(_, id)| id.as_deref() != Some(replacement.as_str())),
            "{source}: {got:?}"
        );
        let table = perf_buildid_list(&perf(&[
            "buildid-list".as_ref(),
            "-i".as_ref(),
            out.as_os_str(),
        ]));
        assert!(
            !table.values().any(|id| *id == replacement),
            "{source}: {table:?}"
        );
    }
}

// A process in its own mount namespace where a bind mount puts another
// library at a path the host also has: its map keeps the path it sees,
// and from either source the id of the file it maps, never the host's
// file at that path.
#[test]
#[ignore = "needs root (unshare -m, mount) and PROCMAP_QUERY (Linux 6.11+)"]
fn container_maps_get_the_mapped_files_id_not_the_hosts() {
    needs_root("unshare -m and mount --bind");
    needs_procmap_query();
    needs_perf();
    let f = fixtures();
    let dir = scratch("container");
    let (lib, inside) = (dir.join("libshared.so"), dir.join("inside.so"));
    std::fs::copy(&f.lib_sha1, &lib).unwrap();
    std::fs::copy(&f.lib_md5, &inside).unwrap();
    let script = format!(
        "mount --bind '{inside}' '{lib}' && exec '{mapper}' '{lib}'",
        inside = inside.display(),
        lib = lib.display(),
        mapper = f.mapper.display()
    );
    let m = Mapper::start_as(
        Path::new("unshare"),
        &[
            "-m".as_ref(),
            "--propagation".as_ref(),
            "private".as_ref(),
            "sh".as_ref(),
            "-c".as_ref(),
            script.as_ref(),
        ],
    );
    let (host_id, mapped_id) = (
        readelf_build_id(&lib).unwrap(),
        readelf_build_id(&inside).unwrap(),
    );
    assert_ne!(host_id, mapped_id);
    let pid = m.pid.to_string();
    for source in ["ioctl", "text"] {
        let out = dir.join(format!("{source}.data"));
        let got = snapshot_ids(&pid, source, &out, lib.to_str().unwrap());
        assert!(
            !got.is_empty(),
            "{source}: the map keeps the path the process sees"
        );
        for (path, id) in &got {
            assert_eq!(path, lib.to_str().unwrap());
            assert_eq!(id.as_deref(), Some(mapped_id.as_str()), "{source}: {got:?}");
        }
    }
}
