//! The error kinds of SPEC.md: the one vocabulary every stage names its failures in.
//!
//! A lower layer says which kind its error is (`From<&PathError> for ErrorKind` and friends,
//! next to each error type), so no kind crosses a layer as a string and nothing matches
//! strings back. Owns the names only; what a tool result carries (`ToolError`) is `shape`'s.

use schemars::JsonSchema;
use serde::Serialize;

/// An agent branches on these, so they never change meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    InvalidArgument,
    PathEscape,
    NotFound,
    Denied,
    Timeout,
    ResourceLimit,
    ExitStatus,
    Exception,
    Io,
    Internal,
}

impl ErrorKind {
    /// The SPEC name (`structuredContent.error.kind`), as serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "invalid_argument",
            ErrorKind::PathEscape => "path_escape",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Denied => "denied",
            ErrorKind::Timeout => "timeout",
            ErrorKind::ResourceLimit => "resource_limit",
            ErrorKind::ExitStatus => "exit_status",
            ErrorKind::Exception => "exception",
            ErrorKind::Io => "io",
            ErrorKind::Internal => "internal",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_serialized_spec_names() {
        for kind in [
            ErrorKind::InvalidArgument,
            ErrorKind::PathEscape,
            ErrorKind::NotFound,
            ErrorKind::Denied,
            ErrorKind::Timeout,
            ErrorKind::ResourceLimit,
            ErrorKind::ExitStatus,
            ErrorKind::Exception,
            ErrorKind::Io,
            ErrorKind::Internal,
        ] {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
    }
}
