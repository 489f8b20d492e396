//! Which sources of build ids a conversion may trust besides the table and
//! files proven to be the mapped ones: the file at a path (`--trust-paths`)
//! and, for a recording of the running kernel, /sys and our own vDSO.

use crate::bytes::Endian;
use crate::model::BuildId;
use crate::perf::features::parse_string_feature;
use crate::proc::buildid::kernel_build_id;
use crate::proc::kernel::module_of_file;

/// Where ids may come from besides the table and files proven to be the
/// mapped ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Trust {
    /// `--trust-paths`: the file at a path is taken for the mapped one when
    /// the record cannot tell (MMAP v1 has no inode; `[vdso]` on this kernel).
    pub paths: bool,
    /// The recording was made on the running kernel: kernel and module ids
    /// from /sys, the vDSO's from our own.
    pub this_kernel: bool,
}

/// Whether a recording comes from the running kernel: its OSRELEASE is
/// the running one and its table's `[kernel.kallsyms]` id, if any, is the
/// running kernel's (perf.data carries no boot id, so this is the test).
pub fn same_kernel(
    recorded: Option<&[u8]>,
    running: &[u8],
    table_kernel: Option<BuildId>,
    running_kernel: Option<BuildId>,
) -> bool {
    recorded == Some(running) && table_kernel.is_none_or(|t| Some(t) == running_kernel)
}

/// The trust for a recording with this OSRELEASE payload and table kernel
/// id: `paths` as asked, `this_kernel` by [`same_kernel`] against the
/// running kernel.
pub fn trust_for(
    osrelease: Option<&[u8]>,
    e: Endian,
    table_kernel: Option<BuildId>,
    paths: bool,
) -> Trust {
    let recorded = osrelease.and_then(|b| parse_string_feature(b, e));
    let running = crate::proc::host::HostFacts::read().osrelease;
    Trust {
        paths,
        this_kernel: same_kernel(recorded, &running, table_kernel, kernel_build_id()),
    }
}

/// The module name of a `.ko` path as /sys/module spells it (`x-y.ko.zst`
/// -> `x_y`), None for other paths.
pub fn module_name(path: &[u8]) -> Option<Vec<u8>> {
    module_of_file(path.rsplit(|&c| c == b'/').next()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Module names as /sys/module spells them; other paths have none.
    #[test]
    fn module_names() {
        let n = |p: &[u8]| module_name(p).map(|v| String::from_utf8(v).unwrap());
        assert_eq!(
            n(b"/lib/modules/6.1/kernel/fs/ext4.ko"),
            Some("ext4".into())
        );
        assert_eq!(
            n(b"/lib/modules/x/snd-hda-intel.ko.zst"),
            Some("snd_hda_intel".into())
        );
        assert_eq!(n(b"/usr/lib/libc.so.6"), None);
        assert_eq!(n(b"/x/.ko"), None);
    }

    // A recording is of this kernel only when the release matches and the
    // table's kernel id, if any, is the running one.
    #[test]
    fn same_kernel_needs_release_and_id() {
        let (a, b) = (BuildId::new(&[1; 20]), BuildId::new(&[2; 20]));
        assert!(same_kernel(Some(b"6.1"), b"6.1", None, a));
        assert!(same_kernel(Some(b"6.1"), b"6.1", a, a));
        assert!(!same_kernel(Some(b"6.1"), b"6.1", b, a));
        assert!(!same_kernel(Some(b"6.2"), b"6.1", None, a));
        assert!(!same_kernel(None, b"6.1", None, a));
    }
}
