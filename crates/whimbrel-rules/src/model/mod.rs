//! Item types of the Whimbrel tables. Attribute names and types are those of
//! whimbrel-architecture.md; attributes it does not list are the optional
//! ones design.md § 2.6 allows, documented in `docs/tables.md`.
//!
//! Items are converted with `serde_dynamo`; `None` attributes are omitted,
//! never written as NULL, so sparse GSIs stay sparse.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::WorkflowState;
use crate::dates::DateList;
use crate::plan::Plan;

/// A row of `whimbrel_workflow_request` (write-once): a client's request to
/// start a workflow (contract: Simple Lambda API, "Initiate a New Workflow"),
/// or, with `cancel_workflow_exec_id`, to cancel one (docs/contract.md § 6, "Cancel requests").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowRequest {
    /// Hash key, `(workflow_name)::(uuid)`.
    pub workflow_request_id: String,
    /// Range key: the workflow to run.
    pub workflow_name: String,
    /// When the request was made, UTC date list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<DateList>,
    /// When the request was made, epoch seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_epoch: Option<f64>,
    /// Free text: where the request came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// True when a Full Logic API client runs the workflow itself; the
    /// workflow-request function then skips the row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manual: Option<bool>,
    /// Optional workflow input (design.md § 2.6), passed to the decider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// When DynamoDB TTL may delete the row, epoch seconds (set by our
    /// writers when `RowRetentionDays` is on, see
    /// [`crate::config::EngineConfig::row_expiry`]; absent = kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_epoch: Option<i64>,
    /// Set on a cancel request: the workflow execution to cancel (of the
    /// workflow `workflow_name`). The row then starts nothing. Cancels
    /// are rows of this table, not of `whimbrel_activity_event`, so that
    /// whoever may start and cancel workflows is granted apart from
    /// whoever may report as an activity, and a cancel needs no token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_workflow_exec_id: Option<String>,
    /// A cancel request's reason, recorded on the activities it cancels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Set by the engine on the request of a child workflow (design.md
    /// § 9.5): the node that started it. Copied onto the workflow exec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentLink>,
    /// Set on a redrive request (design.md § 9.4): the FAILED or
    /// CANCELLED workflow execution (of `workflow_name`) to take back to
    /// RUNNING. The row then starts nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redrive_workflow_exec_id: Option<String>,
}

/// The parent of a child workflow (design.md § 9.5): a map attribute
/// `parent` on its request row and its workflow exec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentLink {
    /// The parent's workflow exec id.
    pub workflow_exec_id: String,
    /// The parent's workflow name (the range key of its exec).
    pub workflow_name: String,
    /// The child node's activity exec id in the parent, from which the
    /// child's request id is derived ([`crate::ids::child_request_id`]).
    pub activity_exec_id: String,
    /// The child's depth: 1 for a child of a top-level workflow; a start
    /// deeper than [`crate::kind::MAX_CHILD_DEPTH`] fails.
    pub depth: u32,
    /// The tree's root workflow exec id; absent: the parent is the root
    /// (a child of a top-level workflow, or a link written before roots
    /// were kept). Every start below the root counts on its tree
    /// ([`ParentLink::tree_root`], issue 42 B.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
}

impl ParentLink {
    /// The workflow exec id of the tree's root: [`ParentLink::root`], or
    /// the parent's own.
    pub fn tree_root(&self) -> &str {
        self.root.as_deref().unwrap_or(&self.workflow_exec_id)
    }
}

