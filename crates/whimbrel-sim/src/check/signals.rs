//! The invariants of signal waits (design.md § 9.2).
//!
//! Safety, after every step: a signal wait is never claimed nor launched;
//! it COMPLETES only by the delivery of a signal of its name sent to its
//! workflow (event id `signal:(its id):(name)#(signal_id)`, a valid row
//! of `whimbrel_signal`), with that row's input as its output (`null`
//! when absent); it is TIMED_OUT only by the monitor (`timed-out:`), only
//! with a timeout, and never before start + `timeout_seconds` by the
//! engine's clock, nor by the world's beyond two engine clocks' skew, nor
//! when a valid signal of its name had been sent to its workflow before
//! the monitor's invocation began (its last read, a consistent Query,
//! must have found it).
//! That it ends once is [`super::safety::history_violations`]' one
//! terminal transition and [`Checker::terminal_state_change`].
//!
//! Liveness, at the end: no wait is left RUNNING while a valid signal of
//! its name was sent to its running workflow (no signal is lost), and a
//! COMPLETED wait's output, as its dependents received it, is its
//! signal's input (`liveness.rs`, [`expected_output`]).
//!
//! [`expected_output`]: super::liveness

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;
use whimbrel_core::contract::{ActivityState, NodeKind};
use whimbrel_core::model::{ActivityExec, SignalRow};
use whimbrel_core::store::memory::MemoryBackend;
use whimbrel_core::store::Tables;

use super::Checker;

/// Seconds a signal wait may time out early in world time: the skews of
/// the engine that started it and of the monitor (two seconds each).
const TIMEOUT_TOLERANCE: i64 = 4;

/// Signal rows by (workflow exec id, signal key).
pub type SignalRows = HashMap<(String, String), SignalRow>;

/// What the checker remembers of signals between steps.
#[derive(Debug, Default)]
pub struct Seen {
    /// Every signal row seen in the table (write-once; kept here after
    /// TTL deleted it).
    pub rows: SignalRows,
    /// When each signal wait was first seen RUNNING, world time.
    running: HashMap<String, i64>,
    /// When each signal row was first seen, world time.
    sent_at: HashMap<(String, String), i64>,
    /// The rows in the table at the last look (TTL deletes some).
    present: HashSet<(String, String)>,
}

impl Seen {
    /// The rows of `name` sent to workflow exec `exec`, each with the world
    /// time it was first seen in the table (`None`: seen only at the end).
    pub(super) fn sent_to<'a>(
        &'a self,
        exec: &'a str,
        name: &'a str,
    ) -> impl Iterator<Item = (&'a SignalRow, Option<i64>)> + 'a {
        (self.rows.iter())
            .filter(move |((e, _), r)| e == exec && r.name == name)
            .map(|(k, r)| (r, self.sent_at.get(k).copied()))
    }

    /// Forget when wait `id` was first seen RUNNING (a redrive starts it
    /// anew).
    pub(super) fn forget(&mut self, id: &str) {
        self.running.remove(id);
    }
}

/// The rows of the signal table that parse (every one the simulation
/// writes does).
pub fn signal_rows(mem: &MemoryBackend, t: &Tables) -> Vec<SignalRow> {
    super::parsed(mem, &t.signal())
}

/// What a COMPLETED signal wait's output must be: the input of the
/// signal its completing event names (`null` when it has none); a
/// description of what is missing otherwise, which no output equals.
pub fn signal_output(a: &ActivityExec, rows: &SignalRows) -> Value {
    let key = a
        .trail
        .history
        .iter()
        .find(|h| h.state == ActivityState::Completed)
        .and_then(|h| signal_key_of(a, &h.full_event_id(&a.activity_exec_id)));
    match key.and_then(|k| rows.get(&(a.workflow_exec_id.clone(), k))) {
        Some(row) => row.input.clone().unwrap_or(Value::Null),
        None => Value::String(format!(
            "the input of a signal {:?} sent to {}",
            a.runner.runs.signal_name(),
            a.workflow_exec_id
        )),
    }
}

/// The signal key a delivery's event id names, for wait `a`:
/// `signal:(activity):(key)`.
fn signal_key_of(a: &ActivityExec, event_id: &str) -> Option<String> {
    let prefix = format!("signal:{}:", a.activity_exec_id);
    event_id.strip_prefix(&prefix).map(str::to_string)
}

