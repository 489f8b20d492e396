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
    let kallsyms = cache.join("[kernel.kallsyms]").join(&kid).join("kallsyms");
    assert!(kallsyms.is_file());
    // readable by all only where the kernel shows every user its addresses
    let sysctl = |n: &str| -> i64 {
        let t = std::fs::read_to_string(format!("/proc/sys/kernel/{n}")).unwrap();
        t.trim().parse().unwrap()
    };
    use std::os::unix::fs::PermissionsExt;
    let open = sysctl("kptr_restrict") == 0 && sysctl("perf_event_paranoid") <= 1;
    let mode = std::fs::metadata(&kallsyms).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, if open { 0o644 } else { 0o600 });
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

/// A pipe-mode recording at `path`: one attr (no sample_id_all), a COMM
/// for `pid`, and one map record of `file` at `addr..addr+len` in it:
/// MMAP (v1, no identity) when `ident` is None, else MMAP2 with that
/// device (major, minor) and inode, and no build id.
type Ident = Option<(u32, u32, u64)>;
fn map_recording(path: &Path, pid: u32, at: (u64, u64), file: &Path, ident: Ident) {
    maps_recording(path, &[(pid, at, file, ident)]);
}

/// A pipe-mode recording at `path` of these maps (pid, (addr, len), file,
/// identity; see [`map_recording`]), in order, each after a COMM for its
/// pid.
fn maps_recording(path: &Path, maps: &[(u32, (u64, u64), &Path, Ident)]) {
    use mmap2_synth::bytes::{Endian, PutExt};
    use mmap2_synth::perf::consts::types;
    use std::os::unix::ffi::OsStrExt;
    let e = Endian::Little;
    let record = |out: &mut Vec<u8>, kind: u32, body: &mut Vec<u8>| {
        body.pad_to(8);
        out.put_u32(e, kind);
        out.put_u16(e, 0);
        out.put_u16(e, u16::try_from(8 + body.len()).unwrap());
        out.extend_from_slice(body);
    };
    let mut f = b"PERFILE2".to_vec();
    f.put_u64(e, 16);
    let mut attr = Vec::new();
    attr.put_u32(e, 1);
    attr.put_u32(e, 64);
    attr.resize(64, 0);
    attr.put_u64(e, 1);
    record(&mut f, types::HEADER_ATTR, &mut attr);
    for &(pid, (addr, len), file, ident) in maps {
        let mut comm = Vec::new();
        comm.put_u32(e, pid);
        comm.put_u32(e, pid);
        comm.extend_from_slice(b"victim\0");
        record(&mut f, types::COMM, &mut comm);
        let mut map = Vec::new();
        map.put_u32(e, pid);
        map.put_u32(e, pid);
        map.put_u64(e, addr);
        map.put_u64(e, len);
        map.put_u64(e, 0);
        if let Some((major, minor, ino)) = ident {
            map.put_u32(e, major);
            map.put_u32(e, minor);
            map.put_u64(e, ino);
            map.put_u64(e, 0);
            map.put_u32(e, 5);
            map.put_u32(e, 2);
        }
        map.extend_from_slice(file.as_os_str().as_bytes());
        map.push(0);
        let kind = if ident.is_some() {
            types::MMAP2
        } else {
            types::MMAP
        };
        record(&mut f, kind, &mut map);
    }
    std::fs::write(path, f).unwrap();
}

/// The first mapping of `file` in process `pid`: (start, length).
fn first_map_of(pid: u32, file: &Path) -> (u64, u64) {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let name = file.display().to_string();
    let line = maps
        .lines()
        .find(|l| l.ends_with(&format!(" {name}")))
        .unwrap_or_else(|| panic!("{name} not mapped: {maps}"));
    let range = line.split(' ').next().unwrap();
    let (a, b) = range.split_once('-').unwrap();
    let a = u64::from_str_radix(a, 16).unwrap();
    (a, u64::from_str_radix(b, 16).unwrap() - a)
}

