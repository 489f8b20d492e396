//! The two VMA sources over an open `/proc/PID/maps`: the PROCMAP_QUERY walk
//! and the text parser. Both return the same [`Vma`]s, build ids resolved.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::buildid::{self, BuildIdCache, LocalBuildIds};
use crate::model::{BuildId, Perms, Selection, Source, Vma, MAX_BUILD_ID, VSYSCALL_NAME};
use crate::sys::{self, ProcmapQuery};

/// Which VMA source to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceChoice {
    /// PROCMAP_QUERY, falling back to text when the kernel lacks it.
    Auto,
    /// Only PROCMAP_QUERY.
    Ioctl,
    /// Only text maps.
    Text,
}

/// How build ids are resolved while walking.
#[derive(Clone, Copy)]
pub struct BuildIdPolicy<'a> {
    /// The shared cache; `None` disables build ids.
    pub cache: Option<&'a BuildIdCache>,
    /// Pid whose `/proc/PID/map_files` and `/proc/PID/root` serve the fallback.
    pub pid: u32,
    /// The thread whose maps are read: a live one when the leader is a
    /// zombie, whose `task/TID/` then serves the fallback.
    pub tid: u32,
    /// Root of the proc filesystem those paths are under.
    pub proc_root: &'a Path,
}

/// Longest name buffer tried; longer names become `//toolong` (as perf).
const MAX_NAME: usize = 4096;

/// Walks the VMAs of an open maps file with PROCMAP_QUERY. Errors are the
/// ioctl's: ENOTTY means the kernel lacks it, ESRCH that the memory is gone.
pub fn walk_ioctl(
    file: &File,
    sel: Selection,
    ids: BuildIdPolicy<'_>,
    local: &mut LocalBuildIds,
) -> io::Result<Vec<Vma>> {
    let fd = file.as_fd();
    let filter = match sel {
        Selection::Exec => sys::PROCMAP_QUERY_VMA_EXECUTABLE,
        Selection::ExecAndData => 0,
    };
    // on the stack: a heap buffer this size per process made the allocator
    // consolidate its small free chunks once per process
    let mut name = [0u8; MAX_NAME];
    let mut out = Vec::with_capacity(match sel {
        Selection::Exec => 32,
        Selection::ExecAndData => 128,
    });
    let mut addr = 0u64;
    loop {
        let mut q = ProcmapQuery {
            query_flags: sys::PROCMAP_QUERY_COVERING_OR_NEXT_VMA | filter,
            query_addr: addr,
            ..Default::default()
        };
        let mut toolong = false;
        match sys::procmap_query(fd, &mut q, &mut name, &mut []) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => break,
            Err(e) if e.raw_os_error() == Some(libc::ENAMETOOLONG) => {
                q = ProcmapQuery {
                    query_flags: sys::PROCMAP_QUERY_COVERING_OR_NEXT_VMA | filter,
                    query_addr: addr,
                    ..Default::default()
                };
                sys::procmap_query(fd, &mut q, &mut [], &mut [])?;
                toolong = true;
            }
            Err(e) => return Err(e),
        }
        if q.vma_end <= addr && addr != 0 {
            // The kernel never returns a VMA behind the query address; stop
            // rather than loop if it ever did.
            break;
        }
        addr = q.vma_end;
        let perms = Perms((q.vma_flags & 0x0f) as u8);
        if !sel.wants(perms) {
            continue;
        }
        let name_len = (q.vma_name_size as usize).saturating_sub(1).min(name.len());
        let mut vma = Vma {
            start: q.vma_start,
            end: q.vma_end,
            offset: q.vma_offset,
            perms,
            dev_major: q.dev_major,
            dev_minor: q.dev_minor,
            inode: q.inode,
            name: if toolong {
                b"//toolong".to_vec()
            } else {
                name[..name_len].to_vec()
            },
            build_id: None,
        };
        if let Some(cache) = ids.cache {
            vma.build_id = resolve(&vma, cache, local, ids, || {
                let mut bid = [0u8; MAX_BUILD_ID];
                let mut q = ProcmapQuery {
                    query_flags: sys::PROCMAP_QUERY_COVERING_OR_NEXT_VMA,
                    query_addr: vma.start,
                    ..Default::default()
                };
                match sys::procmap_query(fd, &mut q, &mut [], &mut bid) {
                    Ok(()) if q.vma_start == vma.start && q.build_id_size > 0 => {
                        BuildId::new(&bid[..(q.build_id_size as usize).min(MAX_BUILD_ID)])
                    }
                    _ => None,
                }
            });
        }
        out.push(vma);
    }
    Ok(out)
}

