//! `/proc/PID/mountinfo` parsed: what the scan needs of each mount (its
//! id, device, mount point, whether it is FUSE or an overlay on FUSE, and
//! whether its files can share a device and inode in the maps). Pure
//! functions over the table's bytes; `mounts` reads and judges.

use std::collections::HashMap;

/// A filesystem type is FUSE's: served by a user-space daemon.
pub fn is_fuse(fstype: &[u8]) -> bool {
    fstype == b"fuse" || fstype == b"fuseblk" || fstype.starts_with(b"fuse.")
}

/// A filesystem type whose files the maps can show with one device and
/// inode: btrfs and bcachefs show the filesystem's device for every
/// subvolume, each numbering its inodes afresh; an overlay shows its own
/// device with each layer's inode numbers (unless `xino`). So a build id
/// cannot be cached by those two alone.
pub fn shares_inodes(fstype: &[u8]) -> bool {
    matches!(fstype, b"btrfs" | b"bcachefs" | b"overlay")
}

/// One line of a `mountinfo` text: what the scan needs of a mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Its id (field 1: what `statx`'s `STATX_MNT_ID` gives).
    pub id: u32,
    /// Its device (`MAJOR:MINOR`, field 3).
    pub dev: (u32, u32),
    /// Where it is mounted, seen from the reading process's root (field 5,
    /// its `\ooo` escapes undone).
    pub point: Vec<u8>,
    /// Its type (the field after the ` - ` separator) is FUSE's.
    pub fuse: bool,
    /// Its type gives several files one device and inode in the maps
    /// (btrfs, bcachefs, overlay: see [`shares_inodes`]).
    pub shares_inodes: bool,
    /// For an overlay, the directories of its layers (`lowerdir`,
    /// `upperdir`, `workdir`, `datadir` options), as given.
    pub layers: Vec<Vec<u8>>,
}

