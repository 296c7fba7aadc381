//! Terminal commands that are more than a call into the library: `cordon lint`,
//! `cordon policy …` (with `policy replay`), the operator's `cordon approvals`/`approve`/
//! `deny`, and the choice of workspace every command makes. They print for people
//! (or `--json` for scripts); the MCP server itself never uses this module.

pub(crate) mod approvals;
pub(crate) mod checkpoints;
pub(crate) mod lint;
pub(crate) mod policy;
pub(crate) mod replay;
pub(crate) mod subject;
pub(crate) mod workspace;
