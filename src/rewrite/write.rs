//! Writing a rewritten recording. File mode copies the data section (a
//! kernel copy beside the scan), [`RESERVE`] bytes past its old offset; the
//! inserted records then fill the room in front of it, and the feature table
//! and sections (BUILD_ID extended, the rest byte for byte) and the header
//! follow. Pipe mode copies the stream around the inserted records.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;

use super::meta::Unreadable;
use super::tail::Tail;
use crate::perf::consts::{feature, types, FILE_HEADER_SIZE};
use crate::perf::copy::{copy_range, copy_range_beside, PAGE};
use crate::perf::{
    FeatureBits, FeatureTable, FileHeader, FormatError, FormatErrorKind, Input, InputError, Section,
};

/// The temporary file for a rewrite's `output`. For `--in-place` (the
/// output is the input) it gets the input's mode and owner, and must sit
/// in the directory the input was opened from: a directory on the path
/// swapped for a link in between (by whoever owns it) is an error, not a
/// file of theirs written, with their ownership, wherever the link points.
pub fn create_output(
    input: &Input,
    output: &std::path::Path,
    in_place: bool,
) -> io::Result<crate::output::AtomicFile> {
    let mut out = crate::output::AtomicFile::create(output)?;
    if in_place {
        let meta = input.file.metadata()?;
        if !out.replaces(&meta) {
            return Err(io::Error::other(crate::output::OutputError::Replaced {
                path: output.to_path_buf(),
            }));
        }
        out.keep_mode_and_owner(&meta);
    }
    Ok(out)
}

/// The least room left before the copied data section for the inserted
/// records. A merge that inserts more rewrites the data section once more.
pub const RESERVE: u64 = 256 << 10;

/// Where a file-mode merge copies the data section: the input's bytes in
/// use before it (header, attrs, their ids) are kept at their offsets up to
/// `start`, and the records go at `end`, at least [`RESERVE`] bytes on and
/// page-congruent with where they were; the room between takes the
/// inserted records. Bytes of the input in front of its records that
/// nothing points at (the room of a merge we wrote before) are left
/// behind: a merged file merged again grows by a page at most (to keep its
/// records page-congruent), once, not by a room each time.
#[derive(Debug, Clone, Copy)]
pub struct Room {
    /// Where the input's bytes kept in front of the records end.
    pub start: u64,
    /// Where the copied records begin.
    pub end: u64,
}

impl Room {
    /// The room of a file-mode merge of `input` (header `h`).
    pub fn of(input: &Input, h: &FileHeader) -> Result<Room, InputError> {
        let (_, attrs_end) = input.file_attrs_and_end(h)?;
        let mut start = attrs_end.max(FILE_HEADER_SIZE);
        if h.event_types.size > 0 && h.event_types.end() <= h.data.offset {
            start = start.max(h.event_types.end());
        }
        let start = start.min(h.data.offset);
        let end = congruent_from(start + RESERVE, h.data.offset);
        Ok(Room { start, end })
    }

    /// Its size: what may be inserted without moving the records again.
    pub fn size(&self) -> u64 {
        self.end - self.start
    }
}

/// The first offset at or after `at` in the same place of its page as
/// `like`.
fn congruent_from(at: u64, like: u64) -> u64 {
    at + (like % PAGE + PAGE - at % PAGE) % PAGE
}

/// The records a rewrite inserts: their size is known before they are
/// written, and they are encoded as they are written (never all held).
pub trait Inserted {
    /// Their size in bytes.
    fn size(&self) -> u64;
    /// Writes them to `out`.
    fn write_to(&self, out: &mut dyn Write) -> io::Result<()>;
}

/// Records already encoded.
impl Inserted for Vec<u8> {
    fn size(&self) -> u64 {
        self.len() as u64
    }
    fn write_to(&self, out: &mut dyn Write) -> io::Result<()> {
        out.write_all(self)
    }
}

/// Writes `inserted` to `out` at its cursor, through a buffer.
fn write_inserted(inserted: &dyn Inserted, out: &mut File) -> io::Result<()> {
    let mut w = io::BufWriter::with_capacity(128 << 10, out);
    inserted.write_to(&mut w)?;
    w.flush()
}

