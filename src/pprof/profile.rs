//! Samples aggregated into a pprof [`Profile`]: strings, mappings and
//! locations interned, one [`Sample`](super::proto::Sample) per distinct (stack, pid, tid, comm,
//! thread comm) with two values per event (`<event>_sample`: how many
//! samples, `<event>_event`: their periods), as perf_to_profile writes
//! them. Memory grows with distinct stacks, not samples. Pure.

use std::hash::BuildHasher;
use std::rc::Rc;

// foldhash: keys come from the recording, so a seeded hash (a crafted
// recording cannot aim at collisions), and a fast one: every frame of
// every sample is looked up.
use foldhash::HashMap;

use super::maps::{is_anonymous, Map};
use super::proto::{self, Profile};
pub use super::strings::Strings;

/// Whose address a location is: the mapping's kind decides how it is
/// symbolized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Space {
    /// A process's.
    User,
    /// The kernel's or a module's.
    Kernel,
}

/// One sample's identity before aggregation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SampleKey {
    locations: Box<[u64]>,
    pid: u32,
    tid: u32,
    comm: i64,
    thread_comm: i64,
}

/// No next sample with the same hash.
const END: usize = usize::MAX;

/// What one function frame of a location says, innermost first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Function name (demangled).
    pub name: String,
    /// Source file, if known.
    pub file: Option<String>,
    /// Line, 0 when unknown.
    pub line: u32,
    /// Column, 0 when unknown.
    pub column: u16,
}

/// What symbolization found for a mapping.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MappingSymbols {
    /// Some location of it got a function name (pprof then trusts the
    /// profile's names for the whole mapping).
    pub functions: bool,
    /// ... a source file.
    pub filenames: bool,
    /// ... a line.
    pub lines: bool,
    /// ... inlined frames.
    pub inline: bool,
}

/// One mapping of the profile.
#[derive(Debug, Clone)]
pub struct Mapping {
    /// The recorded map.
    pub map: Rc<Map>,
    /// Whose it is.
    pub space: Space,
    /// The process of the first frame in it (whose files may be read
    /// through /proc while it lives).
    pub pid: u32,
    /// Whether it is a process's anonymous memory ([`is_anonymous`]): a
    /// mapping per process then (a child forked from a JIT shares its
    /// parent's map record, not its `/tmp/perf-PID.map`); files and the
    /// kernel's maps are one mapping in every process.
    pub anonymous: bool,
}

impl Mapping {
    /// The process whose anonymous memory it is, if it is.
    pub fn owner(&self) -> Option<u32> {
        self.anonymous.then_some(self.pid)
    }
}

/// How a mapping is interned: the map's address (the builder holds every
/// map it gave an id, so an address is never reused for another map
/// meanwhile), its space, its owner.
type MappingKey = (usize, Space, Option<u32>);

/// The profile being built.
#[derive(Debug, Default)]
pub struct Builder {
    /// The string table.
    pub strings: Strings,
    mapping_ids: HashMap<MappingKey, u64>,
    /// The last mapping looked up (frames of a stack often share one).
    last_mapping: Option<(MappingKey, u64)>,
    /// Mappings in id order (id = index + 1).
    pub mappings: Vec<Mapping>,
    location_ids: HashMap<(u64, u64, Option<u32>), u64>,
    /// Locations in id order: (mapping id or 0, address, the process of a
    /// user frame no map covers: its `/tmp/perf-PID.map` may name it).
    pub locations: Vec<(u64, u64, Option<u32>)>,
    /// Hash of a sample's key -> the last sample with it; `chain[i]` the
    /// one before (so a sample seen again costs no allocation).
    sample_ids: HashMap<u64, usize>,
    chain: Vec<usize>,
    hasher: foldhash::fast::RandomState,
    samples: Vec<(SampleKey, Vec<Counts>)>,
    /// (aggregate, slot) -> position in its counts, for aggregates with
    /// more than [`LINEAR_COUNTS`] events (a file of 400,000 events all on
    /// one stack made each sample's linear search quadratic).
    count_at: HashMap<(usize, usize), usize>,
}

/// Counts of an aggregate searched linearly (the usual one or two events);
/// beyond, through [`Builder::count_at`].
const LINEAR_COUNTS: usize = 16;

/// One event's share of an aggregate: (event slot, samples, periods). Kept
/// sparse (a stack usually has one or two events), so memory follows the
/// (stack, event) pairs seen, not the number of events a file declares.
type Counts = (usize, i64, i64);