/// Every file under `dir` (recursively, links not followed).
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let t = e.file_type().unwrap();
        if t.is_dir() {
            out.extend(files_under(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

/// `archive --from REC -o CACHE --no-kernel`, its output.
fn archive_from(rec: &Path, cache: &Path) -> std::process::Output {
    synth([
        "archive".as_ref(),
        "--from".as_ref(),
        rec.as_os_str(),
        "--no-kernel".as_ref(),
        "-o".as_ref(),
        cache.as_os_str(),
    ])
}

// A record carrying no identity (MMAP v1; MMAP2 with inode 0 and no build
// id) of a root-only file at an address its live process does not map
// archives nothing: the file at the path is no evidence of what was mapped.
// It is counted, and the summary says why.
#[test]
fn a_record_without_identity_archives_no_file_the_process_does_not_map() {
    let dir = scratch("archive-noident");
    let secret = dir.join("secret");
    std::fs::create_dir(&secret).unwrap();
    let private = secret.join("priv");
    std::fs::copy(&fixtures().lib_sha1, &private).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    let m = Mapper::start(&[]);
    for (name, ident) in [("v1", None), ("ino0", Some((0, 0, 0)))] {
        let rec = dir.join(format!("{name}.data"));
        map_recording(&rec, m.pid, (0x10000, 0x1000), &private, ident);
        let cache = dir.join(format!("cache-{name}"));
        let out = archive_from(&rec, &cache);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{name}: {err}");
        let copied: Vec<_> = files_under(&cache)
            .into_iter()
            .filter(|p| p.file_name().is_some_and(|n| n == "elf"))
            .collect();
        assert!(copied.is_empty(), "{name}: archived {copied:?}: {err}");
        assert!(
            err.contains("1 with no id or inode in the record"),
            "{name}: {err}"
        );
    }
}

// With map_files (root), a record without identity is archived from the
// live mapping at its address when that mapping is the record's file, and
// not when the process maps another file there.
#[test]
#[ignore = "needs map_files (root)"]
fn a_record_without_identity_is_archived_from_its_live_mapping_only() {
    needs_root("map_files, to copy the mapped files");
    let f = fixtures();
    let dir = scratch("archive-noident-live");
    let lib = dir.join("libvone.so");
    std::fs::copy(&f.lib_sha1, &lib).unwrap();
    let other = dir.join("libother.so");
    std::fs::copy(&f.lib_md5, &other).unwrap();
    let m = Mapper::start(&[lib.as_os_str()]);
    let at = first_map_of(m.pid, &lib);
    let id = readelf_build_id(&lib).unwrap();
    let rec = dir.join("v1.data");
    map_recording(&rec, m.pid, at, &lib, None);
    let cache = dir.join("cache");
    let out = archive_from(&rec, &cache);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let entry = cache
        .join(lib.strip_prefix("/").unwrap())
        .join(&id)
        .join("elf");
    assert_eq!(std::fs::read(&entry).unwrap(), std::fs::read(&lib).unwrap());
    // the same address, but the record names another file
    let rec = dir.join("other.data");
    map_recording(&rec, m.pid, at, &other, None);
    let cache = dir.join("cache-other");
    let out = archive_from(&rec, &cache);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let copied: Vec<_> = files_under(&cache)
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "elf"))
        .collect();
    assert!(copied.is_empty(), "archived {copied:?}: {err}");
    assert!(err.contains("1 with no id or inode in the record"), "{err}");
}

// An archived copy is no more readable than its source: a 0700 library is
// archived 0600 (0644 masked by the source's mode), a 0755 one 0644, and a
// 0640 one 0600 (the copy's group is the archiver's, not the source's).
#[test]
fn archived_copies_keep_their_source_private() {
    use std::os::unix::fs::PermissionsExt;
    let f = fixtures();
    let dir = scratch("archive-mode");
    let (private, public) = (dir.join("libpriv.so"), dir.join("libpub.so"));
    let group = dir.join("libgrp.so");
    std::fs::copy(&f.lib_sha1, &private).unwrap();
    std::fs::copy(&f.lib_md5, &public).unwrap();
    std::fs::copy(&f.lib_hex8, &group).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&group, std::fs::Permissions::from_mode(0o640)).unwrap();
    let m = Mapper::start(&[private.as_os_str(), public.as_os_str(), group.as_os_str()]);
    let cache = dir.join("cache");
    synth_ok([
        "archive".as_ref(),
        "-p".as_ref(),
        m.pid.to_string().as_ref(),
        "--no-kernel".as_ref(),
        "-q".as_ref(),
        "-o".as_ref(),
        cache.as_os_str(),
    ]);
    let libs = [
        (&private, &f.lib_sha1, 0o600),
        (&public, &f.lib_md5, 0o644),
        (&group, &f.lib_hex8, 0o600),
    ];
    for (lib, built, mode) in libs {
        let id = readelf_build_id(built).unwrap();
        let entry = cache
            .join(lib.strip_prefix("/").unwrap())
            .join(&id)
            .join("elf");
        let got = std::fs::metadata(&entry).unwrap().permissions().mode() & 0o7777;
        assert_eq!(got, mode, "{}", entry.display());
    }
}

