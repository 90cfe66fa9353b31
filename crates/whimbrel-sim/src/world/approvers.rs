//! The users who answer signal waits (design.md § 9.2) at the moments
//! that matter: near a wait's timeout (a late approver, racing the
//! monitor's last read), and, once the faults stopped, every wait with no
//! timeout that nothing was sent for, so that every workflow can end.
//! Drawn from the world's signal stream, as `signals.rs` is.

use std::collections::HashSet;

use rand::Rng;
use serde_json::json;
use whimbrel_core::contract::{ActivityState, NodeKind};
use whimbrel_core::model::{ActivityExec, SignalRow};

use super::Sim;
use crate::shared::lock;

impl Sim {
    /// Once the faults stopped and nothing is in flight: send a signal
    /// to every running wait with no timeout of a running workflow for
    /// which none of its name was sent (a wait for which one was sent,
    /// still running, is a lost signal: the liveness check reports it).
    pub(super) fn answer_waiting_signals(&mut self) {
        for (exec, name) in self.unanswered(|a| a.timeouts.start_to_close_seconds.is_none()) {
            self.signals.answered += 1;
            self.answer(&exec, &name, false);
        }
    }

    /// A late approver: now and then (one step in twenty) a user answers
    /// the waits of names sent late: a wait with a timeout when it comes
    /// in two to five minutes, so that the stream handler races the
    /// monitor's last read, which delivers it when the signal's stream
    /// record is held up (`break_signal_shards`); one without, once it
    /// waited a minute (its dependents then run while faults still may).
    pub(super) fn late_approval(&mut self) {
        if self.signals.late_names.is_empty() || !self.signal_draw(|r| r.gen_bool(0.05)) {
            return;
        }
        let now = lock(&self.world).now;
        let late = |a: &ActivityExec| {
            let start = a.timing.start_time_epoch;
            let slot = (
                a.workflow_name.clone(),
                a.runner
                    .runs
                    .signal_name()
                    .map(str::to_string)
                    .unwrap_or_default(),
            );
            let due = match a.timeouts.start_to_close_seconds {
                Some(t) => (120..=300).contains(&(start + t - now)),
                None => now - start >= 60,
            };
            due && self.signals.late_names.contains(&slot)
        };
        for (exec, name) in self.unanswered(late) {
            self.signals.late += 1;
            self.answer(&exec, &name, true);
        }
    }

    /// The (workflow exec, name) of each RUNNING wait of a running
    /// workflow that `pick`s, and for which no valid signal of its name is
    /// in the table.
    fn unanswered(&self, pick: impl Fn(&ActivityExec) -> bool) -> Vec<(String, String)> {
        let rows = crate::check::signal_rows(&self.mem, &self.tables);
        let running: HashSet<String> = crate::check::workflows(&self.mem, &self.tables)
            .into_iter()
            .filter(|w| !w.state.is_terminal())
            .map(|w| w.workflow_exec_id)
            .collect();
        let acts = crate::check::activities(&self.mem, &self.tables).0;
        let mut out: Vec<(String, String)> = acts
            .into_iter()
            .filter(|a| {
                a.runner.kind() == NodeKind::Signal
                    && a.state == ActivityState::Running
                    && running.contains(&a.workflow_exec_id)
                    && pick(a)
            })
            .filter_map(|a| {
                Some((
                    a.workflow_exec_id.clone(),
                    a.runner.runs.signal_name().map(str::to_string)?,
                ))
            })
            .filter(|(exec, name)| {
                !rows.iter().any(|r| {
                    r.workflow_exec_id == *exec && r.name == *name && r.invalid().is_none()
                })
            })
            .collect();
        // Two waits of one name take one signal.
        out.dedup();
        out
    }

    /// Send a new signal `name` to `exec`.
    fn answer(&mut self, exec: &str, name: &str, faulty: bool) {
        let id = self.signals.new_id();
        let k = self.signal_draw(|r| r.gen_range(0..1000));
        let row = SignalRow::new(exec, name, &id, Some(json!({"n": k})));
        self.send_signal_row(row, faulty);
    }
}
