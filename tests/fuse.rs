//! Files on a FUSE filesystem are never read: its daemon is whoever
//! mounted it (any user, with fusermount), and a daemon that stops
//! answering (hostile, or an sshfs whose server went away) would hang every
//! read of them for good, the kernel's build-id read for PROCMAP_QUERY
//! included. Their maps are still written, without a build id.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::*;

/// A mounted `fixtures/stallfs.c`: serves `lib.so` until the stall file
/// exists, then answers no read. Dropping it kills the daemon (which fails
/// every request waiting on it) and unmounts.
struct StallFs {
    daemon: Child,
    mnt: PathBuf,
    stall: PathBuf,
}

impl StallFs {
    /// Mounts one at `dir/mnt` serving the bytes of `source`.
    fn mount(dir: &Path, source: &Path) -> StallFs {
        StallFs::mount_at(dir, source, &dir.join("mnt"))
    }

    /// Mounts one at `mnt` (made here), its program and stall file in
    /// `dir`.
    fn mount_at(dir: &Path, source: &Path, mnt: &Path) -> StallFs {
        let flags = Command::new("pkg-config")
            .args(["--cflags", "--libs", "fuse3"])
            .output()
            .expect("pkg-config (apt-get install pkg-config libfuse3-dev)");
        assert!(flags.status.success(), "libfuse3-dev is needed");
        let flags = String::from_utf8(flags.stdout).unwrap();
        let flags: Vec<&str> = flags.split_whitespace().collect();
        let program = dir.join("stallfs");
        if !program.exists() {
            build_fixture("stallfs", dir, &flags);
        }
        let stall = dir.join(format!(
            "{}.stall",
            mnt.file_name().unwrap().to_str().unwrap()
        ));
        std::fs::create_dir(mnt).unwrap();
        let daemon = Command::new(program)
            .arg(source)
            .arg(&stall)
            .arg(mnt)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let fs = StallFs {
            daemon,
            mnt: mnt.to_path_buf(),
            stall,
        };
        wait_until("the FUSE mount", || fs.lib().exists());
        fs
    }

    /// The file it serves.
    fn lib(&self) -> PathBuf {
        self.mnt.join("lib.so")
    }

    /// From now on its reads wait forever.
    fn stall(&self) {
        std::fs::write(&self.stall, b"").unwrap();
    }
}

impl Drop for StallFs {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
    }
}

/// Held by each test that mounts something, so no other test's mount takes
/// a device number one of them freed (the kernel hands out the lowest free
/// one; `a_device_number_given_to_fuse_mid_scan_is_judged_again` needs its
/// tmpfs's for its FUSE mount).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `cmd` and waits for it at most `READY_TIMEOUT` (see [`ended`]).
fn bounded(cmd: Command) -> (i32, String) {
    ended(started(cmd))
}

/// `cmd` started, stderr piped, and what it is (for [`ended`]).
fn started(mut cmd: Command) -> (Child, String) {
    let what = format!("{cmd:?} to end (stuck on FUSE?)");
    let child = (cmd.stdout(Stdio::null()).stderr(Stdio::piped()))
        .spawn()
        .unwrap();
    (child, what)
}

/// Waits for a [`started`] command at most `READY_TIMEOUT`: a run stuck on
/// the filesystem fails the test (the daemon is killed as the test
/// unwinds, so the run ends too). Returns (exit code, stderr).
fn ended((mut child, what): (Child, String)) -> (i32, String) {
    wait_until(&what, || child.try_wait().unwrap().is_some());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    (o.status.code().unwrap_or(-1), err)
}

/// Snapshots `pid` with each VMA source into `dir`, each run ending with
/// the map of `lib` written without a build id and the summary saying
/// `why` it was not read; returns the outputs.
fn snapshots_leave_unread(dir: &Path, pid: &str, lib: &str, why: &str) -> Vec<PathBuf> {
    let mut outs = Vec::new();
    for source in ["ioctl", "text"] {
        let out = dir.join(format!("{source}.data"));
        let mut cmd = Command::new(bin());
        cmd.args(["-p", pid, "--source", source, "-o"]).arg(&out);
        let (code, err) = bounded(cmd);
        assert_eq!(code, 0, "{source}: {err}");
        assert!(err.contains(why), "{source}: {err}");
        let map = dumped_map(&out, lib);
        assert!(!map.contains("build_id"), "{source}: {map}");
        outs.push(out);
    }
    outs
}

