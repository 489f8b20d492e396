//! Build ids for the watch's maps. The watch's events ask the kernel for
//! none ([`crate::proc::watch::watch_attr`]): the kernel sets the
//! build-id flag of an mmap's record in a header it shares between the
//! events it writes that record for, and never clears it, so every event
//! written after one that asked for ids got the flag over an inode body,
//! another perf session's records included (perf 6.1 aborts reading them).
//! So each watched map comes with its device and inode, and its file's id
//! is read here from user space, once per file, as the scan reads its own:
//! through the mapping while it is there, else the path while it still
//! holds that inode.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::bytes::{Endian, Rd};
use crate::model::{BuildId, Perms, Vma, VDSO_NAME};
use crate::perf::consts::misc;
use crate::perf::events::{put_mmap2_id, Mmap2Id, MMAP2_ID_AT};
use crate::proc::buildid;

/// The ids read so far, by (major, minor, inode) of the file.
#[derive(Debug)]
pub struct WatchedIds {
    known: HashMap<(u32, u32, u64), Option<BuildId>>,
    /// Ids are read (not with `--no-buildid`: the watched maps stay in
    /// inode form, as the scan's are).
    on: bool,
}

impl Default for WatchedIds {
    fn default() -> Self {
        WatchedIds::new(true)
    }
}

impl WatchedIds {
    /// Ids read when `on`; none otherwise.
    pub fn new(on: bool) -> WatchedIds {
        WatchedIds {
            known: HashMap::new(),
            on,
        }
    }

    /// Gives a watched MMAP2 in inode form (this machine's byte order; the
    /// body without its trailer) its file's build id, in place: the body's
    /// identity in build-id form and `misc`'s flag set. Left as it is when
    /// the id cannot be read (the file unmapped and replaced or gone, no
    /// ELF, no id) or the map is anonymous.
    pub fn stamp(&mut self, misc: &mut u16, body: &mut Cow<'_, [u8]>) {
        if !self.on || *misc & misc::MMAP_BUILD_ID != 0 {
            return;
        }
        let Some((pid, vma)) = watched_vma(body) else {
            return;
        };
        let id = if vma.name.as_ref() == VDSO_NAME {
            buildid::vdso_build_id()
        } else if vma.inode == 0 || vma.name.first() != Some(&b'/') {
            None
        } else {
            let key = (vma.dev_major, vma.dev_minor, vma.inode);
            // (a file that could not be read is not tried again: a flood of
            // maps of one file costs one try)
            *self.known.entry(key).or_insert_with(|| read_id(pid, &vma))
        };
        let Some(id) = id else {
            return;
        };
        let mut form = Vec::with_capacity(24);
        put_mmap2_id(&mut form, Endian::NATIVE, &Mmap2Id::BuildId(id));
        // (copied only now: most watched maps keep their body)
        if let Some(at) = body.to_mut().get_mut(MMAP2_ID_AT..MMAP2_ID_AT + form.len()) {
            at.copy_from_slice(&form);
            *misc |= misc::MMAP_BUILD_ID;
        }
    }
}

/// The VMA an inode-form MMAP2 body tells of (as much of it as reading
/// its file's id needs), or None for a body too short.
fn watched_vma(body: &[u8]) -> Option<(u32, Vma)> {
    let r = Rd(Endian::NATIVE);
    let pid = r.u32(body, 0)?;
    let start = r.u64(body, 8)?;
    let len = r.u64(body, 16)?;
    let name = body.get(64..)?;
    let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
    let vma = Vma {
        start,
        end: start.checked_add(len)?,
        offset: r.u64(body, 24)?,
        perms: Perms::default(),
        dev_major: r.u32(body, 32)?,
        dev_minor: r.u32(body, 36)?,
        inode: r.u64(body, 40)?,
        name: name.into(),
        build_id: None,
    };
    Some((pid, vma))
}