/// Resolves a VMA's build id through the cache; on a miss asks `kernel`
/// first, then reads the ELF note of the mapped file. Only answers about the
/// mapped file itself (the kernel's, or a file verified by device and inode)
/// are cached for every process: one process's view of a path (an
/// inode-only match, or nothing usable) stays its own, so it cannot poison
/// the answer for the others.
fn resolve(
    vma: &Vma,
    cache: &BuildIdCache,
    local: &mut LocalBuildIds,
    ids: BuildIdPolicy<'_>,
    kernel: impl FnOnce() -> Option<BuildId>,
) -> Option<BuildId> {
    if vma.is_vdso() {
        return buildid::vdso_build_id();
    }
    let key = vma.file_key()?;
    if let Some(known) = local.get(cache, &key) {
        return known;
    }
    if let Some(id) = kernel() {
        return local.insert(cache, key, Some(id));
    }
    let mut dir = ids.proc_root.join(ids.pid.to_string());
    if ids.tid != ids.pid {
        dir = dir.join("task").join(ids.tid.to_string());
    }
    match buildid::read_mapped_build_id(&dir, vma) {
        Some((raw, buildid::Trust::Verified)) => {
            local.insert(cache, key, raw.and_then(|r| BuildId::new(&r)))
        }
        Some((raw, buildid::Trust::Unverified)) => {
            cache.count_unverified();
            raw.and_then(|r| BuildId::new(&r))
        }
        None => None,
    }
}

/// Reads and parses a text maps file. `[vsyscall]` is dropped, as the ioctl
/// never reports it.
pub fn walk_text(
    file: &mut File,
    sel: Selection,
    ids: BuildIdPolicy<'_>,
    local: &mut LocalBuildIds,
) -> io::Result<Vec<Vma>> {
    let mut text = Vec::with_capacity(16 * 1024);
    file.read_to_end(&mut text)?;
    let mut vmas = super::maps_text::parse_maps(&text, |perms, name| {
        sel.wants(perms) && name != VSYSCALL_NAME
    })
    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    if let Some(cache) = ids.cache {
        for vma in &mut vmas {
            vma.build_id = resolve(vma, cache, local, ids, || None);
        }
    }
    Ok(vmas)
}

/// Reads one maps file with the chosen source. The first ENOTTY (a kernel
/// without PROCMAP_QUERY) sets `no_ioctl`, so every later file goes straight
/// to the text parser; with [`SourceChoice::Ioctl`] it is returned instead.
pub fn read_maps_file(
    path: &Path,
    sel: Selection,
    choice: SourceChoice,
    ids: BuildIdPolicy<'_>,
    local: &mut LocalBuildIds,
    no_ioctl: &AtomicBool,
) -> io::Result<(Vec<Vma>, Source)> {
    let mut file = File::open(path)?;
    if !no_ioctl.load(Ordering::Relaxed) {
        match walk_ioctl(&file, sel, ids, local) {
            Ok(v) => return Ok((v, Source::Ioctl)),
            Err(e) if e.raw_os_error() == Some(libc::ENOTTY) => {
                no_ioctl.store(true, Ordering::Relaxed);
                if choice == SourceChoice::Ioctl {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok((walk_text(&mut file, sel, ids, local)?, Source::Text))
}
