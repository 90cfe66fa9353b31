//! Id formats (whimbrel-architecture.md) and the deterministic derivation of
//! engine-made ids (design.md § 3.7).
//!
//! * `workflow_request_id`, `workflow_exec_id`: `(workflow_name)::(uuid)`
//! * `activity_exec_id`: `(activity_name)::(uuid)`
//! * `activity_event_id`: `(activity_exec_id)::(uuid)`
//! * `activity_exec_dependency`: `(activity_exec_id):(index)` for an edge,
//!   `(activity_exec_id)#join-(group)` for a join group of a wide join

use uuid::Uuid;

/// Separator between a name and its uuid.
pub const SEPARATOR: &str = "::";

/// Namespace of the v5 uuids the engine derives, so the same request always
/// yields the same workflow exec and activity exec ids.
const WHIMBREL_NAMESPACE: Uuid = Uuid::from_u128(0x6b1d_0c4e_9f5a_4d8e_b1a7_57a1_2f0e_c0de);

/// Longest id usable as a DynamoDB partition key, bytes (DynamoDB: "the
/// minimum length of a partition key value is 1 byte; the maximum length
/// is 2048 bytes").
pub const MAX_ID_BYTES: usize = 2048;

/// An unusable id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// Empty, or only whitespace.
    #[error("{kind} is empty; expected ({prefix})::(uuid)")]
    Empty {
        /// Which id.
        kind: &'static str,
        /// What its prefix should be.
        prefix: &'static str,
    },
    /// Longer than [`MAX_ID_BYTES`]: no DynamoDB key can hold it, so no
    /// write that records it can ever succeed.
    #[error("{kind} is {len} bytes; a DynamoDB key holds at most {MAX_ID_BYTES}")]
    TooLong {
        /// Which id.
        kind: &'static str,
        /// Its length, bytes.
        len: usize,
    },
}

/// `(name)::(uuid)` with a fresh random uuid.
pub fn new_id(name: &str) -> String {
    format!("{name}{SEPARATOR}{}", Uuid::new_v4())
}

/// Split `(prefix)::(uuid)` into its prefix and uuid. The prefix may itself
/// contain `::` (an activity event id starts with an activity exec id), so
/// the split is at the last separator.
fn split(id: &str) -> Option<(&str, Uuid)> {
    let (prefix, uuid) = id.rsplit_once(SEPARATOR)?;
    if prefix.is_empty() {
        return None;
    }
    Some((prefix, Uuid::parse_str(uuid).ok()?))
}

/// Check a client-written id. The references recommend (they say
/// "should") `(expected_prefix)::(uuid)`; any other non-empty id is still a
/// unique key, so rows of existing clients that use other ids keep working.
/// Returns whether the id has the recommended form (worth a log line when
/// not).
///
/// Errors: [`IdError::Empty`] when the id is empty (or only whitespace),
/// [`IdError::TooLong`] past [`MAX_ID_BYTES`].
pub fn check_id(
    kind: &'static str,
    prefix_kind: &'static str,
    id: &str,
    expected_prefix: &str,
) -> Result<bool, IdError> {
    if id.trim().is_empty() {
        return Err(IdError::Empty {
            kind,
            prefix: prefix_kind,
        });
    }
    if id.len() > MAX_ID_BYTES {
        return Err(IdError::TooLong {
            kind,
            len: id.len(),
        });
    }
    Ok(matches!(split(id), Some((p, _)) if p == expected_prefix))
}

/// The name part of `(name)::(uuid)`, if the id is well formed.
pub fn name_of(id: &str) -> Option<&str> {
    split(id).map(|(p, _)| p)
}

/// The workflow exec id for a request: `(workflow_name)::(v5(request id))`.
/// Deterministic, so a redelivered request finds the exec it created.
pub fn workflow_exec_id(workflow_name: &str, workflow_request_id: &str) -> String {
    let u = Uuid::new_v5(&WHIMBREL_NAMESPACE, workflow_request_id.as_bytes());
    format!("{workflow_name}{SEPARATOR}{u}")
}

/// The request id of the execution that `workflow_exec_id` (of workflow
/// `name`) continues as (design.md § 10.6): `(name)::(uuid v5 of the exec
/// id)`, derived, so a `continue_as_new` effect written twice starts one
/// execution.
pub fn continued_request_id(workflow_exec_id: &str, name: &str) -> String {
    let key = format!("continue_as_new\n{workflow_exec_id}");
    let u = Uuid::new_v5(&WHIMBREL_NAMESPACE, key.as_bytes());
    format!("{name}{SEPARATOR}{u}")
}

