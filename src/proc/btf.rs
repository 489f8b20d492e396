//! A reader of BTF, the kernel's description of its own types
//! (`/sys/kernel/btf/vmlinux`), for just what the task iterator needs: the
//! id of a named function or struct, a struct's size, and the byte offset
//! of a named member (also inside anonymous structs and unions). A pure
//! parser over bytes: every offset and count in the blob is checked against
//! its length, and the byte order follows the magic number.

/// Why a BTF blob cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BtfError {
    #[error("no BTF magic (0xeb9f) at offset 0")]
    Magic,
    #[error("header or section out of bounds (at offset {0})")]
    Bounds(usize),
    #[error("type {0}: unknown kind {1}")]
    Kind(u32, u32),
}

/// BTF kinds this reader distinguishes (`BTF_KIND_*`).
mod kind {
    pub const INT: u32 = 1;
    pub const PTR: u32 = 2;
    pub const ARRAY: u32 = 3;
    pub const STRUCT: u32 = 4;
    pub const UNION: u32 = 5;
    pub const ENUM: u32 = 6;
    pub const TYPEDEF: u32 = 8;
    pub const VOLATILE: u32 = 9;
    pub const CONST: u32 = 10;
    pub const RESTRICT: u32 = 11;
    pub const FUNC: u32 = 12;
    pub const FUNC_PROTO: u32 = 13;
    pub const VAR: u32 = 14;
    pub const DATASEC: u32 = 15;
    pub const DECL_TAG: u32 = 17;
    pub const TYPE_TAG: u32 = 18;
    pub const ENUM64: u32 = 19;
}

/// A parsed BTF blob: where each type starts, and the strings.
pub struct Btf<'a> {
    data: &'a [u8],
    big_endian: bool,
    /// Offset in `data` of type id `i + 1`.
    starts: Vec<u32>,
    strings: &'a [u8],
}

/// A member found by [`Btf::member`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// Byte offset from the start of the outer struct.
    pub offset: u32,
    /// Its type id, with typedefs and qualifiers skipped.
    pub type_id: u32,
}

impl<'a> Btf<'a> {
    /// Indexes the types of `data` (one pass, no copies).
    pub fn parse(data: &'a [u8]) -> Result<Btf<'a>, BtfError> {
        let big_endian = match data.get(..2) {
            Some([0x9f, 0xeb]) => false,
            Some([0xeb, 0x9f]) => true,
            _ => return Err(BtfError::Magic),
        };
        let mut btf = Btf {
            data,
            big_endian,
            starts: Vec::new(),
            strings: &[],
        };
        let hdr_len = btf.u32_at(4).ok_or(BtfError::Bounds(4))? as usize;
        let field = |i: usize| btf.u32_at(8 + 4 * i).ok_or(BtfError::Bounds(8 + 4 * i));
        let (type_off, type_len) = (field(0)? as usize, field(1)? as usize);
        let (str_off, str_len) = (field(2)? as usize, field(3)? as usize);
        let section = |off: usize, len: usize| {
            let start = hdr_len.checked_add(off).ok_or(BtfError::Bounds(12))?;
            let end = start.checked_add(len).ok_or(BtfError::Bounds(12))?;
            if end > data.len() {
                return Err(BtfError::Bounds(start));
            }
            Ok((start, end))
        };
        let (types_start, types_end) = section(type_off, type_len)?;
        let (s0, s1) = section(str_off, str_len)?;
        btf.strings = &data[s0..s1];
        btf.starts = match big_endian {
            true => index_types::<true>(data, types_start, types_end)?,
            false => index_types::<false>(data, types_start, types_end)?,
        };
        Ok(btf)
    }

    fn u32_at(&self, at: usize) -> Option<u32> {
        let b: [u8; 4] = self.data.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(match self.big_endian {
            true => u32::from_be_bytes(b),
            false => u32::from_le_bytes(b),
        })
    }

    /// (kind, vlen, kind_flag, size_or_type) of type `id`, and where its
    /// data after the header starts.
    fn head(&self, id: u32) -> Option<(u32, usize, bool, u32, usize)> {
        let at = *self.starts.get((id as usize).checked_sub(1)?)? as usize;
        let info = self.u32_at(at + 4)?;
        let size_or_type = self.u32_at(at + 8)?;
        Some((
            (info >> 24) & 0x1f,
            (info & 0xffff) as usize,
            info >> 31 == 1,
            size_or_type,
            at + 12,
        ))
    }

    fn name(&self, name_off: u32) -> &'a [u8] {
        let rest = self.strings.get(name_off as usize..).unwrap_or(&[]);
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        &rest[..end]
    }

