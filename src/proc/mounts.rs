//! Which filesystem a mapped file is on, by its device number, so the scan
//! reads no file whose reads could hang it for good: a FUSE filesystem's
//! daemon is whoever mounted it (any user, with fusermount), and one that
//! stops answering (hostile, or an sshfs whose server went away) blocks
//! every read of its files, the kernel's own build-id read for
//! PROCMAP_QUERY included, in a wait not even SIGKILL ends while the
//! daemon lives. So is a file on a filesystem no mount table shows
//! (unmounted lazily while still mapped): nothing says what serves it.
//!
//! Devices are looked up in the scan's own `mountinfo`, then in that of the
//! process mapping the file (another mount namespace: a container), each
//! read once; the kernel's internal tmpfs (memfds), which no table shows,
//! is known by a memfd's device. A filesystem known only from the table of
//! a mount namespace another user namespace owns was mounted inside that
//! user namespace, which any user may make: an overlay there may stack on
//! FUSE (and its device says overlay), a tmpfs there may be unmounted and
//! its device number given to a FUSE mount during the scan. So such a one
//! is not read either ("mounted in a user namespace"), copies of root's
//! mounts excepted: the binaries of rootless containers (and of any
//! user-namespaced container's own filesystems, root's made too) get no
//! build id. An overlay whose layers are under a FUSE mount point of its
//! table, by their letters, is FUSE (best effort). Where the scan's own table cannot be read at all
//! (a test's fake /proc), nothing is known and every file is read.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::mountinfo::{fuse_or_on_it, parse_mountinfo, whole_lines, Mount};

/// Bytes of one `mountinfo` read at most (a host of 10,000 mounts has
/// about 1.5 MB); a longer one is read this far.
const MAX_MOUNTINFO: u64 = 8 << 20;

/// Processes whose `mountinfo` one scan reads at most (each at most
/// [`MAX_MOUNTINFO`]): a host of processes each mapping a file from a
/// filesystem mounted nowhere costs no more than this.
const MAX_READS: usize = 1024;

/// Bytes of mount tables one scan reads at most: a padded table (up to
/// [`MAX_MOUNTINFO`]) read again per change would cost seconds of CPU long
/// before [`MAX_READS`].
const MAX_BYTES: u64 = 256 << 20;

/// Whether a mapped file may be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsTrust {
    /// A filesystem the kernel serves itself (disk, tmpfs, NFS, ...),
    /// mounted by root (of our user namespace), or a copy of one.
    Readable,
    /// Known only from the table of a mount namespace another user
    /// namespace owns: not read.
    UserNs,
    /// FUSE (`fuse`, `fuse.*`, `fuseblk`), or an overlay on it: not read.
    Fuse,
    /// On no filesystem the mount tables read show: not read.
    Unmounted,
    /// Asked after our mount table changed more often than a scan reads
    /// it again (1,024 times, 256 MiB in all): a device or mount id judged
    /// before may have gone to a FUSE mount since, so nothing is read.
    Unsettled,
}

impl FsTrust {
    /// Where a file not read is, for messages ("on FUSE"); `None` for one
    /// that is read.
    pub fn unread(self) -> Option<&'static str> {
        match self {
            FsTrust::Readable => None,
            FsTrust::UserNs => Some("mounted in a user namespace"),
            FsTrust::Fuse => Some("on FUSE"),
            FsTrust::Unmounted => Some("on no mounted filesystem"),
            FsTrust::Unsettled => Some("met while mounts kept changing"),
        }
    }
}

