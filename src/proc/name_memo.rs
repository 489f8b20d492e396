//! Names by file, so a PROCMAP_QUERY walk reads most VMAs without their
//! name: the kernel's `d_path` of each is about a fifth of the walk's cost
//! (a C walk of 2000 x 70 processes: 198.5 ms of CPU without names against
//! 242.9 with), and a library is mapped by most processes.
//!
//! A name is shared only where the file can have no other in the process's
//! mount namespace: on a readable device that does not share inode numbers
//! (not btrfs, bcachefs, overlay), mounted once in that namespace (no bind
//! mount shows it twice), the file itself of one link (no hard link), its
//! name an absolute path, not deleted, not `//toolong`. Names are kept per
//! mount namespace: a container's view of a host file is another path.
//! Judged once per file and namespace by each worker; the name is the one
//! the kernel gave when the file was first met, so a file renamed,
//! unlinked or given a hard link during the scan keeps that name in the
//! processes read after (as a scan a little earlier would have read it).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use super::idcache::{mount_ns, BuildIdCache, BuildIdPolicy};
use crate::model::{FileKey, Name, Vma, TOOLONG_NAME};

/// A name shared by every VMA of a file in one mount namespace, or `None`:
/// the file was judged to have another name somewhere.
type NameMap = HashMap<(u64, FileKey), Option<Name>, foldhash::fast::RandomState>;

/// One worker's names by file and mount namespace.
#[derive(Default)]
pub struct NameMemo {
    map: NameMap,
    /// Bytes of the names `map` holds, each counted with [`ENTRY_BYTES`].
    bytes: usize,
}

/// Bytes of names one worker's memo holds at most; past that it starts
/// again (a process mapping many distinct long names cannot grow it).
const MEMO_BYTES: usize = 1 << 20;
/// What an entry costs besides its name's bytes.
const ENTRY_BYTES: usize = 64;

/// Where one process's names may be shared: its mount namespace, its
/// /proc directory, and the scan's mount tables.
pub struct NameScope<'a> {
    ns: u64,
    dir: PathBuf,
    cache: &'a BuildIdCache,
}

impl<'a> NameScope<'a> {
    /// The scope of the maps `ids` reads, if names may be shared there:
    /// with build ids read (their cache holds the mount tables) from
    /// `map_files` (which the judgement stats: root), and the process's
    /// mount namespace known.
    pub fn of(ids: BuildIdPolicy<'a>) -> Option<NameScope<'a>> {
        let cache = ids.cache.filter(|c| !c.kernel_reads())?;
        let dir = ids.dir();
        let ns = mount_ns(&dir);
        (ns != u64::MAX).then_some(NameScope { ns, dir, cache })
    }
}

/// What the memo says of a file.
pub enum Known<'m> {
    /// Its name in every process of the namespace.
    Shared(&'m Name),
    /// Judged to have another name somewhere: asked each time.
    Own,
    /// Not met yet.
    Unknown,
}

impl NameMemo {
    /// What is known of `file` in `scope`'s namespace.
    pub fn get(&self, scope: &NameScope<'_>, file: FileKey) -> Known<'_> {
        match self.map.get(&(scope.ns, file)) {
            Some(Some(name)) => Known::Shared(name),
            Some(None) => Known::Own,
            None => Known::Unknown,
        }
    }

    /// Judges `vma`, just read with its name, and keeps the verdict;
    /// whether its name is shared. `vma` must be file-backed.
    pub fn learn(&mut self, scope: &NameScope<'_>, vma: &Vma) -> bool {
        let Some(file) = vma.file_key() else {
            return false;
        };
        let shared = has_one_name(scope, vma, file);
        let cost = ENTRY_BYTES + if shared { vma.name.len() } else { 0 };
        if self.bytes + cost > MEMO_BYTES {
            self.map = NameMap::default();
            self.bytes = 0;
        }
        self.bytes += cost;
        self.map
            .insert((scope.ns, file), shared.then(|| vma.name.clone()));
        shared
    }
}

/// Whether `vma`'s file has its name in every process of `scope`'s
/// namespace (see the module's text).
fn has_one_name(scope: &NameScope<'_>, vma: &Vma, file: FileKey) -> bool {
    let name: &[u8] = &vma.name;
    if name.first() != Some(&b'/') || name == TOOLONG_NAME || name.ends_with(b" (deleted)") {
        return false;
    }
    let dev = (file.dev_major, file.dev_minor);
    if !scope.cache.mounts().mounted_once(dev, scope.ns, &scope.dir) {
        return false;
    }
    // the mapped file itself (its device judged readable just above, so
    // its `getattr` answers): a regular file of one link
    let link = scope
        .dir
        .join("map_files")
        .join(format!("{:x}-{:x}", vma.start, vma.end));
    std::fs::metadata(link).is_ok_and(|m| m.is_file() && m.nlink() == 1 && m.ino() == file.inode)
}
