//! Pure encoders for perf records, in either byte order.

use crate::buildid::BuildId;

/// Byte order of a perf.data file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endian {
    /// Little-endian (x86-64, arm64, ...).
    Little,
    /// Big-endian (s390x, ...).
    Big,
}

impl Endian {
    /// Big-endian when `big` is true, else little-endian.
    pub fn big_if(big: bool) -> Endian {
        if big {
            Endian::Big
        } else {
            Endian::Little
        }
    }

    /// This machine's byte order.
    pub const NATIVE: Endian = if cfg!(target_endian = "big") {
        Endian::Big
    } else {
        Endian::Little
    };
}

/// Appends fixed-size integers in a chosen byte order.
pub trait PutExt {
    /// Appends a u16.
    fn put_u16(&mut self, e: Endian, v: u16);
    /// Appends a u32.
    fn put_u32(&mut self, e: Endian, v: u32);
    /// Appends a u64.
    fn put_u64(&mut self, e: Endian, v: u64);
    /// Appends zero bytes until the length is a multiple of `align`.
    fn pad_to(&mut self, align: usize);
}

impl PutExt for Vec<u8> {
    fn put_u16(&mut self, e: Endian, v: u16) {
        self.extend_from_slice(&match e {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        });
    }
    fn put_u32(&mut self, e: Endian, v: u32) {
        self.extend_from_slice(&match e {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        });
    }
    fn put_u64(&mut self, e: Endian, v: u64) {
        self.extend_from_slice(&match e {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        });
    }
    fn pad_to(&mut self, align: usize) {
        while self.len() % align != 0 {
            self.push(0);
        }
    }
}

/// Reads integers of a given byte order from a slice.
#[derive(Debug, Clone, Copy)]
pub struct Rd(pub Endian);

impl Rd {
    /// u16 at `off`, or None when out of bounds.
    pub fn u16(self, b: &[u8], off: usize) -> Option<u16> {
        let a: [u8; 2] = b.get(off..off.checked_add(2)?)?.try_into().ok()?;
        Some(match self.0 {
            Endian::Little => u16::from_le_bytes(a),
            Endian::Big => u16::from_be_bytes(a),
        })
    }
    /// u32 at `off`.
    pub fn u32(self, b: &[u8], off: usize) -> Option<u32> {
        let a: [u8; 4] = b.get(off..off.checked_add(4)?)?.try_into().ok()?;
        Some(match self.0 {
            Endian::Little => u32::from_le_bytes(a),
            Endian::Big => u32::from_be_bytes(a),
        })
    }
    /// u64 at `off`.
    pub fn u64(self, b: &[u8], off: usize) -> Option<u64> {
        let a: [u8; 8] = b.get(off..off.checked_add(8)?)?.try_into().ok()?;
        Some(match self.0 {
            Endian::Little => u64::from_le_bytes(a),
            Endian::Big => u64::from_be_bytes(a),
        })
    }
}

/// Record type numbers (`perf_event_header.type`).
pub mod types {
    /// PERF_RECORD_MMAP.
    pub const MMAP: u32 = 1;
    /// PERF_RECORD_COMM.
    pub const COMM: u32 = 3;
    /// PERF_RECORD_FORK.
    pub const FORK: u32 = 7;
    /// PERF_RECORD_SAMPLE.
    pub const SAMPLE: u32 = 9;
    /// PERF_RECORD_MMAP2.
    pub const MMAP2: u32 = 10;
    /// PERF_RECORD_HEADER_ATTR (pipe mode).
    pub const HEADER_ATTR: u32 = 64;
    /// PERF_RECORD_HEADER_BUILD_ID (pipe mode).
    pub const HEADER_BUILD_ID: u32 = 67;
    /// PERF_RECORD_FINISHED_ROUND.
    pub const FINISHED_ROUND: u32 = 68;
    /// PERF_RECORD_HEADER_FEATURE (pipe mode).
    pub const HEADER_FEATURE: u32 = 80;
    /// PERF_RECORD_FINISHED_INIT.
    pub const FINISHED_INIT: u32 = 82;
}

