//! One dump line per record: decoded from record bytes (pure), printed as
//! stable `key=value` text or as a JSON object with named fields.

use std::fmt::Write as _;

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
        trailer
            .read(body, e)
            .map(|s| s.time)
            .filter(|_| trailer.sample_type & crate::perf::consts::sample_type::TIME != 0)
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
                    time: f.time,
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

    /// The line as text: the kind, then `key=value` fields, the path or
    /// comm last (escaped, see [`escape`]).
    pub fn text(&self) -> String {
        let mut s = String::new();
        let t = |time: &Option<u64>| time.map_or("-".to_string(), |t| t.to_string());
        match self {
            Line::Map(m) => m.text(&mut s),
            Line::Comm {
                pid,
                tid,
                time,
                comm,
                exec,
            } => {
                let _ = write!(
                    s,
                    "comm pid={} tid={} time={} exec={} comm={}",
                    *pid as i32,
                    *tid as i32,
                    t(time),
                    u8::from(*exec),
                    escape(comm)
                );
            }
            Line::Task {
                kind,
                pid,
                ppid,
                tid,
                ptid,
                time,
            } => {
                let _ = write!(
                    s,
                    "{kind} pid={} ppid={} tid={} ptid={} time={time}",
                    *pid as i32, *ppid as i32, *tid as i32, *ptid as i32
                );
            }
            Line::Ksymbol {
                time,
                addr,
                len,
                ksym_type,
                flags,
                name,
            } => {
                let _ = write!(
                    s,
                    "ksymbol time={} addr={addr:#x} len={len:#x} type={ksym_type} flags={flags:#x} name={}",
                    t(time),
                    escape(name)
                );
            }
            Line::BpfEvent {
                time,
                event_type,
                flags,
                id,
                tag,
            } => {
                let _ = write!(
                    s,
                    "bpf_event time={} type={event_type} flags={flags:#x} id={id} tag={}",
                    t(time),
                    hex(tag)
                );
            }
            Line::BuildId {
                pid,
                build_id,
                path,
                cpumode,
            } => {
                let _ = write!(
                    s,
                    "build_id pid={pid} cpumode={cpumode} build_id={} path={}",
                    build_id.to_hex(),
                    escape(path)
                );
            }
        }
        s
    }

    /// The line as one JSON object (JSON Lines).
    pub fn json(&self) -> String {
        let mut f: Vec<(&'static str, String)> = Vec::new();
        let num = |v: u64| v.to_string();
        let string = json_string;
        match self {
            Line::Map(m) => m.json_fields(&mut f),
            Line::Comm {
                pid,
                tid,
                time,
                comm,
                exec,
            } => {
                f.push(("kind", "\"comm\"".into()));
                f.push(("pid", (*pid as i32).to_string()));
                f.push(("tid", (*tid as i32).to_string()));
                f.push(("time", time.map_or("null".into(), num)));
                f.push(("comm", string(comm)));
                f.push(("exec", exec.to_string()));
            }
            Line::Task {
                kind,
                pid,
                ppid,
                tid,
                ptid,
                time,
            } => {
                f.push(("kind", format!("\"{kind}\"")));
                f.push(("pid", (*pid as i32).to_string()));
                f.push(("ppid", (*ppid as i32).to_string()));
                f.push(("tid", (*tid as i32).to_string()));
                f.push(("ptid", (*ptid as i32).to_string()));
                f.push(("time", num(*time)));
            }
            Line::Ksymbol {
                time,
                addr,
                len,
                ksym_type,
                flags,
                name,
            } => {
                f.push(("kind", "\"ksymbol\"".into()));
                f.push(("time", time.map_or("null".into(), num)));
                f.push(("addr", num(*addr)));
                f.push(("len", num((*len).into())));
                f.push(("ksym_type", num((*ksym_type).into())));
                f.push(("flags", num((*flags).into())));
                f.push(("name", string(name)));
            }
            Line::BpfEvent {
                time,
                event_type,
                flags,
                id,
                tag,
            } => {
                f.push(("kind", "\"bpf_event\"".into()));
                f.push(("time", time.map_or("null".into(), num)));
                f.push(("type", num((*event_type).into())));
                f.push(("flags", num((*flags).into())));
                f.push(("id", num((*id).into())));
                f.push(("tag", format!("\"{}\"", hex(tag))));
            }
            Line::BuildId {
                pid,
                build_id,
                path,
                cpumode,
            } => {
                f.push(("kind", "\"build_id\"".into()));
                f.push(("pid", pid.to_string()));
                f.push(("build_id", format!("\"{}\"", build_id.to_hex())));
                f.push(("path", string(path)));
                f.push(("cpumode", num((*cpumode).into())));
            }
        }
        let body: Vec<String> = f.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        format!("{{{}}}", body.join(","))
    }
}

