//! The names of the stored attributes, defined once. Stored names never
//! change: existing clients and tables use them (docs/tables.md).
//! Rust names elsewhere say what a value holds; these say where it is
//! stored.

/// `activities`: Its activities, in plan order.
pub const ACTIVITIES: &str = "activities";
/// `activity_count`: Number of activities in the plan.
pub const ACTIVITY_COUNT: &str = "activity_count";
/// `activity_event_id`: Hash key, `(activity_exec_id)::(uuid)`.
pub const ACTIVITY_EVENT_ID: &str = "activity_event_id";
/// `activity_exec_dependency`: Hash key of `activity_exec_dependency` items: an edge, join group or count group id.
pub const ACTIVITY_EXEC_DEPENDENCY: &str = "activity_exec_dependency";
/// `activity_exec_id`: An activity exec id, `(workflow_exec_id)::(activity_name)`-derived: hash key of `activity_exec`, key of event rows and dependency items.
pub const ACTIVITY_EXEC_ID: &str = "activity_exec_id";
/// `activity_name`: The activity's name in its plan: range key of the activities-by-workflow GSI.
pub const ACTIVITY_NAME: &str = "activity_name";
/// `attempt`: Attempt number, from 1 (contract: Attempts).
pub const ATTEMPT: &str = "attempt";
/// `attempt_token`: The attempt token from the launch payload: proves the report comes from the live attempt.
pub const ATTEMPT_TOKEN: &str = "attempt_token";
/// `attempt_token_hash`: Hash of the live attempt's token (`ids::token_hash`), never the token.
pub const ATTEMPT_TOKEN_HASH: &str = "attempt_token_hash";
/// `cancelled_count`: Activities that ended CANCELLED.
pub const CANCELLED_COUNT: &str = "cancelled_count";
/// `completed_count`: Activities that ended COMPLETED.
pub const COMPLETED_COUNT: &str = "completed_count";
/// `count`: How many there are (plan parts, group size).
pub const COUNT: &str = "count";
/// `closed_by_decision`: The number of the decision that ended the
/// episodic execution (design.md § 10.3): no event is appended after it.
pub const CLOSED_BY_DECISION: &str = "closed_by_decision";
/// `count_slot`: The count group its end is counted in (design.md § 3.3): the group of the workflow's activities, in plan order, and its size.
pub const COUNT_SLOT: &str = "count_slot";
/// `counted_groups`: The count groups this ended activity was counted in (string set of markers).
pub const COUNTED_GROUPS: &str = "counted_groups";
/// `decided_seq`: The last event of the execution's log a committed decision saw
/// (design.md § 10.3); 0 when missing.
pub const DECIDED_SEQ: &str = "decided_seq";
/// `decision_attempt`: The attempt of the decision in flight, from 1.
pub const DECISION_ATTEMPT: &str = "decision_attempt";
/// `decision_count`: Decisions committed (accepted or refused) in the
/// execution; the one in flight is numbered one more.
pub const DECISION_COUNT: &str = "decision_count";
/// `decision_due_epoch`: When the decision in flight is tried again (its attempt's
/// deadline, or the backoff after an error), epoch seconds.
pub const DECISION_DUE_EPOCH: &str = "decision_due_epoch";
/// `decision_first_epoch`: When the first attempt of the decision in flight
/// started, epoch seconds: its decision timeout counts from here.
pub const DECISION_FIRST_EPOCH: &str = "decision_first_epoch";
/// `decision_id`: The decision in flight, `(workflow_exec_id)::d(number)::a(attempt)`;
/// absent when none is (design.md § 10.3).
pub const DECISION_ID: &str = "decision_id";
/// `decision_refusals`: Answers refused in a row; the commit of an accepted
/// one sets 0.
pub const DECISION_REFUSALS: &str = "decision_refusals";
/// `definition`: A static plan used instead of a decider.
pub const DEFINITION: &str = "definition";
/// `dependent_activity_exec_id`: The prerequisite it waits for.
pub const DEPENDENT_ACTIVITY_EXEC_ID: &str = "dependent_activity_exec_id";
/// `dependents`: Activity exec ids of the activities that wait for it (empty for a wide fan-out: see `dependents_in_plan`).
pub const DEPENDENTS: &str = "dependents";
/// `dependents_in_plan`: Set for a wide fan-out (more dependents than `plan::FAN_OUT_LIST_MAX`, so that no item grows with the fan-out): how many activities wait for it.
pub const DEPENDENTS_IN_PLAN: &str = "dependents_in_plan";
/// `released_through`: After a COMPLETED, how many of its dependents (in the order `planned_dependents` or `dependents` lists them) are released: a release cut by its invocation's budget resumes there (issue 42 A.9).
pub const RELEASED_THROUGH: &str = "released_through";
/// `description`: What it is.
pub const DESCRIPTION: &str = "description";
/// `digest`: The digest of the whole activity list (`ids::plan_digest`): parts are keyed by it, so the parts of two different plans put by concurrent starts never mix;
pub const DIGEST: &str = "digest";
/// `due_epoch`: Epoch seconds of the item's next deadline or unfinished obligation: the range key of the sparse due GSI.
pub const DUE_EPOCH: &str = "due_epoch";
/// `due_shard`: The due GSI shard (0..8) of the item: its hash key in that index.
pub const DUE_SHARD: &str = "due_shard";
/// `end_time`: When it ended, UTC date list.
pub const END_TIME: &str = "end_time";
/// `end_time_epoch`: When it ended, epoch seconds.
pub const END_TIME_EPOCH: &str = "end_time_epoch";
/// `ended`: Epoch seconds at which an activity item reached a terminal state.
pub const ENDED: &str = "ended";
/// `error`: Reason of a FAILED (or CANCEL) transition.
pub const ERROR: &str = "error";
/// `event_seq`: The last event appended to the execution's log (design.md
/// § 10.2); 0 when missing.
pub const EVENT_SEQ: &str = "event_seq";
/// `execution_timeout_seconds`: The plan's `execution_timeout_seconds`, seconds, copied here when the plan is recorded, so the monitor judges the execution deadline from this item alone.
pub const EXECUTION_TIMEOUT_SECONDS: &str = "execution_timeout_seconds";
/// `expires_at_epoch`: When DynamoDB TTL may delete the row, epoch seconds (set by our writers when `RowRetentionDays` is on, see `config::EngineConfig::row_expiry`;
pub const EXPIRES_AT_EPOCH: &str = "expires_at_epoch";
/// `failed_count`: Activities that ended FAILED or TIMED_OUT.
pub const FAILED_COUNT: &str = "failed_count";
/// `first_queued_epoch`: When the activity was first QUEUED, epoch seconds.
pub const FIRST_QUEUED_EPOCH: &str = "first_queued_epoch";
/// `group`: The group's number, 0-based: prerequisites `group × G ..
pub const GROUP: &str = "group";
/// `heartbeat_enabled`: True if the activity heartbeats (architecture: `heartbeat_enabled`).
pub const HEARTBEAT_ENABLED: &str = "heartbeat_enabled";
/// `heartbeat_time`: Last heartbeat, UTC date list.
pub const HEARTBEAT_TIME: &str = "heartbeat_time";
/// `heartbeat_time_epoch`: Last heartbeat, epoch seconds;
pub const HEARTBEAT_TIME_EPOCH: &str = "heartbeat_time_epoch";
/// `heartbeat_seen`: The `heartbeat_time_epoch` the engine last counted the heartbeat deadline from (engine-written).
pub const HEARTBEAT_SEEN: &str = "heartbeat_seen";
/// `heartbeat_seen_epoch`: When the engine saw `heartbeat_seen`, epoch seconds by its own clock.
pub const HEARTBEAT_SEEN_EPOCH: &str = "heartbeat_seen_epoch";
/// `heartbeat_timeout_seconds`: Heartbeat timeout, seconds, when heartbeats are enabled.
pub const HEARTBEAT_TIMEOUT_SECONDS: &str = "heartbeat_timeout_seconds";
/// `history`: Accepted transitions, oldest first: the audit trail.
pub const HISTORY: &str = "history";
/// `input`: Optional workflow input (design.md § 2.6), passed to the decider.
pub const INPUT: &str = "input";
/// `input_ref`: Hash key of the write-once `InputRow` (on `whimbrel_workflow_plan`) that holds its input, when the input is too large to keep on this item (design.md § 2.8: every update is billed by the item's size).
pub const INPUT_REF: &str = "input_ref";
/// `join_groups`: Present on a wide join, an activity with more prerequisites than `EngineConfig::join_group_size` (so that no write grows with the prerequisites): how many join groups (`JoinGroup`) its prerequisites are...
pub const JOIN_GROUPS: &str = "join_groups";
/// `join_slots`: For each dependent that is a wide join (its activity exec id), the join group this activity's COMPLETED counts toward.
pub const JOIN_SLOTS: &str = "join_slots";
/// `lambda`: The Lambda function that runs it (name or ARN);
pub const LAMBDA: &str = "lambda";
/// `last_event_id`: Id of the event (or engine step) behind the last state change, on items last changed by an earlier version only: it is the last history entry's, so a state change removes it (the item is billed by its size).
pub const LAST_EVENT_ID: &str = "last_event_id";
/// `launch`: Launches (async Invokes) of the live attempt: 1 on its claim, +1 on each relaunch of an invocation that never started.
pub const LAUNCH: &str = "launch";
/// `launched_time`: When the last launch (async Invoke) was accepted, UTC date list.
pub const LAUNCHED_TIME: &str = "launched_time";
/// `launched_time_epoch`: When the last launch (async Invoke) was accepted, epoch seconds.
pub const LAUNCHED_TIME_EPOCH: &str = "launched_time_epoch";
/// `log_key`: Range key of `whimbrel_decision`: `event#(seq)`,
/// `event-id#(source)` or `decision#(number)` (design.md § 10.2).
pub const LOG_KEY: &str = "log_key";
/// The short hashes of the signals an execution keeps (a string set on
/// its `signals-kept` item of `whimbrel_decision`; issue 42 B.4).
pub const SIGNALS_KEPT: &str = "kept";
/// The executions started below a tree's root (a number on the root's
/// `tree` item of `whimbrel_decision`; issue 42 B.6).
pub const TREE_STARTED: &str = "started";
/// `manual`: True when a Full Logic API client runs the workflow itself;
pub const MANUAL: &str = "manual";
/// `next_attempt_epoch`: While a retry waits out its delay: when the next attempt is due, epoch seconds.
pub const NEXT_ATTEMPT_EPOCH: &str = "next_attempt_epoch";
/// `object_id`: Hash key: the object, e.g.
pub const OBJECT_ID: &str = "object_id";
/// `object_type`: The kind of an `install_status` item.
pub const OBJECT_TYPE: &str = "object_type";
/// `output`: Output of a COMPLETED activity (any JSON), handed to dependents.
pub const OUTPUT: &str = "output";
/// `output_event_id`: Id of the COMPLETED event row (`whimbrel_activity_event`, write-once) whose `output` is this activity's, when it was too large to keep on this item (design.md § 2.8).
pub const OUTPUT_EVENT_ID: &str = "output_event_id";
/// `output_in_row`: True when the output was too large or too deep to park: it is read back from the event row (`activity_event_id`) when the event applies.
pub const OUTPUT_IN_ROW: &str = "output_in_row";
/// `output_ref`: Hash key of the [`crate::model::OutputRow`] (on
/// `whimbrel_workflow_plan`, written by the engine alone) holding this
/// activity's output, when it is too large to keep on the item.
pub const OUTPUT_REF: &str = "output_ref";
/// The SHA-256 of an output kept on its event row ([`OUTPUT_EVENT_ID`]),
/// hex: what binds the row to the item ([`crate::payloads::output_digest`]).
pub const OUTPUT_SHA256: &str = "output_sha256";
/// `rejected_epoch`: When the engine rejected an event row for good, epoch
/// seconds: set on the row itself, so no later reader (the monitor looking
/// for reports in flight) judges it again (design.md § 3.8).
pub const REJECTED_EPOCH: &str = "rejected_epoch";
/// `rejected_reason`: Why the engine rejected an event row (with
/// [`REJECTED_EPOCH`]), capped like an error.
pub const REJECTED_REASON: &str = "rejected_reason";
/// `parked`: Reports that arrived before the activity's state allowed them, applied when it catches up.
pub const PARKED: &str = "parked";
/// `part`: This part's number, from 0.
pub const PART: &str = "part";
/// `parts`: Set when the plan did not fit one item: its activities are on `WorkflowPlanPart` items, and `plan.activities` is empty here (`engine::plans` puts them together again).
pub const PARTS: &str = "parts";
/// `parent`: A child workflow's parent link (design.md § 9.5), a map.
pub const PARENT: &str = "parent";
/// `pending_dependency_count`: Prerequisites not yet COMPLETED (design.md § 3.2).
pub const PENDING_DEPENDENCY_COUNT: &str = "pending_dependency_count";
/// `plan`: The validated plan (`shapes.md` § 2).
pub const PLAN: &str = "plan";
/// `planned_epoch`: When the plan was recorded on `whimbrel_workflow_plan`, epoch seconds;
pub const PLANNED_EPOCH: &str = "planned_epoch";
/// `prerequisites`: Activity exec ids of its prerequisites;
pub const PREREQUISITES: &str = "prerequisites";
/// `queued_time`: When it was queued, UTC date list.
pub const QUEUED_TIME: &str = "queued_time";
/// `queued_time_epoch`: When it was queued, epoch seconds.
pub const QUEUED_TIME_EPOCH: &str = "queued_time_epoch";
/// `recorded_epoch`: When it was recorded, epoch seconds.
pub const RECORDED_EPOCH: &str = "recorded_epoch";
/// `redrive_count`: How often the workflow was redriven: its generation (design.md § 9.4).
pub const REDRIVE_COUNT: &str = "redrive_count";
/// `redrive_workflow_exec_id`: On a request row: the workflow execution to redrive (design.md § 9.4).
pub const REDRIVE_WORKFLOW_EXEC_ID: &str = "redrive_workflow_exec_id";
/// `redrives`: The request ids of the redrives applied to a workflow (string set): never twice.
pub const REDRIVES: &str = "redrives";
/// `redriving`: The request id of the redrive in progress, until its activities are claimed.
pub const REDRIVING: &str = "redriving";
/// `released`: The prerequisite names released into a join group (string set).
pub const RELEASED: &str = "released";
/// `released_prerequisites`: Per-edge release markers of the prerequisites released so far (string set), removed by the first claim.
pub const RELEASED_PREREQUISITES: &str = "released_prerequisites";
/// `require_tokens`: Reports without the live attempt's token are refused (plan `require_tokens`, or the `WHIMBREL_REQUIRE_TOKENS` setting).
pub const REQUIRE_TOKENS: &str = "require_tokens";
/// `result`: Once COMPLETED: the workflow's result, the outputs of its sink activities (those nothing depends on) by activity name, when it fits `plan::MAX_RESULT_BYTES`.
pub const RESULT: &str = "result";
/// `result_in_activities`: True when the result was too large for the item: it stays on the sink activities' `output` (`whimbrel result` assembles it).
pub const RESULT_IN_ACTIVITIES: &str = "result_in_activities";
/// `retry`: Retry policy (the plan's default with the activity's fields over it);
pub const RETRY: &str = "retry";
/// `schedule_to_close_seconds`: Schedule-to-close timeout, seconds from `first_queued_epoch`, across all attempts.
pub const SCHEDULE_TO_CLOSE_SECONDS: &str = "schedule_to_close_seconds";
/// `schedule_to_start_seconds`: Schedule-to-start timeout, seconds: an attempt QUEUED this long without starting is TIMED_OUT.
pub const SCHEDULE_TO_START_SECONDS: &str = "schedule_to_start_seconds";
/// `scheduled_epoch`: When the live attempt became due (its first queue, or the end of a retry delay), epoch seconds: schedule-to-start counts from it.
pub const SCHEDULED_EPOCH: &str = "scheduled_epoch";
/// `slot_held`: True while an activity of a limited plan holds a slot (design.md § 9.3).
pub const SLOT_HELD: &str = "slot_held";
/// `slot_waiters`: On a workflow exec: the activities waiting for a slot, `(plan index, 6 digits)#(name)` (a string set).
pub const SLOT_WAITERS: &str = "slot_waiters";
/// `slots_free`: On a `whimbrel_limit` item: the target's slots not held, its `max_concurrency` minus those held (below 0 after the limit was lowered under the slots held; design.md § 9.3).
pub const SLOTS_FREE: &str = "slots_free";
/// `slots_used`: On a workflow exec: the slots its activities hold (design.md § 9.3).
pub const SLOTS_USED: &str = "slots_used";
/// `target`: Hash key of `whimbrel_limit`: `lambda:(function name)` or `task_list:(name)` (design.md § 9.3).
pub const TARGET: &str = "target";
/// `target_limit`: On an activity exec: the `whimbrel_limit` target its first claim took a slot of (design.md § 9.3); kept after the give-back.
pub const TARGET_LIMIT: &str = "target_limit";
/// `target_slot_held`: True while an activity holds a slot of its `target_limit` (removed by the give-back, once).
pub const TARGET_SLOT_HELD: &str = "target_slot_held";
/// `target_slot_adopted`: True when the target slot held was given by a new limit to an attempt already live (issue 42 A.7), not taken by its claim.
pub const TARGET_SLOT_ADOPTED: &str = "target_slot_adopted";
/// `max_concurrency`: On a `whimbrel_limit` item: at most this many activities of the target hold a slot at once.
pub const MAX_CONCURRENCY: &str = "max_concurrency";
/// `signal_key`: Range key of `signal`, `(name)#(signal_id)`.
pub const SIGNAL_KEY: &str = "signal_key";
/// `signal_name`: A signal node's signal name (design.md § 9.2).
pub const SIGNAL_NAME: &str = "signal_name";
/// `size`: How many prerequisites the group holds (G, or fewer in the last).
pub const SIZE: &str = "size";
/// `source`: Free text: where the request came from.
pub const SOURCE: &str = "source";
/// `start_attempts`: Times the monitor started a REQUESTED workflow again.
pub const START_ATTEMPTS: &str = "start_attempts";
/// `start_time`: When the workflow was queued, UTC date list.
pub const START_TIME: &str = "start_time";
/// `start_time_epoch`: When the workflow was queued, epoch seconds (GSI range key).
pub const START_TIME_EPOCH: &str = "start_time_epoch";
/// `state`: The item's state name (contract: States).
pub const STATE: &str = "state";
/// `task_list`: The task list workers claim it from, instead of a Lambda.
pub const TASK_LIST: &str = "task_list";
/// `task_list_shard`: `(task_list)#(shard)` while a task-list activity waits for a worker: hash key of the task-list GSI.
pub const TASK_LIST_SHARD: &str = "task_list_shard";
/// `task_queued_epoch`: Epoch seconds at which a task-list activity was queued: range key of the task-list GSI.
pub const TASK_QUEUED_EPOCH: &str = "task_queued_epoch";
/// `timeout_seconds`: Start-to-close timeout, seconds, from the plan: once RUNNING it must end within this long.
pub const TIMEOUT_SECONDS: &str = "timeout_seconds";
/// `transition`: Requested transition name, e.g.
pub const TRANSITION: &str = "transition";
/// `version`: The item's version, raised by every write of the activity item (the fence of conditional writes).
pub const VERSION: &str = "version";
/// `when`: When the request was made, UTC date list.
pub const WHEN: &str = "when";
/// `when_epoch`: When the request was made, epoch seconds.
pub const WHEN_EPOCH: &str = "when_epoch";
/// `worker`: The worker holding the live attempt (task lists), as it named itself.
pub const WORKER: &str = "worker";
/// `workflow_exec_id`: A workflow exec id: hash key of `workflow_exec`, and on every item of that workflow.
pub const WORKFLOW_EXEC_ID: &str = "workflow_exec_id";
/// `workflow_name`: The workflow's registered name: range key of `workflow_exec`.
pub const WORKFLOW_NAME: &str = "workflow_name";
/// `workflow_request_id`: Hash key, `(workflow_name)::(uuid)`.
pub const WORKFLOW_REQUEST_ID: &str = "workflow_request_id";
/// `continued_as`: The execution a `continue_as_new` decision started next (design.md § 10.6): its workflow exec id.
pub const CONTINUED_AS: &str = "continued_as";
/// `child_run`: On a child node whose child continued as new (design.md § 9.5): `(generation)#(workflow exec id)`, the execution of the child's chain the node waits on now.
pub const CHILD_RUN: &str = "child_run";
/// `continued_from`: The execution whose `continue_as_new` started this one (design.md § 10.6): its workflow exec id.
pub const CONTINUED_FROM: &str = "continued_from";
/// `decide_on`: The events an episodic execution's decider is consulted on (design.md § 10.1), a list of event kinds; its presence makes the execution episodic.
pub const DECIDE_ON: &str = "decide_on";
/// `decider`: An episodic execution's decider Lambda (name or ARN), copied from its registration at the start.
pub const DECIDER: &str = "decider";
/// `decisions_applied`: The last decision whose effects are all written (design.md § 10.3); 0 when missing. Effects are owed while it is below `decision_count`.
pub const DECISIONS_APPLIED: &str = "decisions_applied";
/// `open_nodes`: The names of an episodic execution's nodes not ended (a string set): added with each node's item, removed by the append of its end (design.md § 10.4).
pub const OPEN_NODES: &str = "open_nodes";
/// `ended_events`: An episodic execution's node ends appended and not yet seen by an accepted decision (a string set of `(seq, 10 digits):(node)`): a node's end is logged here, on the workflow item, not as an `event#` item (design.md § 10.2, § 10.9). The accepted decision that sees one deletes it and lists it in its record's `ended`.
pub const ENDED_EVENTS: &str = "ended_events";
/// `scheduled_by`: The number of the decision that scheduled this node of an episodic execution (design.md § 10.5); its end is an event of the log, not a count.
pub const SCHEDULED_BY: &str = "scheduled_by";