/// Devices and mounts seen in the mount tables read so far, judged.
#[derive(Default)]
struct Known {
    /// `None` until the scan's own table was read; `Some(false)` if it
    /// could not be (nothing is judged then).
    judged: Option<bool>,
    /// The user namespace we run in: tables of mount namespaces it owns
    /// list mounts root made.
    own_user_ns: Option<(u64, u64)>,
    /// Each device seen.
    devs: HashMap<(u32, u32), FsTrust>,
    /// Each mount seen, by id.
    ids: HashMap<u32, FsTrust>,
    /// The devices of our own table as last read (a table of a user
    /// namespace's showing one of them shows a copy of root's mount; one
    /// unmounted since may have gone to another filesystem).
    own_devs: HashSet<(u32, u32)>,
    /// Devices of a type that [`shares_inodes`], in any table read.
    shared_inodes: HashSet<(u32, u32)>,
    /// The /proc directories whose table was read.
    read: HashSet<PathBuf>,
    /// Mount ids our own table was read again for (made since it was).
    again: HashSet<u32>,
    /// Our own table, held open to be told of mounts and unmounts since
    /// it was read ([`crate::sys::mounts_changed`]).
    watch: Option<std::fs::File>,
    /// Times our own table was read again because it changed, or tables
    /// were for a mount id seen on another mount ([`Mounts::trust_fd`]).
    changes: usize,
    /// The unique id (Linux 6.8+) of the mount each id was last judged
    /// for from tables read while a descriptor on it was held.
    unique: HashMap<u32, u64>,
    /// Bytes of tables read.
    bytes: u64,
    /// Our table changed after the reads ran out: no verdict stands.
    unsettled: bool,
    /// The devices our own table (as last read) shows mounted exactly once,
    /// with that mount's id; `None` when it could not be read whole.
    own_once: Option<HashMap<(u32, u32), u32>>,
}

impl Known {
    /// Adds the mounts of `dir/mountinfo` (`own`: the scan's own table);
    /// false if it could not be read, or whose they are could not be told
    /// (the process gone meanwhile: then only its FUSE mounts are taken).
    /// Root's mounts (our table, or that of a namespace our user namespace
    /// owns) are read; a user namespace's are not, but for copies of root's
    /// (a device root's tables show). A device or mount known keeps its
    /// answer unless this one is FUSE (a superblock is FUSE wherever it
    /// shows) or root's table shows it readable.
    fn add(&mut self, dir: &Path, own: bool) -> bool {
        let Some((text, whole)) = read_mountinfo(dir) else {
            return false;
        };
        self.bytes += text.len() as u64;
        let roots = match own {
            true => Some(true),
            false => match crate::sys::mount_ns_owner(&dir.join("ns/mnt")) {
                Ok(owner) => Some(Some(owner) == self.own_user_ns),
                Err(_) => None,
            },
        };
        let mounts: Vec<Mount> = parse_mountinfo(&text).collect();
        let fuse = fuse_or_on_it(&mounts);
        if own {
            self.own_once = whole.then(|| mounted_once(&mounts));
            self.own_devs = (mounts.iter().zip(&fuse))
                .filter(|(_, &f)| !f)
                .map(|(m, _)| m.dev)
                .collect();
        }
        let shared = mounts.iter().filter(|m| m.shares_inodes);
        self.shared_inodes.extend(shared.map(|m| m.dev));
        for (m, &f) in mounts.iter().zip(&fuse) {
            let judged = match (f, roots) {
                (true, _) => FsTrust::Fuse,
                (false, Some(true)) => FsTrust::Readable,
                (false, Some(false)) if self.own_devs.contains(&m.dev) => FsTrust::Readable,
                (false, Some(false)) => FsTrust::UserNs,
                (false, None) => continue,
            };
            let root_readable = judged == FsTrust::Readable && roots == Some(true);
            for slot in [
                self.devs.entry(m.dev).or_insert(judged),
                self.ids.entry(m.id).or_insert(judged),
            ] {
                if judged == FsTrust::Fuse || (root_readable && *slot == FsTrust::UserNs) {
                    *slot = judged;
                }
            }
        }
        roots.is_some()
    }

    /// Reads our own table again if a mount or unmount happened since it
    /// was read (at most [`MAX_READS`] times): a device number or mount id
    /// freed by an unmount and given to a new FUSE mount must not keep the
    /// verdict of the filesystem it was (the kernel hands out the lowest
    /// free one). What the new table says of a known one wins only as
    /// [`Known::add`] lets it: FUSE, or readable where root's table shows
    /// it so.
    fn refresh(&mut self, own: &Path) {
        let Some(watch) = &self.watch else {
            return;
        };
        if self.unsettled || !crate::sys::mounts_changed(std::os::fd::AsFd::as_fd(watch)) {
            return;
        }
        match self.may_read_again() {
            true => {
                self.changes += 1;
                self.add(own, true);
            }
            false => self.unsettled = true,
        }
    }

