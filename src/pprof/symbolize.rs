//! Symbolization with blazesym, at the edge: for each build id the profile's
//! locations map, the file with that id (`find`: from `--buildid-dir`,
//! perf's build-id cache layout, the recorded path when its id matches, or
//! a live process's mapped file: never a file that merely has the name);
//! for kernel frames, kallsyms of the same kernel (the running one when its
//! build id and `_text` match the recording's kernel map, else the one
//! archived under the kernel's id); for code in processes' anonymous
//! memory, their perf maps (`perfmap`). Files are opened here, checked,
//! and handed to blazesym as `/proc/thread-self/fd/N`, so what blazesym
//! reads is the file that was checked.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use blazesym::symbolize::source::{Elf, Kernel, Source};
use blazesym::symbolize::{Input, Sym, Symbolized, Symbolizer};
use blazesym::MaybeDefault;

use super::demangle::Demangler;
use super::find::{bounded_copy, find_elf, live_id, private_copy, this_kernels_vdso, Mapped};
use super::isolate::{isolated, Panicked};
use super::perfmap::PerfMaps;
use super::profile::{Builder, Frame, Mapping, MappingSymbols, Space};
use super::PprofReport;
use crate::archive::cache_entry;
use crate::model::BuildId;
use crate::proc::buildid::{kernel_build_id, open_regular};
use crate::proc::debuginfo::{dwarf_verdict, Dwarf};
use crate::proc::kernel::{text_address, KERNEL_DSO};
use crate::proc::minidebug;

/// What symbolization found: frames per location, flags per mapping.
#[derive(Debug, Default)]
pub struct Symbols {
    /// Innermost first, by location index.
    pub frames: Vec<Vec<Frame>>,
    /// By mapping index.
    pub mappings: Vec<MappingSymbols>,
}

/// One location to symbolize: (location index, address for blazesym,
/// mapping index).
type Want = (usize, u64, usize);

/// Per build id: what to symbolize and where it was mapped.
type ById = BTreeMap<BuildId, (Vec<Want>, Vec<Mapped>)>;

/// Per process: locations in its anonymous memory, or user frames of it
/// no map covers, for its perf map to name: (location index, address,
/// mapping index if any).
type ByPid = BTreeMap<u32, Vec<(usize, u64, Option<usize>)>>;

/// The locations of a profile sorted by where their names come from.
#[derive(Default)]
struct Sorted {
    by_id: ById,
    by_pid: ByPid,
    kernel: Vec<Want>,
    /// The recording's kernel map (its build id and `_text`).
    kernel_map: Option<std::rc::Rc<super::maps::Map>>,
}

/// Sorts the locations of `b`: by build id (a map without one takes that
/// of its live process's file, [`live_id`], or a `[vdso]` the running one's
/// ([`this_kernels_vdso`], the recording's kernel `kernel`), else is
/// counted), by process for anonymous memory and user frames no map
/// covers, the kernel's.
fn sort_locations(b: &Builder, kernel: Option<BuildId>, report: &mut PprofReport) -> Sorted {
    let mut s = Sorted::default();
    // a map without a build id: its live process's file, once per mapping
    let mut live: BTreeMap<usize, Option<BuildId>> = BTreeMap::new();
    for (i, &(mapping, addr, pid)) in b.locations.iter().enumerate() {
        let Some(mapped @ Mapping { map, space, .. }) = mapping
            .checked_sub(1)
            .and_then(|m| b.mappings.get(m as usize))
        else {
            if let Some(pid) = pid.filter(|&p| p != u32::MAX) {
                s.by_pid.entry(pid).or_default().push((i, addr, None));
            }
            continue;
        };
        let m = mapping as usize - 1;
        if let Some(pid) = mapped.owner() {
            s.by_pid.entry(pid).or_default().push((i, addr, Some(m)));
            continue;
        }
        if *space == Space::Kernel {
            s.kernel.push((i, addr, m));
            if map.filename.starts_with(KERNEL_DSO) {
                s.kernel_map.get_or_insert(map.clone());
            }
            continue;
        }
        let id = map.build_id.or_else(|| {
            *live.entry(m).or_insert_with(|| {
                let vdso = this_kernels_vdso(map, kernel);
                report.vdso_running |= vdso.is_some();
                vdso.or_else(|| live_id(mapped.pid, map))
            })
        });
        let Some(id) = id else {
            report.no_build_id += 1;
            continue;
        };
        let offset = addr.wrapping_sub(map.start).wrapping_add(map.pgoff);
        let (wants, places) = s.by_id.entry(id).or_default();
        wants.push((i, offset, m));
        let place = Mapped {
            path: map.filename.clone(),
            pid: mapped.pid,
            start: map.start,
            end: map.end,
        };
        if !places.contains(&place) {
            places.push(place);
        }
    }
    s
}

