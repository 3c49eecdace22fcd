//! SEP-2243's rules for a tool's `x-mcp-header` annotations (2026-07-28 Streamable HTTP):
//! a client MUST leave out a tool whose annotations it cannot honour. An annotation is
//! a non-empty HTTP token (visible ASCII without separators: no space, colon, control
//! or non-ASCII character), on a property of a primitive type (`string`, `integer` or
//! `boolean`; not `number`, `object`, `array` or `null`), and no two of one tool's
//! annotations are equal ignoring case. Annotations are found as `param_headers` finds
//! them (through `properties` only).
//!
//! Pure: no state. Never changes a schema.

use serde_json::Value;

/// Why a tool's `inputSchema` annotations break the rules; `None` when they keep them
/// (or there are none).
pub fn invalid_annotation(input_schema: &Value) -> Option<String> {
    let mut seen: Vec<String> = Vec::new();
    let mut stack = vec![input_schema];
    while let Some(schema) = stack.pop() {
        let Some(props) = schema.get("properties").and_then(Value::as_object) else {
            continue;
        };
        for (key, sub) in props {
            stack.push(sub);
            let Some(h) = sub.get("x-mcp-header") else {
                continue;
            };
            let Some(h) = h.as_str() else {
                return Some(format!("property {key}: x-mcp-header is not a string"));
            };
            if h.is_empty() {
                return Some(format!("property {key}: x-mcp-header is empty"));
            }
            if !h.bytes().all(is_tchar) {
                return Some(format!(
                    "property {key}: x-mcp-header {h:?} is not an HTTP token"
                ));
            }
            let primitive = matches!(
                sub.get("type").and_then(Value::as_str),
                Some("string" | "integer" | "boolean")
            );
            if !primitive {
                return Some(format!(
                    "property {key}: x-mcp-header on a type other than string, integer or boolean"
                ));
            }
            let lower = h.to_ascii_lowercase();
            if seen.contains(&lower) {
                return Some(format!("x-mcp-header {h:?} appears twice"));
            }
            seen.push(lower);
        }
    }
    None
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(props: Value) -> Value {
        json!({"type": "object", "properties": props})
    }

    #[test]
    fn valid_annotations_pass() {
        let s = tool(json!({
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": "integer", "x-mcp-header": "N"},
            "deep": {"type": "object", "properties": {"flag": {"type": "boolean", "x-mcp-header": "Flag"}}},
            "plain": {"type": "number"}
        }));
        assert_eq!(invalid_annotation(&s), None);
        assert_eq!(invalid_annotation(&json!({"type": "object"})), None);
    }

    #[test]
    fn each_broken_rule_is_named() {
        let bad = [
            json!({"v": {"type": "string", "x-mcp-header": ""}}),
            json!({"v": {"type": "object", "x-mcp-header": "V"}}),
            json!({"v": {"type": "array", "x-mcp-header": "V"}}),
            json!({"v": {"type": "null", "x-mcp-header": "V"}}),
            json!({"v": {"type": "number", "x-mcp-header": "V"}}),
            json!({"a": {"type": "string", "x-mcp-header": "R"}, "b": {"type": "string", "x-mcp-header": "r"}}),
            json!({"v": {"type": "string", "x-mcp-header": "My Region"}}),
            json!({"v": {"type": "string", "x-mcp-header": "Region:Primary"}}),
            json!({"v": {"type": "string", "x-mcp-header": "Région"}}),
            json!({"v": {"type": "string", "x-mcp-header": "Region\t1"}}),
        ];
        for props in bad {
            assert!(
                invalid_annotation(&tool(props.clone())).is_some(),
                "{props}"
            );
        }
    }
}
