//! Where a policy wrote something: the file (or built-in) and line that every refusal,
//! explanation and "add it there" names. Shared by the rules, the L7 rules and the
//! credentials, which are compiled from different sections of one policy.

use serde::Serialize;
use std::fmt;

/// Where a list (or one of its entries) is written, for "add it there".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Site {
    /// `builtin:dev` or a file path.
    pub origin: String,
    /// 1-based line, when the list is written in that layer.
    pub line: Option<usize>,
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "policy line {line} of {}", self.origin),
            None => write!(f, "not set; policy {}", self.origin),
        }
    }
}