    /// Whether tables may still be read again (see [`MAX_READS`],
    /// [`MAX_BYTES`]).
    fn may_read_again(&self) -> bool {
        self.changes < MAX_READS && self.bytes < MAX_BYTES
    }

    /// Whether another table may be read for the first time, or ours for a
    /// mount made since it was: the same bounds, counting the tables read
    /// (not the re-reads, which [`Known::may_read_again`] counts).
    fn may_read_another(&self) -> bool {
        self.read.len() + self.again.len() < MAX_READS && self.bytes < MAX_BYTES
    }

    /// Reads `dir`'s table unless it was, or too many were (one that could
    /// not be judged may be read again).
    fn read_once(&mut self, dir: &Path) {
        if self.may_read_another() && self.read.insert(dir.to_path_buf()) && !self.add(dir, false) {
            self.read.remove(dir);
        }
    }
}

/// The mount tables a scan has read, shared by its workers.
pub struct Mounts {
    /// `PROC/self`: our own table's directory.
    own: PathBuf,
    known: Mutex<Known>,
}

impl Mounts {
    /// Knows nothing yet: tables are read under `proc_root` when first
    /// needed. Our own table is opened here, to be told of changes: make
    /// the scan's before its workers unshare their descriptor tables (each
    /// keeps a copy of that descriptor; one opened on a worker would be in
    /// its table only).
    pub fn new(proc_root: &Path) -> Mounts {
        let own = proc_root.join("self");
        let known = Known {
            watch: std::fs::File::open(own.join("mountinfo")).ok(),
            ..Known::default()
        };
        Mounts {
            own,
            known: Mutex::new(known),
        }
    }

