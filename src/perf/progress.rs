//! Progress on stderr for long passes over big inputs.

use std::io::{self, IsTerminal};

/// Progress on stderr for big inputs when stderr is a terminal.
pub(crate) struct Progress {
    total: u64,
    next: u64,
    on: bool,
    what: &'static str,
}

impl Progress {
    pub(crate) fn new(what: &'static str, total: u64) -> Progress {
        Progress {
            total,
            next: 0,
            on: total >= 64 << 20 && io::stderr().is_terminal(),
            what,
        }
    }
    pub(crate) fn at(&mut self, pos: u64) {
        if self.on && pos >= self.next {
            eprint!(
                "\rmmap2-synth: {} {:3}%",
                self.what,
                pos * 100 / self.total.max(1)
            );
            self.next = pos + (self.total / 100).max(1 << 20);
        }
    }
    pub(crate) fn done(&self) {
        if self.on {
            eprintln!("\rmmap2-synth: {} 100%", self.what);
        }
    }
}
