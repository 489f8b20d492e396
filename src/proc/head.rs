//! A process's head from /proc: `stat` alone (comm, ppid, flags, thread
//! count, start time), plus `status` only to select by uid, and the task
//! directory and each thread's `comm` only when it has more than one
//! thread.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use super::options::Options;
use super::parse::{self, ProcParseError, PF_KTHREAD};
use super::skip::SkipReason;
use crate::model::{Process, ReadTimes, Thread};

/// Reads one process from `stat` alone (comm, ppid, flags, thread count,
/// start time), plus `status` only to select by uid, and the task directory
/// and each thread's `comm` only when it has more than one thread: all but
/// its maps.
pub(super) fn read_head(pid: u32, uid: Option<u32>, opts: &Options) -> io::Result<Option<Process>> {
    let dir = opts.proc_root.join(pid.to_string());
    if let Some(want) = uid {
        let path = dir.join("status");
        let text = std::fs::read(&path)?;
        let status = parse::parse_status(&text).map_err(|m| invalid(&path, m))?;
        if status.uid != want {
            return Ok(None);
        }
    }
    let mut buf = [0u8; SMALL_FILE];
    let path = dir.join("stat");
    let stat = parse::parse_stat(read_small(&path, &mut buf)?).map_err(|m| invalid(&path, m))?;
    let kernel_thread = stat.flags & PF_KTHREAD != 0;
    let mut threads = vec![Thread {
        tid: pid,
        comm: stat.comm.to_vec(),
    }];
    let (ppid, start_time) = (stat.ppid, stat.start_time);
    if stat.num_threads > 1 {
        let task = dir.join("task");
        for tid in parse::list_ids(&task)? {
            if tid == pid {
                continue;
            }
            // A thread that exits mid-scan is simply not there.
            let mut buf = [0u8; SMALL_FILE];
            match read_small(&task.join(tid.to_string()).join("comm"), &mut buf) {
                Ok(text) => threads.push(Thread {
                    tid,
                    comm: parse::parse_comm_file(text).to_vec(),
                }),
                Err(e) if SkipReason::of(&e) == SkipReason::Vanished => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(Some(Process {
        pid,
        ppid,
        kernel_thread,
        start_time,
        threads,
        vmas: Vec::new(),
        source: None,
        read_times: ReadTimes::default(),
    }))
}

/// Room for a `stat` or `comm` file (a stat line is at most ~1.2 KB: 52
/// numbers and a 64-byte kernel thread name).
const SMALL_FILE: usize = 4096;

/// Reads a small /proc file into `buf` with as few system calls as the
/// kernel allows: procfs hands a one-line file over in one read, so a read
/// that ends its line is the whole file. A file that fills `buf` is bad data.
fn read_small<'b>(path: &Path, buf: &'b mut [u8; SMALL_FILE]) -> io::Result<&'b [u8]> {
    let mut f = File::open(path)?;
    let mut n = 0;
    loop {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => {
                n += k;
                if n == buf.len() {
                    return Err(invalid_len(path));
                }
                if buf[n - 1] == b'\n' {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(&buf[..n])
}

fn invalid_len(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: longer than {SMALL_FILE} bytes", path.display()),
    )
}

/// A /proc file that does not parse, as an I/O error (the process is
/// skipped as "failed", naming the file).
fn invalid(path: &Path, source: ProcParseError) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {source}", path.display()),
    )
}
