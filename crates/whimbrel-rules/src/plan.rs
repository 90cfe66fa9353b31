//! The JSON shapes exchanged with deciders and activities (design.md § 4, 3.9),
//! and plan validation. Pure logic, no I/O. Examples live in `docs/shapes/`.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::kind::{NodeKind, ParentClose, WaitSpec, MAX_CHILD_DEPTH, MAX_WAIT_SECONDS};
use crate::retry::{PolicyError, RetryPolicy};

/// Version of the decider request, plan and launch payload shapes.
pub const SHAPE_VERSION: u32 = 1;

/// Most activities one plan may hold: room for 10,000-wide fan-outs.
pub const MAX_ACTIVITIES: usize = 20_000;

/// Largest serialized plan, bytes. A plan is stored write-once on
/// `whimbrel_workflow_plan`, in parts of at most [`PLAN_PART_BYTES`] when
/// it does not fit one item (`engine::plans`); a decider returns it in a
/// synchronous Invoke, whose response Lambda caps at 6 MB.
pub const MAX_PLAN_BYTES: usize = 4_000_000;

/// Largest serialized activity list of one plan part, bytes (DynamoDB's
/// item limit is 400 KB; the rest is headroom). One planned activity must
/// fit in a part on its own.
pub const PLAN_PART_BYTES: usize = 300_000;

/// Largest serialized `input` of one activity, bytes (it is stored on the
/// activity exec item, beside its output and dependency lists, and the
/// launch payload must fit Lambda's 1 MB async payload limit).
pub const MAX_ACTIVITY_INPUT_BYTES: usize = 150_000;

/// Largest serialized `output` of a COMPLETED event, bytes; a larger one
/// fails the activity with the reason (it could not be stored on the
/// activity exec item, whose limit is DynamoDB's 400 KB).
pub const MAX_OUTPUT_BYTES: usize = 100_000;

/// Largest launch payload, bytes: Lambda takes at most 1 MB in an
/// asynchronous Invoke (Lambda API reference, Invoke: "For asynchronous
/// invocations, the maximum payload size is 1 MB"). Prerequisites' outputs
/// that would pass it go by reference ([`LaunchPayload::fit`]).
pub const MAX_LAUNCH_PAYLOAD_BYTES: usize = 1_000_000;

/// Largest serialized workflow request `input`, bytes; it is stored on the
/// workflow exec item beside the plan ([`MAX_PLAN_BYTES`]).
pub const MAX_WORKFLOW_INPUT_BYTES: usize = 64_000;

/// Largest workflow result stored on the workflow exec, bytes; a larger
/// one stays on the sink activities.
pub const MAX_RESULT_BYTES: usize = 64_000;

/// Longest activity name, characters.
pub const MAX_NAME_LEN: usize = 128;

/// Longest heartbeat or start-to-close timeout, seconds (7 days).
pub const MAX_HEARTBEAT_TIMEOUT_SECONDS: i64 = 7 * 24 * 3600;

/// Bytes the entries of `slot_waiters` (a `max_concurrency` plan's
/// waiting nodes, on the workflow item) may take at most: with the
/// workflow's input (64,000), a result (64,000), its source, error and
/// redrives (100 of ≤ 128 bytes), the item stays within DynamoDB's
/// 409,600 bytes (docs/limits.md § 6).
pub const MAX_SLOT_WAITERS_BYTES: usize = 240_000;

/// Bytes of a `slot_waiters` entry besides its node's name: its plan
/// index (6 digits) and `#` (`decide::slots::waiter_entry`).
pub const WAITER_ENTRY_BYTES: usize = 7;

/// Longest `lambda` (bytes): Lambda's Invoke takes a `FunctionName` of
/// 1-170 characters (a name, a partial or full ARN, with a version or
/// alias) of `A-Z a-z 0-9 - _ . : $` (AWS Lambda API Reference, Invoke).
pub const MAX_LAMBDA_LEN: usize = 170;

/// Longest schedule-to-start, schedule-to-close or execution timeout,
/// seconds (30 days).
pub const MAX_TIMEOUT_SECONDS: i64 = 30 * 24 * 3600;

/// Largest activity exec item the plan may lead to, bytes, counting its
/// input, the largest output ([`MAX_OUTPUT_BYTES`]) and its prerequisite and
/// dependent id lists; DynamoDB's item limit is 400 KB.
pub const MAX_ACTIVITY_ITEM_BYTES: usize = 380_000;

