//! The data model every stage shares: build ids, file identities, VMAs and
//! the processes read from /proc. Plain values; depends on nothing of ours.

/// The most bytes an MMAP2 record or a BUILD_ID table entry can carry.
pub const MAX_BUILD_ID: usize = 20;

/// A build id of 1..=20 bytes: what fits in MMAP2's build-id form.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BuildId {
    len: u8,
    bytes: [u8; MAX_BUILD_ID],
}

impl BuildId {
    /// Wraps an id; `None` when it is empty or longer than 20 bytes.
    pub fn new(id: &[u8]) -> Option<BuildId> {
        if id.is_empty() || id.len() > MAX_BUILD_ID {
            return None;
        }
        let mut bytes = [0; MAX_BUILD_ID];
        bytes[..id.len()].copy_from_slice(id);
        Some(BuildId {
            len: id.len() as u8,
            bytes,
        })
    }

    /// The id bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The id's bytes and zeros after them to 20: the build-id field of an
    /// MMAP2 record, copied whole (a fixed-size copy needs no `memcpy`
    /// call).
    pub fn padded(&self) -> &[u8; MAX_BUILD_ID] {
        &self.bytes
    }

    /// Lower-case hex, as perf prints it.
    pub fn to_hex(&self) -> String {
        self.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl std::fmt::Debug for BuildId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BuildId({})", self.to_hex())
    }
}

/// Permission and sharing bits of a VMA, with the values of the kernel's
/// `PROCMAP_QUERY_VMA_*` flags so ioctl results map one to one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Perms(pub u8);

impl Perms {
    /// Readable.
    pub const READ: Perms = Perms(0x01);
    /// Writable.
    pub const WRITE: Perms = Perms(0x02);
    /// Executable.
    pub const EXEC: Perms = Perms(0x04);
    /// Shared (`MAP_SHARED`) rather than private.
    pub const SHARED: Perms = Perms(0x08);

    /// True when every bit of `other` is set.
    pub fn contains(self, other: Perms) -> bool {
        self.0 & other.0 == other.0
    }

    /// `PROT_*` bits for MMAP2's `prot` field.
    pub fn prot(self) -> u32 {
        let mut p = 0;
        if self.contains(Perms::READ) {
            p |= libc::PROT_READ as u32;
        }
        if self.contains(Perms::WRITE) {
            p |= libc::PROT_WRITE as u32;
        }
        if self.contains(Perms::EXEC) {
            p |= libc::PROT_EXEC as u32;
        }
        p
    }

    /// `MAP_SHARED` or `MAP_PRIVATE` for MMAP2's `flags` field.
    pub fn map_flags(self) -> u32 {
        if self.contains(Perms::SHARED) {
            libc::MAP_SHARED as u32
        } else {
            libc::MAP_PRIVATE as u32
        }
    }

    /// The inverse of [`Perms::prot`] and [`Perms::map_flags`]: permissions
    /// from an MMAP2 record's `prot` and `flags`.
    pub fn from_prot_flags(prot: u32, flags: u32) -> Perms {
        let mut perms = Perms::default();
        for (bit, perm) in [
            (libc::PROT_READ, Perms::READ),
            (libc::PROT_WRITE, Perms::WRITE),
            (libc::PROT_EXEC, Perms::EXEC),
        ] {
            if prot & bit as u32 != 0 {
                perms = perms | perm;
            }
        }
        if flags & libc::MAP_SHARED as u32 != 0 {
            perms = perms | Perms::SHARED;
        }
        perms
    }
}

impl std::ops::BitOr for Perms {
    type Output = Perms;
    fn bitor(self, rhs: Perms) -> Perms {
        Perms(self.0 | rhs.0)
    }
}

/// Which VMAs a snapshot keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// Executable VMAs only (perf's default).
    Exec,
    /// Executable VMAs and every readable VMA (as `perf record -d`).
    ExecAndData,
}

impl Selection {
    /// Whether a VMA with these permissions is kept.
    pub fn wants(self, perms: Perms) -> bool {
        match self {
            Selection::Exec => perms.contains(Perms::EXEC),
            Selection::ExecAndData => perms.contains(Perms::EXEC) || perms.contains(Perms::READ),
        }
    }
}

/// A VMA's name: one shared copy of each file name, and nothing at all
/// for anonymous memory, so the most common VMA costs no reference count
/// (a count's atomic update was the largest user-space cost per VMA of a
/// `-d` scan).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Name(Option<std::sync::Arc<[u8]>>);

impl Name {
    /// The name of anonymous memory.
    pub const EMPTY: Name = Name(None);

    /// Shares `bytes` (kept as empty when they are).
    pub fn shared(bytes: std::sync::Arc<[u8]>) -> Name {
        Name((!bytes.is_empty()).then_some(bytes))
    }

    /// Whether both are the same shared copy (or both empty).
    pub fn shares(&self, other: &Name) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => std::sync::Arc::ptr_eq(a, b),
            (a, b) => a.is_none() && b.is_none(),
        }
    }
}

