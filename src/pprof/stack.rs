//! A sample's stack made locations: a stack the cache has not seen is
//! located frame by frame in its process's maps (or the kernel's), added
//! to the profile and cached under its hash.

use std::rc::Rc;

use super::cache::{CacheKey, Cached};
use super::maps::{find, Map};
use super::profile::Space;
use super::read::Reader;
use crate::perf::sample::{frames_into, Callchain, FrameMode, Sample};

impl Reader {
    /// A stack not in the cache: its locations found, its aggregate added
    /// and cached under `h`, the hash of (raw callchain, `key`).
    #[inline(never)]
    pub(super) fn first_seen(
        &mut self,
        s: &Sample<'_>,
        mode: FrameMode,
        (h, key): (u64, CacheKey),
        (slot, period): (usize, u64),
    ) {
        let raw = s.callchain.as_ref().map_or(&[][..], |c| c.as_bytes());
        let (_, _, pid, tid, comm, thread_comm) = key;
        if s.pid_tid.is_some() {
            self.spaces.thread(pid, tid);
        }
        let before = (self.report.unmapped_frames, self.report.guest_frames);
        let ip_only = self.locate(mode, s.ip, s.callchain.as_ref(), pid);
        let locations = std::mem::take(&mut self.locations);
        let sample = self
            .builder
            .add(&locations, (pid, tid), (comm, thread_comm), slot, period);
        let count = |now: u64, then: u64| u32::try_from(now - then).unwrap_or(u32::MAX);
        self.last_entry = Some(self.cache.insert(
            h,
            Cached {
                chain: raw.into(),
                key,
                sample,
                ip_only,
                unmapped: count(self.report.unmapped_frames, before.0),
                guest: count(self.report.guest_frames, before.1),
                next: usize::MAX,
            },
        ));
        self.locations = locations;
    }

    /// The locations of a sample's stack into `self.locations` (counting
    /// frames without a map and guest frames); true when the callchain
    /// was not used (it does not start at the ip).
    fn locate(
        &mut self,
        mode: FrameMode,
        ip: Option<u64>,
        callchain: Option<&Callchain<'_>>,
        pid: u32,
    ) -> bool {
        let mut ip_only = false;
        let mut stack = std::mem::take(&mut self.stack);
        let mut locations = std::mem::take(&mut self.locations);
        match callchain {
            Some(chain) => frames_into(chain.iter(), mode, &mut stack),
            None => stack.clear(),
        }
        // a callchain that does not start at the ip (`--call-graph dwarf`
        // takes no user callchain) is not this sample's stack: the ip alone
        if let Some(ip) = ip {
            if stack.first().map(|f| f.1) != Some(ip) {
                if callchain.is_some() {
                    self.report.ip_only += 1;
                    ip_only = true;
                }
                stack.clear();
                stack.push((mode, ip));
            }
        }
        locations.clear();
        let process = self.spaces.process(pid);
        // the last map hit: the frames of a stack often share one
        let mut last: Option<(&Rc<Map>, Space)> = None;
        for (i, &(mode, addr)) in stack.iter().enumerate() {
            // a caller's address is its return address: step back into
            // the call instruction, as perf_to_profile does (the first
            // frame after a switch of mode is where it was interrupted)
            let caller = i > 0 && stack[i - 1].0 == mode;
            let addr = if caller { addr.saturating_sub(1) } else { addr };
            let space = match mode {
                FrameMode::Guest => {
                    self.report.guest_frames += 1;
                    continue;
                }
                FrameMode::Kernel => Space::Kernel,
                FrameMode::User => Space::User,
            };
            let map = match last {
                Some((m, s)) if s == space && m.start <= addr && addr < m.end => Some(m),
                _ => match space {
                    Space::Kernel => self.spaces.kernel(addr),
                    Space::User => process.and_then(|p| find(p, addr)),
                },
            };
            last = map.map(|m| (m, space));
            let mapping = match map {
                Some(m) => self.builder.mapping(m, space, pid),
                None => {
                    self.report.unmapped_frames += 1;
                    0
                }
            };
            let user = (space == Space::User).then_some(pid);
            locations.push(self.builder.location(mapping, addr, user));
        }
        self.stack = stack;
        self.locations = locations;
        ip_only
    }
}