impl Builder {
    /// The mapping id of `map` in `space`, hit by a frame of process
    /// `pid` (interned by the map record and space, and by the process for
    /// anonymous memory).
    pub fn mapping(&mut self, map: &Rc<Map>, space: Space, pid: u32) -> u64 {
        let anonymous = space == Space::User && is_anonymous(&map.filename);
        let key = (Rc::as_ptr(map) as usize, space, anonymous.then_some(pid));
        match self.last_mapping {
            Some((k, id)) if k == key => return id,
            _ => {}
        }
        if let Some(&id) = self.mapping_ids.get(&key) {
            self.last_mapping = Some((key, id));
            return id;
        }
        self.mappings.push(Mapping {
            map: map.clone(),
            space,
            pid,
            anonymous,
        });
        let id = self.mappings.len() as u64;
        self.mapping_ids.insert(key, id);
        id
    }

    /// The location id of `addr` in mapping `mapping` (0: none; then
    /// `pid` is the process of a user frame, kept apart from others').
    pub fn location(&mut self, mapping: u64, addr: u64, pid: Option<u32>) -> u64 {
        let key = (mapping, addr, pid.filter(|_| mapping == 0));
        *self.location_ids.entry(key).or_insert_with(|| {
            self.locations.push(key);
            self.locations.len() as u64
        })
    }

    /// Each distinct sample's pid with each of its user frames' address.
    pub fn user_frames(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        let at = move |&l: &u64| self.locations[l as usize - 1];
        let user = move |&(m, _, pid): &(u64, u64, Option<u32>)| match m {
            0 => pid.is_some(),
            m => self.mappings[m as usize - 1].space == Space::User,
        };
        self.samples.iter().flat_map(move |(k, _)| {
            let frames = k.locations.iter().map(at).filter(user);
            frames.map(move |(_, addr, _)| (k.pid, addr))
        })
    }

    /// Adds one sample of event slot `slot` with `period`; returns the
    /// index of its aggregate (for [`Builder::add_to`]).
    pub fn add(
        &mut self,
        locations: &[u64],
        (pid, tid): (u32, u32),
        (comm, thread_comm): (i64, i64),
        slot: usize,
        period: u64,
    ) -> usize {
        let h = self
            .hasher
            .hash_one((locations, pid, tid, comm, thread_comm));
        let mut i = self.sample_ids.get(&h).copied().unwrap_or(END);
        while i != END {
            let k = &self.samples[i].0;
            if *k.locations == *locations
                && (k.pid, k.tid, k.comm, k.thread_comm) == (pid, tid, comm, thread_comm)
            {
                break;
            }
            i = self.chain[i];
        }
        if i == END {
            let key = SampleKey {
                locations: locations.into(),
                pid,
                tid,
                comm,
                thread_comm,
            };
            i = self.samples.len();
            self.samples.push((key, Vec::new()));
            self.chain.push(self.sample_ids.insert(h, i).unwrap_or(END));
        }
        self.add_to(i, slot, period);
        i
    }

    /// Adds one sample of event slot `slot` with `period` to aggregate `i`
    /// (an index [`Builder::add`] returned).
    #[inline]
    pub fn add_to(&mut self, i: usize, slot: usize, period: u64) {
        let values = &mut self.samples[i].1;
        let at = if values.len() <= LINEAR_COUNTS {
            match values.iter().position(|c| c.0 == slot) {
                Some(at) => at,
                None => {
                    values.push((slot, 0, 0));
                    if values.len() > LINEAR_COUNTS {
                        // found through the index from now on
                        for (j, c) in values.iter().enumerate() {
                            self.count_at.insert((i, c.0), j);
                        }
                    }
                    values.len() - 1
                }
            }
        } else {
            let next = values.len();
            let at = *self.count_at.entry((i, slot)).or_insert(next);
            if at == next {
                values.push((slot, 0, 0));
            }
            at
        };
        let c = &mut values[at];
        c.1 = c.1.saturating_add(1);
        c.2 =
            c.2.saturating_add(i64::try_from(period).unwrap_or(i64::MAX));
    }

    /// Distinct samples so far.
    pub fn distinct_samples(&self) -> usize {
        self.samples.len()
    }

    /// The event slots that have samples.
    pub fn slots_with_samples(&self) -> Vec<usize> {
        let slots: std::collections::BTreeSet<usize> = self
            .samples
            .iter()
            .flat_map(|(_, v)| v.iter().map(|c| c.0))
            .collect();
        slots.into_iter().collect()
    }

