//! A snapshot's function names, kept compressed.
//!
//! A program's snapshot names every function it has: coreutils' multicall
//! program 84 195 of them, 13.7 MB of text, kept in memory for as long as
//! a run may judge or record its tests. Most of it is never read again: a
//! name is asked for when a function new to the table is interned, or for
//! a reason shown to people. So the names are kept in blocks of
//! [`BLOCK`], each compressed with zstd (13.7 MB in 2.3 MB), and a block
//! is unpacked when one of its names is asked for. On the wire they are
//! a `Vec<String>`'s (postcard: a length, then each string), so a stored
//! snapshot reads as before.

use serde::de::{Error as _, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Names to a block: larger blocks compress better and cost more to unpack
/// for one name (64: 6× smaller, 13 µs a block).
pub const BLOCK: usize = 64;
/// zstd's fastest level: compressing is paid at every load.
const LEVEL: i32 = 1;

/// Names by index, compressed in blocks.
#[derive(Clone)]
pub struct Names {
    /// The full blocks, each its names joined and compressed.
    blocks: Vec<Box<[u8]>>,
    /// Each full block's joined length.
    raw_lens: Vec<u32>,
    /// The last block, not full yet: kept as it is.
    open: String,
    /// Where each name ends in its block.
    ends: Vec<u32>,
    /// Whether every name sorts strictly after the one before.
    ascending: bool,
    /// The last name pushed, for `ascending`.
    last: String,
}

/// The same names: `last` only serves the pushing.
impl PartialEq for Names {
    fn eq(&self, other: &Names) -> bool {
        self.ends == other.ends
            && self.open == other.open
            && self.raw_lens == other.raw_lens
            && self.blocks == other.blocks
    }
}

impl Eq for Names {}

impl Default for Names {
    fn default() -> Names {
        Names {
            blocks: Vec::new(),
            raw_lens: Vec::new(),
            open: String::new(),
            ends: Vec::new(),
            ascending: true,
            last: String::new(),
        }
    }
}

impl Names {
    /// How many names it holds.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether it holds no name.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The name at `i` (`None` past the end, or for a block that does not
    /// unpack, which only damaged memory could cause).
    pub fn get(&self, i: usize) -> Option<String> {
        if i >= self.len() {
            return None;
        }
        let block = i / BLOCK;
        let unpacked;
        let text = match self.blocks.get(block) {
            Some(packed) => {
                unpacked = self.unpack(block, packed)?;
                unpacked.as_str()
            }
            None => self.open.as_str(),
        };
        Some(text.get(self.span(i))?.to_owned())
    }

    /// Every name in order, each block unpacked once.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = String> + '_ {
        let mut current: (usize, String) = (usize::MAX, String::new());
        (0..self.len()).map(move |i| {
            let block = i / BLOCK;
            let text = match self.blocks.get(block) {
                Some(packed) => {
                    if current.0 != block {
                        current = (block, self.unpack(block, packed).unwrap_or_default());
                    }
                    current.1.as_str()
                }
                None => self.open.as_str(),
            };
            text.get(self.span(i)).unwrap_or_default().to_owned()
        })
    }

    fn span(&self, i: usize) -> std::ops::Range<usize> {
        let end = self.ends[i] as usize;
        let start = match i % BLOCK {
            0 => 0,
            _ => self.ends[i - 1] as usize,
        };
        start..end
    }

    fn unpack(&self, block: usize, packed: &[u8]) -> Option<String> {
        let raw = zstd::bulk::decompress(packed, *self.raw_lens.get(block)? as usize).ok()?;
        String::from_utf8(raw).ok()
    }

    /// Appends a name; `false` when its block would pass 4 GiB, which no
    /// program's names come near (nothing is kept), or when the full block
    /// does not compress (the names are then not to be used).
    #[must_use]
    pub fn push(&mut self, name: &str) -> bool {
        let Some(end) = u32::try_from(self.open.len() + name.len()).ok() else {
            return false;
        };
        if !self.ends.is_empty() && self.last.as_str() >= name {
            self.ascending = false;
        }
        self.last.clear();
        self.last.push_str(name);
        self.open.push_str(name);
        self.ends.push(end);
        if self.ends.len().is_multiple_of(BLOCK) {
            let Ok(packed) = zstd::bulk::compress(self.open.as_bytes(), LEVEL) else {
                return false;
            };
            self.blocks.push(packed.into_boxed_slice());
            self.raw_lens.push(end);
            self.open.clear();
        }
        true
    }

    /// Whether every name sorts strictly after the one before.
    pub fn strictly_ascending(&self) -> bool {
        self.ascending
    }

    /// The index of `name`, if the names are sorted and hold it.
    pub fn binary_search(&self, name: &str) -> Result<usize, usize> {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let mid = low + (high - low) / 2;
            match self.get(mid).unwrap_or_default().as_str().cmp(name) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(low)
    }

    /// Gives back what the growing left spare: a snapshot is kept for the
    /// whole run.
    fn shrink_to_fit(&mut self) {
        self.blocks.shrink_to_fit();
        self.raw_lens.shrink_to_fit();
        self.ends.shrink_to_fit();
        self.open.shrink_to_fit();
        self.last = String::new();
    }
}

