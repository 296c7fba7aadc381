//! Tool schemas as every client can take them, and results that always fit them.
//!
//! schemars writes what serde means: `$defs`/`$ref` for shared types, `format: "uint64"` for
//! unsigned integers, `type: [X, "null"]` and `default: null` for `Option` fields. Hosts that
//! turn MCP tools into function declarations (Gemini's OpenAPI subset, several agent CLIs)
//! reject references and union types, and Ajv warns about every unknown format on every
//! connection. This module rewrites the generated schemas into plain, self-contained JSON
//! Schema: references inlined, only standard formats kept, and in input schemas an optional
//! argument is simply one left out of `required`.
//!
//! It also builds the placeholder a result needs when the call failed before the tool ran
//! (arguments that do not deserialize): a value of the output schema with every required field
//! empty, zero or null, so the error result still validates (the TypeScript SDK checks error
//! results against `outputSchema` too), and fits results to their schema: argument errors
//! rmcp answers with bare text, calls refused before their tool ran, required fields left out.

use crate::shape::{ErrorKind, ToolError};
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock, JsonObject};
use serde_json::{Map, Value};

/// The formats JSON Schema 2020-12 defines; any other `format` is dropped.
const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// How deep references are followed; our types are not recursive, so this only guards
/// against a schema that is.
const MAX_DEPTH: usize = 32;

/// An input schema rewritten for the strictest hosts (see the module docs).
pub(crate) fn portable_input(schema: &Map<String, Value>) -> Map<String, Value> {
    let defs = definitions(schema);
    let mut out = inline(&Value::Object(schema.clone()), &defs, 0);
    if let Value::Object(map) = &mut out {
        map.remove("$schema");
    }
    drop_nullability(&mut out);
    into_map(out)
}

/// An output schema, self-contained and with standard formats only; nullable types stay
/// (results do carry `null`).
pub(crate) fn portable_output(schema: &Map<String, Value>) -> Map<String, Value> {
    let defs = definitions(schema);
    let mut out = inline(&Value::Object(schema.clone()), &defs, 0);
    if let Value::Object(map) = &mut out {
        map.remove("$schema");
    }
    into_map(out)
}

fn into_map(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn definitions(schema: &Map<String, Value>) -> Map<String, Value> {
    let mut defs = Map::new();
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(d)) = schema.get(key) {
            defs.extend(d.clone());
        }
    }
    defs
}

/// Copies `value` with every local `$ref` replaced by its definition and unknown formats
/// removed.
fn inline(value: &Value, defs: &Map<String, Value>, depth: usize) -> Value {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get("$ref")
                && depth < MAX_DEPTH
                && let Some(target) = reference
                    .strip_prefix("#/$defs/")
                    .or_else(|| reference.strip_prefix("#/definitions/"))
                    .and_then(|name| defs.get(name))
            {
                let mut resolved = match inline(target, defs, depth + 1) {
                    Value::Object(m) => m,
                    other => return other,
                };
                // Siblings of `$ref` (a description, say) override the definition's.
                for (k, v) in map {
                    if k != "$ref" {
                        resolved.insert(k.clone(), inline(v, defs, depth + 1));
                    }
                }
                return Value::Object(resolved);
            }
            let mut out = Map::new();
            for (k, v) in map {
                match k.as_str() {
                    "$defs" | "definitions" => {}
                    "format" if !v.as_str().is_some_and(|f| STANDARD_FORMATS.contains(&f)) => {}
                    // `properties` maps names to schemas; the names are not keywords.
                    "properties" if v.is_object() => {
                        let props = v.as_object().into_iter().flatten();
                        let props = props.map(|(name, s)| (name.clone(), inline(s, defs, depth)));
                        out.insert(k.clone(), Value::Object(props.collect()));
                    }
                    _ => {
                        out.insert(k.clone(), inline(v, defs, depth));
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| inline(v, defs, depth)).collect()),
        other => other.clone(),
    }
}