impl MapLine {
    /// Appends the text form (see [`Line::text`]).
    fn text(&self, s: &mut String) {
        let m = self;
        let time = m.time.map_or("-".to_string(), |t| t.to_string());
        let _ = write!(
            s,
            "{} pid={} tid={} time={time} start={:#x} len={:#x} pgoff={:#x} prot={} flags={:#x} cpumode={} ",
            m.kind,
            m.pid as i32,
            m.tid as i32,
            m.start,
            m.len,
            m.pgoff,
            prot_text(m.prot, m.flags),
            m.flags,
            m.cpumode,
        );
        match (&m.build_id, m.dev_ino) {
            (Some(b), _) => {
                let _ = write!(s, "build_id={}", b.to_hex());
            }
            (None, Some((maj, min, ino))) => {
                let gen = m.ino_generation;
                let _ = write!(s, "dev={maj:02x}:{min:02x} ino={ino} gen={gen}");
            }
            (None, None) => s.push('-'),
        }
        let _ = write!(s, " path={}", escape(&m.path));
    }

    /// Appends the JSON fields (see [`Line::json`]).
    fn json_fields(&self, f: &mut Vec<(&'static str, String)>) {
        let m = self;
        let num = |v: u64| v.to_string();
        f.push(("kind", format!("\"{}\"", m.kind)));
        f.push(("pid", (m.pid as i32).to_string()));
        f.push(("tid", (m.tid as i32).to_string()));
        f.push(("time", m.time.map_or("null".into(), num)));
        f.push(("start", num(m.start)));
        f.push(("len", num(m.len)));
        f.push(("pgoff", num(m.pgoff)));
        f.push(("prot", num(m.prot.into())));
        f.push(("flags", num(m.flags.into())));
        f.push((
            "build_id",
            m.build_id
                .map_or("null".into(), |b| format!("\"{}\"", b.to_hex())),
        ));
        let (maj, min, ino) = match m.dev_ino {
            Some((a, b, c)) => (num(a.into()), num(b.into()), num(c)),
            None => ("null".into(), "null".into(), "null".into()),
        };
        f.push(("maj", maj));
        f.push(("min", min));
        f.push(("ino", ino));
        let gen = m.dev_ino.map_or("null".into(), |_| num(m.ino_generation));
        f.push(("ino_generation", gen));
        f.push(("path", json_string(&m.path)));
        f.push(("cpumode", num(m.cpumode.into())));
    }
}

/// Bytes in lower-case hex.
fn hex(b: &[u8]) -> String {
    b.iter().fold(String::new(), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}

/// A JSON string literal of escaped bytes.
fn json_string(b: &[u8]) -> String {
    format!("\"{}\"", json_escape(&escape(b)))
}

/// `rwxp` / `r-xs`, as /proc/PID/maps shows them.
fn prot_text(prot: u32, flags: u32) -> String {
    let bit = |b: u32, c: char| if prot & b != 0 { c } else { '-' };
    let shared = flags & libc::MAP_SHARED as u32 != 0;
    format!(
        "{}{}{}{}",
        bit(libc::PROT_READ as u32, 'r'),
        bit(libc::PROT_WRITE as u32, 'w'),
        bit(libc::PROT_EXEC as u32, 'x'),
        if shared { 's' } else { 'p' }
    )
}

/// A path or comm as printable text: valid UTF-8 is kept, except that a
/// backslash becomes `\\` and control characters and bytes that are not
/// UTF-8 become `\xNN`, so every record stays on one line and the bytes can
/// be recovered.
pub fn escape(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for chunk in b.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => s.push_str("\\\\"),
                c if c.is_control() || is_invisible(c) => {
                    let mut buf = [0u8; 4];
                    for byte in c.encode_utf8(&mut buf).bytes() {
                        let _ = write!(s, "\\x{byte:02x}");
                    }
                }
                c => s.push(c),
            }
        }
        for byte in chunk.invalid() {
            let _ = write!(s, "\\x{byte:02x}");
        }
    }
    s
}

/// Line and paragraph separators and bidi controls: some tools split lines
/// on the former, terminals reorder text for the latter.
fn is_invisible(c: char) -> bool {
    matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A string made JSON-safe (after [`escape`] only `"` and `\` remain to do).
fn json_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    // Paths keep UTF-8, and backslashes, control bytes and invalid UTF-8 are escaped reversibly.
    #[test]
    fn escaping() {
        assert_eq!(escape(b"/usr/lib/libc.so.6"), "/usr/lib/libc.so.6");
        assert_eq!(escape("/tmp/é x".as_bytes()), "/tmp/é x");
        assert_eq!(escape(b"a\\b\nc\xff"), "a\\\\b\\x0ac\\xff");
        assert_eq!(
            escape("x\u{2028}\u{202e}".as_bytes()),
            "x\\xe2\\x80\\xa8\\xe2\\x80\\xae"
        );
        assert_eq!(json_escape(&escape(b"q\"\\")), "q\\\"\\\\\\\\");
    }

    // An MMAP2 record becomes one text line and one JSON object with the same fields.
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
