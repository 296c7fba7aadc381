//! How a test says it skipped: it calls [`mark_skipped`] with what is missing and returns.
//! The record lives in this process, which runs exactly one test, so after the test returns
//! its outcome is "skipped" exactly when something was marked.

use std::sync::Mutex;

static REASONS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Records that the running test did not (fully) run here, and why. A test that marks a part
/// as skipped and goes on is still reported as skipped: not everything it checks was checked.
pub fn mark_skipped(reason: &str) {
    REASONS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push(reason.to_owned());
}

/// What the test marked as skipped, joined; None when it marked nothing.
pub fn reason() -> Option<String> {
    let reasons = REASONS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    (!reasons.is_empty()).then(|| reasons.join("; "))
}
