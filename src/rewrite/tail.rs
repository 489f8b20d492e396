//! `merge --salvage` of a `-z` recording whose compressed data ends inside
//! a record (cut between the two halves of a ring buffer that wrapped,
//! which perf compresses apart): the records of its damaged tail (see
//! [`crate::perf::salvage::InnerCut::tail`]) are written out decompressed,
//! without the record cut short, by the streaming rewrite's visitor beside
//! the merge's scan; the records before the tail are copied as they are.
//! The output then ends whole: its zstd data ends where the data
//! decompressed so far is whole records.

use std::fs::File;
use std::path::Path;

use super::emit::Emitter;
use super::error::{out_err, MergeError};
use crate::perf::{Attrs, FormatError, Input, RecordHeader, Visitor, Walk};

/// The rewritten tail: the input's records from `from` up to `to` (the end
/// of its records: a stream's text after them stays) are replaced by the
/// `len` bytes of `file`.
pub struct Tail<'a> {
    pub from: u64,
    pub to: u64,
    pub file: &'a File,
    pub len: u64,
}

/// Where the damaged tail of a salvaged input begins, when it has one to
/// rewrite.
pub(super) fn tail_of(input: &Input) -> Option<u64> {
    input.salvaged.as_ref()?.inner?.tail
}

/// A visitor that hands every record to `scan`, and those from `from` on
/// (records inside a COMPRESSED one at its offset) to `tail` too.
struct Tee<'s, 'e, V> {
    scan: &'s mut V,
    tail: Emitter<'e>,
    from: u64,
}

impl<V: Visitor> Visitor for Tee<'_, '_, V> {
    fn stored(&mut self, at: u64, h: &RecordHeader, body: &[u8]) {
        self.scan.stored(at, h, body);
        if at >= self.from {
            self.tail.stored(at, h, body);
        }
    }

    fn record(
        &mut self,
        at: u64,
        h: RecordHeader,
        body: &[u8],
        attrs: &Attrs,
    ) -> Result<(), FormatError> {
        self.scan.record(at, h, body, attrs)?;
        if at >= self.from {
            self.tail.record(at, h, body, attrs)?;
        }
        Ok(())
    }
}

/// Walks `input` with `scan`; with `from` (where its damaged tail begins)
/// the records from there on are also written out decompressed into an
/// unlinked temporary file (its errors name `output`), returned with its
/// length.
pub(super) fn walk_with_tail<V: Visitor>(
    input: &Input,
    scan: &mut V,
    from: Option<u64>,
    output: &Path,
) -> Result<(Walk, Option<(File, u64)>), MergeError> {
    let Some(from) = from else {
        return Ok((input.walk(scan)?, None));
    };
    let mut file =
        tempfile::tempfile().map_err(out_err("creating a temporary file for", output))?;
    let mut tee = Tee {
        scan,
        tail: Emitter::decompressing(input.endian(), &input.file, &mut file),
        from,
    };
    let walk = input.walk(&mut tee)?;
    let mut tail = tee.tail;
    tail.flush();
    let len = tail.pos;
    let failed = tail.failed.take();
    drop(tail);
    match failed {
        Some(err) => Err(out_err("writing", output)(err)),
        None => Ok((walk, Some((file, len)))),
    }
}
