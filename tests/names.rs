//! Names shared by file (a worker asks a VMA without its name where the
//! last process of the same program had a name the memo shares there): a
//! file reached by another name (a hard link, a bind mount, another mount
//! namespace, a user's mount or perf cache) keeps the name the kernel gives
//! it in each process, as `perf script` reads the snapshot.

mod common;

use std::path::Path;

use common::*;

/// A scratch directory in /tmp that other users may enter (mode 755),
/// removed when dropped.
fn reachable_scratch(prefix: &str) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

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
// learned first (`-j 1`, pids in order): hard links of a user's file and
// of root's group-writable one (others than root could have made them), a
// bind mount, a tmpfs moved to another place in a process's own mount
// namespace; and a file two processes map by one name. Each process's
// maps carry the name its own maps file gives, never the first process's.
#[test]
#[ignore = "needs root (mount, unshare -m, map_files), perf and PROCMAP_QUERY (Linux 6.11+)"]
fn a_file_known_by_another_name_keeps_its_own() {
    use std::os::unix::fs::PermissionsExt;
    needs_root("mount, unshare -m, and map_files for the names' judgement");
    needs_procmap_query();
    needs_perf();
    let f = fixtures();
    let dir = scratch("names");
    let d: &Path = &dir;
    let at = |p: &str| d.join(p);
    let tmpfs = ["users", "groups", "bound", "moved", "plain"];
    for p in tmpfs.iter().chain(&["bound2", "moved2"]) {
        std::fs::create_dir(at(p)).unwrap();
    }
    let mut mounts = Vec::new();
    for p in tmpfs {
        mounts.push(Mounted::new(&["-t", "tmpfs", "none"], &at(p)));
        std::fs::copy(&f.lib_sha1, at(p).join("lib.so")).unwrap();
    }
    let bound = at("bound");
    mounts.push(Mounted::new(
        &["--bind", bound.to_str().unwrap()],
        &at("bound2"),
    ));
    std::os::unix::fs::chown(at("users/lib.so"), Some(65534), Some(65534)).unwrap();
    let writable = std::fs::Permissions::from_mode(0o664);
    std::fs::set_permissions(at("groups/lib.so"), writable).unwrap();
    for p in ["users", "groups"] {
        std::fs::hard_link(at(p).join("lib.so"), at(p).join("link.so")).unwrap();
    }
    let moved = format!(
        "mount --move {} {} && exec {} {}",
        q(&at("moved")),
        q(&at("moved2")),
        q(&f.mapper),
        q(&at("moved2/lib.so"))
    );
    let unshared = ["-m", "--propagation", "private", "sh", "-c", &moved];
    let unshared: Vec<&std::ffi::OsStr> = unshared.iter().map(|a| a.as_ref()).collect();
    // in start order: each pair's first learns the name
    let paths = [
        "users/lib.so",
        "users/link.so",
        "groups/lib.so",
        "groups/link.so",
    ];
    let paths = paths
        .iter()
        .chain(&["bound/lib.so", "bound2/lib.so", "moved/lib.so"]);
    let mut mappers: Vec<(Mapper, &str)> = paths
        .map(|p| (Mapper::start(&[at(p).as_os_str()]), *p))
        .collect();
    mappers.push((
        Mapper::start_as(Path::new("unshare"), &unshared),
        "moved2/lib.so",
    ));
    for _ in 0..2 {
        mappers.push((
            Mapper::start(&[at("plain/lib.so").as_os_str()]),
            "plain/lib.so",
        ));
    }
    let list: Vec<String> = mappers.iter().map(|(m, _)| m.pid.to_string()).collect();
    let out = d.join("names.data");
    let args = [
        "-p",
        &list.join(","),
        "-j",
        "1",
        "--source",
        "ioctl",
        "-q",
        "-o",
    ];
    synth_ok(args.iter().copied().chain([out.to_str().unwrap()]));
    for (m, want_path) in &mappers {
        let (got, want) = names_of(&out, m.pid, d);
        assert!(!want.is_empty(), "pid {} maps its library", m.pid);
        assert_eq!(got, want, "pid {}: {want_path}", m.pid);
        let path = at(want_path);
        assert!(got.iter().all(|(_, p)| Path::new(p) == path), "{got:?}");
    }
    drop(mappers);
    drop(mounts);
}

