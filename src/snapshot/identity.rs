//! What tells one map of a place from another ([`MapIdentity`]): the watch
//! filter (`WatchFilter`) drops a watched map recorded
//! while the scan read the one map there when the two are identical, as
//! replaying it would change nothing.

use crate::model::MAX_BUILD_ID;
use crate::perf::events::MapRecord;

/// What tells one map of a place from another in an MMAP2 record: the
/// offset, prot, shared or private, the file and the file name (a hash of
/// it, seeded per run) as perf writes them. The file is known by its build
/// id, its device and inode, or both: a record carries one form (the scan
/// writes an inode where it has no id: anonymous memory, a file with no ELF
/// note or an id of over 20 bytes, `--no-buildid`), and each side adds the
/// other where it has it ([`MapIdentity::with_file`]): the scan the device
/// and inode of a map it wrote by build id, the watch the id of its file
/// read after the scan over the kernel's inode form (`WatchedIds`; none
/// when that file is gone by then or its `stat` device is not the maps',
/// as on btrfs). Two identities are the same map when a form both have is
/// equal ([`MapIdentity::same`]).
///
/// Without a file (device and inode 0: anonymous memory, `[heap]`,
/// `[stack]`) the offset is left out: the kernel records the VMA's page
/// offset, /proc shows 0, and perf keeps neither. Anonymous memory named
/// after it was mapped (`[anon:NAME]`, `[anon_shmem:NAME]`: prctl
/// PR_SET_VMA_ANON_NAME) is compared under the name the kernel wrote at
/// mmap time, which never has one (`//anon`, `/dev/zero (deleted)`): the
/// scan's read is the later truth of the one map there.
///
/// A record with neither form has [`MapIdentity::NONE`], the same as
/// nothing. A watched map identical to one the scan wrote at the same
/// place may be the same map read twice. The name is held as a hash (a
/// copy of it for every map would cost the filter its length again): a
/// file renamed and mapped again over itself, or an inode number reused
/// on one device, is told apart by its new name. Two files of one build
/// id mapped alike at one place under one name read as the same map, as
/// perf has them anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MapIdentity {
    pgoff: u64,
    /// The build id's bytes (`id_len` of them).
    id: [u8; MAX_BUILD_ID],
    /// The build id's length, or 0 for none.
    id_len: u8,
    /// The device major, minor and inode, when known.
    file: Option<(u32, u32, u64)>,
    /// PROT_* bits, and MAP_SHARED above them.
    prot: u8,
    /// The file name's hash ([`name_hash`]).
    name: u64,
}

/// A file name's hash, with a seed chosen once per run (a name crafted to
/// collide with another cannot be made ahead of the run): the hash of the
/// name the kernel writes for the map when /proc names it otherwise
/// ([`kernel_name`]).
fn name_hash(name: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    static SEED: std::sync::OnceLock<foldhash::fast::RandomState> = std::sync::OnceLock::new();
    SEED.get_or_init(Default::default)
        .hash_one(kernel_name(name))
}

/// The name the kernel's MMAP2 gives a map /proc names `name`: anonymous
/// memory named with prctl (`[anon:NAME]`, Linux 5.17+, and
/// `[anon_shmem:NAME]`, shared anonymous memory, 6.2+) has the name it had
/// when mapped: `//anon`, or its shmem file's `/dev/zero (deleted)`. (No
/// file's path starts with `[`.)
fn kernel_name(name: &[u8]) -> &[u8] {
    if name.starts_with(b"[anon:") {
        b"//anon"
    } else if name.starts_with(b"[anon_shmem:") {
        b"/dev/zero (deleted)"
    } else {
        name
    }
}

impl MapIdentity {
    /// No identity: the same as nothing.
    pub const NONE: MapIdentity = MapIdentity {
        pgoff: 0,
        id: [0; MAX_BUILD_ID],
        id_len: 0,
        file: None,
        prot: 0,
        name: 0,
    };

    /// The identity of a map record (the scan's, or a watched one), by the
    /// build id or the device and inode it carries.
    pub fn of(m: &MapRecord) -> MapIdentity {
        if m.build_id.is_none() && m.dev_ino.is_none() {
            return MapIdentity::NONE;
        }
        let mut id = [0; MAX_BUILD_ID];
        let id_len = match m.build_id {
            Some(b) => {
                let b = b.as_bytes();
                id[..b.len()].copy_from_slice(b);
                b.len() as u8
            }
            None => 0,
        };
        let shared = u8::from(m.flags & libc::MAP_SHARED as u32 != 0);
        MapIdentity {
            pgoff: m.key.pgoff,
            id,
            id_len,
            file: None,
            prot: (m.prot & 0x0f) as u8 | shared << 4,
            name: name_hash(&m.key.filename),
        }
        .with_file(m.dev_ino)
    }

