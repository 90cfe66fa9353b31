//! The item of `whimbrel_activity_exec`, one execution of one activity,
//! in parts by concern: what runs it ([`Runner`]), its live attempt
//! ([`Attempt`]), its timeouts ([`Timeouts`]) and times ([`Timing`]), its
//! place in the graph ([`Links`]), how it ended ([`Outcome`]) and its events
//! ([`Trail`]). The parts are flattened: the stored item is one flat map
//! whose attribute names do not change.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{GroupSlot, HistoryEntry};
use crate::contract::ActivityState;
use crate::dates::DateList;

/// An event row kept on its activity until the activity's state allows it
/// (docs/design.md § 3.8: early events are parked, not retried).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParkedEvent {
    /// The event row's id.
    pub activity_event_id: String,
    /// Its transition name.
    pub transition: String,
    /// Its output (COMPLETED).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// True when the output was too large or too deep to park: it is read
    /// back from the event row (`activity_event_id`) when the event applies.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_in_row: bool,
    /// With `output_in_row`: the output's digest when it was parked
    /// ([`crate::payloads::output_digest`]), so a row overwritten while
    /// the event waited is detected when it applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_sha256: Option<String>,
    /// Its error (FAILED, CANCEL), capped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its attempt, if it named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// The hash of its attempt token ([`crate::ids::token_hash`]), if it
    /// carried one: a parked entry never holds the token itself, which
    /// would let any reader of the item report as the live attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_token_hash: Option<String>,
    /// The token itself, on entries parked by earlier versions only: read
    /// (through [`ParkedEvent::token_hash`]), never written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_token: Option<String>,
}

impl ParkedEvent {
    /// The hash of the attempt token the parked report carried, if any,
    /// whichever way the entry holds it.
    pub fn token_hash(&self) -> Option<String> {
        self.attempt_token_hash
            .clone()
            .or_else(|| self.attempt_token.as_deref().map(crate::ids::token_hash))
    }
}

/// Room an activity item keeps free, besides its largest output and its
/// history, for what it gathers while it runs (parked events, error,
/// times), bytes.
pub const ACTIVITY_ITEM_RESERVE: usize = 24 * 1024;

/// An item of `whimbrel_activity_exec`: one execution of one activity.
///
/// Its attributes are grouped by concern into flattened parts, so the
/// stored item is one flat map with the attribute names of
/// whimbrel-architecture.md and `docs/tables.md`; only the Rust names
/// differ where the stored ones mislead (the parts say which).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActivityExec {
    /// Hash key, `(activity_name)::(uuid)`.
    pub activity_exec_id: String,
    /// Range key.
    pub workflow_exec_id: String,
    /// The workflow's name (for updating its exec).
    pub workflow_name: String,
    /// The activity's name in the plan.
    pub activity_name: String,
    /// Current state (contract: States).
    pub state: ActivityState,
    /// Optimistic-lock version, +1 on every state change (and on a child
    /// node's `child_run` move).
    #[serde(default)]
    pub version: u64,
    /// What runs it and with what input.
    #[serde(flatten)]
    pub runner: Runner,
    /// The live attempt, its token and the retry policy.
    #[serde(flatten)]
    pub attempt: Attempt,
    /// The timeouts, seconds.
    #[serde(flatten)]
    pub timeouts: Timeouts,
    /// When things happened, and its due marker.
    #[serde(flatten)]
    pub timing: Timing,
    /// Its place in the plan's graph.
    #[serde(flatten)]
    pub links: Links,
    /// How it ended.
    #[serde(flatten)]
    pub outcome: Outcome,
    /// Its accepted and parked events.
    #[serde(flatten)]
    pub trail: Trail,
}

