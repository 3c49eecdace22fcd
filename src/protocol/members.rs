//! The top-level members of a JSON object, read without copying them: each value as
//! the raw text it is, borrowed from the object's text, each name borrowed unless it
//! holds an escape; a member given twice is an error.
//!
//! Used by [`super::message`] to parse a message; knows nothing of JSON-RPC.

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
