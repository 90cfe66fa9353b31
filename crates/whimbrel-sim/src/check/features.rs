//! What a schedule exercised, counted at its end, so that a passing run
//! is shown not to be vacuous.

use whimbrel_core::attr;
use whimbrel_core::contract::{ActivityState, NodeKind, WorkflowState};
use whimbrel_core::model::ActivityExec;
use whimbrel_core::store::memory::MemoryBackend;
use whimbrel_core::store::Tables;

use super::signals::at_deadline;
use super::{activities, workflows, Checker};
use whimbrel_core::plan::FAN_OUT_LIST_MAX;

impl Checker {
    /// How often retries, workers and timeouts were exercised (so a passing run
    /// is not vacuous): retried attempts, activities that completed after a
    /// retry, worker claims, activities timed out for good by schedule-to-close
    /// or schedule-to-start, workflows ended by their execution timeout,
    /// completed workflows (whose result the liveness check compares),
    /// timers fired and cancelled, signals sent (rows written) and signal
    /// waits completed, timed out and cancelled; child workflows started,
    /// nested, completed, failed, cancelled and abandoned
    /// (`children.rs`); workflows and activities redriven, and how
    /// redriven workflows ended (`workflow_redrive.rs`).
    pub fn features(
        &self,
        mem: &MemoryBackend,
        t: &Tables,
    ) -> std::collections::BTreeMap<String, u64> {
        let mut out = std::collections::BTreeMap::new();
        let mut add = |k: &str, n: u64| *out.entry(k.to_string()).or_insert(0) += n;
        let (acts, wfs) = (activities(mem, t).0, workflows(mem, t));
        super::children::features(&super::children::Read::new(&acts, &wfs), &mut add);
        super::workflow_redrive::features(&acts, &wfs, &mut add);
        for a in acts {
            let retried = a
                .trail
                .history
                .iter()
                .filter(|h| h.attempt.is_some() && !super::workflow_redrive::is_redrive(h))
                .count() as u64;
            add("retried attempts", retried);
            if retried > 0 && a.state == ActivityState::Completed {
                add("completed after a retry", 1);
            }
            add(
                "worker claims",
                a.trail
                    .history
                    .iter()
                    .filter(|h| h.event_id.starts_with("claim:"))
                    .count() as u64,
            );
            // The wide rounds of episodic deciders (issue 42 C.1).
            match (a.links.scheduled_by, a.links.prerequisites.len()) {
                (Some(_), whimbrel_core::decider::MAX_DECIDED_LINKS) => {
                    add("decided joins of 500 nodes", 1)
                }
                (Some(_), n) if n > FAN_OUT_LIST_MAX => add("decided joins of 33 to 499 nodes", 1),
                _ => {}
            }
            if a.links.target_limit.is_some() {
                add("activities claimed under a target limit", 1);
            }
            if a.links.max_concurrency.is_some() {
                add("activities under a concurrency limit", 1);
                let claimed = a
                    .trail
                    .history
                    .iter()
                    .any(|h| h.event_id.starts_with("launcher:"));
                add("limited activities claimed", u64::from(claimed));
            }
            self.wait_features(&a, &mut add);
            let err = a.outcome.error.as_deref().unwrap_or("");
            if a.state == ActivityState::TimedOut && err.contains("(schedule-to-") {
                add("schedule timeouts", 1);
            }
        }
        for w in wfs {
            if w.state == WorkflowState::Completed {
                add("completed workflows (result checked)", 1);
            }
            if w.error
                .as_deref()
                .is_some_and(|e| e.starts_with("execution timeout"))
            {
                add("execution timeouts", 1);
            }
        }
        add("signals sent", self.signals.rows.len() as u64);
        add("target slot waits", self.target_slots.waiters.len() as u64);
        let parts = mem.items(&t.workflow_plan());
        add(
            "plan parts stored",
            parts.iter().filter(|i| i.contains_key(attr::PART)).count() as u64,
        );
        out
    }

    /// What timers and signal waits did: fired, cancelled, judged for
    /// lateness; completed (at their deadline), timed out, cancelled.
    fn wait_features(&self, a: &ActivityExec, add: &mut impl FnMut(&str, u64)) {
        match (a.runner.kind(), a.state) {
            (NodeKind::Timer, ActivityState::Completed) => {
                add("timers fired", 1);
                add(
                    "timers judged for lateness",
                    u64::from(self.lateness_judged(a)),
                );
            }
            (NodeKind::Timer, ActivityState::Cancelled) => add("timers cancelled", 1),
            (NodeKind::Signal, ActivityState::Completed) => {
                add("signal waits completed", 1);
                add("signal waits completed at their deadline", at_deadline(a));
            }
            (NodeKind::Signal, ActivityState::TimedOut) => add("signal waits timed out", 1),
            (NodeKind::Signal, ActivityState::Cancelled) => add("signal waits cancelled", 1),
            _ => {}
        }
    }
}
