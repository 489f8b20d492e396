//! What tells one map of a place from another ([`MapIdentity`]): the watch
//! filter (`WatchFilter`) drops a watched map recorded
//! while the scan read the one map there when the two are identical, as
//! replaying it would change nothing.

use crate::model::MAX_BUILD_ID;
use crate::perf::events::MapRecord;

/// What tells one map of a place from another in an MMAP2 record, compared
/// exactly: the offset, prot, shared or private, the file and the file
/// name (a hash of it, seeded per run) as perf writes them. The file is its build id, else (inode
/// form) its device and inode: the scan writes an inode where it has no id
/// (anonymous memory, a file with no ELF note or an id of over 20 bytes,
/// `--no-buildid`), and the kernel writes every watched map in inode form,
/// its id read after (`WatchedIds`), so a watched map has
/// both ([`MapIdentity::watched`]). Without a file (device and inode 0:
/// anonymous memory, `[heap]`, `[stack]`) the offset is left out: the
/// kernel records the VMA's page offset, /proc shows 0, and perf keeps
/// neither. A record with neither form has [`MapIdentity::NONE`], the same
/// as nothing. A watched map identical to one the scan wrote at the same
/// place may be the same map read twice. The name is held as a hash (a
/// copy of it for every map would cost the filter its length again): a
/// file renamed and mapped again over itself, or an inode number reused
/// on one device, is told apart by its new name. Two files of one build
/// id mapped alike at one place under one name read as the same map, as
/// perf has them anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MapIdentity {
    pgoff: u64,
    /// The build id's bytes (`form` 1..=20 of them), or the device major,
    /// minor and inode in this machine's byte order (`form` [`INODE`]).
    file: [u8; MAX_BUILD_ID],
    /// The build id's length, [`INODE`], or 0 for no identity.
    form: u8,
    /// PROT_* bits, and MAP_SHARED above them.
    prot: u8,
    /// The file name's hash ([`name_hash`]).
    name: u64,
}

/// A file name's hash, with a seed chosen once per run (a name crafted to
/// collide with another cannot be made ahead of the run).
fn name_hash(name: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    static SEED: std::sync::OnceLock<foldhash::fast::RandomState> = std::sync::OnceLock::new();
    SEED.get_or_init(Default::default).hash_one(name)
}

/// [`MapIdentity::form`] of an inode-form identity (past any id's length).
const INODE: u8 = MAX_BUILD_ID as u8 + 1;

impl MapIdentity {
    /// No identity: the same as nothing.
    pub const NONE: MapIdentity = MapIdentity {
        pgoff: 0,
        file: [0; MAX_BUILD_ID],
        form: 0,
        prot: 0,
        name: 0,
    };

    /// The identity of a map record (the scan's, or a watched one), by its
    /// build id or else its device and inode.
    pub fn of(m: &MapRecord) -> MapIdentity {
        let mut file = [0; MAX_BUILD_ID];
        let (form, pgoff) = match (m.build_id, m.dev_ino) {
            (Some(id), _) => {
                let id = id.as_bytes();
                file[..id.len()].copy_from_slice(id);
                (id.len() as u8, m.key.pgoff)
            }
            (None, Some((maj, min, ino))) => {
                file[..4].copy_from_slice(&maj.to_ne_bytes());
                file[4..8].copy_from_slice(&min.to_ne_bytes());
                file[8..16].copy_from_slice(&ino.to_ne_bytes());
                let no_file = (maj, min, ino) == (0, 0, 0);
                (INODE, if no_file { 0 } else { m.key.pgoff })
            }
            (None, None) => return MapIdentity::NONE,
        };
        let shared = u8::from(m.flags & libc::MAP_SHARED as u32 != 0);
        MapIdentity {
            pgoff,
            file,
            form,
            prot: (m.prot & 0x0f) as u8 | shared << 4,
            name: name_hash(&m.key.filename),
        }
    }

    /// The identities of a watched map: as the kernel wrote it (`kernel`,
    /// inode form) and as written out (`stamped`, with its file's build id
    /// when it could be read). The scan's map may be in either form.
    pub fn watched(kernel: &MapRecord, stamped: &MapRecord) -> [MapIdentity; 2] {
        [MapIdentity::of(stamped), MapIdentity::of(kernel)]
    }