/// Symbolizes every location of `b` that a checked file covers.
/// `kernel`: the recording's kernel map, for a `[vdso]` without a build id.
pub fn symbolize(
    b: &Builder,
    (kernel, buildid_dir): (Option<&super::maps::Map>, Option<&Path>),
    report: &mut PprofReport,
) -> Symbols {
    let mut out = Symbols {
        frames: vec![Vec::new(); b.locations.len()],
        mappings: vec![MappingSymbols::default(); b.mappings.len()],
    };
    let mut names = Demangler::default();
    let Sorted {
        by_id,
        by_pid,
        kernel,
        kernel_map,
    } = sort_locations(b, kernel.and_then(|m| m.build_id), report);
    for (id, (wants, places)) in by_id {
        let file = find_elf(&id, &places, buildid_dir).and_then(|f| private_copy(&f, &id));
        let name = String::from_utf8_lossy(&places[0].path).into_owned();
        let file = match file {
            Ok(f) => f,
            Err(why) => {
                report.files_missing += 1;
                if report.missing.len() < 5 {
                    report
                        .missing
                        .push(format!("{name} ({}): {why}", id.to_hex()));
                }
                continue;
            }
        };
        symbolize_file((&file, &name), &wants, (&mut out, &mut names), report);
    }
    name_jit_code(by_pid, &mut out, report);
    if !kernel.is_empty() {
        match kallsyms(kernel_map.as_deref(), buildid_dir) {
            Ok((file, from)) => {
                report.kernel_symbols = Some(from);
                let src = Source::Kernel(Kernel {
                    kallsyms: MaybeDefault::Some(fd_path(&file)),
                    vmlinux: MaybeDefault::None,
                    kaslr_offset: Some(0),
                    debug_syms: false,
                    ..Default::default()
                });
                let to = (&mut out, &mut names);
                run(&src, (Addrs::Absolute, "kallsyms"), &kernel, to, report);
            }
            Err(why) => report.kernel_symbols = Some(format!("not symbolized: {why}")),
        }
    }
    out
}

/// Names code in processes' anonymous memory, and user frames no map
/// covers, from each process's perf map ([`PerfMaps`]) as they are
/// (perf does not demangle them either); those of anonymous memory left
/// unnamed are counted.
fn name_jit_code(by_pid: ByPid, out: &mut Symbols, report: &mut PprofReport) {
    let mut maps = PerfMaps::default();
    for (pid, wants) in by_pid {
        let mut addrs: Vec<u64> = wants.iter().map(|w| w.1).collect();
        addrs.sort_unstable();
        addrs.dedup();
        let names = maps.names(pid, &addrs, report);
        for (loc, addr, mapping) in wants {
            let name = addrs
                .binary_search(&addr)
                .ok()
                .and_then(|i| names[i].clone());
            let Some(name) = name else {
                report.jit_unnamed += usize::from(mapping.is_some());
                continue;
            };
            out.frames[loc] = vec![Frame {
                name,
                file: None,
                line: 0,
                column: 0,
            }];
            if let Some(m) = mapping {
                out.mappings[m].functions = true;
            }
            report.symbolized += 1;
        }
    }
}