/// What runs the activity and with what: its Lambda or task list, the worker
/// holding it, and its input.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Runner {
    /// What runs it, with the fields of its kind (stored flat:
    /// `lambda`, `task_list`, `wait_seconds` / `wait_until_epoch`,
    /// `signal_name`, `child`; [`super::Runs`]).
    #[serde(flatten)]
    pub runs: super::Runs,
    /// Once its child continued as new, the execution of the child's
    /// chain it waits on now: `(generation)#(workflow exec id)`
    /// ([`crate::ids::child_run`]), moved by each `continue_as_new` of the
    /// chain; absent while it waits on the first (derived) one. Read it
    /// through [`ActivityExec::current_child`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_run: Option<String>,
    /// While QUEUED and waiting for a worker: `(task_list)#(shard)`, hash
    /// key of the sparse task-list GSI (`task_list_shard-task_queued_epoch-index`).
    /// Removed by the claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_list_shard: Option<String>,
    /// While waiting for a worker: when it may be claimed, epoch seconds
    /// (range key of the task-list GSI: workers claim the oldest first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_queued_epoch: Option<i64>,
    /// The worker holding the live attempt (task lists), as it named itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// Input from the plan, when its JSON is at most
    /// [`crate::payloads::INLINE_PAYLOAD_BYTES`]; a larger one is
    /// on its input row ([`Self::input_ref`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// Hash key of the write-once [`InputRow`](super::InputRow) (on `whimbrel_workflow_plan`)
    /// that holds its input, when the input is too large to keep on this
    /// item (design.md § 2.8: every update is billed by the item's size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_ref: Option<String>,
}

impl Runner {
    /// What runs the node (design.md § 9.1).
    pub fn kind(&self) -> crate::kind::NodeKind {
        self.runs.kind()
    }

    /// Its function, task list, signal or child workflow name; `None` for
    /// a timer.
    pub fn target_name(&self) -> Option<String> {
        self.runs.target_name().map(str::to_string)
    }
}

/// The child workflow a `workflow` node starts (design.md § 9.5).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildRunner {
    /// The registered workflow it runs.
    pub workflow_name: String,
    /// The child's depth (its parent's + 1).
    pub depth: u32,
    /// The tree's root, when the parent is not it
    /// ([`crate::model::ParentLink::root`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// What becomes of the child when the node is cancelled.
    #[serde(default)]
    pub parent_close: crate::kind::ParentClose,
}

/// The live attempt: its number, its launches, the hash of its token and the
/// retry policy that allows the next (contract: Transitions, RETRY).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// Retry policy (the plan's default with the activity's fields over
    /// it); absent = one attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<crate::retry::RetryPolicy>,
    /// The attempt, 1-based: 1 once first QUEUED, +1 on each retry; 0 =
    /// never queued. Each attempt is claimed by a conditional write (the
    /// launcher before its invoke, or a worker) that sets its token hash.
    #[serde(default)]
    #[serde(rename = "attempt")]
    pub number: u32,
    /// Launches (async Invokes) of the live attempt: 1 on its claim, +1 on
    /// each relaunch of an invocation that never started.
    #[serde(default)]
    #[serde(rename = "launch")]
    pub launches: u32,
    /// Hash of the live attempt's token ([`crate::ids::token_hash`]); the
    /// token itself is only in the launch payload. A report carrying a
    /// token must match it. Absent while the attempt is not claimed (a
    /// retry's delay, a task waiting for a worker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "attempt_token_hash")]
    pub token_hash: Option<String>,
    /// Reports without the live attempt's token are refused (plan
    /// `require_tokens`, or the `WHIMBREL_REQUIRE_TOKENS` setting). Stored
    /// only when true: absent reads as false (design.md § 2.8).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_tokens: bool,
}

/// The timeouts the plan set (or the engine defaulted), in seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timeouts {
    /// Schedule-to-start timeout, seconds: an attempt QUEUED this long
    /// without starting is TIMED_OUT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_to_start_seconds: Option<i64>,
    /// Schedule-to-close timeout, seconds from `first_queued_epoch`, across
    /// all attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_to_close_seconds: Option<i64>,
    /// Start-to-close timeout, seconds, from the plan: once RUNNING it must
    /// end within this long. Stored as `timeout_seconds`, the name existing
    /// clients and workers read.
    #[serde(
        default,
        rename = "timeout_seconds",
        skip_serializing_if = "Option::is_none"
    )]
    pub start_to_close_seconds: Option<i64>,
    /// True if the activity heartbeats (architecture: `heartbeat_enabled`).
    pub heartbeat_enabled: bool,
    /// Heartbeat timeout, seconds, when heartbeats are enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_timeout_seconds: Option<i64>,
}

