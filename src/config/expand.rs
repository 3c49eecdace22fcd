//! `${NAME}` expansion in config strings: a pure function over a lookup closure, so it
//! is tested without touching the process environment (tests run in parallel).
//!
//! Rules:
//! - `${NAME}` is replaced by the variable's value; NAME is `[A-Za-z_][A-Za-z0-9_]*`.
//!   A variable that is set but empty expands to the empty string.
//! - `$${` is a literal `${` (the escape is checked first, left to right).
//! - Any other `$` is kept as written: `$HOME` is *not* expanded, only the braced form.
//! - An unset variable, an unterminated `${` and an invalid name are errors.
//!
//! [`escape`] is the inverse: `expand(&escape(s), ..) == Ok(s)` for every `s`.

/// Why a string could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    /// `${NAME}` where NAME is not set.
    #[error("${{{0}}} is not set")]
    Unset(String),
    /// `${` without a closing `}`.
    #[error("`${{` without a closing `}}`")]
    Unterminated,
    /// `${...}` whose content is not a variable name.
    #[error("${{{0}}} is not a variable name")]
    BadName(String),
}

/// Expands `${NAME}` (NAME = `[A-Za-z_][A-Za-z0-9_]*`) to `lookup(NAME)`. `$${` is a
/// literal `${`; any other `$` is kept (`$HOME` is not expanded). A value that itself
/// contains `${` is not expanded again.
///
/// # Errors
///
/// [`ExpandError`] on the first reference that cannot be expanded.
pub fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let end = after.find('}').ok_or(ExpandError::Unterminated)?;
            let name = &after[..end];
            if !is_var_name(name) {
                return Err(ExpandError::BadName(name.to_owned()));
            }
            let value = lookup(name).ok_or_else(|| ExpandError::Unset(name.to_owned()))?;
            out.push_str(&value);
            rest = &after[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Escapes every `${` as `$${`, so the result expands back to `input` unchanged.
pub fn escape(input: &str) -> String {
    input.replace("${", "$${")
}

/// `[A-Za-z_][A-Za-z0-9_]*`: what `${...}` may contain.
pub fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("s3cret".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn braced_names_expand_and_other_dollars_stay() {
        assert_eq!(
            expand("Bearer ${TOKEN}", &env).as_deref(),
            Ok("Bearer s3cret")
        );
        assert_eq!(
            expand("${TOKEN}${TOKEN}", &env).as_deref(),
            Ok("s3crets3cret")
        );
        assert_eq!(expand("a${EMPTY}b", &env).as_deref(), Ok("ab"));
        assert_eq!(
            expand("$HOME costs $5 $", &env).as_deref(),
            Ok("$HOME costs $5 $")
        );
        assert_eq!(expand("no refs", &env).as_deref(), Ok("no refs"));
    }

    #[test]
    fn double_dollar_brace_is_a_literal() {
        assert_eq!(expand("$${TOKEN}", &env).as_deref(), Ok("${TOKEN}"));
        assert_eq!(
            expand("$${NOT_SET} ${TOKEN}", &env).as_deref(),
            Ok("${NOT_SET} s3cret")
        );
    }

    #[test]
    fn unset_unterminated_and_bad_names_are_errors() {
        assert_eq!(
            expand("x ${NOPE} y", &env),
            Err(ExpandError::Unset("NOPE".into()))
        );
        assert_eq!(expand("x ${TOKEN", &env), Err(ExpandError::Unterminated));
        assert_eq!(
            expand("${}", &env),
            Err(ExpandError::BadName(String::new()))
        );
        assert_eq!(
            expand("${A-B}", &env),
            Err(ExpandError::BadName("A-B".into()))
        );
        assert_eq!(
            expand("${1X}", &env),
            Err(ExpandError::BadName("1X".into()))
        );
    }

    proptest! {
        #[test]
        fn escape_then_expand_is_identity(s in "[$${}a-zA-Z_ ]{0,24}") {
            prop_assert_eq!(expand(&escape(&s), &|_| None), Ok(s));
        }
    }
}
