//! Which maps a merge inserts besides the executable ones: data maps
//! (readable, not executable; perf's MMAP_DATA) exactly when perf's own
//! synthesis would have written them, or when asked.

use crate::model::Selection;
use crate::perf::consts::attr_flags;
use crate::perf::Attrs;

/// Whether a merge inserts data maps (readable, not executable; perf's
/// MMAP_DATA), and why: as perf's own synthesis does, when the recording
/// asks for them, or when the user does (`-d`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum DataMaps {
    /// Executable maps only: what perf synthesizes by default.
    #[default]
    No,
    /// An attr of the recording has `mmap_data`. perf sets it (on its
    /// tracking event: `attr->mmap_data = track` in evsel__config,
    /// tools/perf/util/evsel.c) when it samples data addresses,
    /// `opts->sample_address`: `perf record -d` (`OPT_BOOLEAN('d', "data",
    /// &record.opts.sample_address, ...)`) and `--call-graph dwarf`
    /// (`record_opts__parse_callchain` in tools/perf/builtin-record.c:
    /// "Enable data address sampling for DWARF unwind"). Then perf
    /// synthesizes the readable non-executable maps too
    /// (`__machine__synthesize_threads(..., opts->sample_address, ...)` in
    /// record__synthesize; `perf_event__synthesize_mmap_events` in
    /// tools/perf/util/synthetic-events.c keeps a map without `x` when
    /// `mmap_data` and `r`, marked PERF_RECORD_MISC_MMAP_DATA), and its
    /// DWARF unwinder needs them: without the `r--p` segment holding
    /// `.eh_frame` a stack stops at its leaf. perf 6.1 sets neither for
    /// `record.call-graph = dwarf` in its config with `-g` (checked: no
    /// ADDR, no mmap_data, and its own synthesis has no data maps then).
    Recording,
    /// `-d` (`MergeOptions::snapshot.selection`).
    Asked,
}

impl DataMaps {
    /// For a recording of these attrs, and the maps the options select.
    pub(super) fn of(attrs: &Attrs, selection: Selection) -> DataMaps {
        if attrs
            .list
            .iter()
            .any(|(a, _)| a.flags & attr_flags::MMAP_DATA != 0)
        {
            DataMaps::Recording
        } else if selection == Selection::ExecAndData {
            DataMaps::Asked
        } else {
            DataMaps::No
        }
    }

    /// The maps a merge inserts.
    pub fn selection(self) -> Selection {
        match self {
            DataMaps::No => Selection::Exec,
            DataMaps::Recording | DataMaps::Asked => Selection::ExecAndData,
        }
    }
}
