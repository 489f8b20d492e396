//! Which maps a BUILD_ID table id belongs to. perf's table is keyed by
//! path: it holds the id perf read at each path when the recording ended,
//! not which file that was. A library replaced while recorded leaves maps
//! of two files under one path (two device/inode/generation in the inode-form
//! MMAP2s) and one id, which can be the file of one of them at most; one
//! replaced after the last map of it but before the recording ended leaves
//! maps of one file and the replacement's id. So the table's id goes to a
//! map only when nothing says it may be another file's:
//! - the path's maps name several files: only to maps of the file at the
//!   path now (its device and inode), and only if its id is the table's
//!   (then it is the file the id was read from); maps of that file whose
//!   id is another follow the disk; the others are ambiguous;
//! - one file, and another file is at the path now with exactly the
//!   table's id: the id may be the replacement's; those maps are stale
//!   (a same-build replacement loses its id with them: the two cannot be
//!   told apart).
//!
//! A path can also name another file in a map's mount namespace (a
//! container) than here: its maps look the same (another inode at the
//! path, or several files under one path). Before such a map is kept as
//! stale or ambiguous, `convert` reads the id of the file its process maps,
//! while it lives (`MapIds` in the `buildids` module).
//!
//! Whether a path's maps name several files is known only once every map
//! of the recording has been seen: a conversion notes them as it goes, and
//! one that looked up a table id for such a path is made again knowing
//! them ([`MappedFiles::needs_second_pass`]).

use std::collections::HashMap;

use crate::model::{BuildId, FileKey};
use crate::proc::buildid::FileAt;

/// A mapped file as an inode-form MMAP2 names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MappedFile {
    /// maj, min, ino.
    pub key: FileKey,
    /// ino_generation.
    pub generation: u64,
}

/// What is known of the maps of one (cpumode, path).
#[derive(Debug, Clone, Copy)]
struct PathMaps {
    cpumode: u16,
    /// The first file its maps name.
    first: Option<MappedFile>,
    /// Its maps name another file too.
    several: bool,
    /// The table's id for it was looked up.
    table_used: bool,
}

/// The files each (cpumode, path) of a recording's inode-form MMAP2s
/// names, and for which a table id was looked up.
#[derive(Debug, Clone, Default)]
pub struct MappedFiles {
    by_path: HashMap<Vec<u8>, Vec<PathMaps>>,
}

impl MappedFiles {
    fn entry(&mut self, cpumode: u16, path: &[u8]) -> &mut PathMaps {
        // looked up by slice: a path's key is allocated once
        if !self.by_path.contains_key(path) {
            self.by_path.insert(path.to_vec(), Vec::new());
        }
        let modes = self.by_path.get_mut(path).expect("inserted above");
        match modes.iter().position(|m| m.cpumode == cpumode) {
            Some(i) => &mut modes[i],
            None => {
                modes.push(PathMaps {
                    cpumode,
                    first: None,
                    several: false,
                    table_used: false,
                });
                modes.last_mut().expect("pushed above")
            }
        }
    }

    /// Notes a map of (cpumode, path) naming `file`.
    pub fn note(&mut self, cpumode: u16, path: &[u8], file: MappedFile) {
        let e = self.entry(cpumode, path);
        match e.first {
            None => e.first = Some(file),
            Some(f) if f != file => e.several = true,
            Some(_) => {}
        }
    }

    /// Notes that the table's id for (cpumode, path) was looked up.
    pub fn note_table_use(&mut self, cpumode: u16, path: &[u8]) {
        self.entry(cpumode, path).table_used = true;
    }

    /// Whether the maps of (cpumode, path) seen name more than one file.
    pub fn several(&self, cpumode: u16, path: &[u8]) -> bool {
        self.by_path
            .get(path)
            .and_then(|modes| modes.iter().find(|m| m.cpumode == cpumode))
            .is_some_and(|m| m.several)
    }

    /// Whether a table id was looked up for a path whose maps turned out
    /// to name several files: what was decided for it before that was
    /// known must be decided again, knowing it.
    pub fn needs_second_pass(&self) -> bool {
        self.by_path
            .values()
            .flatten()
            .any(|m| m.several && m.table_used)
    }
}

/// What the table's id means for a map (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableVerdict {
    /// The map gets the table's id.
    Table,
    /// Not the table's: the file at the path is the map's own, its id is
    /// taken as for a file the table lacks.
    Disk,
    /// The id may be another file's of the path: kept, counted ambiguous.
    Ambiguous,
    /// The file at the path now is another, with the table's id: kept,
    /// counted stale.
    Stale,
}

