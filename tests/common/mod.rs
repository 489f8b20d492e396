//! Shared helpers for the integration tests: fixture builds, processes the
//! tests start themselves, running the real binary and real perf.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

mod same;
// not every test binary uses these (dead_code is allowed above for the same reason)
#[allow(unused_imports)]
pub use same::*;

/// The binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_mmap2-synth")
}

/// Tests that need root, perf or a kernel feature are `#[ignore]`d with the
/// reason and call one of the `needs_*` checks first: run with
/// `--include-ignored` where the requirement is missing, they fail with the
/// reason instead of passing without testing anything.
fn needs(ok: bool, what: &str) {
    assert!(
        ok,
        "this test needs {what}, which is missing here (the test is #[ignore]d \
         for that reason; --include-ignored runs it anyway)"
    );
}

/// Fails the test unless we are root (`why` says what for).
pub fn needs_root(why: &str) {
    needs(is_root(), &format!("root ({why})"));
}

/// Fails the test unless `perf` runs.
pub fn needs_perf() {
    needs(have_perf(), "perf (`perf version` must run)");
}

/// Fails the test unless `perf record` may sample our own processes: perf,
/// and root or kernel.perf_event_paranoid <= 2.
pub fn needs_perf_record() {
    needs_perf();
    needs(
        is_root() || perf_event_paranoid().is_some_and(|p| p <= 2),
        "permission to record with perf (root, or kernel.perf_event_paranoid <= 2)",
    );
}

/// Fails the test unless the kernel has PROCMAP_QUERY.
pub fn needs_procmap_query() {
    needs(have_procmap_query(), "PROCMAP_QUERY (Linux 6.11+)");
}

