//! Strict JSON for the files that are a container's authority (`index.json`, the system
//! graph): an object that repeats a key is refused. serde_json (with `preserve_order`)
//! keeps the last of duplicate keys silently, so a hostile `index.json` could show one
//! representation to a reviewer and bind another; [`parse`] refuses it instead, naming
//! the key, line and column.

use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// Walks a document, refusing an object with a repeated key; builds nothing.
struct NoDuplicates;

impl<'de> DeserializeSeed<'de> for NoDuplicates {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NoDuplicates {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(NoDuplicates)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut keys: HashSet<String> = HashSet::new();
        while let Some(k) = map.next_key::<String>()? {
            if keys.contains(&k) {
                return Err(A::Error::custom(format!("duplicate key {k:?}")));
            }
            map.next_value_seed(NoDuplicates)?;
            keys.insert(k);
        }
        Ok(())
    }
}

/// Parse `bytes` as JSON, refusing any object that repeats a key.
pub fn parse(bytes: &[u8]) -> serde_json::Result<Value> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    NoDuplicates.deserialize(&mut de)?;
    de.end()?;
    serde_json::from_slice(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_refused_at_any_depth() {
        assert!(parse(br#"{"a": 1, "b": [{"c": 2, "d": 3}]}"#).is_ok());
        let e = parse(br#"{"a": 1, "a": 2}"#).unwrap_err().to_string();
        assert!(e.contains("duplicate key \"a\""), "{e}");
        let e = parse(br#"{"r": {"x@y": {}, "z": [1, {"k": 1, "k": 1}]}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("duplicate key \"k\""), "{e}");
        // Escaped spellings of the same key are the same key.
        assert!(parse(br#"{"a": 1, "\u0061": 2}"#).is_err());
        assert!(parse(b"{} x").is_err());
    }
}
