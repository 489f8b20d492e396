//! Every task's head (pid, tgid, parent, flags, start time, comm) in one
//! read, from a BPF task iterator, instead of one `/proc/PID/stat` open per
//! process and one `comm` open per thread: at 2,000 processes those opens
//! cost about a sixth of the PROCMAP_QUERY walk itself.
//!
//! The program is built here, for this kernel's struct layout as its BTF
//! (`/sys/kernel/btf/vmlinux`) describes it: [`Layout`] and [`program`]
//! are pure, as is [`heads_of`], which groups the 48-byte records the
//! program writes into processes. [`read_heads`] is the thin part that
//! loads, links and reads it. Pids are those of the reader's pid
//! namespace, as its /proc shows them. Kernel threads are left out: their
//! names in /proc are not `task->comm` (workqueue workers add what they
//! run), so they are read from /proc.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::btf::{Btf, BtfError};
use super::parse::PF_KTHREAD;
use crate::model::{Process, Thread};
use crate::sys;

/// Where the kernel describes its types.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Bytes of BTF read at most (vmlinux BTF is about 5 MiB).
const MAX_BTF: u64 = 64 << 20;

/// Tasks read at most (48 MiB of records): past this the scan reads /proc,
/// one process at a time, instead of holding every task's head.
pub const MAX_TASKS: usize = 1 << 20;

/// What the program needs to know of this kernel's structs: byte offsets,
/// and the BTF id of the iterator's target function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// BTF id of `bpf_iter_task`, the target the program attaches to.
    pub iter_func: u32,
    /// `bpf_iter_meta.seq`.
    pub meta_seq: u32,
    /// `task_struct.{thread_pid, group_leader, real_parent, flags,
    /// start_boottime, comm}`.
    pub thread_pid: u32,
    pub group_leader: u32,
    pub real_parent: u32,
    pub flags: u32,
    pub start_boottime: u32,
    pub comm: u32,
    /// `pid.level` and `pid.numbers`, `sizeof(struct upid)`, `upid.nr`.
    pub pid_level: u32,
    pub pid_numbers: u32,
    pub upid_size: u32,
    pub upid_nr: u32,
}

