//! The kernel's and modules' text maps as perf writes them: the kernel
//! from `_text` (pgoff too) to `_etext`, each module from /proc/modules at
//! its `.ko` path under /lib/modules/RELEASE (`[name]` when not found),
//! with build ids from /sys. The parsers are pure functions over bytes;
//! [`kernel_maps`] reads the files under configurable roots (tests point
//! them at fixture copies: this project's machines have no modules).

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use super::buildid::notes_build_id;
use crate::model::{BuildId, KernelMap};

/// perf's kernel map name (the DSO plus the reference symbol).
pub const KERNEL_MAP_NAME: &[u8] = b"[kernel.kallsyms]_text";
/// perf's BUILD_ID table name of the kernel.
pub const KERNEL_DSO: &[u8] = b"[kernel.kallsyms]";

/// Where the kernel's facts are read from.
#[derive(Debug, Clone)]
pub struct KernelRoots {
    /// /proc (kallsyms, modules, iomem).
    pub proc_root: PathBuf,
    /// /sys (kernel/notes, module/NAME/notes).
    pub sys_root: PathBuf,
    /// /lib/modules/RELEASE.
    pub modules_dir: PathBuf,
}

impl KernelRoots {
    /// The running system's, with /proc at `proc_root`.
    pub fn system(proc_root: &Path) -> KernelRoots {
        let release = std::fs::read(proc_root.join("sys/kernel/osrelease")).unwrap_or_default();
        let release = String::from_utf8_lossy(&release).trim().to_string();
        KernelRoots {
            proc_root: proc_root.to_path_buf(),
            sys_root: PathBuf::from("/sys"),
            modules_dir: Path::new("/lib/modules").join(release),
        }
    }
}

/// What was found: the maps (kernel first, then modules by address), or
/// why there are none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelMaps {
    pub maps: Vec<KernelMap>,
    /// Why the kernel map is missing (hidden addresses, unreadable files).
    pub skipped: Option<String>,
}

/// A symbol's address in /proc/kallsyms text (`ADDR TYPE NAME [MODULE]`).
pub fn kallsyms_address(line: &[u8], name: &[u8]) -> Option<u64> {
    let mut f = line
        .split(|&c| c == b' ' || c == b'\t')
        .filter(|f| !f.is_empty());
    let addr = f.next()?;
    let _type = f.next()?;
    if f.next()? != name {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(addr).ok()?, 16).ok()
}

/// The length of "Kernel code" in /proc/iomem text (`_text` to `_etext`,
/// physical addresses, so only the length is of use).
pub fn iomem_kernel_code_len(iomem: &[u8]) -> Option<u64> {
    iomem.split(|&c| c == b'\n').find_map(|l| {
        let (range, what) = std::str::from_utf8(l).ok()?.split_once(" : ")?;
        if what.trim() != "Kernel code" {
            return None;
        }
        let (a, b) = range.trim().split_once('-')?;
        let (a, b) = (
            u64::from_str_radix(a, 16).ok()?,
            u64::from_str_radix(b, 16).ok()?,
        );
        // 0-0: addresses hidden from this user
        (b > a).then(|| b - a + 1)
    })
}

/// A loaded module in /proc/modules text (`name size refs deps state
/// address ...`): (name, address, size). Lines that do not parse are left out.
pub fn parse_modules(text: &[u8]) -> Vec<(Vec<u8>, u64, u64)> {
    let mut out = Vec::new();
    for line in text.split(|&c| c == b'\n') {
        let f: Vec<&[u8]> = line
            .split(|&c| c == b' ')
            .filter(|f| !f.is_empty())
            .collect();
        if f.len() < 6 {
            continue;
        }
        let num = |b: &[u8], radix| {
            let s = std::str::from_utf8(b).ok()?;
            u64::from_str_radix(s.trim_start_matches("0x"), radix).ok()
        };
        if let (Some(size), Some(addr)) = (num(f[1], 10), num(f[5], 16)) {
            out.push((f[0].to_vec(), addr, size));
        }
    }
    out.sort_by_key(|m| m.1);
    out
}

/// A module's name as the kernel spells it from a `.ko` file name
/// (`snd-hda.ko.zst` -> `snd_hda`), None for other files.
pub fn module_of_file(file: &[u8]) -> Option<Vec<u8>> {
    let stem = [b".ko".as_slice(), b".ko.xz", b".ko.zst", b".ko.gz"]
        .iter()
        .find_map(|ext| file.strip_suffix(*ext))?;
    (!stem.is_empty()).then(|| {
        stem.iter()
            .map(|&c| if c == b'-' { b'_' } else { c })
            .collect()
    })
}