/// 1 if wait `a` COMPLETED at or after its deadline by the engine's
/// clock (by the monitor's last read, or a delivery racing it), else 0.
pub fn at_deadline(a: &ActivityExec) -> u64 {
    let done = a
        .trail
        .history
        .iter()
        .find(|h| h.state == ActivityState::Completed);
    let due = a
        .timeouts
        .start_to_close_seconds
        .map(|t| a.timing.start_time_epoch + t);
    u64::from(matches!((done, due), (Some(h), Some(d)) if h.at_epoch >= d))
}

/// An output as a wait stores it: `null` may be read back as absent.
pub fn stored_output(a: &ActivityExec) -> Value {
    a.outcome.output.clone().unwrap_or(Value::Null)
}

impl Checker {
    /// Remember the signal rows in the table at world time `now`.
    pub(super) fn note_signals(&mut self, mem: &MemoryBackend, t: &Tables, now: Option<i64>) {
        self.signals.present.clear();
        for row in signal_rows(mem, t) {
            let key = (row.workflow_exec_id.clone(), row.signal_key.clone());
            self.signals.present.insert(key.clone());
            if let Some(now) = now {
                self.signals.sent_at.entry(key.clone()).or_insert(now);
            }
            self.signals.rows.entry(key).or_insert(row);
        }
    }

    /// The safety violations of `a` if it is a signal wait (module docs),
    /// and, at world time `now`, its timeout judged by the world's clock.
    pub(super) fn signal_violations(&mut self, a: &ActivityExec, now: Option<i64>) -> Vec<String> {
        if a.runner.kind() != NodeKind::Signal {
            return vec![];
        }
        let id = &a.activity_exec_id;
        let mut v = vec![];
        if a.attempt.token_hash.is_some() || a.attempt.launches > 0 {
            v.push(format!("{id}: a signal wait was claimed or launched"));
        }
        // An earlier generation's timeout counted from an earlier start.
        for h in super::workflow_redrive::generation(a) {
            let by = h.full_event_id(id);
            match h.state {
                ActivityState::Completed => v.extend(self.completion_violation(a, &by)),
                ActivityState::TimedOut => v.extend(timeout_violation(a, &by, h.at_epoch)),
                _ => {}
            }
        }
        if let Some(now) = now {
            if a.state == ActivityState::Running {
                self.signals.running.entry(id.clone()).or_insert(now);
            }
            v.extend(self.timed_out_early(a, now));
            v.extend(self.timed_out_despite_signal(a, now));
        }
        v
    }

    /// A COMPLETED entry of wait `a` by event `by` that is not the
    /// delivery of a valid signal of its name sent to its workflow, or
    /// an inline output that is not that signal's input.
    fn completion_violation(&self, a: &ActivityExec, by: &str) -> Option<String> {
        let id = &a.activity_exec_id;
        let Some(key) = signal_key_of(a, by) else {
            return Some(format!(
                "{id}: a signal wait COMPLETED by {by}, not by a signal"
            ));
        };
        let name = a.runner.runs.signal_name().unwrap_or_default();
        let Some(row) = self
            .signals
            .rows
            .get(&(a.workflow_exec_id.clone(), key.clone()))
        else {
            return Some(format!(
                "{id}: COMPLETED by signal {key:?}, never sent to {}",
                a.workflow_exec_id
            ));
        };
        if row.name != name || row.invalid().is_some() {
            return Some(format!(
                "{id}: waits for {name:?} but COMPLETED by signal {key:?} ({:?}; {:?})",
                row.name,
                row.invalid()
            ));
        }
        let expected = row.input.clone().unwrap_or(Value::Null);
        let inline = a.outcome.output_ref.is_none() && a.outcome.output_event_id.is_none();
        (a.state == ActivityState::Completed && inline && stored_output(a) != expected).then(|| {
            format!(
                "{id}: COMPLETED by signal {key:?} with output {:?}, not its input {expected}",
                a.outcome.output
            )
        })
    }