/// Largest join group, prerequisites: an activity with more
/// prerequisites than `EngineConfig::join_group_size` (at most this) is a
/// wide join, released through join groups and keeping no list of its
/// prerequisites (`model::JoinGroup`). [`Plan::validate`] sizes items
/// assuming this.
pub const JOIN_GROUP_SIZE: usize = 32;

/// Most dependents listed on an activity exec item: an activity
/// with more is a wide fan-out, whose dependents are derived from the
/// stored plan when it ends (`Links::dependents_in_plan` of `ActivityExec`).
/// [`Plan::validate`] sizes items assuming this.
pub const FAN_OUT_LIST_MAX: usize = 32;

/// Bytes an activity exec id takes besides its name: `::` and a uuid.
const ID_OVERHEAD: usize = 2 + 36;

/// A join group's release marker in a wide join's set (`#join-N`), bytes.
const JOIN_MARKER_BYTES: usize = 16;

/// A join slot's `group` and `size` beside the join's id, bytes.
const JOIN_SLOT_BYTES: usize = 32;

/// Fixed attributes of an activity exec item (states, times, history...),
/// an upper estimate in bytes.
const ITEM_BASE_BYTES: usize = 4_000;

/// The request a decider Lambda receives, synchronously, when a workflow
/// starts (`type` = `"workflow_started"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeciderRequest {
    /// Shape version, [`SHAPE_VERSION`].
    pub version: u32,
    /// Always `"workflow_started"` in this version.
    #[serde(rename = "type")]
    pub kind: String,
    /// The workflow exec being planned.
    pub workflow_exec_id: String,
    /// Its workflow name.
    pub workflow_name: String,
    /// The request that started it.
    pub workflow_request_id: String,
    /// The request's `input`, `null` when absent.
    pub input: Value,
}

/// A plan: the activities of one workflow execution, as a decider returns
/// it or as a static `definition` stores it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Shape version; absent means [`SHAPE_VERSION`].
    #[serde(default = "default_version")]
    pub version: u32,
    /// The activities, in any order.
    pub activities: Vec<PlannedActivity>,
    /// Refuse reports that do not carry the live attempt's token, for every
    /// activity (default false: existing clients' rows carry none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_tokens: Option<bool>,
    /// The retry policy of every activity that does not override it
    /// (field by field); absent = one attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Execution timeout, seconds from the request: when it passes, the
    /// workflow ends FAILED with the reason and every activity not ended
    /// is cancelled. Absent = no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_timeout_seconds: Option<i64>,
    /// At most this many of its activities that run code (Lambdas and task
    /// lists; not timers or signal waits) hold a slot at once: from their
    /// first claim (QUEUED) to their end, retries included. The others wait
    /// READY and are claimed as slots free, in plan order (design.md
    /// § 9.3). 1..=[`MAX_ACTIVITIES`]; absent = no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
}

fn default_version() -> u32 {
    SHAPE_VERSION
}

