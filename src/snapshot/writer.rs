//! Writing a snapshot one process at a time: each process encoded on the
//! worker that read it ([`Encoded`]), then [`SnapshotWriter`] in pid order,
//! kernel maps first and watched records after FINISHED_INIT.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{SeekFrom, Write};

use super::encode::{self, table_entries, Encoding};
use super::file::{host_features, snapshot_attr, snapshot_encoding, Out, WriteOptions, EVENT_ID};
use super::filter::WatchFilter;
use super::reported::Reported;
use super::seen::ScanRead;
use super::stats::{ProcessSummary, Stats};
use crate::model::{BuildId, Part, Process, Vma};
use crate::perf::consts::{feature, misc, types};
use crate::perf::features::event_desc_feature;
use crate::perf::features::{build_id_feature, encode_build_id_entries, encode_build_id_entry};
use crate::perf::record::encode_empty;
use crate::perf::writer::{
    raw_file_header, write_file_head, write_pipe_prologue, write_raw_file_tail,
};
use crate::perf::{BuildIdEntry, EventDesc, Metadata, RecordTooLarge, WriteError};
use crate::proc::bpf_progs::{bpf_programs, BpfPrograms};
use crate::proc::kernel::{kernel_maps, KernelMaps};
use crate::proc::watch::Watched;
use crate::proc::Snapshot;

/// One process made ready to write, on the worker that read it: its
/// records, and what the BUILD_ID table and the summary need of it.
#[derive(Debug)]
pub struct Encoded {
    /// The process's records.
    pub records: Vec<u8>,
    /// Its distinct (file name, build id) pairs, sorted.
    pub build_ids: Vec<(Vec<u8>, BuildId)>,
    /// Its counts.
    pub summary: ProcessSummary,
    /// When its maps were read and their files, when watched: the watched
    /// maps are told from the scan's by these and the records (see
    /// [`WatchFilter`]).
    pub read: Option<ScanRead>,
    /// Its pid.
    pub pid: u32,
}

impl Encoded {
    /// Bytes it holds, roughly: its weight in the scan's window. (The
    /// process it came from counted half as much with long names: each
    /// name is here twice, in a record and in `build_ids`.)
    pub fn held_bytes(&self) -> usize {
        let ids: usize = self.build_ids.iter().map(|(n, _)| 64 + n.len()).sum();
        128 + self.records.capacity() + ids + self.summary.held_bytes()
    }
}

/// An encoded process and its [`Encoded::held_bytes`] (64 for an error),
/// as [`crate::proc::scan_each`]'s `map` returns them.
pub fn weighed(e: Result<Encoded, RecordTooLarge>) -> (Result<Encoded, RecordTooLarge>, usize) {
    let weight = e.as_ref().map_or(64, Encoded::held_bytes);
    (e, weight)
}

/// Encodes one process for a [`SnapshotWriter`] (pure; runs on any thread).
pub fn encode_for_writer(p: &Process, enc: &Encoding) -> Result<Encoded, RecordTooLarge> {
    encode_piece(p, Part::WHOLE, enc, false, None)
}

/// [`encode_for_writer`] of one piece of a process ([`Part`]), with the
/// times its maps were read when `watched` (see [`WatchFilter`]). With a scan worker's `memo`, the build ids and DSOs it
/// already reported are left out (the writer has them).
pub fn encode_piece(
    p: &Process,
    part: Part,
    enc: &Encoding,
    watched: bool,
    memo: Option<&mut Reported>,
) -> Result<Encoded, RecordTooLarge> {
    let mut records = Vec::with_capacity(64 + 160 * p.vmas.len());
    encode::encode_part(p, part, enc, &mut records)?;
    let read = watched.then(|| ScanRead::of(p));
    // with a worker's memo, only the VMAs that may bring something new
    let (build_ids, summary) = match memo {
        Some(memo) => {
            let new: Vec<&Vma> = p.vmas.iter().filter(|v| memo.is_new(v)).collect();
            (
                encode::build_ids_of(new.iter().copied()),
                ProcessSummary::of_part_with(p, part, new.iter().copied()),
            )
        }
        None => (
            encode::process_build_ids(p),
            ProcessSummary::of_part(p, part),
        ),
    };
    Ok(Encoded {
        records,
        build_ids,
        summary,
        read,
        pid: p.pid,
    })
}