/// The `.ko` files under `dir` by module name (perf walks the same tree),
/// at most 100,000 entries and 16 levels deep; symlinks are not followed.
fn module_paths(dir: &Path) -> HashMap<Vec<u8>, Vec<u8>> {
    let mut found = HashMap::new();
    let mut stack = vec![(dir.to_path_buf(), 0)];
    let mut seen = 0;
    while let Some((d, depth)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for ent in rd.flatten() {
            seen += 1;
            if seen > 100_000 {
                return found;
            }
            let Ok(ft) = ent.file_type() else { continue };
            let path = ent.path();
            if ft.is_dir() && depth < 16 {
                stack.push((path, depth + 1));
            } else if ft.is_file() {
                if let Some(m) = module_of_file(ent.file_name().as_bytes()) {
                    found
                        .entry(m)
                        .or_insert_with(|| path.into_os_string().into_vec());
                }
            }
        }
    }
    found
}

/// Reads the first lines of kallsyms until `_text` (the kernel prints it
/// third): reading all of it costs the kernel ~50 ms.
pub fn text_address(kallsyms: &Path) -> Option<u64> {
    let f = std::fs::File::open(kallsyms).ok()?;
    let mut lines = BufReader::new(f).split(b'\n');
    let mut stext = None;
    for line in lines.by_ref().take(1000) {
        let line = line.ok()?;
        if let Some(a) = kallsyms_address(&line, b"_text") {
            return Some(a);
        }
        stext = stext.or_else(|| kallsyms_address(&line, b"_stext"));
    }
    stext
}

/// The `_etext` address, from the whole of kallsyms (when /proc/iomem has
/// no "Kernel code").
fn etext_address(kallsyms: &Path) -> Option<u64> {
    let f = std::fs::File::open(kallsyms).ok()?;
    BufReader::new(f)
        .split(b'\n')
        .map_while(Result::ok)
        .find_map(|l| kallsyms_address(&l, b"_etext"))
}

/// The kernel and module maps of the running system (see the module doc).
pub fn kernel_maps(roots: &KernelRoots) -> KernelMaps {
    let mut out = KernelMaps::default();
    let kallsyms = roots.proc_root.join("kallsyms");
    let modules = std::fs::read(roots.proc_root.join("modules"))
        .map(|t| parse_modules(&t))
        .unwrap_or_default();
    match text_address(&kallsyms) {
        Some(0) => {
            out.skipped = Some(
                "kernel addresses are hidden from this user (kptr_restrict, CAP_SYSLOG)".into(),
            )
        }
        None => out.skipped = Some(format!("no _text in {}", kallsyms.display())),
        Some(text) => {
            let len = std::fs::read(roots.proc_root.join("iomem"))
                .ok()
                .and_then(|t| iomem_kernel_code_len(&t));
            let end = match len {
                Some(n) if n > 0 => Some(text + n),
                _ => etext_address(&kallsyms).filter(|&e| e > text),
            };
            let end = end.or_else(|| modules.first().map(|m| m.1).filter(|&m| m > text));
            let end = end.unwrap_or(u64::MAX);
            out.maps.push(KernelMap {
                start: text,
                end,
                pgoff: text,
                name: KERNEL_MAP_NAME.to_vec(),
                dso: KERNEL_DSO.to_vec(),
                build_id: notes_build_id(&roots.sys_root.join("kernel/notes")),
            });
        }
    }
    if out.skipped.is_some() {
        return out;
    }
    let paths = if modules.is_empty() {
        HashMap::new()
    } else {
        module_paths(&roots.modules_dir)
    };
    for (name, addr, size) in modules {
        if addr == 0 || size == 0 {
            continue;
        }
        let file = paths.get(&name).cloned().unwrap_or_else(|| {
            let mut n = b"[".to_vec();
            n.extend_from_slice(&name);
            n.push(b']');
            n
        });
        let mut notes = roots.sys_root.join("module").into_os_string().into_vec();
        notes.push(b'/');
        notes.extend_from_slice(&name);
        notes.extend_from_slice(b"/notes/.note.gnu.build-id");
        let notes = PathBuf::from(std::ffi::OsString::from_vec(notes));
        out.maps.push(KernelMap {
            start: addr,
            end: addr.saturating_add(size),
            pgoff: 0,
            name: file.clone(),
            dso: file,
            build_id: notes_build_id(&notes),
        });
    }
    out
}