impl std::ops::Deref for Name {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.0.as_deref().unwrap_or(&[])
    }
}

impl AsRef<[u8]> for Name {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl From<&[u8]> for Name {
    fn from(bytes: &[u8]) -> Name {
        Name((!bytes.is_empty()).then(|| bytes.into()))
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

/// One virtual memory area of a process, whichever source it came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Vma {
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// File offset of `start` (page offset for anonymous memory).
    pub offset: u64,
    pub perms: Perms,
    /// Device major number of the backing file.
    pub dev_major: u32,
    /// Device minor number of the backing file.
    pub dev_minor: u32,
    /// Inode of the backing file, 0 for anonymous memory.
    pub inode: u64,
    /// Name as the kernel prints it (path, `[heap]`, `[vdso]`, ...), raw bytes;
    /// empty for anonymous memory. Newlines are real newlines in both sources.
    /// Shared: a scan worker hands out one copy of each name it reads.
    pub name: Name,
    /// Build id of the mapped file, when known and 1..=20 bytes long.
    pub build_id: Option<BuildId>,
}

/// Name of the x86-64 vsyscall gate VMA. Text maps show it, PROCMAP_QUERY
/// does not; mmap2-synth drops it from both (see README).
pub const VSYSCALL_NAME: &[u8] = b"[vsyscall]";
/// Name of the vDSO VMA.
pub const VDSO_NAME: &[u8] = b"[vdso]";
/// Names this long or longer (PATH_MAX, the NUL included) are not
/// written: PROCMAP_QUERY refuses them into a PATH_MAX buffer, perf
/// writes `//toolong` for them, and both sources name them [`TOOLONG_NAME`].
pub const PATH_MAX: usize = libc::PATH_MAX as usize;
/// What perf and both VMA sources call a VMA whose name is too long.
pub const TOOLONG_NAME: &[u8] = b"//toolong";

impl Vma {
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// True for an empty range (never produced by the kernel).
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }

    /// Whether the VMA is backed by a file (has an inode).
    pub fn is_file_backed(&self) -> bool {
        self.inode != 0
    }

    /// The identity of the backing file, for build-id caching.
    pub fn file_key(&self) -> Option<FileKey> {
        self.is_file_backed().then_some(FileKey {
            dev_major: self.dev_major,
            dev_minor: self.dev_minor,
            inode: self.inode,
        })
    }

    /// Whether this is the vDSO.
    pub fn is_vdso(&self) -> bool {
        *self.name == *VDSO_NAME
    }
}

/// A kernel or module text map, as perf names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KernelMap {
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// perf's pgoff: the kernel's reference symbol address, 0 for modules.
    pub pgoff: u64,
    /// The map's file name: `[kernel.kallsyms]_text`, a module's `.ko`
    /// path, or `[name]` when that file is not found.
    pub name: Vec<u8>,
    /// The BUILD_ID table's name for it: `[kernel.kallsyms]` or `name`.
    pub dso: Vec<u8>,
    /// From /sys (kernel notes, module notes).
    pub build_id: Option<BuildId>,
}

/// A file identity: device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileKey {
    pub dev_major: u32,
    pub dev_minor: u32,
    pub inode: u64,
}

#[cfg(test)]
impl FileKey {
    /// Unit tests' file `inode` of one device (8:1).
    pub(crate) fn on_one_device(inode: u64) -> FileKey {
        FileKey {
            dev_major: 8,
            dev_minor: 1,
            inode,
        }
    }
}

/// Which source produced a process's VMAs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// PROCMAP_QUERY ioctl.
    Ioctl,
    /// Text `/proc/PID/maps`.
    Text,
}

impl Source {
    /// How the summary names it.
    pub fn name(self) -> &'static str {
        match self {
            Source::Ioctl => "ioctl",
            Source::Text => "text",
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One thread of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thread {
    pub tid: u32,
    /// Thread name (comm); empty when unknown, and then no COMM is written.
    pub comm: Vec<u8>,
}

/// Which piece of a process a [`Process`] value is. A process whose maps
/// would hold too much to keep whole is handed on in pieces as they are
/// read: each piece its run of VMAs in address order, the first with the
/// leader (its FORK and COMM come before the maps) and the last with every
/// thread (the other threads' records come after). Most processes are one
/// piece, [`Part::WHOLE`]; the pieces' records in order are the same bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// The leader's records and the process's counts go with this piece.
    pub first: bool,
    /// The other threads' records go with this piece; none follows.
    pub last: bool,
}

impl Part {
    /// A process in one piece.
    pub const WHOLE: Part = Part {
        first: true,
        last: true,
    };
}

/// What was read of one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    /// Process id (thread-group id).
    pub pid: u32,
    pub ppid: u32,
    /// Kernel thread: gets COMM/FORK only.
    pub kernel_thread: bool,
    /// Start time in clock ticks after boot (`/proc/PID/stat` field 22).
    pub start_time: u64,
    /// Threads, the leader first, then by tid.
    pub threads: Vec<Thread>,
    /// The leader's VMAs in address order.
    pub vmas: Vec<Vma>,
    /// Source of the VMAs (None for kernel threads and snapshot files).
    pub source: Option<Source>,
    /// When its VMAs were read (a live scan's; empty otherwise).
    pub read_times: ReadTimes,
}

