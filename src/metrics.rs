//! The server's Prometheus metrics: one registry, and the small functions the places that
//! count call.
//!
//! Owns the metric names, their labels (every label value comes from a fixed set: tool names,
//! outcome and layer names, so no caller input can grow the series) and the text exposition
//! `serve --http` answers at `/metrics` (`server::http`). Counting is a relaxed atomic add, so
//! the functions below are cheap enough for every call's path.
//!
//! For code that runs background jobs: call [`job_started`] when a job starts and keep the
//! guard it returns for the job's life; dropping it (the job ended, was killed or its session
//! went) lowers `cordon_jobs_active` again.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::LazyLock;
use std::time::Duration;

/// What the exposition is served as (prometheus-client writes OpenMetrics text).
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    tool: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LayerLabels {
    layer: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabels {
    cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AnswerLabels {
    answer: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabels {
    direction: &'static str,
}

/// How a call ended, as the `outcome` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallOutcome {
    Ok,
    /// An error result (a failed command, a bad argument, a limit).
    Error,
    /// Refused by a command rule (or an `ask` the user declined).
    Denied,
}

/// Which layer refused something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layer {
    /// The policy's command rules (`deny`, a declined `ask`).
    Rule,
    /// Landlock, as the kernel's audit records report it (`confine::audit`).
    Landlock,
    /// A seccomp filter that killed a process (SIGSYS); refusals returning an errno are not
    /// visible to the server.
    Seccomp,
    /// The egress proxy refused a connection.
    Proxy,
}

struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    duration: Family<ToolLabels, Histogram, fn() -> Histogram>,
    denials: Family<LayerLabels, Counter>,
    sessions: Gauge,
    jobs: Gauge,
    warm_slot_misses: Counter,
    view_rebuilds: Counter,
    egress_bytes: Family<DirectionLabels, Counter>,
    egress_refusals: Counter,
    parser_restarts: Counter,
    breaker_trips: Family<CauseLabels, Counter>,
    breaker_refusals: Counter,
    breaker_answers: Family<AnswerLabels, Counter>,
}

fn duration_histogram() -> Histogram {
    // 5 ms .. ~82 s: a `true` in a warm slot up to a long build.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let mut registry = Registry::with_prefix("cordon");
    let m = Metrics {
        calls: Family::default(),
        duration: Family::new_with_constructor(duration_histogram),
        denials: Family::default(),
        sessions: Gauge::default(),
        jobs: Gauge::default(),
        warm_slot_misses: Counter::default(),
        view_rebuilds: Counter::default(),
        egress_bytes: Family::default(),
        egress_refusals: Counter::default(),
        parser_restarts: Counter::default(),
        breaker_trips: Family::default(),
        breaker_refusals: Counter::default(),
        breaker_answers: Family::default(),
        registry: Registry::default(),
    };
    registry.register(
        "tool_calls",
        "Tool calls by tool and outcome (ok, error, denied)",
        m.calls.clone(),
    );
    registry.register(
        "tool_call_duration_seconds",
        "Duration of tool calls, from the call's start to its answer",
        m.duration.clone(),
    );
    registry.register(
        "denials",
        "Refusals by layer: rule (command rules), landlock (kernel audit records), seccomp \
         (processes killed by SIGSYS), proxy (egress refusals)",
        m.denials.clone(),
    );
    registry.register(
        "sessions_active",
        "MCP sessions open now (begun with initialize; stateless requests open none)",
        m.sessions.clone(),
    );
    registry.register("jobs_active", "Background jobs running now", m.jobs.clone());
    registry.register(
        "warm_slot_misses",
        "Calls that found no warm sandbox slot and waited for one to be made",
        m.warm_slot_misses.clone(),
    );
    registry.register(
        "view_rebuilds",
        "Sandbox views rebuilt (protected paths changed, or the sandbox init ended)",
        m.view_rebuilds.clone(),
    );
    registry.register(
        "egress_bytes",
        "Bytes through the egress proxy (sent: client to target, received: target to client)",
        m.egress_bytes.clone(),
    );
    registry.register(
        "egress_refusals",
        "Connections the egress proxy refused",
        m.egress_refusals.clone(),
    );
    registry.register(
        "parser_worker_restarts",
        "Times the confined parser worker was replaced (crashed, hung, hit a limit)",
        m.parser_restarts.clone(),
    );
    registry.register(
        "breaker_trips",
        "Circuit breaker trips by cause (consecutive: one group's run, window: refusals of any \
         group within the window)",
        m.breaker_trips.clone(),
    );
    registry.register(
        "breaker_refusals",
        "Refusals answered with the circuit breaker's message instead of a plain deny",
        m.breaker_refusals.clone(),
    );
    registry.register(
        "breaker_answers",
        "People's answers to a tripped circuit breaker (allow_once, allow_session, keep_refusing)",
        m.breaker_answers.clone(),
    );
    Metrics { registry, ..m }
});