/// The verdict for a map of `file` whose path has the table id `table`;
/// `several`: the path's maps name several files; `now`: the file at the
/// path now.
pub fn table_verdict(
    several: bool,
    file: FileKey,
    now: Option<&FileAt>,
    table: &BuildId,
) -> TableVerdict {
    let has_table_id = |n: &FileAt| {
        n.id.as_ref()
            .is_some_and(|id| id.as_deref() == Some(table.as_bytes()))
    };
    match now {
        Some(n) if several && n.key == file && has_table_id(n) => TableVerdict::Table,
        Some(n) if several && n.key == file => TableVerdict::Disk,
        _ if several => TableVerdict::Ambiguous,
        // another inode (a device alone differs on overlayfs and btrfs
        // for the same file)
        Some(n) if n.key.inode != file.inode && has_table_id(n) => TableVerdict::Stale,
        _ => TableVerdict::Table,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(inode: u64) -> FileKey {
        FileKey::on_one_device(inode)
    }

    fn at(inode: u64, id: &[u8]) -> FileAt {
        FileAt {
            key: key(inode),
            id: Some(Some(id.to_vec())),
        }
    }

    // Several files under one path: the table's id only for the file at
    // the path now when its id is the table's; that file with another id
    // follows the disk; every other file is ambiguous, and with nothing
    // at the path all are.
    #[test]
    fn several_files_get_the_id_only_where_proven() {
        let t = BuildId::new(&[2; 20]).unwrap();
        let v = |file, now: Option<FileAt>| table_verdict(true, key(file), now.as_ref(), &t);
        assert_eq!(v(2, Some(at(2, &[2; 20]))), TableVerdict::Table);
        assert_eq!(v(1, Some(at(2, &[2; 20]))), TableVerdict::Ambiguous);
        assert_eq!(v(2, Some(at(2, &[3; 20]))), TableVerdict::Disk);
        assert_eq!(v(1, Some(at(3, &[3; 20]))), TableVerdict::Ambiguous);
        assert_eq!(v(1, None), TableVerdict::Ambiguous);
        // another device, same inode: not proven the same file
        let mut other_dev = at(2, &[2; 20]);
        other_dev.key.dev_minor = 9;
        assert_eq!(v(2, Some(other_dev)), TableVerdict::Ambiguous);
    }

    // One file under the path: the table's id, unless another inode is
    // at the path now with exactly that id (the id may be its).
    #[test]
    fn one_file_keeps_the_table_id_unless_the_replacement_has_it() {
        let t = BuildId::new(&[2; 20]).unwrap();
        let v = |file, now: Option<FileAt>| table_verdict(false, key(file), now.as_ref(), &t);
        assert_eq!(v(1, Some(at(1, &[9; 20]))), TableVerdict::Table);
        assert_eq!(v(1, Some(at(2, &[9; 20]))), TableVerdict::Table);
        assert_eq!(v(1, None), TableVerdict::Table);
        assert_eq!(v(1, Some(at(2, &[2; 20]))), TableVerdict::Stale);
        let mut other_dev = at(1, &[2; 20]);
        other_dev.key.dev_major = 0;
        assert_eq!(v(1, Some(other_dev)), TableVerdict::Table);
    }

    // A path's maps name several files once a second file is noted (the
    // same file again does not count), per cpumode; a second pass is
    // needed only where a table id was looked up for such a path.
    #[test]
    fn mapped_files_tell_when_a_second_pass_is_needed() {
        let f = |inode, generation| MappedFile {
            key: key(inode),
            generation,
        };
        let mut m = MappedFiles::default();
        m.note(2, b"/l.so", f(1, 0));
        m.note(2, b"/l.so", f(1, 0));
        m.note_table_use(2, b"/l.so");
        assert!(!m.several(2, b"/l.so") && !m.needs_second_pass());
        m.note(1, b"/l.so", f(5, 0));
        m.note(2, b"/other.so", f(7, 0));
        m.note(2, b"/other.so", f(7, 1));
        assert!(m.several(2, b"/other.so") && !m.several(1, b"/l.so"));
        assert!(!m.needs_second_pass(), "no table id for /other.so");
        m.note(2, b"/l.so", f(2, 0));
        assert!(m.several(2, b"/l.so") && m.needs_second_pass());
    }
}
