//! `shell_exec`'s run, once the call is admitted: a slot (or the call's cancellation first),
//! the checkpoint watch around it, the command in the foreground (`exec`, with progress
//! ticks) or as a background job (`background`), and the outcome shaped into the result: the
//! streams cut and spilled (`shape`), cordon's notices, and why it failed (`failure`).

use super::prepare::Prepared;
use super::{ShellExec, ShellExecArgs, ShellExecOutput, background, failure, nothing_ran};
use crate::audit::Decision;
use crate::exec::ExecOutcome;
use crate::policy::explain;
use crate::runtime::Session;
use crate::shape::{ErrorKind, ToolError, ToolOutcome, push_sections, shape_stream, shown_whole};
use crate::tools::{CallHooks, Done, SharedContext, Tool, finish};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs the checked command. `decision` is what the command rules (and the user) decided, for
/// the audit log: `allow` or `ask:<rule>:approved`.
pub(super) async fn run_prepared(
    ctx: SharedContext,
    args: ShellExecArgs,
    prepared: Prepared,
    hooks: CallHooks,
    decision: &Decision,
) -> ToolOutcome {
    let started = Instant::now();
    // A call cancelled while it waits for a slot (its client cancelled it, its MCP task was
    // cancelled, its session ended) never starts its command.
    let cancel = hooks.cancel.clone();
    let _slot = tokio::select! {
        biased;
        () = cancel.cancelled() => {
            let error = ToolError::new(
                ErrorKind::Internal,
                "the call was cancelled while it waited for a free slot \
                 (`server.max_concurrent_calls`); nothing ran",
            );
            return finish::<ShellExec>(&ctx, &args, decision, started, Err(error));
        }
        slot = ctx.runtime.slots.acquire() => slot,
    };
    let watch = crate::tools::Watch::begin(&ctx).await;
    // The slot bounds starting a background job; a running job is bounded by `[jobs]`.
    let result = if args.background {
        background::start_background(&ctx, &args, prepared.request).await
    } else {
        Ok(execute(&ctx, prepared, hooks).await)
    };
    let summary = crate::text::shortened(&args.command, 120).into_owned();
    let checkpoint = watch.end(ShellExec::NAME, summary).await;
    crate::tools::finish_with::<ShellExec>(&ctx, &args, decision, started, result, checkpoint)
}

async fn execute(ctx: &SharedContext, prepared: Prepared, hooks: CallHooks) -> Done<ShellExec> {
    let Prepared {
        mut request,
        live,
        cwd,
    } = prepared;
    request.cancel = Some(hooks.cancel.clone());
    let started = Instant::now();
    let ticker = hooks.progress.map(|report| {
        let live = Arc::clone(&live);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                report(started.elapsed(), live.last_line());
            }
        })
    });
    let outcome = ctx.runtime.executor.run(request).await;
    if let Some(t) = ticker {
        t.abort();
    }
    match outcome {
        Err(e) => {
            let error = ToolError::new(
                ErrorKind::from(&e),
                format!("could not start the command: {e}"),
            );
            Done::error(nothing_ran(ctx, error.clone()), &error)
        }
        Ok(outcome) => {
            let output = &ctx.runtime.policy.output;
            if shown_whole(&outcome.stdout, output) && shown_whole(&outcome.stderr, output) {
                return shape_outcome(ctx, outcome, &cwd);
            }
            // Shaping will write spill files: blocking work.
            let session = Arc::clone(ctx);
            ctx.runtime
                .blocking(move |_| shape_outcome(&session, outcome, &cwd))
                .await
        }
    }
}

fn shape_outcome(ctx: &Session, outcome: ExecOutcome, cwd: &std::path::Path) -> Done<ShellExec> {
    let enforcement = outcome.enforcement.level;
    let open = |stream: &str| {
        ctx.runtime
            .workspace
            .create_spill_std(&format!("shell-{stream}"))
    };
    let stdout = shape_stream(
        &outcome.stdout,
        &ctx.runtime.policy.output,
        "stdout",
        Some(&open),
    );
    let mut stderr = shape_stream(
        &outcome.stderr,
        &ctx.runtime.policy.output,
        "stderr",
        Some(&open),
    );
    let refused = outcome.network.iter().flat_map(|n| &n.refused);
    let leftovers = outcome.leftovers_notice();
    for notice in outcome.notices.iter().chain(refused).chain(&leftovers) {
        if !stderr.text.is_empty() && !stderr.text.ends_with('\n') {
            stderr.text.push('\n');
        }
        stderr.text.push_str(&format!("[cordon] {notice}\n"));
    }
    let scene = explain::Scene {
        policy: &ctx.runtime.policy,
        workspace: ctx.runtime.workspace.root(),
        cwd,
        protected_for_commands: ctx.runtime.executor.confinement().protects_paths(),
    };
    let denials = failure::call_denials(&outcome, &scene);
    let error = failure::outcome_error(&outcome, &scene, &denials);
    let mut text = String::new();
    if let Some(e) = &error {
        text.push_str(&e.text());
        text.push('\n');
    } else {
        text.push_str(&format!("exit 0 in {} ms\n", outcome.duration.as_millis()));
    }
    push_sections(
        &mut text,
        &[("stdout", &stdout.text), ("stderr", &stderr.text)],
    );
    if outcome.output_cut_short {
        text.push_str(
            "[a background process that left the process group still holds the output; \
             reading stopped, so later output is missing (no cgroup here to kill it)]\n",
        );
    }
    if !outcome.enforcement.level.is_full() {
        text.push_str(&format!(
            "[enforcement: {}]\n",
            outcome.enforcement.summary()
        ));
    }
    let controls = stdout.controls_removed + stderr.controls_removed;
    text.extend(crate::shape::controls_note(controls));
    let output = ShellExecOutput {
        checkpoint: None,
        exit_code: outcome.exit_code,
        signal: outcome.signal_name(),
        timed_out: outcome.timed_out,
        truncated: stdout.truncated || stderr.truncated,
        full_output: stdout.full_output.clone().or(stderr.full_output.clone()),
        stdout: stdout.text,
        stderr: stderr.text,
        duration_ms: outcome.duration.as_millis() as u64,
        limit: outcome.limit.clone(),
        enforcement,
        network: outcome.network.clone(),
        job: None,
        error,
        denials,
        control_chars_removed: controls as u64,
        git_refusals: if outcome.git_refused {
            outcome.notices.clone()
        } else {
            Vec::new()
        },
    };
    let is_error = output.error.is_some();
    Done {
        output,
        text,
        is_error,
        images: Vec::new(),
    }
}
