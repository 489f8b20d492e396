//! Every task's head (pid, tgid, parent, flags, start time, comm) in one
//! read, from a BPF task iterator, instead of one `/proc/PID/stat` open per
//! process and one `comm` open per thread: at 2,000 processes those opens
//! cost about a sixth of the PROCMAP_QUERY walk itself.
//!
//! The program is built here, for this kernel's struct layout as its BTF
//! (`/sys/kernel/btf/vmlinux`) describes it: [`Layout`] and [`program`]
//! are pure, as is [`heads_of`], which groups the 80-byte records the
//! program writes into processes. [`read_records`] is the thin part that
//! loads, links and reads it. Pids are those of the reader's pid
//! namespace, as its /proc shows them. Kernel threads are left out: their
//! names in /proc are not `task->comm` (workqueue workers add what they
//! run), so they are read from /proc.
//!
//! Each record also carries the marks of the task's executable image (exe
//! file, start of code, vDSO address: [`ExeId`]): the scan uses a head read
//! here only once the process's maps show the same image, since the
//! process may exec, or its pid go to another, before its maps are read.
//!
//! `program.rs` builds the program, `heads.rs` decodes and groups what it
//! writes; this file loads, links and reads it.

mod heads;
mod program;

pub use heads::{heads_of, ExeId, Head, StartClock, TaskRecord};
pub use program::{program, Layout, RECORD};

use std::ffi::CStr;
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::btf::{Btf, BtfError};
use crate::sys;

/// Where the kernel describes its types.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Bytes of BTF read at most (vmlinux BTF is about 5 MiB).
const MAX_BTF: u64 = 64 << 20;

/// Tasks read at most (80 MiB of records): past this the scan reads /proc,
/// one process at a time, instead of holding every task's head.
pub const MAX_TASKS: usize = 1 << 20;

/// Why the task iterator cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TaskIterError {
    #[error("{path}: {source}")]
    ReadBtf { path: PathBuf, source: io::Error },
    #[error("{path}: {source}")]
    Btf { path: PathBuf, source: BtfError },
    #[error("{path}: no {what} in the kernel's BTF")]
    Missing { path: PathBuf, what: String },
    #[error("loading the task iterator program{log}: {source}")]
    Load { source: io::Error, log: String },
    #[error("starting the task iterator: {0}")]
    Start(io::Error),
    #[error("reading the task iterator at byte {offset}: {source}")]
    Read { offset: u64, source: io::Error },
    #[error("the task iterator's output ends mid-record ({0} bytes)")]
    Torn(u64),
    #[error("it is used only with the /proc of this pid namespace, and not with --uid")]
    NotHere,
    #[error("more than {MAX_TASKS} tasks")]
    TooMany,
}

/// The license the program is loaded under (the kernel allows
/// `bpf_seq_write` only to GPL-compatible programs).
const LICENSE: &CStr = c"Dual MIT/GPL";

/// Loads the task iterator for this kernel and reads every task once.
pub fn read_records(btf_path: &Path) -> Result<Vec<TaskRecord>, TaskIterError> {
    let layout = layout_read_ahead(btf_path).unwrap_or_else(|| layout_of(btf_path))?;
    let prog = load(&program(&layout), layout.iter_func)?;
    // ours, left out of the snapshot's BPF programs while it is loaded
    let _own = sys::bpf_prog_info(prog.as_fd())
        .ok()
        .map(|i| OwnIterator::hold(i.id));
    let link = sys::bpf_link_iter(prog.as_fd()).map_err(TaskIterError::Start)?;
    let iter = sys::bpf_iter_open(link.as_fd()).map_err(TaskIterError::Start)?;
    read_all(iter)
}

