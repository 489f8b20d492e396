//! `mmap2-synth archive`: the binaries a live process maps, in perf's
//! build-id cache layout, so `perf --buildid-dir DIR report` symbolizes a
//! recording against the library that ran even after it was replaced.

mod common;

use std::path::Path;

use common::*;

/// `perf report --sort dso,sym` of `rec` with this build-id directory.
fn report_with(dir: &Path, rec: &Path) -> String {
    perf(&[
        "--buildid-dir".as_ref(),
        dir.as_os_str(),
        "report".as_ref(),
        "--stdio".as_ref(),
        "--sort".as_ref(),
        "dso,sym".as_ref(),
        "-i".as_ref(),
        rec.as_os_str(),
    ])
}

// A burner linked against a private copy of libburn is recorded with
// --no-buildid-cache and its live mappings archived; the library is then
// replaced on disk by another build. With the archive perf still names
// burn_work; with an empty directory (the control) it does not. The layout
// is perf's: .build-id/xx/rest -> ../../PATH/ID holding `elf`, the vDSO as
// [vdso]/ID/vdso, the kernel as [kernel.kallsyms]/ID/kallsyms; --from
// the recording archives the same library from the live mapping.
#[test]
#[ignore = "needs perf record (root or perf_event_paranoid <= 2) and map_files (root)"]
fn archived_library_symbolizes_after_it_is_replaced() {
    needs_perf_record();
    needs_root("map_files, to copy the mapped files");
    let dir = scratch("archive");
    let lib_dir = dir.join("lib");
    std::fs::create_dir_all(&lib_dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let lib = lib_dir.join("libburn.so");
    cc(&[
        "-shared".as_ref(),
        "-fPIC".as_ref(),
        "-O1".as_ref(),
        "-o".as_ref(),
        lib.as_os_str(),
        src.join("libburn.c").as_os_str(),
    ]);
    let burn = dir.join("burn");
    let rpath = format!("-Wl,-rpath,{}", lib_dir.display());
    let ldir = format!("-L{}", lib_dir.display());
    cc(&[
        "-O1".as_ref(),
        "-o".as_ref(),
        burn.as_os_str(),
        src.join("burn.c").as_os_str(),
        ldir.as_ref(),
        "-lburn".as_ref(),
        rpath.as_ref(),
    ]);
    let b = Mapper::start_as(&burn, &["60".as_ref()]);
    let rec = dir.join("rec.data");
    perf_record_pid(b.pid, &rec, &["--no-buildid-cache"], "0.5");
    let cache = dir.join("cache");
    let err = synth_ok([
        "archive".as_ref(),
        "-p".as_ref(),
        b.pid.to_string().as_ref(),
        "-o".as_ref(),
        cache.as_os_str(),
    ])
    .stderr;
    let err = String::from_utf8_lossy(&err).into_owned();
    assert!(
        err.contains("vdso archived") && err.contains("kallsyms;"),
        "{err}"
    );
    // Archiving again adds nothing: every entry is there.
    let pid = b.pid.to_string();
    let again = synth_ok([
        "archive".as_ref(),
        "-p".as_ref(),
        pid.as_ref(),
        "-o".as_ref(),
        cache.as_os_str(),
    ])
    .stderr;
    let again = String::from_utf8_lossy(&again).into_owned();
    assert!(again.contains(" 0 files added"), "{again}");
    // --from the recording (inode-form maps): the same files, from the
    // live process's mappings.
    let cache2 = dir.join("cache2");
    synth_ok([
        "archive".as_ref(),
        "--from".as_ref(),
        rec.as_os_str(),
        "-o".as_ref(),
        cache2.as_os_str(),
        "-q".as_ref(),
    ]);
    let id = readelf_build_id(&lib).unwrap();
    let rel = lib.strip_prefix("/").unwrap().join(&id).join("elf");
    assert_eq!(
        std::fs::read(cache2.join(&rel)).unwrap(),
        std::fs::read(&lib).unwrap()
    );
    drop(b);

    let entry = cache.join(lib.strip_prefix("/").unwrap()).join(&id);
    assert_eq!(
        std::fs::read(entry.join("elf")).unwrap(),
        std::fs::read(&lib).unwrap()
    );
    let link = cache.join(".build-id").join(&id[..2]).join(&id[2..]);
    let target = std::fs::read_link(&link).unwrap();
    assert_eq!(
        target,
        Path::new("../..")
            .join(lib.strip_prefix("/").unwrap())
            .join(&id)
    );
    let kid = perf(&["buildid-list".as_ref(), "-k".as_ref()])
        .trim()
        .to_string();
    assert!(cache
        .join("[kernel.kallsyms]")
        .join(&kid)
        .join("kallsyms")
        .is_file());
    let vdso = vdso_build_id(std::process::id(), &dir).unwrap();
    assert!(cache.join("[vdso]").join(&vdso).join("vdso").is_file());

    // Another build at the library's path (a new inode, as an upgrade does).
    let other = dir.join("other.c");
    std::fs::write(
        &other,
        "unsigned long other_work(unsigned long n) { return n * 3; }\n",
    )
    .unwrap();
    let new = lib_dir.join("new.so");
    cc(&[
        "-shared".as_ref(),
        "-fPIC".as_ref(),
        "-O1".as_ref(),
        "-o".as_ref(),
        new.as_os_str(),
        other.as_os_str(),
    ]);
    std::fs::rename(&new, &lib).unwrap();

    let with = report_with(&cache, &rec);
    assert!(with.contains("burn_work"), "{with}");
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let without = report_with(&empty, &rec);
    assert!(
        !without.contains("burn_work"),
        "the control names it too: {without}"
    );
}

// A cache directory where someone planted a symlink on the way to an entry
// (DIR/work -> elsewhere): nothing is written through it, the entry is
// counted as not written and named, the rest (the vDSO) is still
// archived, and the run fails (exit 1).
#[test]
#[ignore = "needs map_files (root)"]
fn a_symlink_in_the_cache_is_never_followed() {
    needs_root("map_files, to copy the mapped files");
    let f = fixtures();
    let dir = scratch("archive-symlink");
    let lib = dir.join("libplant.so");
    std::fs::copy(&f.lib_sha1, &lib).unwrap();
    let m = Mapper::start(&[lib.as_os_str()]);
    let (cache, elsewhere) = (dir.join("cache"), dir.join("elsewhere"));
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    let first = lib.components().nth(1).unwrap().as_os_str().to_owned();
    std::os::unix::fs::symlink(&elsewhere, cache.join(&first)).unwrap();
    let out = synth([
        "archive".as_ref(),
        "-p".as_ref(),
        m.pid.to_string().as_ref(),
        "-o".as_ref(),
        cache.as_os_str(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("not written: ") && err.contains("vdso archived"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "written through the symlink"
    );
}

/// A tmpfs mounted at a directory for one test, unmounted (lazily, so a
/// failing test cannot leave it busy) when dropped.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (mount's syntax, e.g. `100k`) at `at`.
    fn mount(at: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let st = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .expect("run mount");
        assert!(st.success(), "mount tmpfs at {}", at.display());
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

// A cache on a 100 KiB tmpfs filled up: every copy fails with ENOSPC, and
// the run is an error even with --strict (exit 1, the message naming a
// cache path and the cause), the vDSO is reported not written (not "not
// found"), and no directory made for a failed entry is left behind.
#[test]
#[ignore = "needs root (mount, map_files)"]
fn a_full_disk_fails_the_archive_and_leaves_no_empty_entries() {
    needs_root("mount a tmpfs, map_files to copy the mapped files");
    let f = fixtures();
    let dir = scratch("archive-full");
    let lib = dir.join("libfull.so");
    std::fs::copy(&f.lib_sha1, &lib).unwrap();
    let m = Mapper::start(&[lib.as_os_str()]);
    let fs = dir.join("fs");
    let _mounted = Tmpfs::mount(&fs, "100k");
    // fill it: write until the filesystem refuses
    {
        use std::io::Write;
        let mut filler = std::fs::File::create(fs.join("filler")).unwrap();
        let chunk = [0u8; 4096];
        while filler
            .write_all(&chunk)
            .and_then(|()| filler.flush())
            .is_ok()
        {}
    }
    let cache = fs.join("cache");
    let out = synth([
        "archive".as_ref(),
        "--strict".as_ref(),
        "-p".as_ref(),
        m.pid.to_string().as_ref(),
        "-o".as_ref(),
        cache.as_os_str(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    let error = err.lines().find(|l| l.starts_with("error: ")).unwrap_or("");
    assert!(
        error.contains("not written")
            && error.contains(&format!("{}/", cache.display()))
            && error.contains("No space left on device"),
        "{err}"
    );
    assert!(err.contains("vdso not written"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "left in the cache: {left:?}");
}

// Files that cannot be read are warnings, not errors: a snapshot of a
// process that has exited since archives nothing of it (counted
// unreadable) and exits 0, but --strict fails with exit 3 for them.
#[test]
fn unreadable_files_fail_only_strict() {
    let f = fixtures();
    let dir = scratch("archive-unreadable");
    let lib = dir.join("libgone.so");
    std::fs::copy(&f.lib_sha1, &lib).unwrap();
    let m = Mapper::start(&[lib.as_os_str()]);
    let snap = dir.join("snap.data");
    synth_ok([
        "-p".as_ref(),
        m.pid.to_string().as_ref(),
        "-q".as_ref(),
        "-o".as_ref(),
        snap.as_os_str(),
    ]);
    drop(m); // killed and reaped: its mappings are gone
    let archive = |strict: bool, cache: &str| {
        let mut args = vec![
            "archive".as_ref(),
            "--from".as_ref(),
            snap.as_os_str(),
            "--no-kernel".as_ref(),
        ];
        if strict {
            args.push("--strict".as_ref());
        }
        let cache = dir.join(cache);
        args.extend(["-o".as_ref(), cache.as_os_str()]);
        synth(&args)
    };
    let plain = archive(false, "c1");
    let err = String::from_utf8_lossy(&plain.stderr).into_owned();
    assert_eq!(plain.status.code(), Some(0), "{err}");
    assert!(!err.contains(" 0 unreadable"), "{err}");
    let strict = archive(true, "c2");
    let err = String::from_utf8_lossy(&strict.stderr).into_owned();
    assert_eq!(strict.status.code(), Some(3), "{err}");
    assert!(err.contains("could not be read"), "{err}");
}

// archive --from a build-id snapshot (the default: its MMAP2 records carry
// no inode) takes the files from the live mappings: a library deleted
// since the snapshot and one replaced by another build are both archived
// under their recorded ids with the bytes that ran, none counted
// unreadable or mismatched, and --strict passes.
#[test]
#[ignore = "needs root (map_files)"]
fn from_a_build_id_snapshot_uses_the_live_mappings() {
    needs_root("map_files, to copy the mapped files");
    let f = fixtures();
    let dir = scratch("archive-from-ids");
    let (gone, swapped) = (dir.join("libgone.so"), dir.join("libswapped.so"));
    std::fs::copy(&f.lib_sha1, &gone).unwrap();
    std::fs::copy(&f.lib_md5, &swapped).unwrap();
    let m = Mapper::start(&[gone.as_os_str(), swapped.as_os_str()]);
    let snap = dir.join("snap.data");
    synth_ok([
        "-p".as_ref(),
        m.pid.to_string().as_ref(),
        "-q".as_ref(),
        "-o".as_ref(),
        snap.as_os_str(),
    ]);
    std::fs::remove_file(&gone).unwrap();
    let new = dir.join("new.so");
    std::fs::copy(&f.lib_hex8, &new).unwrap();
    std::fs::rename(&new, &swapped).unwrap(); // a new inode at the path
    let cache = dir.join("cache");
    let out = synth_ok([
        "archive".as_ref(),
        "--strict".as_ref(),
        "--from".as_ref(),
        snap.as_os_str(),
        "-o".as_ref(),
        cache.as_os_str(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        err.contains(" 0 unreadable, 0 mapping another file than recorded"),
        "{err}"
    );
    for (path, built) in [(&gone, &f.lib_sha1), (&swapped, &f.lib_md5)] {
        let id = readelf_build_id(built).unwrap();
        let entry = cache.join(path.strip_prefix("/").unwrap()).join(&id);
        assert_eq!(
            std::fs::read(entry.join("elf")).unwrap(),
            std::fs::read(built).unwrap(),
            "{}",
            path.display()
        );
        let link = cache.join(".build-id").join(&id[..2]).join(&id[2..]);
        assert!(link.join("elf").is_file(), "{}", link.display());
    }
    let replacement = readelf_build_id(&f.lib_hex8).unwrap();
    assert!(!cache
        .join(swapped.strip_prefix("/").unwrap())
        .join(replacement)
        .exists());
}
