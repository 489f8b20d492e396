//! The streaming rewrite's visitor: every record written again into the
//! output buffer, maps converted, compressed records passed through,
//! decompressed or recompressed, the data after AUXTRACE and tracing
//! records copied, and the AUXTRACE index built from what was written.

use std::fs::File;
use std::io::{self, Write};

use super::buildids::{ConvertReport, MapIds};
use super::meta::{is_pipe_metadata, tracing_size};
use crate::bytes::{Endian, PutExt, Rd};
use crate::output::aligned::whole_chunks;
use crate::perf::compress::Compressor;
use crate::perf::consts::{feature, types};
use crate::perf::copy::copy_range;
use crate::perf::{Attrs, FormatError, RecordHeader, Visitor};

/// The walk's visitor: writes each record to the output.
pub(super) struct Emitter<'a> {
    pub(super) e: Endian,
    pub(super) input: &'a File,
    pub(super) out: &'a mut File,
    pub(super) buf: Vec<u8>,
    /// Output offset of `buf[0]`.
    pub(super) pos: u64,
    /// `--decompress`: records inside COMPRESSED ones written one by one.
    pub(super) decompress: bool,
    /// `--buildid-mmap2`: maps converted.
    pub(super) convert: bool,
    /// COMPRESSED records compressed anew rather than copied (without
    /// `--decompress`): maps converted inside them, or a salvaged input's
    /// decompressed data ends inside a record, which the copies would keep.
    pub(super) recompress: bool,
    /// Pipe input, file output: the metadata records moved to the header.
    pub(super) drop_metadata: bool,
    pub(super) ids: Option<MapIds>,
    pub(super) report: ConvertReport,
    /// Counts of ids only noted for `--buildid-all` (not in the summary).
    pub(super) noted: ConvertReport,
    /// The top-level record being visited is a COMPRESSED one.
    pub(super) in_compressed: bool,
    /// (output offset, record size) of every AUXTRACE record.
    pub(super) aux_index: Vec<(u64, u64)>,
    /// The encoder of recompressed records (maps converted inside
    /// COMPRESSED records without `--decompress`).
    pub(super) zstd: Option<Compressor>,
    /// Its zstd level: the recording's (HEADER_COMPRESSED), else perf's 1.
    pub(super) level: i32,
    pub(super) failed: Option<io::Error>,
}

impl<'a> Emitter<'a> {
    /// An emitter that writes every record it is given as it is, those
    /// inside COMPRESSED records one by one, into `out` from its start
    /// (the damaged tail of a salvaged `-z` recording a merge rewrites).
    pub(super) fn decompressing(e: Endian, input: &'a File, out: &'a mut File) -> Self {
        Emitter {
            e,
            input,
            out,
            buf: Vec::with_capacity(1 << 20),
            pos: 0,
            decompress: true,
            convert: false,
            recompress: false,
            drop_metadata: false,
            ids: None,
            report: ConvertReport::default(),
            noted: ConvertReport::default(),
            in_compressed: false,
            aux_index: Vec::new(),
            zstd: None,
            level: 1,
            failed: None,
        }
    }

    pub(super) fn flush(&mut self) {
        if self.failed.is_none() {
            if let Err(e) = self.out.write_all(&self.buf) {
                self.failed = Some(e);
            }
        }
        self.pos += self.buf.len() as u64;
        self.buf.clear();
    }

    /// Writes what is held up to the last chunk boundary of the output in
    /// it ([`whole_chunks`]), the rest kept (moved to the buffer's front):
    /// the writes end on those boundaries, where the page cache makes
    /// large folios (see [`crate::output::aligned`]).
    fn flush_full(&mut self) {
        let cut = whole_chunks(self.pos, self.buf.len());
        if cut == 0 {
            return self.flush();
        }
        if self.failed.is_none() {
            if let Err(e) = self.out.write_all(&self.buf[..cut]) {
                self.failed = Some(e);
            }
        }
        self.pos += cut as u64;
        self.buf.drain(..cut);
    }

    /// Appends a record, its header `h` (re-encoded in the output's order,
    /// which is the input's).
    fn put(&mut self, h: &RecordHeader, body: &[u8]) -> usize {
        if self.buf.len() + 8 + body.len() > 1 << 20 {
            self.flush_full();
        }
        let at = self.buf.len();
        h.put(&mut self.buf, self.e);
        self.buf.extend_from_slice(body);
        at
    }

    /// Appends whole records as they are.
    fn put_bytes(&mut self, recs: &[u8]) {
        if self.buf.len() + recs.len() > 1 << 20 {
            self.flush_full();
        }
        self.buf.extend_from_slice(recs);
    }

    /// Ends the group of records being recompressed, writing its
    /// COMPRESSED records.
    pub(super) fn end_group(&mut self) {
        let Some(mut z) = self.zstd.take() else {
            return;
        };
        if let Err(e) = z.flush(&mut |rec| {
            self.report.recompressed += 1;
            self.put_bytes(rec)
        }) {
            self.failed.get_or_insert(e);
        }
        self.zstd = Some(z);
    }