/// `perf_event_header.misc` bits.
pub mod misc {
    /// Kernel cpumode.
    pub const KERNEL: u16 = 1;
    /// User cpumode.
    pub const USER: u16 = 2;
    /// The map could not be read completely (timeout).
    pub const PROC_MAP_PARSE_TIMEOUT: u16 = 1 << 12;
    /// MMAP2 of a non-executable VMA.
    pub const MMAP_DATA: u16 = 1 << 13;
    /// MMAP2 carries a build id instead of maj/min/ino.
    pub const MMAP_BUILD_ID: u16 = 1 << 14;
    /// BUILD_ID table entry: byte 20 of build_id holds the id length.
    pub const BUILD_ID_SIZE: u16 = 1 << 15;
}

/// `perf_event_attr.sample_type` bits that shape the sample_id trailer.
pub mod sample_type {
    /// PERF_SAMPLE_IP.
    pub const IP: u64 = 1 << 0;
    /// PERF_SAMPLE_TID.
    pub const TID: u64 = 1 << 1;
    /// PERF_SAMPLE_TIME.
    pub const TIME: u64 = 1 << 2;
    /// PERF_SAMPLE_ID.
    pub const ID: u64 = 1 << 6;
    /// PERF_SAMPLE_CPU.
    pub const CPU: u64 = 1 << 7;
    /// PERF_SAMPLE_PERIOD.
    pub const PERIOD: u64 = 1 << 8;
    /// PERF_SAMPLE_STREAM_ID.
    pub const STREAM_ID: u64 = 1 << 9;
    /// PERF_SAMPLE_IDENTIFIER.
    pub const IDENTIFIER: u64 = 1 << 16;
}

/// The `sample_id` trailer appended to non-sample records when
/// `attr.sample_id_all` is set, shaped by `attr.sample_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SampleIdLayout {
    /// `attr.sample_type` of the attr that decides the layout.
    pub sample_type: u64,
    /// `attr.sample_id_all`; without it there is no trailer.
    pub sample_id_all: bool,
}

/// Values for the trailer fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SampleId {
    /// TID: pid.
    pub pid: u32,
    /// TID: tid.
    pub tid: u32,
    /// TIME.
    pub time: u64,
    /// ID and IDENTIFIER.
    pub id: u64,
    /// STREAM_ID.
    pub stream_id: u64,
    /// CPU.
    pub cpu: u32,
}

impl SampleIdLayout {
    /// Trailer length in bytes.
    pub fn len(&self) -> usize {
        if !self.sample_id_all {
            return 0;
        }
        use sample_type::*;
        [TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER]
            .iter()
            .filter(|&&b| self.sample_type & b != 0)
            .count()
            * 8
    }

    /// True when there is no trailer.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends the trailer in perf's field order.
    pub fn write(&self, out: &mut Vec<u8>, e: Endian, v: &SampleId) {
        if !self.sample_id_all {
            return;
        }
        use sample_type::*;
        let st = self.sample_type;
        if st & TID != 0 {
            out.put_u32(e, v.pid);
            out.put_u32(e, v.tid);
        }
        if st & TIME != 0 {
            out.put_u64(e, v.time);
        }
        if st & ID != 0 {
            out.put_u64(e, v.id);
        }
        if st & STREAM_ID != 0 {
            out.put_u64(e, v.stream_id);
        }
        if st & CPU != 0 {
            out.put_u32(e, v.cpu);
            out.put_u32(e, 0);
        }
        if st & IDENTIFIER != 0 {
            out.put_u64(e, v.id);
        }
    }
}

/// Error from an encoder: the record would not fit its 16-bit size field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("record of type {record_type} would be {size} bytes, more than 65535")]
pub struct RecordTooLarge {
    /// Record type.
    pub record_type: u32,
    /// Size it would have had.
    pub size: usize,
}

/// Starts a record: returns the position of its header, to finish with
/// [`finish_record`].
pub(crate) fn begin_record(out: &mut Vec<u8>, e: Endian, record_type: u32, misc: u16) -> usize {
    let at = out.len();
    out.put_u32(e, record_type);
    out.put_u16(e, misc);
    out.put_u16(e, 0);
    at
}

