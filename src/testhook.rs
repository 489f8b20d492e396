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
    // some hooks are on the scan's path: the environment is looked at once
    static ANY: OnceLock<bool> = OnceLock::new();
    let any = ANY.get_or_init(|| {
        std::env::vars_os().any(|(k, _)| k.as_encoded_bytes().starts_with(b"MMAP2_SYNTH_TEST_HOLD"))
    });
    if !any {
        return;
    }
    let Some(path) = std::env::var_os(var) else {
        return;
    };
    let path = PathBuf::from(path);
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
