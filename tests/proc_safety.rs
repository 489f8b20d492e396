//! Files a process's owner controls cannot hang or mislead a snapshot: a FIFO
//! or a different file bind-mounted (in the process's own mount namespace)
//! over a mapped library, read through /proc/PID/root by an unprivileged
//! snapshot (no map_files access); and renames over it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::*;
use mmap2_synth::perf::Input;
use mmap2_synth::snapshot::read_snapshot;

const NOBODY: [&str; 3] = ["--reuid=65534", "--regid=65534", "--clear-groups"];

/// The mapper, run as nobody, with `lib` mapped; killed on drop.
struct NobodyMapper {
    child: Child,
    pid: String,
}

impl NobodyMapper {
    fn start(dir: &Path, lib: &Path) -> NobodyMapper {
        let ready = dir.join("ready");
        // its own mount namespace, so the test can bind-mount over its files
        let child = Command::new("unshare")
            .args(["-m", "--propagation", "private", "setpriv"])
            .args(NOBODY)
            .arg(&fixtures().mapper)
            .args(["--wait", "forever", "--ready"])
            .arg(&ready)
            .arg(lib)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        wait_until("the mapper's ready file", || ready.exists());
        let pid = std::fs::read_to_string(&ready).unwrap().trim().to_string();
        NobodyMapper { child, pid }
    }
}

impl Drop for NobodyMapper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Snapshots `pid` with the text source, as nobody or as root, within 20 s
/// (`timeout` kills a hung run: exit 124 fails the assertion), and returns
/// the build id recorded for `lib` (None: no id).
fn snapshot_id(pid: &str, lib: &Path, out: &Path, as_nobody: bool) -> Option<String> {
    let mut cmd = Command::new("timeout");
    cmd.arg("20");
    if as_nobody {
        cmd.arg("setpriv").args(NOBODY);
    }
    let o = cmd
        .arg(bin())
        .args(["--source", "text", "-p", pid, "-o"])
        .arg(out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "snapshot hung or failed: {err}");
    let procs = read_snapshot(&Input::open(out).unwrap()).unwrap();
    let vma = procs
        .iter()
        .flat_map(|p| &p.vmas)
        // " (deleted)" once the path names another file
        .find(|v| v.name.starts_with(lib.as_os_str().as_encoded_bytes()))
        .unwrap_or_else(|| {
            let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            panic!(
                "no map of {}: {err}\n{:?}\n{maps}",
                lib.display(),
                String::from_utf8_lossy(&cmd)
            )
        });
    vma.build_id.map(|b| b.to_hex())
}

/// Bind-mounts `what` over `path` inside the mount namespace of `pid`.
fn bind_in(pid: &str, what: &Path, path: &Path) {
    let st = Command::new("nsenter")
        .args(["-t", pid, "-m", "mount", "--bind"])
        .arg(what)
        .arg(path)
        .status()
        .unwrap();
    assert!(st.success(), "bind mount in the mapper's namespace");
}

fn unmount_in(pid: &str, path: &Path) {
    let st = Command::new("nsenter")
        .args(["-t", pid, "-m", "umount"])
        .arg(path)
        .status()
        .unwrap();
    assert!(st.success());
}

fn swap_in(path: &Path, replacement: &Path) {
    let tmp = path.with_extension("new");
    if std::fs::symlink_metadata(replacement).is_ok_and(|m| m.file_type().is_fifo_like()) {
        std::fs::rename(replacement, &tmp).unwrap();
    } else {
        std::fs::copy(replacement, &tmp).unwrap();
    }
    std::fs::rename(&tmp, path).unwrap();
}

trait FifoLike {
    fn is_fifo_like(&self) -> bool;
}

impl FifoLike for std::fs::FileType {
    fn is_fifo_like(&self) -> bool {
        use std::os::unix::fs::FileTypeExt;
        self.is_fifo()
    }
}

