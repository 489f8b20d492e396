//! What one scan worker already handed the writer of each file: the name it
//! mapped the file under and its build id. A library mapped by every
//! process on a host is then collected, sorted and copied for the BUILD_ID
//! table and the summary once per worker, not once per process (at 200
//! processes of 110 executable maps, that work was a third of the scan's
//! user-space time).

use std::collections::HashMap;

use crate::memo::Slots;
use crate::model::{BuildId, FileKey, Name, Vma};

/// Bytes held at most (names, and [`ENTRY_BYTES`] per file) before the
/// memo starts over: it only saves work, so a host of many distinct files
/// costs time, not memory, whether their names are long or short.
const MAX_BYTES: usize = 1 << 20;

/// What an entry costs besides its name's bytes: a 56-byte slot, about two
/// slots per entry in the table as it grows, and the name's own allocation
/// (32 bytes at least). A helper's count with 100,000 two-byte names: at 64
/// the memo peaked at 2.7 MiB; at this count the table holds 2.5x fewer
/// entries (the peak is estimated, not measured).
const ENTRY_BYTES: usize = 160;

/// See the module doc. Each worker has its own, for one scan: a worker
/// takes processes in pid order, so the first process (in the order they
/// are written) to map a file under a name is handed on by a worker that
/// has not reported it yet, and the writer sees every pair and every DSO
/// no later than without the memo.
#[derive(Default)]
pub struct Reported {
    files: HashMap<FileKey, Seen, foldhash::fast::RandomState>,
    /// Bytes `files` holds, as [`MAX_BYTES`] counts them.
    bytes: usize,
    /// The files asked about last, one per slot, as `files` has them (or
    /// had them, before a start over: still reported): every process asks
    /// about the same libraries, so most questions are answered here
    /// without a hash (see [`crate::memo`]). Its names are held beyond
    /// [`MAX_BYTES`]: at most `SEEN_SLOTS` of them (under 4 KiB each).
    recent: Slots<FileKey, Seen, SEEN_SLOTS>,
}

/// Slots of [`Reported::recent`].
const SEEN_SLOTS: usize = 128;

/// A file as last reported.
#[derive(Clone)]
struct Seen {
    name: Name,
    /// Its build id, when one was reported (the summary then counts it
    /// found).
    build_id: Option<BuildId>,
}

/// The key of the vDSO, which has no inode: no file-backed map has inode 0.
const VDSO_KEY: FileKey = FileKey {
    dev_major: 0,
    dev_minor: 0,
    inode: 0,
};

impl Reported {
    /// Whether `v` may bring the writer something not yet reported: a
    /// (file name, build id) pair for the table, or a DSO (or its build id
    /// being found) for the summary. A `true` is remembered as reported,
    /// so the caller must hand `v` on.
    pub fn is_new(&mut self, v: &Vma) -> bool {
        let key = match v.file_key() {
            Some(k) => k,
            None if v.is_vdso() => VDSO_KEY,
            // neither a DSO nor (from a scan) a build id
            None => return v.build_id.is_some(),
        };
        // names are shared by the scan: the same copy is the same name
        let known = |seen: &Seen| {
            (seen.name.shares(&v.name) || *seen.name == *v.name)
                && (v.build_id.is_none() || v.build_id == seen.build_id)
        };
        if matches!(self.recent.find(&key), Some((_, seen)) if known(seen)) {
            return false;
        }
        if let Some(seen) = self.files.get_mut(&key) {
            if known(seen) {
                self.recent.put::<FileKey>(key, seen.clone());
                return false;
            }
            if seen.name.shares(&v.name) || *seen.name == *v.name {
                seen.build_id = v.build_id;
                self.recent.put::<FileKey>(key, seen.clone());
                return true;
            }
        }
        if self.bytes + ENTRY_BYTES + v.name.len() > MAX_BYTES {
            // a new table: `clear` would keep the old one's slots
            self.files = HashMap::default();
            self.bytes = 0;
        }
        self.bytes += ENTRY_BYTES + v.name.len();
        let seen = Seen {
            name: v.name.clone(),
            build_id: v.build_id,
        };
        self.recent.put::<FileKey>(key, seen.clone());
        let old = self.files.insert(key, seen);
        if let Some(old) = old {
            self.bytes -= ENTRY_BYTES + old.name.len();
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Perms;

    fn vma(inode: u64, name: &[u8], id: Option<u8>) -> Vma {
        Vma {
            start: 0x1000,
            end: 0x2000,
            offset: 0,
            perms: Perms(Perms::READ.0 | Perms::EXEC.0),
            dev_major: 8,
            dev_minor: 1,
            inode,
            name: name.into(),
            build_id: id.and_then(|b| BuildId::new(&[b; 20])),
        }
    }

    // A file is new once per (name, build id); a build id found later, a
    // second name (hard link) and the vDSO are new; anonymous maps never.
    #[test]
    fn each_file_is_reported_once_per_name_and_id() {
        let mut r = Reported::default();
        assert!(r.is_new(&vma(7, b"/lib/a.so", None)));
        assert!(!r.is_new(&vma(7, b"/lib/a.so", None)));
        assert!(r.is_new(&vma(7, b"/lib/a.so", Some(1))));
        assert!(!r.is_new(&vma(7, b"/lib/a.so", Some(1))));
        assert!(!r.is_new(&vma(7, b"/lib/a.so", None)));
        assert!(r.is_new(&vma(7, b"/lib/link.so", Some(1))));
        assert!(r.is_new(&vma(7, b"/lib/a.so", Some(1))));
        assert!(r.is_new(&vma(0, b"[vdso]", Some(2))));
        assert!(!r.is_new(&vma(0, b"[vdso]", Some(2))));
        assert!(!r.is_new(&vma(0, b"", None)));
        assert!(!r.is_new(&vma(0, b"[heap]", None)));
    }

    // Past its byte budget the memo starts over rather than grow, with
    // long names or many short ones: files are reported again, never lost.
    #[test]
    fn the_memo_is_bounded() {
        let mut r = Reported::default();
        let long = vec![b'x'; 4000];
        for ino in 1..=1000 {
            assert!(r.is_new(&vma(ino, &long, Some(1))));
        }
        assert!(r.bytes <= MAX_BYTES);
        assert!(r.files.len() < 1000);
        assert!(r.is_new(&vma(1, &long, Some(1))));
        let mut r = Reported::default();
        for ino in 1..=100_000 {
            assert!(r.is_new(&vma(ino, b"/a", Some(1))));
            assert!(r.bytes <= MAX_BYTES);
        }
        assert!(r.files.len() <= MAX_BYTES / ENTRY_BYTES);
        assert!(r.files.capacity() <= 2 * MAX_BYTES / ENTRY_BYTES);
    }
}
