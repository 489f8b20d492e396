//! Outputs under hostile conditions: devices, FIFOs, symlinks, closed
//! stdout, long names, signals, and `--in-place` on links, owners and
//! concurrent rewrites. Nothing is replaced that is not a regular file,
//! nothing is left behind, nothing is lost.

mod common;

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::*;

/// A process of ours to snapshot (killed on drop).
struct Sleeper(Child);

impl Sleeper {
    fn start() -> Sleeper {
        Sleeper(Command::new("sleep").arg("600").spawn().unwrap())
    }
    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Temporary files of ours left in `dir`.
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".m2s-") && n.ends_with(".tmp"))
        .collect()
}

// A character device as -o stays a device (it gets the pipe-mode stream); a
// FIFO gets a pipe-mode perf.data a reader can use; a directory is refused.
#[test]
#[ignore = "needs root (mknod)"]
fn devices_and_fifos_are_written_into_never_replaced() {
    needs_root("mknod of a character device");
    let dir = scratch("out-dev");
    let s = Sleeper::start();
    let null = dir.join("null");
    let st = Command::new("mknod")
        .arg(&null)
        .args(["c", "1", "3"])
        .status();
    assert!(st.unwrap().success());
    synth_ok(
        ["-q", "-p", &s.pid(), "-o"]
            .map(Into::into)
            .iter()
            .chain([&null.clone().into_os_string()]),
    );
    assert!(std::fs::symlink_metadata(&null)
        .unwrap()
        .file_type()
        .is_char_device());
    let fifo = dir.join("fifo");
    mkfifo(&fifo);
    let reader = Command::new("cat")
        .arg(&fifo)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    synth_ok([
        "-q".as_ref(),
        "-p".as_ref(),
        s.pid().as_ref(),
        "-o".as_ref(),
        fifo.as_os_str(),
    ]);
    let got = reader.wait_with_output().unwrap().stdout;
    assert_eq!(&got[..8], b"PERFILE2");
    assert_eq!(&got[8..16], &16u64.to_le_bytes(), "pipe mode");
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    let o = synth([
        "-q".as_ref(),
        "-p".as_ref(),
        s.pid().as_ref(),
        "-o".as_ref(),
        dir.as_os_str(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

// -o through a symlink writes the file it points to and keeps the link
// (a link to nothing is refused: see cli.rs); new outputs are 0600, a
// merge's without a hole; a 255-byte name works.
#[test]
fn symlinks_modes_and_long_names() {
    let dir = scratch("out-link");
    let s = Sleeper::start();
    let link = dir.join("link.data");
    std::fs::write(dir.join("real.data"), b"old").unwrap();
    std::os::unix::fs::symlink("real.data", &link).unwrap();
    synth_ok([
        "-q".as_ref(),
        "-p".as_ref(),
        s.pid().as_ref(),
        "-o".as_ref(),
        link.as_os_str(),
    ]);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let real = std::fs::metadata(dir.join("real.data")).unwrap();
    assert_eq!(real.permissions().mode() & 0o777, 0o600);
    let long = dir.join("x".repeat(255));
    synth_ok([
        "-q".as_ref(),
        "-p".as_ref(),
        s.pid().as_ref(),
        "-o".as_ref(),
        long.as_os_str(),
    ]);
    assert_eq!(std::fs::metadata(&long).unwrap().mode() & 0o777, 0o600);
    let merged = dir.join("merged.data");
    let rec = pin("rec-file.data");
    synth_ok([
        "merge".as_ref(),
        "-q".as_ref(),
        rec.as_os_str(),
        "-p".as_ref(),
        s.pid().as_ref(),
        "-o".as_ref(),
        merged.as_os_str(),
    ]);
    assert_eq!(std::fs::metadata(&merged).unwrap().mode() & 0o777, 0o600);
    // and has no hole where the room before the records was (`cp` copies a
    // file with one through user space)
    let f = std::fs::File::open(&merged).unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: lseek on a descriptor this test owns; no memory is passed.
    let hole = unsafe { libc::lseek(f.as_raw_fd(), 0, libc::SEEK_HOLE) };
    assert_eq!(hole as u64, f.metadata().unwrap().len(), "a hole at {hole}");
    assert!(leftovers(&dir).is_empty());
}

// `-o -` with stdout closed fails instead of reporting success; merge
// refuses stdout, FIFOs and directories as outputs, exit 2, naming them.
#[test]
fn closed_stdout_and_unusable_merge_outputs() {
    let dir = scratch("out-closed");
    let s = Sleeper::start();
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!("'{}' -q -p {} -o - >&-", bin(), s.pid()))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("error: writing stdout"), "{err}");
    // pprof's `-o -` too
    let rec = pin("rec-file.data");
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "'{}' pprof -q --no-symbolize '{}' -o - >&-",
            bin(),
            rec.display()
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "pprof: {err}");
    assert!(err.contains("error: writing stdout"), "pprof: {err}");
    let fifo = dir.join("fifo");
    mkfifo(&fifo);
    for out in [Path::new("-"), &fifo, &dir] {
        let o = synth([
            "merge".as_ref(),
            rec.as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{out:?}: {err}");
        assert!(err.starts_with("error: "), "{err}");
    }
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
}

/// A file-mode recording of `mib` MiB of unknown-type records (fast to
/// build, slow enough to merge that a signal lands mid-copy).
fn big_recording(path: &Path, mib: usize) {
    let data = unknown_records(mib << 20, |_| 0x5a);
    write_recording(path, mmap2_synth::perf::Attr::default(), vec![], &data);
}

/// Whether process `pid` has a file open in `dir` other than `input` (its
/// output, unnamed or not).
fn writes_in(pid: u32, dir: &Path, input: &Path) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .any(|f| std::fs::read_link(f.path()).is_ok_and(|l| l.starts_with(dir) && l != input))
}

// SIGTERM, SIGINT or SIGHUP during a merge leaves no temporary file and
// exits with 128 + the signal; SIGKILL leaves none either (the output is
// unnamed until its commit); the input is untouched.
#[test]
fn signals_remove_the_temporary_file() {
    let dir = tempfile::Builder::new()
        .prefix("m2s-sig-")
        .tempdir_in("/dev/shm")
        .unwrap();
    let rec = dir.path().join("big.data");
    big_recording(&rec, 512);
    let len = std::fs::metadata(&rec).unwrap().len();
    for (sig, name) in [(15, "TERM"), (2, "INT"), (1, "HUP"), (9, "KILL")] {
        let out = dir.path().join("out.data");
        let mut child = Command::new(bin())
            .args(["merge", "-q", "-p", "1"])
            .arg(&rec)
            .arg("-o")
            .arg(&out)
            .spawn()
            .unwrap();
        wait_until("the merge's output", || {
            writes_in(child.id(), dir.path(), &rec)
        });
        let pid = child.id().to_string();
        assert!(Command::new("kill")
            .args(["-s", name, &pid])
            .status()
            .unwrap()
            .success());
        let status = child.wait().unwrap();
        match sig {
            9 => assert_eq!(status.signal(), Some(9), "SIGKILL"),
            _ => assert_eq!(status.code(), Some(128 + sig), "SIG{name}"),
        }
        assert!(
            leftovers(dir.path()).is_empty(),
            "SIG{name} left {:?}",
            leftovers(dir.path())
        );
        assert!(!out.exists());
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "SIG{name}"
        );
    }
    assert_eq!(std::fs::metadata(&rec).unwrap().len(), len);
}

/// The pids that have maps in a recording, per our reader.
fn pids_with_maps(path: &Path) -> Vec<u32> {
    let input = mmap2_synth::perf::Input::open(path).unwrap();
    let procs = mmap2_synth::snapshot::read_snapshot(&input).unwrap();
    procs
        .iter()
        .filter(|p| !p.vmas.is_empty())
        .map(|p| p.pid)
        .collect()
}

// --in-place follows a symlink (the link stays, its target is merged), keeps
// mode and owner, and refuses a hard-linked file unless --force.
#[test]
#[ignore = "needs root (chown)"]
fn in_place_links_mode_and_owner() {
    needs_root("chown to another user");
    let dir = scratch("inplace-owner");
    let s = Sleeper::start();
    let rec = dir.join("rec.data");
    std::fs::copy(pin("rec-file.data"), &rec).unwrap();
    std::os::unix::fs::chown(&rec, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&rec, std::fs::Permissions::from_mode(0o640)).unwrap();
    let link = dir.join("link.data");
    std::os::unix::fs::symlink("rec.data", &link).unwrap();
    let snap = dir.join("s.snap");
    snapshot_of(&s, &snap);
    // --maps SNAP --all: the recording is older than our process
    let args = |p: &Path| {
        let v: Vec<std::ffi::OsString> = vec![
            "merge".into(),
            "-q".into(),
            p.into(),
            "--in-place".into(),
            "--all".into(),
            "--maps".into(),
            snap.clone().into(),
        ];
        v
    };
    synth_ok(args(&link));
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let m = std::fs::metadata(&rec).unwrap();
    assert_eq!((m.mode() & 0o7777, m.uid(), m.gid()), (0o640, 65534, 65534));
    let pids = pids_with_maps(&rec);
    assert!(pids.contains(&s.0.id()), "{pids:?} lack {}", s.0.id());
    let hard = dir.join("hard.data");
    std::fs::hard_link(&rec, &hard).unwrap();
    let o = synth(args(&rec));
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("hard links"));
    let mut forced = args(&rec);
    forced.push("--force".into());
    synth_ok(forced);
    assert!(leftovers(&dir).is_empty());
}