/// kernel.perf_event_paranoid, if readable.
fn perf_event_paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether `perf` runs.
pub fn have_perf() -> bool {
    static P: OnceLock<bool> = OnceLock::new();
    *P.get_or_init(|| {
        Command::new("perf")
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Whether we are root (needed for unshare and /proc/PID/map_files).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Whether this kernel has PROCMAP_QUERY (probed with the binary itself).
pub fn have_procmap_query() -> bool {
    static P: OnceLock<bool> = OnceLock::new();
    *P.get_or_init(|| {
        let dir = scratch("probe");
        let out = Command::new(bin())
            .args(["--source", "ioctl", "-q", "-p"])
            .arg(std::process::id().to_string())
            .arg("-o")
            .arg(dir.join("p.data"))
            .output()
            .expect("run binary");
        out.status.success()
    })
}

/// A scratch directory under the cargo target tmpdir, removed when dropped;
/// it derefs to its path.
pub struct Scratch(tempfile::TempDir);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.path().as_os_str()
    }
}

/// A fresh scratch directory named after the test (kept for as long as the
/// returned value lives).
pub fn scratch(name: &str) -> Scratch {
    let d = tempfile::Builder::new()
        .prefix(&format!("{name}-"))
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("create a scratch directory");
    Scratch(d)
}

/// How long a fixture may take to say it is ready.
pub const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Makes a FIFO at `path` (with the system's `mkfifo`), failing the test
/// if it cannot.
pub fn mkfifo(path: &Path) {
    let st = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(st.success(), "mkfifo {}", path.display());
}

/// Polls `cond` every 10 ms until it holds; fails the test naming `what`
/// after `READY_TIMEOUT`.
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + READY_TIMEOUT;
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {READY_TIMEOUT:?} waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// User + system CPU time of process `pid` so far, in clock ticks
/// (`/proc/PID/stat` fields 14 and 15).
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after_comm.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// Waits until process `pid` has run `ticks` clock ticks (10 ms each
/// here) of CPU more than `from`, however busy the machine: a fixed sleep
/// under load may give a sampled phase no samples (bounded like
/// [`wait_until`]).
pub fn wait_cpu(pid: u32, from: u64, ticks: u64) {
    wait_until("the process's CPU time", || cpu_ticks(pid) >= from + ticks);
}

/// Built fixtures: the mapper program and shared libraries with every kind
/// of build id.
pub struct Fixtures {
    /// The mapper program.
    pub mapper: PathBuf,
    /// SHA1 (20-byte) build id.
    pub lib_sha1: PathBuf,
    /// MD5 (16-byte) build id.
    pub lib_md5: PathBuf,
    /// 8-byte build id.
    pub lib_hex8: PathBuf,
    /// 32-byte build id: too long for MMAP2.
    pub lib_long: PathBuf,
    /// No build id.
    pub lib_none: PathBuf,
    /// SHA1 build id, in a directory whose name has a space.
    pub lib_space: PathBuf,
    /// Program burning CPU in `burn_work` of `libburn.so`.
    pub burn: PathBuf,
    /// The library with `burn_work`.
    pub libburn: PathBuf,
    /// The directory holding them.
    pub dir: PathBuf,
}

/// Runs `cc ARGS`, asserting success.
pub fn cc<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(args: &[S]) {
    let out = Command::new("cc").args(args).output().expect("run cc");
    assert!(
        out.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Compiles `fixtures/NAME.c` into `dir/NAME` with `cc -O1` and `libs`.
pub fn build_fixture(name: &str, dir: &Path, libs: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("fixtures/{name}.c"));
    let out = dir.join(name);
    let (o, s) = (out.to_str().unwrap(), src.to_str().unwrap());
    let mut args = vec!["-O1", "-o", o, s];
    args.extend_from_slice(libs);
    cc(&args);
    out
}

/// Builds the CPU burner (`burn`, linked to `libburn.so` by rpath) into
/// `dir` with `cc -O1` and `cflags` (e.g. `-g`); returns (burn, libburn).
pub fn build_burner(dir: &Path, cflags: &[&str]) -> (PathBuf, PathBuf) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let (burn, lib) = (dir.join("burn"), dir.join("libburn.so"));
    let mut args = vec!["-shared".to_string(), "-fPIC".into(), "-O1".into()];
    args.extend(cflags.iter().map(|f| f.to_string()));
    args.extend(["-o".into(), s(&lib), s(&src.join("libburn.c"))]);
    cc(&args);
    let mut args = vec!["-O1".to_string()];
    args.extend(cflags.iter().map(|f| f.to_string()));
    args.extend([
        "-o".into(),
        s(&burn),
        s(&src.join("burn.c")),
        format!("-L{}", s(dir)),
        "-lburn".into(),
        format!("-Wl,-rpath,{}", s(dir)),
    ]);
    cc(&args);
    (burn, lib)
}

/// Builds the fixtures once per test binary.
pub fn fixtures() -> &'static Fixtures {
    static F: OnceLock<Fixtures> = OnceLock::new();
    F.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let dir =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fixtures-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        remove_dead_fixtures();
        std::fs::create_dir_all(dir.join("dir with space")).unwrap();
        let p = |n: &str| dir.join(n);
        let s = |p: &Path| p.to_str().unwrap().to_string();
        let mapper = p("mapper");
        cc(&[
            "-O1",
            "-o",
            &s(&mapper),
            &s(&src.join("mapper.c")),
            "-ldl",
            "-lpthread",
        ]);
        let lib = |name: &str, build_id: &str| {
            let out = p(name);
            cc(&[
                "-shared",
                "-fPIC",
                "-O1",
                &format!("-DFIXTURE_NAME={}", name.replace(['.', ' ', '/'], "_")),
                &format!("-Wl,--build-id={build_id}"),
                "-o",
                &s(&out),
                &s(&src.join("lib.c")),
            ]);
            out
        };
        let (burn, libburn) = build_burner(&dir, &[]);
        Fixtures {
            burn,
            libburn,
            lib_sha1: lib("libsha1.so", "sha1"),
            lib_md5: lib("libmd5.so", "md5"),
            lib_hex8: lib("libhex8.so", "0x0123456789abcdef"),
            lib_long: lib(
                "liblong.so",
                "0x00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
            ),
            lib_none: lib("libnone.so", "none"),
            lib_space: lib("dir with space/libspace.so", "sha1"),
            mapper,
            dir,
        }
    })
}

/// Removes the fixture directories of test binaries that have exited (a
/// static is never dropped, so each binary leaves its own behind).
fn remove_dead_fixtures() {
    let Ok(entries) = std::fs::read_dir(env!("CARGO_TARGET_TMPDIR")) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("fixtures-")) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// A mapper process this test started; killed and reaped on drop.
pub struct Mapper {
    /// The child.
    pub child: Child,
    /// Its pid.
    pub pid: u32,
}

