//! Terminal commands that are more than a call into the library: `cordon lint` and
//! `cordon policy …`. They print for people (or `--json` for scripts); the MCP server never
//! uses this module.

pub mod lint;
pub mod policy;