/// `archive --no-kernel ARGS -o CACHE`, held (the hook, through the file
/// `hold`) once its first file's copy has begun: the running child.
fn archive_held_in_copy(
    args: &[&std::ffi::OsStr],
    cache: &Path,
    hold: &Path,
) -> std::process::Child {
    let child = std::process::Command::new(bin())
        .args(["archive", "--no-kernel", "-o"])
        .arg(cache)
        .args(args)
        .env("MMAP2_SYNTH_TEST_HOLD_ARCHIVE_COPY", hold)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the archive's copy to begin", || hold.exists());
    child
}

/// Waits (bounded) for `child` to exit: its output.
fn finished(mut child: std::process::Child) -> std::process::Output {
    wait_until("the archive to exit", || {
        child.try_wait().unwrap().is_some()
    });
    child.wait_with_output().unwrap()
}

// A mapped file grown after its size was checked (a 64 MiB hole appended
// while the copy is held) is copied up to the size checked, the bytes that
// ran; one shrunk meanwhile is not archived (counted unreadable), and no
// temporary file nor empty entry directory is left.
#[test]
fn a_file_growing_or_shrinking_during_its_copy_is_copied_as_checked() {
    use std::os::unix::fs::MetadataExt;
    let f = fixtures();
    let dir = scratch("archive-grow");
    let (grows, shrinks) = (dir.join("libgrows.so"), dir.join("libshrinks.so"));
    std::fs::copy(&f.lib_sha1, &grows).unwrap();
    std::fs::copy(&f.lib_md5, &shrinks).unwrap();
    let original = std::fs::read(&grows).unwrap();
    for (lib, built) in [(&grows, &f.lib_sha1), (&shrinks, &f.lib_md5)] {
        let m = Mapper::start(&[lib.as_os_str()]);
        let cache = dir.join(format!(
            "cache-{}",
            lib.file_name().unwrap().to_str().unwrap()
        ));
        // an inode-form record of it alone: its copy is the only one
        let meta = std::fs::metadata(lib).unwrap();
        let (dev, ino) = (meta.dev(), meta.ino());
        let ident = Some((libc::major(dev), libc::minor(dev), ino));
        let rec = dir.join("rec.data");
        map_recording(&rec, m.pid, first_map_of(m.pid, lib), lib, ident);
        let hold = dir.join("hold");
        let child = archive_held_in_copy(&["--from".as_ref(), rec.as_os_str()], &cache, &hold);
        let file = std::fs::OpenOptions::new().write(true).open(lib).unwrap();
        let grow = lib == &grows;
        file.set_len(if grow { (64 << 20) + 4096 } else { 100 })
            .unwrap();
        std::fs::remove_file(&hold).unwrap();
        let out = finished(child);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        let id = readelf_build_id(built).unwrap();
        let entry = cache.join(lib.strip_prefix("/").unwrap()).join(&id);
        let left = files_under(&cache);
        if grow {
            let got = std::fs::read(entry.join("elf")).unwrap();
            assert_eq!(got.len(), original.len(), "bytes archived");
            assert!(got == original, "another content archived");
        } else {
            assert!(err.contains(" 1 unreadable"), "{err}");
            assert!(!entry.exists(), "{} left", entry.display());
            assert!(
                left.iter()
                    .all(|p| !p.starts_with(cache.join(lib.strip_prefix("/").unwrap()))),
                "{left:?}"
            );
        }
        assert!(
            left.iter().all(|p| !p.to_string_lossy().contains(".m2s-")),
            "temporary left: {left:?}"
        );
    }
}