    /// Takes the record just appended at `start` out of the buffer and
    /// into the compressor.
    fn recompress_from(&mut self, start: usize) {
        let rec = self.buf.split_off(start);
        let Some(mut z) = self.zstd.take() else {
            return;
        };
        if let Err(e) = z.push(&rec, &mut |c| {
            self.report.recompressed += 1;
            self.put_bytes(c)
        }) {
            self.failed.get_or_insert(e);
        }
        self.zstd = Some(z);
    }

    /// Appends an MMAP or MMAP2 record, converted when asked (with
    /// `--buildid-all` alone its id is only noted, in a scratch report);
    /// returns where it starts in the buffer.
    fn put_map(&mut self, h: &RecordHeader, body: &[u8], attrs: &Attrs) -> usize {
        let e = self.e;
        let convert = self.convert;
        let Some(ids) = self.ids.as_mut() else {
            return self.put(h, body);
        };
        let r = if convert {
            &mut self.report
        } else {
            &mut self.noted
        };
        if h.type_ == types::MMAP {
            let trailer = attrs.of_trailer(body, e).map_or(0, |a| a.layout().len());
            match ids.convert_v1(h, body, trailer, e, r) {
                Some(rec) if convert => {
                    let (rh, rb) = rec.split_at(8);
                    let rh = RecordHeader::parse(rh, e).expect("8 bytes");
                    return self.put(&rh, rb);
                }
                _ => return self.put(h, body),
            }
        }
        let patch = ids.convert(h, body, e, r);
        let start = self.put(h, body);
        if let (Some((patched, field)), true) = (patch, convert) {
            let mut head = Vec::with_capacity(8);
            patched.put(&mut head, e);
            self.buf[start..start + 8].copy_from_slice(&head);
            let id_at = start + 8 + crate::perf::events::MMAP2_ID_AT;
            self.buf[id_at..id_at + field.len()].copy_from_slice(&field);
        }
        start
    }

    /// Copies the `len` bytes at `from` of the input that follow a record
    /// outside its size (AUX data, tracing data).
    pub(super) fn copy_after(&mut self, from: u64, len: u64) {
        self.flush();
        if self.failed.is_none() {
            if let Err(e) = copy_range(self.input, from, len, self.out) {
                self.failed = Some(e);
            }
        }
        self.pos += len;
    }
}

impl Visitor for Emitter<'_> {
    fn stored(&mut self, _at: u64, h: &RecordHeader, body: &[u8]) {
        self.end_group();
        self.in_compressed = matches!(h.type_, types::COMPRESSED | types::COMPRESSED2);
        if !self.in_compressed {
            return;
        }
        self.report.compressed_records += 1;
        if self.decompress {
            return;
        }
        if !self.recompress {
            self.put(h, body);
            return;
        }
        // Maps inside may change: the stream is compressed anew (one zstd
        // frame runs through all COMPRESSED records, so none can be kept).
        if self.zstd.is_none() {
            match Compressor::new(self.level, h.type_, self.e) {
                Ok(z) => self.zstd = Some(z),
                Err(e) => {
                    self.failed.get_or_insert(e);
                }
            }
        }
    }

    fn record(
        &mut self,
        at: u64,
        h: RecordHeader,
        body: &[u8],
        attrs: &Attrs,
    ) -> Result<(), FormatError> {
        self.report.records += 1;
        let recompress = self.in_compressed && !self.decompress;
        if recompress && !self.recompress {
            // written whole by `stored`; its maps' ids noted for --buildid-all
            if matches!(h.type_, types::MMAP | types::MMAP2) && self.ids.is_some() {
                let start = self.put_map(&h, body, attrs);
                self.buf.truncate(start);
            }
            return Ok(());
        }
        if self.in_compressed && self.decompress {
            self.report.decompressed += 1;
        }
        let e = self.e;
        match h.type_ {
            t if self.drop_metadata && is_pipe_metadata(t) => return Ok(()),
            // a stream's COMPRESSED feature goes with its records
            types::HEADER_FEATURE
                if self.decompress
                    && Rd(e).u64(body, 0) == Some(u64::from(feature::COMPRESSED)) =>
            {
                return Ok(())
            }
            _ => {}
        }
        let start = match h.type_ {
            types::MMAP | types::MMAP2 => self.put_map(&h, body, attrs),
            _ => self.put(&h, body),
        };
        if recompress {
            self.recompress_from(start);
            return Ok(());
        }
        // `at` is this record's own offset: the walk refuses AUXTRACE and
        // tracing records inside compressed ones.
        let after = at + u64::from(h.size);
        match h.type_ {
            types::AUXTRACE => {
                let aux = Rd(e).u64(body, 0).unwrap_or(0);
                let here = self.pos + start as u64;
                self.aux_index.push((here, u64::from(h.size)));
                self.copy_after(after, aux);
            }
            types::HEADER_TRACING_DATA => {
                let size = tracing_size(at, body, e)?;
                self.copy_after(after, u64::from(size));
            }
            _ => {}
        }
        Ok(())
    }
}

/// The HEADER_AUXTRACE payload for AUXTRACE records at these output
/// offsets: u64 count, then {u64 offset, u64 size} each.
pub(super) fn auxtrace_index(e: Endian, entries: &[(u64, u64)]) -> Vec<u8> {
    let mut b = Vec::with_capacity(8 + 16 * entries.len());
    b.put_u64(e, entries.len() as u64);
    for &(off, size) in entries {
        b.put_u64(e, off);
        b.put_u64(e, size);
    }
    b
}
