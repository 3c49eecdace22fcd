//! Unit tests of `stateless.rs`: the era's request validation, header rules,
//! `Mcp-Name` and `Mcp-Param-*` checks.

use super::*;

fn req(method: &str, params: Value) -> Message {
    Message::parse(
        json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
            .to_string()
            .as_bytes(),
    )
    .unwrap()
}

fn modern_params(extra: Value) -> Value {
    let mut p = json!({"_meta": {
        meta::PROTOCOL_VERSION: MODERN_VERSION,
        meta::CLIENT_CAPABILITIES: {},
    }});
    if let (Some(p), Some(e)) = (p.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    p
}

fn headers<'a>(method: &'a str, name: Option<&'a str>) -> Headers<'a> {
    Headers {
        protocol_version: Some(MODERN_VERSION),
        method: Some(method),
        name,
    }
}

#[test]
fn a_complete_request_passes_and_reads_its_meta() {
    let m = req("tools/call", modern_params(json!({"name": "echo"})));
    let meta = validate_http(&m, &headers("tools/call", Some("echo"))).unwrap();
    assert_eq!(meta.protocol_version.as_deref(), Some(MODERN_VERSION));
    assert_eq!(meta.client_capabilities, Some(json!({})));
}

#[test]
fn header_rules_give_32020() {
    let m = req("tools/call", modern_params(json!({"name": "echo"})));
    for h in [
        Headers {
            protocol_version: None,
            ..headers("tools/call", Some("echo"))
        },
        Headers {
            protocol_version: Some("2025-11-25"),
            ..headers("tools/call", Some("echo"))
        },
        headers("tools/list", Some("echo")),
        Headers {
            method: None,
            ..headers("tools/call", Some("echo"))
        },
        headers("tools/call", None),
        headers("tools/call", Some("other")),
    ] {
        let r = validate_http(&m, &h).unwrap_err();
        assert_eq!(
            (r.status, r.code),
            (400, code::HEADER_MISMATCH),
            "{h:?}: {r:?}"
        );
    }
    // Mcp-Name for resources/read mirrors params.uri, Base64 sentinel decoded.
    let m = req("resources/read", modern_params(json!({"uri": "file:///é"})));
    let encoded = format!("=?base64?{}?=", {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode("file:///é")
    });
    assert!(validate_http(&m, &headers("resources/read", Some(&encoded))).is_ok());
    assert!(validate_http(&m, &headers("resources/read", Some("file:///e"))).is_err());
}

#[test]
fn meta_rules_give_32602_and_32022() {
    let m = req("tools/list", json!({}));
    let r = validate_meta(&m).unwrap_err();
    assert_eq!((r.status, r.code), (400, -32602));
    let m = req(
        "tools/list",
        json!({"_meta": {meta::PROTOCOL_VERSION: "2030-01-01", meta::CLIENT_CAPABILITIES: {}}}),
    );
    let r = validate_meta(&m).unwrap_err();
    assert_eq!((r.status, r.code), (400, code::UNSUPPORTED_VERSION));
    let data = r.data.unwrap();
    assert_eq!(data["requested"], "2030-01-01");
    assert_eq!(data["supported"][0], MODERN_VERSION);
    assert!(data["supported"]
        .as_array()
        .unwrap()
        .contains(&json!("2025-11-25")));
    let m = req(
        "tools/list",
        json!({"_meta": {meta::PROTOCOL_VERSION: MODERN_VERSION}}),
    );
    let r = validate_meta(&m).unwrap_err();
    assert_eq!(
        (r.status, r.code),
        (400, -32602),
        "capabilities are required"
    );
}

#[test]
fn param_headers_follow_the_x_mcp_header_annotations() {
    let schema = json!({"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "n": {"type": "integer", "x-mcp-header": "N"},
        "deep": {"type": "object", "properties": {"flag": {"type": "boolean", "x-mcp-header": "Flag"}}},
        "list": {"type": "array", "items": {"properties": {"x": {"x-mcp-header": "Hidden"}}}},
        "query": {"type": "string"}
    }});
    let h = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    let args = json!({"region": "us-west1", "n": 42, "deep": {"flag": true}, "query": "q"});
    let ok = h(&[
        ("region", "us-west1"),
        ("n", "42.0"),
        ("flag", "true"),
        ("other", "x"),
    ]);
    assert_eq!(check_param_headers(&schema, &args, &ok), Ok(()));
    let missing = h(&[("region", "us-west1"), ("n", "42")]);
    assert!(check_param_headers(&schema, &args, &missing)
        .unwrap_err()
        .contains("Mcp-Param-Flag"));
    let wrong = h(&[("region", "eu"), ("n", "42"), ("flag", "true")]);
    assert!(check_param_headers(&schema, &args, &wrong)
        .unwrap_err()
        .contains("'eu'"));
    // Base64 sentinel decoded; an argument without a value needs no header.
    let args = json!({"region": "Hello, 世界"});
    let enc = {
        use base64::Engine as _;
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode("Hello, 世界")
        )
    };
    assert_eq!(
        check_param_headers(&schema, &args, &h(&[("region", &enc)])),
        Ok(())
    );
    assert!(check_param_headers(&schema, &json!({}), &h(&[("region", "x")])).is_err());
}

