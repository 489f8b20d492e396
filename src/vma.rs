//! The VMA type shared by the ioctl and text sources.

use crate::buildid::BuildId;

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

/// One virtual memory area of a process, whichever source it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vma {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// File offset of `start` (page offset for anonymous memory).
    pub offset: u64,
    /// Permissions.
    pub perms: Perms,
    /// Device major number of the backing file.
    pub dev_major: u32,
    /// Device minor number of the backing file.
    pub dev_minor: u32,
    /// Inode of the backing file, 0 for anonymous memory.
    pub inode: u64,
    /// Name as the kernel prints it (path, `[heap]`, `[vdso]`, ...), raw bytes;
    /// empty for anonymous memory. Newlines are real newlines in both sources.
    pub name: Vec<u8>,
    /// Build id of the mapped file, when known and 1..=20 bytes long.
    pub build_id: Option<BuildId>,
}

/// Name of the x86-64 vsyscall gate VMA. Text maps show it, PROCMAP_QUERY
/// does not; mmap2-synth drops it from both (see README).
pub const VSYSCALL_NAME: &[u8] = b"[vsyscall]";
/// Name of the vDSO VMA.
pub const VDSO_NAME: &[u8] = b"[vdso]";

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
        self.name == VDSO_NAME
    }
}

/// A file identity: device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileKey {
    /// Device major.
    pub dev_major: u32,
    /// Device minor.
    pub dev_minor: u32,
    /// Inode number.
    pub inode: u64,
}
