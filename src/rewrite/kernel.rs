//! The kernel's and modules' maps and the BPF programs' records a merge
//! inserts: a snapshot file's, or the running kernel's, only when they are
//! of the kernel the recording was made on.

use std::path::Path;

use super::error::MergeError;
use super::scan::RecordingFacts;
use crate::model::KernelMap;
use crate::perf::consts::feature;
use crate::perf::features::parse_string_feature;
use crate::perf::Input;
use crate::proc::kernel::{kernel_maps, KernelRoots, KERNEL_DSO};
use crate::snapshot::{self, BpfRecord, KernelMaps, Runs};

/// What [`kernel_to_insert`] chose, and why it left maps or programs out.
#[derive(Default)]
pub(super) struct KernelInsert {
    pub maps: KernelMaps,
    pub bpf: Runs<BpfRecord>,
    /// Why no kernel map is inserted, if none is and one could have been.
    pub kernel_skipped: Option<String>,
    /// Why no BPF program is inserted, likewise.
    pub bpf_skipped: Option<String>,
}

/// The OSRELEASE string of a file-mode input's header (None in pipe mode:
/// the scan finds it there).
pub(super) fn osrelease_of(input: &Input) -> Result<Option<Vec<u8>>, MergeError> {
    let f = input.feature(feature::OSRELEASE)?;
    Ok(f.and_then(|(_, b)| parse_string_feature(&b, input.endian()).map(<[u8]>::to_vec)))
}

/// The kernel maps for a recording without one and the BPF programs'
/// records (the recording's own left out later): a snapshot file's when it
/// was taken on the recording's kernel release (its BPF records whether or
/// not the recording has a kernel map: `perf record --synth=no` writes
/// one, and no program), or the running kernel's maps and programs when
/// the recording has no kernel map and says it was made on this kernel
/// (OSRELEASE; perf.data carries no boot id, so a reboot with KASLR cannot
/// be told); never when the recording's table names another kernel build.
/// Why none, in [`KernelInsert`].
pub(super) fn kernel_to_insert(
    input: &Input,
    facts: &RecordingFacts,
    from_file: Option<(KernelMaps, Runs<BpfRecord>, Option<Vec<u8>>)>,
    proc_root: &Path,
) -> Result<KernelInsert, MergeError> {
    let mut pick = KernelInsert::default();
    let recorded = match osrelease_of(input)? {
        Some(r) => Some(r),
        None => facts.osrelease.clone(),
    };
    match from_file {
        Some((maps, bpf, release)) => {
            let why = match release.is_none() || recorded.is_none() || release != recorded {
                true => Some("the snapshot is not of the recording's kernel release (OSRELEASE)"),
                false => other_kernel_build(facts, maps.distinct()),
            };
            let kernel = match (facts.has_kernel_map, maps.is_empty(), why) {
                (true, ..) => KernelMaps::default(),
                (false, true, _) => {
                    pick.kernel_skipped = Some("the snapshot has no kernel map".into());
                    KernelMaps::default()
                }
                (false, false, Some(why)) => {
                    pick.kernel_skipped = Some(why.into());
                    KernelMaps::default()
                }
                // every one, as the file has them: they are inserted
                (false, false, None) => maps,
            };
            let bpf = match why {
                Some(why) if !bpf.is_empty() => {
                    pick.bpf_skipped = Some(why.into());
                    Runs::default()
                }
                Some(_) => Runs::default(),
                None => bpf,
            };
            (pick.maps, pick.bpf) = (kernel, bpf);
            Ok(pick)
        }
        None if facts.has_kernel_map => Ok(pick),
        None => {
            let running = crate::proc::HostFacts::read().osrelease;
            if recorded.as_deref() != Some(running.as_slice()) {
                pick.kernel_skipped =
                    Some("the recording is not of the running kernel (OSRELEASE)".into());
                return Ok(pick);
            }
            let km = kernel_maps(&KernelRoots::system(proc_root));
            pick.kernel_skipped = km.skipped;
            if let Some(why) = other_kernel_build(facts, &km.maps) {
                pick.kernel_skipped = Some(why.into());
                return Ok(pick);
            }
            if km.maps.is_empty() {
                return Ok(pick);
            }
            let bpf = crate::proc::bpf_progs::bpf_programs();
            pick.bpf_skipped = bpf.skipped;
            let records = bpf.programs.iter().flat_map(snapshot::program_records);
            (pick.maps, pick.bpf) = (km.maps.into_iter().collect(), records.collect());
            Ok(pick)
        }
    }
}

/// Why `maps` (a kernel's and its modules') are not the recording's: its
/// BUILD_ID table names another kernel build.
fn other_kernel_build(facts: &RecordingFacts, maps: &[KernelMap]) -> Option<&'static str> {
    let table_kernel: Vec<_> = facts
        .existing_ids
        .iter()
        .filter(|(name, _)| name.as_slice() == KERNEL_DSO)
        .map(|(_, id)| *id)
        .collect();
    let ours = maps
        .iter()
        .find(|m| m.dso == KERNEL_DSO)
        .and_then(|m| m.build_id);
    let other = !table_kernel.is_empty() && ours.is_none_or(|id| !table_kernel.contains(&id));
    other.then_some("the recording's BUILD_ID table names another kernel build")
}