/// A row of `whimbrel_activity_event` (write-once): a requested transition
/// of one activity exec (contract: "Update Activity State").
///
/// Existing clients write only `activity_event_id`, `activity_exec_id`,
/// `transition`, `when`, `when_epoch`, `source`; everything else is optional.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActivityEvent {
    /// Hash key, `(activity_exec_id)::(uuid)`.
    pub activity_event_id: String,
    /// Range key: the activity exec this event is about.
    pub activity_exec_id: String,
    /// Requested transition name, e.g. `"COMPLETED"` (parsed by the engine so
    /// an unknown name is rejected with a reason, not a parse failure).
    pub transition: String,
    /// When, UTC date list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<DateList>,
    /// When, epoch seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_epoch: Option<f64>,
    /// Free text: who sent the event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Full Logic API marker: the activity-event function skips the row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manual: Option<bool>,
    /// Output of a COMPLETED activity (any JSON), handed to dependents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Reason of a FAILED (or CANCEL) transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The four ids the launcher passes on (optional, for tracing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity_name: Option<String>,
    /// See `activity_name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_exec_id: Option<String>,
    /// See `activity_name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_name: Option<String>,
    /// The attempt the report is about (from the launch payload); a report
    /// for an older attempt is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// The attempt token from the launch payload: proves the report comes
    /// from the live attempt. Optional for existing clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_token: Option<String>,
    /// When DynamoDB TTL may delete the row, epoch seconds (set by our
    /// writers when `RowRetentionDays` is on, see
    /// [`crate::config::EngineConfig::row_expiry`]; absent = kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_epoch: Option<i64>,
    /// When the engine rejected this row for good, epoch seconds; written
    /// by the engine only ([`crate::decide::mark_rejected`]). A marked row
    /// is never judged again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected_epoch: Option<i64>,
    /// Why the engine rejected it (with `rejected_epoch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected_reason: Option<String>,
}

impl ActivityEvent {
    /// A new event row for `transition` of `activity_exec_id`, written at
    /// `now` by `source`, with the id `(activity_exec_id)::(uuid)` derived
    /// from `seed` (any unique text, e.g. a fresh token). Optional fields
    /// are empty: set `output`, `error`, `attempt`, `attempt_token` as the
    /// report needs.
    pub fn new(
        activity_exec_id: &str,
        transition: &str,
        now: crate::dates::Timestamp,
        source: &str,
        seed: &str,
    ) -> Self {
        ActivityEvent {
            activity_event_id: crate::ids::derived_id(activity_exec_id, seed),
            activity_exec_id: activity_exec_id.into(),
            transition: transition.into(),
            when: Some(now.date_list()),
            when_epoch: Some(now.epoch as f64),
            source: Some(source.into()),
            manual: None,
            output: None,
            error: None,
            activity_name: None,
            workflow_exec_id: None,
            workflow_name: None,
            attempt: None,
            attempt_token: None,
            expires_at_epoch: None,
            rejected_epoch: None,
            rejected_reason: None,
        }
    }
}