/// The id of the file of `vma`, mapped by process `pid`: through
/// `map_files` while it is that file, else the path (seen from the
/// process's root) while it is, both by device and inode
/// ([`buildid::read_live_build_id`], verified only). Unlike the
/// scan's read, which follows its VMA's query within microseconds, this
/// comes after the whole scan, time enough to map another file of the
/// same inode number from another device over the place: so the device
/// must match too (a file on overlayfs or btrfs, whose `stat` device is not
/// the maps', gets no id here and stays in inode form).
fn read_id(pid: u32, vma: &Vma) -> Option<BuildId> {
    let range = (vma.start, vma.end);
    match buildid::read_live_build_id(pid, range, &vma.name, vma.file_key()?)? {
        (raw, buildid::Trust::Verified) => BuildId::new(&raw?),
        (_, buildid::Trust::Unverified) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::PutExt;
    use std::path::Path;

    /// An inode-form MMAP2 body of this process (no trailer).
    fn body(start: u64, len: u64, (maj, min, ino): (u32, u32, u64), name: &[u8]) -> Vec<u8> {
        let e = Endian::NATIVE;
        let mut b = Vec::new();
        let me = std::process::id();
        b.put_u32(e, me);
        b.put_u32(e, me);
        b.put_u64(e, start);
        b.put_u64(e, len);
        b.put_u64(e, 0);
        put_mmap2_id(
            &mut b,
            e,
            &Mmap2Id::Inode {
                maj,
                min,
                ino,
                ino_generation: 0,
            },
        );
        b.put_u32(e, 5);
        b.put_u32(e, 2);
        b.extend_from_slice(name);
        b.resize((b.len() + 1).next_multiple_of(8), 0);
        b
    }

    // A watched map of a file this process maps gets that file's id in
    // build-id form (the flag set); an anonymous one, and one whose inode
    // or device is not the mapped file's, are left as they are.
    #[test]
    fn watched_maps_get_their_files_ids() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let line = (maps.lines())
            .find(|l| l.contains("libc.so") && l.split_whitespace().nth(1) == Some("r-xp"))
            .expect("libc mapped");
        let f: Vec<&str> = line.split_whitespace().collect();
        let (s, e) = f[0].split_once('-').unwrap();
        let (s, e) = (
            u64::from_str_radix(s, 16).unwrap(),
            u64::from_str_radix(e, 16).unwrap(),
        );
        let (maj, min) = f[3].split_once(':').unwrap();
        let dev = (
            u32::from_str_radix(maj, 16).unwrap(),
            u32::from_str_radix(min, 16).unwrap(),
        );
        let ino: u64 = f[4].parse().unwrap();
        let want = buildid::read_build_id_at_path(Path::new(f[5]))
            .unwrap()
            .unwrap();
        let plain = body(s, e - s, (dev.0, dev.1, ino), f[5].as_bytes());
        // with --no-buildid, left in inode form
        let (mut b, mut m) = (Cow::Borrowed(&plain[..]), 2u16);
        WatchedIds::new(false).stamp(&mut m, &mut b);
        assert_eq!((m, &b[..]), (2, &plain[..]));
        let mut ids = WatchedIds::default();
        let (mut b, mut m) = (Cow::Borrowed(&plain[..]), 2u16);
        ids.stamp(&mut m, &mut b);
        assert_eq!(m, 2 | misc::MMAP_BUILD_ID);
        assert_eq!(b[32] as usize, want.len(), "the id's size");
        assert_eq!(&b[36..36 + want.len()], &want[..]);
        // anonymous; another inode; the same inode number on another device
        // (the mapping may be another file's by the time the watch is read)
        let others = [
            ((0, 0, 0), &b""[..]),
            ((dev.0, dev.1, ino + 1), f[5].as_bytes()),
            ((dev.0, dev.1 + 1, ino), f[5].as_bytes()),
        ];
        for (dev_ino, name) in others {
            let before = body(s, e - s, dev_ino, name);
            let (mut b, mut m) = (Cow::Borrowed(&before[..]), 2u16);
            ids.stamp(&mut m, &mut b);
            assert_eq!(m, 2, "{dev_ino:?}");
            assert!(matches!(b, Cow::Borrowed(_)), "left as it is: {dev_ino:?}");
        }
    }
}