/// `\ooo` escapes (of space, tab, newline, backslash) undone.
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (field[i], octal) {
            (b'\\', Some(d)) => {
                let v = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                out.push(v as u8);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// The mounts of a `mountinfo` text; lines not of its form are skipped.
pub fn parse_mountinfo(text: &[u8]) -> impl Iterator<Item = Mount> + '_ {
    text.split(|&b| b == b'\n').filter_map(|line| {
        let mut fields = line.split(|&b| b == b' ');
        let number = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<u32>().ok();
        let id = number(fields.next()?)?;
        let dev = fields.nth(1)?;
        let (major, minor) = dev.split_at(dev.iter().position(|&b| b == b':')?);
        let dev = (number(major)?, number(&minor[1..])?);
        let point = unescape(fields.nth(1)?);
        let mut rest = fields.skip_while(|f| *f != b"-").skip(1);
        let fstype = rest.next()?;
        let options = rest.nth(1).unwrap_or_default();
        let layers = match fstype {
            b"overlay" => overlay_layers(options),
            _ => Vec::new(),
        };
        Some(Mount {
            id,
            dev,
            point,
            fuse: is_fuse(fstype),
            shares_inodes: shares_inodes(fstype),
            layers,
        })
    })
}

/// The layer directories an overlay's options name: `lowerdir=A:B`
/// (`\\:` a colon of a name), `upperdir=`, `workdir=`, and each
/// `lowerdir+=`/`datadir+=`.
fn overlay_layers(options: &[u8]) -> Vec<Vec<u8>> {
    let mut layers = Vec::new();
    for opt in options.split(|&b| b == b',') {
        let Some(eq) = opt.iter().position(|&b| b == b'=') else {
            continue;
        };
        let (key, value) = (&opt[..eq], unescape(&opt[eq + 1..]));
        match key {
            b"lowerdir" => {
                let mut one = Vec::new();
                let mut bytes = value.iter().copied().peekable();
                while let Some(c) = bytes.next() {
                    match c {
                        b'\\' if bytes.peek() == Some(&b':') => {
                            one.push(bytes.next().unwrap_or(b':'))
                        }
                        b':' => layers.push(std::mem::take(&mut one)),
                        c => one.push(c),
                    }
                }
                layers.push(one);
            }
            b"upperdir" | b"workdir" | b"lowerdir+" | b"datadir+" => layers.push(value),
            _ => {}
        }
    }
    layers.retain(|l| !l.is_empty());
    layers
}

/// Which of `mounts` are FUSE, or overlays with a layer under a FUSE
/// mount point, or under such an overlay, and so on (by the layers'
/// letters, in this table: best effort). Linear in the table: each layer's
/// directories are looked up among the mount points (a chain of overlays
/// each on the next, which any user can mount in a user namespace, cost
/// the cube of its length when the table was searched again per round).
pub fn fuse_or_on_it(mounts: &[Mount]) -> Vec<bool> {
    let mut at: HashMap<&[u8], Vec<usize>> = HashMap::new();
    for (i, m) in mounts.iter().enumerate() {
        at.entry(m.point.as_slice()).or_default().push(i);
    }
    // on[j]: the overlays with a layer under mount j's point
    let mut on: Vec<Vec<usize>> = vec![Vec::new(); mounts.len()];
    for (i, m) in mounts.iter().enumerate() {
        for layer in &m.layers {
            for dir in directories_of(layer) {
                for &j in at.get(dir).into_iter().flatten() {
                    on[j].push(i);
                }
            }
        }
    }
    let mut fuse: Vec<bool> = mounts.iter().map(|m| m.fuse).collect();
    let mut todo: Vec<usize> = (0..mounts.len()).filter(|&j| fuse[j]).collect();
    while let Some(j) = todo.pop() {
        for &i in &on[j] {
            if !fuse[i] {
                fuse[i] = true;
                todo.push(i);
            }
        }
    }
    fuse
}

/// `path` and the directories above it (`/a/b`: `/`, `/a`, `/a/b`).
pub fn directories_of(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    let slashes = (path.iter().enumerate()).filter(|&(_, &b)| b == b'/');
    (slashes.map(|(i, _)| i).chain([path.len()]))
        .map(move |i| if i == 0 { &path[..1] } else { &path[..i] })
}

/// Drops the end of `text` after its last newline (a line cut short).
pub fn whole_lines(text: &mut Vec<u8>) {
    let keep = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    text.truncate(keep);
}

#[cfg(test)]
mod tests {
    use super::*;

    // A chain of overlays, each with a layer under the next one's mount
    // point and the last on FUSE, is FUSE all along; an overlay whose
    // layer only shares a prefix of letters is not. (20,000 mounts: one
    // pass over the table now; the search per round was cubic, 30 s for
    // 2,000 mounts.)
    #[test]
    fn a_chain_of_overlays_on_fuse_is_fuse_all_along() {
        let n = 20_000;
        let mut mounts: Vec<Mount> = (1..=n)
            .map(|i| Mount {
                id: i,
                dev: (0, i),
                point: format!("/p/{i}").into_bytes(),
                fuse: false,
                shares_inodes: true,
                layers: vec![format!("/p/{}/l", i - 1).into_bytes()],
            })
            .collect();
        mounts.push(Mount {
            id: 0,
            dev: (0, 0),
            point: b"/p/0".to_vec(),
            fuse: true,
            shares_inodes: false,
            layers: Vec::new(),
        });
        mounts.push(Mount {
            id: n + 1,
            dev: (0, n + 1),
            point: b"/q".to_vec(),
            fuse: false,
            shares_inodes: true,
            layers: vec![b"/p/x/l".to_vec()],
        });
        let fuse = fuse_or_on_it(&mounts);
        assert!(fuse[..=n as usize].iter().all(|&f| f));
        assert!(!fuse[n as usize + 1]);
    }

    // A table cut by the read's bound keeps only its whole lines: a FUSE
    // mount whose line was cut in its type is not taken for another
    // filesystem (it is left unknown: not read).
    #[test]
    fn a_line_cut_by_the_bound_is_left_out() {
        let mut text = b"22 1 254:0 / / rw - ext4 /dev/vda rw\n40 22 0:36 / /s rw - fu".to_vec();
        whole_lines(&mut text);
        let got: Vec<_> = parse_mountinfo(&text).map(|m| m.dev).collect();
        assert_eq!(got, [(254, 0)]);
        let mut none = b"40 22 0:36 / /s rw - fu".to_vec();
        whole_lines(&mut none);
        assert!(none.is_empty());
    }

    // Each line gives its id, device, mount point (unescaped) and whether
    // its type is FUSE's, whatever optional fields come before the
    // separator; other lines are skipped.
    #[test]
    fn mountinfo_lines_give_mounts() {
        let text = b"22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
            40 22 0:36 / /home/u/my\\040mnt rw,nosuid shared:20 master:3 - fuse.sshfs u@h: rw\n\
            41 22 0:37 / /mnt/x rw - fuse /dev/fuse rw,user_id=0\n\
            42 22 8:17 / /mnt/win rw - fuseblk /dev/sdb1 rw\n\
            43 22 0:38 / /mnt/fused rw - fusectl fusectl rw\n\
            garbage\n\
            44 22 x:1 / /bad rw - ext4 /dev/x rw\n\
            45 22 0:39 / /nosep rw ext4\n";
        let got: Vec<_> = parse_mountinfo(text)
            .map(|m| (m.id, m.dev, String::from_utf8(m.point).unwrap(), m.fuse))
            .collect();
        let want = [
            (22, (254, 0), "/", false),
            (40, (0, 36), "/home/u/my mnt", true),
            (41, (0, 37), "/mnt/x", true),
            (42, (8, 17), "/mnt/win", true),
            (43, (0, 38), "/mnt/fused", false),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|&(i, d, p, f)| (i, d, p.to_string(), f))
            .collect();
        assert_eq!(got, want);
    }

    // An overlay's layers are its lower (colon-separated, `\\:` a colon of
    // a name), upper and work directories, escapes undone.
    #[test]
    fn overlay_options_give_their_layers() {
        let got = overlay_layers(
            b"rw,lowerdir=/l1:/l\\:2:/l\\0403,upperdir=/u,workdir=/w,lowerdir+=/l4,xino=off",
        );
        let got: Vec<_> = got
            .iter()
            .map(|l| String::from_utf8_lossy(l).into_owned())
            .collect();
        assert_eq!(got, ["/l1", "/l:2", "/l 3", "/u", "/w", "/l4"]);
    }
}