/// Writes a snapshot one process at a time, so memory is bounded by a
/// process, not by the host: file mode writes the header, attrs and records
/// as they come, then the features, then the header again with the sizes;
/// pipe mode writes the prologue first and each build id as a
/// HEADER_BUILD_ID record right before the first records that map its file
/// (as `perf inject` does).
pub struct SnapshotWriter<'a> {
    out: Out<'a>,
    meta: Metadata,
    enc: Encoding,
    data_len: u64,
    /// Build ids written so far (pipe) or to write (file), by file name.
    ids: BTreeMap<Vec<u8>, BTreeSet<BuildId>>,
    /// The kernel's and modules' table entries (cpumode KERNEL).
    kernel_ids: Vec<BuildIdEntry>,
    /// The maps and pids written, for a watched snapshot.
    filter: WatchFilter,
    /// Records that follow FINISHED_INIT (watched ones, real times).
    after_init: Vec<u8>,
    stats: Stats,
}

impl<'a> SnapshotWriter<'a> {
    /// Writes what precedes the records.
    pub fn start(mut out: Out<'a>, opts: &WriteOptions) -> Result<Self, WriteError> {
        let e = opts.endian;
        let attr = snapshot_attr();
        let mut features = host_features(e, &opts.host, &opts.cmdline);
        let events = vec![EventDesc {
            attr,
            name: b"dummy:u".to_vec(),
            ids: vec![EVENT_ID],
        }];
        features.push((feature::EVENT_DESC, event_desc_feature(e, &events)));
        let meta = Metadata {
            endian: e,
            events,
            features,
            build_ids: Vec::new(),
        };
        match &mut out {
            Out::File(w) => write_file_head(w, &meta, 0)?,
            Out::Pipe(w) => write_pipe_prologue(w, &meta)?,
        }
        Ok(SnapshotWriter {
            out,
            meta,
            enc: snapshot_encoding(e, opts.forks),
            data_len: 0,
            ids: BTreeMap::new(),
            kernel_ids: Vec::new(),
            filter: WatchFilter::default(),
            after_init: Vec::new(),
            stats: Stats::default(),
        })
    }

    /// Chooses the watched records with `filter` (from the scan's watch:
    /// see [`ScanWatch::filter`](super::ScanWatch::filter)).
    pub fn follow(&mut self, filter: WatchFilter) {
        self.filter = filter;
    }

    /// Writes the kernel and module maps (before any process, as perf
    /// does), their build ids going to the table (pipe mode: right before).
    pub fn write_kernel(&mut self, km: &KernelMaps) -> Result<(), WriteError> {
        let mut recs = Vec::new();
        encode::encode_kernel(&km.maps, &self.enc, &mut recs)?;
        let ids = encode::kernel_table_entries(&km.maps);
        let e = self.meta.endian;
        match &mut self.out {
            Out::Pipe(w) => {
                w.write_all(&encode_build_id_entries(e, types::HEADER_BUILD_ID, &ids)?)?;
                w.write_all(&recs)?;
            }
            Out::File(w) => {
                w.write_all(&recs)?;
                self.kernel_ids = ids;
            }
        }
        self.data_len += recs.len() as u64;
        self.stats.kernel_maps = km.maps.len();
        self.stats.kernel_skipped.clone_from(&km.skipped);
        Ok(())
    }

    /// Writes the loaded BPF programs' KSYMBOL and BPF_EVENT records (after
    /// the kernel maps, before any process, as perf does).
    pub fn write_bpf(&mut self, progs: &BpfPrograms) -> Result<(), WriteError> {
        let mut recs = Vec::new();
        super::bpf::encode_bpf_programs(&progs.programs, &self.enc, &mut recs)?;
        let w: &mut dyn Write = match &mut self.out {
            Out::File(w) => w,
            Out::Pipe(w) => w,
        };
        w.write_all(&recs)?;
        self.data_len += recs.len() as u64;
        self.stats.note_bpf(progs);
        Ok(())
    }

    /// How records are encoded for this output (for [`encode_for_writer`]).
    pub fn encoding(&self) -> Encoding {
        self.enc
    }