/// The ids of the task iterator programs this process has loaded now.
static OWN: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// The ids of this process's task iterators loaded now, which a snapshot
/// leaves out of its BPF programs (they live only while a scan runs).
pub fn own_iterators() -> Vec<u32> {
    OWN.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// One of [`own_iterators`], until dropped.
pub(crate) struct OwnIterator(u32);

impl OwnIterator {
    /// Notes program `id` as ours.
    pub(crate) fn hold(id: u32) -> OwnIterator {
        OWN.lock().unwrap_or_else(|e| e.into_inner()).push(id);
        OwnIterator(id)
    }
}

impl Drop for OwnIterator {
    fn drop(&mut self) {
        let mut own = OWN.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = own.iter().position(|&id| id == self.0) {
            own.swap_remove(i);
        }
    }
}

/// A [`Layout`] being read on a thread of its own ([`read_layout_ahead`]),
/// and from which BTF.
type Ahead = (
    PathBuf,
    std::thread::JoinHandle<Result<Layout, TaskIterError>>,
);

/// The layout read ahead, if one was started.
static AHEAD: std::sync::Mutex<Option<Ahead>> = std::sync::Mutex::new(None);

/// Starts reading this kernel's [`Layout`] from `btf_path` on a thread of
/// its own, for a scan that will likely load the iterator: the ~2 ms of
/// BTF then overlap the scan's set-up (its watch, the kernel's maps and
/// BPF programs, the listing of /proc) instead of coming after it. The
/// program itself is loaded only when the scan runs it, so a snapshot's
/// BPF programs never list it.
pub fn read_layout_ahead(btf_path: &Path) {
    let path = btf_path.to_path_buf();
    let at = path.clone();
    let Ok(h) = std::thread::Builder::new()
        .name("btf".into())
        .spawn(move || layout_of(&at))
    else {
        return;
    };
    *AHEAD.lock().unwrap_or_else(|e| e.into_inner()) = Some((path, h));
}

/// The layout [`read_layout_ahead`] read from `btf_path`, waited for.
fn layout_read_ahead(btf_path: &Path) -> Option<Result<Layout, TaskIterError>> {
    let (path, h) = AHEAD.lock().unwrap_or_else(|e| e.into_inner()).take()?;
    (path == btf_path).then(|| h.join().ok()).flatten()
}

/// This kernel's [`Layout`], from its BTF at `btf_path`.
fn layout_of(btf_path: &Path) -> Result<Layout, TaskIterError> {
    let read_err = |source| TaskIterError::ReadBtf {
        path: btf_path.to_path_buf(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(btf_path)
        .map_err(read_err)?;
    let meta = file.metadata().map_err(read_err)?;
    if !meta.is_file() {
        return Err(read_err(io::Error::other("not a regular file")));
    }
    // mapped where the kernel allows it (a copy costs 5 ms: sysfs reads
    // come a page at a time), else read
    let mapped = sys::KernelBlob::map(&file, meta.len().min(MAX_BTF) as usize);
    let mut data = Vec::new();
    let bytes = match &mapped {
        Ok(m) => m.bytes(),
        Err(_) => {
            file.take(MAX_BTF)
                .read_to_end(&mut data)
                .map_err(read_err)?;
            &data[..]
        }
    };
    let btf = Btf::parse(bytes).map_err(|source| TaskIterError::Btf {
        path: btf_path.to_path_buf(),
        source,
    })?;
    Layout::from_btf(&btf).map_err(|what| TaskIterError::Missing {
        path: btf_path.to_path_buf(),
        what,
    })
}

/// Loads the program; when the kernel refuses it, loads it again with the
/// verifier's log on, for the error to quote its last lines.
fn load(insns: &[u64], iter_func: u32) -> Result<std::os::fd::OwnedFd, TaskIterError> {
    let source = match sys::bpf_load_iter(insns, LICENSE, iter_func, &mut []) {
        Ok(fd) => return Ok(fd),
        Err(e) => e,
    };
    if source.raw_os_error() == Some(libc::EPERM) {
        let log = " (it needs root, or CAP_BPF with CAP_PERFMON)".to_string();
        return Err(TaskIterError::Load { source, log });
    }
    let mut log = vec![0u8; 1 << 16];
    if let Ok(fd) = sys::bpf_load_iter(insns, LICENSE, iter_func, &mut log) {
        return Ok(fd);
    }
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    let text = String::from_utf8_lossy(&log[..end]);
    let last: Vec<&str> = text.lines().rev().take(4).collect();
    let log = match last.is_empty() {
        true => String::new(),
        false => format!(
            " (verifier: {})",
            last.into_iter().rev().collect::<Vec<_>>().join(" / ")
        ),
    };
    Err(TaskIterError::Load { source, log })
}

/// Every record the iterator writes, at most [`MAX_TASKS`].
fn read_all(mut iter: std::fs::File) -> Result<Vec<TaskRecord>, TaskIterError> {
    let mut records = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    let (mut have, mut offset) = (0usize, 0u64);
    loop {
        let n = match iter.read(&mut buf[have..]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(source) => return Err(TaskIterError::Read { offset, source }),
        };
        offset += n as u64;
        have += n;
        let whole = have / RECORD * RECORD;
        if records.len() + whole / RECORD > MAX_TASKS {
            return Err(TaskIterError::TooMany);
        }
        for chunk in buf[..whole].chunks_exact(RECORD) {
            let rec: &[u8; RECORD] = chunk.try_into().expect("chunks_exact gives RECORD bytes");
            records.push(TaskRecord::parse(rec));
        }
        buf.copy_within(whole..have, 0);
        have -= whole;
    }
    if have != 0 {
        return Err(TaskIterError::Torn(offset));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::program::asm;
    use super::*;

    // A program the verifier refuses is an error quoting the verifier's
    // last lines, not a bare EACCES.
    #[test]
    #[ignore = "needs root and BPF"]
    fn refused_program_quotes_the_verifier() {
        let layout = layout_of(Path::new(VMLINUX_BTF)).unwrap();
        let mut a = asm::Asm::default();
        a.op(asm::LDX_DW, asm::R0, asm::R1, 64, 0); // past the context
        a.op(asm::EXIT, 0, 0, 0, 0);
        let err = load(&a.finish(), layout.iter_func).unwrap_err().to_string();
        assert!(
            err.contains("(verifier: ") && err.contains("invalid"),
            "{err}"
        );
    }

    /// The executable of `pid` as /proc gives it: the file `exe` names,
    /// stat's startcode (field 26: the 24th after the comm's ')') and the
    /// start of its `[vdso]` in maps.
    fn exe_from_proc(pid: u32, stat: &[u8]) -> ExeId {
        use std::os::unix::fs::MetadataExt;
        let exe = std::fs::metadata(format!("/proc/{pid}/exe")).unwrap();
        let after = &stat[stat.iter().rposition(|&b| b == b')').unwrap() + 2..];
        let fields: Vec<&[u8]> = after.split(|&b| b == b' ').collect();
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
        let vdso = maps
            .lines()
            .find(|l| l.ends_with("[vdso]"))
            .and_then(|l| u64::from_str_radix(l.split('-').next()?, 16).ok())
            .unwrap();
        ExeId {
            dev_major: libc::major(exe.dev()),
            dev_minor: libc::minor(exe.dev()),
            ino: exe.ino(),
            start_code: std::str::from_utf8(fields[23]).unwrap().parse().unwrap(),
            vdso,
        }
    }

    // Live: the iterator's heads for this test process (named threads) and
    // a child are what /proc/PID/stat and each thread's comm say, start
    // time, parent and executable (device, inode, start of code, vDSO) included.
    #[test]
    #[ignore = "needs root and BPF"]
    fn iterator_heads_are_what_proc_says() {
        let stop = std::sync::Arc::new(std::sync::Barrier::new(3));
        let threads: Vec<_> = ["th-one", "a b) (c"]
            .iter()
            .map(|name| {
                let stop = stop.clone();
                std::thread::Builder::new()
                    .name(name.to_string())
                    .spawn(move || {
                        stop.wait();
                    })
                    .unwrap()
            })
            .collect();
        let child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        // spawn returns once the exec cannot fail, before the new image has
        // its vDSO: wait for the image of sleep with one (a head read
        // mid-exec has no identity)
        let maps = format!("/proc/{}/maps", child.id());
        let execd = |m: String| m.contains("bin/sleep") && m.contains("[vdso]");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !std::fs::read_to_string(&maps).is_ok_and(execd) {
            assert!(std::time::Instant::now() < deadline, "sleep never exec'd");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let records =
            read_records(Path::new(VMLINUX_BTF)).expect("the task iterator loads (root, BTF)");
        let heads = heads_of(&records, StartClock::here());
        let proc_threads = |pid: u32| -> Vec<(u32, Vec<u8>)> {
            let tids = parse::list_ids(Path::new(&format!("/proc/{pid}/task"))).unwrap();
            let mut all: Vec<(u32, Vec<u8>)> = tids
                .iter()
                .filter_map(|t| {
                    let comm = std::fs::read(format!("/proc/{pid}/task/{t}/comm")).ok()?;
                    Some((*t, parse::parse_comm_file(&comm).to_vec()))
                })
                .collect();
            all.sort_by_key(|(t, _)| (*t != pid, *t));
            all
        };
        for pid in [std::process::id(), child.id()] {
            let head = heads
                .get(&pid)
                .unwrap_or_else(|| panic!("no head for {pid}"));
            let raw = std::fs::read(format!("/proc/{pid}/stat")).unwrap();
            let stat = parse::parse_stat(&raw).unwrap();
            let want = exe_from_proc(pid, &raw);
            assert_eq!(head.exe, Some(want), "executable of {pid}");
            let head = &head.process;
            assert_eq!(head.threads[0].comm, stat.comm, "comm of {pid}");
            let got = (head.threads[0].tid, head.ppid, head.start_time);
            assert_eq!(got, (pid, stat.ppid, stat.start_time), "{pid}");
            let got: Vec<(u32, Vec<u8>)> = head
                .threads
                .iter()
                .map(|t| (t.tid, t.comm.clone()))
                .collect();
            let want = proc_threads(pid);
            if pid == child.id() {
                assert_eq!(got, want, "threads of {pid}");
            } else {
                // other tests' threads come and go, and name themselves
                // after they start (between the two reads, once in CI):
                // ours, named before the iterator ran, agree
                let ours = |c: &[u8]| [&b"th-one"[..], b"a b) (c"].contains(&c);
                for (tid, comm) in got.iter().filter(|(_, c)| ours(c)) {
                    let theirs = want.iter().find(|(t, _)| t == tid);
                    assert_eq!(Some(comm), theirs.map(|(_, c)| c), "thread {tid}");
                }
                for name in ["th-one", "a b) (c"] {
                    assert!(
                        got.iter().any(|(_, c)| c == name.as_bytes()),
                        "{name}: {got:?}"
                    );
                }
            }
        }
        let mut child = child;
        child.kill().unwrap();
        child.wait().unwrap();
        stop.wait();
        for t in threads {
            t.join().unwrap();
        }
    }
}
