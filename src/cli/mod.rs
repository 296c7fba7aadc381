//! Terminal commands that are more than a call into the library: `cordon lint`,
//! `cordon policy …` (with `policy replay`), the operator's `cordon approvals`/`approve`/
//! `deny`, and the choice of workspace every command makes. They print for people
//! (or `--json` for scripts); the MCP server itself never uses this module.

pub mod approvals;
pub mod checkpoints;
pub mod lint;
pub mod policy;
pub mod replay;
pub mod subject;
pub mod workspace;