/// One activity of a [`Plan`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlannedActivity {
    /// Unique within the plan; `[A-Za-z0-9_.-]`, at most [`MAX_NAME_LEN`].
    pub name: String,
    /// The Lambda function that runs it (name or ARN). A node is exactly
    /// one kind ([`NodeKind`]): `lambda`, `task_list`, `wait`, `signal` or
    /// `workflow`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub lambda: String,
    /// The task list external workers claim it from (nothing is invoked):
    /// `[A-Za-z0-9_.-]`, at most [`MAX_NAME_LEN`] characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_list: Option<String>,
    /// A durable timer instead of an activity (design.md § 9.1): the node
    /// is RUNNING from its release until its fire time, then COMPLETED
    /// with output `{"fired_at": epoch seconds}`. It takes no timeouts,
    /// retry policy, input or tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<WaitSpec>,
    /// A wait for a signal instead of an activity (design.md § 9.2): the
    /// signal's name, `[A-Za-z0-9_.-]`, at most [`MAX_NAME_LEN`]. The node
    /// is RUNNING from its release until a signal of that name is sent to
    /// the workflow (a row of `whimbrel_signal`; one sent earlier is kept
    /// and delivered then), and COMPLETES with the signal's `input` as its
    /// output; or, when `timeout_seconds` (start-to-close) pass first, is
    /// TIMED_OUT. It takes no other timeout, retry policy, input or tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// A child workflow instead of an activity (design.md § 9.5): the
    /// registered workflow's name, `[A-Za-z0-9_.-]`, at most
    /// [`MAX_NAME_LEN`]. Released, the node starts it (a row of
    /// `whimbrel_workflow_request` whose id is derived from the node's
    /// activity exec id, so a retried release never starts two) with the
    /// node's `input` as the workflow input, and is RUNNING until it ends:
    /// COMPLETED with the child's result as its output, or FAILED with
    /// its reason. Takes `input` and `parent_close` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// A child workflow node's policy when the node is cancelled (a cancel
    /// of the parent, its execution timeout, another activity's failure):
    /// `cancel` (default) or `abandon`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_close: Option<ParentClose>,
    /// Names of the activities it waits for.
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// Heartbeat timeout, seconds; absent = heartbeats disabled unless
    /// `heartbeat_enabled` is true (then the configured default applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_timeout_seconds: Option<i64>,
    /// Enable heartbeats with the default timeout (design.md § 3.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_enabled: Option<bool>,
    /// Start-to-close timeout, seconds (JSON `start_to_close_seconds`, or
    /// its alias `timeout_seconds`): once an attempt starts it must end
    /// within this long or the monitor times it out (TIMED_OUT), heartbeats
    /// or not. Absent = the configured default
    /// (`WHIMBREL_START_TO_CLOSE_SECONDS`, one hour).
    #[serde(
        default,
        rename = "start_to_close_seconds",
        alias = "timeout_seconds",
        skip_serializing_if = "Option::is_none"
    )]
    pub start_to_close_seconds: Option<i64>,
    /// Schedule-to-start timeout, seconds: an attempt QUEUED this long
    /// without starting is TIMED_OUT (then retried per the policy).
    /// Absent = `WHIMBREL_SCHEDULE_TO_START_SECONDS`, else no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_to_start_seconds: Option<i64>,
    /// Schedule-to-close timeout, seconds, across all attempts from the
    /// first time it was queued; when it passes the activity is TIMED_OUT
    /// for good. Absent = `WHIMBREL_SCHEDULE_TO_CLOSE_SECONDS`, else none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_to_close_seconds: Option<i64>,
    /// Its retry policy, over the plan's `retry` field by field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Input handed to the activity when it is launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// Set by the engine only, on a stored plan (`whimbrel_workflow_plan`):
    /// the key of the input row that holds this activity's input, which is
    /// then absent here. An input too large for the activity item is kept
    /// once, on its row, not also in the plan (design.md § 2.8). A plan
    /// from a decider or a definition that sets it is refused
    /// ([`PlanError::InputRef`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_ref: Option<String>,
    /// Refuse this activity's reports that do not carry the live attempt's
    /// token (default: the plan's `require_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_tokens: Option<bool>,
}

/// The payload an activity Lambda receives (async Invoke) when launched
/// (design.md § 3.9: the four ids, `attempt`, `input`, prerequisites' outputs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchPayload {
    /// Shape version, [`SHAPE_VERSION`].
    pub version: u32,
    /// The activity exec to report events for.
    pub activity_exec_id: String,
    /// Its name in the plan.
    pub activity_name: String,
    /// Its workflow exec.
    pub workflow_exec_id: String,
    /// Its workflow name.
    pub workflow_name: String,
    /// The attempt, 1-based (+1 on each retry).
    pub attempt: u32,
    /// The launch of this attempt, 1-based (+1 when an invocation that
    /// never started is launched again; each launch has its own token).
    #[serde(default)]
    pub launch: u32,
    /// The plan's input for it, `null` when absent.
    pub input: Value,
    /// Output of each prerequisite, by activity name.
    #[serde(default)]
    pub prerequisites: HashMap<String, Value>,
    /// Prerequisites (activity names) whose outputs are not in
    /// `prerequisites` because the payload would have passed
    /// [`MAX_LAUNCH_PAYLOAD_BYTES`] (a wide join with large outputs): read
    /// them with `Activity::prerequisite_outputs`. Absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prerequisites_by_reference: Vec<String>,
    /// Heartbeat timeout, seconds, when heartbeats are enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_timeout_seconds: Option<i64>,
    /// Start-to-close timeout, seconds, when the plan gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i64>,
    /// The attempt's token: report it back (`attempt_token` on event rows,
    /// heartbeats) to prove a report comes from the live attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_token: Option<String>,
}

