//! Users who send signals (design.md § 9.2), as `whimbrel signal` does:
//! one conditional put of a row of `whimbrel_signal`
//! ([`whimbrel_core::engine::signals::send_signal`]) through the
//! simulated store, so its faults apply (a row that fails to write is not
//! sent; one whose answer was lost is). They signal running workflows,
//! some before the node waits and some after, some not started yet, some
//! ended, some made up; a name the plan waits for, or another; now and
//! then an id sent already (a duplicate) or a malformed row. Some names
//! users forget (their waits time out) or send only near the timeout,
//! and in the end every wait with no timeout is answered
//! (`approvers.rs`). The signal stream's mapping breaks now and then, as
//! the activity events' does.
//!
//! Everything here is drawn from the world's signal stream
//! ([`crate::shared::Shared::signal_rng`]), and nothing is drawn in a
//! schedule whose plans wait for no signal: its main draws stay as they
//! were. A send's invocation (its crash, clock and store faults), and a
//! signal batch's, draw from the main stream, as every invocation does.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rand::Rng;
use serde_json::{json, Value};
use whimbrel_core::contract::{ActivityState, WorkflowState};
use whimbrel_core::engine::signals::send_signal;
use whimbrel_core::handlers::Outcome;
use whimbrel_core::ids;
use whimbrel_core::model::{signal_key, SignalRow};

use super::scenario::SIGNAL_NAMES;
use super::{Clock, Sim, MAIN_SHARDS};
use crate::shared::lock;

/// The signals of a schedule: what plans wait for, what users sent.
#[derive(Debug, Default)]
pub(super) struct Signals {
    /// The signal names each workflow's plan waits for, by workflow name.
    waits: HashMap<String, Vec<String>>,
    /// The ids sent (or tried) to each (workflow exec, name), so a user
    /// may send one again.
    sent: HashMap<(String, String), Vec<String>>,
    /// The names of waits, by (workflow name, signal name), that users
    /// never send (one in five), so that waits with a timeout time out.
    forgotten: HashSet<(String, String)>,
    /// Those that users send only near a wait's timeout (one in five).
    pub(super) late_names: HashSet<(String, String)>,
    /// Signal ids drawn so far: each new one is `s(n)`, unique in the
    /// schedule, so a row's `signal_key` names one row.
    drawn: u64,
    /// The keys of the rows users sent (or tried to).
    keys: HashSet<String>,
    /// Sends that found their id sent already (`send_signal` false).
    duplicated: Arc<AtomicU64>,
    /// Sends to a node that did not wait yet.
    early: u64,
    /// Waits answered once the faults stopped.
    pub(super) answered: u64,
    /// Waits answered by a late approver, near their timeout.
    pub(super) late: u64,
    /// The signal stream's shards, whose invocations all fail for a
    /// while: the step they break at and for how many seconds.
    broken: Option<(usize, i64)>,
}

impl Signals {
    /// Note the signal names `plan` (workflow `name`'s) waits for, and
    /// draw from `rng` (the signal stream) those its users forget and
    /// those they send late.
    pub(super) fn note_plan(&mut self, name: &str, plan: &Value, rng: &mut impl Rng) {
        let names: Vec<String> = plan["activities"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["signal"].as_str().map(str::to_string))
            .collect();
        for n in &names {
            let slot = (name.to_string(), n.clone());
            match rng.gen_range(0..5) {
                0 => drop(self.forgotten.insert(slot)),
                1 => drop(self.late_names.insert(slot)),
                _ => {}
            }
        }
        self.waits.insert(name.to_string(), names);
    }

    /// A new signal id.
    pub(super) fn new_id(&mut self) -> String {
        self.drawn += 1;
        format!("s{}", self.drawn)
    }
}

/// What a user picked to signal.
struct Target {
    /// The workflow exec id.
    exec: String,
    /// Its workflow's name (what it waits for), when it is a real one.
    workflow: Option<String>,
    /// The engine must reject the signal (made up, or ended for good).
    rejected: bool,
}