/// An item of `whimbrel_workflow_exec`: one workflow execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowExec {
    /// Hash key, `(workflow_name)::(uuid)`, derived from the request id.
    pub workflow_exec_id: String,
    /// Range key.
    pub workflow_name: String,
    /// REQUESTED, RUNNING, COMPLETED, FAILED or CANCELLED (design.md § 3.1).
    pub state: WorkflowState,
    /// The request that started it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_request_id: Option<String>,
    /// When the workflow was queued, UTC date list.
    pub start_time: DateList,
    /// When the workflow was queued, epoch seconds (GSI range key).
    pub start_time_epoch: i64,
    /// When it ended, UTC date list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<DateList>,
    /// When it ended, epoch seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time_epoch: Option<i64>,
    /// The request's input, kept here only until the plan is recorded (a
    /// start again without a request row needs it); from then on it is on
    /// the write-once [`WorkflowPlan`] item, so the item every finishing
    /// activity updates stays small (each update is billed by its size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// When the plan was recorded on `whimbrel_workflow_plan`, epoch
    /// seconds; absent before. Its presence is what "planned" means: a
    /// REQUESTED workflow without it may still be cancelled or failed
    /// outright (no activity exists), and a redelivered start replays the
    /// recorded plan (design.md § 3.7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_epoch: Option<i64>,
    /// The plan's `execution_timeout_seconds`, seconds, copied here when
    /// the plan is recorded, so the monitor judges the execution deadline
    /// from this item alone. Absent = none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_timeout_seconds: Option<i64>,
    /// Number of activities in the plan.
    #[serde(default)]
    pub activity_count: u64,
    /// Activities that ended COMPLETED.
    #[serde(default)]
    pub completed_count: u64,
    /// Activities that ended FAILED or TIMED_OUT.
    #[serde(default)]
    pub failed_count: u64,
    /// Activities that ended CANCELLED.
    #[serde(default)]
    pub cancelled_count: u64,
    /// Why the workflow failed: the first failure recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Where the request came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// While REQUESTED: when the monitor starts it again if the
    /// workflow-request function has not moved it on (decider unreachable,
    /// a stream that gave up), epoch seconds. Range key of the sparse due
    /// GSI of `workflow_exec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_epoch: Option<i64>,
    /// Shard of the sparse due GSI; present exactly when `due_epoch` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_shard: Option<u32>,
    /// Times the monitor started a REQUESTED workflow again.
    #[serde(default)]
    pub start_attempts: u32,
    /// Once COMPLETED: the workflow's result, the outputs of its sink
    /// activities (those nothing depends on) by activity name, when it fits
    /// [`crate::plan::MAX_RESULT_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// True when the result was too large for the item: it stays on the
    /// sink activities' `output` (`whimbrel result` assembles it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_in_activities: Option<bool>,
    /// How often it was redriven (design.md § 9.4): the generation whose
    /// count groups count its ends. Absent = 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redrive_count: Option<u32>,
    /// The request id of a redrive still in progress (its activities not
    /// all redriven and claimed); the monitor resumes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redriving: Option<String>,
    /// Under a plan's `max_concurrency` (design.md § 9.3): the slots its
    /// activities hold now (one item, so one read is a true sample).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots_used: Option<u64>,
    /// The request ids of the redrives applied (never twice), each as a
    /// history entry keeps an id (`history::kept_id`: ≤ 128 bytes; read
    /// with [`WorkflowExec::redriven_by`]).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "serde_dynamo::string_set"
    )]
    pub redrives: Vec<String>,
    /// A child workflow's parent (from its request, design.md § 9.5);
    /// absent for a top-level workflow. While a child's end has not
    /// reached its parent, its due marker stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentLink>,
    /// The events its decider is consulted on, when the execution is
    /// episodic (design.md § 10.1): set when its first answer is
    /// recorded, changed by a later answer's `decide_on`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decide_on: Option<Vec<crate::decider::EventKind>>,
    /// An episodic execution's decider Lambda (name or ARN).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decider: Option<String>,
    /// The execution whose `continue_as_new` started this one (design.md
    /// § 10.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued_from: Option<String>,
    /// The execution this one continued as (design.md § 10.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued_as: Option<String>,
}

impl WorkflowExec {
    /// Whether redrive request `redrive_id` was taken: it is in
    /// `redrives`, as the redrive keeps it ([`crate::history::kept_id`]:
    /// at most 128 bytes, so 100 redrives stay small on the item).
    pub fn redriven_by(&self, redrive_id: &str) -> bool {
        let kept = crate::history::kept_id(redrive_id);
        self.redrives.iter().any(|r| *r == kept)
    }

    /// True for an execution whose decider is consulted while it runs
    /// (design.md § 10.1): it ends by a decision, not by its counts.
    pub fn is_episodic(&self) -> bool {
        self.decide_on.is_some()
    }
}

/// An episodic execution's first answer, recorded with its (empty) plan
/// so that a start run again applies the same one (design.md § 10.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodicStart {
    /// The decider Lambda (name or ARN) that answered.
    pub decider: String,
    /// Its answer to the `workflow_started` request.
    pub answer: crate::decider::DecisionsAnswer,
}