impl LaunchPayload {
    /// Keep the payload within `max` bytes (serialized): move the largest
    /// prerequisites' outputs, one by one, from `prerequisites` to
    /// `prerequisites_by_reference` (sorted by name) until it fits or none
    /// is left. Returns the payload's size, bytes.
    ///
    /// Each move subtracts the entry's own serialized size from the total,
    /// so the payload is serialized once per round, not once per move (a
    /// join of 2,000 outputs of 100 KB is 200 MB to shrink); a round ends
    /// with an exact measure, and another runs only if estimates fell
    /// short.
    pub fn fit(&mut self, max: usize) -> usize {
        let size = |p: &LaunchPayload| serde_json::to_vec(p).map_or(usize::MAX, |b| b.len());
        // `"name":value,` in the object; `"name",` in the reference list.
        let quoted = |k: &str| serde_json::to_string(k).map_or(k.len() + 2, |q| q.len());
        let mut total = size(self);
        let mut by_size: Vec<(usize, String)> = self
            .prerequisites
            .iter()
            .map(|(k, v)| (quoted(k) + v.to_string().len() + 2, k.clone()))
            .collect();
        by_size.sort();
        while total > max && !by_size.is_empty() {
            let mut estimate = total;
            while estimate > max {
                let Some((bytes, name)) = by_size.pop() else {
                    break;
                };
                estimate = estimate.saturating_sub(bytes) + quoted(&name) + 1;
                self.prerequisites.remove(&name);
                self.prerequisites_by_reference.push(name);
            }
            self.prerequisites_by_reference.sort();
            total = size(self);
        }
        total
    }
}