    /// The table, once the scan's own was read (`None`: it could not be,
    /// nothing is judged).
    fn known(&self) -> Option<std::sync::MutexGuard<'_, Known>> {
        // a worker that panicked leaves whole inserts only
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let own = &self.own;
        if known.judged.is_none() {
            known.own_user_ns = crate::sys::own_user_ns().ok();
            let judged = known.add(own, true);
            known.read.insert(own.clone());
            known.judged = Some(judged);
            // tmpfs, mounted nowhere (memfds, SysV shared memory)
            if let Ok((dev, id)) = crate::sys::shmem_identity() {
                known.devs.entry(dev).or_insert(FsTrust::Readable);
                if let Some(id) = id {
                    known.ids.entry(id).or_insert(FsTrust::Readable);
                    known.unique.insert(id, u64::MAX);
                }
            }
        }
        if known.judged == Some(true) {
            known.refresh(own);
        }
        (known.judged == Some(true)).then_some(known)
    }

    /// Whether a file on device `dev`, mapped by the process whose /proc
    /// directory is `dir` (`PID` or `PID/task/TID`), may be read.
    pub fn trust(&self, dev: (u32, u32), dir: &Path) -> FsTrust {
        let Some(mut known) = self.known() else {
            return FsTrust::Readable;
        };
        if known.unsettled {
            return FsTrust::Unsettled;
        }
        if !known.devs.contains_key(&dev) {
            known.read_once(dir);
        }
        known.devs.get(&dev).copied().unwrap_or(FsTrust::Unmounted)
    }

    /// Whether device `dev` (as the maps of the process whose /proc
    /// directory is `dir` show it) may give one device and inode to several
    /// files: btrfs and bcachefs show the filesystem's device for every
    /// subvolume, each numbering its inodes afresh; an overlay its own device
    /// with its layers' inode numbers. True for a device no table shows;
    /// false when no table can be read at all.
    pub fn shares_inodes(&self, dev: (u32, u32), dir: &Path) -> bool {
        let Some(mut known) = self.known() else {
            return false;
        };
        if !known.devs.contains_key(&dev) {
            known.read_once(dir);
        }
        // a device no table shows may be of any type: taken as sharing
        known.shared_inodes.contains(&dev) || !known.devs.contains_key(&dev)
    }

    /// Whether a file on mount `id` (`statx`'s `STATX_MNT_ID`), found
    /// through `dir` (a process's /proc directory, or none: our own
    /// namespace), may be read. A mount made since the tables were read is
    /// looked for in them once more.
    pub fn trust_mount(&self, id: u32, dir: Option<&Path>) -> FsTrust {
        let Some(mut known) = self.known() else {
            return FsTrust::Readable;
        };
        if known.unsettled {
            return FsTrust::Unsettled;
        }
        if !known.ids.contains_key(&id) {
            let dir = dir.map_or_else(|| self.own.clone(), Path::to_path_buf);
            known.read_once(&dir);
        }
        if !known.ids.contains_key(&id) && known.may_read_another() && known.again.insert(id) {
            // a mount made since: the table again, once for this mount
            known.add(&self.own, true);
        }
        known.ids.get(&id).copied().unwrap_or(FsTrust::Unmounted)
    }

    /// Forgets the verdict on mount `id` and reads our table and `dir`'s
    /// again, unless `id` was judged for the mount of unique id `unique`
    /// (see [`Mounts::trust_fd`]; at most [`MAX_READS`] times).
    fn judge_again_unless(&self, id: u32, unique: u64, dir: Option<&Path>) {
        let Some(mut known) = self.known() else {
            return;
        };
        // (the kernel's internal tmpfs, in no table, is never unmounted)
        let stays = |u: &u64| *u == unique || *u == u64::MAX;
        if known.unique.get(&id).is_some_and(stays) {
            return;
        }
        if !known.may_read_again() {
            // its verdict may be of a mount gone since: none stands now
            known.unsettled = true;
            return;
        }
        known.changes += 1;
        known.ids.remove(&id);
        known.add(&self.own, true);
        if let Some(dir) = dir {
            known.add(dir, false);
        }
        known.unique.insert(id, unique);
    }

    /// Whether what `fd` (an `O_PATH` descriptor, say) is open on, found
    /// through `dir` (see [`Mounts::trust_mount`]), may be read: its mount
    /// judged without asking its filesystem anything. A kernel that cannot
    /// tell the mount (before 5.8) has it read; any other failure to tell
    /// has it not read.
    ///
    /// Mount ids are reused (lowest free first): a verdict kept for an id
    /// may be of a mount since gone, its id now a FUSE mount's (a user's
    /// `allow_other` sshfs, or one in a user namespace). So where the
    /// kernel gives mounts unique ids too (6.8+), an id met on a mount
    /// other than the one it was judged for is judged afresh, from the
    /// tables read while `fd` holds its mount.
    pub fn trust_fd(&self, fd: std::os::fd::BorrowedFd<'_>, dir: Option<&Path>) -> FsTrust {
        match crate::sys::mount_id(fd) {
            Ok(id) => {
                if let Ok(unique) = crate::sys::mount_id_unique(fd) {
                    self.judge_again_unless(id, unique, dir);
                }
                self.trust_mount(id, dir)
            }
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => FsTrust::Readable,
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => FsTrust::Readable,
            Err(_) => FsTrust::Unmounted,
        }
    }

    /// The id of device `dev`'s one mount in our own table, if it is
    /// readable ([`FsTrust::Readable`] there), does not
    /// [`Mounts::shares_inodes`] and is mounted exactly once, so that no
    /// bind mount shows its files at a second place in our namespace; and
    /// only while the table as last read was whole (a table past 8 MiB,
    /// which any user can pad with FUSE mounts, says no).
    pub fn sole_mount(&self, dev: (u32, u32)) -> Option<u32> {
        let known = self.known()?;
        let readable = known.devs.get(&dev) == Some(&FsTrust::Readable);
        if known.unsettled || !readable || known.shared_inodes.contains(&dev) {
            return None;
        }
        known.own_once.as_ref()?.get(&dev).copied()
    }

    /// How many times our own table was read again because it changed
    /// (polled here), `usize::MAX` once it changed too often to follow:
    /// what [`Mounts::sole_mount`] said before a change may not hold after
    /// it.
    pub fn generation(&self) -> usize {
        self.known()
            .map_or(0, |k| if k.unsettled { usize::MAX } else { k.changes })
    }
}

/// The devices a table shows mounted exactly once, with that mount's id.
fn mounted_once(mounts: &[Mount]) -> HashMap<(u32, u32), u32> {
    let mut count: HashMap<(u32, u32), (usize, u32)> = HashMap::new();
    for m in mounts {
        let c = count.entry(m.dev).or_insert((0, m.id));
        c.0 += 1;
    }
    count
        .into_iter()
        .filter(|&(_, (n, _))| n == 1)
        .map(|(d, (_, id))| (d, id))
        .collect()
}