/// When things happened to the activity, and when the heartbeat monitor must
/// look at it next (its due marker).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// When the activity was first QUEUED, epoch seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_queued_epoch: Option<i64>,
    /// When the live attempt became due (its first queue, or the end of a
    /// retry delay), epoch seconds: schedule-to-start counts from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_epoch: Option<i64>,
    /// While a retry waits out its delay: when the next attempt is due,
    /// epoch seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_epoch: Option<i64>,
    /// When it was queued, UTC date list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_time: Option<DateList>,
    /// When it was queued, epoch seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_time_epoch: Option<i64>,
    /// When the last launch (async Invoke) was accepted, UTC date list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launched_time: Option<DateList>,
    /// When the last launch (async Invoke) was accepted, epoch seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launched_time_epoch: Option<i64>,
    /// When it started running, UTC date list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<DateList>,
    /// When it started running, epoch seconds; negative until then.
    pub start_time_epoch: i64,
    /// Last heartbeat, UTC date list. Read leniently, as
    /// `heartbeat_time_epoch` is.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient"
    )]
    pub heartbeat_time: Option<DateList>,
    /// Last heartbeat, epoch seconds; negative when heartbeats are disabled
    /// or the activity has not started. The activity role may write it
    /// (contract: Heartbeat), so it is read leniently: a value that is
    /// missing or of another type reads as `-1` (no heartbeat), never as
    /// an unreadable item (docs/design.md § 3.10).
    #[serde(default = "no_heartbeat", deserialize_with = "lenient_epoch")]
    pub heartbeat_time_epoch: i64,
    /// The `heartbeat_time_epoch` the engine last counted the heartbeat
    /// deadline from: clients' clocks are not trusted beyond it
    /// ([`crate::decide::deadline::heartbeat_deadline`], docs/design.md
    /// § 3.10). Written by the engine only (the activity role may not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_seen: Option<i64>,
    /// When the engine saw [`Self::heartbeat_seen`], epoch seconds by the
    /// engine's own clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_seen_epoch: Option<i64>,
    /// When it ended, UTC date list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<DateList>,
    /// When it ended, epoch seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time_epoch: Option<i64>,
    /// When the heartbeat monitor must look at the activity next, epoch
    /// seconds: its deadline in a non-terminal state after launch (QUEUED:
    /// schedule-to-start; PREPARING, RUNNING: heartbeat or start-to-close;
    /// CANCELLED_RUNNING: the cancel grace), or, once terminal, until its
    /// side effects (release or cancel dependents, finish the workflow) are
    /// done. Range key of the sparse due GSI; absent when nothing is owed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_epoch: Option<i64>,
    /// Shard (0..INDEX_SHARDS) of the sparse due GSI; present exactly when
    /// `due_epoch` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_shard: Option<u32>,
}

