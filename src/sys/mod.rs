//! Every call into the C library and the kernel that Rust's std does not
//! make: the only module allowed `unsafe` (each block says why it is
//! sound), by concern: the allocator's settings, the PROCMAP_QUERY ioctl, clocks and system
//! constants, perf events, directory-relative file calls, open files,
//! processes, and a pipe to splice files through.

mod alloc;
mod bpf;
mod bpf_prog;
mod clock;
mod dirfd;
mod file;
mod perf_event;
mod process;
mod procmap;
mod splice;

pub use alloc::*;
pub use bpf::*;
pub use bpf_prog::*;
pub use clock::*;
pub use dirfd::*;
pub use file::*;
pub use perf_event::*;
pub use process::*;
pub use procmap::*;
pub use splice::*;