    /// A wait first seen TIMED_OUT at world time `now` less than its
    /// timeout (less [`TIMEOUT_TOLERANCE`]) after it went RUNNING: when it
    /// was first seen so, or when its RUNNING entry says if earlier. The
    /// checker looks between steps, so a RUNNING written by a call that
    /// then stalled is seen only when the call ends (sim seed 801: written
    /// at 797, seen at 934, its 155 s timeout rightly fired at 952); the
    /// entry's time is the engine's clock, within the tolerance of the
    /// world's.
    fn timed_out_early(&self, a: &ActivityExec, now: i64) -> Option<String> {
        let id = &a.activity_exec_id;
        let first_seen = self.ended_at.get(id) == Some(&now);
        let timeout = a.timeouts.start_to_close_seconds?;
        let written = super::workflow_redrive::generation(a)
            .iter()
            .rfind(|h| h.state == ActivityState::Running)
            .map(|h| h.at_epoch);
        let seen = *self.signals.running.get(id)?;
        let running = written.map_or(seen, |at| at.min(seen));
        (a.state == ActivityState::TimedOut
            && first_seen
            && now - running < timeout - TIMEOUT_TOLERANCE)
            .then(|| {
                format!(
                    "{id}: a signal wait with a {timeout}s timeout, RUNNING at world time \
                     {running}, TIMED_OUT at {now}"
                )
            })
    }
}

impl Checker {
    /// A wait first seen TIMED_OUT at world time `now` though a valid
    /// signal of its name was sent to its workflow before the monitor's
    /// invocation that timed it out began: more than the monitor
    /// function's timeout before `now` (Lambda stops it then, so its read
    /// came after that), and is in the table still (TTL did not delete it
    /// before that read).
    fn timed_out_despite_signal(&self, a: &ActivityExec, now: i64) -> Option<String> {
        let id = &a.activity_exec_id;
        if a.state != ActivityState::TimedOut || self.ended_at.get(id) != Some(&now) {
            return None;
        }
        let name = a.runner.runs.signal_name()?;
        let read_after = now - crate::template::function_timeout("whimbrel-heartbeat-monitor");
        let (row, at) = self.signals.rows.iter().find_map(|(k, r)| {
            let at = *self.signals.sent_at.get(k)?;
            let sent = self.signals.present.contains(k)
                && r.workflow_exec_id == a.workflow_exec_id
                && r.name == name
                && r.invalid().is_none()
                && at < read_after;
            sent.then_some((r, at))
        })?;
        Some(format!(
            "{id}: TIMED_OUT at world time {now} though signal {:?} was sent at world time {at}",
            row.signal_key
        ))
    }
}

/// A TIMED_OUT entry of wait `a` (event `by`, at `at` on the engine's
/// clock) that is not the monitor's, or with no timeout, or before start
/// + timeout by that clock.
fn timeout_violation(a: &ActivityExec, by: &str, at: i64) -> Option<String> {
    let id = &a.activity_exec_id;
    if !by.starts_with("timed-out:") {
        return Some(format!(
            "{id}: a signal wait TIMED_OUT by {by}, not by the monitor"
        ));
    }
    let Some(timeout) = a.timeouts.start_to_close_seconds else {
        return Some(format!(
            "{id}: a signal wait with no timeout TIMED_OUT ({by})"
        ));
    };
    let due = a.timing.start_time_epoch + timeout;
    (at < due).then(|| {
        format!(
            "{id}: a signal wait TIMED_OUT at {at}, before its start {} + {timeout}s",
            a.timing.start_time_epoch
        )
    })
}

/// At the end: signal waits still RUNNING in a running workflow (one of
/// `running`) though a valid signal of their name is in the table for it
/// (a lost signal), unless the stream record of every such signal went to the dead-letter
/// queue (`lost`, by signal key: nothing reads it again but a monitor
/// about to time the wait out).
pub fn lost_signals(
    acts: &[Arc<ActivityExec>],
    running: &HashSet<&str>,
    rows: &[SignalRow],
    lost: &HashSet<String>,
) -> Vec<String> {
    acts.iter()
        .filter(|a| a.runner.kind() == NodeKind::Signal && a.state == ActivityState::Running)
        .filter(|a| running.contains(a.workflow_exec_id.as_str()))
        .filter_map(|a| {
            let name = a.runner.runs.signal_name()?;
            let row = rows.iter().find(|r| {
                r.workflow_exec_id == a.workflow_exec_id
                    && r.name == name
                    && r.invalid().is_none()
                    && !lost.contains(&r.signal_key)
            })?;
            Some(format!(
                "{}: still waits for {name:?} though signal {:?} was sent at {:?} (a lost signal)",
                a.activity_exec_id, row.signal_key, row.when_epoch
            ))
        })
        .collect()
}

#[cfg(test)]
#[path = "signals_tests.rs"]
mod signals_tests;