/// Its place in the plan's graph: prerequisites, dependents, join and count
/// groups, and the release count (design.md § 3.2, § 3.3).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Links {
    /// Activity exec ids of its prerequisites; empty on a wide join
    /// ([`Self::join_groups`]), whose prerequisites are in its plan.
    #[serde(default)]
    pub prerequisites: Vec<String>,
    /// Present on a wide join, an activity with more prerequisites than
    /// `EngineConfig::join_group_size` (so that no write grows with the
    /// prerequisites): how many join groups ([`JoinGroup`](super::JoinGroup)) its
    /// prerequisites are released through. `pending_dependency_count` and
    /// `released_prerequisites` then count groups
    /// ([`crate::ids::join_marker`]), not prerequisites.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join_groups: Option<u32>,
    /// For each dependent that is a wide join (its activity exec id), the
    /// join group this activity's COMPLETED counts toward.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub join_slots: std::collections::BTreeMap<String, GroupSlot>,
    /// The count group its end is counted in (design.md § 3.3): the group
    /// of the workflow's activities, in plan order, and its size. Absent on
    /// items written before count groups: their end is counted in the
    /// terminal transaction instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count_slot: Option<GroupSlot>,
    /// Activity exec ids of the activities that wait for it (empty for a
    /// wide fan-out: see `dependents_in_plan`).
    #[serde(default)]
    pub dependents: Vec<String>,
    /// Set for a wide fan-out (more dependents than
    /// [`crate::plan::FAN_OUT_LIST_MAX`]): how many activities
    /// wait for it. They, and their join slots, are not on the item but
    /// derived from the stored plan when it ends
    /// ([`crate::decide::items::planned_dependents`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependents_in_plan: Option<u32>,
    /// After it COMPLETED: how many of its dependents, in the order they
    /// are listed (or derived from the plan), are released already; a
    /// release its invocation's budget cut resumes there (issue 42 A.9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_through: Option<u64>,
    /// Prerequisites not yet COMPLETED (design.md § 3.2).
    #[serde(default)]
    pub pending_dependency_count: u64,
    /// Per-edge release markers: the prerequisites whose COMPLETED already
    /// lowered `pending_dependency_count` (a string set, added to in the
    /// same conditional update as the decrement; never written by a put).
    /// Kept only while the count is above 0: the first claim removes them.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "serde_dynamo::string_set"
    )]
    pub released_prerequisites: Vec<String>,
    /// Its plan's `max_concurrency`, on an activity that runs code of a
    /// limited plan (design.md § 9.3): its first claim takes one of the
    /// workflow's slots (`slots_used`), or it waits READY in
    /// `slot_waiters`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
    /// Its index in the plan (with `max_concurrency`): waiters are claimed
    /// in plan order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_index: Option<u32>,
    /// True from the claim that took a slot until the settle of its end
    /// gives it back (the give-back removes it, once).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub slot_held: bool,
    /// The `whimbrel_limit` target whose slot its first claim took
    /// (design.md § 9.3), kept after the give-back so a settle run again
    /// still hands the target's free slots on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_limit: Option<String>,
    /// True from that claim until the settle of its end gives the slot
    /// back (the give-back removes it, once).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub target_slot_held: bool,
    /// True when that slot was not taken by a claim but given by a new
    /// limit to an attempt already live (issue 42 A.7,
    /// `target_limits::adopt_target_slot`): such holders may put a target
    /// over its limit until they end.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub target_slot_adopted: bool,
    /// True when its plan has child workflow nodes (design.md § 9.5): its
    /// failure cancels those still running.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub closes_children: bool,
    /// The decision that scheduled it, on a node of an episodic execution
    /// (design.md § 10.5): its end is appended to the execution's log for
    /// the decider, and counted nowhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_by: Option<u64>,
}

/// How it ended: its output (or the event row that holds it) and its error.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Output reported with COMPLETED, when kept on the item: its JSON is
    /// at most [`crate::payloads::INLINE_PAYLOAD_BYTES`], or a Full
    /// Logic API client reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Id of the COMPLETED event row (`whimbrel_activity_event`, write-once)
    /// whose `output` is this activity's, when it was too large to keep on
    /// this item (design.md § 2.8). Read it with
    /// the engine's `payloads::outputs_of`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_event_id: Option<String>,
    /// Hash key of the engine's [`super::OutputRow`] that holds the output,
    /// when it was too large to keep on this item: items completed since
    /// outputs are copied (design.md § 2.8) have this instead of
    /// `output_event_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_ref: Option<String>,
    /// With `output_ref` or `output_event_id`: the SHA-256 (hex) of that output as it was
    /// applied ([`crate::payloads::output_digest`]). Every read of the row
    /// checks it ([`crate::payloads::check_output`]): an event row may be
    /// overwritten by anyone who may put event rows, this item may not.
    /// Absent on items completed before outputs were bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_sha256: Option<String>,
    /// Reason reported with FAILED, or why the engine cancelled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Its events: the accepted transitions (the audit trail) and those parked
