//! Snapshots processes (in parallel) and encodes them as perf records.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use rayon::prelude::*;

use crate::buildid::BuildIdCache;
use crate::proc::{self, PF_KTHREAD};
use crate::record::{
    self, misc, BuildIdEntry, Endian, Fork, Mmap2, Mmap2Id, RecordTooLarge, SampleId,
    SampleIdLayout,
};
use crate::source::{self, BuildIdPolicy, Source};
use crate::vma::{Selection, Vma};

/// Which processes to snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every process in /proc (except this tool itself).
    All,
    /// These pids.
    Pids(Vec<u32>),
    /// Every process whose real uid is this.
    Uid(u32),
}

/// Which VMA source to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceChoice {
    /// PROCMAP_QUERY, falling back to text when the kernel lacks it.
    Auto,
    /// Only PROCMAP_QUERY.
    Ioctl,
    /// Only text maps.
    Text,
}

/// Snapshot options.
#[derive(Debug, Clone)]
pub struct Options {
    /// Which VMAs.
    pub selection: Selection,
    /// Which source.
    pub source: SourceChoice,
    /// Resolve build ids.
    pub build_ids: bool,
    /// Worker threads (None = all cores).
    pub jobs: Option<usize>,
    /// Root of the proc filesystem (normally `/proc`).
    pub proc_root: PathBuf,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            selection: Selection::Exec,
            source: SourceChoice::Auto,
            build_ids: true,
            jobs: None,
            proc_root: PathBuf::from("/proc"),
        }
    }
}

/// One thread of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thread {
    /// Thread id.
    pub tid: u32,
    /// Thread name.
    pub comm: Vec<u8>,
}

/// What was read of one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    /// Process id (thread-group id).
    pub pid: u32,
    /// Parent pid.
    pub ppid: u32,
    /// Real uid.
    pub uid: u32,
    /// Kernel thread: gets COMM/FORK only.
    pub kernel_thread: bool,
    /// Start time in clock ticks after boot.
    pub start_time: u64,
    /// Threads, the leader first, then by tid.
    pub threads: Vec<Thread>,
    /// The leader's VMAs in address order.
    pub vmas: Vec<Vma>,
    /// Source of the VMAs (None for kernel threads).
    pub source: Option<Source>,
}

/// Why a process was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipReason {
    /// It exited during the scan (ENOENT / ESRCH).
    Vanished,
    /// Access denied (EACCES / EPERM).
    Denied,
    /// Any other error reading it.
    Failed,
}

impl SkipReason {
    fn of(e: &io::Error) -> SkipReason {
        match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ESRCH) => SkipReason::Vanished,
            Some(libc::EACCES) | Some(libc::EPERM) => SkipReason::Denied,
            _ => SkipReason::Failed,
        }
    }
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SkipReason::Vanished => "vanished",
            SkipReason::Denied => "denied",
            SkipReason::Failed => "failed",
        })
    }
}

/// A skipped process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    /// Its pid.
    pub pid: u32,
    /// Why.
    pub reason: SkipReason,
    /// The error text.
    pub detail: String,
}

/// The result of a scan.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Processes read, by pid.
    pub processes: Vec<Process>,
    /// Processes skipped, by pid.
    pub skipped: Vec<Skip>,
}

