//! Unit tests of the merge scan's kernel-mode samples: a sample taken in the
//! kernel counts its first user frame (after PERF_CONTEXT_USER) for the
//! exec rule and the kept addresses.

use super::merge::{merge, MergeOptions};
use super::tests::{merge_opts, process, snapshot_file};
use crate::bytes::{Endian, PutExt};
use crate::perf::consts::{attr_flags, misc, sample_type as st, types};
use crate::perf::record::encode_empty;
use crate::perf::writer::{tests::metadata, write_file};
use crate::perf::Attr;

/// A sample of pid 42 at `time` with `misc`'s cpumode (IP|TID|TIME|ID|
/// CALLCHAIN, as [`recording_with_chains`]' attr lays it out), at kernel
/// ip 0xffff_ffff_8100_0000 with callchain `chain`.
fn chain_sample(d: &mut Vec<u8>, misc: u16, time: u64, chain: &[u64]) {
    let e = Endian::Little;
    d.put_u32(e, types::SAMPLE);
    d.put_u16(e, misc);
    d.put_u16(e, 8 + 40 + 8 * chain.len() as u16);
    d.put_u64(e, 0xffff_ffff_8100_0000);
    d.put_u32(e, 42);
    d.put_u32(e, 42);
    d.put_u64(e, time);
    d.put_u64(e, 7);
    d.put_u64(e, chain.len() as u64);
    chain.iter().for_each(|&a| d.put_u64(e, a));
}

/// The kernel's exec COMM of pid 42 at `time` (a TID|TIME|ID trailer).
fn exec_comm(d: &mut Vec<u8>, time: u64) {
    let e = Endian::Little;
    d.put_u32(e, types::COMM);
    d.put_u16(e, misc::COMM_EXEC);
    d.put_u16(e, 8 + 8 + 16 + 24);
    d.put_u32(e, 42);
    d.put_u32(e, 42);
    d.extend_from_slice(b"new\0\0\0\0\0\0\0\0\0\0\0\0\0");
    d.put_u32(e, 42);
    d.put_u32(e, 42);
    d.put_u64(e, time);
    d.put_u64(e, 7);
}

/// Merges `data` (records of an IP|TID|TIME|ID|CALLCHAIN attr, little
/// endian) with a snapshot of `process(42, "old")` (maps 0x7f00_0000_0000
/// to 0x7f00_0001_0000); its report.
fn recording_with_chains(data: &[u8]) -> super::MergeReport {
    let e = Endian::Little;
    let attr = Attr {
        type_: 1,
        sample_type: st::IP | st::TID | st::TIME | st::ID | st::CALLCHAIN,
        flags: attr_flags::SAMPLE_ID_ALL | attr_flags::MMAP2,
        ..Default::default()
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut rec = Vec::new();
    write_file(&mut rec, &metadata(e, attr), data).unwrap();
    std::fs::write(dir.join("rec.data"), rec).unwrap();
    snapshot_file(&dir.join("snap.data"), vec![process(42, b"old")], e);
    let opts = MergeOptions {
        maps: Some(dir.join("snap.data")),
        ..merge_opts(false)
    };
    merge(&dir.join("rec.data"), &dir.join("out.data"), &opts).unwrap()
}

/// A callchain of a sample taken in the kernel: two kernel frames, then
/// the user frames `user` (none: no USER marker).
fn kernel_chain(user: &[u64]) -> Vec<u64> {
    use crate::perf::consts::context;
    let mut chain = vec![
        context::KERNEL,
        0xffff_ffff_8100_0000,
        0xffff_ffff_8100_0100,
    ];
    if !user.is_empty() {
        chain.push(context::USER);
        chain.extend_from_slice(user);
    }
    chain
}

// A sample taken in the kernel (a syscall, a `:k` event) whose callchain
// has user frames ran the first image before its exec COMM: the process
// is not covered by the exec and gets its maps, whether the sample is
// written before the COMM or after it though taken before; one without
// user frames (kernel frames only), or taken after the exec, leaves it
// covered; so does a guest-mode one.
#[test]
fn a_kernel_mode_sample_with_user_frames_before_an_exec_keeps_its_process_uncovered() {
    let user = kernel_chain(&[0x7f00_0000_1000, 0x7f00_0000_2000]);
    let cases = [
        (misc::KERNEL, user.clone(), 900, true, 1),
        (misc::HYPERVISOR, user.clone(), 900, true, 1),
        (misc::KERNEL, user.clone(), 999, false, 1),
        (misc::KERNEL, user.clone(), 1_001, false, 0),
        (misc::KERNEL, kernel_chain(&[]), 900, true, 0),
        (misc::GUEST_KERNEL, user, 900, true, 0),
    ];
    for (mode, chain, time, written_first, inserted) in cases {
        let mut d = Vec::new();
        if written_first {
            chain_sample(&mut d, mode, time, &chain);
        }
        exec_comm(&mut d, 1_000);
        if !written_first {
            chain_sample(&mut d, mode, time, &chain);
        }
        encode_empty(&mut d, Endian::Little, types::FINISHED_ROUND);
        let report = recording_with_chains(&d);
        assert_eq!(
            report.processes, inserted,
            "mode {mode}, {chain:x?} at {time}: {report:?}"
        );
    }
}

// The addresses kept to tell whether a process is the recorded one come
// from a kernel-mode sample's first user frame (not its kernel ip): the
// snapshot's process, whose maps hold them, is inserted; with user frames
// outside its maps, it is not the recorded process and left out. (Before,
// kernel-mode samples kept nothing and either was inserted unjudged.)
#[test]
fn the_kept_addresses_of_kernel_mode_samples_are_their_user_frames() {
    for (frame, inserted) in [(0x7f00_0000_1000u64, 1), (0x5555_0000_1000, 0)] {
        let mut d = Vec::new();
        for i in 0..40 {
            let chain = kernel_chain(&[frame + 16 * i, 0x7f00_0000_8000]);
            chain_sample(&mut d, misc::KERNEL, 1_000 + i, &chain);
        }
        encode_empty(&mut d, Endian::Little, types::FINISHED_ROUND);
        let report = recording_with_chains(&d);
        assert_eq!(report.processes, inserted, "{frame:#x}: {report:?}");
        assert_eq!(report.not_recorded.len(), 1 - inserted, "{frame:#x}");
        if let Some(n) = report.not_recorded.first() {
            assert_eq!((n.pid, n.coverage.covered, n.coverage.sampled), (42, 0, 16));
        }
    }
}