/// until its state allows them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Trail {
    /// Accepted transitions, oldest first: the audit trail. Bounded by the
    /// contract (no path through the table is longer than 6 steps) times
    /// the attempts ([`crate::retry::MAX_ATTEMPTS`]) and launches.
    #[serde(default)]
    pub history: Vec<HistoryEntry>,
    /// Id of the event (or engine step) behind the last state change, on
    /// items last changed by an earlier version only: it is the last
    /// history entry's, so a state change removes it (the item is
    /// billed by its size). Read it through [`ActivityExec::last_event`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_event_id: Option<String>,
    /// Events that arrived before the activity's state allowed them (e.g.
    /// COMPLETED before RUNNING was applied), applied when it catches up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parked: Vec<ParkedEvent>,
}

impl Default for Timing {
    /// Nothing happened yet: no times, no due marker, and the two epochs
    /// stored as negative until then (`heartbeat_time_epoch`,
    /// `start_time_epoch`).
    fn default() -> Self {
        Timing {
            first_queued_epoch: None,
            scheduled_epoch: None,
            next_attempt_epoch: None,
            queued_time: None,
            queued_time_epoch: None,
            launched_time: None,
            launched_time_epoch: None,
            start_time: None,
            start_time_epoch: -1,
            heartbeat_time: None,
            heartbeat_time_epoch: -1,
            heartbeat_seen: None,
            heartbeat_seen_epoch: None,
            end_time: None,
            end_time_epoch: None,
            due_epoch: None,
            due_shard: None,
        }
    }
}

impl ActivityExec {
    /// Its workflow's generation when it was last put back to run: 0, or
    /// the redrive that did (design.md § 9.4), read from its count slot
    /// (numbered per generation,
    /// [`crate::decide::redrive::GROUPS_PER_GENERATION`]).
    pub fn generation(&self) -> u32 {
        self.links.count_slot.map_or(0, |slot| {
            slot.group / crate::decide::redrive::GROUPS_PER_GENERATION
        })
    }

    /// A child workflow node's child in its generation (design.md § 9.5):
    /// `(request id, workflow exec id)`, derived
    /// ([`crate::ids::child_request_id`]); `None` for another node.
    pub fn child_ids(&self) -> Option<(String, String)> {
        let child = self.runner.runs.child()?;
        let (name, generation) = (&child.workflow_name, self.generation());
        Some((
            crate::ids::child_request_id(name, &self.activity_exec_id, generation),
            crate::ids::child_exec_id(name, &self.activity_exec_id, generation),
        ))
    }

    /// The workflow exec id of the execution of its child's chain that a
    /// child node waits on now (design.md § 9.5): the one `child_run`
    /// names, when set in the node's generation (its child continued as
    /// new), else its first, derived child ([`Self::child_ids`]). `None`
    /// for another node.
    pub fn current_child(&self) -> Option<String> {
        let (_, first) = self.child_ids()?;
        let run = self.runner.child_run.as_deref();
        Some(match run.and_then(crate::ids::parse_child_run) {
            Some((g, id)) if g == self.generation() => id.to_string(),
            _ => first,
        })
    }

    /// Id of the event (or engine step) behind the last state change, claim
    /// or retry: the last history entry's (or `last_event_id`, on an item an
    /// earlier version changed last). `None` before the first.
    pub fn last_event(&self) -> Option<String> {
        match &self.trail.last_event_id {
            Some(id) => Some(id.clone()),
            None => self
                .trail
                .history
                .last()
                .map(|h| h.full_event_id(&self.activity_exec_id)),
        }
    }

    /// Its item's size now, and the most it may reach over a generation
    /// of `attempts` attempts: with their history
    /// ([`crate::history::generation_history_bytes`]), an inline output
    /// (a larger one goes to an output row,
    /// [`crate::payloads::INLINE_PAYLOAD_BYTES`]) and
    /// `ACTIVITY_ITEM_RESERVE`, in item bytes (`write::size`). The start
    /// and each redrive refuse an activity whose worst passes
    /// `MAX_ITEM_BYTES` (docs/limits.md).
    pub fn item_bytes_over(&self, attempts: u32) -> (usize, usize) {
        let item = serde_dynamo::to_item(self).ok();
        let size = item.map_or(usize::MAX / 2, |i| crate::write::size::item_size(&i));
        let room = crate::payloads::INLINE_PAYLOAD_BYTES + ACTIVITY_ITEM_RESERVE;
        (
            size,
            size + room + crate::history::generation_history_bytes(attempts),
        )
    }