/// The mount tables of this process's /proc, for reads of live processes'
/// files outside a scan (build ids of watched maps, `archive`, `convert`,
/// `pprof`) and paths walked in one. A scan makes it before its workers
/// start (see [`Mounts::new`]).
pub fn host() -> &'static Mounts {
    static HOST: std::sync::OnceLock<Mounts> = std::sync::OnceLock::new();
    HOST.get_or_init(|| Mounts::new(Path::new("/proc")))
}

/// The text of `dir/mountinfo`, at most [`MAX_MOUNTINFO`] bytes of whole
/// lines; `None` if it cannot be read. A line cut by that bound is left
/// out, not parsed: cut in its type (`... - fu`), a FUSE mount would pass
/// for another filesystem (any user can pad the table past the bound with
/// FUSE mounts under long names). Mounts past the bound are unknown, so
/// their files are not read. With the text, whether it is the whole table.
fn read_mountinfo(dir: &Path) -> Option<(Vec<u8>, bool)> {
    let file = std::fs::File::open(dir.join("mountinfo")).ok()?;
    let mut text = Vec::new();
    file.take(MAX_MOUNTINFO + 1).read_to_end(&mut text).ok()?;
    let whole = text.len() as u64 <= MAX_MOUNTINFO && text.last().is_none_or(|&b| b == b'\n');
    text.truncate(MAX_MOUNTINFO as usize);
    whole_lines(&mut text);
    Some((text, whole))
}

#[cfg(test)]
mod tests {
    use super::*;

    // A device shown by two mounts (a bind mount) is not mounted once; one
    // line per device is, with its mount's id, whatever its mount point.
    #[test]
    fn a_bind_mounted_device_is_not_mounted_once() {
        let table = b"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
            23 22 0:40 / /tmp rw - tmpfs none rw\n\
            24 22 0:41 / /a rw - tmpfs none rw\n\
            25 22 0:41 /sub /b rw - tmpfs none rw\n";
        let mounts: Vec<Mount> = parse_mountinfo(table).collect();
        let want: HashMap<(u32, u32), u32> = [((8, 1), 22), ((0, 40), 23)].into();
        assert_eq!(mounted_once(&mounts), want);
    }

    /// Held by each test that mounts: one's mounts would take the mount id
    /// another waits to see reused, or add changes another counts.
    static MOUNTING: Mutex<()> = Mutex::new(());