// SIGTERM to an archive mid-copy (held by the hook while its temporary
// file exists) removes that file and the directories made for it, as any
// output's temporaries, and exits 143.
#[test]
fn a_signal_mid_copy_leaves_no_temporary_file() {
    let f = fixtures();
    let dir = scratch("archive-signal");
    let lib = dir.join("libsig.so");
    std::fs::copy(&f.lib_sha1, &lib).unwrap();
    let m = Mapper::start(&[lib.as_os_str()]);
    let cache = dir.join("cache");
    let hold = dir.join("hold");
    let pid = m.pid.to_string();
    let child = archive_held_in_copy(&["-p".as_ref(), pid.as_ref()], &cache, &hold);
    let before = files_under(&cache);
    assert!(
        before.iter().any(|p| p.to_string_lossy().contains(".m2s-")),
        "no temporary file while held: {before:?}"
    );
    // our own child, by its pid
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-s", "TERM", &pid])
        .status()
        .unwrap()
        .success());
    let out = finished(child);
    assert_eq!(
        out.status.code(),
        Some(143),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left = files_under(&cache);
    assert!(left.is_empty(), "left: {left:?}");
    assert!(
        !cache.join(dir.strip_prefix("/").unwrap()).exists(),
        "entry directories left"
    );
}

/// `mmap2-synth ARGS` under umask 022 (the modes are then the run's, not
/// the caller's umask): its output.
fn synth_umask_022(args: &[&std::ffi::OsStr]) -> std::process::Output {
    std::process::Command::new("sh")
        .args(["-c", "umask 022 && exec \"$0\" \"$@\""])
        .arg(bin())
        .args(args)
        .output()
        .expect("run sh")
}

/// Every directory under `dir` (recursively, links not followed).
fn dirs_under(dir: &Path) -> std::collections::BTreeSet<std::path::PathBuf> {
    let mut out = std::collections::BTreeSet::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().unwrap().is_dir() {
            out.insert(e.path());
            out.extend(dirs_under(&e.path()));
        }
    }
    out
}

/// Whether nobody (uid and gid 65534, no groups) can list `dir`.
fn nobody_lists(dir: &Path) -> bool {
    std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "ls"])
        .arg(dir)
        .output()
        .expect("run setpriv (util-linux)")
        .status
        .success()
}