/// The activity exec id of activity `activity_name` in a workflow exec:
/// `(activity_name)::(v5(workflow_exec_id + name))`.
pub fn activity_exec_id(workflow_exec_id: &str, activity_name: &str) -> String {
    let key = format!("{workflow_exec_id}\n{activity_name}");
    let u = Uuid::new_v5(&WHIMBREL_NAMESPACE, key.as_bytes());
    format!("{activity_name}{SEPARATOR}{u}")
}

/// Whether (`activity_exec_id`, `workflow_exec_id`) is the key of an
/// activity exec the engine created: the id is derived from the workflow
/// exec id and the activity's name ([`activity_exec_id`]). Any other item
/// under that hash key is a stray, never the activity: the activity role
/// may UpdateItem heartbeat attributes on any key, which creates an item
/// where none was (docs/design.md § 3.10).
pub fn is_activity_key(activity_exec_id: &str, workflow_exec_id: &str) -> bool {
    name_of(activity_exec_id)
        .is_some_and(|name| activity_exec_id == self::activity_exec_id(workflow_exec_id, name))
}

/// An id in the recommended `(name)::(uuid)` form whose uuid is derived
/// from `seed` (UUID v5): unique when the seed is, and reproducible.
pub fn derived_id(name: &str, seed: &str) -> String {
    let u = Uuid::new_v5(&TOKEN_NAMESPACE, seed.as_bytes());
    format!("{name}{SEPARATOR}{u}")
}

