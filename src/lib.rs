//! cordon: confined tools for coding agents.
//!
//! Built once, at start ([`runtime`]): the policy is loaded and validated ([`policy`]), then
//! resolved into one plan per stage ([`policy::resolve`]), and every stage is built from its
//! plan:
//!
//! ```text
//! main (CLI) ─▶ Policy::load ─▶ Policy::resolve ─▶ Runtime::build ─▶ serve | exec | doctor | lint
//!                               ConfinePlan ─▶ confine::Confinement ─┐
//!                               ExecPlan ────▶ exec::Executor ◀──────┘
//!                               LintPlan ────▶ lint::Linting (external linters via the executor,
//!                                              the syntax check via the parser worker)
//!                               protected set, write rules ─▶ workspace
//! ```
//!
//! Then one request flows left to right, and no module reaches back to a stage on its left
//! (`confine`, `exec`, `lint`, `interpreter` and `shape` import nothing of `policy`; only
//! `server` and `shape` know MCP types):
//!
//! ```text
//! stdin ─▶ server ─▶ tools::X ─▶ policy::decide ─▶ workspace (files) ─────────────┐
//!         (rmcp;      (args →     (allow, deny,     exec + confine (processes) ────┼─▶ lint ─▶ shape ─▶ stdout
//!          approval,   Request)    ask)             interpreter (Python sessions) ─┘       (ToolOutcome)
//!          audit via tools::finish)
//! ```
//!
//! Where a change goes:
//!
//! * [`runtime`]: the composition root: everything a policy turns into, built once
//!   ([`runtime::Runtime`], shared by all clients), and what one client connection owns on
//!   top ([`runtime::Session`]: its interpreter sessions, its cancellation).
//! * [`server`]: the MCP face (rmcp): tool registration and schemas, protocol revisions,
//!   approval questions, progress, cancellation, resources, framing, shutdown.
//! * [`tools`]: one file per tool: arguments, output, the work; every tool ends through the
//!   skeleton [`tools::finish`] (default output on error, audit, shape, bound).
//! * [`policy`]: what a call may do: the TOML schema and its validation, the command rules,
//!   [`policy::resolve`] (the plans) and `decide` (allow, deny or ask, per request),
//!   [`policy::explain`] (what a denial means under this policy).
//! * [`workspace`]: the workspace root as a capability: rooting, atomic writes, protected
//!   paths judged on the final target, the `.cordon/` spill area.
//! * [`git`]: git by construction: the shadow gitdir calls write, and the verified import of
//!   its data into the operator's repository.
//! * [`files`]: the pure logic of the file tools (paging, exact edits, diffs).
//! * [`confine`]: how the kernel enforces a [`confine::ConfinePlan`] (Landlock, seccomp,
//!   rlimits, cgroups, namespaces, the sandbox init) and the scratch directories that serves
//!   (swept after a killed server), and the reader of the kernel's Landlock audit records
//!   ([`confine::audit`]: each denial attributed to its call); the only `unsafe` code.
//! * [`exec`]: one confined child from spawn to the death of its whole tree.
//! * [`interpreter`]: persistent, confined Python sessions for `code_interpreter`.
//! * [`parser`]: the confined worker that runs every tree-sitter grammar (syntax check,
//!   command analysis), so the server never parses hostile text itself.
//! * [`lint`]: diagnostics after every write: syntax check, external linters, `introduced`.
//! * [`shape`]: presentation: long output cut with spill, text hygiene, the tool result.
//! * [`error_kind`]: the SPEC error kinds every stage names its failures in.
//! * [`audit`]: typed audit records and the append-only log they go to.
//! * [`events`]: server events for clients (git imports refused, limits, view rebuilt, parser worker
//!   restarted, degraded enforcement), sent by `server` as MCP log messages.
//! * [`metrics`]: the Prometheus registry `serve --http` exposes at `/metrics`, and the small
//!   counting functions the stages call.
//! * [`text`]: cutting text to a number of characters, one way everywhere.
//! * [`doctor`]: live proof, on the running kernel, that the confinement holds.
//! * [`egress`]: the proxy that lets a proxy-mode policy reach hosts by name (started by
//!   the runtime from the plan's proxy rules and handed to `confine`, which serves each
//!   sandbox init's listener with it).
//! * [`cli`]: the non-serving subcommands' logic (`lint`, `policy`, the workspace default).

#![deny(unsafe_code)]
// Everything is crate-private unless `app` or `testing` re-exports it.
#![deny(unreachable_pub)]

pub(crate) mod audit;
pub(crate) mod breaker;
pub(crate) mod checkpoint;
pub(crate) mod cli;
pub(crate) mod clock;
// The confinement code is the one place that talks to the kernel directly (fork, mount,
// prctl, seccomp); every block there carries a SAFETY note.
#[allow(unsafe_code)]
pub(crate) mod confine;
pub(crate) mod doctor;
pub(crate) mod egress;
pub(crate) mod error_kind;
pub(crate) mod events;
pub(crate) mod exec;
pub(crate) mod files;
pub(crate) mod git;
pub(crate) mod glob;
pub(crate) mod interpreter;
pub(crate) mod jobs;
pub(crate) mod lint;
pub(crate) mod metrics;
pub(crate) mod parser;
pub(crate) mod policy;
pub(crate) mod runtime;
pub(crate) mod server;
pub(crate) mod shape;
pub(crate) mod text;
pub(crate) mod tools;
pub(crate) mod workspace;

#[doc(hidden)]
pub mod app;
#[doc(hidden)]
pub mod testing;