/// Whether blazesym may read the DWARF of `file` (named `name`): only
/// from the file itself (a debug link would have it open whatever path the
/// link names), and only when its compressed sections unpack within bounds
/// ([`dwarf_verdict`]); a refusal is counted and named.
fn dwarf_allowed(file: &File, name: &str, report: &mut PprofReport) -> bool {
    match dwarf_verdict(file) {
        Dwarf::Read => true,
        Dwarf::Quiet => false,
        Dwarf::Refused(why) => {
            report.no_dwarf += 1;
            if report.no_dwarf_names.len() < 5 {
                report.no_dwarf_names.push(format!("{name} ({why})"));
            }
            false
        }
    }
}

/// Symbolizes `wants` from `file` (the private copy of the file with
/// their build id, named `name`): its symbol tables, its DWARF where
/// [`dwarf_allowed`], then its MiniDebugInfo for what they left unnamed
/// ([`from_minidebuginfo`]).
fn symbolize_file(
    (file, name): (&File, &str),
    wants: &[Want],
    (out, names): (&mut Symbols, &mut Demangler),
    report: &mut PprofReport,
) {
    let debugdata = minidebug::hide(file).unwrap_or_else(|e| {
        no_minidebug(report, name, &format!("hiding it from blazesym: {e}"));
        None
    });
    let elf = Elf {
        debug_syms: dwarf_allowed(file, name, report),
        ..Elf::new(fd_path(file))
    };
    let src = Source::Elf(elf);
    run(
        &src,
        (Addrs::FileOffsets, name),
        wants,
        (out, names),
        report,
    );
    if let Some(data) = debugdata {
        from_minidebuginfo((file, data, name), wants, (out, names), report);
    }
}

/// Names the locations of `wants` that the file (`copy`, named `name`)
/// left unnamed from its MiniDebugInfo (`data`, hidden from blazesym by
/// [`minidebug::hide`]), unpacked within bounds ([`minidebug::unpack`],
/// isolated: a panic in the decoder fails this file's MiniDebugInfo
/// only); a refusal is counted and named.
fn from_minidebuginfo(
    (copy, data, name): (&File, minidebug::DebugData, &str),
    wants: &[Want],
    (out, names): (&mut Symbols, &mut Demangler),
    report: &mut PprofReport,
) {
    let left: Vec<Want> = wants
        .iter()
        .filter(|w| out.frames[w.0].is_empty())
        .copied()
        .collect();
    if left.is_empty() {
        return;
    }
    let offsets: Vec<u64> = left.iter().map(|w| w.1).collect();
    let addrs = minidebug::virt_offsets(copy, &offsets);
    let left: Vec<Want> = left
        .iter()
        .zip(addrs)
        .filter_map(|(&(loc, _, m), addr)| Some((loc, addr?, m)))
        .collect();
    let mini = match isolated(|| minidebug::unpack(copy, data)) {
        Ok(Ok(f)) => f,
        Ok(Err(why)) => return no_minidebug(report, name, &why),
        Err(Panicked(at)) => {
            let why = format!("its xz decoder panicked at {at}");
            return no_minidebug(report, name, &why);
        }
    };
    let src = Source::Elf(Elf {
        debug_syms: false,
        ..Elf::new(fd_path(&mini))
    });
    run(
        &src,
        (Addrs::VirtOffsets, name),
        &left,
        (out, names),
        report,
    );
}

/// Counts and names (up to 5) a file whose MiniDebugInfo was not read.
fn no_minidebug(report: &mut PprofReport, name: &str, why: &str) {
    report.no_minidebug += 1;
    if report.no_minidebug_names.len() < 5 {
        report.no_minidebug_names.push(format!("{name} ({why})"));
    }
}

/// The path blazesym opens for an open file: the file itself, whatever is
/// at its name now.
fn fd_path(f: &File) -> PathBuf {
    PathBuf::from(format!("/proc/thread-self/fd/{}", f.as_raw_fd()))
}

