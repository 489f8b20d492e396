//! Unit tests of a rewrite's safety: a walk that panics or a FIFO given as
//! input does not hang it, `--in-place` writes only beside the input it
//! opened, and waiting for another rewrite's lock is bounded.

use super::merge::merge;
use super::tests::{merge_opts, recording, v1_recording};
use crate::bytes::Endian;

/// Runs `f` on its own thread and returns what it returned or its panic,
/// failing the test if it has not ended within 30 s (a hang).
fn without_hanging<R: Send + 'static>(
    f: impl FnOnce() -> R + Send + 'static,
) -> std::thread::Result<R> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    rx.recv_timeout(std::time::Duration::from_secs(30))
        .expect("hung")
}

/// `convert --buildid-mmap2`, in place or not.
fn convert_opts(in_place: bool) -> super::convert::ConvertOptions {
    super::convert::ConvertOptions {
        buildid_mmap2: true,
        in_place,
        ..Default::default()
    }
}

// A walk that panics ends convert (before the synthesized prefix is known:
// the copy waiting for it is released) and merge (beside its data copy)
// with that panic: no hang, and no output left behind.
#[test]
fn walk_panic_is_not_a_hang() {
    use super::convert::convert;
    use crate::perf::walk::tests::PANICKING_WALK;
    for tool in ["convert", "merge"] {
        let tmp = tempfile::tempdir().unwrap();
        let (inp, out) = (tmp.path().join(PANICKING_WALK), tmp.path().join("out.data"));
        let run: Box<dyn FnOnce() + Send> = if tool == "convert" {
            std::fs::write(&inp, v1_recording(Endian::Little, true)).unwrap();
            Box::new(move || drop(convert(&inp, &out, &convert_opts(false))))
        } else {
            std::fs::write(&inp, recording(Endian::Little).0).unwrap();
            Box::new(move || drop(merge(&inp, &out, &merge_opts(false))))
        };
        assert!(without_hanging(run).is_err(), "{tool}: no panic");
        let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "{tool}: only the input remains: {left:?}");
    }
}

// An input rewritten in place must be a regular file: merge and convert
// (as `record` calls them, past the CLI's output checks) refuse a FIFO
// without reading it, as bad input (`record -o /dev/stdout` with stdout a
// pipe once waited on its own pipe forever).
#[test]
fn in_place_refuses_a_fifo_unread() {
    use super::convert::convert;
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("in.fifo");
    crate::sys::mkfifo(&fifo).unwrap();
    let f = fifo.clone();
    let (merged, converted) = without_hanging(move || {
        let merged = merge(&f, &f, &merge_opts(true)).map(|_| ());
        let converted = convert(&f, &f, &convert_opts(true)).map(|_| ());
        (
            merged.map_err(|e| e.to_string()),
            converted.map_err(|e| e.to_string()),
        )
    })
    .expect("no panic");
    for r in [merged, converted] {
        let e = r.unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
    }
}

// --in-place refuses to write when the input is no longer in the directory
// the output's path leads to now (a directory on it swapped for a link
// after the input was opened): nothing is written in either directory.
#[test]
fn in_place_output_must_sit_beside_the_input_opened() {
    use crate::perf::Input;
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    std::fs::write(a.join("perf.data"), recording(Endian::Little).0).unwrap();
    std::fs::write(b.join("perf.data"), b"root's").unwrap();
    let link = tmp.path().join("proj");
    std::os::unix::fs::symlink(&a, &link).unwrap();
    let path = link.join("perf.data");
    let input = Input::open_regular(&path).unwrap();
    assert!(super::write::create_output(&input, &path, true).is_ok());
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&b, &link).unwrap();
    let e = super::write::create_output(&input, &path, true).unwrap_err();
    assert!(e.to_string().contains("no longer at that path"), "{e}");
    assert_eq!(std::fs::read(b.join("perf.data")).unwrap(), b"root's");
    assert_eq!(std::fs::read_dir(&b).unwrap().count(), 1);
    assert_eq!(std::fs::read_dir(&a).unwrap().count(), 1);
}

// An --in-place lock held by someone else is waited for a bounded time,
// then reported (the file's owner can hold a lock for ever).
#[test]
fn lock_wait_is_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("f");
    std::fs::write(&path, b"x").unwrap();
    let holder = std::fs::File::open(&path).unwrap();
    holder.lock().unwrap();
    let other = std::fs::File::open(&path).unwrap();
    let soon = || std::time::Instant::now() + std::time::Duration::from_millis(100);
    let e = super::open::lock_by(&other, soon()).unwrap_err();
    assert!(e.to_string().contains("held by another process"), "{e}");
    drop(holder);
    super::open::lock_by(&other, soon()).unwrap();
}