    /// The profile: `events` (slot, name) in the order their columns go,
    /// samples of other slots dropped; `frames[i]` and `mapping_symbols[i]`
    /// what symbolization found for location / mapping `i + 1`, if anything.
    pub fn finish(
        mut self,
        events: &[(usize, String)],
        frames: &[Vec<Frame>],
        mapping_symbols: &[MappingSymbols],
        duration_nanos: i64,
    ) -> Profile {
        let mut p = Profile::default();
        let count = self.strings.id("count");
        for (_, name) in events {
            for suffix in ["sample", "event"] {
                p.sample_type.push(proto::ValueType {
                    r#type: self.strings.id(&format!("{name}_{suffix}")),
                    unit: count,
                });
            }
        }
        let order = self.main_first();
        self.samples_into(&mut p, events);
        self.locations_into(&mut p, frames, &order);
        self.mappings_into(&mut p, mapping_symbols, &order);
        p.duration_nanos = duration_nanos;
        // pprof shows the default type: the last event's periods, as perf
        // report weighs by period
        if let Some(last) = p.sample_type.last() {
            p.period_type = Some(last.clone());
            p.default_sample_type = last.r#type;
        }
        p.string_table = self.strings.table();
        p
    }

    /// The command with the most samples (its string id) and its process
    /// with the most samples.
    fn top_command(&self) -> Option<(i64, u32)> {
        let mut by_comm: HashMap<i64, i64> = HashMap::default();
        let mut by_pid: HashMap<(i64, u32), i64> = HashMap::default();
        for (k, v) in &self.samples {
            let n: i64 = v.iter().map(|c| c.1).sum();
            *by_comm.entry(k.comm).or_default() += n;
            *by_pid.entry((k.comm, k.pid)).or_default() += n;
        }
        let comm = by_comm
            .iter()
            .filter(|(&c, _)| c != 0)
            .max_by_key(|(&c, &n)| (n, std::cmp::Reverse(c)))
            .map(|(&c, _)| c)?;
        by_pid
            .iter()
            .filter(|((c, _), _)| *c == comm)
            .max_by_key(|(&(_, pid), &n)| (n, std::cmp::Reverse(pid)))
            .map(|(&k, _)| k)
    }

    /// Whether `m` is the executable of command `comm`: a user file whose
    /// name starts with the comm (which the kernel cuts to 15 bytes).
    fn is_main(&self, m: &Map, space: Space, comm: i64) -> bool {
        let comm = self.strings.get(comm).as_bytes();
        let base = m.filename.rsplit(|&c| c == b'/').next().unwrap_or_default();
        space == Space::User && m.filename.first() == Some(&b'/') && base.starts_with(comm)
    }

    /// pprof names the profile after its first mapping, the main binary:
    /// when no frame landed in the top command's executable (a burner
    /// whose samples are all in a library), its mapping from `maps` (that
    /// process's maps at the end, or the first file of one gone) is added
    /// without locations, so the profile is still named after the program
    /// rather than a library.
    pub fn add_main_binary<'a, I>(&mut self, maps: impl FnOnce(u32) -> I)
    where
        I: Iterator<Item = &'a Rc<Map>>,
    {
        let Some((comm, pid)) = self.top_command() else {
            return;
        };
        if self
            .mappings
            .iter()
            .any(|m| self.is_main(&m.map, m.space, comm))
        {
            return;
        }
        let main = maps(pid)
            .find(|m| self.is_main(m, Space::User, comm))
            .cloned();
        if let Some(m) = main {
            self.mapping(&m, Space::User, pid);
        }
    }