/// Why a plan is invalid. The message is stored as the workflow's `error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// No activities.
    #[error("plan has no activities")]
    Empty,
    /// More than [`MAX_ACTIVITIES`].
    #[error("plan has {0} activities; at most {MAX_ACTIVITIES} are allowed")]
    TooManyActivities(usize),
    /// Unsupported shape version.
    #[error("plan version {0} is not supported (expected {SHAPE_VERSION})")]
    Version(u32),
    /// A bad activity name.
    #[error(
        "activity name {0:?} is invalid: use 1-{MAX_NAME_LEN} characters of A-Z a-z 0-9 _ . -"
    )]
    BadName(String),
    /// A `max_concurrency` plan whose nodes could not all wait on the
    /// workflow item ([`MAX_SLOT_WAITERS_BYTES`]).
    #[error("a plan under max_concurrency keeps its waiting nodes on the workflow item: their names make {0} bytes; at most {MAX_SLOT_WAITERS_BYTES} are allowed (shorter names, fewer nodes, or child workflows)")]
    TooManyWaiters(usize),
    /// An input nested deeper than [`crate::payloads::MAX_JSON_DEPTH`]:
    /// the reason, whole.
    #[error("{0}")]
    TooDeep(String),
    /// A `lambda` Lambda's Invoke would refuse ([`MAX_LAMBDA_LEN`]).
    #[error("activity {activity:?}: lambda is {len} bytes; it must be 1-{MAX_LAMBDA_LEN} characters of A-Z a-z 0-9 - _ . : $ (a function name, or its ARN, with a version or alias)")]
    BadLambda {
        /// The activity.
        activity: String,
        /// Its `lambda`'s length, bytes.
        len: usize,
    },
    /// Two activities share a name.
    #[error("activity name {0:?} appears more than once")]
    DuplicateName(String),
    /// `input_ref` given: only the engine sets it, on the plan it stores.
    #[error("activity {0:?} sets input_ref, which only the engine sets; give its input")]
    InputRef(String),
    /// No kind given (none of `lambda`, `task_list`, `wait`, `signal`,
    /// `workflow`), or a bad task list, signal or workflow name.
    #[error("activity {0:?} needs exactly one of lambda, task_list, wait, signal or workflow (a task list, signal or workflow name is 1-{MAX_NAME_LEN} characters of A-Z a-z 0-9 _ . -)")]
    NoLambda(String),
    /// Two or more kinds given.
    #[error("activity {activity:?} gives {first} and {second}; a node is exactly one of lambda, task_list, wait, signal or workflow")]
    TwoKinds {
        /// The node.
        activity: String,
        /// The first kind's field.
        first: &'static str,
        /// The second kind's field.
        second: &'static str,
    },
    /// `max_concurrency` out of range.
    #[error("max_concurrency is {0}; it must be within 1..={MAX_ACTIVITIES}")]
    BadConcurrency(u32),
    /// A bad `wait`.
    #[error("activity {activity:?}: {why}")]
    BadWait {
        /// The timer node.
        activity: String,
        /// What is wrong.
        why: String,
    },
    /// `parent_close` on a node that is not a child workflow.
    #[error("activity {0:?} gives parent_close, which only a workflow (child) node takes")]
    NotAChild(String),
    /// A timer, signal or child node with a field that only activities take.
    #[error(
        "activity {activity:?} is a {kind} node; {field} applies only to activities that run code"
    )]
    TimerField {
        /// The timer, signal or child node.
        activity: String,
        /// Its kind's field: `wait`, `signal` or `workflow`.
        kind: &'static str,
        /// The field given.
        field: &'static str,
    },
    /// A timeout not positive or too long.
    #[error("{what} is {value}; it must be within 1..={max} seconds")]
    BadTimeout {
        /// Which timeout, and of what.
        what: String,
        /// The value given, seconds.
        value: i64,
        /// The upper bound, seconds.
        max: i64,
    },
    /// An invalid retry policy (of the plan, or of the named activity).
    #[error("{owner}: {error}")]
    Retry {
        /// `plan` or `activity "name"`.
        owner: String,
        /// What is wrong.
        error: PolicyError,
    },
    /// A prerequisite that is not in the plan, or the activity itself.
    #[error("activity {activity:?} depends on unknown activity {prerequisite:?}")]
    UnknownPrerequisite {
        /// The waiting activity.
        activity: String,
        /// The missing name.
        prerequisite: String,
    },
    /// A prerequisite listed twice.
    #[error("activity {activity:?} lists prerequisite {prerequisite:?} twice")]
    DuplicatePrerequisite {
        /// The waiting activity.
        activity: String,
        /// The repeated name.
        prerequisite: String,
    },
    /// A dependency cycle through the named activities.
    #[error("dependency cycle among activities {0:?}")]
    Cycle(Vec<String>),
    /// A heartbeat or start-to-close timeout not positive or above
    /// [`MAX_HEARTBEAT_TIMEOUT_SECONDS`].
    #[error(
        "activity {0:?} has a heartbeat_timeout_seconds or timeout_seconds outside 1..={MAX_HEARTBEAT_TIMEOUT_SECONDS}"
    )]
    BadHeartbeat(String),
    /// Too large to store.
    #[error("{what} is {size} bytes; at most {max} bytes are allowed")]
    TooLarge {
        /// What is too large.
        what: String,
        /// Its serialized size, bytes.
        size: usize,
        /// The limit, bytes.
        max: usize,
    },
}

/// A timeout given must be within 1..=[`MAX_TIMEOUT_SECONDS`].
fn check_timeout(what: &str, t: Option<i64>) -> Result<(), PlanError> {
    match t {
        Some(v) if !(1..=MAX_TIMEOUT_SECONDS).contains(&v) => Err(PlanError::BadTimeout {
            what: what.into(),
            value: v,
            max: MAX_TIMEOUT_SECONDS,
        }),
        _ => Ok(()),
    }
}

/// A name of `[A-Za-z0-9_.-]`, 1..=[`MAX_NAME_LEN`] characters.
/// Whether `lambda` is a `FunctionName` Lambda's Invoke takes
/// ([`MAX_LAMBDA_LEN`]): its length and characters, not its structure,
/// which the deployment's `LaunchTargets` judge.
pub(crate) fn valid_lambda(lambda: &str) -> bool {
    (1..=MAX_LAMBDA_LEN).contains(&lambda.len())
        && (lambda.chars()).all(|c| c.is_ascii_alphanumeric() || "-_.:$".contains(c))
}

pub(crate) fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= MAX_NAME_LEN
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