impl fmt::Debug for Names {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<S: AsRef<str>> FromIterator<S> for Names {
    /// # Panics
    /// If a block of names passes 4 GiB, or zstd cannot compress one.
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Names {
        let mut names = Names::default();
        for name in iter {
            assert!(names.push(name.as_ref()), "names past 4 GiB");
        }
        names.shrink_to_fit();
        names
    }
}

impl Serialize for Names {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Names {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Names, D::Error> {
        deserializer.deserialize_seq(NamesVisitor)
    }
}

struct NamesVisitor;

impl<'de> Visitor<'de> for NamesVisitor {
    type Value = Names;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of function names")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Names, A::Error> {
        let mut names = Names::default();
        // The length is the input's claim: reserved only up to what a
        // real program has, never on its word alone.
        names
            .ends
            .reserve(seq.size_hint().unwrap_or(0).min(1 << 20));
        while let Some(Appended(ok)) = seq.next_element_seed(Append(&mut names))? {
            if !ok {
                return Err(A::Error::custom("a block of function names past 4 GiB"));
            }
        }
        names.shrink_to_fit();
        Ok(names)
    }
}

/// Deserialises one name straight into the buffer: postcard hands it over
/// borrowed, so no `String` is made for it.
struct Append<'a>(&'a mut Names);
struct Appended(bool);

impl<'de> serde::de::DeserializeSeed<'de> for Append<'_> {
    type Value = Appended;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Appended, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for Append<'_> {
    type Value = Appended;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a function name")
    }

    fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<Appended, E> {
        Ok(Appended(self.0.push(name)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_what_a_list_of_strings_does() {
        let list = vec!["_ZN1a".to_owned(), String::new(), "main".to_owned()];
        let names: Names = list.iter().collect();
        assert_eq!(names.len(), 3);
        let got: Vec<String> = (0..3).filter_map(|i| names.get(i)).collect();
        assert_eq!(got, list);
        let wire = postcard::to_stdvec(&names).unwrap();
        assert_eq!(wire, postcard::to_stdvec(&list).unwrap(), "the same bytes");
        let back: Names = postcard::from_bytes(&wire).unwrap();
        assert_eq!(back, names);
        assert!(!names.strictly_ascending(), "\"\" sorts before \"_ZN1a\"");
        let sorted: Names = ["", "_ZN1a", "main"].into_iter().collect();
        assert!(sorted.strictly_ascending());
        assert_eq!(sorted.binary_search("main"), Ok(2));
        assert_eq!(sorted.binary_search("b"), Err(2));
        assert_eq!(sorted.get(3), None);
    }

    #[test]
    fn names_over_many_blocks_read_back_one_by_one_and_in_order() {
        let list: Vec<String> = (0..BLOCK * 3 + 5)
            .map(|i| format!("_ZN4core3fmt{i:05}17h0123456789abcdefE"))
            .collect();
        let names: Names = list.iter().collect();
        assert_eq!(names.blocks.len(), 3, "three full blocks, packed");
        assert!(names.strictly_ascending());
        assert_eq!(names.iter().collect::<Vec<_>>(), list);
        for i in [0, BLOCK - 1, BLOCK, 2 * BLOCK + 7, BLOCK * 3 + 4] {
            assert_eq!(names.get(i).as_ref(), Some(&list[i]));
        }
        assert_eq!(names.binary_search(&list[BLOCK + 1]), Ok(BLOCK + 1));
        let wire = postcard::to_stdvec(&names).unwrap();
        assert_eq!(wire, postcard::to_stdvec(&list).unwrap());
        assert_eq!(postcard::from_bytes::<Names>(&wire).unwrap(), names);
        // Out of order across a block's edge.
        let mut swapped = list.clone();
        swapped.swap(BLOCK - 1, BLOCK);
        assert!(!swapped.iter().collect::<Names>().strictly_ascending());
        let mut repeated = list;
        repeated[BLOCK] = repeated[BLOCK - 1].clone();
        assert!(!repeated.iter().collect::<Names>().strictly_ascending());
    }

    #[test]
    fn a_list_cut_short_is_an_error_not_a_panic() {
        let wire = postcard::to_stdvec(&vec!["abc", "def"]).unwrap();
        for cut in 0..wire.len() {
            assert!(postcard::from_bytes::<Names>(&wire[..cut]).is_err());
        }
        // A length claiming far more names than follow.
        assert!(postcard::from_bytes::<Names>(&[0xff, 0xff, 0xff, 0x0f, 1, b'a']).is_err());
    }
}
