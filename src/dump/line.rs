//! One dump line per record: decoded from record bytes (pure), printed as
//! stable `key=value` text or as a JSON object with named fields.

use crate::bytes::{cstr, Endian, Rd};
use crate::model::BuildId;
use crate::perf::bpf::{parse_bpf_event, parse_ksymbol};
use crate::perf::consts::{misc, types};
use crate::perf::events::{parse_fork, parse_map};
use crate::perf::{BuildIdEntry, RecordHeader, SampleIdLayout};

/// What a line is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A PERF_RECORD_MMAP or MMAP2.
    Map(MapLine),
    /// A PERF_RECORD_COMM.
    Comm {
        pid: u32,
        tid: u32,
        time: Option<u64>,
        comm: Vec<u8>,
        /// Set by exec (PERF_RECORD_MISC_COMM_EXEC).
        exec: bool,
    },
    /// A PERF_RECORD_FORK or EXIT.
    Task {
        /// "fork" or "exit".
        kind: &'static str,
        pid: u32,
        ppid: u32,
        tid: u32,
        ptid: u32,
        time: u64,
    },
    /// A PERF_RECORD_KSYMBOL (a JITed BPF function, or another kernel
    /// symbol appearing or going).
    Ksymbol {
        time: Option<u64>,
        addr: u64,
        len: u32,
        ksym_type: u16,
        flags: u16,
        name: Vec<u8>,
    },
    /// A PERF_RECORD_BPF_EVENT (a program loaded or unloaded).
    BpfEvent {
        time: Option<u64>,
        event_type: u16,
        flags: u16,
        id: u32,
        tag: [u8; 8],
    },
    /// A BUILD_ID table entry (or HEADER_BUILD_ID record).
    BuildId {
        pid: i32,
        build_id: BuildId,
        path: Vec<u8>,
        cpumode: u16,
    },
}

/// A PERF_RECORD_MMAP or MMAP2, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapLine {
    /// "mmap" or "mmap2".
    pub kind: &'static str,
    pub pid: u32,
    pub tid: u32,
    pub time: Option<u64>,
    pub start: u64,
    pub len: u64,
    pub pgoff: u64,
    pub prot: u32,
    pub flags: u32,
    pub build_id: Option<BuildId>,
    /// maj, min, ino of an inode-form MMAP2.
    pub dev_ino: Option<(u32, u32, u64)>,
    /// Its ino_generation (0 otherwise), as perf prints it beside the inode.
    pub ino_generation: u64,
    pub path: Vec<u8>,
    pub cpumode: u16,
}

impl Line {
    /// The line of a record, `None` for records a dump does not show
    /// (samples and everything else) or that do not decode.
    pub fn of_record(
        h: &RecordHeader,
        body: &[u8],
        e: Endian,
        trailer: SampleIdLayout,
    ) -> Option<Line> {
        Line::of_record_timed(h, body, e, Line::trailer_time(body, e, trailer))
    }

    /// The time a record's sample_id trailer (laid out as `trailer`) gives
    /// its line: None without PERF_SAMPLE_TIME.
    pub fn trailer_time(body: &[u8], e: Endian, trailer: SampleIdLayout) -> Option<u64> {
        trailer.time(body, e)
    }

