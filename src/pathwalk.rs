//! The one path walker: a path opened a component at a time, each step
//! opened relative to the directory held before it without following a
//! link (`O_PATH | O_NOFOLLOW`), symlinks followed by hand from the link
//! held open (its owner and text read from that very link, so none swapped
//! in meanwhile is followed). What a walk may do is its [`Rules`]:
//! - an output's directory (`output::walk`) follows only root's
//!   and our own links (the kernel's fs.protected_symlinks covers sticky
//!   directories only: another user's link to /etc in a directory of
//!   theirs would otherwise make root replace /etc/passwd);
//! - an input the tool was not given but found (a mapped file's path,
//!   `/proc/PID/root/...`: `proc::unasked`) judges every step's
//!   mount before anything is looked up in it (a stalled FUSE daemon hangs
//!   a plain `open` on the way), and stays inside a process's root, `..`
//!   and absolute links included.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// As the kernel: at most this many links followed in one path.
pub const MAX_LINKS: u32 = 40;

/// Components walked in one path at most, links' included (ELOOP past
/// it). The kernel allows 40 links of 4 KiB each, ~80,000 components it
/// walks from its cache in a few ms; here each is three system calls, so a
/// recording naming such paths (`d/../` a thousand times per link) cost
/// ~350 ms of CPU per path. Real paths have tens.
pub const MAX_STEPS: usize = 1024;

/// What a walk may do.
pub struct Rules<'a> {
    /// A root the walk starts at and never leaves (`..` stops there, an
    /// absolute link restarts there): a process's `/proc/PID/root`. None:
    /// our `/` for an absolute path, the working directory for a relative
    /// one (and `..` goes above it).
    pub root: Option<OwnedFd>,
    /// Asked about the start and each step opened, before anything is
    /// asked of it (its type, a name in it, a link's text); false ends the
    /// walk with [`Stop::Refused`].
    pub judge: Option<&'a dyn Fn(BorrowedFd<'_>) -> bool>,
    /// Follow only links owned by root or by us ([`Stop::ForeignLink`]).
    pub own_links_only: bool,
    /// Follow a link at the last component (else it is the name returned).
    pub follow_last: bool,
}

/// Why a walk stopped short.
#[derive(Debug)]
pub enum Stop {
    /// A step failed as the kernel's walk would (ENOENT for a missing
    /// directory, ENOTDIR, ELOOP past [`MAX_LINKS`]).
    Io(io::Error),
    /// [`Rules::judge`] refused a step.
    Refused,
    /// A link owned by someone else, with [`Rules::own_links_only`].
    ForeignLink {
        /// The link, as the walk reached it.
        link: PathBuf,
        /// Its owner.
        uid: u32,
    },
}

impl From<io::Error> for Stop {
    fn from(e: io::Error) -> Self {
        Stop::Io(e)
    }
}

/// Where a walk ended.
#[derive(Debug)]
pub struct End {
    /// The directory holding the last component (O_PATH); the directory
    /// the path names itself when [`End::name`] is None.
    pub dir: OwnedFd,
    /// The last component's name in `dir`: missing, a link not followed,
    /// or what [`End::target`] is; None when the path ends at a directory
    /// itself ("/", ".", "..", or a link to one of those).
    pub name: Option<Vec<u8>>,
    /// The last component opened (O_PATH, judged), when it exists and was
    /// followed.
    pub target: Option<OwnedFd>,
    /// `dir` as a path: the components walked, links resolved (relative
    /// when the walk started at the working directory), for messages.
    pub shown: PathBuf,
    /// The last symlink followed as the path's final component: the
    /// directory holding it (held open) and its name.
    pub last_link: Option<(OwnedFd, Vec<u8>)>,
}

impl End {
    /// What the path names, opened: the target, or the directory a path
    /// of no last name ends at; None for a missing or unfollowed last name.
    pub fn opened(self) -> Option<OwnedFd> {
        match self.name {
            None => Some(self.dir),
            Some(_) => self.target,
        }
    }
}

/// The directories a walk holds: its start and the steps below it.
struct Held<'r> {
    rules: &'r Rules<'r>,
    /// Where the walk started, or went above it to (`..` beyond a
    /// working directory), or restarted at (an absolute link).
    base: OwnedFd,
    /// Whether `base` is "/" (or the root of [`Rules::root`]).
    absolute: bool,
    /// `..` taken above the working directory, for [`Held::shown`].
    ups: usize,
    /// The directories below `base`, each with its name.
    steps: Vec<(OwnedFd, Vec<u8>)>,
}