/// A fatal scan error (not a per-process one).
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    /// /proc could not be listed.
    #[error("cannot list {path}")]
    ListProc {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// `--source ioctl` on a kernel without PROCMAP_QUERY.
    #[error("this kernel has no PROCMAP_QUERY ioctl (Linux 6.11+); use --source text or auto")]
    NoIoctl,
    /// The worker pool could not be built.
    #[error("cannot start worker threads")]
    Pool(#[from] rayon::ThreadPoolBuildError),
}

enum Outcome {
    Read(Process),
    Skipped(Skip),
    NotSelected,
}

/// Reads the selected processes in parallel. The result is ordered by pid,
/// whatever the number of workers.
pub fn snapshot(target: &Target, opts: &Options) -> Result<Snapshot, ScanError> {
    let me = std::process::id();
    let pids = match target {
        Target::Pids(p) => {
            let mut p = p.clone();
            p.sort_unstable();
            p.dedup();
            p
        }
        Target::All | Target::Uid(_) => {
            let mut p = proc::list_ids(&opts.proc_root).map_err(|source| ScanError::ListProc {
                path: opts.proc_root.clone(),
                source,
            })?;
            p.retain(|&pid| pid != me);
            p
        }
    };
    let uid = match target {
        Target::Uid(u) => Some(*u),
        _ => None,
    };
    let cache = BuildIdCache::new();
    let no_ioctl = AtomicBool::new(opts.source == SourceChoice::Text);
    // No more workers than processes: a merge that needs one pid should not
    // start a thread per core.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = opts.jobs.unwrap_or(cores).min(pids.len()).max(1);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .build()?;
    let outcomes: Vec<Outcome> = pool.install(|| {
        pids.par_iter()
            .map(|&pid| read_process(pid, uid, opts, &cache, &no_ioctl))
            .collect()
    });
    if opts.source == SourceChoice::Ioctl && no_ioctl.load(Ordering::Relaxed) {
        return Err(ScanError::NoIoctl);
    }
    let mut snap = Snapshot::default();
    for o in outcomes {
        match o {
            Outcome::Read(p) => snap.processes.push(p),
            Outcome::Skipped(s) => snap.skipped.push(s),
            Outcome::NotSelected => {}
        }
    }
    Ok(snap)
}

fn read_process(
    pid: u32,
    uid: Option<u32>,
    opts: &Options,
    cache: &BuildIdCache,
    no_ioctl: &AtomicBool,
) -> Outcome {
    match try_read_process(pid, uid, opts, cache, no_ioctl) {
        Ok(Some(p)) => Outcome::Read(p),
        Ok(None) => Outcome::NotSelected,
        Err(e) => Outcome::Skipped(Skip {
            pid,
            reason: SkipReason::of(&e),
            detail: e.to_string(),
        }),
    }
}

fn try_read_process(
    pid: u32,
    uid: Option<u32>,
    opts: &Options,
    cache: &BuildIdCache,
    no_ioctl: &AtomicBool,
) -> io::Result<Option<Process>> {
    let dir = opts.proc_root.join(pid.to_string());
    let status = read_status(&dir.join("status"))?;
    if uid.is_some_and(|u| u != status.uid) {
        return Ok(None);
    }
    let stat = std::fs::read(dir.join("stat"))?;
    let stat = proc::parse_stat(&stat).map_err(|m| invalid(&dir.join("stat"), m))?;
    let kernel_thread = status.kthread.unwrap_or(stat.flags & PF_KTHREAD != 0);
    let mut tids = proc::list_ids(&dir.join("task"))?;
    tids.retain(|&t| t != pid);
    let mut threads = vec![Thread {
        tid: pid,
        comm: status.name.clone(),
    }];
    for tid in tids {
        // A thread that exits mid-scan is simply not there.
        match read_status(&dir.join("task").join(tid.to_string()).join("status")) {
            Ok(st) => threads.push(Thread { tid, comm: st.name }),
            Err(e) if SkipReason::of(&e) == SkipReason::Vanished => {}
            Err(e) => return Err(e),
        }
    }
    let (vmas, source) = if kernel_thread {
        (Vec::new(), None)
    } else {
        let (v, s) = read_vmas(pid, &threads, opts, cache, no_ioctl)?;
        (v, Some(s))
    };
    Ok(Some(Process {
        pid,
        ppid: status.ppid,
        uid: status.uid,
        kernel_thread,
        start_time: stat.start_time,
        threads,
        vmas,
        source,
    }))
}

fn invalid(path: &std::path::Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {what}", path.display()),
    )
}

fn read_status(path: &std::path::Path) -> io::Result<proc::Status> {
    let text = std::fs::read(path)?;
    proc::parse_status(&text).map_err(|m| invalid(path, m))
}

/// Reads the leader's VMAs; when the leader is a zombie (empty maps or ESRCH)
/// a live thread's maps are used instead.
fn read_vmas(
    pid: u32,
    threads: &[Thread],
    opts: &Options,
    cache: &BuildIdCache,
    no_ioctl: &AtomicBool,
) -> io::Result<(Vec<Vma>, Source)> {
    let ids = BuildIdPolicy {
        cache: opts.build_ids.then_some(cache),
        pid,
        proc_root: &opts.proc_root,
    };
    let mut fallback = None; // first empty or vanished result, if no thread has VMAs
    for t in threads {
        let path = opts
            .proc_root
            .join(pid.to_string())
            .join("task")
            .join(t.tid.to_string())
            .join("maps");
        let result = read_maps_file(&path, opts, ids, no_ioctl);
        match result {
            Ok((v, s)) if !v.is_empty() || threads.len() == 1 => return Ok((v, s)),
            Ok((v, s)) => {
                fallback.get_or_insert(Ok((v, s)));
            }
            Err(e) if SkipReason::of(&e) == SkipReason::Vanished => {
                fallback.get_or_insert(Err(e));
            }
            Err(e) => return Err(e),
        }
    }
    fallback.unwrap_or_else(|| Err(io::Error::from_raw_os_error(libc::ESRCH)))
}

