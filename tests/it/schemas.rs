//! Every tool schema, as `cordon serve` lists it, against the rules of the strictest common
//! host converters. Regression guard for issue 11: `format: "uint64"` made Ajv warn on every
//! connection, `type: [X, "null"]` in inputs drew the Inspector's portability warnings, and
//! `edit_file`'s `$defs`/`$ref` were rejected by function-calling converters.
//!
//! The rules are the intersection of what these accept:
//! - Gemini's function declarations (an OpenAPI 3.0 Schema subset, used by Gemini CLI and
//!   Vertex converters): one `type` string per schema, no `$ref`/`$defs`, no `anyOf` with
//!   `null`, formats limited to a few (so none of JSON Schema's non-standard ones);
//! - OpenAI-style function calling (a JSON Schema subset): no references, a top-level
//!   `type: object`, `required` naming only declared properties;
//! - the MCP Inspector's portability checks and Ajv in strict mode (the TypeScript SDK):
//!   no unknown keywords or formats; nullable unions only as `[X, "null"]`, and only in outputs.
//!
//! Input schemas use only the keywords listed in `INPUT_KEYWORDS`; an optional input is one
//! left out of `required`. Output schemas may also say `anyOf`/`oneOf`/`const` and `null`.

use rmcp::ServiceExt;
use serde_json::Value;

const INPUT_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "description",
    "title",
    "default",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
];
const OUTPUT_EXTRA_KEYWORDS: &[&str] = &["anyOf", "oneOf", "const"];
const TYPES: &[&str] = &["object", "string", "integer", "number", "boolean", "array"];

pub(crate) async fn listed_tools() -> Vec<rmcp::model::Tool> {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_cordon"));
    cmd.arg("serve").arg("--workspace").arg(dir.path());
    let transport = rmcp::transport::TokioChildProcess::new(cmd).expect("spawn cordon serve");
    let client = ().serve(transport).await.expect("MCP session starts");
    let tools = client.list_all_tools().await.expect("tools/list");
    let _ = client.cancel().await;
    tools
}

/// Walks one schema object; `at` is the JSON path for messages.
fn check(schema: &Value, at: &str, output: bool, problems: &mut Vec<String>) {
    let Some(map) = schema.as_object() else {
        problems.push(format!("{at}: a schema must be an object, found {schema}"));
        return;
    };
    for (key, value) in map {
        let allowed = INPUT_KEYWORDS.contains(&key.as_str())
            || (output && OUTPUT_EXTRA_KEYWORDS.contains(&key.as_str()));
        if !allowed {
            problems.push(format!("{at}: keyword `{key}` is not portable"));
        }
        match key.as_str() {
            "type" => check_type(value, at, output, problems),
            "properties" => {
                for (name, sub) in value.as_object().into_iter().flatten() {
                    check(sub, &format!("{at}.properties.{name}"), output, problems);
                }
            }
            "items" => check(value, &format!("{at}.items"), output, problems),
            "additionalProperties" if value.is_object() => check(
                value,
                &format!("{at}.additionalProperties"),
                output,
                problems,
            ),
            "anyOf" | "oneOf" => {
                for (i, sub) in value.as_array().into_iter().flatten().enumerate() {
                    check(sub, &format!("{at}.{key}[{i}]"), output, problems);
                }
            }
            "required" => {
                let props = map.get("properties").and_then(Value::as_object);
                for name in value.as_array().into_iter().flatten() {
                    if !props.is_some_and(|p| p.contains_key(name.as_str().unwrap_or(""))) {
                        problems.push(format!("{at}: required `{name}` is not a property"));
                    }
                }
            }
            "default" if value.is_null() => problems.push(format!(
                "{at}: `default: null` (leave the input out instead)"
            )),
            _ => {}
        }
    }
    if !output
        && map.get("type") == Some(&"object".into())
        && map.contains_key("properties")
        && map.get("additionalProperties") != Some(&Value::Bool(false))
    {
        problems.push(format!(
            "{at}: an argument object needs additionalProperties: false"
        ));
    }
}

fn check_type(value: &Value, at: &str, output: bool, problems: &mut Vec<String>) {
    match value {
        Value::String(t) if TYPES.contains(&t.as_str()) => {}
        Value::Array(ts)
            if output
                && ts.len() == 2
                && ts.contains(&"null".into())
                && ts.iter().any(|t| TYPES.contains(&t.as_str().unwrap_or(""))) => {}
        Value::String(t) if output && t == "null" => {}
        other => problems.push(format!(
            "{at}: type {other} is not portable (one of {TYPES:?}{})",
            if output {
                ", or [X, \"null\"]"
            } else {
                "; optional inputs are left out of required"
            }
        )),
    }
}

#[cordon_test::test]
async fn every_tool_schema_follows_the_strictest_host_converters_rules() {
    let tools = listed_tools().await;
    assert_eq!(tools.len(), 7, "{tools:?}");
    let mut problems = Vec::new();
    for tool in &tools {
        let input = Value::Object((*tool.input_schema).clone());
        assert_eq!(input["type"], "object", "{}: top-level type", tool.name);
        check(
            &input,
            &format!("{}.inputSchema", tool.name),
            false,
            &mut problems,
        );
        let output = tool
            .output_schema
            .as_ref()
            .unwrap_or_else(|| panic!("{} has no outputSchema", tool.name));
        let output = Value::Object((**output).clone());
        check(
            &output,
            &format!("{}.outputSchema", tool.name),
            true,
            &mut problems,
        );
        for (what, schema) in [("inputSchema", &input), ("outputSchema", &output)] {
            let text = schema.to_string();
            for banned in ["\"$ref\"", "\"$defs\"", "\"format\"", "\"$schema\""] {
                assert!(
                    !text.contains(banned),
                    "{}.{what} has {banned}: {text}",
                    tool.name
                );
            }
        }
    }
    assert!(
        problems.is_empty(),
        "schemas that some hosts reject:\n{}",
        problems.join("\n")
    );
}
