//! perf's ordered events, for a recording whose file order gave a process
//! other maps than perf gives it where its samples are, or other comms
//! (`inversions`: a FORK or a sample and a change to its process's maps or
//! its thread's comm read in the opposite order of their times: a thread's
//! dlopen() written after another's samples in the library, made later on
//! another CPU). perf writes its per-CPU buffers one after another each
//! round, so a parent's MMAP2s written on one CPU can come after the FORKs
//! it made later on another: a fork-heavy recording made under load had
//! 16 children forked, in file order, from a parent with no maps yet,
//! their samples all "in no map". perf report and perf script read
//! records in time order: each is queued, and each FINISHED_ROUND releases
//! those up to the latest time queued when the round before it ended
//! (`ordered_events`' flush); the rest at the end. Records without a time
//! (or of time 0: perf's synthesized ones) and perf's own record types
//! pass at once, as in perf. Pure.

use crate::bytes::Endian;
use crate::perf::consts::types;
use crate::perf::events::sample_head;
use crate::perf::{Attrs, FormatError, RecordHeader, Visitor};

/// Most bytes of records queued at once, each counted as its body and
/// [`QUEUED_COST`]: past it, every record queued is read, in time order,
/// so memory stays bounded (up to the queue's unused room besides: as many
/// entries again, at most).
const MAX_BYTES: usize = 64 << 20;

/// What a record queued costs besides its body: its entry in the queue
/// and its allocation's header and rounding (a 16-byte sample queued
/// costs five times its bytes).
const QUEUED_COST: usize = std::mem::size_of::<Queued>() + 16;

/// One record queued.
struct Queued {
    time: u64,
    /// Its place in the file (records of one compressed record share an
    /// offset): ties in time keep the file's order.
    seq: u64,
    at: u64,
    header: RecordHeader,
    body: Box<[u8]>,
}

/// A visitor reading records in perf's time order into another.
pub(super) struct Ordered<'a, V: Visitor> {
    inner: &'a mut V,
    e: Endian,
    queue: Vec<Queued>,
    bytes: usize,
    seq: u64,
    /// The latest time queued so far, and when the last round ended.
    latest: u64,
    flush_to: u64,
}

impl<'a, V: Visitor> Ordered<'a, V> {
    pub(super) fn new(inner: &'a mut V, e: Endian) -> Self {
        Ordered {
            inner,
            e,
            queue: Vec::new(),
            bytes: 0,
            seq: 0,
            latest: 0,
            flush_to: 0,
        }
    }

    /// Reads the records queued up to time `to` (inclusive), in time order.
    fn flush(&mut self, to: u64, attrs: &Attrs) -> Result<(), FormatError> {
        self.queue.sort_unstable_by_key(|q| (q.time, q.seq));
        let due = self.queue.partition_point(|q| q.time <= to);
        for q in self.queue.drain(..due) {
            self.bytes -= q.body.len() + QUEUED_COST;
            self.inner.record(q.at, q.header, &q.body, attrs)?;
        }
        Ok(())
    }

    /// After the walk: every record still queued, in time order.
    pub(super) fn finish(&mut self, attrs: &Attrs) -> Result<(), FormatError> {
        self.flush(u64::MAX, attrs)
    }
}

impl<V: Visitor> Visitor for Ordered<'_, V> {
    fn stored(&mut self, at: u64, h: &RecordHeader, body: &[u8]) {
        self.inner.stored(at, h, body);
    }

    fn record(
        &mut self,
        at: u64,
        h: RecordHeader,
        body: &[u8],
        attrs: &Attrs,
    ) -> Result<(), FormatError> {
        if h.type_ == types::FINISHED_ROUND {
            self.flush(self.flush_to, attrs)?;
            self.flush_to = self.latest;
            return self.inner.record(at, h, body, attrs);
        }
        let Some(time) = time_of(&h, body, attrs, self.e) else {
            return self.inner.record(at, h, body, attrs);
        };
        let cost = body.len() + QUEUED_COST;
        if self.bytes + cost > MAX_BYTES {
            self.flush(u64::MAX, attrs)?;
        }
        self.latest = self.latest.max(time);
        self.bytes += cost;
        self.seq += 1;
        self.queue.push(Queued {
            time,
            seq: self.seq,
            at,
            header: h,
            body: body.into(),
        });
        Ok(())
    }
}