    /// This identity with its file's device and inode (`dev_ino`) known
    /// besides (unchanged for None): without a file (0, 0, 0) the offset
    /// is left out.
    pub fn with_file(mut self, dev_ino: Option<(u32, u32, u64)>) -> MapIdentity {
        if self == MapIdentity::NONE || dev_ino.is_none() {
            return self;
        }
        if dev_ino == Some((0, 0, 0)) {
            self.pgoff = 0;
        }
        self.file = dev_ino;
        self
    }

    /// The identity of a watched map: as the kernel wrote it (`kernel`,
    /// inode form) and as written out (`stamped`, with its file's build id
    /// when it could be read), both forms in one.
    pub fn watched(kernel: &MapRecord, stamped: &MapRecord) -> MapIdentity {
        MapIdentity::of(stamped).with_file(kernel.dev_ino)
    }

    /// Whether this and `other` are one map's: neither is [`Self::NONE`],
    /// a form both have (build id, or device and inode) is equal, and so
    /// are the offset, prot and name. (Where the build ids differ over one
    /// inode, the file was rewritten in place after the scan read it: the
    /// kernel recorded that inode either way.)
    pub fn same(&self, other: &MapIdentity) -> bool {
        let id = self.id_len != 0 && (self.id, self.id_len) == (other.id, other.id_len);
        let file = self.file.is_some() && self.file == other.file;
        (id || file) && (self.pgoff, self.prot, self.name) == (other.pgoff, other.prot, other.name)
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
            assert!(scan.same(&both) && both.same(&scan), "{scan:?}");
        }
    }

    // A map the scan wrote by build id, its device and inode known besides,
    // is the watched map whose id could not be read after the scan (its
    // file gone, or another `stat` device): by its device and inode.
    // Another inode, or another device, is another map.
    #[test]
    fn a_map_written_by_build_id_is_known_by_its_inode_too() {
        let (id, file) = (BuildId::new(&[7; 20]), Some((8, 1, 42)));
        let kernel = map(0x1000, 5, b"/lib/x.so", None, file);
        let unread = MapIdentity::watched(&kernel, &kernel);
        let written = MapIdentity::of(&map(0x1000, 5, b"/lib/x.so", id, None));
        assert!(!written.same(&unread), "the record alone has no inode");
        let scanned = written.with_file(file);
        assert!(scanned.same(&unread) && unread.same(&scanned));
        let stamped = map(0x1000, 5, b"/lib/x.so", id, None);
        assert!(scanned.same(&MapIdentity::watched(&kernel, &stamped)));
        for other in [(8, 1, 43), (8, 2, 42)] {
            let other = map(0x1000, 5, b"/lib/x.so", None, Some(other));
            assert!(
                !scanned.same(&MapIdentity::watched(&other, &other)),
                "{other:?}"
            );
        }
        assert_eq!(MapIdentity::NONE.with_file(file), MapIdentity::NONE);
    }

    // Anonymous memory named after it was mapped (`[anon:NAME]`, or
    // `[anon_shmem:NAME]` over shared anonymous memory's shmem file) is the
    // map the kernel recorded at mmap time under its unnamed name, the
    // same place, prot and file; not another name's, prot's or file's.
    #[test]
    fn named_anonymous_memory_is_the_kernels_unnamed_map() {
        let anon = |pgoff, prot, name: &[u8]| {
            MapIdentity::of(&map(pgoff, prot, name, None, Some((0, 0, 0))))
        };
        let kernel = anon(0x40, 5, b"//anon");
        assert!(anon(0, 5, b"[anon:jit code]").same(&kernel));
        assert!(anon(0, 5, b"[anon:]").same(&kernel));
        assert!(!anon(0, 7, b"[anon:jit code]").same(&kernel));
        assert!(!anon(0, 5, b"[anon:jit code]").same(&anon(0, 5, b"[stack]")));
        let shmem = |name: &[u8], ino| {
            let mut m = map(0, 3, name, None, Some((0, 1, ino)));
            m.flags = libc::MAP_SHARED as u32;
            MapIdentity::of(&m)
        };
        let kernel = shmem(b"/dev/zero (deleted)", 1025);
        assert!(shmem(b"[anon_shmem:ring]", 1025).same(&kernel));
        assert!(!shmem(b"[anon_shmem:ring]", 1026).same(&kernel));
        assert!(!shmem(b"/memfd:ring (deleted)", 1025).same(&kernel));
    }
}
