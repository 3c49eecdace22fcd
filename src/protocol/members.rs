//! The top-level members of a JSON object, read without copying them: each value as
//! the raw text it is, borrowed from the object's text, each name borrowed unless it
//! holds an escape; a member given twice is an error.
//!
//! Used by [`super::message`] to parse a message, and by whoever rewrites one level of
//! a message part ([`object_members`], [`push_key`]); also the nesting check of raw
//! text ([`nests_deeper_than`]). Knows nothing of JSON-RPC.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// The members of an object, borrowed from its text: names unescaped only when they
/// hold an escape, values as the raw text they are.
pub(super) struct Members<'a>(pub(super) Vec<(Cow<'a, str>, &'a RawValue)>);

/// A member name, borrowed from the text unless it holds an escape.
struct Name<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// Up to this many members, duplicates are found by a scan; beyond, by a set.
const SCANNED_MEMBERS: usize = 16;

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut out: Vec<(Cow<'de, str>, &'de RawValue)> = Vec::with_capacity(4);
                // Duplicates are found by a scan of the few members a message has; a
                // hostile object of many members is checked by a set instead, so that
                // its cost stays linear.
                let mut names: Option<std::collections::HashSet<Cow<'de, str>>> = None;
                while let Some(Name(name)) = map.next_key::<Name<'de>>()? {
                    let value: &'de RawValue = map.next_value()?;
                    let duplicate = match &mut names {
                        Some(set) => !set.insert(name.clone()),
                        None => out.iter().any(|(k, _)| *k == name),
                    };
                    if duplicate {
                        return Err(de::Error::custom(format!("duplicate member `{name}`")));
                    }
                    out.push((name, value));
                    if names.is_none() && out.len() == SCANNED_MEMBERS {
                        names = Some(out.iter().map(|(k, _)| k.clone()).collect());
                    }
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// The members of the JSON object `text`, names unescaped (borrowed unless they held an
/// escape), values as their raw text, in order; `None` when `text` is no object or
/// names a member twice.
pub fn object_members(text: &str) -> Option<Vec<(Cow<'_, str>, &RawValue)>> {
    serde_json::from_str::<Members<'_>>(text).ok().map(|m| m.0)
}

/// Appends `name` as a JSON string: as it is when nothing in it needs an escape (the
/// usual member name, no allocation), else escaped.
pub fn push_key(out: &mut String, name: &str) {
    // `&`, not `&&`: every byte is looked at, with no branch per byte (names are short,
    // and nearly all are plain).
    let plain = name
        .bytes()
        .fold(true, |ok, b| ok & (b >= 0x20) & (b != b'"') & (b != b'\\'));
    if plain {
        out.push('"');
        out.push_str(name);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(name).expect("strings serialize"));
    }
}

/// The deepest nesting of arrays and objects mcpmux (and serde_json, by default)
/// reads.
pub const MAX_NESTING: usize = 128;

/// Whether the (valid) JSON text nests arrays and objects deeper than `max`. A plain
/// scan, no allocation: raw members are kept unparsed, so their depth is not otherwise
/// checked.
pub fn nests_deeper_than(json: &str, max: usize) -> bool {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for b in json.bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}
