//! Bytes others control (paths and comms from recordings and /proc, event
//! names, file names, messages of libraries reading hostile files) made
//! safe to print: the one escaping every command uses for its output lines,
//! summaries, warnings and errors. Depends on nothing of ours.

use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A path or comm as printable text: valid UTF-8 is kept, except that a
/// backslash becomes `\\` and control characters (ESC, BEL, newline, C1),
/// line separators, bidi controls and bytes that are not UTF-8 become
/// `\xNN`, so every line printed stays one line, no terminal sequence gets
/// through, and the bytes can be recovered.
pub fn escape(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for chunk in b.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => s.push_str("\\\\"),
                c if c.is_control() || is_invisible(c) => {
                    let mut buf = [0u8; 4];
                    for byte in c.encode_utf8(&mut buf).bytes() {
                        let _ = write!(s, "\\x{byte:02x}");
                    }
                }
                c => s.push(c),
            }
        }
        for byte in chunk.invalid() {
            let _ = write!(s, "\\x{byte:02x}");
        }
    }
    s
}

/// A path as printable text ([`escape`] of its bytes).
pub fn escape_path(p: &Path) -> String {
    escape(p.as_os_str().as_bytes())
}

/// Line and paragraph separators and bidi controls (some tools split lines
/// on the former, terminals reorder text for the latter), and characters
/// that print as nothing (zero-width spaces and joiners, marks, the soft
/// hyphen, the byte order mark), with which two paths look the same.
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00ad}'
            | '\u{061c}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    // Paths keep UTF-8, and backslashes, control bytes and invalid UTF-8 are
    // escaped reversibly; a terminal's escape sequences lose their ESC/BEL.
    #[test]
    fn escaping() {
        // characters that print as nothing are shown, so look-alike paths
        // differ on screen
        assert_eq!(escape("a\u{200b}b".as_bytes()), "a\\xe2\\x80\\x8bb");
        assert_eq!(
            escape("\u{feff}x\u{ad}".as_bytes()),
            "\\xef\\xbb\\xbfx\\xc2\\xad"
        );
        assert_eq!(escape(b"/usr/lib/libc.so.6"), "/usr/lib/libc.so.6");
        assert_eq!(escape("/tmp/é x".as_bytes()), "/tmp/é x");
        assert_eq!(escape(b"a\\b\nc\xff"), "a\\\\b\\x0ac\\xff");
        assert_eq!(
            escape("x\u{2028}\u{202e}".as_bytes()),
            "x\\xe2\\x80\\xa8\\xe2\\x80\\xae"
        );
        assert_eq!(
            escape(b"\x1b[2J\x1b]0;t\x07\r\xc2\x9b"),
            "\\x1b[2J\\x1b]0;t\\x07\\x0d\\xc2\\x9b"
        );
        assert_eq!(escape_path(Path::new("/a\nb")), "/a\\x0ab");
    }
}
