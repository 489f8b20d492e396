//! Hooks that let integration tests stop the tool at a chosen point, so a
//! race with another process can be made to happen every time instead of
//! by luck. Each is off unless its environment variable is set.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// With the environment variable `var` set to a path: creates that file,
/// then waits until the test removes it (30 s at most), so the test can
/// act while the tool is stopped here. Without it (or if the file cannot
/// be made), returns at once.
pub fn hold(var: &str) {
    if !any_hold() {
        return;
    }
    if let Some(path) = std::env::var_os(var) {
        hold_on(PathBuf::from(path));
    }
}

/// Whether any hold hook is set (some are on the scan's path: the
/// environment is looked at once).
fn any_hold() -> bool {
    static ANY: OnceLock<bool> = OnceLock::new();
    *ANY.get_or_init(|| {
        std::env::vars_os().any(|(k, _)| k.as_encoded_bytes().starts_with(b"MMAP2_SYNTH_TEST_HOLD"))
    })
}

/// With `MMAP2_SYNTH_TEST_HOLD_AFTER_VMA` set to `N:PATH[,N:PATH...]`:
/// holds as [`hold`] does through PATH when a walk has just read its N-th
/// VMA (`count`), before anything else is taken (the next run's time
/// included).
#[inline]
pub fn hold_after_vma(count: usize) {
    // called for every VMA a scan reads: one load and compare when no hook
    // is set (the lock's check and an empty loop were 1% of a scan's
    // instructions)
    static UNSET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if UNSET.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    if hold_after_vma_set(count) {
        return;
    }
    UNSET.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// [`hold_after_vma`]'s slow path: false when no such hook is set.
#[cold]
fn hold_after_vma_set(count: usize) -> bool {
    static AT: OnceLock<Vec<(usize, PathBuf)>> = OnceLock::new();
    let at = AT.get_or_init(|| {
        let Some(v) = any_hold().then(|| std::env::var("MMAP2_SYNTH_TEST_HOLD_AFTER_VMA")) else {
            return Vec::new();
        };
        let v = v.unwrap_or_default();
        let each = v.split(',').filter_map(|e| e.split_once(':'));
        each.filter_map(|(n, p)| Some((n.parse().ok()?, PathBuf::from(p))))
            .collect()
    });
    for (n, path) in at {
        if *n == count {
            hold_on(path.clone());
        }
    }
    !at.is_empty()
}

/// With `MMAP2_SYNTH_TEST_STREAM_STALL_MS` set to a number: how long a
/// stream may send nothing after a signal was put off, instead of
/// `default` (so a test of it takes a moment, not the real stall).
pub fn stream_stall(default: Duration) -> Duration {
    std::env::var("MMAP2_SYNTH_TEST_STREAM_STALL_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(default, Duration::from_millis)
}

/// With `MMAP2_SYNTH_TEST_WINDOW_BYTES` set to a number: what a merge's
/// window of a snapshot file's processes may weigh, instead of `default`
/// (so a test makes many windows of a small file).
pub fn window_bytes(default: usize) -> usize {
    static BYTES: OnceLock<Option<usize>> = OnceLock::new();
    let set = BYTES.get_or_init(|| {
        std::env::var("MMAP2_SYNTH_TEST_WINDOW_BYTES")
            .ok()?
            .parse()
            .ok()
    });
    set.unwrap_or(default)
}

/// [`hold`], the first time only.
pub fn hold_once(var: &str) {
    static HELD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if any_hold() && !HELD.swap(true, std::sync::atomic::Ordering::Relaxed) {
        hold(var);
    }
}

/// Creates `path` and waits until it is removed (30 s at most).
fn hold_on(path: PathBuf) {
    if std::fs::write(&path, b"").is_err() {
        return;
    }
    for _ in 0..3000 {
        if !path.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// With the environment variable `var` set: panics, so a test can see how
/// the tool takes a thread that fails.
pub fn fail(var: &str) {
    if std::env::var_os(var).is_some() {
        panic!("{var} is set");
    }
}