impl Held<'_> {
    fn top(&self) -> BorrowedFd<'_> {
        self.steps
            .last()
            .map_or(self.base.as_fd(), |(fd, _)| fd.as_fd())
    }

    fn judge(&self, fd: BorrowedFd<'_>) -> Result<(), Stop> {
        match self.rules.judge {
            Some(judge) if !judge(fd) => Err(Stop::Refused),
            _ => Ok(()),
        }
    }

    fn up(&mut self) -> Result<(), Stop> {
        if self.steps.pop().is_some() || self.absolute {
            return Ok(());
        }
        let parent = crate::sys::open_path_at(self.base.as_fd(), b"..")?;
        self.judge(parent.as_fd())?;
        self.base = parent;
        self.ups += 1;
        Ok(())
    }

    /// Back to the root (an absolute link): [`Rules::root`]'s, else "/".
    fn restart(&mut self) -> Result<(), Stop> {
        self.steps.clear();
        if self.rules.root.is_some() {
            // the base of a rooted walk never moves
            return Ok(());
        }
        let slash = crate::sys::open_path_start(true)?;
        self.judge(slash.as_fd())?;
        (self.base, self.absolute, self.ups) = (slash, true, 0);
        Ok(())
    }

    fn shown(&self) -> PathBuf {
        let mut p = PathBuf::from(if self.absolute { "/" } else { "" });
        for _ in 0..self.ups {
            p.push("..");
        }
        for (_, name) in &self.steps {
            p.push(std::ffi::OsStr::from_bytes(name));
        }
        p
    }

    fn end(
        mut self,
        name: Option<Vec<u8>>,
        target: Option<OwnedFd>,
        last_link: Option<(OwnedFd, Vec<u8>)>,
    ) -> End {
        let shown = self.shown();
        let dir = self.steps.pop().map_or(self.base, |(fd, _)| fd);
        End {
            dir,
            name,
            target,
            shown,
            last_link,
        }
    }
}

/// Pushes the components of `text` (a path or a link's text) on `todo`,
/// first to walk on top; "" parts (a repeated or trailing "/") dropped.
fn push_components(todo: &mut Vec<Vec<u8>>, text: &[u8]) {
    let parts: Vec<&[u8]> = text
        .split(|&c| c == b'/')
        .filter(|c| !c.is_empty())
        .collect();
    todo.extend(parts.into_iter().rev().map(<[u8]>::to_vec));
}

