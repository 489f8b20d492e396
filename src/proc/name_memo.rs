//! Names by file, so a PROCMAP_QUERY walk reads most VMAs without their
//! name: the kernel's `d_path` of each is about a fifth of the walk's cost
//! (a C walk of 2000 x 70 processes: 198.5 ms of CPU without names against
//! 242.9 with), and a library is mapped by most processes.
//!
//! A name is shared only where the file can have no other: in processes of
//! our own mount namespace (whose table we read ourselves; another
//! namespace's, read through one of its processes, hides what is outside
//! that process's root, and its number can be reused by a namespace made
//! during the scan), for a regular file of one link (no hard link), or
//! of two where the other is perf's copy in our build-id cache (perf links
//! every file it records into `~/.debug` when it can),
//! reached by the mapping through its device's one mount in our table (no
//! bind mount shows it twice; a mount of another namespace, where any user
//! may mount, or a descriptor passed from one, is not that mount), on a
//! readable device that does not share inode numbers (not btrfs,
//! bcachefs, overlay), its name absolute, not `/` (a file opened by
//! handle), `//toolong` or deleted. The memo starts again when our mount
//! table changes (checked as each process's walk starts). A name is the
//! kernel's when the worker first met the file: one renamed, unlinked or
//! given a link during the scan keeps that name in the processes read
//! after (as a scan a little earlier would have read it). Only the
//! process that teaches the memo is checked for the mount: one that maps
//! the file through a mount outside our table (lazily unmounted, another
//! namespace's through `/proc/PID/root`, or held since a `setns`) gets the
//! file's name through its one mount in our table, where the kernel names
//! it through that other mount; so does a file that has had two dentries
//! of one link (a deleted second link, `O_TMPFILE` given a name, opened
//! by handle).

use std::collections::HashMap;
use std::path::PathBuf;

use super::idcache::{mount_ns, BuildIdCache, BuildIdPolicy};
use crate::model::{FileKey, Name, Vma, TOOLONG_NAME};

/// A name shared by every VMA of a file, or `None`: the file was judged to
/// have another name somewhere.
type NameMap = HashMap<FileKey, Option<Name>, foldhash::fast::RandomState>;

/// One worker's names by file.
#[derive(Default)]
pub struct NameMemo {
    map: NameMap,
    /// Bytes of the names `map` holds, each counted with [`ENTRY_BYTES`].
    bytes: usize,
    /// The mount tables' generation the entries were judged in.
    generation: usize,
    /// Per first file of a walk (a program's executable), which of its
    /// last walk's VMAs had shared names (see `ioctl_walk`).
    layouts: HashMap<FileKey, Vec<bool>, foldhash::fast::RandomState>,
}

/// VMAs of a walk's layout kept at most.
const MAX_LAYOUT: usize = 1024;
/// Layouts one worker keeps at most.
const MAX_LAYOUTS: usize = 1024;

/// Bytes of names one worker's memo holds at most; past that it starts
/// again (a process mapping many distinct long names cannot grow it).
const MEMO_BYTES: usize = 1 << 20;
/// What an entry costs besides its name's bytes.
const ENTRY_BYTES: usize = 64;

/// One process's walk, where its names may be shared: its /proc directory
/// and the scan's mount tables.
pub struct NameScope<'a> {
    dir: PathBuf,
    cache: &'a BuildIdCache,
}

impl<'a> NameScope<'a> {
    /// The scope of the maps `ids` reads, if names may be shared there:
    /// with build ids read (their cache holds the mount tables) from
    /// `map_files` (which the judgement stats: root), in a process of our
    /// own mount namespace. Empties `memo` if our mount table changed since
    /// its entries were judged.
    pub fn of(ids: BuildIdPolicy<'a>, memo: &mut NameMemo) -> Option<NameScope<'a>> {
        let cache = ids.cache.filter(|c| !c.kernel_reads())?;
        let dir = ids.dir();
        if mount_ns(&dir) != own_mount_ns() {
            return None;
        }
        let generation = cache.mounts().generation();
        if generation != memo.generation {
            *memo = NameMemo {
                generation,
                ..NameMemo::default()
            };
        }
        Some(NameScope { dir, cache })
    }
}

/// Our own mount namespace (`u64::MAX`, which no process's matches, if
/// it cannot be read).
fn own_mount_ns() -> u64 {
    static OWN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *OWN.get_or_init(|| match mount_ns(std::path::Path::new("/proc/self")) {
        u64::MAX => u64::MAX - 1,
        ns => ns,
    })
}

/// What the memo says of a file.
pub enum Known<'m> {
    /// Its name in every process.
    Shared(&'m Name),
    /// Judged to have another name somewhere: asked each time.
    Own,
    /// Not met yet.
    Unknown,
}

impl NameMemo {
    /// What is known of `file`.
    pub fn get(&self, file: FileKey) -> Known<'_> {
        match self.map.get(&file) {
            Some(Some(name)) => Known::Shared(name),
            Some(None) => Known::Own,
            None => Known::Unknown,
        }
    }

    /// Judges `vma`, just read with its name in `scope`, and keeps the
    /// verdict: whether its name is shared.
    pub fn learn(&mut self, scope: &NameScope<'_>, vma: &Vma) -> bool {
        let Some(file) = vma.file_key() else {
            return false;
        };
        let shared = has_one_name(scope, vma, file);
        self.keep(file, shared.then(|| vma.name.clone()));
        shared
    }

