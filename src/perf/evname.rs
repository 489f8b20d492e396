//! The name perf gives an event from its attr alone (`evsel__name` when
//! the event has no name of its own): a generic hardware or software
//! event's name, `raw 0x...` for a raw one, and the privilege modifiers.
//! What an EVENT_DESC written for a recording that lost its own carries.

use super::attr::Attr;

/// PERF_TYPE_HARDWARE events by `config`.
const HARDWARE: [&str; 10] = [
    "cycles",
    "instructions",
    "cache-references",
    "cache-misses",
    "branches",
    "branch-misses",
    "bus-cycles",
    "stalled-cycles-frontend",
    "stalled-cycles-backend",
    "ref-cycles",
];

/// PERF_TYPE_SOFTWARE events by `config`.
const SOFTWARE: [&str; 12] = [
    "cpu-clock",
    "task-clock",
    "page-faults",
    "context-switches",
    "cpu-migrations",
    "minor-faults",
    "major-faults",
    "alignment-faults",
    "emulation-faults",
    "dummy",
    "bpf-output",
    "cgroup-switches",
];

/// `perf_event_attr` flag bits (little-endian bit numbering) the modifiers
/// come from.
mod bit {
    pub const EXCLUDE_USER: u32 = 4;
    pub const EXCLUDE_KERNEL: u32 = 5;
    pub const EXCLUDE_HV: u32 = 6;
    pub const PRECISE_IP: u32 = 15;
    pub const EXCLUDE_HOST: u32 = 19;
    pub const EXCLUDE_GUEST: u32 = 20;
}

/// The name of a generic hardware or software event (PERF_TYPE_HARDWARE
/// or _SOFTWARE and a `config` perf knows).
pub fn generic_name(type_: u32, config: u64) -> Option<&'static str> {
    let table: &[&str] = match type_ {
        0 => &HARDWARE,
        1 => &SOFTWARE,
        _ => &[],
    };
    usize::try_from(config)
        .ok()
        .and_then(|c| table.get(c))
        .copied()
}

/// The name of the event `attr` describes, as perf 6.1 derives it.
pub fn event_name(attr: &Attr) -> Vec<u8> {
    let generic = generic_name(attr.type_, attr.config).map(str::to_string);
    let base = match attr.type_ {
        _ if generic.is_some() => generic.unwrap_or_default(),
        0 => format!("unknown-hardware:{:#x}", attr.config),
        1 => format!("unknown-software:{:#x}", attr.config),
        2 => format!("tracepoint {}", attr.config),
        3 => format!("hw-cache {:#x}", attr.config),
        4 => format!("raw {:#x}", attr.config),
        5 => "breakpoint".to_string(),
        t => format!("unknown attr type: {t}"),
    };
    let mut name = base.into_bytes();
    name.extend_from_slice(&modifiers(attr.flags));
    name
}

/// perf's `evsel__add_modifiers`: `:` and the privilege levels counted
/// (`k`, `u`, `h`) when any is excluded, `p` per level of `precise_ip`,
/// and the host and guest ones when they differ from perf's default.
fn modifiers(flags: u64) -> Vec<u8> {
    let set = |b: u32| flags >> b & 1 != 0;
    let mut m = Vec::new();
    let mut guest_default = false;
    if set(bit::EXCLUDE_KERNEL) || set(bit::EXCLUDE_USER) || set(bit::EXCLUDE_HV) {
        for (b, c) in [
            (bit::EXCLUDE_KERNEL, b'k'),
            (bit::EXCLUDE_USER, b'u'),
            (bit::EXCLUDE_HV, b'h'),
        ] {
            if !set(b) {
                m.push(c);
            }
        }
        guest_default = true;
    }
    let precise = (flags >> bit::PRECISE_IP & 3) as usize;
    if precise > 0 {
        m.extend(std::iter::repeat_n(b'p', precise));
        guest_default = true;
    }
    if set(bit::EXCLUDE_HOST) || set(bit::EXCLUDE_GUEST) == guest_default {
        for (b, c) in [(bit::EXCLUDE_HOST, b'H'), (bit::EXCLUDE_GUEST, b'G')] {
            if !set(b) {
                m.push(c);
            }
        }
    }
    match m.is_empty() {
        true => m,
        false => [b":".as_slice(), &m].concat(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(type_: u32, config: u64, bits: &[u32], precise: u64) -> Attr {
        let flags = bits
            .iter()
            .fold(precise << bit::PRECISE_IP, |f, b| f | 1 << b);
        Attr {
            type_,
            config,
            flags,
            ..Attr::default()
        }
    }

    // Generic events get the names and modifiers perf gives an attr with no
    // name (what perf report shows for a file without EVENT_DESC): none for perf's
    // defaults (guest excluded), the levels counted when any is excluded,
    // p per precise level; unknown types and configs still get a name.
    #[test]
    fn names_are_perfs() {
        use bit::*;
        let name = |a: Attr| String::from_utf8(event_name(&a)).unwrap();
        assert_eq!(name(attr(1, 0, &[EXCLUDE_GUEST], 0)), "cpu-clock");
        assert_eq!(name(attr(1, 1, &[EXCLUDE_GUEST], 0)), "task-clock");
        assert_eq!(
            name(attr(0, 0, &[EXCLUDE_KERNEL, EXCLUDE_HV, EXCLUDE_GUEST], 0)),
            "cycles:uH"
        );
        assert_eq!(
            name(attr(0, 1, &[EXCLUDE_USER, EXCLUDE_GUEST], 0)),
            "instructions:khH"
        );
        assert_eq!(name(attr(0, 0, &[EXCLUDE_GUEST], 3)), "cycles:pppH");
        assert_eq!(name(attr(0, 0, &[], 0)), "cycles:HG");
        assert_eq!(name(attr(4, 0x1c2, &[EXCLUDE_GUEST], 0)), "raw 0x1c2");
        assert_eq!(
            name(attr(1, 99, &[EXCLUDE_GUEST], 0)),
            "unknown-software:0x63"
        );
        assert_eq!(
            name(attr(42, 7, &[EXCLUDE_GUEST], 0)),
            "unknown attr type: 42"
        );
    }
}