// An unprivileged user binds a library at a path of their choosing in a
// namespace of their own and maps it from ours through that namespace's
// root, before root's process maps the library (`-j 1`, pids in order):
// the user's mount is not the library's mount in our table, so root's
// process keeps its own name for the library, not the user's.
#[test]
#[ignore = "needs root (mount, setpriv), unprivileged user namespaces, perf and PROCMAP_QUERY"]
fn a_users_mount_elsewhere_names_no_file_of_root() {
    needs_root("mount and setpriv");
    needs_procmap_query();
    needs_perf();
    let f = fixtures();
    // reachable by nobody: a tmpfs under a directory of mode 755 in /tmp
    let open = reachable_scratch("m2s-names-");
    let t = open.path().join("t");
    std::fs::create_dir(&t).unwrap();
    let _tmpfs = Mounted::new(&["-t", "tmpfs", "-o", "mode=755", "none"], &t);
    let (mapper, lib) = (t.join("mapper"), t.join("lib.so"));
    std::fs::copy(&f.mapper, &mapper).unwrap();
    std::fs::copy(&f.lib_sha1, &lib).unwrap();
    let nobody = ["--reuid=65534", "--regid=65534", "--clear-groups"];
    let bind = format!(
        "mount -t tmpfs x /mnt && touch /mnt/chosen.so && mount --bind {} /mnt/chosen.so \
         && echo ready && exec sleep 100",
        q(&lib)
    );
    let mut args: Vec<&std::ffi::OsStr> = nobody.iter().map(|a| a.as_ref()).collect();
    args.extend(["unshare", "-Urm", "sh", "-c"].map(std::ffi::OsStr::new));
    args.push(bind.as_ref());
    let holder = Mapper::start_as(Path::new("setpriv"), &args);
    let theirs = format!("/proc/{}/root/mnt/chosen.so", holder.pid);
    let mut args: Vec<&std::ffi::OsStr> = nobody.iter().map(|a| a.as_ref()).collect();
    args.extend([mapper.as_os_str(), theirs.as_ref()]);
    let user = Mapper::start_as(Path::new("setpriv"), &args);
    let root = Mapper::start_as(&mapper, &[lib.as_os_str()]);
    let out = open.path().join("names.data");
    let pids = format!("{},{}", user.pid, root.pid);
    let args = ["-p", &pids, "-j", "1", "--source", "ioctl", "-q", "-o"];
    synth_ok(args.iter().copied().chain([out.to_str().unwrap()]));
    let (got, want) = names_of(&out, root.pid, &t);
    assert!(!want.is_empty(), "root's process maps the library");
    assert_eq!(got, want, "root's process");
    assert!(got.iter().any(|(_, p)| Path::new(p) == lib), "{got:?}");
    assert!(got.iter().all(|(_, p)| !p.contains("chosen")), "{got:?}");
    let user_maps = std::fs::read_to_string(format!("/proc/{}/maps", user.pid)).unwrap();
    assert!(user_maps.contains("/mnt/chosen.so"), "{user_maps}");
    drop((user, root, holder));
}

// A user whose home a root perf left a link of root's library in (`sudo
// -E perf record`: `$HOME/.debug/PATH/ID/elf`) moves that cache aside and
// makes its path for the copy of another name lead there through a
// symlink; they map the library by that other name before root's process
// maps it, and the snapshot runs with their `$HOME`: root's process keeps
// its own name (the cache must be root's all the way, no symlink in it).
#[test]
#[ignore = "needs root (chown, setpriv), perf and PROCMAP_QUERY (Linux 6.11+)"]
fn a_users_perf_cache_names_no_file_of_root() {
    needs_root("chown and setpriv");
    needs_procmap_query();
    needs_perf();
    let f = fixtures();
    let open = reachable_scratch("m2s-cache-");
    let s = open.path();
    let (rlib, home) = (s.join("rlib"), s.join("home"));
    std::fs::create_dir(&rlib).unwrap();
    std::fs::create_dir(&home).unwrap();
    let (mapper, lib) = (rlib.join("mapper"), rlib.join("lib.so"));
    std::fs::copy(&f.mapper, &mapper).unwrap();
    std::fs::copy(&f.lib_sha1, &lib).unwrap();
    let id = readelf_build_id(&lib).unwrap();
    // root's perf, run with this user's $HOME
    let cache = |root: &Path, name: &Path| {
        let mut p = root.as_os_str().to_owned();
        p.push(name.as_os_str());
        Path::new(&p).join(&id)
    };
    let entry = cache(&home.join(".debug"), &lib);
    std::fs::create_dir_all(&entry).unwrap();
    std::fs::hard_link(&lib, entry.join("elf")).unwrap();
    std::os::unix::fs::chown(&home, Some(65534), Some(65534)).unwrap();
    // the user: the cache moved to D, and a path for the copy of D's link
    let theirs = cache(&home.join("D"), &lib).join("elf");
    let trick = cache(&home.join(".debug"), &theirs);
    let script = format!(
        "cd {h} && mv .debug D && mkdir -p {t} && ln -s {d} {t}/{id}",
        h = q(&home),
        t = q(trick.parent().unwrap()),
        d = q(theirs.parent().unwrap()),
    );
    let nobody = ["--reuid=65534", "--regid=65534", "--clear-groups"];
    let st = std::process::Command::new("setpriv")
        .args(nobody)
        .args(["sh", "-c", &script])
        .status()
        .unwrap();
    assert!(st.success(), "{script}");
    assert!(
        trick.join("elf").exists(),
        "the symlinked path leads to the link"
    );
    let mut args: Vec<&std::ffi::OsStr> = nobody.iter().map(|a| a.as_ref()).collect();
    args.extend([mapper.as_os_str(), theirs.as_os_str()]);
    let user = Mapper::start_as(Path::new("setpriv"), &args);
    let root = Mapper::start_as(&mapper, &[lib.as_os_str()]);
    let out = s.join("names.data");
    let pids = format!("{},{}", user.pid, root.pid);
    let out_arg = out.to_str().unwrap();
    let st = std::process::Command::new(bin())
        .args([
            "-p", &pids, "-j", "1", "--source", "ioctl", "-q", "-o", out_arg,
        ])
        .env("HOME", &home)
        .status()
        .unwrap();
    assert!(st.success());
    let (got, want) = names_of(&out, root.pid, &rlib);
    assert!(!want.is_empty(), "root's process maps the library");
    assert_eq!(got, want, "root's process");
    let (theirs_got, _) = names_of(&out, user.pid, s);
    assert!(
        theirs_got.iter().any(|(_, p)| Path::new(p) == theirs),
        "the user's process maps the library by their name: {theirs_got:?}"
    );
    drop((user, root));
}