impl Sim {
    /// Perhaps (one step in a hundred) a user sends a signal: see the module
    /// docs. Nothing at all in a schedule whose plans wait for none.
    pub(super) fn user_signal(&mut self) {
        if self.signals.waits.values().all(Vec::is_empty) {
            return;
        }
        self.late_approval();
        if !self.signal_draw(|r| r.gen_bool(0.01)) {
            return;
        }
        let Some(t) = self.signal_target() else {
            return;
        };
        let (dup, pick, k, kind) = self.signal_draw(|r| {
            (
                r.gen_bool(0.15),
                r.gen::<usize>(),
                r.gen_range(0..1000),
                r.gen_range(0..100),
            )
        });
        let Some(name) = self.signal_name(t.workflow.as_deref()) else {
            return;
        };
        let slot = (t.exec.clone(), name.clone());
        let before = self.signals.sent.get(&slot).cloned().unwrap_or_default();
        let reused = dup && !before.is_empty();
        let id = match reused {
            true => before[pick % before.len()].clone(),
            false => self.signals.new_id(),
        };
        let input = match kind {
            0..=9 => None,
            // One in a hundred near the largest input a signal may carry
            // (issue 42 C.1: an output by row, an event by reference).
            14 => Some(json!({"n": k, "pad": "p".repeat(250_000)})),
            10..=13 => Some(json!({"n": k, "pad": "p".repeat(300)})),
            _ => Some(json!({"n": k})),
        };
        let mut row = SignalRow::new(&t.exec, &name, &id, input);
        let malformed = !reused && (95..100).contains(&kind);
        if malformed {
            // An id with a '#', or a key that is not (name)#(signal_id).
            match kind % 2 {
                0 => row = SignalRow::new(&t.exec, &name, &format!("{id}#x"), row.input),
                _ => row.signal_key = signal_key(&name, &format!("k{id}")),
            }
        } else if !reused {
            self.signals.sent.entry(slot).or_default().push(id);
        }
        // A duplicate's row is the first one's (which was judged then).
        if (t.rejected || malformed) && !reused {
            self.mark_hostile(row.signal_key.clone());
        }
        if !t.rejected && !malformed && self.waits_later(&t.exec, &name) {
            self.signals.early += 1;
        }
        self.send_signal_row(row, true);
    }

    /// Draw from the world's signal stream.
    pub(super) fn signal_draw<T>(&self, f: impl FnOnce(&mut rand_chacha::ChaCha8Rng) -> T) -> T {
        f(&mut lock(&self.world).signal_rng)
    }

    /// The name a user signals to a workflow of `workflow` (none: made
    /// up): mostly one its plan waits for, never one its users forgot or
    /// send late (`None` then: nothing is sent); else one it does not
    /// wait for.
    fn signal_name(&self, workflow: Option<&str>) -> Option<String> {
        let waits = workflow.and_then(|w| self.signals.waits.get(w));
        let waits = waits.cloned().unwrap_or_default();
        let others: Vec<&str> = SIGNAL_NAMES
            .into_iter()
            .filter(|n| !waits.iter().any(|w| w == n))
            .chain(["nobody-waits"])
            .collect();
        let (named, pick) = self.signal_draw(|r| (r.gen_bool(0.9), r.gen::<usize>()));
        if !named || waits.is_empty() {
            return Some(others[pick % others.len()].to_string());
        }
        let name = &waits[pick % waits.len()];
        let forgotten = workflow.is_some_and(|w| {
            let slot = (w.to_string(), name.clone());
            self.signals.forgotten.contains(&slot) || self.signals.late_names.contains(&slot)
        });
        (!forgotten).then(|| name.clone())
    }

    /// A workflow exec to signal: one in twenty made up; else one
    /// requested so far, whether it exists yet or runs (nine in ten), or
    /// one that ended (which must reject it, unless a user may redrive
    /// it first); mostly (four in five) of a workflow that waits for some
    /// signal.
    fn signal_target(&self) -> Option<Target> {
        let ended: HashMap<String, WorkflowState> =
            crate::check::workflows(&self.mem, &self.tables)
                .into_iter()
                .filter(|w| w.state.is_terminal())
                .map(|w| (w.workflow_exec_id, w.state))
                .collect();
        let (made_up, to_ended, waiting, pick) = self.signal_draw(|r| {
            (
                r.gen_bool(0.05),
                r.gen_bool(0.1),
                r.gen_bool(0.8),
                r.gen::<u64>(),
            )
        });
        let waits = |w: &str| self.signals.waits.get(w).is_some_and(|n| !n.is_empty());
        let execs: Vec<(String, String)> = crate::check::requests(&self.mem, &self.tables)
            .into_iter()
            .filter(|r| r.cancel_workflow_exec_id.is_none() && r.redrive_workflow_exec_id.is_none())
            .map(|r| {
                let id = ids::workflow_exec_id(&r.workflow_name, &r.workflow_request_id);
                (r.workflow_name, id)
            })
            .filter(|(w, id)| ended.contains_key(id) == to_ended && (!waiting || waits(w)))
            .collect();
        if made_up || execs.is_empty() {
            return made_up.then(|| Target {
                exec: ids::workflow_exec_id("wf0", &format!("made-up-{pick}")),
                workflow: None,
                rejected: true,
            });
        }
        let (workflow, exec) = execs[(pick % execs.len() as u64) as usize].clone();
        // A FAILED or CANCELLED one may be redriven before the signal
        // reaches it (`workflow_redrive.rs`); a COMPLETED one never is.
        let completed = ended.get(&exec) == Some(&WorkflowState::Completed);
        Some(Target {
            exec,
            workflow: Some(workflow),
            rejected: to_ended && (completed || !self.params.redrives),
        })
    }