impl PlannedActivity {
    /// One activity's own fields: no `input_ref` (only the engine sets it),
    /// a lambda or a task list, timeouts and retry policy in range, input
    /// and planned size within their limits.
    fn check(&self) -> Result<(), PlanError> {
        let a = self;
        if a.input_ref.is_some() {
            return Err(PlanError::InputRef(a.name.clone()));
        }
        match a.kinds_given().as_slice() {
            [] => return Err(PlanError::NoLambda(a.name.clone())),
            [_] => {}
            [first, second, ..] => {
                return Err(PlanError::TwoKinds {
                    activity: a.name.clone(),
                    first: first.field(),
                    second: second.field(),
                })
            }
        }
        let bad_name = |n: &Option<String>| n.as_deref().is_some_and(|l| !valid_name(l));
        if bad_name(&a.task_list) || bad_name(&a.signal) || bad_name(&a.workflow) {
            return Err(PlanError::NoLambda(a.name.clone()));
        }
        if a.kind() == NodeKind::Lambda && !valid_lambda(&a.lambda) {
            let (activity, len) = (a.name.clone(), a.lambda.len());
            return Err(PlanError::BadLambda { activity, len });
        }
        if let Some(w) = &a.wait {
            w.check(&a.name)?;
        }
        if !a.kind().runs_code() {
            a.check_timer_fields()?;
        }
        if a.parent_close.is_some() && a.kind() != NodeKind::Child {
            return Err(PlanError::NotAChild(a.name.clone()));
        }
        for (what, t) in [
            ("schedule_to_start_seconds", a.schedule_to_start_seconds),
            ("schedule_to_close_seconds", a.schedule_to_close_seconds),
        ] {
            check_timeout(&format!("{what} of activity {:?}", a.name), t)?;
        }
        if let Some(r) = &a.retry {
            r.validate().map_err(|error| PlanError::Retry {
                owner: format!("activity {:?}", a.name),
                error,
            })?;
        }
        if [a.heartbeat_timeout_seconds, a.start_to_close_seconds]
            .into_iter()
            .flatten()
            .any(|t| !(1..=MAX_HEARTBEAT_TIMEOUT_SECONDS).contains(&t))
        {
            return Err(PlanError::BadHeartbeat(a.name.clone()));
        }
        let too_large = |what: String, size: usize, max: usize| {
            (size > max).then_some(PlanError::TooLarge { what, size, max })
        };
        let size = a.input.as_ref().map_or(0, |v| v.to_string().len());
        let what = format!("input of activity {:?}", a.name);
        if let Some(why) = (a.input.as_ref()).and_then(|v| crate::payloads::too_deep(&what, v)) {
            return Err(PlanError::TooDeep(why));
        }
        if let Some(e) = too_large(what, size, MAX_ACTIVITY_INPUT_BYTES) {
            return Err(e);
        }
        let size = serde_json::to_string(a).map_or(0, |s| s.len());
        let what = format!("activity {:?} as planned", a.name);
        too_large(what, size, PLAN_PART_BYTES).map_or(Ok(()), Err)
    }

    /// The kinds this node gives, in [`NodeKind::ALL`] order: exactly one
    /// for a valid node. A `task_list` counts even when its name is bad.
    pub fn kinds_given(&self) -> Vec<NodeKind> {
        NodeKind::ALL
            .into_iter()
            .filter(|k| match k {
                NodeKind::Lambda => !self.lambda.trim().is_empty(),
                NodeKind::TaskList => self.task_list.is_some(),
                NodeKind::Timer => self.wait.is_some(),
                NodeKind::Signal => self.signal.is_some(),
                NodeKind::Child => self.workflow.is_some(),
            })
            .collect()
    }

    /// The node's kind: the first given ([`Self::kinds_given`]), a Lambda
    /// when none is (validation refuses both cases but one).
    pub fn kind(&self) -> NodeKind {
        self.kinds_given()
            .first()
            .copied()
            .unwrap_or(NodeKind::Lambda)
    }

