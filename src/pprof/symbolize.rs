//! Symbolization with blazesym, at the edge: for each build id the profile's
//! locations map, the file with that id (from `--buildid-dir`, perf's
//! build-id cache layout, or the recorded path when its id matches: never a
//! file that merely has the name); for kernel frames, kallsyms of the same
//! kernel (the running one when its build id and `_text` match the
//! recording's kernel map, else the one archived under the kernel's id).
//! Files are opened here, checked, and handed to blazesym as
//! `/proc/thread-self/fd/N`, so what blazesym reads is the file that was checked.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use blazesym::symbolize::source::{Elf, Kernel, Source};
use blazesym::symbolize::{Input, Sym, Symbolized, Symbolizer};
use blazesym::MaybeDefault;

use super::demangle::Demangler;
use super::isolate::{isolated, Panicked};
use super::profile::{Builder, Frame, MappingSymbols, Space};
use super::PprofReport;
use crate::archive::cache_entry;
use crate::model::{BuildId, VDSO_NAME};
use crate::perf::copy::copy_range;
use crate::proc::buildid::{
    kernel_build_id, open_if_build_id, open_regular, read_build_id_from_file, vdso_image,
};
use crate::proc::debuginfo::{dwarf_verdict, Dwarf};
use crate::proc::kernel::{text_address, KERNEL_DSO};
use crate::proc::minidebug;
use crate::sys::data_bytes;

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

/// Per build id: what to symbolize and the paths it was mapped from.
type ById = BTreeMap<BuildId, (Vec<Want>, Vec<Rc<[u8]>>)>;

