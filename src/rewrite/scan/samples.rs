//! The samples of a scan: each one's pid and time, and its user-mode
//! address, which tells the exec rule that its process ran its image
//! before an exec COMM (`RecordingFacts::exec_covered`) and is kept among
//! the pid's first or latest addresses (see [`crate::rewrite::coverage`]).
//! The address is the sample's ip when taken in user mode; when taken in
//! the kernel or hypervisor (a syscall, an interrupt, a `:k` event, a
//! tracepoint) the first frame after PERF_CONTEXT_USER in its callchain,
//! the process's ip when it entered the kernel. User-mode samples, nearly
//! every one of most recordings, take an inlined path with no callchain
//! code; a kernel-mode sample's callchain is read only while its address
//! is wanted ([`RecordingFacts::wants_frame`]).

use super::RecordingFacts;
use crate::bytes::Endian;
use crate::perf::consts::{misc, sample_type};
use crate::perf::events::sample_head;
use crate::perf::sample::callchain;
use crate::perf::{Attr, Attrs};
use crate::rewrite::coverage::RingId;

/// Where a pid's latest user-mode addresses are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Latest {
    /// Not asked for yet (its first are still being kept).
    Unasked,
    /// In this ring of `sampled`, fed by kernel-mode samples' callchains
    /// alone so far: they keep feeding it.
    Kernel(RingId),
    /// In this ring of `sampled`, which a user-mode sample has fed: the
    /// pid's kernel-mode samples are no longer read for it.
    In(RingId),
    /// Nowhere: the rings ran out.
    Nowhere,
}

impl RecordingFacts {
    /// A sample: its pid, time and user-mode address (see the module doc).
    /// `USER`: taken in user mode (`header_misc`'s cpumode), the inlined
    /// path; the others come through [`RecordingFacts::other_sample`].
    #[inline(always)]
    pub(super) fn sample<const USER: bool>(
        &mut self,
        header_misc: u16,
        body: &[u8],
        attrs: &Attrs,
        e: Endian,
    ) {
        let Some(a) = attrs.of_sample(body, e) else {
            return;
        };
        let s = sample_head(body, a.sample_type, e);
        if let Some(p) = s.pid.filter(|&p| p != 0 && p != u32::MAX) {
            // a run of samples of one pid costs one compare per sample,
            // and a store into its ring of latest addresses
            let (at, keeping) = match self.last_pid {
                Some((last, at, keeping)) if last == p => (at, keeping),
                _ => {
                    let at = self.add_pid(p);
                    let keeping = self.sampled.keeps(self.kept[at]);
                    self.last_pid = Some((p, at, keeping));
                    (at, keeping)
                }
            };
            let ip = if USER {
                s.ip
            } else {
                let mode = header_misc & misc::CPUMODE_MASK;
                let kernel = mode == misc::KERNEL || mode == misc::HYPERVISOR;
                let wanted = kernel && self.wants_frame(at, keeping);
                wanted.then(|| user_frame(body, a, e)).flatten()
            };
            // a user-mode sample without an ip ran the image all the same
            if (USER || ip.is_some()) && !self.exec_covered.is_empty() {
                self.before_exec(p, s.time);
            }
            if let Some(ip) = ip {
                if !keeping {
                    self.keep_latest::<USER>(at, p, ip, s.time);
                } else if !self.sampled.keep(&mut self.kept[at], p, ip) {
                    self.last_pid = Some((p, at, false));
                }
            }
        }
        if let Some(t) = s.time.filter(|&t| t != 0) {
            self.time = Some(match self.time {
                Some((lo, hi)) => (lo.min(t), hi.max(t)),
                None => (t, t),
            });
        }
    }

    /// A sample not taken in user mode (`misc`'s cpumode): out of line.
    #[inline(never)]
    pub(super) fn other_sample(&mut self, misc: u16, body: &[u8], attrs: &Attrs) {
        self.sample::<false>(misc, body, attrs, self.endian);
    }

    /// Whether the user-mode address of a kernel-mode sample of the pid at
    /// `at` (`keeping` its first) is wanted, worth reading its callchain:
    /// while the pid keeps its first addresses, while its latest come from
    /// kernel-mode samples alone (a process sampled in the kernel only), or
    /// while an exec COMM alone covers a process (`exec_covered`). A pid
    /// whose user-mode samples fill its ring costs no walk.
    fn wants_frame(&self, at: usize, keeping: bool) -> bool {
        keeping
            || matches!(self.latest[at], Latest::Unasked | Latest::Kernel(_))
            || !self.exec_covered.is_empty()
    }

    /// Keeps `ip`, of a sample taken at `time`, as the latest user-mode
    /// address of `pid` (at `at`), whose first are kept; `USER`: of a
    /// user-mode sample.
    #[inline(always)]
    fn keep_latest<const USER: bool>(&mut self, at: usize, pid: u32, ip: u64, time: Option<u64>) {
        let ring = match self.latest[at] {
            Latest::In(ring) => ring,
            Latest::Nowhere => return,
            Latest::Kernel(ring) => {
                if USER {
                    self.latest[at] = Latest::In(ring);
                }
                ring
            }
            Latest::Unasked => {
                let ring = self.sampled.ring_for(pid);
                let latest = if USER { Latest::In } else { Latest::Kernel };
                self.latest[at] = ring.map_or(Latest::Nowhere, latest);
                match ring {
                    Some(ring) => ring,
                    None => return,
                }
            }
        };
        self.sampled.keep_last(ring, ip, time);
    }

    /// A sample of `pid` at `time` with a user-mode address (or taken in
    /// user mode): taken before the exec COMM that alone covered its
    /// process, it needs the first image's maps (perf orders by time: the
    /// sample comes before the exec there).
    #[inline(never)]
    fn before_exec(&mut self, pid: u32, time: Option<u64>) {
        let exec = self.exec_covered.get(&pid).copied();
        if let (Some(exec), Some(t)) = (exec, time.filter(|&t| t != 0)) {
            if t < exec {
                self.exec_covered.remove(&pid);
                self.covered.remove(&pid);
            }
        }
    }
}

/// The user-mode address of a sample taken in the kernel or hypervisor
/// (`body` of a sample of `attr`): the first frame after PERF_CONTEXT_USER
/// in its callchain (`None` without a callchain or user frames, or in a
/// malformed body). Reads its kernel frames, at most as many as the body
/// holds.
#[inline(never)]
fn user_frame(body: &[u8], attr: &Attr, e: Endian) -> Option<u64> {
    if attr.sample_type & sample_type::CALLCHAIN == 0 {
        return None;
    }
    callchain(body, attr, e).ok().flatten()?.first_user()
}