/// The time perf orders a record by: a kernel record's (a sample's, or
/// another's `sample_id` trailer's), if its event records times and it is
/// not 0 (synthesized) nor all ones (perf's "none").
fn time_of(h: &RecordHeader, body: &[u8], attrs: &Attrs, e: Endian) -> Option<u64> {
    if h.type_ >= types::HEADER_ATTR {
        return None;
    }
    let time = if h.type_ == types::SAMPLE {
        sample_head(body, attrs.of_sample(body, e)?.sample_type, e).time
    } else {
        attrs.trailer_time(body, e)
    };
    time.filter(|&t| t != 0 && t != u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytes::{PutExt, Rd};
    use crate::perf::consts::{attr_flags, sample_type};
    use crate::perf::Attr;

    /// Records in the order the inner visitor got them: (type, time).
    #[derive(Default)]
    struct Seen(Vec<(u32, u64)>);

    impl Visitor for Seen {
        fn record(
            &mut self,
            _at: u64,
            h: RecordHeader,
            body: &[u8],
            _attrs: &Attrs,
        ) -> Result<(), FormatError> {
            let time = Rd(Endian::Little).u64(body, body.len().saturating_sub(8));
            self.0.push((h.type_, time.unwrap_or(0)));
            Ok(())
        }
    }

    fn attrs() -> Attrs {
        let attr = Attr {
            type_: 1,
            sample_type: sample_type::TID | sample_type::TIME,
            flags: attr_flags::SAMPLE_ID_ALL,
            ..Default::default()
        };
        let mut a = Attrs::default();
        a.push(attr, vec![], &[0; 64]);
        a
    }

    /// A record of `type_` whose body is pid, tid, `time` (a sample's
    /// fields and another record's trailer alike).
    fn rec(type_: u32, time: u64) -> (RecordHeader, Vec<u8>) {
        let mut b = Vec::new();
        b.put_u32(Endian::Little, 7);
        b.put_u32(Endian::Little, 7);
        b.put_u64(Endian::Little, time);
        let h = RecordHeader {
            type_,
            misc: 0,
            size: 24,
        };
        (h, b)
    }

    // Records come out in time order, each FINISHED_ROUND releasing those
    // up to the latest time of the round before it (perf's flush), the rest
    // at the end; time 0 and perf's own records pass at once.
    #[test]
    fn records_come_out_as_perf_orders_them() {
        let a = attrs();
        let mut seen = Seen::default();
        let mut o = Ordered::new(&mut seen, Endian::Little);
        let mut feed = |type_, time| {
            let (h, b) = rec(type_, time);
            o.record(0, h, &b, &a).unwrap();
        };
        let (s, f, round) = (types::SAMPLE, types::FORK, types::FINISHED_ROUND);
        for (type_, time) in [(s, 5), (f, 3), (s, 0), (round, 0), (s, 9), (s, 4)] {
            feed(type_, time);
        }
        feed(round, 0);
        feed(s, 6);
        o.finish(&a).unwrap();
        let want = [
            (s, 0),
            (round, 0),
            (f, 3),
            (s, 4),
            (s, 5),
            (round, 0),
            (s, 6),
            (s, 9),
        ];
        assert_eq!(seen.0, want);
    }

    // The cap counts each queued record's entry and allocation, not its
    // body alone: 16-byte bodies are all read once their count reaches
    // MAX_BYTES / (16 + QUEUED_COST), not MAX_BYTES / 16.
    #[test]
    fn the_cap_counts_what_each_record_costs() {
        let a = attrs();
        let mut seen = Seen::default();
        let mut o = Ordered::new(&mut seen, Endian::Little);
        let (h, b) = rec(types::SAMPLE, 5);
        let mut fed = 0;
        while o.inner.0.is_empty() {
            o.record(0, h, &b, &a).unwrap();
            fed += 1;
        }
        assert_eq!(fed, MAX_BYTES / (b.len() + QUEUED_COST) + 1);
    }
}