    /// The order mappings are written in (positions in `self.mappings`):
    /// pprof takes the first for the main binary, so the executable of the
    /// command with the most samples goes first; the rest keep their order.
    fn main_first(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.mappings.len()).collect();
        let Some((comm, _)) = self.top_command() else {
            return order;
        };
        let main = self
            .mappings
            .iter()
            .position(|m| self.is_main(&m.map, m.space, comm));
        if let Some(i) = main {
            order.remove(i);
            order.insert(0, i);
        }
        order
    }

    /// The samples with values in the columns of `events`, labelled.
    fn samples_into(&mut self, p: &mut Profile, events: &[(usize, String)]) {
        let keys = [
            self.strings.id("pid"),
            self.strings.id("tid"),
            self.strings.id("comm"),
            self.strings.id("thread_comm"),
        ];
        let num = |key, num| proto::Label {
            key,
            num,
            ..Default::default()
        };
        let text = |key, str| proto::Label {
            key,
            str,
            ..Default::default()
        };
        // slot -> its column: each aggregate's counts placed once, not
        // searched for every event
        let column: HashMap<usize, usize> = events
            .iter()
            .enumerate()
            .map(|(j, &(slot, _))| (slot, j))
            .collect();
        for (key, values) in std::mem::take(&mut self.samples) {
            let mut value = vec![0i64; 2 * events.len()];
            for &(slot, n, period) in &values {
                if let Some(&j) = column.get(&slot) {
                    value[2 * j] = n;
                    value[2 * j + 1] = period;
                }
            }
            if value.iter().all(|&v| v == 0) {
                continue;
            }
            p.sample.push(proto::Sample {
                location_id: key.locations.into_vec(),
                value,
                label: vec![
                    num(keys[0], i64::from(key.pid)),
                    num(keys[1], i64::from(key.tid)),
                    text(keys[2], key.comm),
                    text(keys[3], key.thread_comm),
                ],
            });
        }
    }

    /// Locations with their lines, and the functions those name.
    fn locations_into(&mut self, p: &mut Profile, frames: &[Vec<Frame>], order: &[usize]) {
        // old mapping id -> new
        let mut new_id = vec![0u64; order.len() + 1];
        for (new, &old) in order.iter().enumerate() {
            new_id[old + 1] = new as u64 + 1;
        }
        let mut functions: HashMap<(i64, i64), u64> = HashMap::default();
        for (i, &(mapping_id, address, _)) in self.locations.iter().enumerate() {
            let mut line = Vec::new();
            for f in frames.get(i).map(Vec::as_slice).unwrap_or_default() {
                let name = self.strings.id(&f.name);
                let file = f.file.as_deref().map_or(0, |s| self.strings.id(s));
                let next = p.function.len() as u64 + 1;
                let function_id = *functions.entry((name, file)).or_insert(next);
                if function_id == next {
                    p.function.push(proto::Function {
                        id: function_id,
                        name,
                        system_name: name,
                        filename: file,
                        start_line: 0,
                    });
                }
                line.push(proto::Line {
                    function_id,
                    line: i64::from(f.line),
                    column: i64::from(f.column),
                });
            }
            p.location.push(proto::Location {
                id: i as u64 + 1,
                mapping_id: new_id[mapping_id as usize],
                address,
                line,
                is_folded: false,
            });
        }
    }

    /// Mappings with their build ids and what symbolization gave them.
    fn mappings_into(
        &mut self,
        p: &mut Profile,
        mapping_symbols: &[MappingSymbols],
        order: &[usize],
    ) {
        for (new, &i) in order.iter().enumerate() {
            let (m, owner) = (&self.mappings[i].map, self.mappings[i].owner());
            let s = mapping_symbols.get(i).copied().unwrap_or_default();
            let build_id = m.build_id.map_or(0, |id| self.strings.id(&id.to_hex()));
            let filename = match owner {
                Some(pid) => self.strings.id(&m.anonymous_name(pid)),
                None => self.strings.id_bytes(&m.filename),
            };
            p.mapping.push(proto::Mapping {
                id: new as u64 + 1,
                memory_start: m.start,
                memory_limit: m.end,
                file_offset: m.pgoff,
                filename,
                build_id,
                has_functions: s.functions,
                has_filenames: s.filenames,
                has_line_numbers: s.lines,
                has_inline_frames: s.inline,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(start: u64) -> Rc<Map> {
        Rc::new(Map {
            start,
            end: start + 0x1000,
            pgoff: 0,
            filename: b"/lib/x.so".as_slice().into(),
            build_id: crate::model::BuildId::new(&[0xab; 20]),
            file: None,
        })
    }

    // Equal stacks of one thread aggregate into one Sample with counts and
    // periods per event; other events' columns stay zero; mappings,
    // locations and functions are interned once with 1-based ids.
    #[test]
    fn aggregation_and_ids() {
        let mut b = Builder::default();
        let shared = map(0x1000);
        let m = b.mapping(&shared, Space::User, 7);
        assert_eq!(b.mapping(&shared.clone(), Space::User, 7), m);
        // a map is its record: another record of the same range is another
        assert_eq!(b.mapping(&map(0x1000), Space::User, 7), m + 1);
        assert_eq!(b.mapping(&shared, Space::Kernel, 7), m + 2);
        let l1 = b.location(m, 0x1010, None);
        let l2 = b.location(m, 0x1020, None);
        assert_eq!(b.location(m, 0x1010, None), l1);
        let comm = b.strings.id("burn");
        for _ in 0..3 {
            b.add(&[l1, l2], (5, 5), (comm, comm), 1, 100);
        }
        b.add(&[l2], (5, 6), (comm, comm), 0, 7);
        assert_eq!(b.slots_with_samples(), vec![0, 1]);
        let frames = vec![
            vec![Frame {
                name: "f".into(),
                file: Some("a.c".into()),
                line: 3,
                column: 0,
            }],
            vec![],
        ];
        let sym = [MappingSymbols {
            functions: true,
            ..Default::default()
        }; 3];
        let p = b.finish(&[(0, "a".into()), (1, "b".into())], &frames, &sym, 0);
        assert_eq!(p.sample.len(), 2);
        assert_eq!(p.sample[0].value, vec![0, 0, 3, 300]);
        assert_eq!(p.sample[1].value, vec![1, 7, 0, 0]);
        assert_eq!(p.sample[0].location_id, vec![1, 2]);
        assert_eq!(p.location[0].line.len(), 1);
        assert_eq!(p.function.len(), 1);
        assert!(p.mapping[0].has_functions);
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(s(p.sample_type[3].r#type), "b_event");
        assert_eq!(s(p.mapping[0].build_id), "ab".repeat(20));
        assert_eq!(p.string_table[0], "");
    }

    /// A 4 KiB file map at `start`.
    fn named(start: u64, name: &str) -> Rc<Map> {
        Rc::new(Map {
            start,
            end: start + 0x1000,
            pgoff: 0,
            filename: name.as_bytes().into(),
            build_id: None,
            file: None,
        })
    }

    // The executable of the command with the most samples is written as
    // the first mapping (pprof's main binary); locations follow it.
    #[test]
    fn main_binary_first() {
        let mut b = Builder::default();
        let libc = b.mapping(&named(0x1000, "/lib/libc.so.6"), Space::User, 7);
        let jit = b.mapping(&named(0x5000, "//anon"), Space::User, 7);
        b.location(jit, 0x5000, None);
        let exe = b.mapping(&named(0x9000, "/usr/bin/burn"), Space::User, 7);
        let (l1, l2) = (
            b.location(libc, 0x1010, None),
            b.location(exe, 0x9010, None),
        );
        let comm = b.strings.id("burn");
        b.add(&[l2, l1], (7, 7), (comm, comm), 0, 1);
        let p = b.finish(&[(0, "e".into())], &[], &[], 0);
        let name = |m: &proto::Mapping| p.string_table[m.filename as usize].clone();
        assert_eq!(name(&p.mapping[0]), "/usr/bin/burn");
        assert_eq!(p.mapping[0].id, 1);
        // locations: the JIT one, libc's, the executable's
        let ids: Vec<u64> = p.location.iter().map(|l| l.mapping_id).collect();
        assert_eq!(ids, vec![3, 2, 1], "each location follows its mapping");
        assert_eq!(name(&p.mapping[2]), "[anon] pid 7 at 0x5000");
    }

    // Anonymous memory is a mapping per process (a forked child shares the
    // map record), files one for all; user frames no map covers are
    // locations per process, kernel ones and mapped ones are not.
    #[test]
    fn anonymous_memory_is_per_process() {
        let mut b = Builder::default();
        let (jit, lib) = (named(0x5000, "//anon"), named(0x9000, "/lib/x.so"));
        let (a, c) = (
            b.mapping(&jit, Space::User, 1),
            b.mapping(&jit, Space::User, 2),
        );
        assert_ne!(a, c);
        assert_eq!(b.mapping(&jit, Space::User, 1), a);
        assert_eq!(
            b.mapping(&jit, Space::Kernel, 1),
            b.mapping(&jit, Space::Kernel, 2)
        );
        let l = b.mapping(&lib, Space::User, 1);
        assert_eq!(b.mapping(&lib, Space::User, 2), l);
        let heap = named(0x7000, "[heap]");
        assert_ne!(
            b.mapping(&heap, Space::User, 1),
            b.mapping(&heap, Space::User, 2)
        );
        assert_ne!(b.location(0, 0x10, Some(1)), b.location(0, 0x10, Some(2)));
        assert_eq!(
            b.location(l, 0x9010, Some(1)),
            b.location(l, 0x9010, Some(2))
        );
        assert_eq!(b.location(0, 0x20, None), b.location(0, 0x20, None));
        let p = b.finish(&[], &[], &[], 0);
        let name = |i: usize| p.string_table[p.mapping[i].filename as usize].clone();
        assert_eq!(name(0), "[anon] pid 1 at 0x5000");
        assert_eq!(name(1), "[anon] pid 2 at 0x5000");
        assert_eq!(name(2), "//anon", "the kernel's space keeps the name");
        assert_eq!(name(4), "[heap] pid 1 at 0x7000");
    }

    // A program whose samples all land in a library still names the
    // profile: its executable is added from its process's maps, first.
    #[test]
    fn main_binary_added_without_samples() {
        let mut b = Builder::default();
        let lib = named(0x1000, "/tmp/libburn.so");
        let libburn = b.mapping(&lib, Space::User, 7);
        let l = b.location(libburn, 0x1010, None);
        let comm = b.strings.id("burn");
        b.add(&[l], (7, 7), (comm, comm), 0, 1);
        b.add(&[l], (7, 7), (comm, comm), 0, 1);
        let other = b.strings.id("other");
        b.add(&[l], (9, 9), (other, other), 0, 1);
        let maps: super::super::maps::Maps = [
            (0x1000, lib.clone()),
            (0x8000, named(0x8000, "/usr/bin/burn")),
        ]
        .into_iter()
        .collect();
        let mut asked = Vec::new();
        b.add_main_binary(|pid| {
            asked.push(pid);
            maps.values()
        });
        assert_eq!(asked, vec![7], "the top command's process");
        let p = b.finish(&[(0, "e".into())], &[], &[], 0);
        let name = |m: &proto::Mapping| p.string_table[m.filename as usize].clone();
        assert_eq!(name(&p.mapping[0]), "/usr/bin/burn");
        assert_eq!(p.mapping.len(), 2);
        assert_eq!(p.location[0].mapping_id, p.mapping[1].id);
    }

    // An event far down a long attr list costs one entry per stack, not a
    // column for every event before it; its values land in its columns.
    #[test]
    fn counts_are_sparse_by_event() {
        let mut b = Builder::default();
        for pid in 0..3 {
            b.add(&[], (pid, pid), (0, 0), 799_999, 7);
        }
        b.add(&[], (0, 0), (0, 0), 2, 5);
        assert!(b.samples.iter().all(|(_, v)| v.len() <= 2));
        assert_eq!(b.slots_with_samples(), vec![2, 799_999]);
        let p = b.finish(&[(799_999, "far".into()), (2, "near".into())], &[], &[], 0);
        let mut values: Vec<Vec<i64>> = p.sample.iter().map(|s| s.value.clone()).collect();
        values.sort();
        assert_eq!(
            values,
            vec![vec![1, 7, 0, 0], vec![1, 7, 0, 0], vec![1, 7, 1, 5]]
        );
    }

    // One stack with many events (in falling slot order, twice each) sums
    // each event in its own columns, past the linear search and into the
    // index alike, in time linear in the samples (was quadratic: 129 s for
    // a 48 MB file).
    #[test]
    fn many_events_on_one_stack() {
        let mut b = Builder::default();
        let n = 20_000;
        for round in 0..2 {
            for slot in (0..n).rev() {
                b.add(&[], (1, 1), (0, 0), slot, (slot + round) as u64 + 1);
            }
        }
        let events: Vec<(usize, String)> = (0..n).map(|s| (s, s.to_string())).collect();
        let p = b.finish(&events, &[], &[], 0);
        assert_eq!(p.sample.len(), 1);
        let v = &p.sample[0].value;
        for slot in 0..n {
            let want = [2, (2 * slot + 3) as i64];
            assert_eq!(v[2 * slot..2 * slot + 2], want, "slot {slot}");
        }
    }

    // Keeping one event drops the samples that only the others had.
    #[test]
    fn one_event_kept() {
        let mut b = Builder::default();
        b.add(&[], (1, 1), (0, 0), 0, 1);
        b.add(&[], (2, 2), (0, 0), 1, 1);
        let p = b.finish(&[(1, "b".into())], &[], &[], 0);
        assert_eq!(p.sample.len(), 1);
        assert_eq!(p.sample[0].value, vec![1, 1]);
    }
}