    /// The name of type `id`; empty when it has none.
    pub fn name_of(&self, id: u32) -> &'a [u8] {
        let at = self.starts.get((id as usize).wrapping_sub(1)).copied();
        at.and_then(|at| self.u32_at(at as usize))
            .map_or(&[][..], |off| self.name(off))
    }

    /// For each of `wanted` (a name, and whether it is a FUNC rather than
    /// a STRUCT), the first type of that kind and name, in one pass over
    /// the types (vmlinux has ~150,000: a pass per name cost 0.1 ms each).
    pub fn find_all(&self, wanted: &[(&str, bool)]) -> Vec<Option<u32>> {
        let mut found = vec![None; wanted.len()];
        // which of the first 64 wanted names start with each byte: most
        // types are ruled out by one lookup
        let mut by_first = [0u64; 256];
        for (w, (name, _)) in wanted.iter().enumerate().take(64) {
            if let Some(&b) = name.as_bytes().first() {
                by_first[usize::from(b)] |= 1 << w;
            }
        }
        let mut left = by_first.iter().fold(0u64, |a, m| a | m);
        for (i, &at) in self.starts.iter().enumerate() {
            if left == 0 {
                break;
            }
            let at = at as usize;
            let Some(info) = self.u32_at(at + 4) else {
                continue;
            };
            let k = (info >> 24) & 0x1f;
            if k != kind::STRUCT && k != kind::FUNC {
                continue;
            }
            let name_off = self.u32_at(at).unwrap_or(0) as usize;
            let rest = self.strings.get(name_off..).unwrap_or(&[]);
            let Some(&first) = rest.first() else {
                continue;
            };
            let mut candidates = by_first[usize::from(first)] & left;
            while candidates != 0 {
                let w = candidates.trailing_zeros() as usize;
                candidates &= candidates - 1;
                let (name, func) = wanted[w];
                let named = rest.get(..name.len()) == Some(name.as_bytes())
                    && rest.get(name.len()).is_none_or(|&b| b == 0);
                if named && (k == kind::FUNC) == func {
                    found[w] = Some(i as u32 + 1);
                    left &= !(1 << w);
                }
            }
        }
        found
    }

    /// The size in bytes of type `id` (typedefs and qualifiers skipped): a
    /// struct, union, integer or enum's as BTF records it, a pointer's as
    /// this machine's; `None` for other kinds.
    pub fn size_of(&self, id: u32) -> Option<u32> {
        let (k, _, _, size, _) = self.head(self.resolve(id))?;
        match k {
            kind::STRUCT | kind::UNION | kind::INT | kind::ENUM | kind::ENUM64 => Some(size),
            kind::PTR => Some(std::mem::size_of::<usize>() as u32),
            _ => None,
        }
    }

    /// `id` with typedefs, qualifiers and type tags skipped.
    pub fn resolve(&self, mut id: u32) -> u32 {
        const SKIPPED: [u32; 5] = [
            kind::TYPEDEF,
            kind::VOLATILE,
            kind::CONST,
            kind::RESTRICT,
            kind::TYPE_TAG,
        ];
        for _ in 0..32 {
            match self.head(id) {
                Some((k, _, _, next, _)) if SKIPPED.contains(&k) => id = next,
                _ => break,
            }
        }
        id
    }

    /// The element count and element type of array type `id`.
    pub fn array(&self, id: u32) -> Option<(u32, u32)> {
        match self.head(self.resolve(id))? {
            (kind::ARRAY, _, _, _, data) => {
                Some((self.u32_at(data + 8)?, self.resolve(self.u32_at(data)?)))
            }
            _ => None,
        }
    }

    /// Member `name` of struct or union `id`, searched also inside its
    /// anonymous struct and union members (as C lets one name them).
    pub fn member(&self, id: u32, name: &str) -> Option<Member> {
        self.member_in(self.resolve(id), name.as_bytes(), 0, 8)
    }

    fn member_in(&self, id: u32, name: &[u8], base: u32, depth: u32) -> Option<Member> {
        let (k, vlen, kind_flag, _, data) = self.head(id)?;
        if !matches!(k, kind::STRUCT | kind::UNION) || depth == 0 {
            return None;
        }
        for i in 0..vlen {
            let at = data + 12 * i;
            let (name_off, ty, off) =
                (self.u32_at(at)?, self.u32_at(at + 4)?, self.u32_at(at + 8)?);
            let bits = if kind_flag { off & 0x00ff_ffff } else { off };
            let (bitfield, offset) = (kind_flag && off >> 24 != 0, base + bits / 8);
            let member_name = self.name(name_off);
            if member_name == name && !bitfield && bits % 8 == 0 {
                return Some(Member {
                    offset,
                    type_id: self.resolve(ty),
                });
            }
            if member_name.is_empty() {
                if let Some(m) = self.member_in(self.resolve(ty), name, offset, depth - 1) {
                    return Some(m);
                }
            }
        }
        None
    }
}