/// Why the task iterator cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TaskIterError {
    #[error("{path}: {source}")]
    ReadBtf { path: PathBuf, source: io::Error },
    #[error("{path}: {source}")]
    Btf { path: PathBuf, source: BtfError },
    #[error("{path}: no {what} in the kernel's BTF")]
    Missing { path: PathBuf, what: &'static str },
    #[error("loading the task iterator program: {source}{log}")]
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

impl Layout {
    /// Finds every offset in `btf`; the name of the first that is missing
    /// otherwise.
    pub fn from_btf(btf: &Btf<'_>) -> Result<Layout, &'static str> {
        let task = btf.find("task_struct", false).ok_or("struct task_struct")?;
        let pid = btf.find("pid", false).ok_or("struct pid")?;
        let upid = btf.find("upid", false).ok_or("struct upid")?;
        let meta = btf
            .find("bpf_iter_meta", false)
            .ok_or("struct bpf_iter_meta")?;
        let off = |s: u32, name: &'static str| btf.member(s, name).map(|m| m.offset).ok_or(name);
        let comm = btf.member(task, "comm").ok_or("task_struct.comm")?;
        // the program copies comm as two 8-byte words
        if btf.array(comm.type_id).map(|a| a.0) != Some(16) {
            return Err("task_struct.comm of 16 bytes");
        }
        Ok(Layout {
            iter_func: btf
                .find("bpf_iter_task", true)
                .ok_or("function bpf_iter_task")?,
            meta_seq: off(meta, "seq")?,
            thread_pid: off(task, "thread_pid")?,
            group_leader: off(task, "group_leader")?,
            real_parent: off(task, "real_parent")?,
            flags: off(task, "flags")?,
            start_boottime: off(task, "start_boottime")?,
            comm: comm.offset,
            pid_level: off(pid, "level")?,
            pid_numbers: off(pid, "numbers")?,
            upid_size: btf.size_of(upid).ok_or("sizeof(struct upid)")?,
            upid_nr: off(upid, "nr")?,
        })
    }
}

/// BPF instruction building: opcodes, registers and labels.
mod asm {
    pub const R0: u8 = 0;
    pub const R1: u8 = 1;
    pub const R2: u8 = 2;
    pub const R3: u8 = 3;
    pub const R4: u8 = 4;
    pub const R6: u8 = 6;
    pub const R7: u8 = 7;
    pub const R8: u8 = 8;
    pub const R9: u8 = 9;
    pub const FP: u8 = 10;

    pub const LDX_W: u8 = 0x61;
    pub const LDX_DW: u8 = 0x79;
    pub const STX_W: u8 = 0x63;
    pub const STX_DW: u8 = 0x7b;
    pub const ST_W: u8 = 0x62;
    pub const MOV_K: u8 = 0xb7;
    pub const MOV_X: u8 = 0xbf;
    pub const ADD_K: u8 = 0x07;
    pub const ADD_X: u8 = 0x0f;
    pub const MUL_K: u8 = 0x27;
    pub const JEQ_K: u8 = 0x15;
    pub const JLT_X: u8 = 0xad;
    pub const CALL: u8 = 0x85;
    pub const EXIT: u8 = 0x95;

    /// Helpers: `bpf_get_current_task`, `bpf_probe_read_kernel`,
    /// `bpf_seq_write`.
    pub const CURRENT_TASK: i32 = 35;
    pub const PROBE_READ_KERNEL: i32 = 113;
    pub const SEQ_WRITE: i32 = 127;

    /// A program being written: jumps name a label, resolved by `finish`.
    #[derive(Default)]
    pub struct Asm {
        insns: Vec<(u8, u8, u8, i16, i32)>,
        jumps: Vec<(usize, usize)>,
        labels: Vec<Option<usize>>,
    }

    impl Asm {
        pub fn op(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
            self.insns.push((code, dst, src, off, imm));
        }
        pub fn label(&mut self) -> usize {
            self.labels.push(None);
            self.labels.len() - 1
        }
        pub fn here(&mut self, label: usize) {
            self.labels[label] = Some(self.insns.len());
        }
        pub fn jump(&mut self, code: u8, dst: u8, src: u8, imm: i32, label: usize) {
            self.jumps.push((self.insns.len(), label));
            self.op(code, dst, src, 0, imm);
        }
        /// The instructions as the kernel reads them (native byte order,
        /// register nibbles in the order of the C bitfields).
        pub fn finish(mut self) -> Vec<u64> {
            for &(at, label) in &self.jumps {
                let to = self.labels[label].expect("every label is placed");
                self.insns[at].3 = (to as isize - at as isize - 1) as i16;
            }
            self.insns
                .iter()
                .map(|&(code, dst, src, off, imm)| {
                    let regs = if cfg!(target_endian = "little") {
                        dst | (src << 4)
                    } else {
                        (dst << 4) | src
                    };
                    let mut b = [0u8; 8];
                    b[0] = code;
                    b[1] = regs;
                    b[2..4].copy_from_slice(&off.to_ne_bytes());
                    b[4..8].copy_from_slice(&imm.to_ne_bytes());
                    u64::from_ne_bytes(b)
                })
                .collect()
        }
    }
}

/// Bytes per task the program writes: tid, tgid, ppid, flags (u32 each),
/// start_boottime (u64), comm (16), the reader's namespace level (u32), 0.
pub const RECORD: usize = 48;

/// Where the record is built on the program's stack, and two scratch
/// slots below it.
const REC: i16 = -(RECORD as i16);
const SPILL: i16 = REC - 8;
const TMP: i16 = REC - 16;

/// The iterator program for `l`: for each task, its pids in the reader's
/// pid namespace (0 where not visible there), flags, start time and comm,
/// as one [`RECORD`] written to the iterator's output.
///
/// Every field is read with `bpf_probe_read_kernel` from the task's
/// address as a plain number, not by dereferencing the typed pointer the
/// iterator passes: the verifier checks each typed pointer it follows
/// against lists it finds by a linear search of the kernel's BTF (about
/// 8 ms a pointer here), where a helper call costs it nothing. A read that
/// faults yields zeros.
pub fn program(l: &Layout) -> Vec<u64> {
    use asm::*;
    let mut a = Asm::default();
    let out = a.label();
    let i = |x: u32| x as i32;
    // *(dst on the stack) = size bytes at src_reg + src_off
    let probe = |a: &mut Asm, dst: i16, size: i32, src: u8, src_off: i32| {
        a.op(MOV_X, R3, src, 0, 0);
        if src_off != 0 {
            a.op(ADD_K, R3, 0, 0, src_off);
        }
        a.op(MOV_X, R1, FP, 0, 0);
        a.op(ADD_K, R1, 0, 0, dst as i32);
        a.op(MOV_K, R2, 0, 0, size);
        a.op(CALL, 0, 0, 0, PROBE_READ_KERNEL);
    };
    // reg = the pointer at reg_src + off
    let follow = |a: &mut Asm, dst: u8, src: u8, off: u32| {
        probe(a, TMP, 8, src, i(off));
        a.op(LDX_DW, dst, FP, TMP, 0);
    };
    a.op(LDX_DW, R6, R1, 0, 0); // meta
    a.op(LDX_DW, R7, R1, 8, 0); // task, or NULL at the end
    a.jump(JEQ_K, R7, 0, 0, out);
    a.op(LDX_DW, R6, R6, l.meta_seq as i16, 0); // the seq_file to write to
                                                // r7: the task's address as a number (through a copy on the stack)
    a.op(STX_DW, FP, R7, SPILL, 0);
    probe(&mut a, TMP, 8, FP, SPILL as i32);
    a.op(LDX_DW, R7, FP, TMP, 0);
    // r9: the level of the reader's pid namespace
    a.op(CALL, 0, 0, 0, CURRENT_TASK);
    follow(&mut a, R8, R0, l.thread_pid);
    probe(&mut a, TMP, 4, R8, i(l.pid_level));
    a.op(LDX_W, R9, FP, TMP, 0);
    // the number at level r9 of the pid of the task at r8, into REC + at
    let ns_pid = |a: &mut Asm, at: i16| {
        let done = a.label();
        a.op(ST_W, FP, 0, REC + at, 0);
        follow(a, R8, R8, l.thread_pid);
        a.jump(JEQ_K, R8, 0, 0, done);
        probe(a, TMP, 4, R8, i(l.pid_level));
        a.op(LDX_W, R2, FP, TMP, 0);
        a.jump(JLT_X, R2, R9, 0, done); // not visible in the reader's namespace
        a.op(MOV_X, R4, R9, 0, 0);
        a.op(MUL_K, R4, 0, 0, i(l.upid_size));
        a.op(ADD_X, R4, R8, 0, 0);
        probe(a, REC + at, 4, R4, i(l.pid_numbers + l.upid_nr));
        a.here(done);
    };
    a.op(MOV_X, R8, R7, 0, 0);
    ns_pid(&mut a, 0);
    follow(&mut a, R8, R7, l.group_leader);
    ns_pid(&mut a, 4);
    follow(&mut a, R8, R7, l.real_parent);
    follow(&mut a, R8, R8, l.group_leader);
    ns_pid(&mut a, 8);
    probe(&mut a, REC + 12, 4, R7, i(l.flags));
    probe(&mut a, REC + 16, 8, R7, i(l.start_boottime));
    probe(&mut a, REC + 24, 16, R7, i(l.comm));
    a.op(STX_W, FP, R9, REC + 40, 0);
    a.op(ST_W, FP, 0, REC + 44, 0);
    a.op(MOV_X, R1, R6, 0, 0);
    a.op(MOV_X, R2, FP, 0, 0);
    a.op(ADD_K, R2, 0, 0, REC as i32);
    a.op(MOV_K, R3, 0, 0, RECORD as i32);
    a.op(CALL, 0, 0, 0, SEQ_WRITE);
    a.here(out);
    a.op(MOV_K, R0, 0, 0, 0);
    a.op(EXIT, 0, 0, 0, 0);
    a.finish()
}

/// One task as the program wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskRecord {
    pub tid: u32,
    pub tgid: u32,
    pub ppid: u32,
    pub flags: u32,
    pub start_boottime: u64,
    pub comm: [u8; 16],
    /// The reader's pid namespace level.
    pub level: u32,
}

impl TaskRecord {
    /// Decodes a record (native byte order: the kernel wrote it).
    pub fn parse(b: &[u8; RECORD]) -> TaskRecord {
        let u32_at = |at: usize| u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let mut start = [0u8; 8];
        start.copy_from_slice(&b[16..24]);
        let mut comm = [0u8; 16];
        comm.copy_from_slice(&b[24..40]);
        TaskRecord {
            tid: u32_at(0),
            tgid: u32_at(4),
            ppid: u32_at(8),
            flags: u32_at(12),
            start_boottime: u64::from_ne_bytes(start),
            comm,
            level: u32_at(40),
        }
    }

    /// The name as /proc shows a user task's: up to the first NUL.
    fn name(&self) -> Vec<u8> {
        let end = self.comm.iter().position(|&b| b == 0).unwrap_or(16);
        self.comm[..end].to_vec()
    }
}

/// How a task's boot-clock start time becomes `/proc/PID/stat`'s: the
/// reader's time namespace offset, added, then clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartClock {
    pub boottime_offset_ns: i64,
    pub ticks_per_second: u64,
}

