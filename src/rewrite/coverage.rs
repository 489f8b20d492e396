//! Whether a process a merge would insert is the one the recording
//! sampled under its pid. A pid names another process when the recording
//! was made in another pid namespace (a container's perf: its pids are not
//! the host's) or when the pid was reused by a process that started
//! before the recording ended (the staleness check passes it); inserting
//! that process's COMM and maps names the samples after it and leaves them
//! `[unknown]`.
//!
//! The scan keeps the first [`KEPT_PER_PID`] user-mode sample addresses of
//! each pid (of a sample taken in the kernel: its callchain's first user
//! frame, the process's ip when it entered the kernel), the latest as
//! many, and the recording's own executable maps ([`Sampled`]). Before a process is inserted, the addresses its
//! recording's maps do not cover (those the insert is for) are looked up in
//! the process's executable maps ([`Coverage`]): the recorded process covers
//! all of them, another nearly none, its code being elsewhere (ASLR). The
//! first and the latest are judged apart, and either passing passes: code
//! sampled first may be unmapped since (a `dlclose`d library, freed JIT
//! code), while another process matches neither. Pure code.

/// User-mode sample addresses kept per pid: the first ones.
pub const KEPT_PER_PID: u8 = 16;

/// Addresses outside the recording's own maps a verdict needs: with fewer,
/// the process is inserted unjudged.
pub const MIN_SAMPLED: usize = 8;

/// Addresses kept in all (16 bytes each): pids past it get no verdict.
pub const MAX_KEPT: usize = 1 << 18;

/// Pids whose latest addresses are kept too (152 bytes each), at most:
/// past it a pid is judged by its first alone.
pub const MAX_RINGS: usize = 1 << 14;

/// The latest user-mode addresses of a pid whose first are all kept.
#[derive(Debug)]
struct Ring {
    pid: u32,
    /// Addresses kept in all (the latest at `(n - 1) % KEPT_PER_PID`).
    n: u32,
    /// The time of the latest kept: a sample older than it is not kept.
    /// A file-mode recording holds each CPU's buffer in turn, so a process
    /// that moved CPUs has older samples after newer ones in the file: the
    /// latest in file order were a dlclose'd library's, taken before the
    /// newer samples in its own code.
    last: u64,
    ips: [u64; KEPT_PER_PID as usize],
}

/// Where a pid's latest addresses are kept, as [`Sampled::ring_for`] hands it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingId(u32);

/// The recording's executable maps kept in all (24 bytes each): past it
/// no process is judged (the samples' own maps would be missing).
pub const MAX_MAPS: usize = 1 << 18;

/// What the scan keeps to judge processes: user-mode sample addresses and
/// the recording's executable maps, both by pid. [`Sampled::finish`] sorts
/// them once the scan is over; [`Sampled::judge`] reads them sorted.
#[derive(Debug, Default)]
pub struct Sampled {
    /// (pid, address) of kept samples.
    ips: Vec<(u32, u64)>,
    /// (pid, start, end) of the recording's MMAP/MMAP2 records of
    /// executable memory.
    maps: Vec<(u32, u64, u64)>,
    /// More maps than [`MAX_MAPS`]: nothing is judged.
    overflowed: bool,
    /// The latest addresses of pids past their first (by pid once
    /// [`Sampled::finish`] ran).
    rings: Vec<Ring>,
}

impl Sampled {
    /// Whether a pid with `kept` addresses kept gets more.
    #[inline]
    pub fn keeps(&self, kept: u8) -> bool {
        kept < KEPT_PER_PID && self.ips.len() < MAX_KEPT
    }

    /// Keeps `ip` of a user-mode sample of `pid` while that pid has fewer
    /// than [`KEPT_PER_PID`] (`kept`, its count, kept by the caller beside
    /// its pid: no lookup here); whether it gets more after this one.
    #[inline]
    pub fn keep(&mut self, kept: &mut u8, pid: u32, ip: u64) -> bool {
        if self.keeps(*kept) {
            *kept += 1;
            self.ips.push((pid, ip));
        }
        self.keeps(*kept)
    }

    /// A ring for the latest addresses of `pid`, whose first are kept;
    /// `None` past [`MAX_RINGS`]. Asked once per pid.
    pub fn ring_for(&mut self, pid: u32) -> Option<RingId> {
        if self.rings.len() >= MAX_RINGS {
            return None;
        }
        self.rings.push(Ring {
            pid,
            n: 0,
            last: 0,
            ips: [0; KEPT_PER_PID as usize],
        });
        Some(RingId(self.rings.len() as u32 - 1))
    }

    /// Keeps `ip`, of a sample taken at `time`, as the latest user-mode
    /// address in `ring`, unless it is older than the latest kept.
    #[inline]
    pub fn keep_last(&mut self, ring: RingId, ip: u64, time: Option<u64>) {
        let r = &mut self.rings[ring.0 as usize];
        if let Some(t) = time {
            if t < r.last {
                return;
            }
            r.last = t;
        }
        r.ips[r.n as usize % usize::from(KEPT_PER_PID)] = ip;
        r.n = r.n.saturating_add(1);
    }