/// When a process's VMAs were read, as bounds on the events'
/// CLOCK_MONOTONIC (ns): a time taken before the read of VMA 0 and, for a
/// walk that reads one VMA at a time, before every [`ReadTimes::EVERY`]th
/// after it (each also bounds the run before it from above); and one taken
/// once the last was read. A watched map the kernel recorded at or before a
/// VMA's lower bound was there when the scan read that place; one recorded
/// after its upper bound came after the read. Empty: unknown (0 to
/// `u64::MAX`).
///
/// A walk also asked for its first VMA from an address: the end of the VMA
/// before it in that walk (0 at the walk's start, the default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadTimes {
    starts: Vec<u64>,
    end: u64,
    first_from: u64,
}

impl Default for ReadTimes {
    fn default() -> Self {
        ReadTimes {
            starts: Vec::new(),
            end: u64::MAX,
            first_from: 0,
        }
    }
}

impl ReadTimes {
    /// VMAs read per time taken: a clock read costs ~25 ns, a VMA ~2 us.
    pub const EVERY: usize = 32;

    /// Reads that begin at `time` (the end not yet known).
    pub fn at(time: u64) -> ReadTimes {
        ReadTimes {
            starts: vec![time],
            ..ReadTimes::default()
        }
    }

    /// These times, for VMAs asked for from `addr` on.
    pub fn from_addr(self, addr: u64) -> ReadTimes {
        ReadTimes {
            first_from: addr,
            ..self
        }
    }

    /// The address the walk asked for the first VMA from.
    pub fn first_from(&self) -> u64 {
        self.first_from
    }

    /// Adds the time taken before the read of the next [`Self::EVERY`] VMAs.
    pub fn push(&mut self, time: u64) {
        self.starts.push(time);
    }

    /// Sets the time taken once the last VMA was read.
    pub fn end_at(&mut self, time: u64) {
        self.end = time;
    }

    /// Whether the time after the last VMA is known.
    pub fn ended(&self) -> bool {
        self.end != u64::MAX
    }

    /// VMA `i`'s bounds: no later than its read, and no earlier. Past the
    /// times taken, the last start (earlier still) and the end.
    pub fn bounds(&self, i: usize) -> (u64, u64) {
        let k = i / Self::EVERY;
        let start = self.starts.get(k).or(self.starts.last());
        let next = self.starts.get(k + 1).copied();
        (start.copied().unwrap_or(0), next.unwrap_or(self.end))
    }
}

impl Process {
    /// Roughly the bytes this process and its encoded records hold: about
    /// 128 per VMA and 64 per thread, plus their names (which a user can
    /// make 4 KiB each: the count alone would not bound memory).
    pub fn held_bytes(&self) -> usize {
        let vmas: usize = self.vmas.iter().map(|v| 128 + v.name.len()).sum();
        let threads: usize = self.threads.iter().map(|t| 64 + t.comm.len()).sum();
        64 + vmas + threads
    }

    /// A process known only by its pid (filled in from a snapshot file).
    pub fn empty(pid: u32) -> Process {
        Process {
            pid,
            ppid: 0,
            kernel_thread: false,
            start_time: 0,
            threads: Vec::new(),
            vmas: Vec::new(),
            source: None,
            read_times: ReadTimes::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A VMA's read is bounded by the times taken before its run of EVERY
    // VMAs and before the next run (or at the end); past the times taken,
    // by the last start and the end; none taken, by 0 and u64::MAX.
    #[test]
    fn read_times_bound_each_run_of_vmas() {
        let mut t = ReadTimes::at(10);
        t.push(20);
        t.end_at(30);
        let e = ReadTimes::EVERY;
        assert_eq!([t.bounds(0), t.bounds(e - 1)], [(10, 20), (10, 20)]);
        assert_eq!([t.bounds(e), t.bounds(5 * e)], [(20, 30), (20, 30)]);
        assert_eq!(ReadTimes::default().bounds(3), (0, u64::MAX));
        assert_eq!(ReadTimes::at(5).bounds(100), (5, u64::MAX));
    }

    // Ids of 1..=20 bytes are kept; empty and longer ones are refused.
    #[test]
    fn build_id_lengths() {
        assert!(BuildId::new(&[]).is_none());
        assert!(BuildId::new(&[1; 21]).is_none());
        assert_eq!(BuildId::new(&[0xab; 8]).unwrap().as_bytes(), &[0xab; 8]);
        assert_eq!(BuildId::new(&[1, 0xf0]).unwrap().to_hex(), "01f0");
    }

    // prot/flags -> Perms -> prot/flags is the identity for every combination.
    #[test]
    fn perms_prot_flags_round_trip() {
        for bits in 0..16u8 {
            let p = Perms(bits);
            assert_eq!(Perms::from_prot_flags(p.prot(), p.map_flags()), p);
        }
    }
}
