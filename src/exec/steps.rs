//! The moments of one call's critical path, measured on every call with a handful of
//! `Instant::now()` reads, so that `cordon doctor --bench` can show an operator where a slow
//! host's time goes.
//!
//! Owns the names and the order of the steps: take a ready slot, hand it the program (argv,
//! environment, descriptors) and see it exec, the program's own run until its exit status is
//! back, the end of the call's tree (kill check, git import, network record), and the output
//! and denials gathered into the outcome. Does not own what happens in each step (`launch`,
//! `Executor::run`) nor the report (`doctor::bench`).

use std::time::{Duration, Instant};

/// How long each step of one call took, in path order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallSteps {
    /// From the call's start until a ready slot (or a fresh child, without the init) was in
    /// hand: the sandbox init's readiness and the warm pool.
    pub take_slot: Duration,
    /// Handing the slot the program and waiting until it runs (the slot's socket closes at
    /// the exec).
    pub hand_over_and_exec: Duration,
    /// The program's own run, until its exit status was back.
    pub run_until_exit: Duration,
    /// Ending the call's tree: what it left running, its cgroups' limit counters, the git
    /// import, the proxy's record.
    pub end_tree: Duration,
    /// Output readers joined, kernel denials gathered, the outcome made.
    pub gather: Duration,
}

/// The names [`CallSteps`] is reported under, in order.
pub const STEP_NAMES: [&str; 5] = [
    "take a ready slot",
    "hand over argv/env/fds, exec",
    "program runs until its status is back",
    "end the call's tree (kill check, git import, network)",
    "gather output and denials",
];

impl CallSteps {
    /// The steps in the order of [`STEP_NAMES`].
    pub fn as_array(&self) -> [Duration; 5] {
        [
            self.take_slot,
            self.hand_over_and_exec,
            self.run_until_exit,
            self.end_tree,
            self.gather,
        ]
    }
}

/// Marks taken while a call goes along its path.
#[derive(Debug, Clone, Copy)]
pub struct Marks {
    pub started: Instant,
    pub slot_taken: Instant,
    pub running: Instant,
}

impl Marks {
    pub fn new(started: Instant) -> Self {
        Self {
            started,
            slot_taken: started,
            running: started,
        }
    }

    /// The steps, given the moments the program's status came back, its tree was ended and
    /// the outcome was made.
    pub fn steps(&self, exited: Instant, ended: Instant, gathered: Instant) -> CallSteps {
        CallSteps {
            take_slot: self.slot_taken - self.started,
            hand_over_and_exec: self.running - self.slot_taken,
            run_until_exit: exited.saturating_duration_since(self.running),
            end_tree: ended.saturating_duration_since(exited),
            gather: gathered.saturating_duration_since(ended),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_steps_add_up_to_the_whole_path() {
        let t0 = Instant::now();
        let ms = |n| Duration::from_millis(n);
        let marks = Marks {
            started: t0,
            slot_taken: t0 + ms(1),
            running: t0 + ms(3),
        };
        let steps = marks.steps(t0 + ms(10), t0 + ms(12), t0 + ms(13));
        assert_eq!(
            steps.as_array(),
            [ms(1), ms(2), ms(7), ms(2), ms(1)],
            "{steps:?}"
        );
        assert_eq!(steps.as_array().iter().sum::<Duration>(), ms(13));
    }
}