impl Mapper {
    /// Spawns a fixture program with piped stdin and waits for its "ready" line.
    fn spawn_ready(mut cmd: Command) -> Mapper {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        // A program copied just now can be "busy" for a moment: another
        // test thread's fork inherited the copy's write descriptor until its
        // exec. Retried 50 times, 20 ms apart.
        let mut tries = 0;
        let mut child = loop {
            match cmd.spawn() {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 50 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                r => break r.expect("start fixture program"),
            }
        };
        // The first line, read on a thread so a fixture that hangs fails the
        // test after a bounded wait instead of blocking it.
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let mut r = BufReader::new(stdout);
            let _ = r.read_line(&mut line);
            let _ = tx.send(line);
            // keep the pipe open (and drained) for the fixture's lifetime
            let _ = std::io::copy(&mut r, &mut std::io::sink());
        });
        let line = rx
            .recv_timeout(READY_TIMEOUT)
            .unwrap_or_else(|_| panic!("fixture not ready within {READY_TIMEOUT:?}"));
        assert!(line.starts_with("ready"), "fixture said {line:?}");
        let pid = child.id();
        Mapper { child, pid }
    }

    /// Starts the mapper with these arguments and waits until it is ready.
    pub fn start(args: &[&std::ffi::OsStr]) -> Mapper {
        let mut cmd = Command::new(&fixtures().mapper);
        cmd.args(args);
        Mapper::spawn_ready(cmd)
    }

    /// Starts a copy of the mapper at `program` (its name becomes the comm).
    pub fn start_as(program: &Path, args: &[&std::ffi::OsStr]) -> Mapper {
        let mut cmd = Command::new(program);
        cmd.args(args);
        Mapper::spawn_ready(cmd)
    }

    /// Sends the fixedmap fixture a command `line` and waits for its "ok"
    /// in a file of `dir`.
    pub fn order(&mut self, dir: &Path, line: &str) {
        let done = dir.join("fixed.done");
        let _ = std::fs::remove_file(&done);
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{line} {}", done.display()).unwrap();
        stdin.flush().unwrap();
        wait_until("the fixture", || done.exists());
        assert_eq!(std::fs::read_to_string(&done).unwrap(), "ok", "{line}");
    }

    /// Starts the CPU burner (same lifetime rules as a mapper).
    pub fn burner() -> Mapper {
        let mut cmd = Command::new(&fixtures().burn);
        cmd.arg("120");
        Mapper::spawn_ready(cmd)
    }

    /// Starts the mapper dlopening every fixture library, with threads.
    pub fn with_all_libs(threads: u32) -> Mapper {
        let f = fixtures();
        let t = threads.to_string();
        Mapper::start(&[
            "--threads".as_ref(),
            t.as_ref(),
            "--exec-maps".as_ref(),
            "2".as_ref(),
            f.lib_sha1.as_os_str(),
            f.lib_md5.as_os_str(),
            f.lib_hex8.as_os_str(),
            f.lib_long.as_os_str(),
            f.lib_none.as_os_str(),
            f.lib_space.as_os_str(),
        ])
    }
}