    /// Whether a node of `exec` waits for `name` but has not started to
    /// (the signal comes early, and is kept for it).
    fn waits_later(&self, exec: &str, name: &str) -> bool {
        let nodes: Vec<_> = crate::check::activities(&self.mem, &self.tables)
            .0
            .into_iter()
            .filter(|a| a.workflow_exec_id == exec && a.runner.runs.signal_name() == Some(name))
            .collect();
        nodes.is_empty()
            || nodes
                .iter()
                .all(|a| matches!(a.state, ActivityState::Requested | ActivityState::Ready))
    }

    /// Spawn a user's send of `row`, on a client's clock (its `when_epoch`
    /// and expiry, as `whimbrel signal` sets them).
    pub(super) fn send_signal_row(&mut self, row: SignalRow, faulty: bool) {
        self.log(format!(
            "user signals {} {:?}: {:?}",
            row.workflow_exec_id, row.signal_key, row.input
        ));
        self.signals.keys.insert(row.signal_key.clone());
        let (inv, engine) = self.engine(faulty, Clock::Client, None);
        let retention = self.cfg.row_retention_seconds;
        let duplicated = self.signals.duplicated.clone();
        let world = self.world.clone();
        self.exec.spawn(inv, async move {
            let now = engine.now().epoch;
            let row = SignalRow {
                when_epoch: Some(now),
                expires_at_epoch: retention.map(|s| now + s),
                ..row
            };
            let sent = send_signal(engine.store(), &row).await;
            if matches!(sent, Ok(false)) {
                duplicated.fetch_add(1, Ordering::Relaxed);
            }
            lock(&world).log(format!("signal {:?} sent: {sent:?}", row.signal_key));
        });
    }

    /// At faulty step `step`: one schedule with waits in two, the signal
    /// stream's mapping breaks for long enough that it gives records up
    /// (as `draw_disruptions` breaks a shard of the activity events'),
    /// drawn at step 0 from the signal stream: a signal then reaches a
    /// running wait only through the redrive, or the monitor's last read
    /// when the wait's timeout comes first.
    pub(super) fn break_signal_shards(&mut self, step: usize) {
        if self.signals.waits.values().all(Vec::is_empty) {
            return;
        }
        if step == 0 {
            let steps = self.params.fault_steps.max(1);
            self.signals.broken = self.signal_draw(|r| {
                r.gen_bool(0.5)
                    .then(|| (r.gen_range(0..steps), r.gen_range(1500..4000)))
            });
        }
        if let Some((_, secs)) = self.signals.broken.filter(|b| b.0 == step) {
            let until = lock(&self.world).now + secs;
            for shard in &mut self.shards[MAIN_SHARDS..] {
                shard.poisoned_until = until;
            }
            self.log(format!("the signal stream's shards broken for {secs}s"));
        }
    }

    /// The signal stream's mapping: now and then (drawn from the signal
    /// stream) the next batch of one of its shards with records waiting.
    pub(super) fn deliver_signal_batch(&mut self) {
        let waiting: Vec<usize> = (MAIN_SHARDS..self.shards.len())
            .filter(|&i| self.shards[i].cursor < self.shards[i].records.len())
            .collect();
        if waiting.is_empty() {
            return;
        }
        let (go, pick) = self.signal_draw(|r| (r.gen_bool(0.15), r.gen::<usize>()));
        if go {
            self.deliver(waiting[pick % waiting.len()]);
        }
    }

    /// The counts of what users sent: ids sent already, sends to a node
    /// not waiting yet, waits answered at the end, and signals the engine
    /// rejected (an outcome of their stream record or redrive).
    pub(super) fn signal_counts(&self) -> [(&'static str, u64); 5] {
        let rejected = self
            .signals
            .keys
            .iter()
            .filter(|k| {
                self.outcomes
                    .get(*k)
                    .is_some_and(|o| o.iter().any(|o| matches!(o, Outcome::Rejected(_))))
            })
            .count();
        [
            (
                "signals duplicated",
                self.signals.duplicated.load(Ordering::Relaxed),
            ),
            ("signals sent before their wait", self.signals.early),
            ("signals answering a wait at the end", self.signals.answered),
            ("signals sent near a wait's timeout", self.signals.late),
            ("signals rejected", rejected as u64),
        ]
    }
}