/// `mmap2-synth ARGS... -o OUT`, bounded, which must succeed: its stderr.
fn run_ok(args: &[&str], out: &Path) -> String {
    let mut cmd = Command::new(bin());
    cmd.args(args).arg("-o").arg(out);
    let (code, err) = bounded(cmd);
    assert_eq!(code, 0, "{args:?}: {err}");
    err
}

/// The map of `path` in the dump of `out`, which must have one.
fn dumped_map(out: &Path, path: &str) -> String {
    let d = Command::new(bin()).arg("dump").arg(out).output().unwrap();
    let text = String::from_utf8_lossy(&d.stdout);
    let end = format!(" path={path}");
    let line = text
        .lines()
        .find(|l| l.starts_with("mmap2 ") && l.ends_with(&end));
    line.unwrap_or_else(|| panic!("no map of {path}: {text}"))
        .to_string()
}

// A process maps a library from a FUSE filesystem whose daemon then stops
// answering: a snapshot of it (PROCMAP_QUERY and text, --all in a private
// PID namespace too) ends, writes the map without a build id and says why,
// the same library on disk giving its id; archive and convert of it end
// too, leaving that file alone.
#[test]
#[ignore = "needs root (a FUSE mount), libfuse3-dev"]
fn a_stalled_fuse_daemon_hangs_no_snapshot() {
    needs_root("mounting FUSE");
    let _serial = serial();
    let dir = scratch("fuse-stall");
    let f = fixtures();
    let fs = StallFs::mount(&dir, &f.lib_sha1);
    let mut m = Mapper::start_as(&build_fixture("fixedmap", &dir, &[]), &[]);
    // mapped, not read: no page of it is cached; and the same library on
    // disk, whose id must be found
    m.order(
        &dir,
        &format!("map {} 7f0000000000 1000 0", fs.lib().display()),
    );
    m.order(
        &dir,
        &format!("map {} 7f0000100000 1000 0", f.lib_sha1.display()),
    );
    let lib = fs.lib().to_str().unwrap().to_string();
    // --all, as root runs it, in a private PID namespace holding a process
    // that maps the library, held until the daemon stalls
    let (all, done, go) = (dir.join("all.data"), dir.join("all.done"), dir.join("go"));
    let script = format!(
        "(echo 'map {lib} 7f0000000000 1000 0 {done}'; sleep 60) | {fixed} >/dev/null & \\
         n=0; while [ ! -e {go} ]; do n=$((n+1)); [ $n -lt 3000 ] || exit 1; sleep 0.01; done; \\
         exec {bin} --all -o {all}",
        fixed = dir.join("fixedmap").display(),
        done = done.display(),
        go = go.display(),
        bin = bin(),
        all = all.display(),
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["-fp", "--mount-proc", "sh", "-c", &script]);
    let in_namespace = started(cmd);
    wait_until("the namespace's map", || done.exists());
    fs.stall();
    let pid = m.pid.to_string();
    let on_disk = f.lib_sha1.to_str().unwrap();
    for out in snapshots_leave_unread(&dir, &pid, &lib, "1 on FUSE, not read") {
        let map = dumped_map(&out, on_disk);
        assert!(map.contains("build_id="), "{map}");
    }
    std::fs::write(&go, b"").unwrap();
    let (code, err) = ended(in_namespace);
    assert_eq!(code, 0, "--all: {err}");
    assert!(err.contains("1 on FUSE, not read"), "--all: {err}");
    let map = dumped_map(&all, &lib);
    assert!(!map.contains("build_id"), "--all: {map}");

    // archive copies the library on disk and leaves the one on FUSE
    let cache = dir.join("cache");
    let err = run_ok(&["archive", "-p", &pid, "--no-kernel"], &cache);
    let in_cache = |p: &str| cache.join(p.trim_start_matches('/')).exists();
    assert!(in_cache(on_disk) && !in_cache(&lib), "archive: {err}");

    // convert gives ids to an inode-form snapshot from the files on disk
    // and the live process's mappings, never asking FUSE (its path, its
    // mapping)
    let plain = dir.join("plain.data");
    run_ok(&["-p", &pid, "--no-buildid"], &plain);
    let converted = dir.join("converted.data");
    run_ok(
        &["convert", "--buildid-mmap2", plain.to_str().unwrap()],
        &converted,
    );
    assert!(!dumped_map(&converted, &lib).contains("build_id"));
    assert!(dumped_map(&converted, on_disk).contains("build_id="));
    drop(m);
    drop(fs);
}