    /// Adds an executable map of `pid` the recording has.
    pub fn exec_map(&mut self, pid: u32, addr: u64, len: u64) {
        if self.maps.len() >= MAX_MAPS {
            self.overflowed = true;
            return;
        }
        self.maps.push((pid, addr, addr.saturating_add(len)));
    }

    /// Sorts what was kept by pid; call once the scan is over.
    pub fn finish(&mut self) {
        self.ips.sort_unstable();
        self.maps.sort_unstable();
        self.rings.sort_unstable_by_key(|r| r.pid);
    }

    /// The coverage of `pid`'s kept addresses that the recording's own maps
    /// leave out by the maps `theirs` gives (the process's executable
    /// ranges, asked for only when there are enough such addresses); `None`
    /// when there are fewer than [`MIN_SAMPLED`] (or the maps overflowed).
    /// The first and the latest addresses are judged apart: the verdict is
    /// the first's unless it finds another process and the latest's does
    /// not (see the module doc).
    pub fn judge(&self, pid: u32, theirs: impl FnOnce() -> Vec<(u64, u64)>) -> Option<Coverage> {
        if self.overflowed {
            return None;
        }
        let own = of_pid(&self.maps, pid, |&(p, ..)| p);
        let own = Ranges::new(own.iter().map(|&(_, s, e)| (s, e)).collect());
        let outside = |ips: &mut dyn Iterator<Item = u64>| -> Option<Vec<u64>> {
            let out: Vec<u64> = ips.filter(|&ip| !own.contains(ip)).collect();
            (out.len() >= MIN_SAMPLED).then_some(out)
        };
        let first = outside(
            &mut of_pid(&self.ips, pid, |&(p, _)| p)
                .iter()
                .map(|&(_, ip)| ip),
        );
        let ring = of_pid(&self.rings, pid, |r| r.pid).first();
        let latest = ring.and_then(|r| {
            let n = (r.n as usize).min(r.ips.len());
            outside(&mut r.ips[..n].iter().copied())
        });
        if first.is_none() && latest.is_none() {
            return None;
        }
        let theirs = Ranges::new(theirs());
        let first = first.map(|ips| Coverage::of(&ips, &theirs));
        let latest = latest.map(|ips| Coverage::of(&ips, &theirs));
        match (first, latest) {
            (Some(f), Some(l)) if f.is_other() && !l.is_other() => Some(l),
            (Some(f), _) => Some(f),
            (None, l) => l,
        }
    }
}

/// The entries of `pid` in `sorted` (sorted by pid first).
fn of_pid<T>(sorted: &[T], pid: u32, pid_of: impl Fn(&T) -> u32) -> &[T] {
    let from = sorted.partition_point(|t| pid_of(t) < pid);
    let to = sorted.partition_point(|t| pid_of(t) <= pid);
    &sorted[from..to]
}

/// Address ranges (start, end), sorted, with the farthest end up to each:
/// whether an address is in any of them (they may overlap) by one binary
/// search.
#[derive(Debug, Default)]
pub struct Ranges {
    ranges: Vec<(u64, u64)>,
    reach: Vec<u64>,
}

impl Ranges {
    /// These ranges (any order; empty ones cover nothing).
    pub fn new(mut ranges: Vec<(u64, u64)>) -> Ranges {
        ranges.retain(|&(s, e)| s < e);
        ranges.sort_unstable();
        let reach = (ranges.iter())
            .scan(0, |far, &(_, e)| {
                *far = e.max(*far);
                Some(*far)
            })
            .collect();
        Ranges { ranges, reach }
    }

    /// Whether `addr` is in one of them.
    pub fn contains(&self, addr: u64) -> bool {
        let i = self.ranges.partition_point(|&(start, _)| start <= addr);
        i > 0 && self.reach[i - 1] > addr
    }
}

/// How many sampled addresses a process's executable maps cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Coverage {
    /// Those inside one of its maps.
    pub covered: usize,
    /// All judged (kept, outside the recording's own maps).
    pub sampled: usize,
}

impl Coverage {
    /// The coverage of `ips` by `maps`.
    pub fn of(ips: &[u64], maps: &Ranges) -> Coverage {
        Coverage {
            covered: ips.iter().filter(|&&ip| maps.contains(ip)).count(),
            sampled: ips.len(),
        }
    }

    /// Whether the process is not the one sampled: enough addresses
    /// ([`MIN_SAMPLED`]) and fewer than half of them in its maps (the
    /// sampled process has them all there; another, ASLR placing its code
    /// elsewhere, next to none).
    pub fn is_other(&self) -> bool {
        self.sampled >= MIN_SAMPLED && self.covered * 2 < self.sampled
    }
}

/// A process a merge left out as not the one the recording sampled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotRecorded {
    pub pid: u32,
    /// Its comm (the leader's), as read.
    pub comm: Vec<u8>,
    /// How its maps covered the samples.
    pub coverage: Coverage,
}

#[cfg(test)]
mod tests {
    use super::*;

