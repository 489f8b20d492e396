//! A call into a library that may panic on hostile input (blazesym 0.2.7
//! unwraps a missing file of a DWARF line program), isolated: its panic is
//! caught and returned as an error, and not printed as if we had crashed.
//!
//! The panic hook is the process's: ours is set once, on the first isolated
//! call, around the one there was. It stays quiet only for a panic on a
//! thread that is inside [`isolated`] at the time (a count per thread);
//! panics anywhere else (other threads, our own code) go to the previous
//! hook as before. Setting and restoring a hook around each call would race
//! with other threads' panics and hooks. A panic on a thread the callee
//! spawned would not be caught: blazesym spawns none. Needs
//! `panic = "unwind"` (the default, which the release profile keeps).

use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe, PanicHookInfo};
use std::sync::Once;

thread_local! {
    /// How many isolated calls this thread is in.
    static INSIDE: Cell<u32> = const { Cell::new(0) };
    /// Where the last quiet panic was raised, and its message.
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// The callee panicked: where, and its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Panicked(pub String);

/// `f()`, or where and why it panicked. `f` must leave nothing it shares
/// half-changed when it unwinds (hence no `UnwindSafe` bound): what it
/// builds is dropped on the way out.
pub fn isolated<R>(f: impl FnOnce() -> R) -> Result<R, Panicked> {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if INSIDE.try_with(Cell::get).unwrap_or(0) > 0 {
                let _ = LAST.try_with(|l| l.replace(Some(describe(info))));
            } else {
                previous(info);
            }
        }));
    });
    INSIDE.with(|n| n.set(n.get() + 1));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    INSIDE.with(|n| n.set(n.get() - 1));
    result.map_err(|payload| {
        let said = LAST.with(|l| l.take());
        Panicked(said.unwrap_or_else(|| message(payload.as_ref()).to_string()))
    })
}

/// `FILE:LINE:COL: MESSAGE`, a dependency's file from its crate directory
/// (`blazesym-0.2.7/src/...`, not the registry's absolute path).
fn describe(info: &PanicHookInfo<'_>) -> String {
    let said = message(info.payload());
    let Some(at) = info.location() else {
        return said.to_string();
    };
    let file = at.file();
    let file = file
        .rsplit_once("/registry/src/")
        .map_or(file, |(_, rest)| rest.split_once('/').map_or(rest, |r| r.1));
    format!("{file}:{}:{}: {said}", at.line(), at.column())
}

/// A panic's message, when it is text.
fn message(payload: &(dyn std::any::Any + Send)) -> &str {
    match payload.downcast_ref::<&str>() {
        Some(s) => s,
        None => payload
            .downcast_ref::<String>()
            .map_or("(no message)", String::as_str),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A panic inside is returned with where it was raised and its message,
    // nested calls too; a call that returns gives its value, and the count
    // of calls this thread is inside goes back to 0 either way.
    #[test]
    fn a_panic_inside_is_returned() {
        assert_eq!(isolated(|| 7), Ok(7));
        let e = isolated(|| -> u8 { panic!("bad {}", "dwarf") }).unwrap_err();
        assert!(e.0.ends_with(": bad dwarf"), "{e:?}");
        assert!(e.0.starts_with("src/pprof/isolate.rs:"), "{e:?}");
        let inner = isolated(|| isolated(|| -> u8 { panic!("inner") }));
        assert!(matches!(&inner, Ok(Err(Panicked(m))) if m.ends_with("inner")));
        assert_eq!(INSIDE.with(Cell::get), 0);
    }

    // Isolation is per thread: a thread spawned inside an isolated call
    // that panics is not caught by it (it unwinds and its join says so),
    // and the isolated call itself returns normally.
    #[test]
    fn other_threads_panics_are_their_own() {
        let joined = isolated(|| std::thread::spawn(|| panic!("elsewhere")).join());
        let payload = joined.expect("the isolated call returned").unwrap_err();
        assert_eq!(message(payload.as_ref()), "elsewhere");
    }
}