impl Drop for Mapper {
    fn drop(&mut self) {
        // Our own child: closing stdin ends it; kill in case it hangs.
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the binary.
pub fn synth<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    Command::new(bin())
        .args(args)
        .output()
        .expect("run mmap2-synth")
}

/// Runs the binary and asserts success.
pub fn synth_ok<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let out = synth(args);
    assert!(
        out.status.success(),
        "mmap2-synth failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `perf record -q ARGS -p PID -- sleep SECS` into `out`; with `-o -` among
/// the args, perf's stdout (pipe mode) goes to `out`. Asserts success.
pub fn perf_record_pid(pid: u32, out: &Path, args: &[&str], secs: &str) {
    let pid = pid.to_string();
    perf_record_to(out, args, &["-p", &pid, "--", "sleep", secs]);
}

/// `perf record -q ARGS [-o OUT] WHAT...` (WHAT: `-p PID -- sleep N`, or
/// `-- workload`); with `-o -` among the args, perf's stdout (pipe mode)
/// goes to `out`. Asserts success.
pub fn perf_record_to(out: &Path, args: &[&str], what: &[&str]) {
    let pipe = args.windows(2).any(|w| w == ["-o", "-"]);
    let mut cmd = Command::new("perf");
    cmd.args(["record", "-q"]).args(args);
    if !pipe {
        cmd.arg("-o").arg(out);
    }
    cmd.args(what);
    if pipe {
        cmd.stdout(Stdio::from(std::fs::File::create(out).unwrap()));
    }
    let o = cmd.stderr(Stdio::piped()).output().unwrap();
    assert!(
        o.status.success(),
        "perf record: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `perf record -q ARGS -p PID -o OUT -- sleep 60`, started disabled and
/// enabled through its control FIFOs in `dir`: returned once perf has
/// acknowledged (its events are then recording). End it with [`sigint`].
pub fn perf_record_enabled(pid: u32, out: &Path, dir: &Path, args: &[&str]) -> Child {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let (ctl, ack) = (dir.join("perf.ctl"), dir.join("perf.ack"));
    mkfifo(&ctl);
    mkfifo(&ack);
    let control = format!("fifo:{},{}", ctl.display(), ack.display());
    let recorder = Command::new("perf")
        .args(["record", "-q", "-D", "-1", "--control", &control])
        .args(args)
        .args(["-p", &pid.to_string(), "-o", out.to_str().unwrap()])
        .args(["--", "sleep", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // read and write ends of our own: opening never blocks
    let open = |p: &Path| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(p)
            .unwrap()
    };
    let (mut ctl, mut ack) = (open(&ctl), open(&ack));
    ctl.write_all(b"enable\n").unwrap();
    let mut got = Vec::new();
    wait_until("perf's ack", || {
        let mut buf = [0u8; 64];
        if let Ok(n) = ack.read(&mut buf) {
            got.extend_from_slice(&buf[..n]);
        }
        got.starts_with(b"ack")
    });
    recorder
}

/// Ends a `perf record` this test started with SIGINT and waits for it:
/// perf writes its file, then dies of the signal.
pub fn sigint(recorder: Child) {
    let st = Command::new("kill")
        .args(["-INT", &recorder.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let p = recorder.wait_with_output().unwrap();
    assert!(p.status.code().is_none_or(|c| c == 0), "{p:?}");
}

/// `perf script --show-mmap-events --show-task-events -i DATA`: the maps,
/// COMMs, FORKs and EXITs perf reads from a file (asserting success).
pub fn perf_script_side_band(data: &Path) -> String {
    perf(&[
        "script".as_ref(),
        "--show-mmap-events".as_ref(),
        "--show-task-events".as_ref(),
        "-i".as_ref(),
        data.as_os_str(),
    ])
}

/// Runs perf with the arguments and returns stdout (asserting success).
pub fn perf(args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new("perf").args(args).output().expect("run perf");
    assert!(
        out.status.success(),
        "perf {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One executable mapping as the tests compare them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Map {
    /// pid.
    pub pid: u32,
    /// Start address.
    pub start: u64,
    /// Length.
    pub len: u64,
    /// File offset.
    pub pgoff: u64,
    /// Permissions as `rwxp`.
    pub perms: String,
    /// Path.
    pub path: String,
    /// Build id in hex, if the record carries one.
    pub build_id: Option<String>,
}

/// Executable VMAs read from `/proc/PID/maps` by a parser independent of the
/// crate's: every `x` line but `[vsyscall]`, with expected build ids
/// attached by `id_of`.
pub fn expected_exec_maps(pid: u32, id_of: impl Fn(&str) -> Option<String>) -> Vec<Map> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mut out = Vec::new();
    for line in text.lines() {
        let mut it = line.splitn(6, ' ');
        let range = it.next().unwrap();
        let perms = it.next().unwrap();
        let off = it.next().unwrap();
        let _dev = it.next().unwrap();
        let _ino = it.next().unwrap();
        let path = it.next().unwrap_or("").trim_start_matches(' ').to_string();
        if !perms.contains('x') || path == "[vsyscall]" {
            continue;
        }
        let (a, b) = range.split_once('-').unwrap();
        let start = u64::from_str_radix(a, 16).unwrap();
        let end = u64::from_str_radix(b, 16).unwrap();
        let path = if path.is_empty() {
            "//anon".to_string()
        } else {
            path
        };
        out.push(Map {
            pid,
            start,
            len: end - start,
            pgoff: u64::from_str_radix(off, 16).unwrap(),
            perms: perms.to_string(),
            build_id: id_of(&path),
            path,
        });
    }
    out
}

/// The GNU build id of an ELF file, read by binutils' readelf.
pub fn readelf_build_id(path: &Path) -> Option<String> {
    let out = Command::new("readelf").arg("-n").arg(path).output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
}

/// The vDSO build id of a process we started: its [vdso] image dumped from
/// /proc/PID/mem and read by readelf.
pub fn vdso_build_id(pid: u32, dir: &Path) -> Option<String> {
    use std::os::unix::fs::FileExt;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
    let (a, b) = line.split(' ').next()?.split_once('-')?;
    let (a, b) = (
        u64::from_str_radix(a, 16).ok()?,
        u64::from_str_radix(b, 16).ok()?,
    );
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).ok()?;
    let mut buf = vec![0u8; (b - a) as usize];
    mem.read_exact_at(&mut buf, a).ok()?;
    let dump = dir.join("vdso.dump");
    std::fs::write(&dump, &buf).ok()?;
    readelf_build_id(&dump)
}

/// The process maps of a recording, as `perf script --show-mmap-events`
/// shows them (parsed by [`perf_script_mmaps`]).
pub fn perf_mmaps_of(data: &Path) -> Vec<Map> {
    let script = perf(&[
        "script".as_ref(),
        "--show-mmap-events".as_ref(),
        "-i".as_ref(),
        data.as_os_str(),
    ]);
    perf_script_mmaps(&script)
}

/// Parses `perf script --show-mmap-events` MMAP2 lines of processes (the
/// kernel's, pid -1, are left out).
pub fn perf_script_mmaps(text: &str) -> Vec<Map> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.split_once("PERF_RECORD_MMAP2 ").map(|(_, r)| r) else {
            continue;
        };
        // "PID/TID: [0xSTART(0xLEN) @ 0xPGOFF <ID>]: r-xp PATH"
        // or "PID/TID: [0xSTART(0xLEN) @ 0xPGOFF MAJ:MIN INO GEN]: r-xp PATH"
        let (ids, rest) = rest.split_once(": [").unwrap();
        if ids.starts_with("-1/") {
            continue; // the kernel's maps (snapshots with --kernel or --all)
        }
        let pid: u32 = ids.split('/').next().unwrap().parse().unwrap();
        let (inner, rest) = rest.split_once("]: ").unwrap();
        let (perms, path) = rest.split_once(' ').unwrap();
        let (start, rest) = inner.split_once('(').unwrap();
        let (len, rest) = rest.split_once(") @ ").unwrap();
        let (pgoff, id) = rest.split_once(' ').unwrap();
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
        let build_id = id
            .strip_prefix('<')
            .and_then(|s| s.strip_suffix('>'))
            .map(str::to_string);
        out.push(Map {
            pid,
            start: hex(start),
            len: hex(len),
            pgoff: hex(pgoff),
            perms: perms.to_string(),
            path: path.to_string(),
            build_id,
        });
    }
    out
}

/// Parses `perf buildid-list` output into path -> id.
pub fn perf_buildid_list(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let (id, path) = l.split_once(' ')?;
            Some((path.trim_start_matches(' ').to_string(), id.to_string()))
        })
        .collect()
}

/// Byte range of a feature section in a file-mode perf.data (little-endian).
pub fn feature_range(file: &[u8], bit: u32) -> Option<std::ops::Range<usize>> {
    let u = |o: usize| u64::from_le_bytes(file[o..o + 8].try_into().unwrap());
    let table = (u(40) + u(48)) as usize;
    let mut idx = 0;
    for b in 0..256u32 {
        let set = u(72 + (b / 64) as usize * 8) & (1 << (b % 64)) != 0;
        if !set {
            continue;
        }
        if b == bit {
            let off = u(table + idx * 16) as usize;
            let size = u(table + idx * 16 + 8) as usize;
            return Some(off..off + size);
        }
        idx += 1;
    }
    None
}

/// The records of a little-endian file-mode perf.data's data section, each
/// with its header, split by this test helper's own walk.
pub fn data_records(file: &[u8]) -> Vec<Vec<u8>> {
    let u = |o: usize| u64::from_le_bytes(file[o..o + 8].try_into().unwrap()) as usize;
    let (start, end) = (u(40), u(40) + u(48));
    let mut out = Vec::new();
    let mut at = start;
    while at < end {
        let len = u16::from_le_bytes([file[at + 6], file[at + 7]]) as usize;
        assert!(len >= 8, "record at {at} has size {len}");
        out.push(file[at..at + len].to_vec());
        at += len;
    }
    assert_eq!(at, end, "records end with the data section");
    out
}

/// A pinned real recording or snapshot under `fixtures/pin/`.
pub fn pin(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/pin")
        .join(name)
}

/// Writes a little-endian file-mode recording of `data` (whole records)
/// under one attr (named `cpu-clock`, ids `ids`) and a HOSTNAME feature.
pub fn write_recording(path: &Path, attr: mmap2_synth::perf::Attr, ids: Vec<u64>, data: &[u8]) {
    use mmap2_synth::bytes::Endian;
    use mmap2_synth::perf::consts::feature;
    use mmap2_synth::perf::features::string_feature;
    use mmap2_synth::perf::{writer::write_file, EventDesc, Metadata};
    let e = Endian::Little;
    let meta = Metadata {
        endian: e,
        events: vec![EventDesc {
            attr,
            name: b"cpu-clock".to_vec(),
            ids,
        }],
        features: vec![(feature::HOSTNAME, string_feature(e, b"h"))],
        build_ids: vec![],
    };
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    write_file(&mut f, &meta, data).unwrap();
}

/// At least `bytes` of records of an unknown type (4000), 64 KiB each, the
/// payload of record `i` filled with `fill(i)`.
pub fn unknown_records(bytes: usize, fill: impl Fn(u32) -> u8) -> Vec<u8> {
    use mmap2_synth::bytes::{Endian, PutExt};
    let e = Endian::Little;
    let mut data = Vec::with_capacity(bytes + 65536);
    let mut i = 0u32;
    while data.len() < bytes {
        data.put_u32(e, 4000);
        data.put_u16(e, 0);
        data.put_u16(e, 65528);
        data.resize(data.len() + 65520, fill(i));
        i += 1;
    }
    data
}

/// Runs the binary as nobody (setpriv) with these arguments.
pub fn synth_as_nobody<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin())
        .args(args)
        .output()
        .expect("run setpriv (util-linux)")
}

