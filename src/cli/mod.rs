//! Terminal commands that are more than a call into the library: `cordon lint` and
//! `cordon policy …`, and the choice of workspace every command makes. They print for people
//! (or `--json` for scripts); the MCP server itself never uses this module.

pub mod lint;
pub mod policy;
pub mod workspace;