// A FIFO bind-mounted or renamed over a mapped library neither hangs an
// unprivileged text snapshot nor gives an id; a different library put there
// does not lend its id either; root still reads the mapped file's own id.
#[test]
#[ignore = "needs root (setpriv to nobody)"]
fn swapped_files_neither_hang_nor_mislead() {
    needs_root("setpriv to drop to nobody");
    let f = fixtures();
    let dir = scratch("proc-swap");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let lib: PathBuf = dir.join("libswap.so");
    std::fs::copy(&f.lib_sha1, &lib).unwrap();
    let want = readelf_build_id(&f.lib_sha1).expect("readelf build id");
    let other = readelf_build_id(&f.lib_md5).expect("readelf build id");
    let m = NobodyMapper::start(&dir, &lib);
    let out = dir.join("s.data");
    assert_eq!(snapshot_id(&m.pid, &lib, &out, true), Some(want.clone()));

    let fifo = dir.join("plant.fifo");
    mkfifo(&fifo);
    // bind mounts keep the mapped path's name (no " (deleted)"), so the
    // fallback opens whatever is there now: a FIFO must not hang it, another
    // file must not lend its id
    bind_in(&m.pid, &fifo, &lib);
    assert_eq!(
        snapshot_id(&m.pid, &lib, &out, true),
        None,
        "id through a FIFO"
    );
    unmount_in(&m.pid, &lib);
    let other_copy = dir.join("other.so");
    std::fs::copy(&f.lib_md5, &other_copy).unwrap();
    bind_in(&m.pid, &other_copy, &lib);
    let got = snapshot_id(&m.pid, &lib, &out, true);
    assert_ne!(
        got.as_deref(),
        Some(other.as_str()),
        "the bind-mounted file's id"
    );
    assert_eq!(got, None);
    assert_eq!(snapshot_id(&m.pid, &lib, &out, false), Some(want.clone()));
    unmount_in(&m.pid, &lib);

    swap_in(&lib, &fifo);
    assert_eq!(
        snapshot_id(&m.pid, &lib, &out, true),
        None,
        "id through a FIFO"
    );
    assert_eq!(snapshot_id(&m.pid, &lib, &out, false), Some(want.clone()));

    swap_in(&lib, &f.lib_md5);
    let got = snapshot_id(&m.pid, &lib, &out, true);
    assert_ne!(got.as_deref(), Some(other.as_str()), "the new file's id");
    assert_eq!(got, None);
    assert_eq!(snapshot_id(&m.pid, &lib, &out, false), Some(want));
}

// --all as a plain user (nobody), in a private PID namespace holding one
// process of root's and one of nobody's with a FIFO where its mapped library
// was: nobody's is read, root's (and the shell's) counted as denied, the run
// ends within its timeout and succeeds.
#[test]
#[ignore = "needs root (unshare -fp, setpriv)"]
fn unprivileged_all_reads_its_own_and_counts_the_rest() {
    needs_root("unshare -fp and setpriv");
    let f = fixtures();
    let dir = scratch("proc-unpriv-all");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let lib = dir.join("libmine.so");
    std::fs::copy(&f.lib_hex8, &lib).unwrap();
    let script = format!(
        "{m} --wait forever --ready {r1} & \
         setpriv --reuid=65534 --regid=65534 --clear-groups {m} --wait forever --ready {r2} {lib} & \
         n=0; while [ ! -e {r1} ] || [ ! -e {r2} ]; do \
           n=$((n+1)); [ $n -lt 3000 ] || exit 9; sleep 0.01; done; \
         mv {lib} {lib}.old && mkfifo {lib} && \
         timeout 20 setpriv --reuid=65534 --regid=65534 --clear-groups {bin} --all --source text -o {out}; \
         rc=$?; kill %1 %2; exit $rc",
        m = q(&f.mapper),
        r1 = q(&dir.join("r1")),
        r2 = q(&dir.join("r2")),
        lib = q(&lib),
        bin = q(Path::new(bin())),
        out = q(&dir.join("all.data")),
    );
    let o = Command::new("unshare")
        .args(["-fp", "--mount-proc", "sh", "-c", &script])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    // read: nobody's mapper; denied: the shell (pid 1), root's mapper, timeout
    assert!(err.contains("mmap2-synth: 1 processes"), "{err}");
    assert!(err.contains("skipped: 3 denied"), "{err}");
    let procs = read_snapshot(&Input::open(&dir.join("all.data")).unwrap()).unwrap();
    let mine = procs
        .iter()
        .flat_map(|p| &p.vmas)
        .find(|v| v.name.starts_with(lib.as_os_str().as_encoded_bytes()));
    assert!(mine.is_some(), "nobody's own library map");
}