/// Prepares a file-mode output for the data section's copy: a zeroed
/// header and the input's bytes up to the room, the cursor left at its end,
/// where the copied records go. The room is [`zero_room`]'s, written
/// beside the copy (off its critical path: 256 KiB of fresh page cache
/// cost ~0.4 ms here).
pub fn start_file_mode(input: &Input, room: Room, out: &mut File) -> io::Result<()> {
    out.write_all(&[0u8; FILE_HEADER_SIZE as usize])?;
    copy_range(
        &input.file,
        FILE_HEADER_SIZE,
        room.start - FILE_HEADER_SIZE,
        out,
    )?;
    out.seek(SeekFrom::Start(room.end))?;
    Ok(())
}

/// Writes the room [`start_file_mode`] left as zeros, through `out` (a
/// second handle of the output: the copy owns the first and its cursor).
/// The zeros are written, not left a hole: a file with a hole is one `cp`
/// copies through user space (`SEEK_HOLE`, then `read`/`write`: 1.3-1.7x
/// its `copy_file_range` time), and the next tool given our output may
/// well be `cp`.
pub fn zero_room(room: Room, out: &File) -> io::Result<()> {
    static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
    let mut at = room.start;
    while at < room.end {
        let n = (room.end - at).min(ZEROS.len() as u64);
        out.write_all_at(&ZEROS[..n as usize], at)?;
        at += n;
    }
    Ok(())
}

/// Copies the data section of a file-mode input to where
/// [`start_file_mode`] left `out` (a kernel copy, page-congruent, so at
/// `cp`'s speed): run beside the scan, which then reads without writing,
/// and sets `stop` when it fails (the copy ends early).
pub fn copy_data_section(
    input: &Input,
    h: &FileHeader,
    out: &mut File,
    stop: &std::sync::atomic::AtomicBool,
) -> io::Result<()> {
    copy_range_beside(&input.file, h.data.offset, h.data.size, out, stop)
}

/// Errors if the input changed since `before` (another file now, another
/// size, modification or change time: a writer can set the modification
/// time back, not the change time): what was copied or read after the walk
/// would not be what the walk read.
pub fn check_unchanged(
    input: &Input,
    before: &std::fs::Metadata,
    what: &'static str,
) -> Result<(), InputError> {
    let after = input.file.metadata().map_err(|source| InputError::Io {
        op: "reading",
        path: input.path.clone(),
        source,
    })?;
    use std::os::unix::fs::MetadataExt;
    let id = |m: &std::fs::Metadata| {
        (
            (m.dev(), m.ino(), m.len()),
            (m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec()),
        )
    };
    if id(&after) != id(before) {
        let err = FormatError::at(0, FormatErrorKind::Inconsistent(what));
        return Err(input.format(err));
    }
    Ok(())
}

/// The feature sections a file-mode rewrite writes from its input's: its
/// table less the sections perf 6.1's file-mode reader cannot read, and
/// the BUILD_ID payload to write instead of the input's when entries too
/// long for that reader were left out (see `perf::feature_check`). Every
/// other section is copied byte for byte.
pub struct Sections<'a> {
    /// The input's sections kept.
    pub table: FeatureTable,
    /// The bits left out.
    pub dropped: Vec<u32>,
    /// The BUILD_ID table to write instead of the input's.
    pub build_ids: Option<&'a [u8]>,
}