/// Walks `path` by `rules` (see the module's doc). A missing last
/// component is returned by name (for a new file); a missing directory on
/// the way is ENOENT, a file on the way ENOTDIR, more than 40 links or
/// [`MAX_STEPS`] components ELOOP, an empty link ENOENT. `..` after a followed link is relative to where
/// the link led, as the kernel has it. A trailing "/" is not kept.
pub fn walk(path: &[u8], rules: &Rules<'_>) -> Result<End, Stop> {
    if path.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT).into());
    }
    let (base, absolute) = match &rules.root {
        Some(root) => (root.try_clone()?, true),
        None => {
            let absolute = path.starts_with(b"/");
            (crate::sys::open_path_start(absolute)?, absolute)
        }
    };
    let mut held = Held {
        rules,
        base,
        absolute,
        ups: 0,
        steps: Vec::new(),
    };
    held.judge(held.base.as_fd())?;
    let mut todo = Vec::new();
    push_components(&mut todo, path);
    let (mut links, mut last_link, mut steps) = (0, None, 0);
    while let Some(c) = todo.pop() {
        steps += 1;
        if steps > MAX_STEPS {
            return Err(io::Error::from_raw_os_error(libc::ELOOP).into());
        }
        let last = todo.is_empty();
        match c.as_slice() {
            b"." => continue,
            b".." => {
                held.up()?;
                continue;
            }
            _ => {}
        }
        if last && !rules.follow_last {
            return Ok(held.end(Some(c), None, last_link));
        }
        let next = match crate::sys::open_path_at(held.top(), &c) {
            Ok(fd) => fd,
            Err(e) if last && e.kind() == io::ErrorKind::NotFound => {
                return Ok(held.end(Some(c), None, last_link));
            }
            Err(e) => return Err(e.into()),
        };
        held.judge(next.as_fd())?;
        let (kind, uid) = crate::sys::type_and_owner(next.as_fd())?;
        if kind == libc::S_IFLNK {
            if rules.own_links_only && uid != 0 && uid != crate::sys::effective_uid() {
                let mut link = held.shown();
                link.push(std::ffi::OsStr::from_bytes(&c));
                return Err(Stop::ForeignLink { link, uid });
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(io::Error::from_raw_os_error(libc::ELOOP).into());
            }
            let text = crate::sys::read_link_fd(next.as_fd())?;
            if text.is_empty() {
                return Err(io::Error::from_raw_os_error(libc::ENOENT).into());
            }
            if last {
                last_link = Some((held.top().try_clone_to_owned()?, c));
            }
            if text.starts_with(b"/") {
                held.restart()?;
            }
            push_components(&mut todo, &text);
            continue;
        }
        if last {
            return Ok(held.end(Some(c), Some(next), last_link));
        }
        if kind != libc::S_IFDIR {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR).into());
        }
        held.steps.push((next, c));
    }
    Ok(held.end(None, None, last_link))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, MetadataExt};

    fn rooted(root: &std::path::Path) -> Rules<'static> {
        Rules {
            root: Some(crate::sys::open_path(root).unwrap().into()),
            judge: None,
            own_links_only: false,
            follow_last: true,
        }
    }

    fn ino(fd: OwnedFd) -> u64 {
        std::fs::File::from(fd).metadata().unwrap().ino()
    }

    // A rooted walk never leaves its root: `..` stops there and an
    // absolute link restarts there, as the kernel's walk inside a chroot.
    #[test]
    fn a_rooted_walk_stays_inside_its_root() {
        let tmp = tempfile::tempdir().unwrap();
        let r = tmp.path().join("root");
        std::fs::create_dir_all(r.join("etc")).unwrap();
        std::fs::write(r.join("etc/f"), b"inside").unwrap();
        std::fs::write(tmp.path().join("f"), b"outside").unwrap();
        symlink("/etc", r.join("abs")).unwrap();
        symlink("../../../../f", r.join("up")).unwrap();
        let want = std::fs::metadata(r.join("etc/f")).unwrap().ino();
        for p in ["/etc/f", "../../etc/f", "/abs/f", "abs/../etc/f"] {
            let end = walk(p.as_bytes(), &rooted(&r)).expect(p);
            assert_eq!(ino(end.opened().expect(p)), want, "{p}");
        }
        // `up` climbs four levels from the root: it names the root's own
        // (missing) f, not the file above it
        let end = walk(b"up", &rooted(&r)).unwrap();
        assert_eq!(end.name.as_deref(), Some(&b"f"[..]));
        assert!(end.opened().is_none());
        let root_ino = std::fs::metadata(&r).unwrap().ino();
        assert_eq!(
            ino(walk(b"/..", &rooted(&r)).unwrap().opened().unwrap()),
            root_ino
        );
    }

    // A path of more than MAX_STEPS components, links' text included, is
    // ELOOP however few links it takes; one of MAX_STEPS is walked.
    #[test]
    fn steps_are_bounded() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        std::fs::create_dir(t.join("d")).unwrap();
        // 1,621 components in one link of 4,051 bytes
        symlink("d/../".repeat(810) + "d", t.join("l")).unwrap();
        let rules = Rules {
            root: Some(crate::sys::open_path(t).unwrap().into()),
            judge: None,
            own_links_only: false,
            follow_last: true,
        };
        let e = walk(b"l", &rules).unwrap_err();
        assert!(
            matches!(e, Stop::Io(ref e) if e.raw_os_error() == Some(libc::ELOOP)),
            "{e:?}"
        );
        let fits = "d/..//".repeat((MAX_STEPS - 1) / 2) + "d";
        assert!(walk(fits.as_bytes(), &rules).unwrap().opened().is_some());
    }

    // The judge is asked about the start and each step before anything is
    // looked up in it: a refused directory ends the walk, whatever follows,
    // and so does a link leading into it.
    #[test]
    fn a_refused_step_ends_the_walk() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        std::fs::create_dir_all(t.join("no/sub")).unwrap();
        std::fs::create_dir(t.join("yes")).unwrap();
        std::fs::write(t.join("yes/f"), b"").unwrap();
        symlink("no/sub", t.join("into")).unwrap();
        let refused = std::fs::metadata(t.join("no")).unwrap().ino();
        let judge = |fd: BorrowedFd<'_>| {
            let f = std::fs::File::from(fd.try_clone_to_owned().unwrap());
            f.metadata().unwrap().ino() != refused
        };
        let rules = Rules {
            root: None,
            judge: Some(&judge),
            own_links_only: false,
            follow_last: true,
        };
        let full = |p: &str| t.join(p).into_os_string().into_vec();
        use std::os::unix::ffi::OsStringExt;
        assert!(walk(&full("yes/f"), &rules).unwrap().opened().is_some());
        for p in ["no/sub/x", "into/x", "no"] {
            assert!(matches!(walk(&full(p), &rules), Err(Stop::Refused)), "{p}");
        }
    }
}