// -u takes user names the C library resolves (getpwnam_r, so NSS users too)
// and numbers; an unknown name is a usage error.
#[test]
fn users_resolve_through_the_c_library() {
    for user in ["root", "nobody", "0"] {
        let o = synth(["-q", "-u", user, "-o", "/dev/null"]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{user}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let o = synth(["-q", "-u", "no-such-user-xyz", "-o", "/dev/null"]);
    assert_eq!(o.status.code(), Some(2));
}

/// The `dev inode` the maps of `pid` give the map at 0x10000.
fn dev_and_inode_at_10000(pid: u32) -> String {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let line = maps.lines().find(|l| l.starts_with("00010000-")).unwrap();
    let f: Vec<&str> = line.split_whitespace().collect();
    format!("{} {}", f[3], f[4])
}

// Two files an overlay shows with one device and inode (its layers on two
// tmpfs, no xino: each numbers its inodes afresh; btrfs subvolumes alike),
// mapped by two processes, each get their own build id: keyed by device
// and inode alone, the first id read went to both (any user may make
// files in an upper layer until one gets a library's inode number).
#[test]
#[ignore = "needs root (tmpfs and overlay mounts, map_files)"]
fn files_sharing_a_device_and_inode_keep_their_own_ids() {
    use std::os::unix::fs::MetadataExt;
    needs_root("mounting tmpfs and overlayfs");
    let dir = scratch("shared-inode");
    let f = fixtures();
    let (low, up, merged) = (dir.join("low"), dir.join("up"), dir.join("merged"));
    for d in [&low, &up, &merged] {
        std::fs::create_dir(d).unwrap();
    }
    let _low = Mounted::new(&["-t", "tmpfs", "none"], &low);
    let _up = Mounted::new(&["-t", "tmpfs", "none"], &up);
    std::fs::create_dir(low.join("l")).unwrap();
    std::fs::copy(&f.lib_sha1, low.join("l/a.so")).unwrap();
    let want = std::fs::metadata(low.join("l/a.so")).unwrap().ino();
    std::fs::create_dir(up.join("u")).unwrap();
    // files in the upper layer until one has a.so's inode number
    let made = (0..1000).find_map(|i| {
        let p = up.join(format!("u/f{i}"));
        std::fs::write(&p, b"").unwrap();
        (std::fs::metadata(&p).unwrap().ino() == want).then_some(p)
    });
    let made = made.expect("an upper file with the lower file's inode number");
    std::fs::copy(&f.lib_md5, &made).unwrap();
    std::fs::rename(&made, up.join("u/b.so")).unwrap();
    std::fs::create_dir(up.join("w")).unwrap();
    let layers = format!(
        "lowerdir={},upperdir={},workdir={}",
        low.join("l").display(),
        up.join("u").display(),
        up.join("w").display()
    );
    let _merged = Mounted::new(&["-t", "overlay", "overlay", "-o", &layers], &merged);
    let prog = build_fixture("fixedmap", &dir, &[]);
    let (mut a, mut b) = (Mapper::start_as(&prog, &[]), Mapper::start_as(&prog, &[]));
    let (la, lb) = (merged.join("a.so"), merged.join("b.so"));
    a.order(&dir, &format!("map {} 10000 1000 0", la.display()));
    b.order(&dir, &format!("map {} 10000 1000 0", lb.display()));
    assert_eq!(
        dev_and_inode_at_10000(a.pid),
        dev_and_inode_at_10000(b.pid),
        "the maps show the two files apart (xino?): nothing to test"
    );
    let out = dir.join("out.data");
    for order in [
        format!("{},{}", a.pid, b.pid),
        format!("{},{}", b.pid, a.pid),
    ] {
        synth_ok(["-j", "1", "-p", &order, "-o", out.to_str().unwrap()]);
        let dump = Command::new(bin()).arg("dump").arg(&out).output().unwrap();
        let text = String::from_utf8_lossy(&dump.stdout);
        for (lib, of) in [(&la, &f.lib_sha1), (&lb, &f.lib_md5)] {
            let id = readelf_build_id(of).unwrap();
            let end = format!(" path={}", lib.display());
            let map = text
                .lines()
                .find(|l| l.starts_with("mmap2 ") && l.ends_with(&end));
            let map = map.unwrap_or_else(|| panic!("no map of {}: {text}", lib.display()));
            assert!(map.contains(&format!("build_id={id}")), "{map}");
        }
    }
}

// A library's mapping swapped, between the walk and its build-id read (the
// scan held there), for a file of the same inode number on another
// filesystem (any user can make tmpfs files until one has it): that file's
// id may go to the swapping process's own map, but is not cached for the
// library: another process mapping the library gets the library's id.
#[test]
#[ignore = "needs root (tmpfs mounts, map_files)"]
fn a_file_swapped_in_with_the_same_inode_poisons_no_id() {
    use std::os::unix::fs::MetadataExt;
    needs_root("mounting tmpfs");
    let dir = scratch("swap-same-inode");
    let f = fixtures();
    let (a, b) = (dir.join("a"), dir.join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    let _a = Mounted::new(&["-t", "tmpfs", "none"], &a);
    let _b = Mounted::new(&["-t", "tmpfs", "none"], &b);
    let (lib, other) = (a.join("lib.so"), b.join("other.so"));
    std::fs::copy(&f.lib_sha1, &lib).unwrap();
    std::fs::copy(&f.lib_md5, &other).unwrap();
    let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
    assert_eq!(ino(&lib), ino(&other), "tmpfs numbers inodes per mount");
    let prog = build_fixture("fixedmap", &dir, &[]);
    let (mut p, mut q) = (Mapper::start_as(&prog, &[]), Mapper::start_as(&prog, &[]));
    assert!(p.pid < q.pid, "pids wrapped between two starts");
    // below the program: the first file whose id p's walk asks for
    p.order(&dir, &format!("map {} 10000 1000 0", lib.display()));
    q.order(&dir, &format!("map {} 10000 1000 0", lib.display()));
    let (hold, out) = (dir.join("hold"), dir.join("out.data"));
    let snap = Command::new(bin())
        .args(["-j", "1", "-p", &format!("{},{}", p.pid, q.pid)])
        .args(["-o", out.to_str().unwrap()])
        .env("MMAP2_SYNTH_TEST_HOLD_BEFORE_BUILD_ID", &hold)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the scan held before a build id", || hold.exists());
    p.order(&dir, &format!("map {} 10000 1000 0", other.display()));
    std::fs::remove_file(&hold).unwrap();
    let o = snap.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want = readelf_build_id(&f.lib_sha1).unwrap();
    let dump = Command::new(bin()).arg("dump").arg(&out).output().unwrap();
    let text = String::from_utf8_lossy(&dump.stdout);
    let of_q = format!("mmap2 pid={} ", q.pid);
    let end = format!(" path={}", lib.display());
    let map = text
        .lines()
        .find(|l| l.starts_with(&of_q) && l.ends_with(&end));
    let map = map.unwrap_or_else(|| panic!("no map of the library in {}: {text}", q.pid));
    assert!(map.contains(&format!("build_id={want}")), "{map}");
}