/// The ids of these maps, for a BUILD_ID table (cpumode KERNEL).
pub fn kernel_build_ids(maps: &[KernelMap]) -> Vec<(Vec<u8>, BuildId)> {
    maps.iter()
        .filter_map(|m| Some((m.dso.clone(), m.build_id?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // kallsyms, iomem and modules lines parse; others are left out.
    #[test]
    fn parsers() {
        assert_eq!(
            kallsyms_address(b"ffffffff81000000 T _text", b"_text"),
            Some(0xffffffff81000000)
        );
        assert_eq!(
            kallsyms_address(b"ffffffff81000000 T _stext", b"_text"),
            None
        );
        assert_eq!(
            kallsyms_address(b"0000000000000000 T _text", b"_text"),
            Some(0)
        );
        let iomem = b"00100000-00ffffff : System RAM\n  01000000-022784c7 : Kernel code\n";
        assert_eq!(iomem_kernel_code_len(iomem), Some(0x12784c8));
        assert_eq!(
            iomem_kernel_code_len(b"00000000-00000000 : Kernel code\n"),
            None,
            "hidden"
        );
        let m = b"ext4 1007616 1 - Live 0xffffffffc0a00000\nbad line\nsnd_hda 2000 0 - Live 0xffffffffc0100000 (O)\n";
        assert_eq!(
            parse_modules(m),
            vec![
                (b"snd_hda".to_vec(), 0xffffffffc0100000, 2000),
                (b"ext4".to_vec(), 0xffffffffc0a00000, 1007616)
            ]
        );
        assert_eq!(module_of_file(b"snd-hda.ko.zst"), Some(b"snd_hda".to_vec()));
        assert_eq!(module_of_file(b"libc.so"), None);
    }

    /// An ELF note file holding a GNU build id of `fill` bytes.
    fn notes(fill: u8) -> Vec<u8> {
        let mut n = Vec::new();
        for v in [4u32, 20, 3] {
            n.extend_from_slice(&v.to_ne_bytes());
        }
        n.extend_from_slice(b"GNU\0");
        n.extend_from_slice(&[fill; 20]);
        n
    }

    /// A fake system under one directory: kallsyms (`_text` at `text`),
    /// iomem, three modules (one without notes, one without a .ko file),
    /// /sys notes and a /lib/modules tree.
    fn fake_system(text: &str) -> (tempfile::TempDir, KernelRoots) {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let w = |p: &str, b: &[u8]| {
            let p = d.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b).unwrap();
        };
        w(
            "proc/kallsyms",
            format!("0000000000000000 A fixed_percpu_data\n{text} T _stext\n{text} T _text\n")
                .as_bytes(),
        );
        w(
            "proc/iomem",
            b"00100000-0fffffff : System RAM\n  01000000-01ffffff : Kernel code\n",
        );
        w(
            "proc/modules",
            b"ext4 4096 1 - Live 0xffffffffc0200000\nsnd_hda 8192 0 - Live 0xffffffffc0100000 (O)\nnone 100 0 - Live 0xffffffffc0300000\n",
        );
        w("sys/kernel/notes", &notes(0x11));
        w("sys/module/ext4/notes/.note.gnu.build-id", &notes(0x22));
        w("lib/modules/9.9/kernel/fs/ext4/ext4.ko", b"");
        w("lib/modules/9.9/kernel/sound/snd-hda.ko.zst", b"");
        let roots = KernelRoots {
            proc_root: d.join("proc"),
            sys_root: d.join("sys"),
            modules_dir: d.join("lib/modules/9.9"),
        };
        (tmp, roots)
    }

    // The kernel map from _text for iomem's "Kernel code" length with the
    // notes' id; modules by address at their .ko paths ("[name]" without
    // one), ids where /sys has notes; hidden addresses skip everything.
    #[test]
    fn kernel_and_module_maps_from_a_fake_system() {
        let (tmp, roots) = fake_system("ffffffff81000000");
        let km = kernel_maps(&roots);
        assert_eq!(km.skipped, None);
        let k = &km.maps[0];
        assert_eq!(
            (k.start, k.end, k.pgoff),
            (0xffffffff81000000, 0xffffffff82000000, 0xffffffff81000000)
        );
        assert_eq!(
            (k.name.as_slice(), k.dso.as_slice()),
            (KERNEL_MAP_NAME, KERNEL_DSO)
        );
        assert_eq!(k.build_id, BuildId::new(&[0x11; 20]));
        let mods: Vec<(u64, u64, String, Option<BuildId>)> = km.maps[1..]
            .iter()
            .map(|m| {
                (
                    m.start,
                    m.end - m.start,
                    String::from_utf8_lossy(&m.name).into_owned(),
                    m.build_id,
                )
            })
            .collect();
        let base = tmp.path().join("lib/modules/9.9/kernel");
        assert_eq!(
            mods,
            vec![
                (
                    0xffffffffc0100000,
                    8192,
                    base.join("sound/snd-hda.ko.zst").display().to_string(),
                    None
                ),
                (
                    0xffffffffc0200000,
                    4096,
                    base.join("fs/ext4/ext4.ko").display().to_string(),
                    BuildId::new(&[0x22; 20])
                ),
                (0xffffffffc0300000, 100, "[none]".to_string(), None),
            ]
        );
        assert!(km.maps[1..].iter().all(|m| m.pgoff == 0));

        let (_tmp, roots) = fake_system("0000000000000000");
        let km = kernel_maps(&roots);
        assert!(km.maps.is_empty());
        assert!(km.skipped.unwrap().contains("kptr_restrict"));
    }
}