    /// [`Line::of_record`] with the trailer's time already read
    /// ([`Line::trailer_time`]): how `--sort` decodes the records it held.
    pub fn of_record_timed(
        h: &RecordHeader,
        body: &[u8],
        e: Endian,
        time: Option<u64>,
    ) -> Option<Line> {
        let r = Rd(e);
        match h.type_ {
            types::MMAP | types::MMAP2 => {
                let m = parse_map(h, body, e)?;
                Some(Line::Map(MapLine {
                    kind: if h.type_ == types::MMAP {
                        "mmap"
                    } else {
                        "mmap2"
                    },
                    pid: m.key.pid,
                    tid: m.tid,
                    time,
                    start: m.key.addr,
                    len: m.key.len,
                    pgoff: m.key.pgoff,
                    prot: m.prot,
                    flags: m.flags,
                    build_id: m.build_id,
                    dev_ino: m.dev_ino,
                    ino_generation: m.ino_generation,
                    path: m.key.filename,
                    cpumode: h.misc & misc::CPUMODE_MASK,
                }))
            }
            types::COMM => Some(Line::Comm {
                pid: r.u32(body, 0)?,
                tid: r.u32(body, 4)?,
                time,
                comm: cstr(body.get(8..)?).to_vec(),
                exec: h.misc & misc::COMM_EXEC != 0,
            }),
            types::FORK | types::EXIT => {
                let f = parse_fork(body, e)?;
                Some(Line::Task {
                    kind: if h.type_ == types::FORK {
                        "fork"
                    } else {
                        "exit"
                    },
                    pid: f.pid,
                    ppid: f.ppid,
                    tid: f.tid,
                    ptid: f.ptid,
                    // the trailer's, as perf shows it (and every other
                    // line's: one clock for `--sort`); the body's without
                    time: time.unwrap_or(f.time),
                })
            }
            types::KSYMBOL => {
                let k = parse_ksymbol(body, e)?;
                Some(Line::Ksymbol {
                    time,
                    addr: k.addr,
                    len: k.len,
                    ksym_type: k.ksym_type,
                    flags: k.flags,
                    name: k.name.to_vec(),
                })
            }
            types::BPF_EVENT => {
                let b = parse_bpf_event(body, e)?;
                Some(Line::BpfEvent {
                    time,
                    event_type: b.event_type,
                    flags: b.flags,
                    id: b.id,
                    tag: b.tag,
                })
            }
            _ => None,
        }
    }

    /// The line of a BUILD_ID table entry.
    pub fn of_build_id(b: &BuildIdEntry) -> Line {
        Line::BuildId {
            pid: b.pid,
            build_id: b.build_id,
            path: b.filename.clone(),
            cpumode: b.cpumode & misc::CPUMODE_MASK,
        }
    }

