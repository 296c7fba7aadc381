//! Spilled outputs as MCP resources: the `resource_link` a cut-short result carries, and
//! `resources/list` / `resources/read` over `.cordon/outputs/`.
//!
//! Only the spill area is served, read-only, through the workspace capability
//! ([`crate::workspace::Workspace::read_spill_file`]: no symlinks followed, regular files
//! only, size-bounded). A URI is `file://` + the absolute path of the spill file; anything
//! else is refused with an error that says which URIs exist.

use crate::runtime::Session;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolResponse, ContentBlock, ListResourcesResult, ReadResourceResult, Resource,
    ResourceContents,
};

/// Spill directory, relative to the workspace root.
const SPILL_REL: &str = ".cordon/outputs";

/// The largest spill file `resources/read` returns; larger ones are for read_file or grep.
pub(super) const MAX_RESOURCE_BYTES: u64 = 8 * 1024 * 1024;

/// Files listed by `resources/list` at most (the spill area keeps 100).
const MAX_LISTED: usize = 100;

/// The `file://` URI of a spill file named `name`.
pub(super) fn spill_uri(ctx: &Session, name: &str) -> String {
    let root = ctx.runtime.workspace.root().to_string_lossy();
    format!("file://{}/{SPILL_REL}/{name}", percent_encode(&root))
}

/// Percent-encodes everything but unreserved characters and `/` (RFC 3986 path).
fn percent_encode(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The spill file a result's `full_output` names (its name in the spill area), if any. Pure:
/// most results name none, and they need no file-system call at all.
pub(super) fn spilled_file(response: &CallToolResponse) -> Option<String> {
    let CallToolResponse::Complete(result) = response else {
        return None;
    };
    result
        .structured_content
        .as_ref()
        .and_then(|s| s.get("full_output"))
        .and_then(|v| v.as_str())
        .and_then(|p| p.strip_prefix(SPILL_REL))
        .and_then(|p| p.strip_prefix('/'))
        .map(str::to_owned)
}

/// Adds a `resource_link` block for spill file `name` (from [`spilled_file`]), so a client can
/// fetch the whole output through `resources/read`. Stats the file for its size: blocking
/// file-system work.
pub(super) fn link_spilled(
    response: CallToolResponse,
    name: &str,
    ctx: &Session,
) -> CallToolResponse {
    let CallToolResponse::Complete(mut result) = response else {
        return response;
    };
    let size = ctx.runtime.workspace.spill_file_size(name);
    let mut link = Resource::new(spill_uri(ctx, name), name.to_owned())
        .with_title("Full output")
        .with_description(format!(
            "The complete output that the result shows cut short ({SPILL_REL}/{name})"
        ))
        .with_mime_type("text/plain");
    if let Some(size) = size {
        link = link.with_size(size);
    }
    result.content.push(ContentBlock::resource_link(link));
    CallToolResponse::Complete(result)
}

/// `resources/list`: the spill files, newest first.
pub(super) fn list(ctx: &Session) -> ListResourcesResult {
    let resources = ctx
        .runtime
        .workspace
        .list_spill_files()
        .into_iter()
        .take(MAX_LISTED)
        .map(|(name, size)| {
            Resource::new(spill_uri(ctx, &name), name.clone())
                .with_description(format!("Saved full output ({SPILL_REL}/{name})"))
                .with_mime_type("text/plain")
                .with_size(size)
        })
        .collect();
    ListResourcesResult::with_all_items(resources)
}

/// `resources/read` of one spill file: text when it is UTF-8, else its exact bytes as a blob.
pub(super) fn read(ctx: &Session, uri: &str) -> Result<ReadResourceResult, McpError> {
    let prefix = spill_uri(ctx, "");
    let Some(name) = uri.strip_prefix(&prefix) else {
        return Err(McpError::resource_not_found(
            format!(
                "resource `{}` is not served: cordon serves only the saved outputs under \
                 {prefix} (see resources/list, or the resource_link of a cut-short result)",
                crate::tools::echo_arg(uri)
            ),
            None,
        ));
    };
    let bytes = ctx
        .runtime
        .workspace
        .read_spill_file(name, MAX_RESOURCE_BYTES)
        .map_err(|e| {
            McpError::resource_not_found(
                format!(
                    "cannot read `{}`: {e}; read large outputs with read_file (offset/limit) \
                     or grep in shell_exec",
                    crate::tools::echo_arg(uri)
                ),
                None,
            )
        })?;
    let contents = match String::from_utf8(bytes) {
        Ok(text) => ResourceContents::text(text, uri),
        Err(e) => ResourceContents::blob(base64(e.as_bytes()), uri)
            .with_mime_type("application/octet-stream"),
    };
    Ok(ReadResourceResult::new(vec![contents]))
}

/// Standard base64 with padding (RFC 4648), for the exact bytes of a non-UTF-8 output.
fn base64(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(TABLE[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (input, expected) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), expected);
        }
    }

    fn result_naming(full_output: serde_json::Value) -> CallToolResponse {
        let mut result = rmcp::model::CallToolResult::success(vec![ContentBlock::text("x")]);
        result.structured_content = Some(serde_json::json!({ "full_output": full_output }));
        CallToolResponse::Complete(result)
    }

    /// Only a result naming a file in the spill area pays for the blocking hop that links it.
    #[test]
    fn spilled_file_is_the_name_inside_the_spill_area() {
        let spilled = result_naming(".cordon/outputs/shell-1.stdout".into());
        assert_eq!(spilled_file(&spilled).as_deref(), Some("shell-1.stdout"));
        for other in [
            serde_json::Value::Null,
            "src/main.rs".into(),
            ".cordon/outputsX/a".into(),
        ] {
            assert_eq!(spilled_file(&result_naming(other.clone())), None, "{other}");
        }
    }

    #[test]
    fn paths_are_percent_encoded() {
        assert_eq!(percent_encode("/tmp/my ws/ü"), "/tmp/my%20ws/%C3%BC");
    }
}
