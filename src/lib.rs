//! cordon: confined tools for coding agents.
//!
//! One request flows left to right and no module reaches back:
//!
//! ```text
//! stdin ─▶ server ─▶ tools::X ─▶ policy ─▶ workspace (files) ───────────┐
//!         (rmcp)     (args→request)         exec + confine (processes) ├─▶ lint ─▶ shape ─▶ stdout
//!                                                                      ┘
//! ```
//!
//! * [`runtime`]: the composition root: everything a policy turns into, built once
//!   ([`runtime::Runtime`], shared), and what one client owns on top ([`runtime::Session`]).
//! * [`policy`]: what a call may do, as validated data.
//! * [`confine`]: how the kernel enforces it (Landlock, seccomp, rlimits, cgroups); the only
//!   `unsafe` code.
//! * [`exec`]: one confined child from spawn to the death of its whole tree.
//! * [`interpreter`]: persistent, confined Python sessions for `code_interpreter`.
//! * [`doctor`]: live proof, on the running kernel, that the confinement holds.
//! * [`egress`]: the proxy that lets a proxy-mode policy reach hosts by name.

#![deny(unsafe_code)]

pub mod audit;
pub mod cli;
// The confinement code is the one place that talks to the kernel directly (fork, mount,
// prctl, seccomp); every block there carries a SAFETY note.
#[allow(unsafe_code)]
pub mod confine;
pub mod doctor;
pub mod egress;
pub mod error_kind;
pub mod exec;
pub mod files;
pub mod interpreter;
pub mod lint;
pub mod parser;
pub mod policy;
pub mod runtime;
pub mod server;
pub mod shape;
pub mod text;
pub mod tools;
pub mod workspace;