/// Input schemas: `type: [X, "null"]` becomes `X`, `anyOf: [S, {type: null}]` becomes `S`, and
/// `default: null` goes; such a property is already optional by not being `required`.
fn drop_nullability(value: &mut Value) {
    let Value::Object(map) = value else {
        if let Value::Array(items) = value {
            items.iter_mut().for_each(drop_nullability);
        }
        return;
    };
    if let Some(Value::Array(types)) = map.get("type") {
        let kept: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        if kept.len() == 1 {
            map.insert("type".into(), kept[0].clone());
        } else {
            map.insert("type".into(), Value::Array(kept));
        }
    }
    if let Some(Value::Array(alternatives)) = map.get("anyOf") {
        let kept: Vec<Value> = alternatives
            .iter()
            .filter(|a| a.get("type").is_none_or(|t| t != "null"))
            .cloned()
            .collect();
        if kept.len() == 1
            && let Value::Object(only) = &kept[0]
        {
            map.remove("anyOf");
            for (k, v) in only {
                map.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
    }
    if map.get("default") == Some(&Value::Null) {
        map.remove("default");
    }
    for v in map.values_mut() {
        drop_nullability(v);
    }
}

/// A value of `schema` with every required field as empty as the schema allows: `null` where
/// null is allowed, else "", 0 (or `minimum`), false, [] or an object of its own required
/// fields; an enum takes its first value.
pub(crate) fn placeholder(schema: &Value) -> Value {
    placeholder_at(schema, 0)
}

fn placeholder_at(schema: &Value, depth: usize) -> Value {
    let Some(map) = schema.as_object() else {
        return Value::Null;
    };
    if depth > MAX_DEPTH {
        return Value::Null;
    }
    if let Some(Value::Array(values)) = map.get("enum") {
        return values.first().cloned().unwrap_or(Value::Null);
    }
    if let Some(c) = map.get("const") {
        return c.clone();
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(alternatives)) = map.get(key) {
            if alternatives
                .iter()
                .any(|a| a.get("type") == Some(&"null".into()))
            {
                return Value::Null;
            }
            if let Some(first) = alternatives.first() {
                return placeholder_at(first, depth + 1);
            }
        }
    }
    let types: Vec<&str> = match map.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    if types.contains(&"null") {
        return Value::Null;
    }
    match types.first().copied() {
        Some("string") => Value::String(String::new()),
        Some("integer") | Some("number") => map.get("minimum").cloned().unwrap_or(0.into()),
        Some("boolean") => Value::Bool(false),
        Some("array") => Value::Array(vec![]),
        Some("object") | None if map.contains_key("properties") => {
            let mut out = Map::new();
            let properties = map.get("properties").and_then(Value::as_object);
            for name in required(map) {
                let sub = properties
                    .and_then(|p| p.get(name))
                    .cloned()
                    .unwrap_or(Value::Null);
                out.insert(name.to_owned(), placeholder_at(&sub, depth + 1));
            }
            Value::Object(out)
        }
        Some("object") => Value::Object(Map::new()),
        _ => Value::Null,
    }
}

/// The names an object schema lists as `required`.
pub(crate) fn required(schema: &Map<String, Value>) -> impl Iterator<Item = &str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// The schema of property `name` of an object schema.
pub(crate) fn property<'a>(schema: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    schema.get("properties")?.get(name)
}

/// The non-null alternative of a nullable property schema (`anyOf: [S, {type: null}]`).
pub(crate) fn non_null(schema: &Value) -> &Value {
    if let Some(Value::Array(alternatives)) = schema.get("anyOf")
        && let Some(s) = alternatives
            .iter()
            .find(|a| a.get("type").is_none_or(|t| t != "null"))
    {
        return s;
    }
    schema
}

/// Makes a result validate against its tool's `outputSchema`.
///
/// rmcp answers arguments that do not deserialize (unknown field, wrong type, a negative
/// `limit`) with a bare text result before the tool runs. SPEC.md wants every `isError` result
/// to carry `structuredContent.error`, and clients that validate error results (the TypeScript
/// SDK, the Inspector) want every required field too, so such a result gets the schema's
/// placeholder with the error in it. Required fields a tool left out are filled the same way.
pub(crate) fn fits_output_schema(
    response: CallToolResponse,
    schema: Option<&JsonObject>,
) -> CallToolResponse {
    let CallToolResponse::Complete(mut result) = response else {
        return response;
    };
    let Some(schema) = schema else {
        return CallToolResponse::Complete(result);
    };
    if result.is_error == Some(true) && result.structured_content.is_none() {
        let message = result
            .content
            .iter()
            .find_map(|c| c.as_text().map(|t| t.text.clone()))
            .unwrap_or_default();
        let error = ToolError::new(
            ErrorKind::InvalidArgument,
            format!("{message}; check the arguments against the tool's inputSchema"),
        );
        result.content = vec![ContentBlock::text(error.text())];
        result.structured_content = Some(error_placeholder(schema, &error));
    }
    // The placeholder (a copy of the schema walked) is built only when a required field is
    // missing: a tool's own output has them all, so the usual result skips it.
    if let Some(Value::Object(content)) = &mut result.structured_content
        && required(schema).any(|name| !content.contains_key(name))
        && let Value::Object(empty) = placeholder(&Value::Object(schema.clone()))
    {
        for (key, value) in empty {
            content.entry(key).or_insert(value);
        }
    }
    CallToolResponse::Complete(result)
}