/// Symbolizes every location of `b` that a checked file covers.
pub fn symbolize(b: &Builder, buildid_dir: Option<&Path>, report: &mut PprofReport) -> Symbols {
    let mut out = Symbols {
        frames: vec![Vec::new(); b.locations.len()],
        mappings: vec![MappingSymbols::default(); b.mappings.len()],
    };
    let mut by_id: ById = BTreeMap::new();
    let mut kernel: Vec<Want> = Vec::new();
    let mut kernel_map = None;
    let mut names = Demangler::default();
    for (i, &(mapping, addr)) in b.locations.iter().enumerate() {
        let Some((map, space)) = mapping
            .checked_sub(1)
            .and_then(|m| b.mappings.get(m as usize))
        else {
            continue;
        };
        let m = mapping as usize - 1;
        if *space == Space::Kernel {
            kernel.push((i, addr, m));
            if map.filename.starts_with(KERNEL_DSO) {
                kernel_map.get_or_insert(map.clone());
            }
            continue;
        }
        let Some(id) = map.build_id else {
            report.no_build_id += 1;
            continue;
        };
        let offset = addr.wrapping_sub(map.start).wrapping_add(map.pgoff);
        let (wants, paths) = by_id.entry(id).or_default();
        wants.push((i, offset, m));
        if !paths.contains(&map.filename) {
            paths.push(map.filename.clone());
        }
    }
    for (id, (wants, paths)) in by_id {
        let file = find_elf(&id, &paths, buildid_dir).and_then(|f| private_copy(&f, &id));
        let file = match file {
            Ok(f) => f,
            Err(why) => {
                report.files_missing += 1;
                if report.missing.len() < 5 {
                    let name = String::from_utf8_lossy(&paths[0]).into_owned();
                    report
                        .missing
                        .push(format!("{name} ({}): {why}", id.to_hex()));
                }
                continue;
            }
        };
        let name = String::from_utf8_lossy(&paths[0]).into_owned();
        symbolize_file((&file, &name), &wants, (&mut out, &mut names), report);
    }
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

/// Largest file copied for symbolization (as `archive` copies).
const MAX_COPY: u64 = 4 << 30;

/// A private copy of a verified file, checked again: blazesym maps what it
/// reads, and the owner of the original could truncate it under the map
/// (SIGBUS) or rewrite it meanwhile.
fn private_copy(f: &File, id: &BuildId) -> Result<File, String> {
    let copy = bounded_copy(f, MAX_COPY)?;
    match read_build_id_from_file(&copy) {
        Ok(Some(raw)) if raw.as_slice() == id.as_bytes() => Ok(copy),
        _ => Err("changed while it was copied".into()),
    }
}

/// A copy of `f` in an unlinked temporary file; sparse files (a 6 GiB
/// hole, or a `fallocate`d one never written, costs nothing to make and
/// all of it to read) and files over `max` bytes are refused.
fn bounded_copy(f: &File, max: u64) -> Result<File, String> {
    let m = f.metadata().map_err(|e| e.to_string())?;
    if m.len() > max {
        return Err(format!("{} bytes, more than {max}", m.len()));
    }
    let data = data_bytes(f, &m);
    if data + (1 << 20) < m.len() {
        return Err(format!(
            "sparse file: {data} of its {} bytes written (the rest holes or unwritten extents)",
            m.len()
        ));
    }
    let mut copy = tempfile::tempfile().map_err(|e| format!("temporary copy: {e}"))?;
    copy_range(f, 0, m.len(), &mut copy).map_err(|e| format!("copying: {e}"))?;
    Ok(copy)
}

/// Largest archived kallsyms read (this kernel's, modules and all, is a
/// few MiB).
const MAX_KALLSYMS: u64 = 256 << 20;

/// The file with build id `id`: in the build-id directory (perf's cache
/// layout, [`cache_entry`]), else a recorded path whose file has that id
/// now; for `[vdso]`, this kernel's own image when the id is its.
fn find_elf(id: &BuildId, paths: &[Rc<[u8]>], buildid_dir: Option<&Path>) -> Result<File, String> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(dir) = buildid_dir {
        for p in paths {
            if let Some(entry) = cache_entry(p, id) {
                candidates.extend(entry.files(dir, p));
            }
        }
    }
    candidates.extend(
        paths
            .iter()
            .filter(|p| p.first() == Some(&b'/'))
            .map(|p| PathBuf::from(std::ffi::OsStr::from_bytes(p))),
    );
    if let Some(f) = candidates.iter().find_map(|c| open_if_build_id(c, id)) {
        return Ok(f);
    }
    if paths.iter().any(|p| **p == *VDSO_NAME) {
        if let Some((_, image)) = vdso_image().filter(|(running, _)| running == id) {
            let mut f = tempfile::tempfile().map_err(|e| format!("temporary copy: {e}"))?;
            std::io::Write::write_all(&mut f, &image).map_err(|e| e.to_string())?;
            return Ok(f);
        }
    }
    Err("not found".into())
}

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

    // Archived kallsyms and files to symbolize are copied only when whole
    // and bounded: a 6 GiB hole (instant to make, 46 s and 6 GiB of memory
    // to read, as seen) and a file over the bound are refused.
    #[test]
    fn bounded_copy_refuses_holes_and_oversize() {
        let dir = tempfile::tempdir().unwrap();
        let sparse = File::create(dir.path().join("sparse")).unwrap();
        sparse.set_len(6 << 30).unwrap();
        let e = bounded_copy(&sparse, u64::MAX).unwrap_err();
        assert!(e.contains("sparse"), "{e}");
        let small = dir.path().join("small");
        std::fs::write(&small, b"ffffffff81000000 T _text\n").unwrap();
        let e = bounded_copy(&File::open(&small).unwrap(), 8).unwrap_err();
        assert!(e.contains("more than 8"), "{e}");
        let mut copy = bounded_copy(&File::open(&small).unwrap(), MAX_KALLSYMS).unwrap();
        std::io::Seek::rewind(&mut copy).unwrap();
        let mut got = String::new();
        std::io::Read::read_to_string(&mut copy, &mut got).unwrap();
        assert_eq!(got, "ffffffff81000000 T _text\n");
    }

    // A [vdso] mapping whose id is not the running kernel's is found in the
    // build-id directory, at the file `archive` writes for it (`[vdso]/ID/
    // vdso`): a recording from another kernel symbolizes its vDSO frames
    // from the archive. Without the archive it is not found.
    #[test]
    fn archived_vdso_of_another_kernel_is_found() {
        let elf = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/fuzz/elf_notes/libz.so.1");
        let raw = crate::proc::buildid::read_build_id_from_file(&File::open(&elf).unwrap())
            .unwrap()
            .expect("the fixture has a build id");
        let id = BuildId::new(&raw).unwrap();
        assert_ne!(vdso_image().map(|(running, _)| running), Some(id));
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<Rc<[u8]>> = vec![Rc::from(VDSO_NAME)];
        assert!(find_elf(&id, &paths, Some(dir.path())).is_err());
        let archived = &cache_entry(VDSO_NAME, &id)
            .unwrap()
            .files(dir.path(), VDSO_NAME)[0];
        assert!(archived.ends_with(format!("[vdso]/{}/vdso", id.to_hex())));
        std::fs::create_dir_all(archived.parent().unwrap()).unwrap();
        std::fs::copy(&elf, archived).unwrap();
        let mut found = find_elf(&id, &paths, Some(dir.path())).expect("archived vdso");
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut found, &mut got).unwrap();
        assert!(got == std::fs::read(&elf).unwrap(), "not the archived file");
    }

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