/// What the addresses handed to blazesym are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Addrs {
    /// Offsets in the file (what perf's maps give).
    FileOffsets,
    /// Addresses as the ELF file's symbols have them.
    VirtOffsets,
    /// Absolute addresses (kernel frames).
    Absolute,
}

/// Symbolizes `wants` (addresses of the kind [`Addrs`] says) from `src`,
/// named `name` in errors (a fresh symbolizer per file: its cache is keyed
/// by path, and `/proc/thread-self/fd/N` names are reused). A panic in
/// blazesym (malformed DWARF it unwraps) leaves this file's frames as
/// addresses and is counted and named, not a crash ([`isolated`]). Names
/// come mangled and are demangled by `names`, once each.
fn run(
    src: &Source,
    (kind, name): (Addrs, &str),
    wants: &[Want],
    (out, names): (&mut Symbols, &mut Demangler),
    report: &mut PprofReport,
) {
    let addrs: Vec<u64> = wants.iter().map(|w| w.1).collect();
    let found = isolated(|| {
        let symbolizer = Symbolizer::builder()
            .enable_code_info(true)
            .enable_inlined_fns(true)
            .enable_demangling(false)
            .build();
        let input = match kind {
            Addrs::FileOffsets => Input::FileOffset(addrs.as_slice()),
            Addrs::VirtOffsets => Input::VirtOffset(addrs.as_slice()),
            Addrs::Absolute => Input::AbsAddr(addrs.as_slice()),
        };
        let results = symbolizer.symbolize(src, input)?;
        let frames = results.iter().map(|r| match r {
            Symbolized::Sym(sym) => Some(frames_of(sym)),
            _ => None,
        });
        Ok::<_, blazesym::Error>(frames.collect::<Vec<_>>())
    });
    let results = match found {
        Ok(Ok(r)) => r,
        Ok(Err(err)) => {
            report.symbolize_errors += 1;
            if report.symbolize_error.is_none() {
                report.symbolize_error = Some(format!("{name}: {err}"));
            }
            return;
        }
        Err(Panicked(at)) => {
            report.unsymbolizable += 1;
            if report.unsymbolizable_names.len() < 5 {
                let what = match kind {
                    Addrs::FileOffsets => "its debug info is malformed",
                    Addrs::VirtOffsets => "its MiniDebugInfo is malformed",
                    Addrs::Absolute => "it is malformed",
                };
                report
                    .unsymbolizable_names
                    .push(format!("{name} ({what}: blazesym panicked at {at})"));
            }
            return;
        }
    };
    for (&(loc, _, mapping), frames) in wants.iter().zip(results) {
        let Some(mut frames) = frames else { continue };
        for f in &mut frames {
            f.name = names.name(&f.name);
        }
        let flags = &mut out.mappings[mapping];
        flags.functions = true;
        if frames.iter().any(|f| f.file.is_some()) {
            flags.filenames = true;
            flags.lines = true;
            flags.inline = true;
        }
        report.symbolized += 1;
        out.frames[loc] = frames;
    }
}

/// blazesym gives the function, then the functions inlined into it, each
/// with its own line at this address; pprof wants the innermost first.
fn frames_of(sym: &Sym<'_>) -> Vec<Frame> {
    let frame = |name: &str, info: Option<&blazesym::symbolize::CodeInfo<'_>>| Frame {
        name: name.to_string(),
        file: info.map(|c| c.to_path().display().to_string()),
        line: info.and_then(|c| c.line).unwrap_or(0),
        column: info.and_then(|c| c.column).unwrap_or(0),
    };
    let mut frames = vec![frame(&sym.name, sym.code_info.as_deref())];
    for f in sym.inlined.iter() {
        frames.push(frame(&f.name, f.code_info.as_ref()));
    }
    frames.reverse();
    frames
}

/// Largest archived kallsyms read (this kernel's, modules and all, is a
/// few MiB).
const MAX_KALLSYMS: u64 = 256 << 20;