impl StartClock {
    /// This process's: its time namespace's boot-clock offset (from
    /// `/proc/self/timens_offsets`; none without time namespaces) and
    /// `sysconf(_SC_CLK_TCK)`.
    pub fn here() -> StartClock {
        let offsets = std::fs::read("/proc/self/timens_offsets").unwrap_or_default();
        StartClock {
            boottime_offset_ns: boottime_offset(&offsets),
            ticks_per_second: sys::clock_ticks_per_second(),
        }
    }

    fn ticks(&self, start_boottime: u64) -> u64 {
        let ns = start_boottime.saturating_add_signed(self.boottime_offset_ns);
        ns / (1_000_000_000 / self.ticks_per_second.clamp(1, 1_000_000_000))
    }
}

/// The boot-clock offset in `timens_offsets` text ("boottime SECS NSECS"
/// lines), in nanoseconds; 0 when absent or unreadable.
fn boottime_offset(text: &[u8]) -> i64 {
    let text = String::from_utf8_lossy(text);
    for line in text.lines() {
        let mut f = line.split_whitespace();
        if f.next() == Some("boottime") {
            let secs: i64 = f.next().and_then(|s| s.parse().ok()).unwrap_or(0);
            let nsecs: i64 = f.next().and_then(|s| s.parse().ok()).unwrap_or(0);
            return secs.saturating_mul(1_000_000_000).saturating_add(nsecs);
        }
    }
    0
}