/// The mode bits of `p` (not following a link).
fn mode_of(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// The entry directory (`CACHE/PATH/ID`) and `.build-id/xx` directory of
/// `lib` (built as `built`) in `cache`.
fn entry_dirs(cache: &Path, lib: &Path, built: &Path) -> [std::path::PathBuf; 2] {
    let id = readelf_build_id(built).unwrap();
    [
        cache.join(lib.strip_prefix("/").unwrap()).join(&id),
        cache.join(".build-id").join(&id[..2]),
    ]
}

/// The directories from inside `cache` down to `dir` (itself included).
fn dirs_down_to(cache: &Path, dir: &Path) -> Vec<std::path::PathBuf> {
    dir.ancestors()
        .take_while(|d| d.starts_with(cache) && *d != cache)
        .map(Path::to_path_buf)
        .collect()
}

// A private binary (0700 in a 0700 directory) is archived in directories
// nobody else may list: every directory a run made on the way to its copy
// and its .build-id link is 0700 (the cache's frame, the cache directory
// and .build-id, stays 0755 as perf makes it), while a world-readable
// library's own directories are 0755; directories an earlier run made are
// not changed. nobody (uid 65534) lists the public ones, not the private.
#[test]
#[ignore = "needs root (setpriv to another user; map_files)"]
fn private_binaries_are_archived_in_directories_others_cannot_list() {
    needs_root("setpriv to another user, and map_files to copy the mapped files");
    use std::os::unix::fs::PermissionsExt;
    let f = fixtures();
    let dir = scratch("archive-private-dirs");
    // nobody must reach the caches for the listing checks to mean anything
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (secret, pubdir) = (dir.join("secret"), dir.join("pub"));
    std::fs::create_dir(&secret).unwrap();
    std::fs::create_dir(&pubdir).unwrap();
    let (private, public) = (secret.join("libpriv.so"), pubdir.join("libpub.so"));
    std::fs::copy(&f.lib_sha1, &private).unwrap();
    std::fs::copy(&f.lib_md5, &public).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o755)).unwrap();
    let both = Mapper::start(&[private.as_os_str(), public.as_os_str()]);
    let archive = |m: &Mapper, cache: &Path| {
        let pid = m.pid.to_string();
        let out = synth_umask_022(&[
            "archive".as_ref(),
            "-p".as_ref(),
            pid.as_ref(),
            "--no-kernel".as_ref(),
            "-q".as_ref(),
            "-o".as_ref(),
            cache.as_os_str(),
        ]);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
    };

    // one run, both libraries: whichever came first, the directories the
    // private one's copy and link are in are private
    let c1 = dir.join("c1");
    archive(&both, &c1);
    let [priv_dir, priv_links] = entry_dirs(&c1, &private, &f.lib_sha1);
    assert!(priv_dir.join("elf").is_file());
    for d in dirs_down_to(&c1, &priv_dir).iter().chain([&priv_links]) {
        assert_eq!(mode_of(d), 0o700, "{}", d.display());
        assert!(!nobody_lists(d), "nobody lists {}", d.display());
    }
    for frame in [c1.clone(), c1.join(".build-id")] {
        assert_eq!(mode_of(&frame), 0o755, "{}", frame.display());
    }
    assert!(nobody_lists(&c1), "nobody cannot list the cache itself");
    let [pub_dir, pub_links] = entry_dirs(&c1, &public, &f.lib_md5);
    let c1_pubdir = c1.join(pubdir.strip_prefix("/").unwrap());
    for d in dirs_down_to(&c1_pubdir, &pub_dir)
        .iter()
        .chain([&c1_pubdir])
    {
        assert_eq!(mode_of(d), 0o755, "{}", d.display());
    }
    if pub_links != priv_links {
        assert_eq!(mode_of(&pub_links), 0o755, "{}", pub_links.display());
        assert!(nobody_lists(&pub_links), "{}", pub_links.display());
    }

    // an earlier run archived the public one: what it made stays 0755,
    // what the later run makes for the private one is 0700
    let c2 = dir.join("c2");
    let only_public = Mapper::start(&[public.as_os_str()]);
    archive(&only_public, &c2);
    let before = dirs_under(&c2);
    archive(&both, &c2);
    let made: Vec<_> = dirs_under(&c2).difference(&before).cloned().collect();
    let [priv_dir, priv_links] = entry_dirs(&c2, &private, &f.lib_sha1);
    let c2_secret = c2.join(secret.strip_prefix("/").unwrap());
    assert!(made.contains(&c2_secret), "{made:?}");
    for d in dirs_down_to(&c2, &priv_dir).iter().chain([&priv_links]) {
        let want = if made.contains(d) { 0o700 } else { 0o755 };
        assert_eq!(mode_of(d), want, "{}", d.display());
    }
    let shared = c2_secret.parent().unwrap();
    assert!(nobody_lists(shared), "{}", shared.display());
    assert!(
        !nobody_lists(&c2_secret),
        "nobody lists {}",
        c2_secret.display()
    );
}

