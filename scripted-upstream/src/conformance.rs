//! The fixture surface the MCP conformance suite calls (`SCRIPTED_CONFORMANCE=1`),
//! written from the suite's scenario descriptions: tools, resources, a template and
//! prompts with the fixed names the scenarios use. Off by default, so the other tests
//! see the scripted server's own surface unchanged. The fixtures of modern requests
//! (MRTR, the stateless diagnostics) are in `conformance_modern.rs`.

use serde_json::{json, Value};

use crate::modern::Era;
use crate::server::RpcError;

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// A WAV header with no samples.
const WAV: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEARKwAAIhYAQACABAAZGF0YQAAAAA=";

fn tool(name: &str, description: &str, properties: Value) -> Value {
    json!({"name": name, "description": description,
        "inputSchema": {"type": "object", "properties": properties}})
}

/// The JSON Schema 2020-12 `inputSchema` of `json_schema_2020_12_tool` (SEP-1613,
/// SEP-2106): the suite checks every keyword survives `tools/list`.
fn json_schema_2020_12() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {"address": {"$anchor": "addressDef", "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"},
        },
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": false,
    })
}

/// The fixture tools (in dual and modern modes also the modern-only ones). The first
/// one takes `{}`: `http-header-validation` calls the first listed tool with it.
pub fn tools(era: Era) -> Vec<Value> {
    let mut tools = vec![
        tool("test_simple_text", "Returns a text item", json!({})),
        tool("test_image_content", "Returns an image item", json!({})),
        tool("test_audio_content", "Returns an audio item", json!({})),
        tool(
            "test_embedded_resource",
            "Returns an embedded resource",
            json!({}),
        ),
        tool(
            "test_multiple_content_types",
            "Returns text, an image and a resource",
            json!({}),
        ),
        tool(
            "test_error_handling",
            "Returns a tool error (isError)",
            json!({}),
        ),
        tool(
            "test_tool_with_progress",
            "Sends 3 progress notifications",
            json!({}),
        ),
        tool("test_tool_with_logging", "Sends 3 log messages", json!({})),
        tool(
            "test_sampling",
            "Asks the client for sampling",
            json!({"prompt": {"type": "string"}}),
        ),
        tool(
            "test_elicitation",
            "Asks the client for input",
            json!({"message": {"type": "string"}}),
        ),
        tool(
            "test_elicitation_sep1034_defaults",
            "Elicitation with defaults",
            json!({}),
        ),
        tool(
            "test_elicitation_sep1330_enums",
            "Elicitation with the five enum shapes of SEP-1330",
            json!({}),
        ),
        json!({"name": "json_schema_2020_12_tool",
            "description": "Tool with JSON Schema 2020-12 features (SEP-1613)",
            "inputSchema": json_schema_2020_12()}),
    ];
    if era != Era::Legacy {
        tools.extend(crate::conformance_modern::tools());
    }
    tools
}

pub fn is_tool(name: &str, era: Era) -> bool {
    tools(era).iter().any(|t| t["name"] == name)
}

/// The fixture resources (in dual and modern modes also the MRTR one).
pub fn resources(era: Era) -> Vec<Value> {
    let mut resources = vec![
        json!({"uri": "test://static-text", "name": "static-text", "mimeType": "text/plain"}),
        json!({"uri": "test://static-binary", "name": "static-binary", "mimeType": "image/png"}),
        json!({"uri": "test://watched-resource", "name": "watched-resource", "mimeType": "text/plain"}),
    ];
    if era != Era::Legacy {
        resources.push(crate::conformance_modern::resource_definition());
    }
    resources
}

pub fn templates() -> Vec<Value> {
    vec![
        json!({"uriTemplate": "test://template/{id}/data", "name": "template-data",
        "mimeType": "application/json"}),
    ]
}

pub fn read(uri: &str) -> Option<Value> {
    match uri {
        "test://static-text" | "test://watched-resource" => Some(json!({"uri": uri,
            "mimeType": "text/plain", "text": "This is the content of the static text resource."})),
        "test://static-binary" => Some(json!({"uri": uri, "mimeType": "image/png", "blob": PNG})),
        _ => {
            let id = uri
                .strip_prefix("test://template/")?
                .strip_suffix("/data")?;
            Some(json!({"uri": uri, "mimeType": "application/json",
                "text": json!({"id": id, "templateTest": true}).to_string()}))
        }
    }
}

/// The fixture prompts (in dual and modern modes also the MRTR one).
pub fn prompts(era: Era) -> Vec<Value> {
    let mut prompts = vec![
        json!({"name": "test_simple_prompt", "description": "A simple prompt"}),
        json!({"name": "test_prompt_with_arguments", "description": "A prompt with arguments",
            "arguments": [{"name": "arg1", "required": true}, {"name": "arg2", "required": true}]}),
        json!({"name": "test_prompt_with_embedded_resource", "description": "Embeds a resource",
            "arguments": [{"name": "resourceUri", "required": true}]}),
        json!({"name": "test_prompt_with_image", "description": "Contains an image"}),
    ];
    if era != Era::Legacy {
        prompts.push(crate::conformance_modern::prompt_definition());
    }
    prompts
}

