//! What one scan worker keeps from one maps file to the next, for both
//! walks: its build-id answers, its names, and the buffers the ioctl and
//! the text are read into, each made once per worker.

use super::idcache::LocalBuildIds;
use super::name_memo::NameMemo;
use super::names::Names;
use crate::model::PATH_MAX;

/// What one scan worker keeps from one maps file to the next: its copy of
/// the build-id answers, one copy of each name it read, the names it may
/// share by file and the buffer the ioctl writes names into.
#[derive(Default)]
pub struct Local {
    pub ids: LocalBuildIds,
    pub names: Names,
    pub(super) name_memo: NameMemo,
    pub(super) name_buf: NameBuf,
    pub(super) text_buf: TextBuf,
}

/// The PROCMAP_QUERY name buffer, made once per worker: on the stack it
/// cost a 4 KiB `memset` per process (8 MB at 2000 processes), on the heap
/// per process it made the allocator consolidate its small free chunks.
pub(super) struct NameBuf(pub(super) Box<[u8]>);

impl Default for NameBuf {
    fn default() -> Self {
        NameBuf(vec![0; MAX_NAME].into_boxed_slice())
    }
}

/// The name buffer: PATH_MAX, so longer names (ENAMETOOLONG) are the ones
/// the text parser also names `//toolong`.
const MAX_NAME: usize = PATH_MAX;

/// Bytes of text maps read at a time: the file is read in pieces of
/// whole lines, so its size (which a process can make hundreds of MB with
/// long names) is never held.
pub(super) const TEXT_CHUNK: usize = 64 * 1024;

/// Bytes of a line held at most: a PATH_MAX path with every byte escaped
/// as `\ooo`, and the fields before it. A longer line (`d_path` has no
/// limit) has its fields read from this much of its start and is named
/// `//toolong`; the rest of it is skipped unread into memory.
pub(super) const MAX_LINE: usize = 4 * PATH_MAX + 256;

/// The text walk's buffer, made (and zeroed) once per worker: a chunk and
/// the part of a line carried over. Made per process and zeroed before
/// each read it cost 128 KiB of `memset` a process (256 MB at 2000).
pub(super) struct TextBuf(pub(super) Box<[u8]>);

impl Default for TextBuf {
    fn default() -> Self {
        TextBuf(vec![0; TEXT_CHUNK + MAX_LINE].into_boxed_slice())
    }
}
