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
// counted as failed and named, and the rest (the vDSO) is still archived.
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
    let err = synth_ok([
        "archive".as_ref(),
        "-p".as_ref(),
        m.pid.to_string().as_ref(),
        "-o".as_ref(),
        cache.as_os_str(),
    ])
    .stderr;
    let err = String::from_utf8_lossy(&err).into_owned();
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
