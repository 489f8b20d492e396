//! The C allocator's settings for a short-lived tool that frees and
//! allocates buffers of a few hundred KB per process.

/// Bytes of free memory at the top of a heap that glibc keeps instead of
/// giving back to the kernel (per heap: the main one and each thread's).
const TRIM_THRESHOLD: libc::c_int = 8 << 20;
/// Allocations from this size on get a mapping of their own, freed back
/// to the kernel whole (glibc's default moves between 128 KiB and 32 MiB
/// as blocks are freed; setting the trim threshold would pin it at 128 KiB:
/// a mapping, and its page faults, for each buffer of a big process; at 1
/// MiB the pieces of a process of long names took 342,000 page faults
/// instead of 20,000-40,000).
const MMAP_THRESHOLD: libc::c_int = 4 << 20;

/// Tells glibc's malloc to keep up to 8 MiB of freed memory per heap (so
/// up to 8 MiB more per scan worker than the live data): each
/// scan worker's heap was trimmed (`madvise(MADV_DONTNEED)` of 2-4 MiB)
/// again and again as the writer freed the record buffers of processes of
/// a thousand VMAs, and faulted back in for the next (`-d` at 200 x 1,100:
/// 6,600-7,100 page faults, about 2,500 with this). Peaks: 6 processes of
/// 60,000 VMAs under a 3.8 KB path 30-31 MiB before and after with 2
/// workers; 16 such processes 57-63 -> 67-68 MiB with 16 workers (a
/// review's run); with a 64 MiB threshold the 6 took 41 MiB. A no-op on
/// other C libraries.
///
/// Call it before any thread starts (`cli::main` does, first): glibc
/// changes these settings under the main heap's lock only, and the other
/// heaps read them without it.
pub fn keep_freed_memory() {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: mallopt takes two integers and changes only the
        // allocator's parameters; called before any other thread exists
        // (see above), nothing reads them concurrently.
        unsafe {
            libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        }
    }
}
