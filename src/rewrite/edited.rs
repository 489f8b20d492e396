//! Writing convert's edited file-mode output: the input with some of its
//! records replaced by others as long or longer. Records behind the last
//! growing edit keep their offsets modulo the page size (a zero gap in
//! front of the data section), so the kernel copies them at `cp`'s speed;
//! the feature sections follow under a new table.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;

use super::write::Sections;
use crate::perf::consts::feature;
use crate::perf::copy::{copy_range, PAGE};
use crate::perf::{FeatureTable, FileHeader, Input, Section};

/// One change to a file-mode input's records: the `old` bytes at `at`
/// become `new` (as long, or longer).
#[derive(Debug, Clone)]
pub struct Edit {
    /// File offset of the record replaced.
    pub at: u64,
    /// Its size.
    pub old: u64,
    /// The record that replaces it.
    pub new: Vec<u8>,
}

/// Writes `input` with `edits` (ascending, within the data section, none
/// shrinking a record) applied. When no record grows, the output is a
/// kernel copy of the input with the edits written over it. Otherwise the
/// data section moves by a zero gap chosen so that the records after the
/// last growing edit keep their offsets modulo the page size (copied at
/// `cp`'s speed), the feature sections follow it byte for byte under a new
/// table (those perf cannot read left out), and the header points at both.
/// The caller rules out an AUXTRACE index (its offsets would need moving).
pub fn write_edited(
    input: &Input,
    h: &FileHeader,
    features: &Sections,
    edits: &[Edit],
    out: &mut File,
) -> io::Result<()> {
    let grow = growth(edits);
    if grow == 0 && features.as_they_are() {
        copy_range(&input.file, 0, input.len, out)?;
        return patch_in_place(edits, 0, out);
    }
    let shift = write_head_and_prefix(input, h, edits, h.data.end(), out)?;
    debug_assert_eq!(shift % PAGE, 0);
    finish_edited(input, h, features, grow, out)
}

/// How much `edits` grow the data section.
pub fn growth(edits: &[Edit]) -> u64 {
    edits.iter().map(|e| e.new.len() as u64 - e.old).sum()
}

/// The zero gap in front of the data section that makes a growth of `grow`
/// bytes a whole number of pages.
pub fn gap_for(grow: u64) -> u64 {
    (PAGE - grow % PAGE) % PAGE
}

/// Writes same-size `edits` over their records, `shift` bytes further on.
pub fn patch_in_place(edits: &[Edit], shift: u64, out: &File) -> io::Result<()> {
    for e in edits {
        debug_assert_eq!(e.new.len() as u64, e.old);
        out.write_all_at(&e.new, e.at + shift)?;
    }
    Ok(())
}

/// Writes the bytes before the data section, the gap for the growth of
/// `edits` and the records up to input offset `upto` with `edits` applied
/// (all of them lie before `upto`); returns by how much the records at and
/// after `upto` move (a multiple of the page size).
pub fn write_head_and_prefix(
    input: &Input,
    h: &FileHeader,
    edits: &[Edit],
    upto: u64,
    out: &mut File,
) -> io::Result<u64> {
    let grow = growth(edits);
    let pad = gap_for(grow);
    out.seek(SeekFrom::Start(0))?;
    copy_range(&input.file, 0, h.data.offset, out)?;
    out.write_all(&vec![0u8; pad as usize])?;
    let mut cursor = h.data.offset;
    for e in edits {
        copy_range(&input.file, cursor, e.at - cursor, out)?;
        out.write_all(&e.new)?;
        cursor = e.at + e.old;
    }
    copy_range(&input.file, cursor, upto - cursor, out)?;
    Ok(pad + grow)
}

/// After the data section (grown by `grow`, behind the gap for it): the
/// feature sections kept byte for byte under a new table (a BUILD_ID
/// table without its entries too long for perf), then the header.
pub fn finish_edited(
    input: &Input,
    h: &FileHeader,
    features: &Sections,
    grow: u64,
    out: &mut File,
) -> io::Result<()> {
    let data = Section {
        offset: h.data.offset + gap_for(grow),
        size: h.data.size + grow,
    };
    out.seek(SeekFrom::Start(data.end()))?;
    let kept = &features.table.0;
    let replaced = |bit: u32| features.build_ids.filter(|_| bit == feature::BUILD_ID);
    let size = |bit: u32, s: &Section| replaced(bit).map_or(s.size, |t| t.len() as u64);
    let table = FeatureTable::laid_out(
        kept.iter().map(|(b, s)| (*b, size(*b, s))),
        data.end() + 16 * kept.len() as u64,
    );
    out.write_all(&table.encode(h.endian))?;
    for (bit, sec) in kept {
        match replaced(*bit) {
            Some(t) => out.write_all(t)?,
            None => copy_range(&input.file, sec.offset, sec.size, out)?,
        }
    }
    let mut head = features.header(h);
    head.data = data;
    if h.event_types.end() > h.data.offset {
        head.event_types = Section::default();
    }
    out.write_all_at(&head.encode(), 0)
}