/// A snapshot file of one process of ours.
fn snapshot_of(s: &Sleeper, path: &Path) {
    synth_ok([
        "-q".as_ref(),
        "-p".as_ref(),
        s.pid().as_ref(),
        "-o".as_ref(),
        path.as_os_str(),
    ]);
}

// Two --in-place merges of one recording at once, inserting different
// processes, never lose either's maps (the rewrite holds an exclusive lock).
#[test]
fn concurrent_in_place_merges_keep_both() {
    let dir = scratch("inplace-race");
    let (a, b) = (Sleeper::start(), Sleeper::start());
    let (snap_a, snap_b) = (dir.join("a.snap"), dir.join("b.snap"));
    snapshot_of(&a, &snap_a);
    snapshot_of(&b, &snap_b);
    for round in 0..12 {
        let rec = dir.join(format!("rec{round}.data"));
        std::fs::copy(pin("rec-file.data"), &rec).unwrap();
        // --maps SNAP --all: the recording's own processes are older than
        // ours, so a live merge would (rightly) call ours stale
        let spawn = |snap: &Path| {
            Command::new(bin())
                .args(["merge", "-q", "--in-place", "--all", "--maps"])
                .arg(snap)
                .arg(&rec)
                .spawn()
                .unwrap()
        };
        let (mut x, mut y) = (spawn(&snap_a), spawn(&snap_b));
        assert!(x.wait().unwrap().success() && y.wait().unwrap().success());
        let pids = pids_with_maps(&rec);
        assert!(
            pids.contains(&a.0.id()) && pids.contains(&b.0.id()),
            "round {round}: {pids:?}"
        );
    }
    assert!(leftovers(&dir).is_empty());
}

