//! The two VMA sources over an open `/proc/PID/maps`, chosen per file:
//! the PROCMAP_QUERY walk (`ioctl_walk`) and the text parser
//! (`text_walk`). Both return the same [`Vma`]s, build ids resolved.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

pub use super::idcache::BuildIdPolicy;
use super::ioctl_walk::memory_still_there;
pub use super::ioctl_walk::{walk_ioctl, VmaSink};
pub use super::local::Local;
pub use super::names::Names;
pub use super::text_walk::walk_text;
pub use super::walk_cap::{is_walk_cap, walk_limit, LongNames, TooManyMaps, LONG_NAME_TEXT};
use crate::model::{Selection, Source, Vma};

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

/// How each maps file is walked.
#[derive(Debug, Clone, Copy)]
pub struct Walk {
    pub selection: Selection,
    pub source: SourceChoice,
    /// VMAs one walk visits (kept or not) before it stops with
    /// [`TooManyMaps`]; see [`walk_limit`].
    pub max_vmas: usize,
}

/// Reads one maps file with the chosen source, handing each VMA to `push`
/// with the source it came from as it is read; returns the source used.
/// The first ENOTTY (a kernel without PROCMAP_QUERY, before any VMA) sets
/// `no_ioctl`, so every later file goes straight to the text parser; with
/// [`SourceChoice::Ioctl`] it is returned instead.
///
/// Every VMA (`-d`) is read from the text by default, with the ioctl
/// asked only what the text leaves open (see [`walk_text`]): the kernel
/// writes a process's text for less than a query per VMA costs (200
/// processes x 1,100 VMAs: `cat` of every maps file 122 ms against 181 for
/// the walk). For executable VMAs alone the ioctl's filter wins: the text
/// has every line.
pub fn read_maps_file(
    path: &Path,
    walk: Walk,
    ids: BuildIdPolicy<'_>,
    local: &mut Local,
    no_ioctl: &AtomicBool,
    push: &mut dyn FnMut(Source, Vma) -> io::Result<()>,
) -> io::Result<Source> {
    let (sel, max) = (walk.selection, walk.max_vmas);
    let file = File::open(path)?;
    let text_first = walk.source == SourceChoice::Auto && sel == Selection::ExecAndData;
    if !no_ioctl.load(Ordering::Relaxed) && !text_first {
        let mut pushed = false;
        let mut each = |v| {
            pushed = true;
            push(Source::Ioctl, v)
        };
        match walk_ioctl(&file, sel, (0, 0), max, ids, local, &mut each) {
            Ok(()) => return Ok(Source::Ioctl),
            // only before the first VMA: after it, a text walk would repeat them
            Err(e) if e.raw_os_error() == Some(libc::ENOTTY) && !pushed => {
                no_ioctl.store(true, Ordering::Relaxed);
                if walk.source == SourceChoice::Ioctl {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
    let ioctl = text_first && !no_ioctl.load(Ordering::Relaxed);
    let mut each = |v| push(Source::Text, v);
    if let Some(from) = walk_text(&file, sel, max, ids, local, ioctl, &mut each)? {
        // a name too long for the text to be worth reading on
        walk_ioctl(&file, sel, from, max, ids, local, &mut each)?;
    }
    // a kernel without the ioctl, met by a text walk that asked it (`-d`):
    // later files are not asked (a query per process and per ambiguous name)
    if (walk.source == SourceChoice::Text || ioctl) && !memory_still_there(&file)? {
        no_ioctl.store(true, Ordering::Relaxed);
    }
    Ok(Source::Text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TOOLONG_NAME;

    /// A VMA as a test's walk handed it on: its source, start and name.
    type Read = (Source, u64, Vec<u8>);

    /// What [`read_maps_file`] (`--source auto`, `sel`, no build ids)
    /// makes of the maps file `path`: its result, each VMA's source,
    /// start and name, and whether it marked the ioctl missing.
    fn read_fake(path: &Path, sel: Selection) -> (io::Result<Source>, Vec<Read>, bool) {
        let walk = Walk {
            selection: sel,
            source: SourceChoice::Auto,
            max_vmas: 100,
        };
        let ids = BuildIdPolicy {
            cache: None,
            pid: 1,
            tid: 1,
            proc_root: path.parent().unwrap(),
        };
        let mut got = Vec::new();
        let mut push = |s, v: Vma| {
            got.push((s, v.start, v.name.to_vec()));
            Ok(())
        };
        let (mut local, no_ioctl) = (Local::default(), AtomicBool::new(false));
        let r = read_maps_file(path, walk, ids, &mut local, &no_ioctl, &mut push);
        (r, got, no_ioctl.load(Ordering::Relaxed))
    }

    // Without the ioctl, lines naming paths of PATH_MAX or more stop a text
    // walk once they pass LONG_NAME_TEXT bytes, inside the line that passes
    // it (its VMA already handed on), with the walk-cap error that keeps
    // what was read; ordinary lines before them cost nothing.
    #[test]
    fn long_name_lines_stop_a_text_walk_past_their_budget() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("maps");
        let mut maps = b"1000-2000 r-xp 00000000 08:01 5 /usr/lib/libc.so.6\n".to_vec();
        let name = vec![b'/'; 300_000];
        let mut line_len = 0;
        for i in 2..40u64 {
            let start = maps.len();
            let head = format!("{:x}-{:x} r-xp 00000000 08:01 {i} ", i << 12, (i + 1) << 12);
            maps.extend_from_slice(head.as_bytes());
            maps.extend_from_slice(&name);
            maps.push(b'\n');
            line_len = maps.len() - start;
        }
        std::fs::write(&path, &maps).unwrap();
        for sel in [Selection::Exec, Selection::ExecAndData] {
            let (r, got, _) = read_fake(&path, sel);
            let e = r.expect_err("the walk goes on past its budget");
            assert!(is_walk_cap(&e), "{e}");
            assert!(e.to_string().contains("PATH_MAX or more"), "{e}");
            let long = LONG_NAME_TEXT / line_len + 1;
            assert_eq!(got.len(), 1 + long, "{sel:?}");
            assert_eq!(got[0].2, b"/usr/lib/libc.so.6");
            assert!(got[1..].iter().all(|(_, _, n)| n == TOOLONG_NAME));
        }
    }

    // A `-d` text walk whose ioctl does not answer (ENOTTY: a regular file
    // here, as on a kernel before 6.11) marks the kernel as without it, so
    // the next files are not asked.
    #[test]
    fn a_text_walk_meeting_enotty_marks_the_ioctl_missing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("maps");
        let maps = "1000-2000 r-xp 00000000 08:01 5 /usr/lib/a\\012b\n\
                    2000-3000 rw-p 00000000 00:00 0 \n";
        std::fs::write(&path, maps).unwrap();
        let (source, got, no_ioctl) = read_fake(&path, Selection::ExecAndData);
        let source = source.unwrap();
        assert_eq!(source, Source::Text);
        assert!(no_ioctl);
        let want = [
            (Source::Text, 0x1000, b"/usr/lib/a\nb".to_vec()),
            (Source::Text, 0x2000, Vec::new()),
        ];
        assert_eq!(got, want);
    }
}