#[test]
fn base64_sentinel_decodes_and_bad_sentinel_is_refused() {
    assert_eq!(decode_header_value("plain").as_deref(), Some("plain"));
    assert_eq!(
        decode_header_value("=?base64?aGk=?=").as_deref(),
        Some("hi")
    );
    assert_eq!(decode_header_value("=?base64?***?="), None);
}

#[test]
fn mcp_name_reads_its_member_and_skips_the_rest() {
    let call = req(
        "tools/call",
        json!({"name": "echo", "arguments": {"name": "not this", "deep": [[{"uri": 1}]]}}),
    );
    assert_eq!(mcp_name(&call).as_deref(), Some("echo"));
    let read = req("resources/read", json!({"uri": "test://a", "name": 7}));
    assert_eq!(mcp_name(&read).as_deref(), Some("test://a"));
    // Escapes are decoded; a non-string or missing member has no name.
    let esc = req("prompts/get", json!({"name": "a\"b\u{e9}"}));
    assert_eq!(mcp_name(&esc).as_deref(), Some("a\"b\u{e9}"));
    assert_eq!(mcp_name(&req("tools/call", json!({"name": 3}))), None);
    assert_eq!(mcp_name(&req("tools/call", json!({}))), None);
    assert_eq!(mcp_name(&req("tools/list", json!({"name": "x"}))), None);
}

#[test]
fn mcp_name_is_kept_until_the_params_change() {
    let mut call = req("tools/call", json!({"name": "a", "arguments": {}}));
    assert_eq!(mcp_name(&call).as_deref(), Some("a"));
    assert_eq!(mcp_name(&call).as_deref(), Some("a"));
    // Each way of setting `params` forgets what was read (routing renames a tool).
    call.set_params(&json!({"name": "b"}));
    assert_eq!(mcp_name(&call).as_deref(), Some("b"));
    call.set_params_text(r#"{"name":"c"}"#.to_owned());
    assert_eq!(mcp_name(&call).as_deref(), Some("c"));
    call.set_member(
        "params",
        serde_json::value::to_raw_value(&json!({})).unwrap(),
    );
    assert_eq!(mcp_name(&call), None);
}

#[test]
fn param_annotations_are_found_at_any_depth() {
    let flat = json!({"properties": {"q": {"type": "string", "x-mcp-header": "Q"}}});
    let deep = json!({"properties": {"a": {"properties": {"b": {"x-mcp-header": "B"}}}}});
    let none = json!({"type": "object", "properties": {
        "q": {"type": "string"},
        "x-mcp-header": {"type": "string"}
    }});
    let not_a_name = json!({"properties": {"q": {"x-mcp-header": 5}}});
    assert!(has_param_annotations(&flat));
    assert!(has_param_annotations(&deep));
    assert!(!has_param_annotations(&none));
    assert!(!has_param_annotations(&not_a_name));
    assert!(!has_param_annotations(&json!({})));
    // It agrees with the check: without annotations, any headers pass.
    let headers = vec![("q".to_owned(), "y".to_owned())];
    assert_eq!(
        check_param_headers(&none, &json!({"q": "x"}), &headers),
        Ok(())
    );
    assert!(check_param_headers(&flat, &json!({"q": "x"}), &headers).is_err());
}