    /// A timer takes none of the fields of activities that run code; a
    /// signal wait takes only `timeout_seconds` (start-to-close), a child
    /// workflow only `input` (its workflow's input).
    fn check_timer_fields(&self) -> Result<(), PlanError> {
        let timer = self.kind() != NodeKind::Signal;
        let child = self.kind() == NodeKind::Child;
        let given = [
            (
                "heartbeat_timeout_seconds",
                self.heartbeat_timeout_seconds.is_some(),
            ),
            ("heartbeat_enabled", self.heartbeat_enabled.is_some()),
            (
                "start_to_close_seconds",
                timer && self.start_to_close_seconds.is_some(),
            ),
            (
                "schedule_to_start_seconds",
                self.schedule_to_start_seconds.is_some(),
            ),
            (
                "schedule_to_close_seconds",
                self.schedule_to_close_seconds.is_some(),
            ),
            ("retry", self.retry.is_some()),
            ("input", !child && self.input.is_some()),
            ("require_tokens", self.require_tokens.is_some()),
        ];
        match given.into_iter().find(|(_, set)| *set) {
            Some((field, _)) => Err(PlanError::TimerField {
                activity: self.name.clone(),
                kind: self.kind().field(),
                field,
            }),
            None => Ok(()),
        }
    }

    /// Its prerequisites are activities of the plan (`names`), not itself,
    /// each named once.
    fn check_prerequisites(&self, names: &HashSet<&str>) -> Result<(), PlanError> {
        let mut seen = HashSet::new();
        for p in &self.depends_on {
            if !names.contains(p.as_str()) || *p == self.name {
                return Err(PlanError::UnknownPrerequisite {
                    activity: self.name.clone(),
                    prerequisite: p.clone(),
                });
            }
            if !seen.insert(p) {
                return Err(PlanError::DuplicatePrerequisite {
                    activity: self.name.clone(),
                    prerequisite: p.clone(),
                });
            }
        }
        Ok(())
    }
}

impl Plan {
    /// A plan of `activities` at [`SHAPE_VERSION`] with no other field set.
    pub fn of(activities: Vec<PlannedActivity>) -> Plan {
        Plan {
            version: SHAPE_VERSION,
            activities,
            require_tokens: None,
            retry: None,
            execution_timeout_seconds: None,
            max_concurrency: None,
        }
    }

    /// True when a node is a child workflow: a failure closes it
    /// (design.md § 9.5).
    pub fn closes_children(&self) -> bool {
        self.activities.iter().any(|a| a.kind() == NodeKind::Child)
    }

    /// Validate the plan before anything is written (design.md § 4): unique valid
    /// names, a lambda each, known and distinct prerequisites, no cycle,
    /// sizes within the item limits.
    ///
    /// Errors: the first [`PlanError`] found.
    pub fn validate(&self) -> Result<(), PlanError> {
        self.check_header()?;
        let mut names = HashSet::new();
        for a in &self.activities {
            if !valid_name(&a.name) {
                return Err(PlanError::BadName(a.name.clone()));
            }
            if !names.insert(a.name.as_str()) {
                return Err(PlanError::DuplicateName(a.name.clone()));
            }
            a.check()?;
        }
        for a in &self.activities {
            a.check_prerequisites(&names)?;
        }
        self.check_acyclic()?;
        self.check_item_sizes()?;
        let size = serde_json::to_string(self).map_or(0, |s| s.len());
        if size > MAX_PLAN_BYTES {
            return Err(PlanError::TooLarge {
                what: "plan".into(),
                size,
                max: MAX_PLAN_BYTES,
            });
        }
        Ok(())
    }

    /// The checks that need the clock, made at the workflow's start (`now`,
    /// epoch seconds): no timer's `until` more than [`MAX_WAIT_SECONDS`]
    /// ahead ([`WaitSpec::check_at`]).
    ///
    /// Errors: the first [`PlanError::BadWait`].
    pub fn check_at(&self, now: i64) -> Result<(), PlanError> {
        self.activities
            .iter()
            .filter_map(|a| a.wait.as_ref().map(|w| (a, w)))
            .try_for_each(|(a, w)| w.check_at(&a.name, now))
    }

    /// The plan's own fields: shape version, activity count, execution
    /// timeout, default retry policy.
    fn check_header(&self) -> Result<(), PlanError> {
        if self.version != SHAPE_VERSION {
            return Err(PlanError::Version(self.version));
        }
        if self.activities.is_empty() {
            return Err(PlanError::Empty);
        }
        if self.activities.len() > MAX_ACTIVITIES {
            return Err(PlanError::TooManyActivities(self.activities.len()));
        }
        check_timeout("execution_timeout_seconds", self.execution_timeout_seconds)?;
        if let Some(m) = self.max_concurrency {
            if !(1..=MAX_ACTIVITIES as u32).contains(&m) {
                return Err(PlanError::BadConcurrency(m));
            }
            // Every node but those running may wait at once, each an
            // entry of `slot_waiters` on the workflow item.
            let bytes: usize = (self.activities.iter())
                .map(|a| a.name.len() + WAITER_ENTRY_BYTES)
                .sum();
            if self.activities.len() > m as usize && bytes > MAX_SLOT_WAITERS_BYTES {
                return Err(PlanError::TooManyWaiters(bytes));
            }
        }
        if let Some(r) = &self.retry {
            r.validate().map_err(|error| PlanError::Retry {
                owner: "plan".into(),
                error,
            })?;
        }
        Ok(())
    }