    /// The layout of the last walk whose first file was `first`, taken out
    /// (the walk keeps its own in its place): per VMA, whether its name was
    /// shared (empty if none).
    pub fn take_layout(&mut self, first: FileKey) -> Vec<bool> {
        self.layouts.remove(&first).unwrap_or_default()
    }

    /// Keeps a walk's layout (at most [`MAX_LAYOUT`] VMAs of it, and
    /// [`MAX_LAYOUTS`] of them: past that they start again).
    pub fn keep_layout(&mut self, first: FileKey, mut layout: Vec<bool>) {
        layout.truncate(MAX_LAYOUT);
        if self.layouts.len() >= MAX_LAYOUTS && !self.layouts.contains_key(&first) {
            self.layouts.clear();
        }
        self.layouts.insert(first, layout);
    }

    /// Asks `file` by name from now on: a process showed it under another
    /// name than the one kept.
    pub fn disown(&mut self, file: FileKey) {
        self.keep(file, None);
    }

    fn keep(&mut self, file: FileKey, name: Option<Name>) {
        let cost = ENTRY_BYTES + name.as_ref().map_or(0, |n| n.len());
        if self.bytes + cost > MEMO_BYTES {
            self.map = NameMap::default();
            self.bytes = 0;
        }
        self.bytes += cost;
        self.map.insert(file, name);
    }
}

/// Whether `vma`'s file has its name in every process of our mount
/// namespace (see the module's text).
fn has_one_name(scope: &NameScope<'_>, vma: &Vma, file: FileKey) -> bool {
    let name: &[u8] = &vma.name;
    let plain = name.len() > 1 && name[0] == b'/' && name != TOOLONG_NAME;
    if !plain || name.ends_with(b" (deleted)") {
        return false;
    }
    let Some(mount) = scope
        .cache
        .mounts()
        .sole_mount((file.dev_major, file.dev_minor))
    else {
        return false;
    };
    // the mapped file itself (its device readable, so its `getattr`
    // answers; asked without syncing)
    let link = (scope.dir.join("map_files")).join(format!("{:x}-{:x}", vma.start, vma.end));
    let Ok(m) = crate::sys::mapped_file(&link) else {
        return false;
    };
    let one_link = m.nlink == 1 || (m.nlink == 2 && in_perf_cache(vma, file));
    (m.kind, m.inode, m.mount_id) == (libc::S_IFREG, file.inode, mount) && one_link
}

/// Whether `vma`'s file's other link is perf's copy of it in our build-id
/// cache, `$HOME/.debug/NAME/BUILD_ID/elf` (perf links a file it records
/// there when it can): a place no process maps from. Every directory from
/// `/` to the copy must be root's, writable by no one else, and no
/// symlink, so no user can have put another link there (a `$HOME` of a
/// user's, kept by `sudo -E`, is refused: helper-98's review).
fn in_perf_cache(vma: &Vma, file: FileKey) -> bool {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let (Some(home), Some(id)) = (std::env::var_os("HOME"), vma.build_id) else {
        return false;
    };
    let mut p = std::path::Path::new(&home).join(".debug").into_os_string();
    p.push(std::ffi::OsStr::from_bytes(&vma.name));
    let copy = PathBuf::from(p).join(id.to_hex()).join("elf");
    if !copy.is_absolute() || copy.components().any(|c| c.as_os_str() == "..") {
        return false;
    }
    let roots = |m: &std::fs::Metadata| m.uid() == 0 && m.mode() & 0o022 == 0;
    let dirs_are_roots = copy
        .ancestors()
        .skip(1)
        .all(|d| std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir() && roots(&m)));
    let dev = libc::makedev(file.dev_major, file.dev_minor);
    // the link itself (an older perf made a symlink there), not followed
    dirs_are_roots
        && std::fs::symlink_metadata(&copy).is_ok_and(|m| {
            m.is_file() && (m.dev(), m.ino(), m.nlink()) == (dev, file.inode, 2) && m.uid() == 0
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(inode: u64) -> FileKey {
        FileKey::on_one_device(inode)
    }

    // A file disowned is asked by name from then on; the names kept stay
    // within the byte budget (the memo starts again past it); a layout is
    // cut to MAX_LAYOUT VMAs and the layouts start again at MAX_LAYOUTS.
    #[test]
    fn the_memo_and_its_layouts_stay_bounded() {
        let mut memo = NameMemo::default();
        let name = Name::shared(std::sync::Arc::from(&b"/usr/lib/libc.so.6"[..]));
        memo.keep(key(1), Some(name.clone()));
        assert!(matches!(memo.get(key(1)), Known::Shared(n) if n.shares(&name)));
        assert!(matches!(memo.get(key(2)), Known::Unknown));
        memo.disown(key(1));
        assert!(matches!(memo.get(key(1)), Known::Own));
        let long = Name::shared(std::sync::Arc::from(vec![b'/'; 4000]));
        for i in 0..1000 {
            memo.keep(key(100 + i), Some(long.clone()));
            assert!(memo.bytes <= MEMO_BYTES);
        }
        assert!(memo.map.len() < 1000, "started again past the budget");
        memo.keep_layout(key(1), vec![true; MAX_LAYOUT + 10]);
        assert_eq!(memo.take_layout(key(1)).len(), MAX_LAYOUT);
        assert!(memo.take_layout(key(1)).is_empty(), "taken");
        assert!(memo.take_layout(key(2)).is_empty());
        for i in 0..MAX_LAYOUTS as u64 + 5 {
            memo.keep_layout(key(10 + i), vec![true]);
            assert!(memo.layouts.len() <= MAX_LAYOUTS);
        }
    }
}
