//! Byte order: the one reader and the one writer of fixed-size integers used
//! for perf.data and ELF, in either order. Depends on nothing of ours.

/// Byte order of a perf.data or ELF file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endian {
    /// Little-endian (x86-64, arm64, ...).
    Little,
    /// Big-endian (s390x, ...).
    Big,
}

impl Endian {
    /// Big-endian when `big` is true, else little-endian.
    pub fn big_if(big: bool) -> Endian {
        if big {
            Endian::Big
        } else {
            Endian::Little
        }
    }

    /// This machine's byte order.
    pub const NATIVE: Endian = if cfg!(target_endian = "big") {
        Endian::Big
    } else {
        Endian::Little
    };

    /// `v` as bytes in this order.
    pub fn u16_bytes(self, v: u16) -> [u8; 2] {
        match self {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        }
    }

    /// `v` as bytes in this order.
    pub fn u32_bytes(self, v: u32) -> [u8; 4] {
        match self {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        }
    }

    /// `v` as bytes in this order.
    pub fn u64_bytes(self, v: u64) -> [u8; 8] {
        match self {
            Endian::Little => v.to_le_bytes(),
            Endian::Big => v.to_be_bytes(),
        }
    }
}

/// Appends fixed-size integers in a chosen byte order.
pub trait PutExt {
    /// Appends a u16.
    fn put_u16(&mut self, e: Endian, v: u16);
    /// Appends a u32.
    fn put_u32(&mut self, e: Endian, v: u32);
    /// Appends a u64.
    fn put_u64(&mut self, e: Endian, v: u64);
    /// Appends zero bytes until the length is a multiple of `align`.
    fn pad_to(&mut self, align: usize);
}

impl PutExt for Vec<u8> {
    fn put_u16(&mut self, e: Endian, v: u16) {
        self.extend_from_slice(&e.u16_bytes(v));
    }
    fn put_u32(&mut self, e: Endian, v: u32) {
        self.extend_from_slice(&e.u32_bytes(v));
    }
    fn put_u64(&mut self, e: Endian, v: u64) {
        self.extend_from_slice(&e.u64_bytes(v));
    }
    fn pad_to(&mut self, align: usize) {
        let pad = (align - self.len() % align) % align;
        self.resize(self.len() + pad, 0);
    }
}

/// Reads integers of a given byte order from a slice; `None` when the value
/// would run past its end (never a panic, whatever the offset).
#[derive(Debug, Clone, Copy)]
pub struct Rd(pub Endian);

impl Rd {
    fn array<const N: usize>(b: &[u8], off: usize) -> Option<[u8; N]> {
        b.get(off..off.checked_add(N)?)?.try_into().ok()
    }
    /// u16 at `off`.
    pub fn u16(self, b: &[u8], off: usize) -> Option<u16> {
        let a = Self::array(b, off)?;
        Some(match self.0 {
            Endian::Little => u16::from_le_bytes(a),
            Endian::Big => u16::from_be_bytes(a),
        })
    }
    /// u32 at `off`.
    pub fn u32(self, b: &[u8], off: usize) -> Option<u32> {
        let a = Self::array(b, off)?;
        Some(match self.0 {
            Endian::Little => u32::from_le_bytes(a),
            Endian::Big => u32::from_be_bytes(a),
        })
    }
    /// u64 at `off`.
    pub fn u64(self, b: &[u8], off: usize) -> Option<u64> {
        let a = Self::array(b, off)?;
        Some(match self.0 {
            Endian::Little => u64::from_le_bytes(a),
            Endian::Big => u64::from_be_bytes(a),
        })
    }
}

/// The bytes of `b` up to its first NUL (all of it when there is none).
pub fn cstr(b: &[u8]) -> &[u8] {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    &b[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    // Writer and reader agree in both orders, and reads past the end are None.
    #[test]
    fn round_trip_and_bounds() {
        for e in [Endian::Little, Endian::Big] {
            let mut b = Vec::new();
            b.put_u16(e, 0x0102);
            b.put_u32(e, 0x0304_0506);
            b.put_u64(e, 0x0708_090a_0b0c_0d0e);
            b.pad_to(8);
            assert_eq!(b.len(), 16);
            let r = Rd(e);
            assert_eq!(r.u16(&b, 0), Some(0x0102));
            assert_eq!(r.u32(&b, 2), Some(0x0304_0506));
            assert_eq!(r.u64(&b, 6), Some(0x0708_090a_0b0c_0d0e));
            assert_eq!(r.u64(&b, 9), None);
            assert_eq!(r.u32(&b, usize::MAX), None);
        }
        assert_eq!(Endian::Big.u32_bytes(1), [0, 0, 0, 1]);
        assert_eq!(cstr(b"ab\0c"), b"ab");
        assert_eq!(cstr(b"abc"), b"abc");
    }
}