// An id-less file (MMAP v1 records) mapped by two processes the test
// started is archived through the live mapping of the one still running
// once the other has exited, though that one's record comes first and the
// live one also has a lower record where it maps nothing now: no map is
// counted "with no id or inode", and --strict passes. Once both are gone,
// every map (three) is counted.
#[test]
#[ignore = "needs map_files (root)"]
fn an_id_less_file_is_archived_through_any_live_place_of_it() {
    needs_root("map_files, to copy the mapped files");
    let f = fixtures();
    let dir = scratch("archive-from-places");
    let lib = dir.join("libtwice.so");
    std::fs::copy(&f.lib_sha1, &lib).unwrap();
    let first = Mapper::start(&[lib.as_os_str()]);
    let live = Mapper::start(&[lib.as_os_str()]);
    let (at_first, at_live) = (first_map_of(first.pid, &lib), first_map_of(live.pid, &lib));
    // below the live mapping (the lowest address a process may map)
    let stale = (0x10000, 0x1000);
    assert!(stale.0 + stale.1 <= at_live.0);
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", live.pid)).unwrap();
    assert!(!maps.starts_with("00010000-"), "{maps}");
    let rec = dir.join("rec.data");
    maps_recording(
        &rec,
        &[
            (first.pid, at_first, &lib, None),
            (live.pid, stale, &lib, None),
            (live.pid, at_live, &lib, None),
        ],
    );
    drop(first); // killed and reaped: its mappings are gone
    let archive = |cache: &Path| {
        synth([
            "archive".as_ref(),
            "--strict".as_ref(),
            "--from".as_ref(),
            rec.as_os_str(),
            "--no-kernel".as_ref(),
            "-o".as_ref(),
            cache.as_os_str(),
        ])
    };
    let cache = dir.join("cache");
    let out = archive(&cache);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains(" 0 with no id or inode"), "{err}");
    let [entry, _] = entry_dirs(&cache, &lib, &f.lib_sha1);
    assert_eq!(
        std::fs::read(entry.join("elf")).unwrap(),
        std::fs::read(&lib).unwrap()
    );
    drop(live);
    let out = archive(&dir.join("cache-gone"));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains(" 3 with no id or inode"), "{err}");
}