/// Where each type of the section `data[start..end]` begins (type id
/// `i + 1` at the `i`-th), in the byte order `BE` (one copy of the loop
/// per order: vmlinux has ~150,000 types, and a branch on the order per
/// read was a third of the parse).
fn index_types<const BE: bool>(
    data: &[u8],
    start: usize,
    end: usize,
) -> Result<Vec<u32>, BtfError> {
    let u32_at = |at: usize| -> u32 {
        let b: [u8; 4] = data[at..at + 4].try_into().expect("4 bytes");
        match BE {
            true => u32::from_be_bytes(b),
            false => u32::from_le_bytes(b),
        }
    };
    let mut at = start;
    let mut starts = Vec::with_capacity((end - start) / 24);
    while at < end {
        let id = starts.len() as u32 + 1;
        // (`end` is within `data`: the header's sections were checked)
        if at + 12 > end {
            return Err(BtfError::Bounds(at));
        }
        let info = u32_at(at + 4);
        let (k, vlen) = ((info >> 24) & 0x1f, (info & 0xffff) as usize);
        let extra = match k {
            kind::INT | kind::VAR | kind::DECL_TAG => 4,
            kind::ARRAY => 12,
            kind::STRUCT | kind::UNION | kind::DATASEC | kind::ENUM64 => 12 * vlen,
            kind::ENUM | kind::FUNC_PROTO => 8 * vlen,
            // FWD 7, FLOAT 16: nothing after the header
            kind::PTR | 7 | kind::TYPEDEF..=kind::FUNC | 16 | kind::TYPE_TAG => 0,
            _ => return Err(BtfError::Kind(id, k)),
        };
        starts.push(at as u32);
        at += 12 + extra;
    }
    if at != end {
        return Err(BtfError::Bounds(at));
    }
    Ok(starts)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds a little-endian BTF blob from (kind, vlen, size_or_type,
    /// name, extra words) types.
    pub(crate) fn blob(types: &[(u32, u32, u32, &str, Vec<u32>)], extra_names: &[&str]) -> Vec<u8> {
        let mut strings = vec![0u8];
        let name_off = |s: &str, strings: &mut Vec<u8>| {
            if s.is_empty() {
                return 0;
            }
            let off = strings.len() as u32;
            strings.extend_from_slice(s.as_bytes());
            strings.push(0);
            off
        };
        let mut t = Vec::new();
        for (k, vlen, sz, name, extra) in types {
            let off = name_off(name, &mut strings);
            for w in [off, (k << 24) | vlen, *sz] {
                t.extend_from_slice(&w.to_le_bytes());
            }
            for w in extra {
                t.extend_from_slice(&w.to_le_bytes());
            }
        }
        for n in extra_names {
            name_off(n, &mut strings);
        }
        let mut out = Vec::new();
        out.extend_from_slice(&[0x9f, 0xeb, 1, 0]);
        for w in [
            24u32,
            0,
            t.len() as u32,
            t.len() as u32,
            strings.len() as u32,
        ] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&t);
        out.extend_from_slice(&strings);
        out
    }

    /// The string offset `name` will get in [`blob`] after `before`.
    fn off(before: &[&str], name: &str) -> u32 {
        let _ = name;
        1 + before.iter().map(|s| s.len() as u32 + 1).sum::<u32>()
    }

    // Members are found by name, also inside an anonymous union, with
    // their byte offsets; typedefs resolve; sizes of structs, ints and
    // pointers.
    #[test]
    fn finds_members_functions_and_pointees() {
        // 1 int, 2 struct inner{a@0,b@4} (anon union), 3 struct task{x@0, anon@8 -> 2, p@16 -> 4},
        // 4 ptr -> 5, 5 typedef t -> 3, 6 func f, 7 array of 1 [16]
        let names = ["int", "task", "t", "f", "a", "b", "x", "p"];
        let n = |s: &str| off(&names[..names.iter().position(|x| *x == s).unwrap()], s);
        let types = vec![
            (kind::INT, 0, 4, "int", vec![32]),
            (kind::UNION, 2, 8, "", vec![n("a"), 1, 0, n("b"), 1, 32]),
            (
                kind::STRUCT,
                3,
                24,
                "task",
                vec![n("x"), 1, 0, 0, 2, 64, n("p"), 4, 128],
            ),
            (kind::PTR, 0, 5, "", vec![]),
            (kind::TYPEDEF, 0, 3, "t", vec![]),
            (kind::FUNC, 0, 0, "f", vec![]),
            (kind::ARRAY, 0, 0, "", vec![1, 1, 16]),
        ];
        let data = blob(&types, &["a", "b", "x", "p"]);
        let btf = Btf::parse(&data).unwrap();
        let one = |name: &str, func: bool| btf.find_all(&[(name, func)])[0];
        assert_eq!(one("task", false), Some(3));
        assert_eq!(one("f", true), Some(6));
        assert_eq!(one("task", true), None);
        // one pass for several; a prefix of a name ("ta") is not that name
        let all = btf.find_all(&[("task", false), ("f", true), ("ta", false), ("t", true)]);
        assert_eq!(all, vec![Some(3), Some(6), None, None]);
        assert_eq!(btf.size_of(3), Some(24));
        // an int's, a pointer's (this machine's), a typedef's (its target's)
        assert_eq!(btf.size_of(1), Some(4));
        assert_eq!(btf.size_of(4), Some(std::mem::size_of::<usize>() as u32));
        assert_eq!(btf.size_of(5), Some(24));
        assert_eq!(btf.size_of(6), None);
        assert_eq!(
            btf.member(3, "b"),
            Some(Member {
                offset: 12,
                type_id: 1
            })
        );
        assert_eq!(btf.member(3, "p").unwrap().offset, 16);
        assert_eq!(btf.resolve(5), 3);
        assert_eq!(btf.member(3, "nope"), None);
        assert_eq!(btf.array(7), Some((16, 1)));
    }

    // A blob in big-endian order (the magic tells) reads as its
    // little-endian twin: the same types, names and sizes.
    #[test]
    fn a_big_endian_blob_reads_as_its_little_endian_twin() {
        let types = vec![
            (kind::INT, 0, 4, "int", vec![32]),
            // one member, `t` (the third name), an int at 4 bytes
            (
                kind::STRUCT,
                1,
                8,
                "task",
                vec![off(&["int", "task"], "t"), 1, 32],
            ),
            (kind::FUNC, 0, 0, "t", vec![]),
        ];
        let le = blob(&types, &[]);
        let strings_at = 24 + u32::from_le_bytes(le[12..16].try_into().unwrap()) as usize;
        let mut be = le.clone();
        be[..2].copy_from_slice(&[0xeb, 0x9f]);
        for w in be[4..strings_at].chunks_exact_mut(4) {
            w.reverse();
        }
        let (a, b) = (Btf::parse(&le).unwrap(), Btf::parse(&be).unwrap());
        let wanted = [("task", false), ("t", true), ("int", false)];
        assert_eq!(a.find_all(&wanted), vec![Some(2), Some(3), None]);
        assert_eq!(b.find_all(&wanted), a.find_all(&wanted));
        assert_eq!(b.size_of(2), Some(8));
        let t = Member {
            offset: 4,
            type_id: 1,
        };
        assert_eq!((a.member(2, "t"), b.member(2, "t")), (Some(t), Some(t)));
        assert_eq!(b.name_of(3), b"t");
    }

    // Truncated, mis-sized or unknown-kind blobs are errors, never panics.
    #[test]
    fn bad_blobs_are_errors() {
        let good = blob(&[(kind::INT, 0, 4, "int", vec![32])], &[]);
        assert!(Btf::parse(&good).is_ok());
        assert_eq!(Btf::parse(b"xx").err(), Some(BtfError::Magic));
        for cut in 0..good.len() {
            assert!(Btf::parse(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad_kind = good.clone();
        bad_kind[24 + 7] = 30; // kind 30
        assert_eq!(Btf::parse(&bad_kind).err(), Some(BtfError::Kind(1, 30)));
        let mut long = good.clone();
        long[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Btf::parse(&long).is_err());
    }
}
