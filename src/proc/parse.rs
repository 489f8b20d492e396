//! Pure parsers for /proc text: `status`, `stat` and CPU lists, plus
//! the one directory listing (pids or tids) the scan needs.

use std::io;
use std::path::Path;

/// What was wrong with a /proc text file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProcParseError {
    /// A `Key:` line the parser needs is missing.
    #[error("no {0} line")]
    MissingLine(&'static str),
    /// `stat` has no `)` closing the comm.
    #[error("no ')' after comm")]
    NoCommEnd,
    /// A `stat` field is missing or not a number.
    #[error("bad {0} field")]
    BadField(&'static str),
}

/// The fields of `/proc/PID/task/TID/status` that the snapshot needs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Status {
    /// `Name:` (the comm, as the kernel escapes it in status).
    pub name: Vec<u8>,
    pub tgid: u32,
    pub ppid: u32,
    /// Real uid (first number of `Uid:`).
    pub uid: u32,
    /// `Kthread:` when the kernel prints it (6.x); `None` on older kernels.
    pub kthread: Option<bool>,
    /// How many pid namespaces see the process (`NSpid:`'s numbers, one
    /// per level from the /proc's namespace down); 0 without the line.
    pub nspid_levels: usize,
    /// The process's id in its own (innermost) pid namespace: `NStgid:`'s
    /// last number, when printed (the `PID` of the `/tmp/perf-PID.map` a
    /// JIT in a container writes).
    pub nstgid: Option<u32>,
    /// `Seccomp:` (0 none, 1 strict, 2 filter), when printed.
    pub seccomp: Option<u32>,
    /// `CapEff:`, the effective capabilities, when printed.
    pub cap_eff: Option<u64>,
}

/// Parses a status file.
pub fn parse_status(text: &[u8]) -> Result<Status, ProcParseError> {
    let mut st = Status::default();
    let (mut tgid, mut ppid, mut uid) = (None, None, None);
    for line in text.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (key, rest) = (&line[..colon], &line[colon + 1..]);
        let value = rest.strip_prefix(b"\t").unwrap_or(rest);
        let first_num = || -> Option<u32> {
            let s = value
                .split(|&b| b == b'\t' || b == b' ')
                .find(|s| !s.is_empty())?;
            std::str::from_utf8(s).ok()?.parse().ok()
        };
        match key {
            b"Name" => st.name = value.to_vec(),
            b"Tgid" => tgid = first_num(),
            b"PPid" => ppid = first_num(),
            b"Uid" => uid = first_num(),
            b"Kthread" => st.kthread = first_num().map(|v| v != 0),
            b"NSpid" => {
                st.nspid_levels = value
                    .split(|&b| b == b'\t' || b == b' ')
                    .filter(|s| !s.is_empty())
                    .count()
            }
            b"NStgid" => {
                st.nstgid = value
                    .split(|&b| b == b'\t' || b == b' ')
                    .rfind(|s| !s.is_empty())
                    .and_then(|s| std::str::from_utf8(s).ok()?.parse().ok())
            }
            b"Seccomp" => st.seccomp = first_num(),
            b"CapEff" => {
                st.cap_eff = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            }
            _ => {}
        }
    }
    st.tgid = tgid.ok_or(ProcParseError::MissingLine("Tgid"))?;
    st.ppid = ppid.ok_or(ProcParseError::MissingLine("PPid"))?;
    st.uid = uid.ok_or(ProcParseError::MissingLine("Uid"))?;
    Ok(st)
}

/// The number of tasks on the host from `/proc/loadavg` (its fourth
/// field, "running/total").
pub fn parse_loadavg_tasks(text: &[u8]) -> Option<usize> {
    let field = text.split(|&b| b == b' ').nth(3)?;
    let total = field.split(|&b| b == b'/').nth(1)?;
    std::str::from_utf8(total).ok()?.trim().parse().ok()
}

/// `PF_KTHREAD` in `/proc/PID/stat`'s flags field.
pub const PF_KTHREAD: u64 = 0x0020_0000;

/// `PF_RANDOMIZE` in a task's flags: set by the kernel when it execs the
/// task's image with its addresses randomized (not under
/// `ADDR_NO_RANDOMIZE`, `setarch -R` or gdb, nor with
/// `kernel.randomize_va_space=0`); kept until the next exec.
pub const PF_RANDOMIZE: u64 = 0x0040_0000;

/// Fields of `/proc/PID/stat`: everything a snapshot needs of a process
/// but its uid, so one small file is read per process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat<'a> {
    /// Field 2 without its parentheses: the raw comm (as the kernel's own
    /// COMM records carry it; status's `Name:` escapes it).
    pub comm: &'a [u8],
    /// Field 3: state character.
    pub state: u8,
    /// Field 4: parent pid.
    pub ppid: u32,
    /// Field 9: PF_* flags.
    pub flags: u64,
    /// Field 20: number of threads.
    pub num_threads: u64,
    /// Field 22: start time in clock ticks after boot.
    pub start_time: u64,
}

