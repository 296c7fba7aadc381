//! `[breaker]`: when repeated refusals stop being answered one by one and are handed to a
//! person instead: how many refusals of one kind in a row trip it, how many of any kind within
//! a window, and whether a tripped breaker may ask a person to lift a command rule's refusal.
//!
//! Owns the raw table as written, its validation (one error per field, saying what to write)
//! and the validated [`BreakerPolicy`]. It does not count anything (`crate::breaker`) nor ask
//! anyone (`server::breaker`), and explaining it is `cli::policy`'s.
//!
//! These numbers come only from the operator's policy: no tool argument, header or `_meta`
//! field reads or changes them, so a model cannot raise the threshold it keeps hitting.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[breaker]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBreaker {
    pub consecutive: Option<u64>,
    pub window_refusals: Option<u64>,
    pub window_secs: Option<u64>,
    pub ask: Option<bool>,
}

impl RawBreaker {
    pub fn overlay(self, base: Self) -> Self {
        Self {
            consecutive: self.consecutive.or(base.consecutive),
            window_refusals: self.window_refusals.or(base.window_refusals),
            window_secs: self.window_secs.or(base.window_secs),
            ask: self.ask.or(base.ask),
        }
    }
}

/// `[breaker]`, validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BreakerPolicy {
    /// Refusals of one group (the same rule, protected path, host, …) with no successful call
    /// of the same tool between them that trip the breaker; 0 turns this trigger off.
    pub consecutive: u32,
    /// Refusals of any group within `window` that trip it; 0 turns this trigger off.
    pub window_refusals: u32,
    /// The window, and how long a run of one group's refusals lasts without a new one.
    #[serde(serialize_with = "secs")]
    pub window: Duration,
    /// Whether a tripped breaker asks a person (through `server.approvals`) to allow a command
    /// rule's refusal once or for the session, or to keep refusing it. Off: the refusal is
    /// answered with the breaker's message and nobody is asked.
    pub ask: bool,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_secs())
}

/// Defaults, as `policies/default.toml` writes them.
pub(crate) const DEFAULT_CONSECUTIVE: u64 = 3;
pub(crate) const DEFAULT_WINDOW_REFUSALS: u64 = 10;
pub(crate) const DEFAULT_WINDOW_SECS: u64 = 300;

/// Largest `consecutive`: past this the breaker would never stop a loop in practice.
const MAX_CONSECUTIVE: u64 = 100;
/// Largest `window_refusals`: the window keeps one timestamp per refusal up to this many.
const MAX_WINDOW_REFUSALS: u64 = 10_000;
/// Longest window: a day.
const MAX_WINDOW_SECS: u64 = 86_400;

/// Why `[breaker]` is not valid: the field and what to write instead.
#[derive(Debug, PartialEq, Eq)]
pub struct BreakerError {
    pub field: &'static str,
    pub message: String,
}

impl BreakerPolicy {
    /// Validates `raw`; a field left out takes its default.
    pub fn validate(raw: RawBreaker) -> Result<Self, BreakerError> {
        let err = |field: &'static str, message: String| BreakerError { field, message };
        let consecutive = raw.consecutive.unwrap_or(DEFAULT_CONSECUTIVE);
        if consecutive == 1 || consecutive > MAX_CONSECUTIVE {
            return Err(err(
                "breaker.consecutive",
                format!(
                    "{consecutive} is not a threshold: write a number from 2 to \
                     {MAX_CONSECUTIVE} (one refusal is not a loop), or 0 to turn this trigger off"
                ),
            ));
        }
        let window_refusals = raw.window_refusals.unwrap_or(DEFAULT_WINDOW_REFUSALS);
        if window_refusals == 1 || window_refusals > MAX_WINDOW_REFUSALS {
            return Err(err(
                "breaker.window_refusals",
                format!(
                    "{window_refusals} is not a threshold: write a number from 2 to \
                     {MAX_WINDOW_REFUSALS}, or 0 to turn this trigger off"
                ),
            ));
        }
        let window_secs = raw.window_secs.unwrap_or(DEFAULT_WINDOW_SECS);
        if window_secs == 0 || window_secs > MAX_WINDOW_SECS {
            return Err(err(
                "breaker.window_secs",
                format!(
                    "{window_secs} is out of range: write a number of seconds from 1 to {MAX_WINDOW_SECS}"
                ),
            ));
        }
        Ok(Self {
            consecutive: consecutive as u32,
            window_refusals: window_refusals as u32,
            window: Duration::from_secs(window_secs),
            ask: raw.ask.unwrap_or(true),
        })
    }

    /// Whether any trigger is on.
    pub fn enabled(&self) -> bool {
        self.consecutive > 0 || self.window_refusals > 0
    }
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        Self::validate(RawBreaker::default()).expect("the defaults are valid")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(toml_text: &str) -> RawBreaker {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn defaults_when_left_out() {
        let p = BreakerPolicy::default();
        assert_eq!(p.consecutive, 3);
        assert_eq!(p.window_refusals, 10);
        assert_eq!(p.window, Duration::from_secs(300));
        assert!(p.ask && p.enabled());
    }

    #[test]
    fn zero_turns_a_trigger_off_and_both_off_disables_it() {
        let p = BreakerPolicy::validate(raw("consecutive = 0\nwindow_refusals = 0")).unwrap();
        assert!(!p.enabled());
        let p = BreakerPolicy::validate(raw("consecutive = 0")).unwrap();
        assert!(p.enabled());
    }

    #[test]
    fn bad_values_name_the_field_and_what_to_write() {
        for (text, field, needle) in [
            ("consecutive = 1", "breaker.consecutive", "from 2 to 100"),
            ("consecutive = 1000", "breaker.consecutive", "0 to turn"),
            ("window_refusals = 1", "breaker.window_refusals", "from 2"),
            (
                "window_refusals = 99999",
                "breaker.window_refusals",
                "10000",
            ),
            ("window_secs = 0", "breaker.window_secs", "from 1 to 86400"),
            ("window_secs = 100000", "breaker.window_secs", "86400"),
        ] {
            let e = BreakerPolicy::validate(raw(text)).unwrap_err();
            assert_eq!(e.field, field, "{text}");
            assert!(e.message.contains(needle), "{text}: {}", e.message);
        }
        assert!(toml::from_str::<RawBreaker>("threshold = 3").is_err());
    }

    #[test]
    fn a_layer_overlays_field_by_field() {
        let merged = raw("consecutive = 5").overlay(raw("window_secs = 60\nask = false"));
        let p = BreakerPolicy::validate(merged).unwrap();
        assert_eq!(
            (p.consecutive, p.window, p.ask),
            (5, Duration::from_secs(60), false)
        );
    }
}
