//! The request an episodic decider receives (design.md § 10.4): the
//! execution's state as it is and the events no decision has seen, never
//! its past, so a request's size does not grow with the episodes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::EventKind;
use crate::contract::ActivityState;
use crate::plan::SHAPE_VERSION;

/// The `type` of an episode's request (the start's is
/// `workflow_started`).
pub const DECISION_REQUEST_TYPE: &str = "decision";

/// Largest output or signal input shown inline in a request, bytes of
/// JSON; a larger one is shown as `{"output_ref": ...}`, which the Rust
/// helper fetches.
pub const MAX_INLINE_BYTES: usize = 32_000;

/// Largest decision request, bytes of JSON: a synchronous Invoke's payload
/// is at most 6 MB (6,291,456 bytes); the rest is headroom (issue 42 A.5,
/// docs/limits.md § 4). A request over it shows fewer of its new events
/// ([`DecisionRequest::fit`]); the others wait for the next decision.
pub const MAX_REQUEST_BYTES: usize = 5_000_000;

/// What a decider is invoked with (synchronously) on each episode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionRequest {
    /// Shape version, [`SHAPE_VERSION`].
    pub version: u32,
    /// [`DECISION_REQUEST_TYPE`].
    #[serde(rename = "type")]
    pub kind: String,
    /// The execution.
    pub workflow_exec_id: String,
    /// Its workflow name.
    pub workflow_name: String,
    /// This attempt of this decision: its answer commits only while it is
    /// the one in flight.
    pub decision_id: String,
    /// The workflow's input, `null` when absent.
    #[serde(default)]
    pub input: Value,
    /// The nodes not ended, in the order they were scheduled.
    pub open: Vec<NodeView>,
    /// The markers recorded, the latest value per name.
    #[serde(default)]
    pub markers: BTreeMap<String, Value>,
    /// The new events, in log order.
    pub events: Vec<EventView>,
}

impl DecisionRequest {
    /// Drop the last of the new events while the request is over `max`
    /// bytes of JSON ([`MAX_REQUEST_BYTES`] in the engine), keeping at
    /// least one: they wait for the next decision, as events past the
    /// engine's 100 per request do. Returns the size reached. One event, every marker and every open node fit within
    /// the limit by the bounds on each (docs/limits.md § 4).
    pub fn fit(&mut self, max: usize) -> usize {
        let size = |r: &DecisionRequest| serde_json::to_vec(r).map_or(usize::MAX, |j| j.len());
        // Each event's own bytes (and its comma) are taken off as it goes,
        // then the whole is measured once more.
        let mut now = size(self);
        while now > max && self.events.len() > 1 {
            let last = self.events.pop().expect("more than one");
            now -= serde_json::to_vec(&last)
                .map_or(0, |j| j.len() + 1)
                .min(now);
        }
        size(self)
    }

    /// A request of this version and type with no node, marker or event
    /// yet.
    pub fn new(
        workflow_exec_id: &str,
        workflow_name: &str,
        decision_id: &str,
        input: Value,
    ) -> DecisionRequest {
        DecisionRequest {
            version: SHAPE_VERSION,
            kind: DECISION_REQUEST_TYPE.into(),
            workflow_exec_id: workflow_exec_id.into(),
            workflow_name: workflow_name.into(),
            decision_id: decision_id.into(),
            input,
            open: vec![],
            markers: BTreeMap::new(),
            events: vec![],
        }
    }
}

/// A node not ended, as a decider sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    /// Its name.
    pub name: String,
    /// Its kind's plan field: `lambda`, `task_list`, `wait`, `signal` or
    /// `workflow` ([`crate::kind::NodeKind::field`]).
    pub kind: String,
    /// Its state.
    pub state: ActivityState,
    /// Its attempt, 0 before its first claim.
    pub attempt: u32,
    /// Its function, task list, signal or child workflow name; absent for
    /// a timer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// A timer's fire time, epoch seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fires_epoch: Option<i64>,
}

/// A new event, as a decider sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventView {
    /// Its place in the execution's log, from 1.
    pub seq: u64,
    /// What happened.
    pub kind: EventKind,
    /// When, epoch seconds.
    pub at_epoch: i64,
    /// For an ended node: its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// For an ended node: the state it ended in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ActivityState>,
    /// An ended node's output, or a signal's input, up to
    /// [`MAX_INLINE_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Where a larger output or input is kept, instead of `output`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_ref: Option<String>,
    /// A failure's error, a cancel request's or a refusal's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A signal's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
}

impl EventView {
    /// An event of `kind` at `seq`, `at_epoch`, with no detail yet.
    pub fn new(seq: u64, kind: EventKind, at_epoch: i64) -> EventView {
        EventView {
            seq,
            kind,
            at_epoch,
            node: None,
            state: None,
            output: None,
            output_ref: None,
            reason: None,
            signal: None,
        }
    }

    /// `output` shown inline when it fits [`MAX_INLINE_BYTES`], else by
    /// `reference` (`output_ref`).
    pub fn with_output(mut self, output: Value, reference: impl FnOnce() -> String) -> Self {
        if output.to_string().len() <= MAX_INLINE_BYTES {
            self.output = Some(output);
        } else {
            self.output_ref = Some(reference());
        }
        self
    }
}
