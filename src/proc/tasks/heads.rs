//! The records the program writes, decoded, and grouped into process
//! heads as the /proc reader would make them. Pure but for
//! [`StartClock::here`], which reads this process's time namespace.

use std::collections::BTreeMap;

use super::super::clock;
use super::super::parse::{PF_KTHREAD, PF_RANDOMIZE};
use super::program::RECORD;
use crate::model::{Process, Thread, Vma};
use crate::sys;

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
    /// Its executable, when it has one and it can tell an exec or a new
    /// process from this one ([`ExeId::telling`]).
    pub exe: Option<ExeId>,
}

/// What identifies a process's executable image: the device and inode of
/// its exe file, where the kernel put the start of its code, and where it
/// put the vDSO. A process that execs gets another: another file, or,
/// with address randomization, another vDSO address (and for a
/// position-independent program another code address); so does another
/// process given the same pid, unless it is a fork child of the same
/// image (see the README). The scan checks it against the maps it reads:
/// a head read before the scan is used only if its process still runs
/// that image ([`ExeId::is_in`], [`ExeId::is_vdso`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExeId {
    pub dev_major: u32,
    pub dev_minor: u32,
    pub ino: u64,
    pub start_code: u64,
    pub vdso: u64,
}

impl ExeId {
    /// Whether this identity can tell the image it was read from from a
    /// later one: only for an image exec'd with randomized addresses
    /// (`PF_RANDOMIZE` in the task's `flags`), with an exe file and a vDSO.
    /// An image exec'd without randomization maps the same file and vDSO
    /// at the same places when exec'd again: its head is read from /proc.
    pub fn telling(&self, flags: u32) -> bool {
        self.ino != 0 && self.vdso != 0 && u64::from(flags) & PF_RANDOMIZE != 0
    }

    /// Whether `v` is the vDSO this image got.
    pub fn is_vdso(&self, v: &Vma) -> bool {
        v.start == self.vdso && v.inode == 0 && v.is_vdso()
    }

    /// Whether `v` maps this executable at its start of code.
    pub fn is_in(&self, v: &Vma) -> bool {
        v.inode == self.ino
            && v.dev_major == self.dev_major
            && v.dev_minor == self.dev_minor
            && (v.start..v.end).contains(&self.start_code)
    }
}

/// A process's head read ahead, and its executable's identity to check it
/// by (none for a process without an executable: its head is not used).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub process: Process,
    pub exe: Option<ExeId>,
}

impl TaskRecord {
    /// Decodes a record (native byte order: the kernel wrote it).
    pub fn parse(b: &[u8; RECORD]) -> TaskRecord {
        let u32_at = |at: usize| u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let u64_at = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            u64::from_ne_bytes(w)
        };
        let mut comm = [0u8; 16];
        comm.copy_from_slice(&b[24..40]);
        // the kernel's dev_t: 12 bits of major above 20 of minor
        let dev = u32_at(64);
        let exe = ExeId {
            dev_major: dev >> 20,
            dev_minor: dev & 0xf_ffff,
            ino: u64_at(56),
            start_code: u64_at(48),
            vdso: u64_at(72),
        };
        let flags = u32_at(12);
        TaskRecord {
            tid: u32_at(0),
            tgid: u32_at(4),
            ppid: u32_at(8),
            flags,
            start_boottime: u64_at(16),
            comm,
            level: u32_at(40),
            exe: exe.telling(flags).then_some(exe),
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
        let offsets = clock::timens_offsets_text();
        StartClock {
            boottime_offset_ns: clock::timens_offset(&offsets, "boottime"),
            ticks_per_second: sys::clock_ticks_per_second(),
        }
    }

    /// As `/proc/PID/stat` computes it: the offset added in 64 bits, so a
    /// task started before a negative offset's reach wraps, as there.
    fn ticks(&self, start_boottime: u64) -> u64 {
        let ns = start_boottime.wrapping_add_signed(self.boottime_offset_ns);
        ns / (1_000_000_000 / self.ticks_per_second.clamp(1, 1_000_000_000))
    }
}

/// The heads of user processes (no VMAs yet) from task records in any
/// order: each process's threads leader first, then by tid, as the /proc
/// reader lists them. Processes whose leader was not seen, tasks not
/// visible in the namespace (pid 0) and kernel threads are left out (the
/// scan reads those from /proc).
pub fn heads_of(records: &[TaskRecord], clock: StartClock) -> BTreeMap<u32, Head> {
    // one sort of every task (process, leader first, then by tid), then a
    // pass over each process's run: no list per process
    let mut tasks: Vec<&TaskRecord> = records
        .iter()
        .filter(|r| r.tid != 0 && r.tgid != 0 && u64::from(r.flags) & PF_KTHREAD == 0)
        .collect();
    tasks.sort_unstable_by_key(|t| (t.tgid, t.tid != t.tgid, t.tid));
    tasks.dedup_by_key(|t| (t.tgid, t.tid));
    let mut heads = Vec::new();
    for run in tasks.chunk_by(|a, b| a.tgid == b.tgid) {
        let (tgid, leader) = (run[0].tgid, run[0]);
        if leader.tid != tgid {
            continue;
        }
        let process = Process {
            pid: tgid,
            ppid: leader.ppid,
            kernel_thread: false,
            start_time: clock.ticks(leader.start_boottime),
            threads: run
                .iter()
                .map(|t| Thread {
                    tid: t.tid,
                    comm: t.name(),
                })
                .collect(),
            vmas: Vec::new(),
            source: None,
            read_times: Default::default(),
        };
        // a zombie leader has no mm left: its threads share the one it had
        let exe = run.iter().find_map(|t| t.exe);
        heads.push((tgid, Head { process, exe }));
    }
    // in key order already: built in one pass
    heads.into_iter().collect()
}