    /// The time the line sorts by (`--sort`): records without one first,
    /// the build-id table's lines last (they have none; a dump ends with
    /// the table).
    pub fn time(&self) -> u64 {
        match self {
            Line::Map(MapLine { time, .. })
            | Line::Comm { time, .. }
            | Line::Ksymbol { time, .. }
            | Line::BpfEvent { time, .. } => time.unwrap_or(0),
            Line::Task { time, .. } => *time,
            Line::BuildId { .. } => u64::MAX,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A FORK's line has its trailer's time, as perf shows it (the body's
    // differs by the fork's own clock reading: two clocks mixed in
    // `--sort`), and the body's without a time in the trailer.
    #[test]
    fn a_fork_line_has_its_trailers_time() {
        use crate::perf::events::{encode_fork, Fork};
        use crate::perf::SampleId;
        let e = Endian::Little;
        let f = Fork {
            pid: 7,
            ppid: 1,
            tid: 7,
            ptid: 1,
            time: 5,
        };
        let sid = SampleId {
            pid: 7,
            tid: 7,
            time: 9,
            ..Default::default()
        };
        for (sample_type, want) in [(crate::perf::consts::sample_type::TIME, 9), (0, 5)] {
            let layout = SampleIdLayout {
                sample_type: crate::perf::consts::sample_type::TID | sample_type,
                sample_id_all: true,
            };
            let mut out = Vec::new();
            encode_fork(&mut out, e, &f, &layout, &sid).unwrap();
            let h = RecordHeader::parse(&out, e).unwrap();
            let line = Line::of_record(&h, &out[8..], e, layout).unwrap();
            assert_eq!(line.time(), want);
            assert!(
                line.text().contains(&format!("time={want}")),
                "{}",
                line.text()
            );
        }
    }

    #[test]
    fn mmap2_line() {
        use crate::perf::events::{encode_mmap2, Mmap2, Mmap2Id};
        use crate::perf::SampleId;
        let e = Endian::Big;
        let layout = SampleIdLayout {
            sample_type: crate::perf::consts::sample_type::TID
                | crate::perf::consts::sample_type::TIME,
            sample_id_all: true,
        };
        let mut out = Vec::new();
        let m = Mmap2 {
            misc: misc::USER,
            pid: 7,
            tid: 8,
            addr: 0x1000,
            len: 0x2000,
            pgoff: 0,
            id: Mmap2Id::Inode {
                maj: 8,
                min: 1,
                ino: 42,
                ino_generation: 3,
            },
            prot: 5,
            flags: 2,
            filename: b"/bin/x y",
        };
        let sid = SampleId {
            pid: 7,
            tid: 8,
            time: 99,
            ..Default::default()
        };
        encode_mmap2(&mut out, e, &m, &layout, &sid).unwrap();
        let h = RecordHeader::parse(&out, e).unwrap();
        let line = Line::of_record(&h, &out[8..], e, layout).unwrap();
        assert_eq!(
            line.text(),
            "mmap2 pid=7 tid=8 time=99 start=0x1000 len=0x2000 pgoff=0x0 prot=r-xp flags=0x2 cpumode=2 dev=08:01 ino=42 gen=3 path=/bin/x y"
        );
        assert_eq!(
            line.json(),
            "{\"kind\":\"mmap2\",\"pid\":7,\"tid\":8,\"time\":99,\"start\":4096,\"len\":8192,\"pgoff\":0,\"prot\":5,\"flags\":2,\"build_id\":null,\"maj\":8,\"min\":1,\"ino\":42,\"ino_generation\":3,\"path\":\"/bin/x y\",\"cpumode\":2}"
        );
    }

    // KSYMBOL and BPF_EVENT records become readable lines: address, length, name; id and tag in hex.
    #[test]
    fn bpf_lines() {
        use crate::perf::bpf::{encode_bpf_event, encode_ksymbol, BpfEvent, Ksymbol};
        use crate::perf::SampleId;
        let e = Endian::Little;
        let layout = SampleIdLayout {
            sample_type: crate::perf::consts::sample_type::TIME,
            sample_id_all: true,
        };
        let sid = SampleId {
            time: 5,
            ..Default::default()
        };
        let mut out = Vec::new();
        let k = Ksymbol {
            addr: 0xffff_ffff_c000_0000,
            len: 0x48,
            ksym_type: 1,
            flags: 0,
            name: b"bpf_prog_0102030405060708_f",
        };
        encode_ksymbol(&mut out, e, &k, &layout, &sid).unwrap();
        let h = RecordHeader::parse(&out, e).unwrap();
        let line = Line::of_record(&h, &out[8..], e, layout).unwrap();
        assert_eq!(
            line.text(),
            "ksymbol time=5 addr=0xffffffffc0000000 len=0x48 type=1 flags=0x0 name=bpf_prog_0102030405060708_f"
        );
        assert_eq!(
            line.json(),
            "{\"kind\":\"ksymbol\",\"time\":5,\"addr\":18446744072635809792,\"len\":72,\"ksym_type\":1,\"flags\":0,\"name\":\"bpf_prog_0102030405060708_f\"}"
        );
        out.clear();
        let b = BpfEvent {
            event_type: 1,
            flags: 0,
            id: 42,
            tag: [1, 2, 3, 4, 5, 6, 7, 0xab],
        };
        encode_bpf_event(&mut out, e, &b, &layout, &sid).unwrap();
        let h = RecordHeader::parse(&out, e).unwrap();
        let line = Line::of_record(&h, &out[8..], e, layout).unwrap();
        assert_eq!(
            line.text(),
            "bpf_event time=5 type=1 flags=0x0 id=42 tag=01020304050607ab"
        );
        assert_eq!(
            line.json(),
            "{\"kind\":\"bpf_event\",\"time\":5,\"type\":1,\"flags\":0,\"id\":42,\"tag\":\"01020304050607ab\"}"
        );
    }
}
