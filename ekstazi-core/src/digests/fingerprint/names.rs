//! A snapshot's function names, kept in one buffer.
//!
//! A program's snapshot names every function it has: coreutils' multicall
//! program 84 195 of them, 13.7 MB of text. Kept as a `Vec<String>`, each
//! name also costs its own allocation and a 24-byte header; here all of
//! them share one buffer, and each costs 4 bytes where it ends. On the
//! wire they are the same as a `Vec<String>`'s (postcard: a length, then
//! each string), so a stored snapshot reads either way.

use serde::de::{Error as _, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Names by index, in one buffer.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Names {
    text: String,
    /// Where each name ends in `text`.
    ends: Vec<u32>,
}

impl Names {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)? as usize;
        let start = match i {
            0 => 0,
            _ => self.ends[i - 1] as usize,
        };
        self.text.get(start..end)
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        (0..self.len()).map(|i| &self[i])
    }

    /// Appends a name; `false` (and nothing kept) when the buffer would
    /// pass 4 GiB, which no program's names come near.
    #[must_use]
    pub fn push(&mut self, name: &str) -> bool {
        let Some(end) = u32::try_from(self.text.len() + name.len()).ok() else {
            return false;
        };
        self.text.push_str(name);
        self.ends.push(end);
        true
    }

    /// Whether every name sorts strictly after the one before.
    pub fn strictly_ascending(&self) -> bool {
        (1..self.len()).all(|i| self[i - 1] < self[i])
    }

    /// The index of `name`, if the names are sorted and hold it.
    pub fn binary_search(&self, name: &str) -> Result<usize, usize> {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let mid = low + (high - low) / 2;
            match self[mid].cmp(name) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(low)
    }
}

impl std::ops::Index<usize> for Names {
    type Output = str;

    fn index(&self, i: usize) -> &str {
        self.get(i).expect("a name's index")
    }
}

impl fmt::Debug for Names {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<S: AsRef<str>> FromIterator<S> for Names {
    /// # Panics
    /// If the names pass 4 GiB together.
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Names {
        let mut names = Names::default();
        for name in iter {
            assert!(names.push(name.as_ref()), "names past 4 GiB");
        }
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
                return Err(A::Error::custom("function names past 4 GiB"));
            }
        }
        // Grown by doubling: up to half of it would be slack, for as long
        // as the snapshot is kept.
        names.text.shrink_to_fit();
        names.ends.shrink_to_fit();
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
        assert_eq!((&names[0], &names[1], &names[2]), ("_ZN1a", "", "main"));
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
    fn a_list_cut_short_is_an_error_not_a_panic() {
        let wire = postcard::to_stdvec(&vec!["abc", "def"]).unwrap();
        for cut in 0..wire.len() {
            assert!(postcard::from_bytes::<Names>(&wire[..cut]).is_err());
        }
        // A length claiming far more names than follow.
        assert!(postcard::from_bytes::<Names>(&[0xff, 0xff, 0xff, 0x0f, 1, b'a']).is_err());
    }
}
