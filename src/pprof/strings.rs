//! The profile's string table: each distinct string once, index 0 "".

use std::rc::Rc;

// foldhash: keys come from the recording, so a seeded hash (a crafted
// recording cannot aim at collisions), and a fast one.
use foldhash::HashMap;

/// The string table: index 0 is "".
#[derive(Debug)]
pub struct Strings {
    ids: HashMap<Rc<str>, i64>,
    list: Vec<Rc<str>>,
}

impl Default for Strings {
    fn default() -> Strings {
        let empty: Rc<str> = Rc::from("");
        Strings {
            ids: HashMap::from_iter([(empty.clone(), 0)]),
            list: vec![empty],
        }
    }
}

impl Strings {
    /// The index of `s`, added if new.
    pub fn id(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.ids.get(s) {
            return i;
        }
        let rc: Rc<str> = Rc::from(s);
        let i = self.list.len() as i64;
        self.ids.insert(rc.clone(), i);
        self.list.push(rc);
        i
    }

    /// The index of bytes shown as text (invalid UTF-8 replaced: the
    /// profile's strings must be UTF-8).
    pub fn id_bytes(&mut self, b: &[u8]) -> i64 {
        self.id(&String::from_utf8_lossy(b))
    }

    /// The string of index `i` (one this table gave).
    pub fn get(&self, i: i64) -> &str {
        &self.list[i as usize]
    }

    /// The table as the profile's `string_table`.
    pub fn table(&self) -> Vec<String> {
        self.list.iter().map(|s| s.to_string()).collect()
    }
}