/// A pipe-mode stream of about `mib` MiB (unknown-type records under one
/// attr), made by converting a file-mode recording.
fn pipe_stream(dir: &Path, mib: usize) -> std::path::PathBuf {
    let file = dir.join("rec.data");
    let data = unknown_records(mib << 20, |i| i as u8);
    write_recording(&file, mmap2_synth::perf::Attr::default(), vec![], &data);
    let stream = dir.join("stream.data");
    synth_ok([
        "convert".as_ref(),
        "-q".as_ref(),
        file.as_os_str(),
        "--to".as_ref(),
        "pipe".as_ref(),
        "-o".as_ref(),
        stream.as_os_str(),
    ]);
    std::fs::remove_file(file).unwrap();
    stream
}

/// `writer | mmap2-synth convert - --to file -o OUT` in a process group of
/// its own, as a shell runs a pipeline. The writer, like `perf record`,
/// survives SIGINT and SIGTERM: it writes the first `half` bytes of
/// `stream`, creates `dir/half`, waits for `dir/go` (30 s at most) and
/// writes the rest. Killed (the group) on drop.
struct Pipeline {
    writer: Child,
    reader: Child,
    stderr: std::path::PathBuf,
}

impl Pipeline {
    fn start(dir: &Path, stream: &Path, half: u64, out: &Path) -> Pipeline {
        use std::os::unix::process::CommandExt;
        let script = format!(
            "trap '' INT TERM\nhead -c {half} {s}\ntouch {h}\n{wait}tail -c +{rest} {s}\n",
            s = q(stream),
            h = q(&dir.join("half")),
            wait = sh_poll("the go file", &format!("[ ! -e {} ]", q(&dir.join("go")))),
            rest = half + 1,
        );
        let mut writer = Command::new("sh")
            .args(["-c", &script])
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let stderr = dir.join("reader.err");
        let reader = Command::new(bin())
            .args(["convert", "-", "--to", "file", "-o"])
            .arg(out)
            .stdin(writer.stdout.take().unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .process_group(writer.id() as i32)
            .spawn()
            .unwrap();
        Pipeline {
            writer,
            reader,
            stderr,
        }
    }

    /// Sends `sig` to the whole group, as a Ctrl-C does.
    fn signal_group(&self, sig: &str) {
        let group = format!("-{}", self.writer.id());
        let st = Command::new("kill")
            .args(["-s", sig, "--", &group])
            .status()
            .unwrap();
        assert!(st.success(), "kill -s {sig} -- {group}");
    }

    /// The reader's stderr so far.
    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits (bounded) for the reader to exit, then for the writer.
    fn wait(&mut self) -> std::process::ExitStatus {
        let mut status = None;
        wait_until("the reader to exit", || {
            status = self.reader.try_wait().unwrap();
            status.is_some()
        });
        wait_until("the writer to exit", || {
            self.writer.try_wait().unwrap().is_some()
        });
        status.unwrap()
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        if self.writer.try_wait().unwrap_or(None).is_none() {
            let group = format!("-{}", self.writer.id());
            let _ = Command::new("kill")
                .args(["-s", "KILL", "--", &group])
                .status();
        }
        let _ = self.reader.wait();
        let _ = self.writer.wait();
    }
}

// Ctrl-C (SIGINT to the process group) mid-stream does not lose a piped-in
// recording: the reader reads the stream to its end and writes the same
// output as without the signal; SIGTERM is put off alike, and a second
// signal still aborts (exit 130), nothing left.
#[test]
fn ctrl_c_on_a_streamed_pipeline_keeps_the_recording() {
    let dir = scratch("sig-stream");
    let stream = pipe_stream(&dir, 1);
    // more than a pipe holds (64 KiB): the reader has read from it by the
    // time the writer is past it
    let half = 512 << 10;
    let reference = dir.join("ref.data");
    synth_ok([
        "convert".as_ref(),
        "-q".as_ref(),
        stream.as_os_str(),
        "--to".as_ref(),
        "file".as_ref(),
        "-o".as_ref(),
        reference.as_os_str(),
    ]);
    for signals in [&["INT"][..], &["TERM", "INT"]] {
        for f in ["half", "go"] {
            let _ = std::fs::remove_file(dir.join(f));
        }
        let out = dir.join(format!("out{}.data", signals.len()));
        let mut p = Pipeline::start(&dir, &stream, half, &out);
        let exited = |p: &mut Pipeline| p.reader.try_wait().unwrap().is_some();
        wait_until("the writer's first half", || dir.join("half").exists());
        for sig in signals {
            p.signal_group(sig);
            // taken (put off, or the reader ended) before anything else
            let note = format!("SIG{sig}: reading the input stream to its end");
            wait_until("the reader to take the signal", || {
                exited(&mut p) || p.stderr().contains(&note)
            });
        }
        std::fs::write(dir.join("go"), b"").unwrap();
        let status = p.wait();
        let err = p.stderr();
        if signals.len() == 1 {
            assert!(status.success(), "{status:?}: {err}");
            let (got, want) = (std::fs::read(&out), std::fs::read(&reference).unwrap());
            assert!(got.is_ok_and(|g| g == want), "{err}");
            mmap2_synth::perf::Input::open(&out).unwrap();
        } else {
            assert_eq!(status.code(), Some(130), "{err}");
            assert!(!out.exists());
        }
        assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
    }
}

/// Runs the binary, failing the test if it has not ended within 20 s
/// (killed then): for outputs that could block it.
fn synth_within<I, S>(args: I) -> std::process::Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut child = Command::new(bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("mmap2-synth still running after 20 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn assert_refused(o: &std::process::Output, says: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(says), "{err}");
}

// A symlink at -o that another user owns (in a directory of theirs) is not
// followed by root, whatever it points to (a root-only file, a device), for
// snapshots, merge (--in-place too), convert and pprof, exit 2; root's
// own links still are.
#[test]
#[ignore = "needs root (chown)"]
fn another_users_symlink_at_o_is_not_followed() {
    needs_root("chown a link to another user");
    let dir = scratch("foreign-link");
    let s = Sleeper::start();
    let secret = dir.join("secret");
    std::fs::write(&secret, b"SECRET").unwrap();
    let mode = std::fs::metadata(&secret).unwrap().mode();
    let udir = dir.join("udir");
    std::fs::create_dir(&udir).unwrap();
    std::os::unix::fs::chown(&udir, Some(65534), Some(65534)).unwrap();
    let link = udir.join("out.data");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
    let dev = udir.join("dev.data");
    std::os::unix::fs::symlink("/dev/null", &dev).unwrap();
    std::os::unix::fs::lchown(&dev, Some(65534), Some(65534)).unwrap();
    let rec = pin("rec-file.data");
    for out in [&link, &dev] {
        let o = synth_within([
            "-q".as_ref(),
            "-p".as_ref(),
            s.pid().as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
        ]);
        assert_refused(&o, "belongs to uid 65534");
        let o = synth_within([
            "merge".as_ref(),
            "-q".as_ref(),
            rec.as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
        ]);
        assert_refused(&o, "belongs to uid 65534");
        let o = synth_within([
            "merge".as_ref(),
            "-q".as_ref(),
            out.as_os_str(),
            "--in-place".as_ref(),
            "-a".as_ref(),
        ]);
        assert_refused(&o, "belongs to uid 65534");
        let o = synth_within([
            "convert".as_ref(),
            "-q".as_ref(),
            rec.as_os_str(),
            "--to".as_ref(),
            "pipe".as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
        ]);
        assert_refused(&o, "belongs to uid 65534");
        let o = synth_within([
            "pprof".as_ref(),
            "-q".as_ref(),
            rec.as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
        ]);
        assert_refused(&o, "belongs to uid 65534");
    }
    assert_eq!(std::fs::read(&secret).unwrap(), b"SECRET");
    assert_eq!(std::fs::metadata(&secret).unwrap().mode(), mode);
    // archive's -o DIR through their link to a root directory: refused too
    let rootdir = dir.join("rootdir");
    std::fs::create_dir(&rootdir).unwrap();
    let dlink = udir.join("cache");
    std::os::unix::fs::symlink(&rootdir, &dlink).unwrap();
    std::os::unix::fs::lchown(&dlink, Some(65534), Some(65534)).unwrap();
    let o = synth_within([
        "archive".as_ref(),
        "-q".as_ref(),
        "-p".as_ref(),
        s.pid().as_ref(),
        "--no-kernel".as_ref(),
        "-o".as_ref(),
        dlink.as_os_str(),
    ]);
    assert_refused(&o, "belongs to uid 65534");
    assert_eq!(std::fs::read_dir(&rootdir).unwrap().count(), 0);
    // the same link, root's: followed
    std::os::unix::fs::lchown(&link, Some(0), Some(0)).unwrap();
    synth_ok([
        "-q".as_ref(),
        "-p".as_ref(),
        s.pid().as_ref(),
        "-o".as_ref(),
        link.as_os_str(),
    ]);
    assert_ne!(std::fs::read(&secret).unwrap(), b"SECRET");
    // run by uid 65534, its own link (in its directory) is followed too
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let own = udir.join("mine.data");
    let real = udir.join("real.data");
    std::fs::write(&real, b"OLD").unwrap();
    std::os::unix::fs::chown(&real, Some(65534), Some(65534)).unwrap();
    std::os::unix::fs::symlink("real.data", &own).unwrap();
    std::os::unix::fs::lchown(&own, Some(65534), Some(65534)).unwrap();
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin())
        .args(["convert", "-q"])
        .arg(&rec)
        .args(["--to", "pipe", "-o"])
        .arg(&own)
        .output()
        .expect("run setpriv (util-linux)");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read(&real).unwrap().starts_with(b"PERFILE2"));
    assert!(std::fs::symlink_metadata(&own)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(leftovers(&udir).is_empty() && leftovers(&dir).is_empty());
}

// Outputs that would block or destroy an input are refused at once, exit 2:
// a FIFO as archive's directory, and -o naming pprof's recording or
// merge's --maps snapshot (both left as they were).
#[test]
fn outputs_that_block_or_destroy_inputs_are_refused() {
    let dir = scratch("out-refused");
    let s = Sleeper::start();
    let fifo = dir.join("fifo");
    mkfifo(&fifo);
    // /dev/stdout (root's link to /proc/self/fd/1, "pipe:[N]") still works
    let o = synth_within(["-q", "-p", &s.pid(), "-o", "/dev/stdout"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.stdout.starts_with(b"PERFILE2"));
    let o = synth_within([
        "archive".as_ref(),
        "-q".as_ref(),
        "-p".as_ref(),
        s.pid().as_ref(),
        "--no-kernel".as_ref(),
        "-o".as_ref(),
        fifo.as_os_str(),
    ]);
    assert_refused(&o, "is a FIFO, not a directory");
    let rec = dir.join("rec.data");
    std::fs::copy(pin("rec-file.data"), &rec).unwrap();
    let before = std::fs::read(&rec).unwrap();
    let o = synth_within([
        "pprof".as_ref(),
        "-q".as_ref(),
        rec.as_os_str(),
        "-o".as_ref(),
        rec.as_os_str(),
    ]);
    assert_refused(&o, "is the recording");
    let snap = dir.join("s.snap");
    snapshot_of(&s, &snap);
    let snap_bytes = std::fs::read(&snap).unwrap();
    let o = synth_within([
        "merge".as_ref(),
        "-q".as_ref(),
        rec.as_os_str(),
        "-a".as_ref(),
        "--maps".as_ref(),
        snap.as_os_str(),
        "-o".as_ref(),
        snap.as_os_str(),
    ]);
    assert_refused(&o, "is the --maps input");
    assert_eq!(std::fs::read(&rec).unwrap(), before);
    assert_eq!(std::fs::read(&snap).unwrap(), snap_bytes);
    assert!(leftovers(&dir).is_empty());
}

/// `mmap2-synth` with `args` then `out` (the output path) last.
fn synth_to(args: &[&str], out: &Path) -> std::process::Output {
    let mut all: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
    all.push(out.into());
    synth_within(all)
}

/// Every command that writes `-o`, as `mmap2-synth ARGS -o` (`out` goes
/// last): snapshot, merge, convert, pprof and record (perf's `-o`).
fn writers(pid: &str, rec: &Path) -> Vec<Vec<String>> {
    let rec = rec.to_str().unwrap();
    vec![
        vec!["-q", "-p", pid, "-o"],
        vec!["merge", "-q", rec, "-o"],
        vec!["convert", "-q", rec, "--to", "pipe", "-o"],
        vec!["pprof", "-q", "--no-symbolize", rec, "-o"],
        vec!["record", "-q", "--", "-e", "task-clock", "-o"],
    ]
    .into_iter()
    .map(|v| v.into_iter().map(String::from).collect())
    .collect()
}

/// Runs writer `w` (from [`writers`]) to `out` (record's workload: a
/// 0.3 s sleep).
fn run_writer(w: &[String], out: &Path) -> std::process::Output {
    let mut args: Vec<&str> = w.iter().map(String::as_str).collect();
    let out = out.to_str().unwrap();
    args.push(out);
    if w[0] == "record" {
        args.extend(["--", "sleep", "0.3"]);
    }
    synth_within(args)
}

// Another user's symlink to a DIRECTORY anywhere on -o's path (their
// `ln -s /etc ~/dir`, then root's `-o ~/dir/passwd`) is not followed:
// snapshot, merge (--in-place too), convert, pprof, record and archive
// (-o DIR/sub) all exit 2 naming the link, and nothing is written or made
// where it points.
#[test]
#[ignore = "needs root (chown)"]
fn another_users_symlinked_directory_on_o_is_not_followed() {
    needs_root("chown a link to another user");
    let dir = scratch("foreign-dirlink");
    let s = Sleeper::start();
    let etc = dir.join("etc");
    std::fs::create_dir_all(etc.join("sub")).unwrap();
    std::fs::write(etc.join("passwd"), b"SECRET").unwrap();
    std::fs::write(etc.join("sub/shadow"), b"SECRET").unwrap();
    let home = dir.join("home");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(65534), Some(65534)).unwrap();
    let link = home.join("dir");
    std::os::unix::fs::symlink(&etc, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
    let before = || {
        let mut names: Vec<_> = walkdir(&etc);
        names.sort();
        names
    };
    let listing = before();
    let rec = pin("rec-file.data");
    for out in [
        link.join("passwd"),
        link.join("sub/shadow"),
        link.join("new.data"),
    ] {
        for w in writers(&s.pid(), &rec) {
            let o = run_writer(&w, &out);
            assert_refused(&o, "belongs to uid 65534");
            assert_refused(&o, &link.display().to_string());
        }
        let o = synth_to(&["merge", "-q", "--in-place", "-a"], &out);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let o = synth_to(
        &["archive", "-q", "-p", &s.pid(), "--no-kernel", "-o"],
        &link.join("cache"),
    );
    assert_refused(&o, "belongs to uid 65534");
    assert_eq!(std::fs::read(etc.join("passwd")).unwrap(), b"SECRET");
    assert_eq!(std::fs::read(etc.join("sub/shadow")).unwrap(), b"SECRET");
    assert_eq!(before(), listing, "nothing made through the link");
}

/// Every path under `dir` (relative), for "nothing was made there".
fn walkdir(dir: &Path) -> Vec<String> {
    let mut all = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        all.push(p.strip_prefix(dir).unwrap().display().to_string());
        if e.file_type().unwrap().is_dir() {
            all.extend(
                walkdir(&p)
                    .into_iter()
                    .map(|s| format!("{}/{s}", e.file_name().to_string_lossy())),
            );
        }
    }
    all
}

// Symlinked directories of root's (as /var/run -> /run) and, run as
// another user, of that user's own, are still followed on -o's path, for
// every command that writes one; so are `..` after such a link, relative
// paths and `-o name` in the working directory.
#[test]
#[ignore = "needs root (chown) and perf record"]
fn own_and_roots_symlinked_directories_on_o_are_followed() {
    needs_root("chown a link to another user");
    needs_perf_record();
    let dir = scratch("own-dirlink");
    let s = Sleeper::start();
    let real = dir.join("real");
    std::fs::create_dir_all(real.join("sub")).unwrap();
    let link = dir.join("link");
    std::os::unix::fs::symlink("real/sub", &link).unwrap();
    let rec = pin("rec-file.data");
    for (i, w) in writers(&s.pid(), &rec).iter().enumerate() {
        // through the link, and `..` taken where the link led (real/)
        for out in [
            link.join(format!("{i}.data")),
            link.join(format!("../{i}.up")),
        ] {
            let o = run_writer(w, &out);
            assert!(
                o.status.success(),
                "{w:?} {out:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        assert!(real.join(format!("sub/{i}.data")).is_file(), "{w:?}");
        assert!(real.join(format!("{i}.up")).is_file(), "{w:?}");
    }
    let o = synth_to(
        &["archive", "-q", "-p", &s.pid(), "--no-kernel", "-o"],
        &link.join("cache"),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(real.join("sub/cache").is_dir());
    // relative: `-o name` and `-o ./x/../y` in the working directory
    for out in ["name.data", "./sub/../rel.data"] {
        let o = Command::new(bin())
            .args(["convert", "-q"])
            .arg(&rec)
            .args(["--to", "pipe", "-o", out])
            .current_dir(&real)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{out}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    assert!(real.join("name.data").is_file() && real.join("rel.data").is_file());
    // run by uid 65534: its own link to its own directory is followed
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = dir.join("home");
    std::fs::create_dir_all(home.join("d")).unwrap();
    std::os::unix::fs::chown(&home, Some(65534), Some(65534)).unwrap();
    std::os::unix::fs::chown(home.join("d"), Some(65534), Some(65534)).unwrap();
    let own = home.join("mine");
    std::os::unix::fs::symlink("d", &own).unwrap();
    std::os::unix::fs::lchown(&own, Some(65534), Some(65534)).unwrap();
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin())
        .args(["convert", "-q"])
        .arg(&rec)
        .args(["--to", "pipe", "-o"])
        .arg(own.join("out.data"))
        .output()
        .expect("run setpriv (util-linux)");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read(home.join("d/out.data"))
        .unwrap()
        .starts_with(b"PERFILE2"));
    assert!(leftovers(&real).is_empty() && leftovers(&real.join("sub")).is_empty());
}

/// Runs writer `w` (from [`writers`], record aside) to `out`, held by
/// `MMAP2_SYNTH_TEST_HOLD_BEFORE_OUTPUT` just before it makes its
/// temporary file beside `out` (after `-o` was checked); `meanwhile` runs
/// while it is held. Fails the test if it has not ended within 20 s.
fn write_held(w: &[String], out: &Path, meanwhile: impl FnOnce()) -> std::process::Output {
    // (beside -o's directory: that may go)
    let hold = out.parent().unwrap().with_extension("hold");
    let mut child = Command::new(bin())
        .args(w)
        .arg(out)
        .env("MMAP2_SYNTH_TEST_HOLD_BEFORE_OUTPUT", &hold)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the writer held before its output", || hold.exists());
    meanwhile();
    std::fs::remove_file(&hold).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{w:?} still running after 20 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// `-o`'s directory `d` replaced (after `-o` was checked, before the
/// temporary file is made in it) by what `swap` makes of it, for every
/// writer but record: each exits 2 with an `error:` naming `-o`.
fn raced_outputs_exit_2(name: &str, swap: impl Fn(&Path)) {
    let dir = scratch(name);
    let s = Sleeper::start();
    let rec = pin("rec-file.data");
    let mut w = writers(&s.pid(), &rec);
    w.pop();
    w.push(
        ["convert", "-q", rec.to_str().unwrap(), "--to", "file", "-o"]
            .map(String::from)
            .to_vec(),
    );
    for (i, w) in w.iter().enumerate() {
        let d = dir.join(format!("d{i}"));
        std::fs::create_dir(&d).unwrap();
        let out = d.join("out.data");
        let o = write_held(w, &out, || swap(&d));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{w:?}: {err}");
        assert!(err.starts_with("error: "), "{w:?}: {err}");
        assert!(err.contains(&out.display().to_string()), "{w:?}: {err}");
    }
}

// -o's directory removed after -o was checked, before the temporary file
// is made in it, is refused as bad input: exit 2 and an `error:` naming
// -o, for snapshot, merge, pprof and convert (it exited 1, as a failure
// of the system).
#[test]
fn an_output_directory_gone_before_the_temporary_file_exits_2() {
    raced_outputs_exit_2("out-raced-gone", |d| std::fs::remove_dir(d).unwrap());
}

// -o's directory swapped for another user's link (to a directory of
// root's) after -o was checked, before the temporary file is made, is
// refused: exit 2 naming -o (it exited 1), and nothing is made where the
// link points.
#[test]
#[ignore = "needs root (lchown)"]
fn an_output_directory_swapped_for_a_foreign_link_exits_2() {
    needs_root("lchown a link to another user");
    let target = scratch("out-raced-target");
    raced_outputs_exit_2("out-raced-link", |d| {
        std::fs::remove_dir(d).unwrap();
        std::os::unix::fs::symlink(&*target, d).unwrap();
        std::os::unix::fs::lchown(d, Some(65534), Some(65534)).unwrap();
    });
    assert_eq!(std::fs::read_dir(&*target).unwrap().count(), 0);
}

// `-o /dev/stdout` (a /proc fd link: `pipe:[N]`) is written through the
// descriptor itself, not opened again by its /proc path: run as nobody
// with stdout a pipe root made (mode 0600, root's), the output arrives
// (opening /proc/self/fd/1 again was refused, EACCES, exit 1); an fd
// open for reading only is refused, exit 2.
#[test]
#[ignore = "needs root (setpriv)"]
fn dev_stdout_is_the_descriptor_itself() {
    needs_root("run as nobody with root's pipe");
    let rec = pin("rec-file.data");
    let o = synth_as_nobody([
        "pprof".as_ref(),
        "-q".as_ref(),
        "--no-symbolize".as_ref(),
        rec.as_os_str(),
        "-o".as_ref(),
        "/dev/stdout".as_ref(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(o.stdout.starts_with(&[0x1f, 0x8b]), "a gzipped profile");
    // stdin a pipe's read end: not written into (a reopen made it a
    // write end of that pipe)
    let o = Command::new(bin())
        .args(["pprof", "-q", "--no-symbolize"])
        .arg(&rec)
        .args(["-o", "/dev/stdin"])
        .stdin(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("open for reading only"), "{err}");
}

// Another user cannot make an output fail by creating beforehand every
// temporary name a run of a guessed pid will try: the names' numbers are
// random (they were 0 to 100, and 101 planted names made the run fail
// with "File exists"). The shell plants them for its own pid, then execs
// the tool under that pid; the output replaces an existing file.
#[test]
fn planted_temporary_names_of_the_next_pid_do_not_stop_an_output() {
    let dir = scratch("out-planted");
    let s = Sleeper::start();
    let out = dir.join("out.data");
    std::fs::write(&out, b"old").unwrap();
    let script = format!(
        "for n in $(seq 0 100); do : > {d}/.m2s-$$-$n.tmp; done; exec {bin} -q -p {pid} -o {o}",
        d = q(&dir),
        bin = bin(),
        pid = s.pid(),
        o = q(&out),
    );
    let run = Command::new("sh").arg("-c").arg(&script).output().unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_ne!(std::fs::read(&out).unwrap(), b"old");
}