    /// Writes one encoded process.
    pub fn write(&mut self, p: Encoded) -> Result<(), WriteError> {
        let mut new = Vec::new();
        for (name, id) in p.build_ids {
            let known = self
                .ids
                .get(name.as_slice())
                .is_some_and(|s| s.contains(&id));
            if !known {
                if matches!(self.out, Out::Pipe(_)) {
                    new.push(BuildIdEntry {
                        cpumode: misc::USER,
                        pid: -1,
                        build_id: id,
                        filename: name.clone(),
                    });
                }
                self.ids.entry(name).or_default().insert(id);
            }
        }
        let w: &mut dyn Write = match &mut self.out {
            Out::File(w) => w,
            Out::Pipe(w) => w,
        };
        if !new.is_empty() {
            let e = self.meta.endian;
            w.write_all(&encode_build_id_entries(e, types::HEADER_BUILD_ID, &new)?)?;
        }
        w.write_all(&p.records)?;
        self.data_len += p.records.len() as u64;
        self.stats.add(p.summary);
        self.filter.note(p.pid, p.records, p.read);
        Ok(())
    }

    /// Adds the records a watch saw during the scan (time-ordered, in this
    /// machine's byte order) after FINISHED_INIT, with their real times,
    /// as [`WatchFilter::add`] chooses them (pipe mode: each new build id
    /// as a HEADER_BUILD_ID record right before). Counts go to the stats.
    pub fn write_watched(&mut self, recs: &[Watched], all: bool) -> Result<(), WriteError> {
        let e = self.meta.endian;
        let pipe = matches!(self.out, Out::Pipe(_));
        let after = &mut self.after_init;
        self.filter.add(
            recs,
            all,
            &self.enc,
            &mut self.ids,
            &mut self.stats,
            |id, rec| -> Result<(), WriteError> {
                if let (Some(id), true) = (id, pipe) {
                    after.extend(encode_build_id_entries(e, types::HEADER_BUILD_ID, &[id])?);
                }
                after.extend_from_slice(rec);
                Ok(())
            },
        )
    }

    /// Ends the records with FINISHED_INIT and, in file mode, writes the
    /// features and the final header. Returns the counts of what was written.
    pub fn finish(mut self) -> Result<Stats, WriteError> {
        let mut fin = Vec::new();
        encode_empty(&mut fin, self.meta.endian, types::FINISHED_INIT);
        fin.append(&mut self.after_init);
        self.data_len += fin.len() as u64;
        match self.out {
            Out::Pipe(w) => {
                w.write_all(&fin)?;
                w.flush()?;
            }
            Out::File(w) => {
                w.write_all(&fin)?;
                // the table's bytes are made an entry at a time from the
                // map, freeing each name as it goes: a host's distinct file
                // names are held once, not four times (15,000 names of
                // 3.8 KB: 291 -> 80-108 MiB peak)
                let e = self.meta.endian;
                let mut table = build_id_feature(e, &self.kernel_ids)?;
                for b in table_entries(std::mem::take(&mut self.ids)) {
                    encode_build_id_entry(&mut table, e, 0, &b)?;
                }
                let mut raw = self.meta.into_raw()?;
                if !table.is_empty() {
                    raw.set_feature(feature::BUILD_ID, table);
                }
                write_raw_file_tail(w, &raw, self.data_len)?;
                w.seek(SeekFrom::Start(0))?;
                w.write_all(&raw_file_header(&raw, self.data_len))?;
                w.flush()?;
            }
        }
        Ok(self.stats)
    }
}

/// Writes a whole perf.data for a snapshot already read.
pub fn write_snapshot(
    out: Out<'_>,
    snap: &Snapshot,
    opts: &WriteOptions,
) -> Result<Stats, WriteError> {
    let mut w = SnapshotWriter::start(out, opts)?;
    let enc = w.encoding();
    if let Some(roots) = &opts.kernel {
        w.write_kernel(&kernel_maps(roots))?;
        w.write_bpf(&bpf_programs())?;
    }
    for p in &snap.processes {
        w.write(encode_for_writer(p, &enc)?)?;
    }
    let mut stats = w.finish()?;
    stats.add_skips(&snap.skipped, snap.build_id_notes);
    stats.iterator_heads = snap.iterator_heads;
    Ok(stats)
}