/// Writes the final size into the header begun at `at`.
pub(crate) fn finish_record(
    out: &mut Vec<u8>,
    e: Endian,
    at: usize,
    record_type: u32,
) -> Result<(), RecordTooLarge> {
    let size = out.len() - at;
    let Ok(s) = u16::try_from(size) else {
        out.truncate(at);
        return Err(RecordTooLarge { record_type, size });
    };
    let b = match e {
        Endian::Little => s.to_le_bytes(),
        Endian::Big => s.to_be_bytes(),
    };
    out[at + 6..at + 8].copy_from_slice(&b);
    Ok(())
}

/// Appends a NUL-terminated string padded with zeros to a multiple of `align`
/// (counted from the start of the string).
fn put_cstr(out: &mut Vec<u8>, s: &[u8], align: usize) {
    let start = out.len();
    out.extend_from_slice(s);
    out.push(0);
    while (out.len() - start) % align != 0 {
        out.push(0);
    }
}

/// The file identity carried by an MMAP2 record: a build id or maj/min/ino.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mmap2Id {
    /// Build-id form (`PERF_RECORD_MISC_MMAP_BUILD_ID`).
    BuildId(BuildId),
    /// Inode form.
    Inode {
        /// Device major.
        maj: u32,
        /// Device minor.
        min: u32,
        /// Inode number.
        ino: u64,
        /// Inode generation (perf writes 0).
        ino_generation: u64,
    },
}

/// The fields of a PERF_RECORD_MMAP2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mmap2<'a> {
    /// cpumode and other misc bits, without MMAP_BUILD_ID (set from `id`).
    pub misc: u16,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Start address.
    pub addr: u64,
    /// Length.
    pub len: u64,
    /// File offset.
    pub pgoff: u64,
    /// File identity.
    pub id: Mmap2Id,
    /// PROT_* bits.
    pub prot: u32,
    /// MAP_* flags.
    pub flags: u32,
    /// File name, without NUL.
    pub filename: &'a [u8],
}

/// Encodes a PERF_RECORD_MMAP2 with its sample_id trailer.
pub fn encode_mmap2(
    out: &mut Vec<u8>,
    e: Endian,
    m: &Mmap2<'_>,
    layout: &SampleIdLayout,
    sid: &SampleId,
) -> Result<(), RecordTooLarge> {
    let misc = match m.id {
        Mmap2Id::BuildId(_) => m.misc | misc::MMAP_BUILD_ID,
        Mmap2Id::Inode { .. } => m.misc & !misc::MMAP_BUILD_ID,
    };
    let at = begin_record(out, e, types::MMAP2, misc);
    out.put_u32(e, m.pid);
    out.put_u32(e, m.tid);
    out.put_u64(e, m.addr);
    out.put_u64(e, m.len);
    out.put_u64(e, m.pgoff);
    match m.id {
        Mmap2Id::BuildId(id) => {
            let b = id.as_bytes();
            out.push(b.len() as u8);
            out.extend_from_slice(&[0, 0, 0]);
            out.extend_from_slice(b);
            out.resize(out.len() + (20 - b.len()), 0);
        }
        Mmap2Id::Inode {
            maj,
            min,
            ino,
            ino_generation,
        } => {
            out.put_u32(e, maj);
            out.put_u32(e, min);
            out.put_u64(e, ino);
            out.put_u64(e, ino_generation);
        }
    }
    out.put_u32(e, m.prot);
    out.put_u32(e, m.flags);
    put_cstr(out, m.filename, 8);
    layout.write(out, e, sid);
    finish_record(out, e, at, types::MMAP2)
}

/// Encodes a PERF_RECORD_COMM (comm NUL-padded to 8) with its trailer.
pub fn encode_comm(
    out: &mut Vec<u8>,
    e: Endian,
    pid: u32,
    tid: u32,
    comm: &[u8],
    layout: &SampleIdLayout,
    sid: &SampleId,
) -> Result<(), RecordTooLarge> {
    let at = begin_record(out, e, types::COMM, 0);
    out.put_u32(e, pid);
    out.put_u32(e, tid);
    put_cstr(out, comm, 8);
    layout.write(out, e, sid);
    finish_record(out, e, at, types::COMM)
}