    /// Attempts its retry policy allows in all (1 without one).
    pub fn max_attempts(&self) -> u32 {
        (self.attempt.retry.as_ref()).map_or(1, |r| r.max_attempts.unwrap_or(1))
    }

    /// Whether its side effects are done: it ended, and its due marker,
    /// which its terminal write sets and only the end of its settle
    /// removes (design.md § 8.2), is gone. A redelivery of the step that
    /// ended it then owes nothing: a restart of a wide step (a cancel of
    /// 500 dependents cut by its function's timeout) pays nothing for the
    /// part it finished (issue 42 C.1).
    pub fn settled(&self) -> bool {
        self.state.is_terminal() && self.timing.due_epoch.is_none()
    }

    /// Whether `event_id` is behind the last state change, claim or retry
    /// (see [`ActivityExec::last_event`]): a redelivery of it.
    pub fn is_last_event(&self, event_id: &str) -> bool {
        match &self.trail.last_event_id {
            Some(id) => id == event_id,
            None => (self.trail.history.last())
                .is_some_and(|h| h.names(&self.activity_exec_id, event_id)),
        }
    }

    /// Whether the event row `event_id` is on the item already: behind the
    /// last change, in the history, or parked. (A row rejected for good is
    /// marked on the row instead, `rejected_epoch`.)
    pub fn has_judged(&self, event_id: &str) -> bool {
        self.is_last_event(event_id)
            || self
                .trail
                .history
                .iter()
                .any(|h| h.names(&self.activity_exec_id, event_id))
            || self
                .trail
                .parked
                .iter()
                .any(|p| p.activity_event_id == event_id)
    }

    /// Whether its output is kept off the item (on the engine's output row,
    /// or on an event row for items completed before outputs were copied):
    /// read it with the engine's `payloads::outputs_of`.
    pub fn output_kept_off_item(&self) -> bool {
        self.outcome.output_ref.is_some() || self.outcome.output_event_id.is_some()
    }

    /// Whether any activity waits for it (listed, or for a wide fan-out
    /// kept in the plan): false for the sinks of a plan, whose outputs
    /// make the workflow's result.
    pub fn has_dependents(&self) -> bool {
        !self.links.dependents.is_empty() || self.links.dependents_in_plan.is_some()
    }

    /// Whether it waits for any prerequisite (inline or through join
    /// groups): false for the roots of a plan.
    pub fn has_prerequisites(&self) -> bool {
        !self.links.prerequisites.is_empty() || self.links.join_groups.is_some()
    }
}

/// `T` as stored, or its default when the stored value has another shape:
/// for the attributes the activity role may write, which must never make
/// an item unreadable (docs/design.md § 3.10).
fn lenient<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned + Default,
{
    Ok(T::deserialize(Value::deserialize(d)?).unwrap_or_default())
}

/// [`lenient`] for `heartbeat_time_epoch`: [`no_heartbeat`] when it is
/// not an integer.
fn lenient_epoch<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    Ok(i64::deserialize(Value::deserialize(d)?).unwrap_or_else(|_| no_heartbeat()))
}