/// A tool call ended (every call passes `tools::finish`).
pub(crate) fn call_finished(tool: &'static str, outcome: CallOutcome, took: Duration) {
    let outcome = match outcome {
        CallOutcome::Ok => "ok",
        CallOutcome::Error => "error",
        CallOutcome::Denied => "denied",
    };
    METRICS
        .calls
        .get_or_create(&CallLabels { tool, outcome })
        .inc();
    METRICS
        .duration
        .get_or_create(&ToolLabels { tool })
        .observe(took.as_secs_f64());
}

/// `n` refusals by `layer`.
pub(crate) fn denials(layer: Layer, n: u64) {
    if n == 0 {
        return;
    }
    let layer = match layer {
        Layer::Rule => "rule",
        Layer::Landlock => "landlock",
        Layer::Seccomp => "seccomp",
        Layer::Proxy => "proxy",
    };
    METRICS
        .denials
        .get_or_create(&LayerLabels { layer })
        .inc_by(n);
}

/// The number of MCP sessions open now.
pub(crate) fn set_sessions(n: usize) {
    METRICS.sessions.set(i64::try_from(n).unwrap_or(i64::MAX));
}

/// Counts one running background job until the guard is dropped.
#[must_use = "the job counts as running while the guard lives"]
pub(crate) fn job_started() -> JobGuard {
    METRICS.jobs.inc();
    JobGuard(())
}

/// See [`job_started`].
#[derive(Debug)]
pub(crate) struct JobGuard(());

impl Drop for JobGuard {
    fn drop(&mut self) {
        METRICS.jobs.dec();
    }
}

/// A call found no warm slot.
pub(crate) fn warm_slot_miss() {
    METRICS.warm_slot_misses.inc();
}

/// A sandbox view was rebuilt.
pub(crate) fn view_rebuilt() {
    METRICS.view_rebuilds.inc();
}

/// One connection through the egress proxy ended.
pub(crate) fn egress_connection(sent: u64, received: u64, refused: bool) {
    for (direction, n) in [("sent", sent), ("received", received)] {
        if n > 0 {
            METRICS
                .egress_bytes
                .get_or_create(&DirectionLabels { direction })
                .inc_by(n);
        }
    }
    if refused {
        METRICS.egress_refusals.inc();
        denials(Layer::Proxy, 1);
    }
}

/// The parser worker was replaced.
pub(crate) fn parser_worker_restarted() {
    METRICS.parser_restarts.inc();
}

/// The circuit breaker tripped; `cause` is `consecutive`, `window` or `kept`.
pub(crate) fn breaker_tripped(cause: &'static str) {
    METRICS
        .breaker_trips
        .get_or_create(&CauseLabels { cause })
        .inc();
}

/// A refusal was answered with the circuit breaker's message.
pub(crate) fn breaker_refusal() {
    METRICS.breaker_refusals.inc();
}

/// A person answered a tripped breaker: `allow_once`, `allow_session` or `keep_refusing`.
pub(crate) fn breaker_answered(answer: &'static str) {
    METRICS
        .breaker_answers
        .get_or_create(&AnswerLabels { answer })
        .inc();
}

/// The exposition text.
pub(crate) fn render() -> String {
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &METRICS.registry) {
        tracing::warn!("cannot encode the metrics: {e}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_show_in_the_exposition() {
        call_finished("shell_exec", CallOutcome::Denied, Duration::from_millis(3));
        denials(Layer::Landlock, 2);
        let guard = job_started();
        let text = render();
        assert!(
            text.contains("cordon_tool_calls_total{tool=\"shell_exec\",outcome=\"denied\"}"),
            "{text}"
        );
        assert!(
            text.contains("cordon_denials_total{layer=\"landlock\"}"),
            "{text}"
        );
        assert!(
            text.contains("cordon_tool_call_duration_seconds_bucket"),
            "{text}"
        );
        assert!(text.contains("cordon_jobs_active 1"), "{text}");
        breaker_tripped("consecutive");
        breaker_answered("keep_refusing");
        breaker_refusal();
        let after = render();
        for needle in [
            "cordon_breaker_trips_total{cause=\"consecutive\"} 1",
            "cordon_breaker_answers_total{answer=\"keep_refusing\"} 1",
            "cordon_breaker_refusals_total 1",
        ] {
            assert!(after.contains(needle), "{needle}: {after}");
        }
        drop(guard);
        assert!(render().contains("cordon_jobs_active 0"));
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