/// The fields of a PERF_RECORD_FORK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fork {
    /// Process id (tgid) of the child.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Thread id of the child.
    pub tid: u32,
    /// Parent thread id.
    pub ptid: u32,
    /// Time.
    pub time: u64,
}

/// Encodes a PERF_RECORD_FORK with its trailer.
pub fn encode_fork(
    out: &mut Vec<u8>,
    e: Endian,
    f: &Fork,
    layout: &SampleIdLayout,
    sid: &SampleId,
) -> Result<(), RecordTooLarge> {
    let at = begin_record(out, e, types::FORK, 0);
    out.put_u32(e, f.pid);
    out.put_u32(e, f.ppid);
    out.put_u32(e, f.tid);
    out.put_u32(e, f.ptid);
    out.put_u64(e, f.time);
    layout.write(out, e, sid);
    finish_record(out, e, at, types::FORK)
}

/// Encodes a header-only record (FINISHED_ROUND, FINISHED_INIT).
pub fn encode_empty(out: &mut Vec<u8>, e: Endian, record_type: u32) {
    out.put_u32(e, record_type);
    out.put_u16(e, 0);
    out.put_u16(e, 8);
}

/// One entry of the BUILD_ID table (feature section or pipe-mode record).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct BuildIdEntry {
    /// cpumode (`misc::USER` or `misc::KERNEL`).
    pub cpumode: u16,
    /// Machine pid: -1 for the host.
    pub pid: i32,
    /// The id.
    pub build_id: BuildId,
    /// The DSO path.
    pub filename: Vec<u8>,
}

