//! The build-id answers a scan keeps, by file identity: one cache shared
//! by all workers (each distinct file asked for once) and each worker's
//! copy of what it got from it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::buildid;
use super::mounts::{FsTrust, Mounts};
use crate::memo::{SlotHash, Slots};
use crate::model::{BuildId, FileKey, Vma};

/// Answers by file identity, hashed with foldhash, seeded per map (which
/// inodes get mapped is up to the processes read).
type IdMap = HashMap<IdKey, Option<BuildId>, foldhash::fast::RandomState>;

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
    unsettled: AtomicUsize,
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
    /// Distinct files met after our mount table changed too often, not
    /// read (see [`super::mounts::FsTrust::Unsettled`]).
    pub unsettled: usize,
}

impl IdNotes {
    /// Adds `other`'s counts.
    pub fn add(&mut self, other: IdNotes) {
        self.unverified += other.unverified;
        self.on_fuse += other.on_fuse;
        self.user_ns += other.user_ns;
        self.unmounted += other.unmounted;
        self.unsettled += other.unsettled;
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
            unsettled: AtomicUsize::new(0),
        }
    }

    /// The cached answer for a file: `None` if never asked, `Some(None)` if the
    /// file has no usable build id.
    pub fn get(&self, key: &IdKey) -> Option<Option<BuildId>> {
        self.lock().get(key).copied()
    }

    /// Records the answer for a file (the first answer wins).
    pub fn insert(&self, key: IdKey, id: Option<BuildId>) -> Option<BuildId> {
        *self.lock().entry(key).or_insert(id)
    }

    /// Whether build ids are asked of the kernel (PROCMAP_QUERY), which
    /// reads whatever is mapped at a place when asked: only when we cannot
    /// open mapped files through `map_files` to read them ourselves.
    pub fn kernel_reads(&self) -> bool {
        self.kernel_reads
    }

    /// The mount tables the cache judges files by.
    pub fn mounts(&self) -> &Mounts {
        &self.mounts
    }

    /// Counts an id whose file could be matched by inode only.
    pub fn count_unverified(&self) {
        self.unverified.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the file `key`, mapped by the process whose /proc directory
    /// is `dir`, may be read for its build id. One that may not is
    /// answered "no id" for every process, and counted once.
    pub fn may_read(&self, key: IdKey, dir: &Path) -> bool {
        let count = match self
            .mounts
            .trust((key.file.dev_major, key.file.dev_minor), dir)
        {
            FsTrust::Readable => return true,
            FsTrust::Fuse => &self.on_fuse,
            FsTrust::UserNs => &self.user_ns,
            FsTrust::Unmounted => &self.unmounted,
            FsTrust::Unsettled => &self.unsettled,
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
            unsettled: self.unsettled.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, IdMap> {
        // A worker that panicked cannot leave the map half-updated: every
        // operation is a single insert or lookup.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How build ids are resolved while walking.
#[derive(Clone, Copy)]
pub struct BuildIdPolicy<'a> {
    /// The shared cache; `None` disables build ids.
    pub cache: Option<&'a BuildIdCache>,
    /// Pid whose `/proc/PID/map_files` and `/proc/PID/root` serve the fallback.
    pub pid: u32,
    /// The thread whose maps are read: a live one when the leader is a
    /// zombie, whose `task/TID/` then serves the fallback.
    pub tid: u32,
    /// Root of the proc filesystem those paths are under.
    pub proc_root: &'a Path,
}

impl BuildIdPolicy<'_> {
    /// The /proc directory of the maps read: `PID`, or `PID/task/TID`.
    pub(super) fn dir(&self) -> PathBuf {
        let dir = self.proc_root.join(self.pid.to_string());
        match self.tid == self.pid {
            true => dir,
            false => dir.join("task").join(self.tid.to_string()),
        }
    }
}

/// A build id's key: the file's device and inode as the maps give them,
/// and where those can name several files (a device that
/// [`Mounts::shares_inodes`]: btrfs subvolumes, overlay layers) a hash of
/// the file's path and the process's mount namespace too, seeded once per
/// run: within one namespace a path names one file, so two files of one
/// device and inode number (a user's in their own subvolume, say) do not
/// get each other's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IdKey {
    file: FileKey,
    scope: u128,
}

impl SlotHash for IdKey {
    fn slot_hash(&self) -> u64 {
        self.file.slot_hash() ^ self.scope as u64
    }
}

/// The scope of an [`IdKey`] of a file at `path` in mount namespace `ns`:
/// two 64-bit hashes of differently seeded hashers (foldhash is no keyed
/// PRF: 128 bits leave a path made to collide with another's nothing to
/// aim at). Never 0, the scope of an unambiguous device's key.
fn scope_of(path: &[u8], ns: u64) -> u128 {
    use std::hash::BuildHasher;
    type Seeds = [foldhash::fast::RandomState; 2];
    static SEEDS: std::sync::OnceLock<Seeds> = std::sync::OnceLock::new();
    let [a, b] = SEEDS.get_or_init(Default::default);
    (u128::from(a.hash_one((path, ns))) << 64 | u128::from(b.hash_one((path, ns)))) | 1
}

/// The mount namespace of the process whose /proc directory is `dir`
/// (its `ns/mnt` inode), or `u64::MAX` when it cannot be read.
pub(super) fn mount_ns(dir: &Path) -> u64 {
    // the link's text, `mnt:[INODE]`: half the cost of a `stat` through
    // it (3 against 6 us here), which makes the namespace's nsfs dentry
    let link = std::fs::read_link(dir.join("ns/mnt")).unwrap_or_default();
    let text = link.as_os_str().as_encoded_bytes();
    let number = text
        .strip_prefix(b"mnt:[")
        .and_then(|t| t.strip_suffix(b"]"));
    let number = number.and_then(|n| std::str::from_utf8(n).ok()?.parse().ok());
    number.unwrap_or(u64::MAX)
}

/// Resolves a VMA's build id through the cache; on a miss reads the ELF
/// note of the mapped file (asking `kernel` first only where `map_files`
/// cannot be opened: [`BuildIdCache::kernel_reads`]). Only answers about
/// the mapped file itself (the kernel's, or a file verified by device and
/// inode, or by its path on filesystems that share inode numbers) are
/// cached for every process: one process's view of a path (an inode-only
/// match, or nothing usable) stays its own, so it cannot poison the answer
/// for the others.
pub(super) fn resolve(
    vma: &Vma,
    cache: &BuildIdCache,
    local: &mut LocalBuildIds,
    ids: BuildIdPolicy<'_>,
    kernel: impl FnOnce() -> Option<BuildId>,
) -> Option<BuildId> {
    if vma.is_vdso() {
        return buildid::vdso_build_id();
    }
    let key = local.key(cache, vma, ids)?;
    if let Some(known) = local.get(cache, &key) {
        return known;
    }
    let dir = ids.dir();
    // not even the kernel reads a file on FUSE for us: it would wait on
    // the daemon (see `mounts`)
    if !cache.may_read(key, &dir) {
        return local.insert(cache, key, None);
    }
    // a test maps another file here: between the walk and the read
    crate::testhook::hold_once("MMAP2_SYNTH_TEST_HOLD_BEFORE_BUILD_ID");
    // The kernel reads whatever is mapped at the VMA's place when asked,
    // which may no longer be the file just judged: a process swapping a
    // FUSE file in and out there would hang the query. So the kernel is
    // asked only when the mapped file cannot be opened (`map_files` needs
    // CAP_SYS_ADMIN); we read it ourselves, its mount judged on the very
    // file opened.
    if cache.kernel_reads() {
        if let Some(id) = kernel() {
            return local.insert(cache, key, Some(id));
        }
    }
    match buildid::read_mapped_build_id(&dir, vma) {
        Some((raw, buildid::Trust::Verified)) => {
            local.insert(cache, key, raw.and_then(|r| BuildId::new(&r)))
        }
        Some((raw, buildid::Trust::Unverified)) => {
            cache.count_unverified();
            raw.and_then(|r| BuildId::new(&r))
        }
        None => None,
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
    recent: Slots<IdKey, Option<BuildId>, ID_SLOTS>,
    /// Devices asked about, whether they [`Mounts::shares_inodes`]; the
    /// last one apart.
    devs: HashMap<(u32, u32), bool>,
    last_dev: Option<((u32, u32), bool)>,
    /// The process read last and its mount namespace ([`mount_ns`]).
    ns: Option<(u32, u64)>,
}

/// Slots of [`LocalBuildIds::recent`].
const ID_SLOTS: usize = 128;

/// Whether we may open processes' `map_files` links (the kernel asks for
/// CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE in the initial user namespace:
/// root in a container's has them in `CapEff` but may not), tried on our
/// own first mapping.
fn can_open_map_files(proc_root: &Path) -> bool {
    use std::io::Read;
    let own = proc_root.join("self");
    let mut head = [0u8; 64];
    let n = std::fs::File::open(own.join("maps")).and_then(|mut f| f.read(&mut head));
    let head = &head[..n.unwrap_or(0)];
    let Some(range) = head
        .split(|&b| b == b' ')
        .next()
        .filter(|r| r.contains(&b'-'))
    else {
        return false;
    };
    let link = own
        .join("map_files")
        .join(String::from_utf8_lossy(range).as_ref());
    crate::sys::open_path(&link).is_ok()
}

impl LocalBuildIds {
    /// The key of `vma`'s file (see [`IdKey`]); `None` for no file.
    fn key(&mut self, cache: &BuildIdCache, vma: &Vma, ids: BuildIdPolicy<'_>) -> Option<IdKey> {
        let file = vma.file_key()?;
        let dev = (file.dev_major, file.dev_minor);
        let shared = match self.last_dev {
            Some((d, shared)) if d == dev => shared,
            _ => {
                let shared = *(self.devs.entry(dev))
                    .or_insert_with(|| cache.mounts.shares_inodes(dev, &ids.dir()));
                self.last_dev = Some((dev, shared));
                shared
            }
        };
        if !shared {
            return Some(IdKey { file, scope: 0 });
        }
        let ns = match self.ns {
            Some((pid, ns)) if pid == ids.pid => ns,
            _ => {
                let ns = mount_ns(&ids.dir());
                self.ns = Some((ids.pid, ns));
                ns
            }
        };
        Some(IdKey {
            file,
            scope: scope_of(&vma.name, ns),
        })
    }

    /// The answer for `key`: from this copy, else from `cache` (and kept).
    pub fn get(&mut self, cache: &BuildIdCache, key: &IdKey) -> Option<Option<BuildId>> {
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
        self.recent.put::<IdKey>(*key, known);
        Some(known)
    }

    /// Records an answer in `cache` and keeps the one the cache holds.
    pub fn insert(
        &mut self,
        cache: &BuildIdCache,
        key: IdKey,
        id: Option<BuildId>,
    ) -> Option<BuildId> {
        let kept = cache.insert(key, id);
        self.map.insert(key, kept);
        self.recent.put::<IdKey>(key, kept);
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A worker's copy answers what the shared cache holds (its first answer,
    // whoever gave it), and learns answers other workers put there; keys
    // scoped by path and namespace keep their answers apart.
    #[test]
    fn local_copy_follows_the_shared_cache() {
        let shared = BuildIdCache::new(Path::new("/proc"));
        let (mut a, mut b) = (LocalBuildIds::default(), LocalBuildIds::default());
        let file = FileKey {
            dev_major: 8,
            dev_minor: 1,
            inode: 42,
        };
        let key = IdKey { file, scope: 0 };
        let first = BuildId::new(&[1; 20]);
        let other = BuildId::new(&[2; 20]);
        assert_eq!(a.get(&shared, &key), None);
        assert_eq!(a.insert(&shared, key, first), first);
        assert_eq!(b.insert(&shared, key, other), first);
        assert_eq!(b.get(&shared, &key), Some(first));
        let gone = IdKey {
            file: FileKey { inode: 43, ..file },
            scope: 0,
        };
        assert_eq!(b.insert(&shared, gone, None), None);
        assert_eq!(a.get(&shared, &gone), Some(None));
        // one device and inode at two paths (or namespaces) of a device
        // that shares inode numbers: two answers
        let here = IdKey {
            file,
            scope: scope_of(b"/a/lib.so", 7),
        };
        let there = IdKey {
            scope: scope_of(b"/b/lib.so", 7),
            ..here
        };
        let other_ns = IdKey {
            scope: scope_of(b"/a/lib.so", 8),
            ..here
        };
        assert_eq!(a.insert(&shared, here, other), other);
        assert_eq!(a.get(&shared, &there), None);
        assert_eq!(a.get(&shared, &other_ns), None);
        assert_eq!(b.get(&shared, &here), Some(other));
    }
}
