//! `mmap2-synth dump`: the maps of a recording or snapshot for people and
//! scripts, one line per MMAP/MMAP2, COMM, FORK/EXIT record and BUILD_ID
//! entry, as text or JSON Lines. It reads through the one input walk
//! (`perf::Input`), so compressed records, pipe mode and either byte order
//! come for free, and memory stays bounded (except with `--sort`, which holds
//! the dumped records, each as its own bytes, never the samples).
//!
//! May import: `bytes`, `model`, `perf`, `text`.

mod format;
mod held;
pub mod line;

use std::io::{self, Write};

use held::Held;
pub use line::Line;

use crate::bytes::Endian;
use crate::perf::consts::{feature, types};
use crate::perf::features::parse_build_id_table;
use crate::perf::record::split_records;
use crate::perf::{
    Attrs, FormatError, FormatErrorKind, Input, InputError, RecordHeader, SampleIdLayout, Visitor,
};

/// How lines are printed.
#[derive(Debug, Clone, Copy, Default)]
pub struct DumpOptions {
    /// JSON Lines instead of text.
    pub json: bool,
    /// By time (stable), instead of file order.
    pub sort: bool,
}

/// A dump that failed.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// The input is malformed or unreadable.
    #[error(transparent)]
    Input(#[from] InputError),
    /// The output could not be written.
    #[error("writing the dump")]
    Write(#[source] io::Error),
}

impl DumpError {
    /// Bad input (exit 2) rather than a failure of the machine.
    pub fn is_bad_input(&self) -> bool {
        matches!(self, DumpError::Input(e) if e.is_bad_input())
    }
}

/// Prints lines as they come, or holds them for `--sort`.
pub struct Printer<'w> {
    out: &'w mut dyn Write,
    opts: DumpOptions,
    held: Held,
    /// The first write error; later lines are dropped.
    failed: Option<io::Error>,
    /// Lines printed or held.
    pub lines: u64,
}

impl<'w> Printer<'w> {
    /// A printer into `out`.
    pub fn new(out: &'w mut dyn Write, opts: DumpOptions) -> Self {
        Printer {
            out,
            opts,
            held: Held::default(),
            failed: None,
            lines: 0,
        }
    }

    /// Prints (or holds) one line.
    pub fn line(&mut self, l: Line) {
        self.lines += 1;
        if self.opts.sort {
            self.held.line(l);
        } else {
            self.emit(&l);
        }
    }

    /// Prints (or, for `--sort`, holds the bytes of) the line of one
    /// record whose trailer gave `time` ([`Line::trailer_time`]); false,
    /// and nothing printed, when it has no line ([`Line::of_record`]).
    pub fn record(&mut self, h: &RecordHeader, body: &[u8], e: Endian, time: Option<u64>) -> bool {
        let Some(l) = Line::of_record_timed(h, body, e, time) else {
            return false;
        };
        self.lines += 1;
        if self.opts.sort {
            self.held.record(h, body, e, time, l.time());
        } else {
            self.emit(&l);
        }
        true
    }

    fn emit(&mut self, l: &Line) {
        if self.failed.is_some() {
            return;
        }
        let text = if self.opts.json { l.json() } else { l.text() };
        if let Err(e) = writeln!(self.out, "{text}") {
            self.failed = Some(e);
        }
    }

    /// The lines of records in `bytes` (a snapshot's, in order), whose
    /// trailers have `layout`.
    pub fn records(&mut self, bytes: &[u8], e: Endian, layout: SampleIdLayout) {
        for (h, body) in split_records(bytes, e) {
            self.record(&h, body, e, Line::trailer_time(body, e, layout));
        }
    }

    /// Prints what `--sort` held and flushes.
    pub fn finish(mut self) -> Result<u64, DumpError> {
        for l in std::mem::take(&mut self.held).sorted() {
            self.emit(&l);
        }
        if let Some(e) = self.failed.take() {
            return Err(DumpError::Write(e));
        }
        self.out.flush().map_err(DumpError::Write)?;
        Ok(self.lines)
    }
}

/// The walk's visitor: every record's line, HEADER_BUILD_ID records included.
struct Dumper<'p, 'w> {
    printer: &'p mut Printer<'w>,
    endian: Endian,
}

impl Visitor for Dumper<'_, '_> {
    fn record(
        &mut self,
        at: u64,
        h: RecordHeader,
        body: &[u8],
        attrs: &Attrs,
    ) -> Result<(), FormatError> {
        let e = self.endian;
        if h.type_ == types::HEADER_BUILD_ID {
            let mut full = Vec::with_capacity(body.len() + 8);
            h.put(&mut full, e);
            full.extend_from_slice(body);
            for b in parse_build_id_table(&full, e, at)? {
                self.printer.line(Line::of_build_id(&b));
            }
            return Ok(());
        }
        if !matches!(
            h.type_,
            types::MMAP
                | types::MMAP2
                | types::COMM
                | types::FORK
                | types::EXIT
                | types::KSYMBOL
                | types::BPF_EVENT
        ) {
            return Ok(());
        }
        let layout = attrs
            .of_trailer(body, e)
            .map(|a| a.layout())
            .unwrap_or_default();
        // a record of these kinds that does not decode is an error, as in
        // merge and pprof, not a line left out
        let time = Line::trailer_time(body, e, layout);
        match self.printer.record(&h, body, e, time) {
            true => Ok(()),
            false => Err(FormatError::at(
                at,
                FormatErrorKind::MalformedRecord(h.type_),
            )),
        }
    }
}

/// Dumps a recording or snapshot: its records in file order, then (file
/// mode) its BUILD_ID table. Returns the number of lines.
pub fn dump(input: &Input, opts: DumpOptions, out: &mut dyn Write) -> Result<u64, DumpError> {
    let mut printer = Printer::new(out, opts);
    let e = input.endian();
    input.walk(&mut Dumper {
        printer: &mut printer,
        endian: e,
    })?;
    if let Some((s, table)) = input.feature(feature::BUILD_ID)? {
        let entries = parse_build_id_table(&table, e, s.offset).map_err(|err| input.format(err))?;
        for b in &entries {
            printer.line(Line::of_build_id(b));
        }
    }
    printer.finish()
}