/// Encodes a BUILD_ID table entry: `record_type` 0 inside the feature
/// section, [`types::HEADER_BUILD_ID`] as a pipe-mode record. The file name
/// is padded to 64 bytes, as perf 6.1 writes it.
pub fn encode_build_id_entry(
    out: &mut Vec<u8>,
    e: Endian,
    record_type: u32,
    b: &BuildIdEntry,
) -> Result<(), RecordTooLarge> {
    let at = begin_record(out, e, record_type, b.cpumode | misc::BUILD_ID_SIZE);
    out.put_u32(e, b.pid as u32);
    let id = b.build_id.as_bytes();
    out.extend_from_slice(id);
    out.resize(out.len() + (20 - id.len()), 0);
    out.push(id.len() as u8);
    out.extend_from_slice(&[0, 0, 0]);
    put_cstr(out, &b.filename, 64);
    finish_record(out, e, at, record_type)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> SampleIdLayout {
        SampleIdLayout {
            sample_type: sample_type::TID | sample_type::TIME | sample_type::IDENTIFIER,
            sample_id_all: true,
        }
    }

    // An MMAP2 in build-id form has perf's exact byte layout, trailer included.
    #[test]
    fn mmap2_build_id_layout() {
        let mut out = Vec::new();
        let id = BuildId::new(&[0xaa; 8]).unwrap();
        let m = Mmap2 {
            misc: misc::USER,
            pid: 10,
            tid: 11,
            addr: 0x1000,
            len: 0x2000,
            pgoff: 0x3000,
            id: Mmap2Id::BuildId(id),
            prot: 5,
            flags: 2,
            filename: b"/lib/x.so",
        };
        let sid = SampleId {
            pid: 10,
            tid: 11,
            id: 7,
            ..Default::default()
        };
        encode_mmap2(&mut out, Endian::Little, &m, &layout(), &sid).unwrap();
        // 8 header + 8 + 24 + 24 + 8 + 16 (name+NUL padded) + 24 trailer
        assert_eq!(out.len(), 112);
        assert_eq!(&out[0..4], &10u32.to_le_bytes());
        assert_eq!(
            u16::from_le_bytes([out[4], out[5]]),
            misc::USER | misc::MMAP_BUILD_ID
        );
        assert_eq!(u16::from_le_bytes([out[6], out[7]]), 112);
        assert_eq!(out[40], 8);
        assert_eq!(&out[44..52], &[0xaa; 8]);
        assert_eq!(&out[52..64], &[0; 12]);
        assert_eq!(&out[72..81], b"/lib/x.so");
        assert_eq!(&out[81..88], &[0; 7]);
        assert_eq!(&out[88..92], &10u32.to_le_bytes());
        assert_eq!(&out[104..112], &7u64.to_le_bytes());
    }

    // The inode form clears MMAP_BUILD_ID and a big-endian record swaps every field.
    #[test]
    fn mmap2_inode_big_endian() {
        let mut out = Vec::new();
        let m = Mmap2 {
            misc: misc::USER | misc::MMAP_BUILD_ID | misc::MMAP_DATA,
            pid: 1,
            tid: 1,
            addr: 0x10,
            len: 0x20,
            pgoff: 0,
            id: Mmap2Id::Inode {
                maj: 8,
                min: 1,
                ino: 99,
                ino_generation: 0,
            },
            prot: 1,
            flags: 2,
            filename: b"12345678",
        };
        let none = SampleIdLayout::default();
        encode_mmap2(&mut out, Endian::Big, &m, &none, &SampleId::default()).unwrap();
        assert_eq!(&out[0..4], &10u32.to_be_bytes());
        assert_eq!(
            u16::from_be_bytes([out[4], out[5]]),
            misc::USER | misc::MMAP_DATA
        );
        assert_eq!(u16::from_be_bytes([out[6], out[7]]), 88);
        assert_eq!(&out[40..44], &8u32.to_be_bytes());
        assert_eq!(&out[48..56], &99u64.to_be_bytes());
        // an 8-byte name still gets its NUL and 7 bytes of padding
        assert_eq!(&out[72..88], b"12345678\0\0\0\0\0\0\0\0");
    }

    // The trailer length and order follow sample_type; no sample_id_all means no trailer.
    #[test]
    fn trailer_layouts() {
        use sample_type::*;
        let all = SampleIdLayout {
            sample_type: TID | TIME | ID | STREAM_ID | CPU | IDENTIFIER | IP | PERIOD,
            sample_id_all: true,
        };
        assert_eq!(all.len(), 48);
        let mut out = Vec::new();
        let sid = SampleId {
            pid: 1,
            tid: 2,
            time: 3,
            id: 4,
            stream_id: 5,
            cpu: 6,
        };
        all.write(&mut out, Endian::Little, &sid);
        let words: Vec<u64> = out
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(words, vec![1 | (2 << 32), 3, 4, 5, 6, 4]);
        let off = SampleIdLayout {
            sample_id_all: false,
            ..all
        };
        assert_eq!(off.len(), 0);
    }

    // COMM and FORK have perf's sizes; a too-long name is an error, not a bad record.
    #[test]
    fn comm_fork_and_limits() {
        let mut out = Vec::new();
        let l = layout();
        encode_comm(
            &mut out,
            Endian::Little,
            5,
            6,
            b"bash",
            &l,
            &SampleId::default(),
        )
        .unwrap();
        assert_eq!(out.len(), 8 + 8 + 8 + 24);
        out.clear();
        let f = Fork {
            pid: 5,
            ppid: 1,
            tid: 5,
            ptid: 1,
            time: 0,
        };
        encode_fork(&mut out, Endian::Little, &f, &l, &SampleId::default()).unwrap();
        assert_eq!(out.len(), 8 + 24 + 24);
        out.clear();
        let err = encode_comm(
            &mut out,
            Endian::Little,
            1,
            1,
            &vec![b'a'; 70000],
            &l,
            &SampleId::default(),
        )
        .unwrap_err();
        assert_eq!(err.record_type, types::COMM);
        assert!(out.is_empty());
    }

    // A BUILD_ID table entry stores the length at byte 20 and pads the name to 64.
    #[test]
    fn build_id_entry_layout() {
        let mut out = Vec::new();
        let b = BuildIdEntry {
            cpumode: misc::USER,
            pid: -1,
            build_id: BuildId::new(&[1; 16]).unwrap(),
            filename: b"/a".to_vec(),
        };
        encode_build_id_entry(&mut out, Endian::Little, 0, &b).unwrap();
        assert_eq!(out.len(), 36 + 64);
        assert_eq!(
            u16::from_le_bytes([out[4], out[5]]),
            misc::USER | misc::BUILD_ID_SIZE
        );
        assert_eq!(&out[8..12], &(-1i32).to_le_bytes());
        assert_eq!(out[12 + 20], 16);
    }
}