#[cfg(test)]
mod tests {
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
            exe: None,
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
        let p = &heads[&10].process;
        let threads: Vec<(u32, &[u8])> = p.threads.iter().map(|t| (t.tid, &t.comm[..])).collect();
        assert_eq!(
            threads,
            vec![(10, &b"main"[..]), (11, b"a b) (c"), (12, b"w2")]
        );
        assert_eq!((p.ppid, p.start_time, p.kernel_thread), (1, 250, false));
        assert_eq!(heads[&30].process.threads[0].comm, b"fifteen-chars-x");
    }

    /// A record as the program writes it, with an executable at
    /// `start_code`, a vDSO at `vdso` and these task flags.
    fn bytes(tid: u32, start_code: u64, vdso: u64, flags: u32) -> [u8; RECORD] {
        let mut b = [0u8; RECORD];
        b[0..4].copy_from_slice(&tid.to_ne_bytes());
        b[4..8].copy_from_slice(&tid.to_ne_bytes());
        b[12..16].copy_from_slice(&flags.to_ne_bytes());
        b[24..28].copy_from_slice(b"prog");
        b[48..56].copy_from_slice(&start_code.to_ne_bytes());
        b[56..64].copy_from_slice(&77u64.to_ne_bytes());
        b[64..68].copy_from_slice(&(8u32 << 20 | 3).to_ne_bytes());
        b[72..80].copy_from_slice(&vdso.to_ne_bytes());
        b
    }

    // An executable identifies an image only when the image was exec'd
    // with randomized addresses (PF_RANDOMIZE) and has a vDSO; a zombie
    // leader takes its threads' identity; the code VMA must cover the
    // start of code, the vDSO VMA start where the vDSO was.
    #[test]
    fn only_randomized_images_confirm_heads() {
        let (code, vdso) = (0x40_1000, 0x7fff_1234_5000);
        let r = TaskRecord::parse(&bytes(10, code, vdso, PF_RANDOMIZE as u32));
        let want = ExeId {
            dev_major: 8,
            dev_minor: 3,
            ino: 77,
            start_code: code,
            vdso,
        };
        assert_eq!(r.exe, Some(want));
        assert_eq!(TaskRecord::parse(&bytes(10, code, vdso, 0)).exe, None);
        assert_eq!(
            TaskRecord::parse(&bytes(10, code, 0, PF_RANDOMIZE as u32)).exe,
            None
        );
        assert_eq!(heads_of(&[r], CLOCK)[&10].exe, Some(want));
        let mut zombie = TaskRecord::parse(&bytes(10, 0, 0, PF_RANDOMIZE as u32));
        zombie.tid = 10;
        let mut thread = r;
        thread.tid = 11;
        assert_eq!(heads_of(&[zombie, thread], CLOCK)[&10].exe, Some(want));
        let v = |start: u64, end: u64, inode: u64, name: &[u8]| Vma {
            start,
            end,
            offset: 0,
            perms: Default::default(),
            dev_major: 8,
            dev_minor: 3,
            inode,
            name: name.into(),
            build_id: None,
        };
        assert!(want.is_in(&v(code - 0x1000, code + 0x1000, 77, b"/x")));
        assert!(!want.is_in(&v(code + 0x1000, code + 0x2000, 77, b"/x")));
        assert!(!want.is_in(&v(code - 0x1000, code + 0x1000, 78, b"/x")));
        assert!(want.is_vdso(&v(vdso, vdso + 0x2000, 0, b"[vdso]")));
        assert!(!want.is_vdso(&v(vdso + 0x1000, vdso + 0x2000, 0, b"[vdso]")));
        assert!(!want.is_vdso(&v(vdso, vdso + 0x2000, 0, b"[vvar]")));
    }

    // The time namespace's boot-clock offset moves start times as
    // /proc/PID/stat shows them in that namespace.
    #[test]
    fn time_namespace_offset_moves_start_times() {
        let clock = StartClock {
            boottime_offset_ns: 3_500_000_000,
            ticks_per_second: 100,
        };
        assert_eq!(clock.ticks(1_000_000_000), 450);
        // a negative offset larger than the start wraps, as the kernel's sum
        let back = StartClock {
            boottime_offset_ns: -3_000_000_000,
            ticks_per_second: 100,
        };
        assert_eq!(
            back.ticks(1_000_000_000),
            (u64::MAX - 1_999_999_999) / 10_000_000
        );
    }
}