/// An item of `whimbrel_workflow_plan`: the cold, write-once part of a
/// workflow exec, keyed like it (`workflow_exec_id`, `workflow_name`). Put
/// once, conditionally (`attribute_not_exists`), before any activity item
/// exists; the first plan put wins, so a redelivered start with a
/// nondeterministic decider replays it (design.md § 3.7). Read at a
/// redelivered start, to gather the result, at the execution timeout and
/// by the CLI; never by the per-transition path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowPlan {
    /// Hash key: the workflow exec's id.
    pub workflow_exec_id: String,
    /// Range key: the workflow's name.
    pub workflow_name: String,
    /// The validated plan (`shapes.md` § 2).
    pub plan: Plan,
    /// The request's input (at most
    /// [`crate::plan::MAX_WORKFLOW_INPUT_BYTES`] serialized); absent when
    /// the request had none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// When it was recorded, epoch seconds.
    pub recorded_epoch: i64,
    /// Set when the plan did not fit one item: its activities are on
    /// [`WorkflowPlanPart`] items, and `plan.activities` is empty here
    /// (`engine::plans` puts them together again). Absent: the whole plan
    /// is on this item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<PlanParts>,
    /// Set for an episodic execution: the first answer, whose decisions
    /// are committed as decision 1 (`plan` is then empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub episodic: Option<EpisodicStart>,
}

/// Where a plan's activities are when they did not fit one item
/// ([`WorkflowPlan::parts`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanParts {
    /// The digest of the whole activity list (`ids::plan_digest`): parts
    /// are keyed by it, so the parts of two different plans put by
    /// concurrent starts never mix; the head names the winner's.
    pub digest: String,
    /// How many parts, numbered from 0.
    pub count: u32,
}

/// One part of a plan's activities on `whimbrel_workflow_plan`,
/// write-once, put before the head item that names its digest; keyed
/// `(workflow_exec_id)#plan#(digest)#(part)` and the workflow name
/// (`ids::plan_part_key`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowPlanPart {
    /// Hash key: `(workflow_exec_id)#plan#(digest)#(part)`.
    pub workflow_exec_id: String,
    /// Range key: the workflow's name.
    pub workflow_name: String,
    /// This part's number, from 0.
    pub part: u32,
    /// Its activities, in plan order.
    pub activities: Vec<crate::plan::PlannedActivity>,
}

/// An item of `whimbrel_workflow_plan` holding one activity input too large
/// to keep on the activity item (design.md § 2.8). Write-once and
/// content-addressed: its key names the digest of the input, so every put
/// of it writes the same content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputRow {
    /// Hash key: `(workflow_exec_id)#input#(digest)` ([`crate::ids::input_row_key`]).
    pub workflow_exec_id: String,
    /// Range key: the workflow's name.
    pub workflow_name: String,
    /// The input, as the plan gave it.
    pub input: Value,
}

/// An item of `whimbrel_workflow_plan` holding one activity output too
/// large to keep on the activity item (design.md § 2.8). The engine copies
/// the output there from its COMPLETED event row before it applies it, so
/// the output outlives the row (which TTL may delete,
/// `RowRetentionDays`) and no client can change it: only the engine writes
/// this table. Write-once and content-addressed, like [`InputRow`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputRow {
    /// Hash key: `(workflow_exec_id)#output#(digest)` ([`crate::ids::output_row_key`]).
    pub workflow_exec_id: String,
    /// Range key: the workflow's name.
    pub workflow_name: String,
    /// The output, as the activity reported it.
    pub output: Value,
}

/// An item of `whimbrel_limit`: a concurrency limit on one Lambda function
/// or task list across all workflows (design.md § 9.3), set with `whimbrel
/// limit set`. An activity that runs this target takes a slot
/// (`slots_free - 1`) in the transaction of its first claim, and gives it
/// back when it ends; while none is free it waits in `slot_waiters`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetLimit {
    /// Hash key: `lambda:(function name)` or `task_list:(name)`.
    pub target: String,
    /// At most this many of its activities hold a slot at once (1..);
    /// `None` once removed (`whimbrel limit remove` leaves the key).
    #[serde(default)]
    pub max_concurrency: Option<u32>,
    /// Slots not held: `max_concurrency` minus those held; below 0 while a
    /// lowered limit is still exceeded by the slots held before.
    #[serde(default)]
    pub slots_free: i64,
    /// Activities waiting for a slot, oldest first once sorted
    /// ([`crate::decide::target_limits::waiter_entry`]).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "serde_dynamo::string_set"
    )]
    pub slot_waiters: Vec<String>,
}