impl<'a> Sections<'a> {
    /// The sections of `features` a rewrite keeps, given what perf cannot
    /// read of them (`bad`).
    pub fn of(features: &FeatureTable, bad: &'a Unreadable) -> Sections<'a> {
        let dropped: Vec<u32> = bad.sections.iter().map(|(b, _)| *b).collect();
        let kept = features.0.iter().filter(|(b, _)| !dropped.contains(b));
        Sections {
            table: FeatureTable(kept.copied().collect()),
            dropped,
            build_ids: bad.build_ids.as_ref().map(|(t, _)| &t[..]),
        }
    }

    /// Whether they are the input's own, as they are.
    pub fn as_they_are(&self) -> bool {
        self.dropped.is_empty() && self.build_ids.is_none()
    }

    /// The header `h` with the bits of the sections left out cleared.
    pub(super) fn header(&self, h: &FileHeader) -> FileHeader {
        let mut head = h.clone();
        let kept = h.features.iter().filter(|b| !self.dropped.contains(b));
        head.features = FeatureBits::from_bits(kept);
        head
    }
}

/// Completes a file-mode output whose data section (`h.data`) was copied by
/// the scan: the inserted records, after its first `prefix` bytes, and
/// `tail` placed around it (see `place_data`), then the feature table and
/// sections, and the header last.
pub fn finish_file_mode(
    input: &Input,
    (h, room): (&FileHeader, Room),
    features: &Sections,
    out: &mut File,
    (inserted, tail, prefix): (&dyn Inserted, Option<&Tail>, u64),
    extra_ids: &[u8],
) -> io::Result<()> {
    let (data, ins, prefix) = place_data(input, (h, room), out, (inserted, prefix), tail)?;
    let data_offset = data.offset;
    out.seek(SeekFrom::Start(data.end()))?;

    // Feature sections: those kept copied byte for byte; BUILD_ID grows
    // (or appears).
    let mut sources: Vec<(u32, Section)> = features.table.0.clone();
    if !extra_ids.is_empty() && !sources.iter().any(|(b, _)| *b == feature::BUILD_ID) {
        sources.push((feature::BUILD_ID, Section::default()));
        sources.sort_by_key(|f| f.0);
    }
    // a salvaged recording of a killed perf record lost its sections: the
    // COMPRESSED one perf needs to read `-z` records, the EVENT_DESC other
    // readers take sample ids from; made again here
    let mut made: Vec<(u32, Vec<u8>)> = Vec::new();
    let lost = [
        (
            feature::COMPRESSED,
            super::meta::lost_compressed_feature(input),
        ),
        (
            feature::EVENT_DESC,
            super::meta::lost_event_desc_feature(input),
        ),
    ];
    for (bit, payload) in lost {
        if let Some(p) = payload.map_err(io::Error::other)? {
            sources.push((bit, Section::default()));
            made.push((bit, p));
        }
    }
    if let Some(table) = features.build_ids {
        // its entries too long for perf left out
        sources.retain(|(b, _)| *b != feature::BUILD_ID);
        sources.push((feature::BUILD_ID, Section::default()));
        made.push((feature::BUILD_ID, table.to_vec()));
    }
    sources.sort_by_key(|f| f.0);
    let made_for = |bit: u32| made.iter().find(|(b, _)| *b == bit).map(|(_, p)| p);
    let grown = |bit: u32, s: &Section| {
        let extra = if bit == feature::BUILD_ID {
            extra_ids.len()
        } else {
            0
        };
        s.size + made_for(bit).map_or(0, |p| p.len() as u64) + extra as u64
    };
    let table = FeatureTable::laid_out(
        sources.iter().map(|(b, s)| (*b, grown(*b, s))),
        data.end() + 16 * sources.len() as u64,
    );
    out.write_all(&table.encode(h.endian))?;
    // where a byte of the old data section is now: the prefix moved in
    // front of the inserted records, the rest behind them
    let old = h.data.offset;
    let moved = |off: u64| match off < old + prefix {
        true => off - old + data_offset,
        false => off - old + data_offset + ins,
    };
    for (bit, sec) in &sources {
        if *bit == feature::AUXTRACE {
            copy_auxtrace_index(input, *sec, out, (old, h.data.end()), &moved)?;
        } else if let Some(p) = made_for(*bit) {
            out.write_all(p)?;
        } else {
            copy_range(&input.file, sec.offset, sec.size, out)?;
        }
        if *bit == feature::BUILD_ID {
            out.write_all(extra_ids)?;
        }
    }

    let mut head = features.header(h);
    head.data = data;
    if h.event_types.end() > h.data.offset {
        // The obsolete event_types section (ignored by perf, written empty)
        // would point into moved bytes: drop it rather than point at garbage.
        head.event_types = Section::default();
    }
    for (b, _) in &sources {
        head.features.set(*b);
    }
    out.write_all_at(&head.encode(), 0)?;
    Ok(())
}

/// Places the inserted records right before the data section copied by
/// the scan (or, if they do not fit, copies the data again behind them),
/// its first `prefix` bytes (perf's synthesized records) written again in
/// front of them, and appends `tail` to it (a salvaged input's damaged
/// tail rewritten, see the `tail` module); returns the data section so
/// made, the bytes inserted and the prefix. A data section left empty gets
/// a FINISHED_ROUND: perf takes data size 0 for a recording not terminated.
fn place_data(
    input: &Input,
    (h, room): (&FileHeader, Room),
    out: &mut File,
    (inserted, prefix): (&dyn Inserted, u64),
    tail: Option<&Tail>,
) -> io::Result<(Section, u64, u64)> {
    let tail_len = tail.map_or(0, |t| t.len);
    let mut round = Vec::new();
    if inserted.size() == 0 && h.data.size + tail_len == 0 {
        crate::perf::record::encode_empty(&mut round, h.endian, types::FINISHED_ROUND);
    }
    let inserted: &dyn Inserted = if round.is_empty() { inserted } else { &round };
    let ins = inserted.size();
    let prefix = if ins == 0 { 0 } else { prefix.min(h.data.size) };
    // nothing to add: the records stay behind the unused room (a second
    // copy to make the output the input byte for byte cost more than the
    // merge itself)
    let data_offset = if ins <= room.size() {
        let at = room.end - ins;
        out.seek(SeekFrom::Start(at))?;
        copy_range(&input.file, h.data.offset, prefix, out)?;
        write_inserted(inserted, out)?;
        out.seek(SeekFrom::Start(room.end + h.data.size))?;
        at
    } else {
        // Copied again, page-congruent (so the kernel copies it at `cp`'s
        // speed, see `copy_range`), behind the prefix and the records.
        let rest = h.data.offset + prefix;
        let at = congruent_from(room.start + prefix + ins, rest) - prefix - ins;
        out.set_len(room.start)?;
        out.seek(SeekFrom::Start(at))?;
        copy_range(&input.file, h.data.offset, prefix, out)?;
        write_inserted(inserted, out)?;
        copy_range(&input.file, rest, h.data.size - prefix, out)?;
        at
    };
    if let Some(t) = tail {
        copy_range(t.file, 0, t.len, out)?;
    }
    let data = Section {
        offset: data_offset,
        size: h.data.size + tail_len + ins,
    };
    Ok((data, ins, prefix))
}

/// Copies a HEADER_AUXTRACE index (u64 nr, then {u64 file_offset, u64
/// size} per AUXTRACE record), moving the offsets that point into the old
/// data section as `moved` says the records moved: without it perf would
/// look for the trace data in the wrong place. Streamed in 64 KiB chunks.
fn copy_auxtrace_index(
    input: &Input,
    sec: Section,
    out: &mut File,
    old_data: (u64, u64),
    moved: &dyn Fn(u64) -> u64,
) -> io::Result<()> {
    let e = input.endian();
    let mut buf = vec![0u8; 64 << 10];
    let head = sec.size.min(8) as usize;
    input.file.read_exact_at(&mut buf[..head], sec.offset)?;
    out.write_all(&buf[..head])?;
    let mut done = head as u64;
    while done < sec.size {
        let n = (sec.size - done).min(buf.len() as u64) as usize;
        let chunk = &mut buf[..n];
        input.file.read_exact_at(chunk, sec.offset + done)?;
        for ent in chunk.chunks_exact_mut(16) {
            let off = crate::bytes::Rd(e).u64(ent, 0).unwrap_or(0);
            if (old_data.0..old_data.1).contains(&off) {
                ent[..8].copy_from_slice(&e.u64_bytes(moved(off)));
            }
        }
        out.write_all(chunk)?;
        done += n as u64;
    }
    Ok(())
}

/// Writes a pipe-mode output: the input up to `at`, the new HEADER_BUILD_ID
/// records, the inserted records, then the rest of the input (with `tail`,
/// a salvaged input's damaged tail rewritten, in place of its records).
pub fn write_pipe_mode(
    input: &Input,
    out: &mut File,
    at: u64,
    (ids, inserted): (&[u8], &dyn Inserted),
    tail: Option<&Tail>,
) -> io::Result<()> {
    let end = tail.map_or(input.len, |t| t.from);
    let at = at.min(end);
    copy_range(&input.file, 0, at, out)?;
    out.write_all(ids)?;
    write_inserted(inserted, out)?;
    copy_range(&input.file, at, end - at, out)?;
    if let Some(t) = tail {
        copy_range(t.file, 0, t.len, out)?;
        copy_range(&input.file, t.to, input.len - t.to, out)?;
    }
    Ok(())
}