/// The id of a step the engine itself takes on an item, recorded as its
/// `last_event_id` and in its history so a repeated step is recognised:
/// `(step):(item id)` or `(step):(item id):(attempt)`. Every engine step's
/// id is built here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineStep<'a> {
    /// A launch refused for good: `launch-failed:(activity):(attempt)`.
    LaunchFailed(&'a str, u32),
    /// Cancelled because a prerequisite ended unsuccessfully:
    /// `upstream-ended:(activity)`.
    UpstreamEnded(&'a str),
    /// A deadline passed: `timed-out:(activity):(attempt)`.
    TimedOut(&'a str, u32),
    /// An attempt never started: `not-started:(activity):(attempt)`.
    NotStarted(&'a str, u32),
    /// The workflow's execution timeout passed: `execution-timeout:(workflow)`.
    ExecutionTimeout(&'a str),
    /// A client's cancel request (a row of `whimbrel_workflow_request`):
    /// `cancel-request:(workflow_request_id)`.
    CancelRequest(&'a str),
    /// A worker's claim: `claim:(activity):(attempt)`.
    Claim(&'a str, u32),
    /// A launcher's claim, `launcher:(attempt)`. It names no activity: it
    /// only ever stands on its own item, whose history is billed by size.
    Launcher(u32),
    /// A timer's fire time came: `timer-fired:(activity):1` (a timer has
    /// one attempt; design.md § 9.1).
    TimerFired(&'a str),
    /// A signal delivered to a signal wait: `signal:(activity):(signal_key)`
    /// (design.md § 9.2). The same signal on the same node is one event
    /// id, whoever delivers it.
    SignalDelivered(&'a str, &'a str),
    /// A child workflow's end reached its node: `child-ended:(activity)`
    /// (design.md § 9.5; a node starts one child, which ends once).
    ChildEnded(&'a str),
    /// A child workflow node cancelled because another activity of its
    /// workflow failed (its `parent_close`): `parent-failing:(activity)`.
    ParentFailing(&'a str),
    /// A decision of an episodic execution (design.md § 10.5), by its
    /// record key: `decision:(workflow)#(number)`.
    Decision(&'a str, u64),
}

/// The prefixes of [`EngineStep::event_id`]: the engine's own steps.
const ENGINE_STEP_PREFIXES: [&str; 13] = [
    "launch-failed",
    "upstream-ended",
    "timed-out",
    "not-started",
    "execution-timeout",
    "cancel-request",
    "claim",
    "launcher",
    "timer-fired",
    "signal",
    "child-ended",
    "parent-failing",
    "decision",
];

/// True when `event_id` is an engine step's ([`EngineStep::event_id`]),
/// not an event row's. Some steps' ids repeat in every generation of a
/// redriven workflow (`upstream-ended:(activity)`), so a step applied
/// before a redrive does not stand for one after it (design.md § 9.4).
pub fn is_engine_step(event_id: &str) -> bool {
    event_id
        .split_once(':')
        .is_some_and(|(prefix, _)| ENGINE_STEP_PREFIXES.contains(&prefix))
}

impl EngineStep<'_> {
    /// The step's event id.
    pub fn event_id(self) -> String {
        match self {
            EngineStep::LaunchFailed(id, a) => format!("launch-failed:{id}:{a}"),
            EngineStep::UpstreamEnded(id) => format!("upstream-ended:{id}"),
            EngineStep::TimedOut(id, a) => format!("timed-out:{id}:{a}"),
            EngineStep::NotStarted(id, a) => format!("not-started:{id}:{a}"),
            EngineStep::ExecutionTimeout(id) => format!("execution-timeout:{id}"),
            EngineStep::CancelRequest(id) => format!("cancel-request:{id}"),
            EngineStep::Claim(id, a) => format!("claim:{id}:{a}"),
            EngineStep::Launcher(a) => format!("launcher:{a}"),
            EngineStep::TimerFired(id) => format!("timer-fired:{id}:1"),
            EngineStep::SignalDelivered(id, key) => format!("signal:{id}:{key}"),
            EngineStep::ChildEnded(id) => format!("child-ended:{id}"),
            EngineStep::ParentFailing(id) => format!("parent-failing:{id}"),
            EngineStep::Decision(id, number) => format!("decision:{id}#{number}"),
        }
    }
}

/// The request id of the child workflow `workflow_name` that the node
/// `activity_exec_id` starts in its `generation` (design.md § 9.5; 0 until
/// its workflow is redriven, § 9.4): `(workflow_name)::(uuid v5 of the
/// node's id, and of the generation above 0)`, so every release of the
/// node names the same child, a redriven node a new one (its old child
/// ended), and its exec id ([`workflow_exec_id`]) is known before it
/// starts.
pub fn child_request_id(workflow_name: &str, activity_exec_id: &str, generation: u32) -> String {
    let key = match generation {
        0 => format!("child:{activity_exec_id}"),
        g => format!("child:{activity_exec_id}#{g}"),
    };
    let uuid = Uuid::new_v5(&WHIMBREL_NAMESPACE, key.as_bytes());
    format!("{workflow_name}{SEPARATOR}{uuid}")
}

/// The workflow exec id of that child ([`child_request_id`],
/// [`workflow_exec_id`]): known before it starts.
pub fn child_exec_id(workflow_name: &str, activity_exec_id: &str, generation: u32) -> String {
    workflow_exec_id(
        workflow_name,
        &child_request_id(workflow_name, activity_exec_id, generation),
    )
}

/// A child node's `child_run` (design.md § 9.5): the execution
/// `workflow_exec_id` of its child's chain that the node waits on in its
/// `generation`, as `(generation)#(workflow exec id)`.
pub fn child_run(generation: u32, workflow_exec_id: &str) -> String {
    format!("{generation}#{workflow_exec_id}")
}

/// A `child_run` read back ([`child_run`]): `(generation, workflow exec
/// id)`; `None` when it is not of that shape.
pub fn parse_child_run(child_run: &str) -> Option<(u32, &str)> {
    let (generation, id) = child_run.split_once('#')?;
    Some((generation.parse().ok()?, id))
}

/// The request id of the cancel request a child node's cancel writes for
/// its child (`parent_close: cancel`), the same for every try.
pub fn child_cancel_request_id(workflow_name: &str, child_exec_id: &str) -> String {
    let uuid = Uuid::new_v5(
        &WHIMBREL_NAMESPACE,
        format!("cancel:{child_exec_id}").as_bytes(),
    );
    format!("{workflow_name}{SEPARATOR}{uuid}")
}

/// The hash of an attempt token, as stored on the activity exec
/// (`attempt_token_hash`): a UUID v5 of the token, text.
pub fn token_hash(token: &str) -> String {
    // SHA-1 based (UUID v5): stable across processes and releases, and the
    // item never holds the token itself.
    uuid::Uuid::new_v5(&TOKEN_NAMESPACE, token.as_bytes()).to_string()
}

/// The digest of a plan's serialized activity list (a UUID v5, SHA-1
/// based, text), which keys its parts ([`plan_part_key`]).
pub fn plan_digest(activities_json: &[u8]) -> String {
    uuid::Uuid::new_v5(&TOKEN_NAMESPACE, activities_json)
        .simple()
        .to_string()
}

/// The hash key of part `part` of the plan with `digest` of a workflow
/// exec: `(workflow_exec_id)#plan#(digest)#(part)`.
pub fn plan_part_key(workflow_exec_id: &str, digest: &str, part: u32) -> String {
    format!("{workflow_exec_id}#plan#{digest}#{part}")
}

/// The hash key of the input row holding `input_json` (an activity's input,
/// serialized) for a workflow exec: `(workflow_exec_id)#input#(digest)`,
/// the digest as in [`plan_digest`]. Same input, same key.
pub fn input_row_key(workflow_exec_id: &str, input_json: &[u8]) -> String {
    format!("{workflow_exec_id}#input#{}", plan_digest(input_json))
}

/// The hash key of the output row holding an output whose digest
/// ([`crate::payloads::output_digest`]) is `digest`, for a workflow exec:
/// `(workflow_exec_id)#output#(digest)`. Same output, same key.
pub fn output_row_key(workflow_exec_id: &str, digest: &str) -> String {
    format!("{workflow_exec_id}#output#{digest}")
}

/// Namespace of [`token_hash`].
const TOKEN_NAMESPACE: uuid::Uuid =
    uuid::Uuid::from_u128(0x5f1c_2a4e_9b0d_4e6b_8a35_7d21_c0f4_9e12);

/// The dependency edge key: `(activity_exec_id):(index)`.
pub fn dependency_id(activity_exec_id: &str, index: usize) -> String {
    format!("{activity_exec_id}:{index}")
}

/// The key (`activity_exec_dependency`) of join group `group` of the wide
/// join `activity_exec_id`: `(activity_exec_id)#join-(group)`. Distinct
/// from every edge key, which ends in `:(index)`.
pub fn join_group_id(activity_exec_id: &str, group: u32) -> String {
    format!("{activity_exec_id}{}", join_marker(group))
}

/// The key (`activity_exec_dependency`) of count group `group` of the
/// workflow exec `workflow_exec_id`: `(workflow_exec_id)#count-(group)`.
pub fn count_group_id(workflow_exec_id: &str, group: u32) -> String {
    format!("{workflow_exec_id}{}", count_marker(group))
}

/// The marker a complete count group leaves in its workflow exec's
/// `counted_groups` once its counts are added: `#count-(group)`.
pub fn count_marker(group: u32) -> String {
    format!("#count-{group}")
}

/// The release marker a complete join group leaves in its join's
/// `released_prerequisites`: `#join-(group)`. No activity exec id has this
/// form (they are `(name)::(uuid)`).
pub fn join_marker(group: u32) -> String {
    format!("#join-{group}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ids_are_deterministic_and_well_formed() {
        let w = workflow_exec_id(
            "wordcount",
            "wordcount::0e7c2c36-3d5c-4c3b-8a53-2f0c6f8c1d11",
        );
        assert_eq!(
            w,
            workflow_exec_id(
                "wordcount",
                "wordcount::0e7c2c36-3d5c-4c3b-8a53-2f0c6f8c1d11"
            )
        );
        assert!(check_id("workflow_exec_id", "workflow_name", &w, "wordcount").unwrap());
        let a = activity_exec_id(&w, "count-3");
        assert_ne!(a, activity_exec_id(&w, "count-4"));
        assert!(check_id("activity_exec_id", "activity_name", &a, "count-3").unwrap());
        let e = new_id(&a);
        assert!(check_id("activity_event_id", "activity_exec_id", &e, &a).unwrap());
        assert_eq!(dependency_id(&a, 2), format!("{a}:2"));
    }

    #[test]
    fn other_ids_are_accepted_but_not_recommended_and_empty_ones_rejected() {
        for id in [
            "wordcount",
            "wordcount::not-a-uuid",
            "other::0e7c2c36-3d5c-4c3b-8a53-2f0c6f8c1d11",
        ] {
            assert_eq!(check_id("x", "y", id, "wordcount"), Ok(false), "{id}");
        }
        assert!(check_id("x", "y", "", "wordcount").is_err());
        assert!(check_id("x", "y", "  ", "wordcount").is_err());
    }

    #[test]
    fn ids_longer_than_a_dynamodb_key_are_rejected() {
        let at_limit = "a".repeat(MAX_ID_BYTES);
        assert_eq!(check_id("x", "y", &at_limit, "wordcount"), Ok(false));
        let over = format!("{at_limit}é");
        assert_eq!(
            check_id("x", "y", &over, "wordcount"),
            Err(IdError::TooLong {
                kind: "x",
                len: MAX_ID_BYTES + 2
            })
        );
    }
}