// A library run from a memfd (the kernel's internal tmpfs, which no mount
// table shows: runc runs its clone of itself so) still gives its build id:
// only FUSE and filesystems mounted nowhere are left unread.
#[test]
#[ignore = "needs PROCMAP_QUERY and python3"]
fn a_memfd_library_still_gives_its_id() {
    let dir = scratch("fuse-memfd");
    let f = fixtures();
    let ready = dir.join("ready");
    let script = format!(
        "import mmap, os, sys, time\n\
         fd = os.memfd_create('lib')\n\
         os.write(fd, open({lib:?}, 'rb').read())\n\
         m = mmap.mmap(fd, 4096, mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_EXEC)\n\
         open({ready:?}, 'w').write(str(os.getpid()))\n\
         sys.stdin.read()\n",
        lib = f.lib_sha1.to_str().unwrap(),
        ready = ready.to_str().unwrap(),
    );
    let mut py = Command::new("python3")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("python's memfd map", || {
        std::fs::read_to_string(&ready).is_ok_and(|s| !s.is_empty())
    });
    let pid = std::fs::read_to_string(&ready).unwrap();
    let out = dir.join("memfd.data");
    let mut cmd = Command::new(bin());
    cmd.args(["-p", &pid, "-o"]).arg(&out);
    let (code, err) = bounded(cmd);
    drop(py.stdin.take());
    let _ = py.wait();
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("not read"), "{err}");
    let map = dumped_map(&out, "/memfd:lib (deleted)");
    let id = Command::new("readelf")
        .arg("-n")
        .arg(&f.lib_sha1)
        .output()
        .unwrap();
    let id = String::from_utf8_lossy(&id.stdout);
    let id = id
        .split("Build ID: ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap();
    assert!(map.contains(&format!("build_id={id}")), "{map}");
}

// What a user may mount where our sweeps look for our own leftovers (a
// stale temporary output beside -o, record's scratch directory in $TMPDIR
// and its private directory beside -o) is not ours and is never asked: a
// snapshot and a record there end.
#[test]
#[ignore = "needs root (a FUSE mount), libfuse3-dev, perf record"]
fn fuse_mounts_named_as_our_leftovers_hang_no_sweep() {
    needs_root("mounting FUSE");
    let _serial = serial();
    needs_perf_record();
    let dir = scratch("fuse-sweeps");
    let f = fixtures();
    let decoys = [
        ".m2s-999999-1.tmp",
        "mmap2-synth-record-999999-abc",
        ".mmap2-synth-record-999999-abc",
    ];
    let mounts: Vec<StallFs> = decoys
        .iter()
        .map(|d| StallFs::mount_at(&dir, &f.lib_sha1, &dir.join(d)))
        .collect();
    mounts.iter().for_each(StallFs::stall);
    let out = dir.join("snap.data");
    let mut cmd = Command::new(bin());
    cmd.args(["-p", &std::process::id().to_string(), "-o"])
        .arg(&out);
    let (code, err) = bounded(cmd);
    assert_eq!(code, 0, "snapshot: {err}");
    let rec = dir.join("rec.data");
    let mut cmd = Command::new(bin());
    cmd.env("TMPDIR", &*dir)
        .args(["record", "-q", "--", "-e", "dummy:u", "-o"])
        .arg(&rec)
        .args(["--", "true"]);
    let (code, err) = bounded(cmd);
    assert_eq!(code, 0, "record: {err}");
    assert!(rec.exists(), "{err}");
    drop(mounts);
}

