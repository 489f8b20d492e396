//! Symbol names demangled here, once per distinct name and within bounds,
//! instead of by blazesym, which demangles once per address with
//! cpp_demangle's default options: a crafted C++ name whose substitutions
//! each refer twice to the one before unpacks exponentially (20 levels in
//! 206 bytes: 54 MB and 0.3 s per address; a hot function over 3,700
//! addresses took 20 minutes). Here the output is capped ([`MAX_NAME`]),
//! so the demangler stops as soon as it is exceeded, and a name is
//! demangled once however many addresses it names.

use std::collections::HashMap;
use std::fmt::{self, Write};

use cpp_demangle::{DemangleOptions, ParseOptions, Symbol};

use super::isolate::isolated;

/// Longest demangled name kept; a longer one stays mangled. Real C++ names
/// of heavily templated code run to a few KB.
pub const MAX_NAME: usize = 64 << 10;
/// Most demangled bytes made in one conversion, all names together (up to
/// [`MAX_NAME`] each from names of a few hundred bytes); names met after
/// that stay mangled.
pub const MAX_TOTAL: usize = 64 << 20;
/// cpp_demangle's parser recursion limit (its default, which keeps the
/// stack of a debug build safe), set here so a new default cannot raise it.
const PARSE_DEPTH: u32 = 96;
/// cpp_demangle's demangler recursion limit (its default, likewise).
const DEMANGLE_DEPTH: u32 = 128;

/// Demangles names, remembering each answer.
#[derive(Debug, Default)]
pub struct Demangler {
    /// Mangled name -> demangled, or `None`: shown as it is.
    done: HashMap<Box<str>, Option<Box<str>>>,
    /// Demangled bytes made so far.
    made: usize,
}

impl Demangler {
    /// `raw` demangled ([`demangle`]), or `raw` itself when it is not a
    /// mangled name, is over the bounds, or the budget is spent.
    pub fn name(&mut self, raw: &str) -> String {
        if let Some(known) = self.done.get(raw) {
            return known.as_deref().unwrap_or(raw).to_string();
        }
        let d = (self.made < MAX_TOTAL).then(|| demangle(raw)).flatten();
        self.made += d.as_ref().map_or(0, String::len);
        let shown = d.as_deref().unwrap_or(raw).to_string();
        self.done.insert(raw.into(), d.map(String::into_boxed_str));
        shown
    }
}

/// `raw` demangled as a Rust name (legacy or v0, without the hash) or else
/// as C++ (as blazesym tried them), or `None`: not mangled, longer than
/// [`MAX_NAME`] demangled, or the demangler panicked.
pub fn demangle(raw: &str) -> Option<String> {
    let found = isolated(|| {
        if let Ok(d) = rustc_demangle::try_demangle(raw) {
            return capped(|w| write!(w, "{d:#}"));
        }
        let parse = ParseOptions::default().recursion_limit(PARSE_DEPTH);
        let sym = Symbol::new_with_options(raw.as_bytes(), &parse).ok()?;
        let options = DemangleOptions::new().recursion_limit(DEMANGLE_DEPTH);
        capped(|w| sym.structured_demangle(w, &options))
    });
    found.ok().flatten()
}

/// What `f` writes, or `None` when it fails or writes over [`MAX_NAME`]
/// bytes (the write that would pass it fails, which stops the demangler).
fn capped(f: impl FnOnce(&mut Capped) -> fmt::Result) -> Option<String> {
    let mut w = Capped(String::new());
    f(&mut w).ok()?;
    Some(w.0)
}

/// A string that refuses to grow past [`MAX_NAME`] bytes.
struct Capped(String);

impl Write for Capped {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.0.len() + s.len() > MAX_NAME {
            return Err(fmt::Error);
        }
        self.0.push_str(s);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `_Z1f1a` and `levels` parameters, each a pointer to a function
    /// taking the one before twice: the demangled name doubles per level.
    fn exponential(levels: usize) -> String {
        let b36 = |mut v: usize| {
            let digits = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
            let mut out = Vec::new();
            loop {
                out.insert(0, digits[v % 36]);
                v /= 36;
                if v == 0 {
                    break String::from_utf8(out).unwrap();
                }
            }
        };
        let mut name = String::from("_Z1f1a");
        for i in 1..=levels {
            let back = match i {
                1 => "S_".to_string(),
                _ => format!("S{}_", b36(2 * (i - 1) - 1)),
            };
            name.push_str(&format!("PFv{back}{back}E"));
        }
        name
    }

    // C++ and Rust (legacy and v0) names are demangled as blazesym did;
    // names that are not mangled are kept.
    #[test]
    fn demangles_cpp_and_rust() {
        let mut d = Demangler::default();
        assert_eq!(
            d.name("_ZN2ns5outerIiEEmT_PKc"),
            "unsigned long ns::outer<int>(int, char const*)"
        );
        assert_eq!(d.name("_ZN5space3fooEibc"), "space::foo(int, bool, char)");
        assert_eq!(
            d.name("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(d.name("_RNvNtCs1234_7mycrate3foo3bar"), "mycrate::foo::bar");
        for plain in ["main", "burn_work", "_Zunfinished", ""] {
            assert_eq!(d.name(plain), plain);
        }
    }

    // A name that demangles exponentially stays mangled, and fast: the
    // demangler stops at the cap (20 levels: 54 MB and 0.3 s uncapped in
    // a release build); a small one of the same shape is demangled.
    #[test]
    fn exponential_names_stay_mangled_quickly() {
        let small = exponential(2);
        assert_eq!(
            demangle(&small).as_deref(),
            Some("f(a, void (*)(a, a), void (*)(void (*)(a, a), void (*)(a, a)))")
        );
        let t = std::time::Instant::now();
        let big = exponential(20);
        assert_eq!(demangle(&big), None);
        let mut d = Demangler::default();
        for _ in 0..1000 {
            assert_eq!(d.name(&big), big);
        }
        assert!(t.elapsed().as_secs_f64() < 2.0, "{:?}", t.elapsed());
    }

    // After MAX_TOTAL bytes of demangled names, new names stay mangled;
    // those already demangled still are.
    #[test]
    fn the_budget_ends_demangling() {
        let mut d = Demangler {
            made: MAX_TOTAL - 1,
            ..Default::default()
        };
        assert_eq!(d.name("_ZN5space3fooEibc"), "space::foo(int, bool, char)");
        assert_eq!(d.name("_ZN5space3barEv"), "_ZN5space3barEv");
        assert_eq!(d.name("_ZN5space3fooEibc"), "space::foo(int, bool, char)");
    }
}