    /// Whether this and `other` are one map's (neither is [`Self::NONE`]).
    pub fn same(&self, other: &MapIdentity) -> bool {
        self.form != 0 && self == other
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::BuildId;
    use crate::perf::events::MapKey;

    /// A private map record over one page at 0x40000 with `pgoff`, `prot`,
    /// `name` and the file identity given.
    fn map(
        pgoff: u64,
        prot: u32,
        name: &[u8],
        build_id: Option<BuildId>,
        dev_ino: Option<(u32, u32, u64)>,
    ) -> MapRecord {
        MapRecord {
            key: MapKey {
                pid: 7,
                addr: 0x40000,
                len: 0x1000,
                pgoff,
                filename: name.to_vec(),
            },
            tid: 7,
            misc: 2,
            build_id,
            dev_ino,
            ino_generation: 0,
            prot,
            flags: libc::MAP_PRIVATE as u32,
        }
    }

    // Maps of one build id, or of one device and inode, are the same when
    // their offset, prot and name are; the two forms never are
    // each other; a record with neither form is no map's.
    #[test]
    fn maps_are_told_apart_by_build_id_or_inode() {
        let id = BuildId::new(&[7; 20]);
        let file = Some((8, 1, 42));
        let of =
            |pgoff, prot, name: &[u8], id, file| MapIdentity::of(&map(pgoff, prot, name, id, file));
        let by_id = of(0x1000, 5, b"/lib/x.so", id, None);
        let by_inode = of(0x1000, 5, b"/lib/x.so", None, file);
        assert!(by_id.same(&of(0x1000, 5, b"/lib/x.so", id, None)));
        assert!(by_inode.same(&of(0x1000, 5, b"/lib/x.so", None, file)));
        assert!(!by_id.same(&by_inode) && !by_inode.same(&by_id));
        let others = [
            of(0x2000, 5, b"/lib/x.so", None, file),
            of(0x1000, 1, b"/lib/x.so", None, file),
            of(0x1000, 5, b"/lib/xx.so", None, file),
            // a name of the same length: renamed, or the inode reused
            of(0x1000, 5, b"/lib/y.so", None, file),
            of(0x1000, 5, b"/lib/y.so", id, None),
            of(0x1000, 5, b"/lib/x.so", None, Some((8, 1, 43))),
            of(0x1000, 5, b"/lib/x.so", None, Some((8, 2, 42))),
            of(0x1000, 5, b"/lib/x.so", BuildId::new(&[7; 16]), None),
        ];
        for other in others {
            assert!(!by_inode.same(&other) && !by_id.same(&other), "{other:?}");
        }
        let none = of(0x1000, 5, b"/lib/x.so", None, None);
        assert_eq!(none, MapIdentity::NONE);
        assert!(!none.same(&none) && !MapIdentity::NONE.same(&MapIdentity::NONE));
    }

    // Anonymous memory (no device, no inode) is one map whatever the page
    // offset the kernel recorded (the scan's is 0), told apart by prot and
    // name; a file's offset still counts.
    #[test]
    fn anonymous_maps_leave_the_offset_out() {
        let anon = |pgoff, prot, name: &[u8]| {
            MapIdentity::of(&map(pgoff, prot, name, None, Some((0, 0, 0))))
        };
        assert!(anon(0, 3, b"//anon").same(&anon(0x40000, 3, b"//anon")));
        assert!(!anon(0, 3, b"//anon").same(&anon(0, 7, b"//anon")));
        assert!(!anon(0, 3, b"//anon").same(&anon(0, 3, b"[stack]")));
        let file = |pgoff| MapIdentity::of(&map(pgoff, 3, b"/dev/shm/x", None, Some((0, 25, 9))));
        assert!(!file(0).same(&file(0x40000)));
    }

    // A watched map is the scan's whether the scan wrote its build id or
    // its inode: its stamped record gives the one, the kernel's the other.
    #[test]
    fn a_watched_map_has_both_forms() {
        let id = BuildId::new(&[7; 20]);
        let kernel = map(0, 5, b"/lib/x.so", None, Some((8, 1, 42)));
        let stamped = map(0, 5, b"/lib/x.so", id, None);
        let both = MapIdentity::watched(&kernel, &stamped);
        for scan in [&kernel, &stamped] {
            let scan = MapIdentity::of(scan);
            assert!(both.iter().any(|w| scan.same(w)), "{scan:?}");
        }
    }
}