/// A process group of ours, killed (SIGKILL, the whole group) on drop: a
/// user namespace with its FUSE daemon and mappers.
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .status();
        let _ = self.0.wait();
    }
}

/// Runs `setup` (shell) in a new user and mount namespace, then the
/// fixedmap fixture there mapping `path`; returns the namespace (killed on
/// drop) and the fixture's pid, once it has mapped it.
fn mapped_in_user_namespace(dir: &Path, setup: &str, path: &str) -> (Group, String) {
    use std::os::unix::process::CommandExt;
    let fixed = build_fixture("fixedmap", dir, &[]);
    let (done, pidfile) = (dir.join("done"), dir.join("pid"));
    let script = format!(
        "{setup} (echo 'map {path} 7f0000000000 1000 0 {done}'; sleep 120) | {fixed} >/dev/null & \
         echo $! > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; wait",
        done = done.display(),
        fixed = fixed.display(),
        pidfile = pidfile.display(),
    );
    let ns = Command::new("unshare")
        .args(["-Urm", "sh", "-c", &script])
        .process_group(0)
        .spawn()
        .unwrap();
    let ns = Group(ns);
    wait_until("the map in the user namespace", || {
        done.exists() && pidfile.exists()
    });
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    (ns, pid.trim().to_string())
}

// In a user namespace (as any user may make one), an overlay whose lower
// layer is a FUSE mount: the maps show the overlay's device, not FUSE's,
// and reading the file (its status, its pages) asks the daemon. Once the
// daemon stalls, a snapshot of the process mapping it, and archive and
// convert of it, end, that file not read.
#[test]
#[ignore = "needs root (user namespaces, FUSE, overlayfs), libfuse3-dev"]
fn an_overlay_on_fuse_in_a_user_namespace_hangs_nothing() {
    needs_root("mounting FUSE and overlayfs in a user namespace");
    let _serial = serial();
    let dir = scratch("fuse-overlay");
    let f = fixtures();
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "fuse3"])
        .output()
        .expect("pkg-config");
    let flags = String::from_utf8(flags.stdout).unwrap();
    let flags: Vec<&str> = flags.split_whitespace().collect();
    let stallfs = build_fixture("stallfs", &dir, &flags);
    let d = |n: &str| dir.join(n).display().to_string();
    let stall = dir.join("stall");
    let setup = format!(
        "mkdir {lower} {up} {w} {merged}; \
         {stallfs} {src} {stall} {lower} & \
         n=0; while [ ! -e {lower}/lib.so ]; do n=$((n+1)); [ $n -lt 3000 ] || exit 1; sleep 0.01; done; \
         mount -t overlay o -o lowerdir={lower},upperdir={up},workdir={w} {merged} || exit 1;",
        lower = d("lower"),
        up = d("up"),
        w = d("w"),
        merged = d("merged"),
        stallfs = stallfs.display(),
        src = f.lib_sha1.display(),
        stall = stall.display(),
    );
    let (ns, pid) = mapped_in_user_namespace(&dir, &setup, &format!("{}/lib.so", d("merged")));
    std::fs::write(&stall, b"").unwrap();
    let lib = format!("{}/lib.so", d("merged"));
    snapshots_leave_unread(&dir, &pid, &lib, "not read");
    run_ok(&["archive", "-p", &pid, "--no-kernel"], &dir.join("cache"));
    let plain = dir.join("plain.data");
    run_ok(&["-p", &pid, "--no-buildid"], &plain);
    run_ok(
        &["convert", "--buildid-mmap2", plain.to_str().unwrap()],
        &dir.join("c.data"),
    );
    drop(ns);
}