    // An address is covered when inside a range (start inclusive, end
    // exclusive), overlapping and nested ranges included; empty ranges
    // cover nothing.
    #[test]
    fn ranges_contain() {
        let r = Ranges::new(vec![
            (0x5000, 0x6000),
            (0x1000, 0x4000),
            (0x2000, 0x3000),
            (9, 9),
        ]);
        for (a, want) in [
            (0xfff, false),
            (0x1000, true),
            (0x2800, true),
            (0x3fff, true),
            (0x4000, false),
            (0x5000, true),
            (0x6000, false),
            (9, false),
        ] {
            assert_eq!(r.contains(a), want, "{a:#x}");
        }
        assert!(!Ranges::new(vec![]).contains(0));
    }

    // Under half covered, with enough addresses, is another process; half
    // or more, or too few addresses, is not.
    #[test]
    fn another_process_covers_under_half() {
        let c = |covered, sampled| Coverage { covered, sampled };
        assert!(c(0, 16).is_other());
        assert!(c(7, 16).is_other());
        assert!(!c(8, 16).is_other());
        assert!(!c(16, 16).is_other());
        assert!(c(3, 8).is_other());
        assert!(!c(0, 7).is_other());
        let maps = Ranges::new(vec![(0x1000, 0x2000)]);
        assert_eq!(Coverage::of(&[0x1000, 0x1fff, 0x2000, 5], &maps), c(2, 4));
    }

    // Only the first KEPT_PER_PID addresses of a pid are kept; a pid is
    // judged on those outside the recording's own maps, and only with
    // enough of them: another pid's addresses and maps play no part.
    #[test]
    fn judged_on_kept_addresses_outside_the_recordings_maps() {
        let mut s = Sampled::default();
        let (mut a, mut b) = (0u8, 0u8);
        for i in 0..40u64 {
            s.keep(&mut a, 7, 0x10_000 + i);
            s.keep(&mut b, 8, 0x90_000 + i);
        }
        assert_eq!((a, b), (KEPT_PER_PID, KEPT_PER_PID));
        // pid 8's map covers pid 7's addresses: no part in pid 7's verdict
        s.exec_map(8, 0x10_000, 0x1000);
        // the recording maps pid 7's first 4 addresses itself
        s.exec_map(7, 0x10_000, 4);
        s.finish();
        let n = usize::from(KEPT_PER_PID) - 4;
        let none = s.judge(7, Vec::new).unwrap();
        assert_eq!(
            none,
            Coverage {
                covered: 0,
                sampled: n
            }
        );
        assert!(none.is_other());
        let all = s.judge(7, || vec![(0x10_000, 0x20_000)]).unwrap();
        assert_eq!(
            all,
            Coverage {
                covered: n,
                sampled: n
            }
        );
        assert!(!all.is_other());
        // the recording maps all of pid 8's: nothing left to judge
        let mut t = Sampled::default();
        let mut c = 0u8;
        for i in 0..16 {
            t.keep(&mut c, 8, 0x90_000 + i);
        }
        t.exec_map(8, 0x90_000, 0x1000);
        t.finish();
        assert_eq!(t.judge(8, || unreachable!()), None);
        // too few addresses
        assert_eq!(s.judge(9, || unreachable!()), None);
    }

    // A process whose first sampled code is gone (a dlclose'd library) but
    // whose latest samples are in its maps is the recorded one; another
    // process, matching neither, is not; the latest alone judge a pid
    // whose first were not kept.
    #[test]
    fn the_latest_addresses_pass_a_process_whose_first_code_is_gone() {
        let mut s = Sampled::default();
        let mut kept = 0u8;
        for i in 0..16 {
            s.keep(&mut kept, 7, 0x50_000 + i);
        }
        let ring = s.ring_for(7).unwrap();
        // more than a ring holds: only the latest 16 stay
        for i in 0..40 {
            s.keep_last(ring, if i < 24 { 0x50_000 } else { 0x10_000 + i }, None);
        }
        let ring = s.ring_for(9).unwrap();
        for i in 0..10 {
            s.keep_last(ring, 0x10_000 + i, Some(100 + i));
        }
        // samples older than the latest kept (another CPU's buffer, written
        // after) are not kept
        for i in 0..30 {
            s.keep_last(ring, 0x50_000, Some(i));
        }
        s.finish();
        let now = || vec![(0x10_000, 0x20_000)];
        let seven = s.judge(7, now).unwrap();
        assert_eq!(
            seven,
            Coverage {
                covered: 16,
                sampled: 16
            }
        );
        // maps matching neither: another process
        assert!(s.judge(7, Vec::new).unwrap().is_other());
        assert!(!s.judge(9, now).unwrap().is_other());
        assert!(s
            .judge(9, || vec![(0x90_000, 0x91_000)])
            .unwrap()
            .is_other());
        // the rings run out
        let mut t = Sampled::default();
        let all: Vec<_> = (0..=MAX_RINGS as u32).map(|p| t.ring_for(p)).collect();
        assert!(all[..MAX_RINGS].iter().all(Option::is_some));
        assert_eq!(all[MAX_RINGS], None);
    }
}
