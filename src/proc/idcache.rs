//! The build-id answers a scan keeps, by file identity: one cache shared
//! by all workers (each distinct file asked for once) and each worker's
//! copy of what it got from it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::mounts::{FsTrust, Mounts};
use crate::memo::Slots;
use crate::model::{BuildId, FileKey};

/// Answers by file identity, hashed with foldhash, seeded per map (which
/// inodes get mapped is up to the processes read).
type IdMap = HashMap<FileKey, Option<BuildId>, foldhash::fast::RandomState>;

/// Build ids by file identity, shared by all workers so each distinct file is
/// asked for once, and which files may be read at all.
pub struct BuildIdCache {
    map: Mutex<IdMap>,
    /// See [`BuildIdCache::kernel_reads`].
    kernel_reads: bool,
    mounts: Mounts,
    unverified: AtomicUsize,
    on_fuse: AtomicUsize,
    user_ns: AtomicUsize,
    unmounted: AtomicUsize,
}

/// What a scan says of the build ids it did not simply read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IdNotes {
    /// Ids whose file matched the VMA by inode but not by device
    /// (overlayfs, btrfs subvolumes): kept.
    pub unverified: usize,
    /// Distinct files on FUSE, not read (see [`super::mounts`]).
    pub on_fuse: usize,
    /// Distinct files on a filesystem a user namespace mounted, not read.
    pub user_ns: usize,
    /// Distinct files on a filesystem no mount table shows, not read.
    pub unmounted: usize,
}

impl IdNotes {
    /// Adds `other`'s counts.
    pub fn add(&mut self, other: IdNotes) {
        self.unverified += other.unverified;
        self.on_fuse += other.on_fuse;
        self.user_ns += other.user_ns;
        self.unmounted += other.unmounted;
    }
}

impl BuildIdCache {
    /// A new, empty cache for processes under `proc_root`.
    pub fn new(proc_root: &Path) -> Self {
        BuildIdCache {
            map: Mutex::default(),
            kernel_reads: !can_open_map_files(proc_root),
            mounts: Mounts::new(proc_root),
            unverified: AtomicUsize::new(0),
            on_fuse: AtomicUsize::new(0),
            user_ns: AtomicUsize::new(0),
            unmounted: AtomicUsize::new(0),
        }
    }

    /// The cached answer for a file: `None` if never asked, `Some(None)` if the
    /// file has no usable build id.
    pub fn get(&self, key: &FileKey) -> Option<Option<BuildId>> {
        self.lock().get(key).copied()
    }

    /// Records the answer for a file (the first answer wins).
    pub fn insert(&self, key: FileKey, id: Option<BuildId>) -> Option<BuildId> {
        *self.lock().entry(key).or_insert(id)
    }

    /// Whether build ids are asked of the kernel (PROCMAP_QUERY), which
    /// reads whatever is mapped at a place when asked: only when we cannot
    /// open mapped files through `map_files` to read them ourselves.
    pub fn kernel_reads(&self) -> bool {
        self.kernel_reads
    }

    /// Counts an id whose file could be matched by inode only.
    pub fn count_unverified(&self) {
        self.unverified.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the file `key`, mapped by the process whose /proc directory
    /// is `dir`, may be read for its build id. One that may not is
    /// answered "no id" for every process, and counted once.
    pub fn may_read(&self, key: FileKey, dir: &Path) -> bool {
        let count = match self.mounts.trust((key.dev_major, key.dev_minor), dir) {
            FsTrust::Readable => return true,
            FsTrust::Fuse => &self.on_fuse,
            FsTrust::UserNs => &self.user_ns,
            FsTrust::Unmounted => &self.unmounted,
        };
        if let std::collections::hash_map::Entry::Vacant(e) = self.lock().entry(key) {
            e.insert(None);
            count.fetch_add(1, Ordering::Relaxed);
        }
        false
    }

    /// The ids matched by inode only and the files not read.
    pub fn notes(&self) -> IdNotes {
        IdNotes {
            unverified: self.unverified.load(Ordering::Relaxed),
            on_fuse: self.on_fuse.load(Ordering::Relaxed),
            user_ns: self.user_ns.load(Ordering::Relaxed),
            unmounted: self.unmounted.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, IdMap> {
        // A worker that panicked cannot leave the map half-updated: every
        // operation is a single insert or lookup.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One worker's copy of the answers it got from a [`BuildIdCache`], so a
/// file seen again costs a local lookup, not the shared lock (the shared
/// cache's answers never change, so the copy cannot go stale within a scan).
#[derive(Default)]
pub struct LocalBuildIds {
    map: IdMap,
    /// The answers given last, one per slot: most lookups are for a file
    /// asked for in the process before, found here with no hash (see
    /// [`crate::memo`]).
    recent: Slots<FileKey, Option<BuildId>, ID_SLOTS>,
}

/// Slots of [`LocalBuildIds::recent`].
const ID_SLOTS: usize = 128;

/// Whether we may open other processes' `map_files` links: the kernel asks
/// for CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE (bits 21, 40 of `CapEff`).
fn can_open_map_files(proc_root: &Path) -> bool {
    let status = std::fs::read(proc_root.join("self/status")).unwrap_or_default();
    let caps = super::parse::parse_status(&status)
        .ok()
        .and_then(|s| s.cap_eff);
    caps.is_some_and(|c| c >> 21 & 1 == 1 || c >> 40 & 1 == 1)
}

impl LocalBuildIds {
    /// The answer for `key`: from this copy, else from `cache` (and kept).
    pub fn get(&mut self, cache: &BuildIdCache, key: &FileKey) -> Option<Option<BuildId>> {
        if let Some((_, &known)) = self.recent.find(key) {
            return Some(known);
        }
        let known = match self.map.get(key) {
            Some(&known) => known,
            None => {
                let known = cache.get(key)?;
                self.map.insert(*key, known);
                known
            }
        };
        self.recent.put::<FileKey>(*key, known);
        Some(known)
    }

    /// Records an answer in `cache` and keeps the one the cache holds.
    pub fn insert(
        &mut self,
        cache: &BuildIdCache,
        key: FileKey,
        id: Option<BuildId>,
    ) -> Option<BuildId> {
        let kept = cache.insert(key, id);
        self.map.insert(key, kept);
        self.recent.put::<FileKey>(key, kept);
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A worker's copy answers what the shared cache holds (its first answer,
    // whoever gave it), and learns answers other workers put there.
    #[test]
    fn local_copy_follows_the_shared_cache() {
        let shared = BuildIdCache::new(Path::new("/proc"));
        let (mut a, mut b) = (LocalBuildIds::default(), LocalBuildIds::default());
        let key = FileKey {
            dev_major: 8,
            dev_minor: 1,
            inode: 42,
        };
        let first = BuildId::new(&[1; 20]);
        let other = BuildId::new(&[2; 20]);
        assert_eq!(a.get(&shared, &key), None);
        assert_eq!(a.insert(&shared, key, first), first);
        assert_eq!(b.insert(&shared, key, other), first);
        assert_eq!(b.get(&shared, &key), Some(first));
        let gone = FileKey { inode: 43, ..key };
        assert_eq!(b.insert(&shared, gone, None), None);
        assert_eq!(a.get(&shared, &gone), Some(None));
    }
}