impl TargetLimit {
    /// Slots held now (`max_concurrency - slots_free`); 0 without a limit.
    pub fn slots_used(&self) -> i64 {
        self.max_concurrency
            .map_or(0, |max| i64::from(max) - self.slots_free)
    }
}

pub use crate::history::{HistoryEntry, HISTORY_ERROR_BYTES};

mod activity_exec;
pub mod claim;
mod runs;
mod signal;
pub use activity_exec::{
    ActivityExec, Attempt, ChildRunner, Links, Outcome, ParkedEvent, Runner, Timeouts, Timing,
    Trail,
};
pub use runs::Runs;
pub use signal::{
    signal_copy_log_key, signal_key, signal_key_prefix, SignalRow, MAX_SIGNALS_PER_EXECUTION,
    MAX_SIGNALS_READ, MAX_SIGNAL_ID_LEN, MAX_SIGNAL_INPUT_BYTES,
};

/// A place in a group of at most G members that is complete when `size`
/// of them arrived: a prerequisite's join group in a wide join (where its
/// COMPLETED counts, `join_slots`), or an activity's count group in its
/// workflow (where its end counts, `count_slot`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupSlot {
    /// The group's number, 0-based: members `group × G .. (group+1) × G` in
    /// plan order (G = `EngineConfig::join_group_size` when the plan was
    /// stored).
    pub group: u32,
    /// How many members the group holds (G, or fewer in the last).
    pub size: u32,
}

/// An item of `whimbrel_activity_exec_dependency` that counts one group of a
/// wide join's prerequisites, so that no item is written by all of them:
/// created by the first release into it (an UpdateItem), never put. The join
/// is released for the group (one marker, [`crate::ids::join_marker`]) once
/// `released` holds `size` names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JoinGroup {
    /// Hash key, [`crate::ids::join_group_id`].
    pub activity_exec_dependency: String,
    /// Range key: the join.
    pub activity_exec_id: String,
    /// Activity names of the prerequisites whose COMPLETED released the
    /// group (a string set: exactly once per edge).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "serde_dynamo::string_set"
    )]
    pub released: Vec<String>,
}

/// An item of `whimbrel_activity_exec_dependency` that counts the ends of
/// one group of a workflow's activities (design.md § 3.3):
/// created by the first end counted into it (an UpdateItem), never put.
/// Each terminal activity adds its name to `ended` and one to its state's
/// counter, once (`NOT contains(ended, name)`); the group that holds all
/// its `size` names adds its counters to the workflow exec once (the
/// marker [`crate::ids::count_marker`] in the exec's `counted_groups`). So
/// the workflow exec is written once per group, not once per activity, and
/// no item is written by every activity.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CountGroup {
    /// Hash key, [`crate::ids::count_group_id`].
    pub activity_exec_dependency: String,
    /// Range key: the workflow exec id (stored as `activity_exec_id`, the
    /// range key of the table it shares).
    #[serde(rename = "activity_exec_id")]
    pub workflow_exec_id: String,
    /// Names of the activities counted (a string set: once each).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "serde_dynamo::string_set"
    )]
    pub ended: Vec<String>,
    /// Of those, COMPLETED.
    #[serde(default)]
    pub completed_count: u64,
    /// Of those, FAILED or TIMED_OUT.
    #[serde(default)]
    pub failed_count: u64,
    /// Of those, CANCELLED.
    #[serde(default)]
    pub cancelled_count: u64,
}