    fn mounting() -> std::sync::MutexGuard<'static, ()> {
        MOUNTING.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Mounts a tmpfs at `at`.
    fn mount_tmpfs(at: &Path) {
        let st = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "none"])
            .arg(at)
            .status();
        assert!(st.unwrap().success(), "mount {at:?}");
    }

    /// Unmounts its path when dropped.
    struct Mounted<'a>(&'a Path);

    impl Drop for Mounted<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(self.0).status();
        }
    }

    /// Two empty directories `a` and `b` in a new temporary one, a tmpfs
    /// mounted on `a` (unmount it by dropping the [`Mounted`] made of the
    /// returned `a`), and that tmpfs's device.
    fn tmpfs_on_a() -> (tempfile::TempDir, PathBuf, PathBuf, (u32, u32)) {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        mount_tmpfs(&a);
        let dev = std::fs::metadata(&a).unwrap().dev();
        (tmp, a, b, (libc::major(dev), libc::minor(dev)))
    }

    // Past the re-reads a scan allows, a change of our mount table leaves no
    // verdict standing: a device judged readable before is "unsettled", not
    // read (it kept "readable", though its number may have gone to FUSE).
    #[test]
    #[ignore = "needs root (mounts)"]
    fn verdicts_past_the_rereads_are_unsettled() {
        let _one_at_a_time = mounting();
        let (_tmp, a, b, dev) = tmpfs_on_a();
        let _a = Mounted(&a);
        let m = Mounts::new(Path::new("/proc"));
        let own = Path::new("/proc/self");
        assert_eq!(m.trust(dev, own), FsTrust::Readable);
        // a change (a mount or an unmount) before each verdict: each read
        // again then, until the re-reads run out
        let mut changes = 0;
        let mut verdict = FsTrust::Readable;
        while verdict == FsTrust::Readable {
            assert!(
                changes <= 2 * MAX_READS,
                "still judged after {changes} changes"
            );
            mount_tmpfs(&b);
            let b = Mounted(&b);
            changes += 1;
            verdict = m.trust(dev, own);
            if verdict == FsTrust::Readable {
                drop(b);
                changes += 1;
                verdict = m.trust(dev, own);
            }
        }
        assert_eq!(verdict, FsTrust::Unsettled);
        assert_eq!(m.trust(dev, own), FsTrust::Unsettled);
        // (another test's mount may come with one of ours: fewer reads)
        let reads = MAX_READS / 2..=MAX_READS + 1;
        assert!(
            reads.contains(&changes),
            "unsettled after {changes} changes"
        );
    }

    // The byte budget ends the re-reads as the count does: with the bytes
    // read brought to just under 256 MiB (as ~32 re-reads of a table padded
    // to 8 MiB would), one change is still read, the next leaves no verdict
    // standing, long before 1,024 re-reads.
    #[test]
    #[ignore = "needs root (mounts)"]
    fn verdicts_past_the_byte_budget_are_unsettled() {
        let _one_at_a_time = mounting();
        let (_tmp, a, b, dev) = tmpfs_on_a();
        let _a = Mounted(&a);
        let m = Mounts::new(Path::new("/proc"));
        let own = Path::new("/proc/self");
        assert_eq!(m.trust(dev, own), FsTrust::Readable);
        let lock = || m.known.lock().unwrap();
        let read_first = lock().bytes;
        assert!(read_first > 0, "our table's bytes are counted");
        lock().bytes = MAX_BYTES - 1;
        mount_tmpfs(&b);
        let b = Mounted(&b);
        assert_eq!(m.trust(dev, own), FsTrust::Readable, "read again once");
        assert!(lock().bytes >= MAX_BYTES, "the re-read is counted");
        assert!(lock().changes <= 2, "the count of re-reads is far off");
        drop(b);
        assert_eq!(m.trust(dev, own), FsTrust::Unsettled);
    }

    // A mount id judged readable (root's tmpfs), freed by an unmount and
    // taken by a tmpfs a user namespace mounts, is judged again when a
    // descriptor shows it on another mount (unique ids, 6.8+): it kept
    // "readable", so a FUSE mount taking it would have been read.
    #[test]
    #[ignore = "needs root (mounts, user namespaces), Linux 6.8+"]
    fn a_reused_mount_id_is_judged_again() {
        let _one_at_a_time = mounting();
        use std::os::fd::AsFd;
        use std::process::Command;
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let (t, go, done) = (d.join("t"), d.join("go"), d.join("done"));
        std::fs::create_dir(&t).unwrap();
        let script = format!(
            "n=0; while [ ! -e {go} ]; do n=$((n+1)); [ $n -lt 3000 ] || exit 1; sleep 0.01; done; \
             mount -t tmpfs none {t} && touch {t}/f {done} && exec sleep 60",
            go = go.display(),
            t = t.display(),
            done = done.display()
        );
        let mut ns = Command::new("unshare")
            .args(["-Urm", "sh", "-c", &script])
            .spawn()
            .unwrap();
        let theirs = PathBuf::from(format!("/proc/{}", ns.id()));
        let ours = std::fs::read_link("/proc/self/ns/mnt").unwrap();
        let until = |what: &str, cond: &dyn Fn() -> bool| {
            let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while !cond() {
                assert!(
                    std::time::Instant::now() < end,
                    "timed out waiting for {what}"
                );
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        };
        until("the namespace", &|| {
            std::fs::read_link(theirs.join("ns/mnt")).is_ok_and(|n| n != ours)
        });
        let mount = Command::new("mount")
            .args(["-t", "tmpfs", "none"])
            .arg(&t)
            .status();
        assert!(mount.unwrap().success());
        std::fs::write(t.join("f"), b"").unwrap();
        let m = Mounts::new(Path::new("/proc"));
        let mine = crate::sys::open_path(&t.join("f")).unwrap();
        assert_eq!(m.trust_fd(mine.as_fd(), None), FsTrust::Readable);
        let id = crate::sys::mount_id(mine.as_fd()).unwrap();
        drop(mine);
        assert!(Command::new("umount").arg(&t).status().unwrap().success());
        std::fs::write(&go, b"").unwrap();
        until("their tmpfs", &|| done.exists());
        let mut inside = theirs.join("root").into_os_string();
        inside.push(t.join("f"));
        let f = crate::sys::open_path(Path::new(&inside)).unwrap();
        let now = crate::sys::mount_id(f.as_fd()).unwrap();
        assert_eq!(now, id, "their tmpfs got another mount id: nothing to test");
        assert_eq!(m.trust_fd(f.as_fd(), Some(&theirs)), FsTrust::UserNs);
        let _ = ns.kill();
        let _ = ns.wait();
    }

    // Devices are judged by the scan's own table, then by the mapping
    // process's (a table whose owner cannot be told lends its FUSE
    // verdicts only); one in neither is unmounted; without a table of its
    // own the scan judges nothing; an overlay on a FUSE directory is FUSE,
    // and so is one on that overlay.
    #[test]
    fn devices_are_judged_by_the_tables_that_show_them() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let write = |d: &str, text: &str| {
            std::fs::create_dir_all(root.join(d)).unwrap();
            std::fs::write(root.join(d).join("mountinfo"), text).unwrap();
        };
        let none = Mounts::new(root);
        assert_eq!(none.trust((0, 40), &root.join("7")), FsTrust::Readable);
        write("self", "1 0 254:0 / / rw - ext4 /dev/vda rw\n");
        write(
            "7",
            "5 0 0:40 / / rw - fuse.sshfs h: rw\n6 5 0:41 / /t rw - tmpfs t rw\n",
        );
        let m = Mounts::new(root);
        let seven = root.join("7");
        assert_eq!(m.trust((254, 0), &seven), FsTrust::Readable);
        assert_eq!(m.trust((0, 40), &seven), FsTrust::Fuse);
        // a table whose namespace's owner cannot be told (here: no ns/mnt)
        // lends its FUSE verdicts only: its tmpfs is not known
        assert_eq!(m.trust((0, 41), &seven), FsTrust::Unmounted);
        assert_eq!(m.trust((0, 99), &seven), FsTrust::Unmounted);
        // read once: a table changed since is not read again
        write("7", "7 0 0:99 / / rw - ext4 /dev/y rw\n");
        assert_eq!(m.trust((0, 99), &seven), FsTrust::Unmounted);
        // by mount id; a layer at or under a FUSE mount point (not one that
        // only shares its first letters)
        assert_eq!(m.trust_mount(1, None), FsTrust::Readable);
        assert_eq!(m.trust_mount(5, Some(&seven)), FsTrust::Fuse);
        write(
            "self",
            "1 0 254:0 / / rw - ext4 /dev/vda rw\n3 1 0:50 / /mnt/f rw - fuse f rw\n",
        );
        assert_eq!(m.trust_mount(3, None), FsTrust::Fuse);
        assert_eq!(m.trust_mount(9, None), FsTrust::Unmounted);
        for (path, want) in [
            ("/mnt/f", true),
            ("/mnt/f/lib.so", true),
            ("/mnt/fx/lib.so", false),
        ] {
            let under =
                crate::proc::mountinfo::directories_of(path.as_bytes()).any(|d| d == b"/mnt/f");
            assert_eq!(under, want, "{path}");
        }
        write(
            "self",
            "1 0 254:0 / / rw - ext4 /dev/vda rw\n3 1 0:50 / /mnt/f rw - fuse f rw\n\
             4 1 0:51 / /o rw - overlay o rw,lowerdir=/a\\:b:/mnt/f/low,upperdir=/u,workdir=/w\n\
             8 1 0:52 / /p rw - overlay p rw,lowerdir=/a,upperdir=/u,workdir=/w\n\
             9 1 0:53 / /q rw - overlay q rw,lowerdir=/o/x,upperdir=/u2,workdir=/w2\n",
        );
        let o = Mounts::new(root);
        assert_eq!(o.trust((0, 51), &seven), FsTrust::Fuse);
        assert_eq!(o.trust((0, 52), &seven), FsTrust::Readable);
        assert_eq!(o.trust((0, 53), &seven), FsTrust::Fuse);
    }
}
