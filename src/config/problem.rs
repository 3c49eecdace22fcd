//! What a config problem is and where: a key path (with its line in the file) and the
//! sentence that says what is wrong. Shared by every file that checks part of a config.
//!
//! Owns: [`KeyPath`], [`Problem`] and the offset → line mapping. Never: checks a rule.

use std::fmt;

/// A dotted key such as `servers.remote.args[2]`, kept as segments for the line lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct KeyPath {
    segments: Vec<String>,
    index: Option<usize>,
}

impl KeyPath {
    pub(super) fn new<S: AsRef<str>>(segments: &[S]) -> Self {
        KeyPath {
            segments: segments.iter().map(|s| s.as_ref().to_owned()).collect(),
            index: None,
        }
    }

    pub(super) fn server(name: &str) -> Self {
        Self::new(&["servers", name])
    }

    pub(super) fn child(&self, key: &str) -> Self {
        let mut out = self.clone();
        out.segments.push(key.to_owned());
        out
    }

    pub(super) fn at(&self, index: usize) -> Self {
        KeyPath {
            index: Some(index),
            ..self.clone()
        }
    }

    /// The 1-based line of the deepest key of this path present in `text`, if any.
    pub(super) fn line_in(&self, text: &str) -> Option<usize> {
        let root = toml::de::DeTable::parse(text).ok()?;
        let mut table = root.get_ref();
        let mut span = None;
        let mut segments = self.segments.iter().peekable();
        while let Some(segment) = segments.next() {
            let (key, value) = table.get_key_value(segment.as_str())?;
            span = Some(key.span());
            match (value.get_ref(), segments.peek(), self.index) {
                (toml::de::DeValue::Table(inner), Some(_), _) => table = inner,
                (toml::de::DeValue::Array(items), None, Some(i)) => {
                    span = items.get(i).map(|item| item.span()).or(span);
                }
                _ => break,
            }
        }
        span.map(|span| line_of_offset(text, span.start))
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.segments.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            let bare = !segment.is_empty()
                && segment
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if bare {
                f.write_str(segment)?;
            } else {
                write!(f, "{segment:?}")?;
            }
        }
        match self.index {
            Some(i) => write!(f, "[{i}]"),
            None => Ok(()),
        }
    }
}

/// 1-based line number of a byte offset.
pub(super) fn line_of_offset(text: &str, offset: usize) -> usize {
    let offset = offset.min(text.len());
    text.as_bytes()[..offset]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// What is wrong, and where; the parent turns it into a `ConfigError` with file and line.
#[derive(Debug)]
pub(super) enum Problem {
    /// `message` is a full sentence that names the key.
    Invalid { at: KeyPath, message: String },
    /// `${var}` used at `at` is not set.
    MissingVar { at: KeyPath, var: String },
}

pub(super) fn invalid(at: &KeyPath, message: impl Into<String>) -> Problem {
    Problem::Invalid {
        at: at.clone(),
        message: message.into(),
    }
}