fn read_maps_file(
    path: &std::path::Path,
    opts: &Options,
    ids: BuildIdPolicy<'_>,
    no_ioctl: &AtomicBool,
) -> io::Result<(Vec<Vma>, Source)> {
    let mut file = File::open(path)?;
    if !no_ioctl.load(Ordering::Relaxed) {
        match source::walk_ioctl(&file, opts.selection, ids) {
            Ok(v) => return Ok((v, Source::Ioctl)),
            Err(e) if e.raw_os_error() == Some(libc::ENOTTY) => {
                no_ioctl.store(true, Ordering::Relaxed);
                if opts.source == SourceChoice::Ioctl {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok((
        source::walk_text(&mut file, opts.selection, ids)?,
        Source::Text,
    ))
}

/// `MAP_HUGETLB`, set by perf for hugetlbfs mappings.
pub const MAP_HUGETLB: u32 = 0x40000;
/// Longest file name perf writes; longer ones become `//toolong`.
pub const PATH_MAX: usize = 4096;

/// The file name and extra flags perf writes for a VMA.
pub fn mmap_filename(vma: &Vma) -> (&[u8], u32) {
    if vma.name.is_empty() {
        (b"//anon", 0)
    } else if vma.name.starts_with(b"/anon_hugepage") {
        (b"//anon", MAP_HUGETLB)
    } else if vma.name.len() >= PATH_MAX {
        (b"//toolong", 0)
    } else {
        (&vma.name, 0)
    }
}

/// How records are encoded.
#[derive(Debug, Clone, Copy)]
pub struct Encoding {
    /// Byte order.
    pub endian: Endian,
    /// Trailer layout of the first attr.
    pub layout: SampleIdLayout,
    /// Id written in the trailer.
    pub id: u64,
    /// Write FORK records (system-wide snapshots).
    pub forks: bool,
    /// Fill the trailer's TID with the record's pid/tid (else zeros, as perf
    /// does for records it synthesizes into a recording).
    pub fill_tid: bool,
}

/// Encodes a snapshot in perf's per-process order: per thread (leader
/// first) FORK (if enabled) and COMM; after the leader's COMM its MMAP2s in
/// address order. Every record has time 0.
pub fn encode(snap: &Snapshot, enc: &Encoding, out: &mut Vec<u8>) -> Result<(), RecordTooLarge> {
    for p in &snap.processes {
        encode_process(p, enc, out)?;
    }
    Ok(())
}

/// Encodes one process (see [`encode`]).
pub fn encode_process(
    p: &Process,
    enc: &Encoding,
    out: &mut Vec<u8>,
) -> Result<(), RecordTooLarge> {
    let e = enc.endian;
    for (i, t) in p.threads.iter().enumerate() {
        let leader = i == 0;
        let sid = SampleId {
            pid: if enc.fill_tid { p.pid } else { 0 },
            tid: if enc.fill_tid { t.tid } else { 0 },
            id: enc.id,
            ..Default::default()
        };
        if enc.forks {
            let parent = if leader { p.ppid } else { p.pid };
            let f = Fork {
                pid: p.pid,
                ppid: parent,
                tid: t.tid,
                ptid: parent,
                time: 0,
            };
            record::encode_fork(out, e, &f, &enc.layout, &sid)?;
        }
        // A thread whose name is unknown (a snapshot file without its COMM)
        // gets none rather than an empty one that would rename it.
        if !t.comm.is_empty() {
            record::encode_comm(out, e, p.pid, t.tid, &t.comm, &enc.layout, &sid)?;
        }
        if leader {
            for vma in &p.vmas {
                let (filename, extra_flags) = mmap_filename(vma);
                let mut m = misc::USER;
                if !vma.perms.contains(crate::vma::Perms::EXEC) {
                    m |= misc::MMAP_DATA;
                }
                let id = match vma.build_id {
                    Some(b) => Mmap2Id::BuildId(b),
                    None => Mmap2Id::Inode {
                        maj: vma.dev_major,
                        min: vma.dev_minor,
                        ino: vma.inode,
                        ino_generation: 0,
                    },
                };
                let mm = Mmap2 {
                    misc: m,
                    pid: p.pid,
                    tid: p.pid,
                    addr: vma.start,
                    len: vma.len(),
                    pgoff: vma.offset,
                    id,
                    prot: vma.perms.prot(),
                    flags: vma.perms.map_flags() | extra_flags,
                    filename,
                };
                let sid = SampleId {
                    tid: if enc.fill_tid { p.pid } else { 0 },
                    ..sid
                };
                record::encode_mmap2(out, e, &mm, &enc.layout, &sid)?;
            }
        }
    }
    Ok(())
}

/// The BUILD_ID table for a snapshot: one entry per distinct (file name,
/// build id), sorted.
pub fn build_id_entries(snap: &Snapshot) -> Vec<BuildIdEntry> {
    let mut set = BTreeMap::new();
    for p in &snap.processes {
        for v in &p.vmas {
            if let Some(id) = v.build_id {
                set.insert((mmap_filename(v).0.to_vec(), id), ());
            }
        }
    }
    set.into_keys()
        .map(|(filename, build_id)| BuildIdEntry {
            cpumode: misc::USER,
            pid: -1,
            build_id,
            filename,
        })
        .collect()
}

/// Counts for the summary.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stats {
    /// Processes read.
    pub processes: usize,
    /// Of which kernel threads.
    pub kernel_threads: usize,
    /// Threads of the processes read.
    pub threads: usize,
    /// VMAs emitted.
    pub vmas: usize,
    /// Distinct file-backed DSOs (by name).
    pub dsos: usize,
    /// DSOs with a build id.
    pub build_ids_found: usize,
    /// DSOs without one.
    pub build_ids_missing: usize,
    /// Skips by reason.
    pub skipped: BTreeMap<SkipReason, usize>,
    /// Processes read per source.
    pub sources: BTreeMap<String, usize>,
}

impl Snapshot {
    /// Summary counts.
    pub fn stats(&self) -> Stats {
        let mut s = Stats::default();
        let mut dsos: BTreeMap<&[u8], bool> = BTreeMap::new();
        for p in &self.processes {
            s.processes += 1;
            s.kernel_threads += usize::from(p.kernel_thread);
            s.threads += p.threads.len();
            s.vmas += p.vmas.len();
            if let Some(src) = p.source {
                *s.sources.entry(src.to_string()).or_default() += 1;
            }
            for v in &p.vmas {
                if v.is_file_backed() || v.is_vdso() {
                    *dsos.entry(&v.name).or_default() |= v.build_id.is_some();
                }
            }
        }
        s.dsos = dsos.len();
        s.build_ids_found = dsos.values().filter(|&&f| f).count();
        s.build_ids_missing = s.dsos - s.build_ids_found;
        for k in &self.skipped {
            *s.skipped.entry(k.reason).or_default() += 1;
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buildid::BuildId;
    use crate::vma::Perms;

    fn vma(start: u64, name: &[u8], id: Option<BuildId>, perms: Perms) -> Vma {
        Vma {
            start,
            end: start + 0x1000,
            offset: 0,
            perms,
            dev_major: 8,
            dev_minor: 1,
            inode: if name.starts_with(b"/") { 7 } else { 0 },
            name: name.to_vec(),
            build_id: id,
        }
    }

    // Records come in perf's order: FORK, COMM, MMAP2s for the leader; FORK, COMM per thread.
    #[test]
    fn per_process_order() {
        let id = BuildId::new(&[1; 20]);
        let p = Process {
            pid: 10,
            ppid: 1,
            uid: 0,
            kernel_thread: false,
            start_time: 0,
            threads: vec![
                Thread {
                    tid: 10,
                    comm: b"a".to_vec(),
                },
                Thread {
                    tid: 11,
                    comm: b"b".to_vec(),
                },
            ],
            vmas: vec![
                vma(0x1000, b"/bin/a", id, Perms::READ | Perms::EXEC),
                vma(0x5000, b"", None, Perms::READ | Perms::WRITE),
            ],
            source: Some(Source::Ioctl),
        };
        let enc = Encoding {
            endian: Endian::Little,
            layout: SampleIdLayout::default(),
            id: 0,
            forks: true,
            fill_tid: true,
        };
        let mut out = Vec::new();
        encode_process(&p, &enc, &mut out).unwrap();
        let recs: Vec<_> = crate::perf_read::split_records(&out, Endian::Little).collect();
        let types: Vec<u32> = recs.iter().map(|(h, _)| h.type_).collect();
        // the second MMAP2 is the nameless data VMA
        assert_eq!(recs[3].0.misc, misc::USER | misc::MMAP_DATA);
        assert_eq!(&recs[3].1[64..70], b"//anon");
        use record::types::*;
        assert_eq!(types, vec![FORK, COMM, MMAP2, MMAP2, FORK, COMM]);
    }

    // perf's name rules: nameless -> //anon, hugetlb -> //anon + MAP_HUGETLB, huge -> //toolong.
    #[test]
    fn filename_rules() {
        let p = Perms::EXEC;
        assert_eq!(mmap_filename(&vma(0, b"", None, p)), (&b"//anon"[..], 0));
        assert_eq!(
            mmap_filename(&vma(0, b"/anon_hugepage (deleted)", None, p)),
            (&b"//anon"[..], MAP_HUGETLB)
        );
        let long = vec![b'a'; PATH_MAX];
        assert_eq!(mmap_filename(&vma(0, &long, None, p)).0, b"//toolong");
        assert_eq!(mmap_filename(&vma(0, b"[vdso]", None, p)).0, b"[vdso]");
    }
}
