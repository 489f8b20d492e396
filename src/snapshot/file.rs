//! What a standalone snapshot perf.data is: the dummy event it is
//! recorded under, where it goes ([`Out`]), the options of writing it and
//! the host's header features. The writer is the `writer` module, the
//! reader the `read` module.

use std::io::{Seek, Write};

use super::encode::Encoding;
use crate::bytes::Endian;
use crate::perf::consts::{attr_flags, feature, sample_type as st};
use crate::perf::consts::{PERF_COUNT_SW_DUMMY, PERF_TYPE_SOFTWARE};
use crate::perf::features::{cmdline_feature, nrcpus_feature, string_feature};
use crate::proc::kernel::KernelRoots;
use crate::proc::HostFacts;

/// The event id written for the single dummy event.
pub const EVENT_ID: u64 = 1;

/// The attr of the dummy event a snapshot is recorded under: a software
/// dummy event with `sample_id_all`, trailer = TID, TIME, IDENTIFIER.
pub fn snapshot_attr() -> crate::perf::Attr {
    crate::perf::Attr {
        type_: PERF_TYPE_SOFTWARE,
        config: PERF_COUNT_SW_DUMMY,
        sample_period: 1,
        sample_type: st::IP | st::TID | st::TIME | st::PERIOD | st::IDENTIFIER,
        read_format: 0,
        flags: attr_flags::DISABLED
            | attr_flags::MMAP
            | attr_flags::COMM
            | attr_flags::TASK
            | attr_flags::SAMPLE_ID_ALL
            | attr_flags::MMAP2
            | attr_flags::COMM_EXEC
            | attr_flags::BUILD_ID,
        ..crate::perf::Attr::default()
    }
}

/// A seekable output: file mode writes its header last.
pub trait WriteSeek: Write + Seek {}
impl<T: Write + Seek + ?Sized> WriteSeek for T {}

/// Where a snapshot goes, which decides its layout.
pub enum Out<'a> {
    /// File mode, into a seekable file (a regular file or a cursor).
    File(&'a mut dyn WriteSeek),
    /// Pipe mode, into any stream (stdout, a FIFO, a device).
    Pipe(&'a mut dyn Write),
}

/// Options for writing a snapshot.
#[derive(Debug, Clone)]
pub struct WriteOptions {
    pub endian: Endian,
    /// Emit FORK records (system-wide snapshots, as perf does with -a).
    pub forks: bool,
    /// The command line stored in CMDLINE.
    pub cmdline: Vec<Vec<u8>>,
    /// HOSTNAME, OSRELEASE and NRCPUS.
    pub host: HostFacts,
    /// Write the kernel's and modules' maps, read under these roots.
    pub kernel: Option<KernelRoots>,
    /// Watch for maps made during the scan (live snapshots).
    pub watch: bool,
    /// Data pages of each watch ring (None: the defaults).
    pub watch_pages: Option<usize>,
}

/// How a snapshot's records are encoded: under [`snapshot_attr`]'s trailer,
/// with [`EVENT_ID`], pid and tid filled in.
pub fn snapshot_encoding(endian: Endian, forks: bool) -> Encoding {
    Encoding {
        endian,
        layout: snapshot_attr().layout(),
        id: EVENT_ID,
        forks,
        fill_tid: true,
    }
}

/// HOSTNAME, OSRELEASE, VERSION, ARCH, NRCPUS and CMDLINE payloads, ascending.
pub fn host_features(e: Endian, host: &HostFacts, cmdline: &[Vec<u8>]) -> Vec<(u32, Vec<u8>)> {
    let version = format!("mmap2-synth {}", env!("CARGO_PKG_VERSION"));
    vec![
        (feature::HOSTNAME, string_feature(e, &host.hostname)),
        (feature::OSRELEASE, string_feature(e, &host.osrelease)),
        (feature::VERSION, string_feature(e, version.as_bytes())),
        (
            feature::ARCH,
            string_feature(e, std::env::consts::ARCH.as_bytes()),
        ),
        (
            feature::NRCPUS,
            nrcpus_feature(e, host.cpus_online, host.cpus_available),
        ),
        (feature::CMDLINE, cmdline_feature(e, cmdline)),
    ]
}
