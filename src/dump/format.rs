//! How a dump prints a [`Line`]: as text (`key=value` fields, the path or
//! comm last, escaped reversibly) and as one JSON object.

use std::fmt::Write as _;

use super::line::{Line, MapLine};
use crate::text::escape;

impl Line {
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

/// A string made JSON-safe (after [`escape`] only `"` and `\` remain to do).
fn json_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    // JSON escaping leaves only `"` and `\` to do after [`escape`].
    #[test]
    fn escaping() {
        assert_eq!(json_escape(&escape(b"q\"\\")), "q\\\"\\\\\\\\");
    }

    // An MMAP2 record becomes one text line and one JSON object with the same fields.
}