/// An item of `whimbrel_activity_exec_dependency` (write-once): one edge.
/// `activity_exec_id` waits for `dependent_activity_exec_id` (design.md § 2.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActivityExecDependency {
    /// Hash key, `(activity_exec_id):(index)`.
    pub activity_exec_dependency: String,
    /// Range key: the activity that waits.
    pub activity_exec_id: String,
    /// The prerequisite it waits for (stored as `dependent_activity_exec_id`,
    /// the reference's name).
    #[serde(rename = "dependent_activity_exec_id")]
    pub prerequisite_activity_exec_id: String,
    /// The workflow exec.
    pub workflow_exec_id: String,
}

/// An item of `whimbrel_workflow_lambda`: how to plan a workflow (design.md § 4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowLambda {
    /// Hash key.
    pub workflow_name: String,
    /// The decider Lambda (name or ARN), invoked synchronously.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lambda: Option<String>,
    /// A static plan used instead of a decider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<Plan>,
    /// What its plans and decisions may name (child workflows, task lists,
    /// Lambdas); absent: anything within the deployment's launch targets
    /// (issue 42 B.5, [`crate::targets::Allowed`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<crate::targets::Allowed>,
}

impl WorkflowLambda {
    /// Why this registration cannot be stored or started, or `None`
    /// (docs/limits.md § 1): its name is 1-128 bytes, as a request's
    /// `workflow_name` must be (`decide::check_request`); its decider is
    /// a `lambda` Lambda's Invoke takes; its definition a valid plan, and
    /// the item within DynamoDB's 409,600 bytes (a plan may be larger:
    /// give it by a decider then). `whimbrel register` stores nothing
    /// refused.
    pub fn invalid(&self) -> Option<String> {
        let name = &self.workflow_name;
        if !(1..=crate::plan::MAX_NAME_LEN).contains(&name.len()) {
            let max = crate::plan::MAX_NAME_LEN;
            return Some(format!(
                "workflow name is {} bytes; it must be 1-{max}",
                name.len()
            ));
        }
        if let Some(l) = self
            .lambda
            .as_deref()
            .filter(|l| !crate::plan::valid_lambda(l))
        {
            let max = crate::plan::MAX_LAMBDA_LEN;
            return Some(format!(
                "decider lambda {l:?} is not 1-{max} characters of A-Z a-z 0-9 - _ . : $"
            ));
        }
        if let Some(e) = self.definition.as_ref().and_then(|p| p.validate().err()) {
            return Some(format!("invalid plan: {e}"));
        }
        let size =
            serde_dynamo::to_item(self).map_or(usize::MAX, |i| crate::write::size::item_size(&i));
        let max = crate::write::size::MAX_ITEM_BYTES;
        (size > max).then(|| {
            format!("the registration is a {size}-byte item; DynamoDB stores at most {max} (a larger plan is given by a decider)")
        })
    }
}

#[cfg(test)]
mod registration_tests {
    use super::*;
    use serde_json::json;

    /// Issue 42 D (docs/limits.md § 1, Open 1): a registration is judged
    /// before it is stored: its name at 128 bytes and not 129, its
    /// decider's name, its plan, and its item's size.
    #[test]
    fn a_registration_is_bounded_as_requests_and_items_are() {
        let reg =
            |name: &str, lambda: Option<&str>, plan: Option<serde_json::Value>| WorkflowLambda {
                workflow_name: name.into(),
                lambda: lambda.map(str::to_string),
                definition: plan.map(|p| serde_json::from_value(p).unwrap()),
                allow: None,
            };
        let longest = "n".repeat(crate::plan::MAX_NAME_LEN);
        assert_eq!(reg(&longest, Some("decide"), None).invalid(), None);
        let why = reg(&format!("{longest}n"), Some("decide"), None)
            .invalid()
            .unwrap();
        assert_eq!(why, "workflow name is 129 bytes; it must be 1-128");
        assert!(reg("", Some("d"), None).invalid().is_some());
        assert!(reg("w", Some("my decider"), None)
            .invalid()
            .unwrap()
            .contains("decider lambda"));
        let bad = json!({"activities": [{"name": "a", "lambda": "f", "depends_on": ["zz"]}]});
        assert!(reg("w", None, Some(bad))
            .invalid()
            .unwrap()
            .starts_with("invalid plan: "));
        // 3 inputs of 149,000 bytes: a valid plan, too large for an item.
        let acts: Vec<_> = (0..3)
            .map(|i| json!({"name": format!("a{i}"), "lambda": "f", "input": "x".repeat(149_000)}))
            .collect();
        let why = reg("w", None, Some(json!({ "activities": acts })))
            .invalid()
            .unwrap();
        assert!(why.contains("DynamoDB stores at most 409600"), "{why}");
        let fits =
            json!({"activities": [{"name": "a", "lambda": "f", "input": "x".repeat(149_000)}]});
        assert_eq!(reg("w", None, Some(fits)).invalid(), None);
    }
}