/// `p` in single quotes, for a shell script (test paths have no quotes).
pub fn q(p: &std::path::Path) -> String {
    format!("'{}'", p.display())
}

/// A shell loop waiting until `cond` (a shell test) is false, polling every
/// 10 ms; after 30 s it says `what` did not happen and exits 1. For
/// namespace scripts: no wait without a bound.
pub fn sh_poll(what: &str, cond: &str) -> String {
    format!(
        "n=0; while {cond}; do n=$((n+1)); \
         [ $n -lt 3000 ] || {{ echo '{what} not in 30 s' >&2; exit 1; }}; sleep 0.01; done\n"
    )
}

/// A recording of a library replaced at its path during `perf record`:
/// `burn` (linked to `dir/libburn.so`) runs with build v1 mapped, then the
/// path gets build v2 (`cp` and `mv`: a new inode) and, with `twice`,
/// `burn` runs again with v2 mapped. perf reads the BUILD_ID table at the
/// end, by path: it says v2 for maps of v1 too.
pub struct ReplacedLib {
    /// The recording.
    pub rec: PathBuf,
    /// The library's path.
    pub lib: PathBuf,
    /// The build ids of v1 and v2.
    pub ids: [String; 2],
}

/// Records [`ReplacedLib`] in `dir` (perf record, cpu-clock).
pub fn record_replaced_library(dir: &Path, twice: bool) -> ReplacedLib {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let ids = [
        "1111111111111111111111111111111111111111".to_string(),
        "2222222222222222222222222222222222222222".to_string(),
    ];
    let (v1, v2, lib) = (dir.join("v1.so"), dir.join("v2.so"), dir.join("libburn.so"));
    for (out, id) in [(&v1, &ids[0]), (&v2, &ids[1])] {
        let build_id = format!("-Wl,--build-id=0x{id}");
        let c = s(&src.join("libburn.c"));
        cc(&["-shared", "-fPIC", "-O1", &build_id, "-o", &s(out), &c]);
    }
    std::fs::copy(&v1, &lib).unwrap();
    let burn = dir.join("burn");
    let (l, r) = (format!("-L{}", s(dir)), format!("-Wl,-rpath,{}", s(dir)));
    let b = s(&src.join("burn.c"));
    cc(&["-O1", "-o", &s(&burn), &b, &l, "-lburn", &r]);
    let run = format!("sleep 0.5 | {} 0.3 >/dev/null", q(&burn));
    let tmp = dir.join("t");
    let replace = format!("cp {} {} && mv {} {}", q(&v2), q(&tmp), q(&tmp), q(&lib));
    let script = match twice {
        true => format!("{run}; {replace}; {run}"),
        false => format!("{run}; {replace}"),
    };
    let rec = dir.join("rec.data");
    perf_record_to(&rec, &["-e", "cpu-clock"], &["--", "bash", "-c", &script]);
    ReplacedLib { rec, lib, ids }
}