// A recorded path whose directory is now a symlink into a stalled FUSE
// mount (a user's `ln -s ~/fuse ~/lib` over the directory a library was
// mapped from): convert, which looks for the file at the recorded path,
// ends without a build id for it instead of hanging in the path walk.
#[test]
#[ignore = "needs root (a FUSE mount), libfuse3-dev"]
fn a_symlink_into_a_stalled_fuse_mount_hangs_no_path_walk() {
    needs_root("mounting FUSE");
    let _serial = serial();
    let dir = scratch("fuse-symlink");
    let f = fixtures();
    let libdir = dir.join("libdir");
    std::fs::create_dir(&libdir).unwrap();
    let lib = libdir.join("lib.so");
    std::fs::copy(&f.lib_sha1, &lib).unwrap();
    let mut m = Mapper::start_as(&build_fixture("fixedmap", &dir, &[]), &[]);
    m.order(&dir, &format!("map {} 7f0000000000 1000 0", lib.display()));
    let plain = dir.join("plain.data");
    let mut cmd = Command::new(bin());
    cmd.args(["-p", &m.pid.to_string(), "--no-buildid", "-o"])
        .arg(&plain);
    let (code, err) = bounded(cmd);
    assert_eq!(code, 0, "{err}");
    drop(m);
    let fs = StallFs::mount(&dir, &f.lib_sha1);
    std::fs::rename(&libdir, dir.join("libdir.old")).unwrap();
    std::os::unix::fs::symlink("mnt", &libdir).unwrap();
    fs.stall();
    let out = dir.join("c.data");
    let mut cmd = Command::new(bin());
    cmd.args(["convert", "--buildid-mmap2"])
        .arg(&plain)
        .arg("-o")
        .arg(&out);
    let (code, err) = bounded(cmd);
    assert_eq!(code, 0, "convert: {err}");
    let map = dumped_map(&out, lib.to_str().unwrap());
    assert!(!map.contains("build_id"), "{map}");
    drop(fs);
}

// A process in a user namespace of its own (Flatpak, userns-remapped
// containers, `unshare -Urm`) mapping a library from root's filesystem
// (its namespace's copy of root's mount) still gives its build id, and
// archive still copies it: only what a user namespace mounted itself is
// left unread.
#[test]
#[ignore = "needs root (user namespaces, map_files)"]
fn root_filesystems_seen_from_a_user_namespace_are_read() {
    needs_root("user namespaces, map_files");
    let dir = scratch("fuse-userns-copy");
    let f = fixtures();
    let (ns, pid) = mapped_in_user_namespace(&dir, "", f.lib_sha1.to_str().unwrap());
    let out = dir.join("snap.data");
    let mut cmd = Command::new(bin());
    cmd.args(["-p", &pid, "-o"]).arg(&out);
    let (code, err) = bounded(cmd);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("not read"), "{err}");
    let map = dumped_map(&out, f.lib_sha1.to_str().unwrap());
    assert!(map.contains("build_id="), "{map}");
    let cache = dir.join("cache");
    let mut cmd = Command::new(bin());
    cmd.args(["archive", "-p", &pid, "--no-kernel", "-o"])
        .arg(&cache);
    let (code, err) = bounded(cmd);
    assert_eq!(code, 0, "archive: {err}");
    let lib = f.lib_sha1.to_str().unwrap().trim_start_matches('/');
    assert!(cache.join(lib).exists(), "archive: {err}");
    drop(ns);
}