/// An item of `whimbrel_install_status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstallStatus {
    /// Hash key: the object, e.g. a table name.
    pub object_id: String,
    /// Range key: the object kind, e.g. `"table"`.
    pub object_type: String,
    /// Schema version installed.
    pub version: u32,
    /// What it is.
    pub description: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_dynamo::Item;

    fn item(json: &str) -> Item {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn event_row_as_existing_clients_write_it() {
        // Exactly the attributes of whimbrel-architecture.md, as DynamoDB JSON.
        let row = item(
            r#"{
            "activity_event_id": {"S": "count-0::6f1f4f8e-6a0a-4a53-9d2b-0f4f0b2f9a10::1b0e7d0c-8d1f-4f38-9d8a-8e0f1c2b3a4d"},
            "activity_exec_id": {"S": "count-0::6f1f4f8e-6a0a-4a53-9d2b-0f4f0b2f9a10"},
            "transition": {"S": "RUNNING"},
            "when": {"L": [{"N": "2026"}, {"N": "11"}, {"N": "22"}, {"N": "0"}, {"N": "13"}, {"N": "31.5"}]},
            "when_epoch": {"N": "1795306411"},
            "source": {"S": "bash client"}
        }"#,
        );
        let e: ActivityEvent = serde_dynamo::from_item(row).unwrap();
        assert_eq!(e.transition, "RUNNING");
        assert_eq!(e.when.unwrap().0[5], 31.5);
        assert_eq!(e.manual, None);
        assert_eq!(e.output, None);
    }

    #[test]
    fn request_row_as_existing_clients_write_it() {
        let row = item(
            r#"{
            "workflow_request_id": {"S": "wordcount::0e7c2c36-3d5c-4c3b-8a53-2f0c6f8c1d11"},
            "workflow_name": {"S": "wordcount"},
            "when": {"L": [{"N": "2026"}, {"N": "11"}, {"N": "22"}, {"N": "0"}, {"N": "13"}, {"N": "31"}]},
            "when_epoch": {"N": "1795306411"},
            "source": {"S": "cron"},
            "manual": {"BOOL": false}
        }"#,
        );
        let r: WorkflowRequest = serde_dynamo::from_item(row).unwrap();
        assert_eq!(r.workflow_name, "wordcount");
        assert_eq!(r.manual, Some(false));
        assert_eq!(r.input, None);
    }

    #[test]
    fn optional_attributes_are_omitted_not_null() {
        let r = WorkflowRequest {
            redrive_workflow_exec_id: None,
            parent: None,
            workflow_request_id: "w::0e7c2c36-3d5c-4c3b-8a53-2f0c6f8c1d11".into(),
            workflow_name: "w".into(),
            when: None,
            when_epoch: None,
            source: None,
            manual: None,
            input: None,
            expires_at_epoch: None,
            cancel_workflow_exec_id: None,
            reason: None,
        };
        let i: Item = serde_dynamo::to_item(&r).unwrap();
        assert_eq!(i.len(), 2);
    }
}