/// A call refused before its tool ran (a session bound, a scope that could not be made):
/// the error in the tool's result shape.
pub(crate) fn refused_result(error: &ToolError, schema: Option<&JsonObject>) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(error.text())]);
    result.structured_content = schema.map(|schema| error_placeholder(schema, error));
    result
}

/// The output schema's placeholder with `error` set: `{kind, message, retriable}`, plus the
/// `type` a `code_interpreter` error names (`cordon.<kind>`).
fn error_placeholder(schema: &JsonObject, error: &ToolError) -> Value {
    let mut value = placeholder(&Value::Object(schema.clone()));
    let mut error_value = serde_json::to_value(error).unwrap_or_default();
    if let Some(error_schema) = property(schema, "error") {
        let error_schema = non_null(error_schema);
        if let (Value::Object(filled), Value::Object(given)) =
            (placeholder(error_schema), &error_value)
        {
            let mut filled = filled;
            if filled.contains_key("type") {
                let kind = given["kind"].as_str().unwrap_or("internal");
                filled.insert("type".into(), format!("cordon.{kind}").into());
            }
            filled.extend(given.clone());
            error_value = Value::Object(filled);
        }
    }
    if let Value::Object(map) = &mut value {
        map.insert("error".into(), error_value);
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn references_are_inlined_and_unknown_formats_dropped() {
        let schema = obj(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$defs": {"Edit": {"type": "object", "properties": {"n": {"type": "integer", "format": "uint64"}}}},
            "type": "object",
            "properties": {
                "edits": {"type": "array", "items": {"$ref": "#/$defs/Edit"}},
                "when": {"type": "string", "format": "date-time"}
            }
        }));
        let out = Value::Object(portable_input(&schema));
        let text = out.to_string();
        assert!(!text.contains("$ref") && !text.contains("$defs") && !text.contains("$schema"));
        assert!(!text.contains("uint64"));
        assert_eq!(
            out["properties"]["edits"]["items"]["properties"]["n"]["type"],
            "integer"
        );
        assert_eq!(out["properties"]["when"]["format"], "date-time");
    }

    #[test]
    fn optional_inputs_lose_their_null_type_and_default() {
        let schema = obj(json!({
            "type": "object",
            "properties": {"t": {"type": ["integer", "null"], "default": null, "minimum": 1}},
            "required": []
        }));
        let out = Value::Object(portable_input(&schema));
        assert_eq!(
            out["properties"]["t"],
            json!({"type": "integer", "minimum": 1})
        );
    }

    #[test]
    fn outputs_keep_nullable_types() {
        let schema = obj(json!({
            "$defs": {"E": {"type": "object", "properties": {"m": {"type": "string"}}, "required": ["m"]}},
            "type": "object",
            "properties": {"error": {"anyOf": [{"$ref": "#/$defs/E"}, {"type": "null"}]}}
        }));
        let out = Value::Object(portable_output(&schema));
        assert_eq!(out["properties"]["error"]["anyOf"][1]["type"], "null");
        assert_eq!(
            out["properties"]["error"]["anyOf"][0]["required"],
            json!(["m"])
        );
    }

    #[test]
    fn placeholders_fill_required_fields_as_emptily_as_allowed() {
        let schema = json!({
            "type": "object",
            "properties": {
                "s": {"type": "string"}, "n": {"type": "integer", "minimum": 0},
                "b": {"type": "boolean"}, "o": {"type": ["string", "null"]},
                "k": {"enum": ["clean", "issues"]},
                "lint": {"type": "object", "properties": {"linters": {"type": "array"}}, "required": ["linters"]},
                "e": {"anyOf": [{"type": "object"}, {"type": "null"}]},
                "unlisted": {"type": "string"}
            },
            "required": ["s", "n", "b", "o", "k", "lint", "e"]
        });
        assert_eq!(
            placeholder(&schema),
            json!({"s": "", "n": 0, "b": false, "o": null, "k": "clean", "lint": {"linters": []}, "e": null})
        );
    }
}