/// The heads of user processes (no VMAs yet) from task records in any
/// order: each process's threads leader first, then by tid, as the /proc
/// reader lists them. Processes whose leader was not seen, tasks not
/// visible in the namespace (pid 0) and kernel threads are left out (the
/// scan reads those from /proc).
pub fn heads_of(records: &[TaskRecord], clock: StartClock) -> BTreeMap<u32, Process> {
    let mut by_tgid: BTreeMap<u32, Vec<&TaskRecord>> = BTreeMap::new();
    for r in records {
        if r.tid != 0 && r.tgid != 0 && u64::from(r.flags) & PF_KTHREAD == 0 {
            by_tgid.entry(r.tgid).or_default().push(r);
        }
    }
    let mut heads = BTreeMap::new();
    for (tgid, mut tasks) in by_tgid {
        tasks.sort_by_key(|t| (t.tid != tgid, t.tid));
        tasks.dedup_by_key(|t| t.tid);
        let leader = tasks[0];
        if leader.tid != tgid {
            continue;
        }
        heads.insert(
            tgid,
            Process {
                pid: tgid,
                ppid: leader.ppid,
                kernel_thread: false,
                start_time: clock.ticks(leader.start_boottime),
                threads: tasks
                    .iter()
                    .map(|t| Thread {
                        tid: t.tid,
                        comm: t.name(),
                    })
                    .collect(),
                vmas: Vec::new(),
                source: None,
            },
        );
    }
    heads
}

/// The license the program is loaded under (the kernel allows
/// `bpf_seq_write` only to GPL-compatible programs).
const LICENSE: &CStr = c"Dual MIT/GPL";

