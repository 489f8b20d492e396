//! What a run killed by SIGKILL leaves beside an output (nothing can
//! remove it then), and how a later run tells such a leftover from one in
//! use: its name holds the pid of the run that made it, and that run held
//! an exclusive `flock` on it for its life (the kernel drops it when the
//! process dies, however). A leftover whose lock is free and whose pid no
//! longer runs this program is stale. The lock alone would say it: the
//! pid is asked too for a leftover of a run that could not lock (a file
//! system without `flock`) or of a build from before the lock; a pid
//! reused by another program does not keep a leftover, and one reused by
//! another run of ours only keeps it until that run ends.

use std::io;

/// Whether process `pid` may be a run of this program: it is us, or it
/// exists with our comm (a process that cannot be read counts as one).
pub fn may_run_us(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    match std::fs::read(format!("/proc/{pid}/comm")) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Ok(theirs) => std::fs::read("/proc/self/comm").is_ok_and(|ours| ours == theirs),
        Err(_) => true,
    }
}

/// The number in `digits` (1 to 10 ASCII digits), as a pid.
pub fn pid_in(digits: &[u8]) -> Option<u32> {
    if !(1..=10).contains(&digits.len()) || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Whether the names in `dir` (an open directory) stay as we find them:
/// no other user can rename or remove what we made there, nor put their
/// own in its place. So it is when root or we own `dir` and, unless it is
/// sticky, only its owner can write it. Elsewhere a leftover found by
/// name may be swapped for another user's between its check and its
/// removal, so it is not removed by name.
pub fn names_stay(dir: std::os::fd::BorrowedFd<'_>) -> bool {
    let Ok(st) = crate::sys::status_of(dir) else {
        return false;
    };
    let owner = st.uid == 0 || st.uid == crate::sys::effective_uid();
    let sticky = st.mode & 0o1000 != 0;
    owner && (sticky || st.mode & 0o022 == 0)
}

/// The pid in the name of a temporary output file as [`super::AtomicFile`]
/// names one (`.m2s-PID-N.tmp`); None for any other name.
pub fn temporary_pid(name: &[u8]) -> Option<u32> {
    let rest = name.strip_prefix(b".m2s-")?.strip_suffix(b".tmp")?;
    let dash = rest.iter().position(|&c| c == b'-')?;
    pid_in(&rest[dash + 1..])?;
    pid_in(&rest[..dash])
}

/// Removes from `dir` (an open directory) the temporary output files
/// that runs killed by SIGKILL left: named as [`super::AtomicFile`] names
/// them, their pid running no run of ours, regular files of our owner,
/// mode 0600, one name, their lock free (a run holds one on its
/// temporary file for its life), in a directory whose names stay
/// ([`names_stay`]). Anything else is left, silently. Only the first
/// [`LISTED_AT_MOST`] names are looked at: every output pays for this
/// listing, and a directory of a million files must not make a snapshot
/// slow (a leftover past them stays).
pub fn remove_stale_temporaries(dir: std::os::fd::BorrowedFd<'_>) {
    use std::os::fd::AsRawFd;
    if !names_stay(dir) {
        return;
    }
    let Ok(entries) = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd())) else {
        return;
    };
    for entry in entries.take(LISTED_AT_MOST).flatten() {
        let name = entry.file_name();
        let name = name.as_encoded_bytes();
        match temporary_pid(name) {
            Some(pid) if !may_run_us(pid) => {
                let _ = remove_if_stale(dir, name);
            }
            _ => {}
        }
    }
}

/// Names of an output's directory [`remove_stale_temporaries`] reads at
/// most (8,192 took 3.4 ms in Python here, under load).
pub const LISTED_AT_MOST: usize = 1024;

/// Removes the temporary file `name` of `dir` if it is a stale one of
/// ours (see [`remove_stale_temporaries`]).
fn remove_if_stale(dir: std::os::fd::BorrowedFd<'_>, name: &[u8]) -> io::Result<()> {
    use crate::sys;
    let ours = |st: &sys::Status| {
        st.kind == libc::S_IFREG
            && st.uid == sys::effective_uid()
            && st.mode == 0o600
            && st.nlink == 1
    };
    // nothing mounted there is asked (a FUSE daemon would hang us: ours
    // are never mount points), then looked at before it is opened (no FIFO
    // or device is), then opened without following a link for its lock
    if sys::is_mount_root_at(dir, name)? {
        return Ok(());
    }
    let st = sys::status_at(dir, name)?;
    if !ours(&st) {
        return Ok(());
    }
    let f = sys::open_read_at(dir, name)?;
    let held = sys::status_of(std::os::fd::AsFd::as_fd(&f))?;
    if held.id != st.id || !ours(&held) || !sys::try_lock_exclusive(&f)? {
        return Ok(());
    }
    // still that file (its name is ours alone to change: names_stay)
    if sys::identity_at(dir, name)? == st.id {
        sys::unlink_at(dir, name)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // A pid is 1 to 10 digits and nothing else; we may run us, a gone
    // process does not, and one with another comm (init) does not.
    #[test]
    fn pids_and_runs() {
        assert_eq!(pid_in(b"123"), Some(123));
        for bad in [&b""[..], b"12a", b"+1", b"99999999999", b"1 "] {
            assert_eq!(pid_in(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        assert!(may_run_us(std::process::id()));
        assert!(!may_run_us(1));
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let gone = c.id();
        c.wait().unwrap();
        assert!(!may_run_us(gone));
        assert_eq!(temporary_pid(b".m2s-12-0.tmp"), Some(12));
        for bad in [
            &b".m2s-12-.tmp"[..],
            b".m2s-12.tmp",
            b"m2s-1-2.tmp",
            b".m2s-1-2.tmpx",
        ] {
            assert_eq!(temporary_pid(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    // A temporary output a run killed by SIGKILL left (its pid gone, ours,
    // 0600, one name, unlocked) is removed by the next output made in its
    // directory; one locked (in use), of another mode, with two names, a
    // symlink, a FIFO, or of a pid that runs us, is left.
    #[test]
    fn stale_temporaries_are_removed_by_the_next_output() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let dead = c.id();
        c.wait().unwrap();
        let t = |pid: u32, n: u32| dir.join(format!(".m2s-{pid}-{n}.tmp"));
        let file = |p: &std::path::Path, mode: u32| {
            std::fs::write(p, b"x").unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        file(&t(dead, 0), 0o600);
        file(&t(dead, 1), 0o600);
        let held = std::fs::File::open(t(dead, 1)).unwrap();
        assert!(crate::sys::try_lock_exclusive(&held).unwrap());
        file(&t(dead, 2), 0o644);
        file(&t(dead, 3), 0o600);
        std::fs::hard_link(t(dead, 3), dir.join("other")).unwrap();
        file(&dir.join("target"), 0o600);
        std::os::unix::fs::symlink(dir.join("target"), t(dead, 4)).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(t(dead, 5))
            .status();
        assert!(made.unwrap().success());
        file(&t(std::process::id(), 6), 0o600);
        let out = super::super::AtomicFile::create(&dir.join("out.data")).unwrap();
        out.commit().unwrap();
        assert!(!t(dead, 0).exists(), "the stale one goes");
        for n in 1..=5 {
            assert!(std::fs::symlink_metadata(t(dead, n)).is_ok(), "{n} stays");
        }
        assert!(t(std::process::id(), 6).exists() && dir.join("target").exists());
    }
}