/// Parses `/proc/PID/stat`. The comm (field 2) may hold spaces and
/// parentheses, so fields are counted from the last `)`.
pub fn parse_stat(text: &[u8]) -> Result<Stat<'_>, ProcParseError> {
    let close = text
        .iter()
        .rposition(|&b| b == b')')
        .ok_or(ProcParseError::NoCommEnd)?;
    let open = text[..close]
        .iter()
        .position(|&b| b == b'(')
        .ok_or(ProcParseError::NoCommEnd)?;
    // Fields 3..=22 only, in place: no list of every field per process.
    let mut fields: [&[u8]; 20] = [&[]; 20];
    let mut n = 0;
    for f in text[close + 1..]
        .split(|&b| b == b' ' || b == b'\n')
        .filter(|f| !f.is_empty())
        .take(fields.len())
    {
        fields[n] = f;
        n += 1;
    }
    // fields[0] is field 3 (state)
    let num = |i: usize, what| -> Result<u64, ProcParseError> {
        fields[..n]
            .get(i)
            .and_then(|f| std::str::from_utf8(f).ok())
            .and_then(|s| s.parse().ok())
            .ok_or(ProcParseError::BadField(what))
    };
    Ok(Stat {
        comm: &text[open + 1..close],
        ppid: u32::try_from(num(1, "ppid")?).map_err(|_| ProcParseError::BadField("ppid"))?,
        num_threads: num(17, "num_threads")?,
        state: *fields[..n]
            .first()
            .and_then(|f| f.first())
            .ok_or(ProcParseError::BadField("state"))?,
        flags: num(6, "flags")?,
        start_time: num(19, "starttime")?,
    })
}

/// Counts the CPUs in a kernel CPU list such as `0-3,8,10-11`.
pub fn count_cpu_list(text: &[u8]) -> Option<u32> {
    cpu_list(text).map(|v| v.len() as u32)
}

/// The CPUs of a kernel CPU list such as `0-3,8,10-11` (at most 65,536).
pub fn cpu_list(text: &[u8]) -> Option<Vec<u32>> {
    let s = std::str::from_utf8(text).ok()?.trim();
    let mut cpus = Vec::new();
    if s.is_empty() {
        return Some(cpus);
    }
    for part in s.split(',') {
        let (a, b): (u32, u32) = match part.split_once('-') {
            Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
            None => {
                let a = part.parse().ok()?;
                (a, a)
            }
        };
        if b < a || cpus.len() as u64 + u64::from(b - a) >= 65_536 {
            return None;
        }
        cpus.extend(a..=b);
    }
    Some(cpus)
}

/// The comm in a `/proc/PID/task/TID/comm` file: its text up to the newline
/// the kernel ends it with.
pub fn parse_comm_file(text: &[u8]) -> &[u8] {
    text.strip_suffix(b"\n").unwrap_or(text)
}

/// Numeric entries of a /proc directory (pids or tids), sorted ascending.
pub fn list_ids(dir: &Path) -> io::Result<Vec<u32>> {
    let mut ids: Vec<u32> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Status parsing picks Name, Tgid, PPid, the real Uid, Kthread, the
    // NSpid levels, the innermost NStgid, Seccomp and CapEff (hex).
    #[test]
    fn status_fields() {
        let s = parse_status(
            b"Name:\tmy prog\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t42\nNgid:\t0\nPid:\t43\nPPid:\t1\nNStgid:\t42\t6\t1\nUid:\t1000\t1000\t1000\t1000\nKthread:\t0\nNSpid:\t43\t7\t1\nCapEff:\t000001ffffffffff\nSeccomp:\t2\n",
        )
        .unwrap();
        assert_eq!(s.name, b"my prog");
        assert_eq!((s.tgid, s.ppid, s.uid), (42, 1, 1000));
        assert_eq!(s.kthread, Some(false));
        assert_eq!((s.nspid_levels, s.nstgid), (3, Some(1)));
        assert_eq!((s.seccomp, s.cap_eff), (Some(2), Some(0x1ff_ffff_ffff)));
        let old = parse_status(b"Tgid:\t1\nPPid:\t0\nUid:\t0\n").unwrap();
        assert_eq!(
            (old.nspid_levels, old.seccomp, old.cap_eff),
            (0, None, None)
        );
        assert!(parse_status(b"Name:\tx\nTgid:\t1\n").is_err());
    }

    // The task count is the loadavg's "running/total" total; junk is None.
    #[test]
    fn loadavg_tasks() {
        assert_eq!(
            parse_loadavg_tasks(b"0.00 0.01 0.05 2/731 9876\n"),
            Some(731)
        );
        assert_eq!(parse_loadavg_tasks(b"0.00 0.01 0.05"), None);
        assert_eq!(parse_loadavg_tasks(b"0.00 0.01 0.05 x/y 1\n"), None);
    }

    // Stat parsing survives a comm with spaces and parentheses.
    #[test]
    fn stat_fields() {
        let s = parse_stat(b"2 (kth) (x) y) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 7 0 0\n")
            .unwrap();
        assert_eq!(s.comm, b"kth) (x) y");
        assert_eq!(s.state, b'S');
        assert_eq!((s.ppid, s.num_threads), (0, 1));
        assert_eq!(s.flags, 2129984);
        assert!(s.flags & PF_KTHREAD != 0);
        assert_eq!(s.start_time, 7);
        assert!(parse_stat(b"1 (a) S 0").is_err());
        // fields 3..=22 are enough; one fewer (no start time) is not
        let upto22 = b"1 (a) S 0 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 3 0 9";
        assert_eq!(parse_stat(upto22).unwrap().start_time, 9);
        assert_eq!(parse_stat(upto22).unwrap().num_threads, 3);
        assert!(parse_stat(&upto22[..upto22.len() - 2]).is_err());
    }

    // CPU lists count ranges and singles; garbage is refused.
    #[test]
    fn cpu_lists() {
        assert_eq!(count_cpu_list(b"0-1\n"), Some(2));
        assert_eq!(count_cpu_list(b"0-3,8,10-11"), Some(7));
        assert_eq!(count_cpu_list(b"3-1"), None);
        assert_eq!(count_cpu_list(b"x"), None);
    }
}
