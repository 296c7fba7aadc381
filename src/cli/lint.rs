//! `cordon lint FILE…`: the write/edit lint pipeline from a terminal, for reviewers checking
//! what an agent will be told, and for debugging a linter configuration.

use crate::lint::{LintReport, LintStatus};
use crate::runtime::{Runtime, RuntimeOptions};
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum LintCliError {
    #[error(transparent)]
    Runtime(#[from] crate::runtime::RuntimeError),
    #[error("{path}: {message}")]
    File { path: String, message: String },
}

#[derive(serde::Serialize)]
pub struct FileLint {
    pub path: String,
    pub lint: LintReport,
}

/// What `cordon lint` runs on: the policy's confinement over `options.workspace`, with the
/// parser worker (this binary) for the syntax check.
pub fn runtime(
    policy: crate::policy::Policy,
    options: RuntimeOptions,
) -> Result<Runtime, LintCliError> {
    let program = crate::parser::worker_program().map_err(|e| LintCliError::File {
        path: "cordon".into(),
        message: format!("cannot find this program's own binary for the parser worker: {e}"),
    })?;
    let options = RuntimeOptions {
        parser_program: Some(program),
        ..options
    };
    Ok(Runtime::build(policy, options)?)
}

/// Lints each file (paths relative to the current directory or absolute, all inside the
/// runtime's workspace) and returns the reports in order.
pub async fn run(runtime: &Runtime, files: &[PathBuf]) -> Result<Vec<FileLint>, LintCliError> {
    let ws = &runtime.workspace;
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
        let lint = runtime.lint.check(rel.as_str(), None, &text).await;
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