/// `prompts/get` of a fixture prompt; `None` for other names.
pub fn prompt(name: &str, args: &Value) -> Option<Result<Value, RpcError>> {
    let text = |t: String| json!({"role": "user", "content": {"type": "text", "text": t}});
    let messages = match name {
        "test_simple_prompt" => vec![text("This is a simple prompt for testing.".into())],
        "test_prompt_with_arguments" => {
            let a = |k: &str| args[k].as_str().unwrap_or_default().to_owned();
            vec![text(format!(
                "Prompt with arguments: arg1='{}', arg2='{}'",
                a("arg1"),
                a("arg2")
            ))]
        }
        "test_prompt_with_embedded_resource" => {
            let uri = args["resourceUri"]
                .as_str()
                .unwrap_or("test://example-resource");
            vec![
                json!({"role": "user", "content": {"type": "resource", "resource": {
                    "uri": uri, "mimeType": "text/plain", "text": "Embedded resource content for testing."}}}),
                text("Please process the embedded resource above.".into()),
            ]
        }
        "test_prompt_with_image" => vec![
            json!({"role": "user", "content": {"type": "image", "data": PNG, "mimeType": "image/png"}}),
            text("Please analyze the image above.".into()),
        ],
        _ => return None,
    };
    Some(Ok(json!({"messages": messages})))
}

/// The result of a fixture tool that answers at once; `None` for the tools that need
/// the server (progress, logs, requests to the client).
pub fn immediate(name: &str) -> Option<Value> {
    let text = |t: &str| json!({"type": "text", "text": t});
    let embedded = |uri: &str| {
        json!({"type": "resource", "resource": {"uri": uri,
        "mimeType": "text/plain", "text": "This is an embedded resource content."}})
    };
    let image = json!({"type": "image", "data": PNG, "mimeType": "image/png"});
    Some(match name {
        "test_simple_text" => {
            json!({"content": [text("This is a simple text response for testing.")]})
        }
        "test_image_content" => json!({"content": [image]}),
        "test_audio_content" => {
            json!({"content": [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}]})
        }
        "test_embedded_resource" => json!({"content": [embedded("test://embedded-resource")]}),
        "test_multiple_content_types" => json!({"content": [
            text("Multiple content types test:"), image, embedded("test://mixed-content-resource")]}),
        "test_error_handling" => {
            json!({"content": [text("This tool intentionally returns an error for testing")], "isError": true})
        }
        _ => return None,
    })
}

/// The request a fixture tool sends the client: (method, params).
pub fn client_request(name: &str, args: &Value) -> Option<(&'static str, Value)> {
    match name {
        "test_sampling" => Some((
            "sampling/createMessage",
            json!({
            "messages": [{"role": "user", "content": {"type": "text",
                "text": args["prompt"].as_str().unwrap_or("Test prompt")}}],
            "maxTokens": 100}),
        )),
        "test_elicitation" => Some((
            "elicitation/create",
            json!({
            "message": args["message"].as_str().unwrap_or("Please provide your information"),
            "requestedSchema": {"type": "object", "properties": {
                "username": {"type": "string", "description": "Your username"},
                "email": {"type": "string", "description": "Your email address"}},
                "required": ["username", "email"]}}),
        )),
        "test_elicitation_sep1034_defaults" => Some((
            "elicitation/create",
            json!({
            "message": "Please review and update the form fields with defaults",
            "requestedSchema": {"type": "object", "properties": {
                "name": {"type": "string", "description": "User name", "default": "John Doe"},
                "age": {"type": "integer", "description": "User age", "default": 30},
                "score": {"type": "number", "description": "User score", "default": 95.5},
                "status": {"type": "string", "description": "User status",
                    "enum": ["active", "inactive", "pending"], "default": "active"},
                "verified": {"type": "boolean", "description": "Verification status", "default": true}}}}),
        )),
        "test_elicitation_sep1330_enums" => Some((
            "elicitation/create",
            json!({
            "message": "Please select options from the enum fields",
            "requestedSchema": {"type": "object", "required": [], "properties": {
                "untitledSingle": {"type": "string", "description": "Select one option",
                    "enum": ["option1", "option2", "option3"]},
                "titledSingle": {"type": "string", "description": "Select one option with titles",
                    "oneOf": [{"const": "value1", "title": "First Option"},
                        {"const": "value2", "title": "Second Option"},
                        {"const": "value3", "title": "Third Option"}]},
                "legacyEnum": {"type": "string", "description": "Select one option (legacy)",
                    "enum": ["opt1", "opt2", "opt3"],
                    "enumNames": ["Option One", "Option Two", "Option Three"]},
                "untitledMulti": {"type": "array", "description": "Select multiple options",
                    "minItems": 1, "maxItems": 3,
                    "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                "titledMulti": {"type": "array", "description": "Select multiple options with titles",
                    "minItems": 1, "maxItems": 3,
                    "items": {"anyOf": [{"const": "value1", "title": "First Choice"},
                        {"const": "value2", "title": "Second Choice"},
                        {"const": "value3", "title": "Third Choice"}]}}}}}),
        )),
        _ => None,
    }
}
