//! Operators who set concurrency limits per Lambda function or task list
//! (design.md § 9.3), as `whimbrel limit set` does: through the Full
//! Logic API (`Engine::set_target_limit`), whose raise hands the new slots
//! to the oldest waiters and launches them. At set-up, perhaps a limit on
//! the activity function and one on the workers' task list; in the faulty
//! phase, now and then a limit set again, raised or lowered (even below
//! the slots held), by a process that may die between any two of its
//! writes, stall, or see its writes fail.
//!
//! Everything here is drawn from the world's limit stream
//! ([`crate::shared::Shared::limit_rng`]): a schedule draws everything
//! else as it did, until a limit changes what happens.

use rand::Rng;
use whimbrel_core::model::TargetLimit;

use super::{Clock, Sim};
use crate::shared::lock;

/// The targets limited: the activity function and the workers' list.
const TARGETS: [&str; 2] = [
    crate::actors::RUNS_ON_LAMBDA,
    crate::actors::RUNS_ON_TASK_LIST,
];

/// Chance that a target is limited at set-up.
const LIMITED: f64 = 0.4;

/// Chance of a limit change at a step of the faulty phase (about three
/// in a schedule of 1,500 steps).
const SHARE: f64 = 0.002;

impl Sim {
    /// At set-up, before any workflow starts: each target limited (see
    /// [`LIMITED`]) to 1 to 3 slots, its item put as a limit set anew is.
    pub(super) fn set_up_limits(&mut self) {
        if !self.params.target_limits {
            return;
        }
        for target in TARGETS {
            let max = self.limit_draw(|r| r.gen_bool(LIMITED).then(|| r.gen_range(1..=3)));
            let Some(max) = max else { continue };
            self.log(format!("operator limits {target} to {max}"));
            lock(&self.world).exercise("target limits set");
            // As `Engine::set_target_limit` writes a new limit.
            let limit = TargetLimit {
                target: target.to_string(),
                max_concurrency: Some(max),
                slots_free: i64::from(max),
                slot_waiters: vec![],
            };
            self.put_raw(
                &self.tables.limit(),
                serde_dynamo::to_item(&limit).expect("item"),
            );
        }
    }

    /// Perhaps (see [`SHARE`]) an operator sets a target's limit to 1 to
    /// 4 slots, as a task that faults may stop.
    pub(super) fn user_limit(&mut self) {
        if !self.params.target_limits || !self.limit_draw(|r| r.gen_bool(SHARE)) {
            return;
        }
        let (t, max) = self.limit_draw(|r| (r.gen_range(0..TARGETS.len()), r.gen_range(1..=4)));
        let target = TARGETS[t];
        let (inv, engine) = self.engine(true, Clock::Engine, None);
        self.log(format!("operator sets the limit of {target} to {max}"));
        lock(&self.world).exercise("target limits changed");
        self.exec.spawn(inv, async move {
            let _ = engine.set_target_limit(target, max).await;
        });
    }

    /// Draw from the world's limit stream.
    fn limit_draw<T>(&self, f: impl FnOnce(&mut rand_chacha::ChaCha8Rng) -> T) -> T {
        f(&mut lock(&self.world).limit_rng)
    }
}