    /// Each activity exec item must fit DynamoDB's item limit with the
    /// largest output: its prerequisite ids are stored twice (the list and
    /// the release markers), or for a wide join one short marker per join
    /// group; its dependents' ids once, and again with a join slot for
    /// each wide join among them.
    fn check_item_sizes(&self) -> Result<(), PlanError> {
        let id_len: HashMap<&str, usize> = self
            .activities
            .iter()
            .map(|a| (a.name.as_str(), a.name.len() + ID_OVERHEAD))
            .collect();
        let dependents = self.dependents();
        let wide: std::collections::HashSet<&str> = self
            .activities
            .iter()
            .filter(|a| a.depends_on.len() > JOIN_GROUP_SIZE)
            .map(|a| a.name.as_str())
            .collect();
        for a in &self.activities {
            let input = a.input.as_ref().map_or(0, |v| v.to_string().len());
            let prereqs: usize = if a.depends_on.len() > JOIN_GROUP_SIZE {
                a.depends_on.len().div_ceil(JOIN_GROUP_SIZE) * JOIN_MARKER_BYTES
            } else {
                2 * a
                    .depends_on
                    .iter()
                    .map(|p| id_len[p.as_str()])
                    .sum::<usize>()
            };
            let waiting = dependents
                .get(a.name.as_str())
                .map_or(&[][..], Vec::as_slice);
            let listed = if waiting.len() > FAN_OUT_LIST_MAX {
                &[][..]
            } else {
                waiting
            };
            let deps: usize = listed
                .iter()
                .map(|d| {
                    id_len[d]
                        + if wide.contains(d) {
                            id_len[d] + JOIN_SLOT_BYTES
                        } else {
                            0
                        }
                })
                .sum();
            let size = ITEM_BASE_BYTES + input + MAX_OUTPUT_BYTES + prereqs + deps;
            if size > MAX_ACTIVITY_ITEM_BYTES {
                return Err(PlanError::TooLarge {
                    what: format!(
                        "the execution item of activity {:?} (input, largest output, {} prerequisites, {} dependents)",
                        a.name,
                        a.depends_on.len(),
                        waiting.len()
                    ),
                    size,
                    max: MAX_ACTIVITY_ITEM_BYTES,
                });
            }
        }
        Ok(())
    }

    /// Kahn's algorithm: every activity must be reachable from the roots.
    fn check_acyclic(&self) -> Result<(), PlanError> {
        let mut pending: HashMap<&str, usize> = self
            .activities
            .iter()
            .map(|a| (a.name.as_str(), a.depends_on.len()))
            .collect();
        let dependents = self.dependents();
        let mut ready: Vec<&str> = pending
            .iter()
            .filter(|(_, n)| **n == 0)
            .map(|(k, _)| *k)
            .collect();
        let mut done = 0;
        while let Some(n) = ready.pop() {
            done += 1;
            for d in dependents.get(n).into_iter().flatten() {
                let c = pending.get_mut(d).expect("validated name");
                *c -= 1;
                if *c == 0 {
                    ready.push(d);
                }
            }
        }
        if done == self.activities.len() {
            Ok(())
        } else {
            let mut cyclic: Vec<String> = pending
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .map(|(k, _)| k.to_string())
                .collect();
            cyclic.sort();
            Err(PlanError::Cycle(cyclic))
        }
    }

    /// For each activity name, the names of the activities that wait for it.
    pub fn dependents(&self) -> HashMap<&str, Vec<&str>> {
        let mut m: HashMap<&str, Vec<&str>> = HashMap::new();
        for a in &self.activities {
            for p in &a.depends_on {
                m.entry(p.as_str()).or_default().push(a.name.as_str());
            }
        }
        m
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod plan_tests;