/// The `heartbeat_time_epoch` of an activity without a heartbeat.
fn no_heartbeat() -> i64 {
    -1
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_dynamo::Item;

    /// An item with every attribute set, in DynamoDB JSON, exactly as the
    /// flat layout stored it: the parts must read it and write it back
    /// attribute for attribute.
    const EVERY_ATTRIBUTE: &str = r#"{
        "activity_exec_id": {"S": "count-0::6f1f4f8e-6a0a-4a53-9d2b-0f4f0b2f9a10"},
        "workflow_exec_id": {"S": "wordcount::0e7c2c36-3d5c-4c3b-8a53-2f0c6f8c1d11"},
        "workflow_name": {"S": "wordcount"},
        "activity_name": {"S": "count-0"},
        "state": {"S": "RUNNING"},
        "version": {"N": "7"},
        "lambda": {"S": ""},
        "task_list": {"S": "gpu"},
        "task_list_shard": {"S": "gpu#3"},
        "task_queued_epoch": {"N": "1795306400"},
        "worker": {"S": "host-1"},
        "input": {"M": {"k": {"N": "1"}, "s": {"S": "x"}}},
        "input_ref": {"S": "wordcount::0e7c#input#ab"},
        "retry": {"M": {"max_attempts": {"N": "3"}, "interval_seconds": {"N": "2"}, "backoff_rate": {"N": "1.5"}}},
        "attempt": {"N": "2"},
        "launch": {"N": "1"},
        "attempt_token_hash": {"S": "f00d"},
        "require_tokens": {"BOOL": true},
        "schedule_to_start_seconds": {"N": "60"},
        "schedule_to_close_seconds": {"N": "600"},
        "timeout_seconds": {"N": "300"},
        "heartbeat_enabled": {"BOOL": true},
        "heartbeat_timeout_seconds": {"N": "30"},
        "first_queued_epoch": {"N": "1795306300"},
        "scheduled_epoch": {"N": "1795306390"},
        "next_attempt_epoch": {"N": "1795306390"},
        "queued_time": {"L": [{"N": "2026"}, {"N": "11"}, {"N": "22"}, {"N": "0"}, {"N": "13"}, {"N": "20"}]},
        "queued_time_epoch": {"N": "1795306400"},
        "launched_time": {"L": [{"N": "2026"}, {"N": "11"}, {"N": "22"}, {"N": "0"}, {"N": "13"}, {"N": "21"}]},
        "launched_time_epoch": {"N": "1795306401"},
        "start_time": {"L": [{"N": "2026"}, {"N": "11"}, {"N": "22"}, {"N": "0"}, {"N": "13"}, {"N": "22"}]},
        "start_time_epoch": {"N": "1795306402"},
        "heartbeat_time": {"L": [{"N": "2026"}, {"N": "11"}, {"N": "22"}, {"N": "0"}, {"N": "13"}, {"N": "31.5"}]},
        "heartbeat_time_epoch": {"N": "1795306411"},
        "heartbeat_seen": {"N": "1795306402"},
        "heartbeat_seen_epoch": {"N": "1795306403"},
        "end_time": {"L": [{"N": "2026"}, {"N": "11"}, {"N": "22"}, {"N": "0"}, {"N": "14"}, {"N": "0"}]},
        "end_time_epoch": {"N": "1795306440"},
        "due_epoch": {"N": "1795306441"},
        "due_shard": {"N": "3"},
        "output": {"M": {"words": {"N": "12"}}},
        "output_event_id": {"S": "count-0::6f1f::e1"},
        "error": {"S": "boom"},
        "prerequisites": {"L": [{"S": "split::1"}]},
        "join_groups": {"N": "2"},
        "join_slots": {"M": {"merge::1": {"M": {"group": {"N": "0"}, "size": {"N": "2"}}}}},
        "count_slot": {"M": {"group": {"N": "1"}, "size": {"N": "4"}}},
        "dependents": {"L": [{"S": "merge::1"}]},
        "dependents_in_plan": {"N": "5000"},
        "pending_dependency_count": {"N": "1"},
        "released_prerequisites": {"SS": ["split"]},
        "history": {"L": [{"M": {"transition": {"S": "RUNNING"}, "state": {"S": "RUNNING"},
            "at_epoch": {"N": "1795306402"}, "event_id": {"S": "e1"}, "attempt": {"N": "2"}}}]},
        "last_event_id": {"S": "count-0::6f1f::e0"},
        "parked": {"L": [{"M": {"activity_event_id": {"S": "e2"}, "transition": {"S": "COMPLETED"},
            "output_in_row": {"BOOL": true}, "attempt": {"N": "2"}, "attempt_token": {"S": "t"}}}]}
    }"#;

    #[test]
    fn the_parts_read_and_write_the_flat_item_attribute_for_attribute() {
        let item: Item = serde_json::from_str(EVERY_ATTRIBUTE).unwrap();
        let exec: ActivityExec = serde_dynamo::from_item(item.clone()).unwrap();
        assert_eq!(exec.attempt.number, 2);
        assert_eq!(exec.attempt.launches, 1);
        assert_eq!(exec.attempt.token_hash.as_deref(), Some("f00d"));
        assert_eq!(exec.timeouts.start_to_close_seconds, Some(300));
        assert_eq!(exec.timing.heartbeat_time.as_ref().unwrap().0[5], 31.5);
        assert_eq!(exec.links.released_prerequisites, vec!["split".to_string()]);
        assert_eq!(exec.trail.parked[0].activity_event_id, "e2");
        let back: Item = serde_dynamo::to_item(&exec).unwrap();
        assert_eq!(back.len(), 54, "every attribute, none added");
        assert_eq!(back, item);
    }

    /// design.md § 9.5: a child node waits on its derived child until the
    /// chain continues as new in its generation; a `child_run` of an
    /// earlier generation (before a redrive) names no one.
    #[test]
    fn a_child_node_waits_on_the_execution_its_chain_continued_as_in_its_generation() {
        let item: Item = serde_json::from_str(EVERY_ATTRIBUTE).unwrap();
        let mut node: ActivityExec = serde_dynamo::from_item(item).unwrap();
        assert_eq!(node.current_child(), None, "not a child node");
        node.runner.runs = crate::model::Runs::Child(ChildRunner {
            workflow_name: "kid".into(),
            depth: 1,
            root: None,
            parent_close: crate::kind::ParentClose::Cancel,
        });
        node.links.count_slot = Some(GroupSlot { group: 1, size: 4 });
        let (_, first) = node.child_ids().unwrap();
        assert_eq!(node.current_child(), Some(first.clone()));
        node.runner.child_run = Some(crate::ids::child_run(0, "kid::next"));
        assert_eq!(node.current_child().as_deref(), Some("kid::next"));
        let redriven = crate::decide::redrive::GROUPS_PER_GENERATION + 1;
        node.links.count_slot = Some(GroupSlot {
            group: redriven,
            size: 4,
        });
        let (_, anew) = node.child_ids().unwrap();
        assert_ne!(anew, first, "a redrive starts a new child");
        assert_eq!(
            node.current_child(),
            Some(anew.clone()),
            "the old chain's run is ignored"
        );
        node.runner.child_run = Some("not-a-run".into());
        assert_eq!(node.current_child(), Some(anew), "a malformed run too");
    }

    #[test]
    fn an_unstarted_item_stores_only_what_the_flat_layout_required() {
        let exec = ActivityExec {
            activity_exec_id: "a::1".into(),
            workflow_exec_id: "w::1".into(),
            workflow_name: "w".into(),
            activity_name: "a".into(),
            state: ActivityState::Requested,
            version: 0,
            // Every item names what runs it (an unnamed one is refused).
            runner: Runner {
                runs: crate::model::Runs::Lambda {
                    function: "f".into(),
                },
                ..Runner::default()
            },
            attempt: Attempt::default(),
            timeouts: Timeouts::default(),
            timing: Timing::default(),
            links: Links::default(),
            outcome: Outcome::default(),
            trail: Trail::default(),
        };
        let item: Item = serde_dynamo::to_item(&exec).unwrap();
        let mut names: Vec<&str> = item.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "activity_exec_id",
                "activity_name",
                "attempt",
                "dependents",
                "heartbeat_enabled",
                "heartbeat_time_epoch",
                "history",
                "lambda",
                "launch",
                "pending_dependency_count",
                "prerequisites",
                "start_time_epoch",
                "state",
                "version",
                "workflow_exec_id",
                "workflow_name",
            ]
        );
        let read: ActivityExec = serde_dynamo::from_item(item).unwrap();
        assert_eq!(read, exec);
    }
}