/// Which kallsyms may name a recorded kernel's frames.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kallsyms {
    /// The running kernel's: same build, same boot (`_text` unmoved).
    Running,
    /// The one archived under the kernel's build id.
    Archived(PathBuf),
}

/// The decision, from the recorded kernel map (its build id and pgoff,
/// which perf sets to `_text`), the running kernel's id and `_text`, and
/// the archived kallsyms path if one exists.
fn choose_kallsyms(
    recorded: Option<(Option<BuildId>, u64)>,
    running: (Option<BuildId>, Option<u64>),
    archived: impl FnOnce(&BuildId) -> Option<PathBuf>,
) -> Result<Kallsyms, String> {
    let Some((id, text)) = recorded else {
        return Err("the recording has no kernel map".into());
    };
    let Some(id) = id else {
        return Err("the recording's kernel map has no build id".into());
    };
    // same build; KASLR moves the kernel every boot, so the recorded
    // `_text` must be today's too (0: addresses hidden from us)
    if running.0 == Some(id) && running.1.is_some_and(|t| t != 0 && t == text) {
        return Ok(Kallsyms::Running);
    }
    match archived(&id) {
        Some(p) => Ok(Kallsyms::Archived(p)),
        None => Err(format!(
            "kernel {} is not the running one at the same addresses, and no kallsyms is archived for it (--buildid-dir)",
            id.to_hex()
        )),
    }
}

/// The kallsyms to read kernel frames from, and where it came from.
fn kallsyms(
    kernel_map: Option<&super::maps::Map>,
    buildid_dir: Option<&Path>,
) -> Result<(File, String), String> {
    let proc_kallsyms = Path::new("/proc/kallsyms");
    let recorded = kernel_map.map(|m| (m.build_id, m.pgoff));
    let running = (kernel_build_id(), text_address(proc_kallsyms));
    let archived = |id: &BuildId| {
        let [p, _] = cache_entry(KERNEL_DSO, id)?.files(buildid_dir?, KERNEL_DSO);
        p.exists().then_some(p)
    };
    let (path, shown) = match choose_kallsyms(recorded, running, archived)? {
        Kallsyms::Running => (
            proc_kallsyms.to_path_buf(),
            "/proc/kallsyms (same kernel, same boot)".to_string(),
        ),
        Kallsyms::Archived(p) => {
            let shown = p.display().to_string();
            (p, shown)
        }
    };
    let f = open_regular(&path).ok_or_else(|| format!("{shown}: not a readable regular file"))?;
    if path == proc_kallsyms {
        return Ok((f, shown));
    }
    // an archived one: bounded, and read from a copy its owner cannot
    // change meanwhile
    let copy = bounded_copy(&f, MAX_KALLSYMS).map_err(|why| format!("{shown}: {why}"))?;
    Ok((copy, shown))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Today's kallsyms only for the same build at the same `_text`; else
    // the archived one; else a reason.
    #[test]
    fn kallsyms_for_the_same_kernel_and_boot_only() {
        let (a, b) = (BuildId::new(&[1; 20]), BuildId::new(&[2; 20]));
        let arch = |_: &BuildId| Some(PathBuf::from("/c/k"));
        let none = |_: &BuildId| None;
        let text = 0xffff_ffff_8100_0000;
        assert_eq!(
            choose_kallsyms(Some((a, text)), (a, Some(text)), none),
            Ok(Kallsyms::Running)
        );
        // another boot (KASLR moved _text), another build, hidden addresses
        for running in [
            (a, Some(text + 0x20_0000)),
            (b, Some(text)),
            (a, Some(0)),
            (a, None),
        ] {
            assert_eq!(
                choose_kallsyms(Some((a, text)), running, arch),
                Ok(Kallsyms::Archived("/c/k".into()))
            );
            assert!(choose_kallsyms(Some((a, text)), running, none).is_err());
        }
        assert!(choose_kallsyms(None, (a, Some(text)), arch).is_err());
        assert!(choose_kallsyms(Some((None, text)), (a, Some(text)), arch).is_err());
    }
}