// A device number freed by an unmount during a scan and given to a new
// FUSE mount (the kernel hands out the lowest free one) is judged again:
// the scan's table, read before, said that number was a readable tmpfs,
// and the kernel's build-id read of the FUSE file hung the scan.
#[test]
#[ignore = "needs root (mounts), libfuse3-dev"]
fn a_device_number_given_to_fuse_mid_scan_is_judged_again() {
    use std::os::unix::fs::MetadataExt;
    needs_root("mounting tmpfs and FUSE");
    let _serial = serial();
    let dir = scratch("fuse-recycled");
    let f = fixtures();
    std::fs::create_dir(dir.join("t")).unwrap();
    let tmpfs = Mounted::new(&["-t", "tmpfs", "none"], &dir.join("t"));
    let dev = |p: &Path| std::fs::metadata(p).unwrap().dev();
    let was = dev(&tmpfs.0);
    let program = build_fixture("fixedmap", &dir, &[]);
    let mut a = Mapper::start_as(&program, &[]);
    a.order(
        &dir,
        &format!("map {} 7f0000100000 1000 0", f.lib_sha1.display()),
    );
    let mut b = Mapper::start_as(&program, &[]);
    assert!(a.pid < b.pid, "pids wrapped between two starts");
    // one worker: A's walk (the table read for its first file) is held,
    // then B's is read
    let (hold, out) = (dir.join("hold"), dir.join("out.data"));
    let mut cmd = Command::new(bin());
    cmd.args(["-p", &format!("{},{}", a.pid, b.pid), "-j", "1", "-o"])
        .arg(&out)
        .env(
            "MMAP2_SYNTH_TEST_HOLD_AFTER_VMA",
            format!("1:{}", hold.display()),
        );
    let (mut child, what) = started(cmd);
    wait_until("the scan held after its first VMA", || hold.exists());
    let umount = Command::new("umount").arg(&tmpfs.0).status();
    assert!(umount.unwrap().success(), "umount tmpfs");
    let fs = StallFs::mount(&dir, &f.lib_sha1);
    assert_eq!(
        dev(&fs.mnt),
        was,
        "FUSE got another device number than the tmpfs had: nothing to test"
    );
    b.order(
        &dir,
        &format!("map {} 7f0000000000 1000 0", fs.lib().display()),
    );
    fs.stall();
    // each later walk holds too: let each go
    wait_until(&what, || {
        let _ = std::fs::remove_file(&hold);
        child.try_wait().unwrap().is_some()
    });
    let (code, err) = ended((child, what));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("1 on FUSE, not read"), "{err}");
    let lib = fs.lib().to_str().unwrap().to_string();
    assert!(!dumped_map(&out, &lib).contains("build_id"));
    assert!(dumped_map(&out, f.lib_sha1.to_str().unwrap()).contains("build_id="));
    drop((a, b));
    drop(fs);
}

// A library swapped for a file of a stalled FUSE mount at the same place
// between the walk's query and its build-id read (the scan held there)
// hangs nothing: the kernel, asked for the id, read whatever was mapped
// there by then (any user can swap in a loop); the file is now opened and
// judged as opened. The library keeps its own id, read by its path.
#[test]
#[ignore = "needs root (a FUSE mount, map_files), libfuse3-dev"]
fn a_library_swapped_for_fuse_before_its_id_is_read_hangs_nothing() {
    needs_root("mounting FUSE");
    let _serial = serial();
    let dir = scratch("fuse-swap");
    let f = fixtures();
    let fs = StallFs::mount(&dir, &f.lib_sha1);
    let mut m = Mapper::start_as(&build_fixture("fixedmap", &dir, &[]), &[]);
    // below the program: the first file whose id the walk asks for
    let lib = f.lib_md5.to_str().unwrap();
    m.order(&dir, &format!("map {lib} 10000 1000 0"));
    let (hold, out) = (dir.join("hold"), dir.join("out.data"));
    let mut cmd = Command::new(bin());
    cmd.args(["-p", &m.pid.to_string(), "-o"])
        .arg(&out)
        .env("MMAP2_SYNTH_TEST_HOLD_BEFORE_BUILD_ID", &hold);
    let (child, what) = started(cmd);
    wait_until("the scan held before a build id", || hold.exists());
    m.order(&dir, &format!("map {} 10000 1000 0", fs.lib().display()));
    fs.stall();
    std::fs::remove_file(&hold).unwrap();
    let (code, err) = ended((child, what));
    assert_eq!(code, 0, "{err}");
    let want = readelf_build_id(&f.lib_md5).expect("the library's id");
    let map = dumped_map(&out, lib);
    assert!(map.contains(&format!("build_id={want}")), "{map}");
    drop(m);
    drop(fs);
}