/// `go tool pprof -symbolize=none ARGS PROFILE`: stdout, asserting success.
pub fn go_pprof(args: &[&str], profile: &Path) -> String {
    let home = scratch("pprof-home");
    let out = Command::new("go")
        .args(["tool", "pprof", "-symbolize=none"])
        .args(args)
        .arg(profile)
        .env("HOME", &*home)
        .env("PPROF_TMPDIR", &*home)
        .env("PPROF_BINARY_PATH", &*home)
        .output()
        .expect("run go tool pprof");
    assert!(
        out.status.success(),
        "go tool pprof {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// (offset of its header, sh_offset, sh_size) of section `name` of an
/// ELF64 little-endian image.
pub fn elf_section(img: &[u8], name: &str) -> (usize, u64, u64) {
    let u16_at = |o: usize| u16::from_le_bytes(img[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(img[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(img[o..o + 8].try_into().unwrap());
    let shoff = u64_at(40) as usize;
    let (num, strndx) = (u16_at(60), u16_at(62));
    let strtab = u64_at(shoff + strndx * 64 + 24) as usize;
    (0..num)
        .map(|i| shoff + i * 64)
        .find(|&h| {
            let at = strtab + u32_at(h);
            img[at..].split(|&b| b == 0).next() == Some(name.as_bytes())
        })
        .map(|h| (h, u64_at(h + 24), u64_at(h + 32)))
        .unwrap_or_else(|| panic!("no section {name}"))
}

/// Compresses the debug sections of `elf` in place with `objcopy
/// --compress-debug-sections=TYPE` (`zlib` or `zstd`) and checks that
/// `.debug_info` now starts with a compression header of that type.
pub fn compress_debug_sections(elf: &Path, kind: &str) {
    let tmp = elf.with_extension("compressed");
    let o = Command::new("objcopy")
        .arg(format!("--compress-debug-sections={kind}"))
        .arg(elf)
        .arg(&tmp)
        .output()
        .expect("run objcopy");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::rename(&tmp, elf).unwrap();
    let img = std::fs::read(elf).unwrap();
    let (_, off, _) = elf_section(&img, ".debug_info");
    let ch_type = u32::from_le_bytes(img[off as usize..off as usize + 4].try_into().unwrap());
    let want = if kind == "zstd" { 2 } else { 1 };
    assert_eq!(ch_type, want, "objcopy wrote no {kind} compression header");
}

/// Builds into `dir` a burner (`burn`, `fixtures/burn.c`) whose library
/// `libburn.so` spends its time in a static function, `burn_hidden`,
/// called by the exported `burn_work` (built with frame pointers); the library is then stripped to its
/// dynamic symbols and carries the others as MiniDebugInfo, Fedora's way
/// (`nm`, `objcopy --only-keep-debug` and `--keep-symbols`, `strip`, `xz`,
/// `objcopy --add-section .gnu_debugdata=...`): an xz-compressed ELF whose
/// `.symtab` names `burn_hidden`. `debugdata`, when given, is added as the
/// section instead. Returns (burn, libburn.so).
pub fn build_minidebug_burner(dir: &Path, debugdata: Option<&Path>) -> (PathBuf, PathBuf) {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let (burn, lib, src) = (
        dir.join("burn"),
        dir.join("libburn.so"),
        dir.join("libburn.c"),
    );
    std::fs::write(
        &src,
        "volatile unsigned long burn_sink;\n\
         __attribute__((noinline)) void burn_note(unsigned long v) { burn_sink = v; }\n\
         static __attribute__((noinline, noclone)) unsigned long burn_hidden(unsigned long n) {\n\
         \x20   unsigned long acc = 0;\n\
         \x20   for (unsigned long i = 0; i < n; i++) acc = acc * 6364136223846793005UL + i;\n\
         \x20   burn_note(acc);\n\
         \x20   return acc;\n\
         }\n\
         __attribute__((noinline)) unsigned long burn_work(unsigned long n) {\n\
         \x20   unsigned long acc = burn_hidden(n);\n\
         \x20   burn_sink = acc;\n\
         \x20   return acc;\n\
         }\n",
    )
    .unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    // (burn_hidden calls burn_note: not a leaf, so it keeps a frame and
    // its caller is in every callchain)
    let fp = "-fno-omit-frame-pointer";
    cc(&["-shared", "-fPIC", "-O1", fp, "-o", &s(&lib), &s(&src)]);
    cc(&[
        "-O1".to_string(),
        fp.into(),
        "-o".into(),
        s(&burn),
        s(&fixtures.join("burn.c")),
        format!("-L{}", s(dir)),
        "-lburn".into(),
        format!("-Wl,-rpath,{}", s(dir)),
    ]);
    let xz = match debugdata {
        Some(p) => q(p),
        None => "mini.xz".into(),
    };
    let script = format!(
        "set -e\ncd {dir}\n\
         nm -D libburn.so --format=posix --defined-only | awk '{{print $1}}' | sort > dynsyms\n\
         nm libburn.so --format=posix --defined-only | awk '$2 ~ /^[TtD]$/ {{print $1}}' | sort > funcsyms\n\
         comm -13 dynsyms funcsyms > keep\n\
         grep -qx burn_hidden keep\n\
         objcopy --only-keep-debug libburn.so debug\n\
         objcopy -S --remove-section .gdb_index --remove-section .comment --keep-symbols=keep debug mini\n\
         xz -f mini\n\
         strip --strip-all -R .comment libburn.so\n\
         objcopy --add-section .gnu_debugdata={xz} libburn.so\n",
        dir = q(dir)
    );
    let o = Command::new("sh")
        .args(["-c", &script])
        .output()
        .expect("run sh");
    assert!(
        o.status.success(),
        "making MiniDebugInfo: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let img = std::fs::read(&lib).unwrap();
    elf_section(&img, ".gnu_debugdata");
    (burn, lib)
}

/// The (start, end) of the anonymous executable memory of process `pid`
/// (the JIT fixture's code: its one `rwxp` map without a path).
pub fn anon_exec_range(pid: u32) -> (u64, u64) {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let line = maps
        .lines()
        .find(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() == 5 && f[1] == "rwxp"
        })
        .unwrap_or_else(|| panic!("no anonymous rwx map in pid {pid}:\n{maps}"));
    let (a, b) = line
        .split_whitespace()
        .next()
        .unwrap()
        .split_once('-')
        .unwrap();
    let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
    (hex(a), hex(b))
}

/// The host pid of the one child of `pid` (the program `unshare -f` runs).
pub fn only_child(pid: u32) -> u32 {
    let path = format!("/proc/{pid}/task/{pid}/children");
    let mut child = None;
    wait_until("the child of unshare", || {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        child = text.split_whitespace().next().and_then(|c| c.parse().ok());
        child.is_some()
    });
    child.unwrap()
}

/// Starts the burner `burn` in a mount namespace of its own where `theirs`
/// is bind-mounted over `lib` (the path names another file there, as in a
/// container); stops it on drop.
pub fn burner_with_library_bound_over(burn: &Path, lib: &Path, theirs: &Path) -> Mapper {
    let script = format!(
        "mount --bind {} {} && exec {} 120",
        q(theirs),
        q(lib),
        q(burn)
    );
    Mapper::start_as(
        Path::new("unshare"),
        &["-m", "sh", "-c", &script].map(std::ffi::OsStr::new),
    )
}

/// Of `pid`'s samples in `data` whose leaf is `burn_work` (per `perf script
/// -F pid,ip,sym`, callchains on), how many there are and the share whose
/// stack goes on to `main`: perf unwound past the leaf (with DWARF
/// unwinding, only where it has the maps holding `.eh_frame`).
pub fn main_caller_share(data: &Path, pid: u32) -> (f64, usize) {
    let text = perf(&[
        "script".as_ref(),
        "-F".as_ref(),
        "pid,ip,sym".as_ref(),
        "-i".as_ref(),
        data.as_os_str(),
    ]);
    let (mut leaves, mut with_main) = (0usize, 0usize);
    let mut frames: Option<Vec<&str>> = None;
    let mut finish = |frames: Option<Vec<&str>>| {
        if let Some(f) = frames.filter(|f| f.first() == Some(&"burn_work")) {
            leaves += 1;
            with_main += usize::from(f.contains(&"main"));
        }
    };
    for l in text.lines().chain([""]) {
        if let Some(frame) = l.strip_prefix('\t') {
            // "IP SYM": the symbol is the second word
            let sym = frame.split_whitespace().nth(1).unwrap_or("");
            if let Some(f) = frames.as_mut() {
                f.push(sym);
            }
            continue;
        }
        finish(frames.take());
        let mine = l.split_whitespace().next() == Some(pid.to_string().as_str());
        frames = mine.then(Vec::new);
    }
    (with_main as f64 / leaves.max(1) as f64, leaves)
}

/// `pid`'s data maps (MMAP2 records marked PERF_RECORD_MISC_MMAP_DATA) in
/// the perf.data file `data`, read with linux-perf-data, as (start, path)
/// sorted; asserts none of them is executable (perf marks only those).
pub fn data_maps_of(data: &Path, pid: u32) -> Vec<(u64, String)> {
    use linux_perf_data::{PerfFileReader, PerfFileRecord};
    use linux_perf_event_reader::EventRecord;
    const MMAP_DATA: u16 = 1 << 13;
    let f = BufReader::new(std::fs::File::open(data).unwrap());
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_file(f).unwrap();
    let mut out = Vec::new();
    while let Some(r) = record_iter.next_record(&mut perf_file).unwrap() {
        let PerfFileRecord::EventRecord { record, .. } = r else {
            continue;
        };
        let misc = record.misc;
        if let Ok(EventRecord::Mmap2(m)) = record.parse() {
            if m.pid == pid as i32 && misc & MMAP_DATA != 0 {
                assert_eq!(
                    m.protection & libc::PROT_EXEC as u32,
                    0,
                    "exec map marked data"
                );
                let path = String::from_utf8_lossy(&m.path.as_slice()).into_owned();
                out.push((m.address, path));
            }
        }
    }
    out.sort();
    out
}

/// Unmounts (lazily) what is mounted at its path when dropped.
pub struct Mounted(pub PathBuf);

impl Mounted {
    /// `mount ARGS... PATH`, which must succeed.
    pub fn new(args: &[&str], path: &Path) -> Mounted {
        let st = Command::new("mount").args(args).arg(path).status();
        assert!(st.unwrap().success(), "mount {args:?} {}", path.display());
        Mounted(path.to_path_buf())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = (Command::new("umount").arg("-l").arg(&self.0))
            .stderr(Stdio::null())
            .status();
    }
}
