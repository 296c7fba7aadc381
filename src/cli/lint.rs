//! `cordon lint FILE…`: the write/edit lint pipeline from a terminal, for reviewers checking
//! what an agent will be told, and for debugging a linter configuration.

use crate::confine::{ConfineOptions, Confinement};
use crate::exec::Executor;
use crate::lint::{LintReport, LintStatus, Linting};
use crate::parser::{ParserClient, ParserConfig};
use crate::policy::Policy;
use crate::workspace::Workspace;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum LintCliError {
    #[error(transparent)]
    Workspace(#[from] crate::workspace::OpenWorkspaceError),
    #[error(transparent)]
    Confine(#[from] crate::confine::ConfineError),
    #[error("linter configuration: {0}")]
    Config(#[from] crate::lint::ParseError),
    #[error("{path}: {message}")]
    File { path: String, message: String },
}

#[derive(serde::Serialize)]
pub struct FileLint {
    pub path: String,
    pub lint: LintReport,
}

/// Lints each file (paths relative to the current directory or absolute, all inside
/// `workspace`) and returns the reports in order.
pub async fn run(
    workspace: &Path,
    policy: &Policy,
    files: &[PathBuf],
    allow_degraded: bool,
) -> Result<Vec<FileLint>, LintCliError> {
    let ws = Workspace::open(workspace)?;
    let program = crate::parser::worker_program().map_err(|e| LintCliError::File {
        path: "cordon".into(),
        message: format!("cannot find this program's own binary for the parser worker: {e}"),
    })?;
    let options = ConfineOptions {
        allow_degraded,
        extra_read_exec: vec![program.clone()],
        ..ConfineOptions::default()
    };
    let confinement = Arc::new(Confinement::build(policy, ws.root(), &options)?);
    let executor = Arc::new(Executor::new(confinement, policy));
    let parser = Arc::new(ParserClient::new(
        Arc::clone(&executor),
        program,
        ParserConfig::default(),
    ));
    let linting = Linting::for_policy(policy, Some(executor), Some(parser))?;
    let mut out = Vec::new();
    for file in files {
        let shown = file.display().to_string();
        let absolute = std::path::absolute(file).map_err(|e| LintCliError::File {
            path: shown.clone(),
            message: e.to_string(),
        })?;
        let rel = ws
            .resolve_arg(&absolute.to_string_lossy())
            .map_err(|e| LintCliError::File {
                path: shown.clone(),
                message: e.to_string(),
            })?;
        let bytes = ws.read_bytes(&rel).map_err(|e| LintCliError::File {
            path: shown.clone(),
            message: e.to_string(),
        })?;
        let text = String::from_utf8(bytes).map_err(|_| LintCliError::File {
            path: shown.clone(),
            message: "not UTF-8 text".into(),
        })?;
        let lint = linting.check(rel.as_str(), None, &text).await;
        out.push(FileLint {
            path: rel.as_str().to_owned(),
            lint,
        });
    }
    Ok(out)
}

/// `path:line:col: severity [code] message (source)` lines, compiler style.
pub fn render(reports: &[FileLint]) -> String {
    let mut out = String::new();
    for r in reports {
        match r.lint.status {
            LintStatus::Skipped | LintStatus::Unavailable => out.push_str(&format!(
                "{}: lint {}: {}\n",
                r.path,
                if r.lint.status == LintStatus::Skipped {
                    "skipped"
                } else {
                    "unavailable"
                },
                r.lint.reason.as_deref().unwrap_or("")
            )),
            _ => {}
        }
        for d in &r.lint.diagnostics {
            out.push_str(&format!(
                "{}:{}:{}: {} {}{} ({})\n",
                r.path,
                d.line,
                d.column,
                d.severity.as_str(),
                d.code
                    .as_deref()
                    .map(|c| format!("[{c}] "))
                    .unwrap_or_default(),
                d.message,
                d.source
            ));
        }
    }
    let issues: usize = reports.iter().map(|r| r.lint.diagnostics.len()).sum();
    out.push_str(&format!(
        "{} file(s), {issues} diagnostic(s)\n",
        reports.len()
    ));
    out
}

/// 0 clean, 1 diagnostics found, 3 a check could not run.
pub fn exit_code(reports: &[FileLint]) -> i32 {
    if reports
        .iter()
        .any(|r| r.lint.status == LintStatus::Unavailable)
    {
        3
    } else if reports.iter().any(|r| !r.lint.diagnostics.is_empty()) {
        1
    } else {
        0
    }
}