/// Loads the task iterator for this kernel and reads every task once.
pub fn read_records(btf_path: &Path) -> Result<Vec<TaskRecord>, TaskIterError> {
    let layout = layout_of(btf_path)?;
    let prog = load(&program(&layout), layout.iter_func)?;
    let link = sys::bpf_link_iter(prog.as_fd()).map_err(TaskIterError::Start)?;
    let iter = sys::bpf_iter_open(link.as_fd()).map_err(TaskIterError::Start)?;
    read_all(iter)
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
    use super::*;

    fn rec(tid: u32, tgid: u32, comm: &str) -> TaskRecord {
        let mut c = [0u8; 16];
        c[..comm.len()].copy_from_slice(comm.as_bytes());
        TaskRecord {
            tid,
            tgid,
            ppid: 1,
            flags: 0,
            start_boottime: 2_500_000_000,
            comm: c,
            level: 0,
        }
    }

    const CLOCK: StartClock = StartClock {
        boottime_offset_ns: 0,
        ticks_per_second: 100,
    };

    // Threads group under their process, leader first then by tid; kernel
    // threads, pids not visible (0) and processes without their leader are
    // left to /proc; start times become clock ticks.
    #[test]
    fn heads_group_threads_leader_first() {
        let mut kthread = rec(2, 2, "kthreadd");
        kthread.flags = PF_KTHREAD as u32;
        let records = [
            rec(12, 10, "w2"),
            rec(10, 10, "main"),
            rec(11, 10, "a b) (c"),
            kthread,
            rec(0, 0, "hidden"),
            rec(21, 20, "orphan thread"),
            rec(30, 30, "fifteen-chars-x"),
        ];
        let heads = heads_of(&records, CLOCK);
        assert_eq!(heads.keys().copied().collect::<Vec<_>>(), vec![10, 30]);
        let p = &heads[&10];
        let threads: Vec<(u32, &[u8])> = p.threads.iter().map(|t| (t.tid, &t.comm[..])).collect();
        assert_eq!(
            threads,
            vec![(10, &b"main"[..]), (11, b"a b) (c"), (12, b"w2")]
        );
        assert_eq!((p.ppid, p.start_time, p.kernel_thread), (1, 250, false));
        assert_eq!(heads[&30].threads[0].comm, b"fifteen-chars-x");
    }

    // The time namespace offset is read from its "boottime" line and moves
    // start times as /proc/PID/stat shows them in that namespace.
    #[test]
    fn time_namespace_offset_moves_start_times() {
        let off = boottime_offset(b"monotonic 0 0\nboottime 3 500000000\n");
        assert_eq!(off, 3_500_000_000);
        assert_eq!(boottime_offset(b"garbage"), 0);
        let clock = StartClock {
            boottime_offset_ns: off,
            ticks_per_second: 100,
        };
        assert_eq!(clock.ticks(1_000_000_000), 450);
    }

    // Jumps land inside the program and it ends with `exit`, for layouts
    // with small and large offsets.
    #[test]
    fn program_jumps_stay_inside() {
        let l = Layout {
            iter_func: 1,
            meta_seq: 0,
            thread_pid: 1368,
            group_leader: 1328,
            real_parent: 1280,
            flags: 44,
            start_boottime: 1560,
            comm: 1752,
            pid_level: 4,
            pid_numbers: 144,
            upid_size: 16,
            upid_nr: 0,
        };
        let p = program(&l);
        assert_eq!(p.last().unwrap().to_ne_bytes()[0], 0x95);
        for (at, insn) in p.iter().enumerate() {
            let b = insn.to_ne_bytes();
            if b[0] & 0x07 == 0x05 && b[0] != 0x85 && b[0] != 0x95 {
                let off = i16::from_ne_bytes([b[2], b[3]]) as isize;
                let to = at as isize + 1 + off;
                assert!(to > at as isize && (to as usize) < p.len(), "jump at {at}");
            }
        }
    }

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

    // Live: the iterator's heads for this test process (named threads) and
    // a child are what /proc/PID/stat and each thread's comm say, start
    // time and parent included.
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
            let stat = std::fs::read(format!("/proc/{pid}/stat")).unwrap();
            let stat = parse::parse_stat(&stat).unwrap();
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
                // other tests' threads come and go: those in both agree
                for (tid, comm) in &got {
                    if let Some((_, c)) = want.iter().find(|(t, _)| t == tid) {
                        assert_eq!(comm, c, "thread {tid}");
                    }
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