// A mapped library named `lib ESC[2J ESC]0;pwned BEL \n FAKE.so` archived
// into a full filesystem: the summary's "not written" line names its cache
// path with every terminal control escaped (\x1b, \x07, \x0a), and nothing
// on stderr is raw (no line of the file name's own).
#[test]
#[ignore = "needs root (mount, map_files)"]
fn a_hostile_file_name_reaches_the_terminal_escaped() {
    needs_root("mount a tmpfs, map_files to copy the mapped files");
    let f = fixtures();
    let dir = scratch("archive-escapes");
    let lib = dir.join("lib\x1b[2J\x1b]0;pwned\x07\nFAKE.so");
    std::fs::copy(&f.lib_sha1, &lib).unwrap();
    let m = Mapper::start(&[lib.as_os_str()]);
    let fs = dir.join("fs");
    let _mounted = Tmpfs::mount(&fs, "100k");
    {
        use std::io::Write;
        let mut filler = std::fs::File::create(fs.join("filler")).unwrap();
        while filler
            .write_all(&[0u8; 4096])
            .and_then(|()| filler.flush())
            .is_ok()
        {}
    }
    let out = synth([
        "archive".as_ref(),
        "--no-kernel".as_ref(),
        "-p".as_ref(),
        m.pid.to_string().as_ref(),
        "-o".as_ref(),
        fs.join("cache").as_os_str(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        !out.stderr.iter().any(|&b| b == 0x1b || b == 0x07),
        "raw ESC or BEL: {err:?}"
    );
    assert!(!err.lines().any(|l| l.starts_with("FAKE")), "{err:?}");
    let shown = "lib\\x1b[2J\\x1b]0;pwned\\x07\\x0aFAKE.so/";
    // (the summary names the first three failures, the library among them)
    let named = err.lines().filter(|l| l.contains("archive: not written"));
    assert!(named.clone().any(|l| l.contains(shown)), "{err}");
    assert!(named.count() == 3 && err.contains("error: 5 cache entries not written"));
}

// A mapped library extended by `fallocate` to 3 GiB (every block
// allocated, so st_blocks found it whole; none written beyond its own
// bytes) is skipped as sparse, not copied into the cache (it was: 3 GiB
// of zeros written there).
#[test]
fn a_fallocated_library_is_not_archived() {
    use std::os::unix::fs::MetadataExt;
    let f = fixtures();
    let dir = scratch("archive-fallocated");
    let lib = dir.join("libfallocated.so");
    std::fs::copy(&f.lib_sha1, &lib).unwrap();
    let o = std::process::Command::new("fallocate")
        .args(["-l", "3GiB"])
        .arg(&lib)
        .output()
        .expect("fallocate (util-linux)");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = std::fs::metadata(&lib).unwrap();
    assert!(m.blocks() * 512 >= 3 << 30, "not allocated: {m:?}");
    let mapper = Mapper::start(&[lib.as_os_str()]);
    let cache = dir.join("cache");
    let out = synth_ok([
        "archive".as_ref(),
        "-p".as_ref(),
        mapper.pid.to_string().as_ref(),
        "--no-kernel".as_ref(),
        "-o".as_ref(),
        cache.as_os_str(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(" 1 too large or sparse"), "{err}");
    let id = readelf_build_id(&f.lib_sha1).unwrap();
    let entry = cache.join(lib.strip_prefix("/").unwrap()).join(&id);
    assert!(!entry.exists(), "{} archived", entry.display());
}

// A library mapped executable from a memfd named `x/../../escaped` (its maps
// name `/memfd:x/../../escaped (deleted)`) is not archived, nothing appears
// outside the cache, and the summary names it and says why instead of
// counting it "unreadable" with no reason.
#[test]
#[ignore = "needs root (map_files, to copy the mapped files)"]
fn a_memfd_named_with_dot_dot_is_named_in_the_summary() {
    needs_root("map_files, to copy the mapped files");
    let dir = scratch("archive-memfd-name");
    let script = "import mmap, os, sys\n\
        fd = os.memfd_create(sys.argv[2], 0)\n\
        os.write(fd, open(sys.argv[1], 'rb').read())\n\
        m = mmap.mmap(fd, 4096, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_EXEC)\n\
        print('ready', os.getpid(), flush=True)\n\
        sys.stdin.read()\n";
    let p = Mapper::start_as(
        Path::new("python3"),
        &[
            "-c".as_ref(),
            script.as_ref(),
            fixtures().lib_sha1.as_os_str(),
            "x/../../escaped".as_ref(),
        ],
    );
    let cache = dir.join("cache");
    let out = synth([
        "archive".as_ref(),
        "-p".as_ref(),
        p.pid.to_string().as_ref(),
        "-o".as_ref(),
        cache.as_os_str(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("1 mapped files not archived: their names are no clean absolute path")
            && err.contains("/memfd:x/../../escaped"),
        "{err}"
    );
    assert!(!dir.join("escaped").exists() && !cache.join("escaped").exists());
}
