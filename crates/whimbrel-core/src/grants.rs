//! Least privilege: the DynamoDB calls each Lambda function's code makes,
//! kept next to that code (the engine), one list per function. Every call
//! goes through [`crate::store::Store`], which records it
//! ([`crate::store::Metrics::calls`]); `tests/grants.rs` runs each
//! function's paths on DynamoDB Local and checks that every call is listed
//! here, and that `template.yaml` grants each function exactly what its
//! list holds: a new call without a grant fails, and so does a grant
//! without a call.
//!
//! A transaction's writes are their own IAM actions (`UpdateItem`,
//! `PutItem`). Tables are named without their prefix. What the platform
//! does for a function (stream reads by the event source mapping, the
//! on-failure destination, X-Ray, invoking Lambdas) is in
//! [`PLATFORM`].

/// One DynamoDB grant: IAM action, table (no prefix), GSI for a Query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Grant {
    /// IAM action, e.g. `dynamodb:UpdateItem`.
    pub action: &'static str,
    /// Table name without the prefix, e.g. `activity_exec`.
    pub table: &'static str,
    /// GSI name for a Query of an index.
    pub index: Option<&'static str>,
}

const fn g(action: &'static str, table: &'static str) -> Grant {
    Grant {
        action,
        table,
        index: None,
    }
}

const fn ix(table: &'static str, index: &'static str) -> Grant {
    Grant {
        action: "dynamodb:Query",
        table,
        index: Some(index),
    }
}

/// Every engine function claims and settles activities, so each also
/// reads a target's concurrency limit and takes, waits for, gives back
/// and hands on its slots (`limit`, `engine/slots.rs`, design.md § 9.3).
///
/// `whimbrel-workflow-request`: start a workflow (`engine/start.rs`),
/// whose root child workflow nodes put their children's request rows (a
/// conditional put, read back when the id is taken; `engine/children.rs`):
/// read its definition, create the exec, the activity items (conditional
/// puts) and the edges (batch), move it to RUNNING, claim the roots, and
/// count one whose launch is refused for good (its count group item), and
/// read the signals kept for a root that waits for one (a Query of its
/// name's rows, `engine/signals.rs`): one sent already completes it there,
/// and its settle launches its dependents with its output or ends the
/// workflow with its result (the prerequisites' items and output rows,
/// read in batches); and apply a cancel request
/// (`engine/cancel.rs`): read the plan, cancel each activity that has not
/// ended (found by a Query on its hash key, as a report's is), count its
/// end and finish the workflow.
/// An episodic execution (design.md § 10) also has its first answer
/// committed and applied, and a cancel request appended to its log and
/// decided on: the `decision` table.
pub const WORKFLOW_REQUEST: &[Grant] = &[
    g("dynamodb:GetItem", "limit"),
    g("dynamodb:UpdateItem", "limit"),
    g("dynamodb:PutItem", "workflow_request"),
    g("dynamodb:GetItem", "workflow_request"),
    g("dynamodb:Query", "activity_exec"),
    g("dynamodb:Query", "signal"),
    g("dynamodb:GetItem", "signal"),
    g("dynamodb:GetItem", "workflow_lambda"),
    g("dynamodb:GetItem", "workflow_exec"),
    g("dynamodb:PutItem", "workflow_exec"),
    g("dynamodb:UpdateItem", "workflow_exec"),
    g("dynamodb:GetItem", "activity_exec"),
    g("dynamodb:PutItem", "activity_exec"),
    g("dynamodb:UpdateItem", "activity_exec"),
    g("dynamodb:BatchGetItem", "activity_exec"),
    g("dynamodb:BatchWriteItem", "activity_exec_dependency"),
    g("dynamodb:UpdateItem", "activity_exec_dependency"),
    g("dynamodb:GetItem", "activity_exec_dependency"),
    g("dynamodb:PutItem", "workflow_plan"),
    g("dynamodb:GetItem", "workflow_plan"),
    g("dynamodb:BatchGetItem", "workflow_plan"),
    g("dynamodb:BatchWriteItem", "workflow_plan"),
    g("dynamodb:GetItem", "decision"),
    g("dynamodb:PutItem", "decision"),
    g("dynamodb:UpdateItem", "decision"),
    g("dynamodb:Query", "decision"),
];

/// `whimbrel-activity-event`: apply a report (`engine/apply.rs`): find the
/// activity (Query on the hash key), write the transition (with the
/// workflow counter in a transaction), release or cancel dependents, read
/// prerequisites' outputs to launch, finish the workflow with its result,
/// read back the output of an event parked by reference, count a wide
/// join's prerequisites in its join groups and every end in its count
/// group, and keep a rejection on its event row (`decide::mark_rejected`);
/// and apply a signal row (`engine/signals.rs`): read the workflow exec and
/// its plan, complete the signal waits of its name. A signal wait released
/// to RUNNING reads its name's rows (a Query of the signal table). A child
/// workflow node released puts its child's request row (a conditional
/// put, read back when the id is taken), and a cancelled one its child's
/// cancel request (`engine/children.rs`). An episodic execution's node end
/// or signal is appended to its log, decided on and the decision's effects
/// written (`engine/episodes.rs`, `engine/decided.rs`): the `decision`
/// table, and new nodes (a transaction of their puts) with their edges;
/// each answer is judged against its registration's allow-lists (a
/// GetItem of `workflow_lambda`, design.md § 3.10).
pub const ACTIVITY_EVENT: &[Grant] = &[
    g("dynamodb:GetItem", "limit"),
    g("dynamodb:GetItem", "workflow_lambda"),
    g("dynamodb:UpdateItem", "limit"),
    g("dynamodb:PutItem", "workflow_request"),
    g("dynamodb:GetItem", "workflow_request"),
    g("dynamodb:UpdateItem", "activity_event"),
    g("dynamodb:Query", "signal"),
    g("dynamodb:GetItem", "signal"),
    g("dynamodb:Query", "activity_exec"),
    g("dynamodb:GetItem", "activity_exec"),
    g("dynamodb:UpdateItem", "activity_exec"),
    g("dynamodb:BatchGetItem", "activity_exec"),
    g("dynamodb:GetItem", "workflow_exec"),
    g("dynamodb:UpdateItem", "workflow_exec"),
    g("dynamodb:BatchGetItem", "activity_event"),
    g("dynamodb:GetItem", "workflow_plan"),
    g("dynamodb:PutItem", "workflow_plan"),
    g("dynamodb:BatchGetItem", "workflow_plan"),
    g("dynamodb:UpdateItem", "activity_exec_dependency"),
    g("dynamodb:GetItem", "activity_exec_dependency"),
    g("dynamodb:PutItem", "activity_exec"),
    g("dynamodb:BatchWriteItem", "activity_exec_dependency"),
    g("dynamodb:GetItem", "decision"),
    g("dynamodb:PutItem", "decision"),
    g("dynamodb:UpdateItem", "decision"),
    g("dynamodb:Query", "decision"),
];

/// `whimbrel-stream-redrive`: apply the records the stream mappings gave up
/// on (`redrive.rs`) through the handlers of their streams (requests,
/// activity events, signals), so exactly what
/// [`WORKFLOW_REQUEST`] and [`ACTIVITY_EVENT`] list (template.yaml: the
/// role `StreamRedriveRole` has both engine policies the two functions'
/// roles have). Reading the stream back is in [`PLATFORM`] (`stream`).
pub fn stream_redrive() -> Vec<Grant> {
    let mut all: Vec<Grant> = WORKFLOW_REQUEST
        .iter()
        .chain(ACTIVITY_EVENT)
        .copied()
        .collect();
    all.sort();
    all.dedup();
    all
}

/// `whimbrel-heartbeat-monitor`: sweep the due indexes (`engine/monitor.rs`),
/// apply reports still in flight (event index + batch read), time out,
/// relaunch, settle, expire workflows, and start REQUESTED ones again
/// (everything the workflow-request function does, from the request row);
/// a rejection of a row in flight is kept on the row. Before it times a
/// signal wait out it reads the signals of its name (a Query of the signal
/// table), and delivers one sent in time. A settle that releases or
/// cancels a child workflow node puts its child's request or cancel
/// request row (`engine/children.rs`).
/// An episodic execution's decisions are driven, retried, and their
/// effects written again when owed: the `decision` table.
pub const HEARTBEAT_MONITOR: &[Grant] = &[
    g("dynamodb:GetItem", "limit"),
    g("dynamodb:UpdateItem", "limit"),
    g("dynamodb:PutItem", "workflow_request"),
    g("dynamodb:UpdateItem", "activity_event"),
    g("dynamodb:Query", "signal"),
    g("dynamodb:GetItem", "signal"),
    ix("activity_exec", "due_shard-due_epoch-index"),
    ix("workflow_exec", "due_shard-due_epoch-index"),
    ix("activity_event", "activity_exec_id-index"),
    g("dynamodb:BatchGetItem", "activity_event"),
    g("dynamodb:Query", "activity_exec"),
    g("dynamodb:GetItem", "activity_exec"),
    g("dynamodb:PutItem", "activity_exec"),
    g("dynamodb:UpdateItem", "activity_exec"),
    g("dynamodb:BatchGetItem", "activity_exec"),
    g("dynamodb:GetItem", "workflow_exec"),
    g("dynamodb:PutItem", "workflow_exec"),
    g("dynamodb:UpdateItem", "workflow_exec"),
    g("dynamodb:GetItem", "workflow_request"),
    g("dynamodb:GetItem", "workflow_lambda"),
    g("dynamodb:BatchWriteItem", "activity_exec_dependency"),
    g("dynamodb:UpdateItem", "activity_exec_dependency"),
    g("dynamodb:GetItem", "activity_exec_dependency"),
    g("dynamodb:PutItem", "workflow_plan"),
    g("dynamodb:GetItem", "workflow_plan"),
    g("dynamodb:BatchGetItem", "workflow_plan"),
    g("dynamodb:BatchWriteItem", "workflow_plan"),
    g("dynamodb:GetItem", "decision"),
    g("dynamodb:PutItem", "decision"),
    g("dynamodb:UpdateItem", "decision"),
    g("dynamodb:Query", "decision"),
];

/// An activity Lambda using the helper (`activity.rs`): insert its event
/// rows, read a prerequisite's output kept on its event row
/// (`engine::payloads::OUTPUT_ROW_READS`), and heartbeat with a GetItem and an UpdateItem limited to the
/// attributes in [`crate::activity::HEARTBEAT_READS`] and
/// [`crate::activity::HEARTBEAT_WRITES`] (template.yaml
/// `ActivityPolicy`).
pub const ACTIVITY: &[Grant] = &[
    g("dynamodb:PutItem", "activity_event"),
    g("dynamodb:GetItem", "workflow_plan"),
    g("dynamodb:GetItem", "activity_event"),
    g("dynamodb:GetItem", "activity_exec"),
    g("dynamodb:UpdateItem", "activity_exec"),
];

/// A client that sends signals (design.md § 9.2): one conditional PutItem
/// of a signal row (`engine::signals::send_signal`, the write of `whimbrel
/// signal`), nothing else (template.yaml `SignalSenderPolicy`, which an
/// account may scope to some workflow exec ids with
/// `dynamodb:LeadingKeys`). `whimbrel signal` itself also reads the
/// workflow's status before it sends (and with `--wait`), which this list
/// does not cover.
pub const SIGNAL_SENDER: &[Grant] = &[g("dynamodb:PutItem", "signal")];

/// A task-list worker (`worker.rs`, `whimbrel worker`, and
/// `examples/python-worker`): it claims by invoking the claim function
/// (`lambda:InvokeFunction`, a [`PLATFORM`] action), then heartbeats and
/// reports exactly as an activity does: the grants of [`ACTIVITY`]
/// (template.yaml `TaskListWorkerPolicy`, whose statements are those of
/// `ActivityPolicy` and the invoke). Issue 42 B.1: a worker that
/// could write activity items could set any task's token hash and forge
/// its output.
pub const WORKER: &[Grant] = ACTIVITY;

/// `whimbrel-task-claim` (`engine/claim.rs`): poll the lists' shards of
/// the task-list index, re-read a candidate and claim it (conditional
/// UpdateItem), and build the launch payload (the prerequisites' items,
/// outputs kept on event rows, an input row or the plan).
pub const TASK_CLAIM: &[Grant] = &[
    ix("activity_exec", "task_list_shard-task_queued_epoch-index"),
    g("dynamodb:GetItem", "activity_exec"),
    g("dynamodb:UpdateItem", "activity_exec"),
    g("dynamodb:BatchGetItem", "activity_exec"),
    g("dynamodb:BatchGetItem", "activity_event"),
    g("dynamodb:GetItem", "workflow_plan"),
    g("dynamodb:BatchGetItem", "workflow_plan"),
];

/// What the platform does with each function's role, not through the
/// store: (template role or function, IAM action). `kms`: with a
/// customer managed key (template.yaml `KmsKeyArn`), DynamoDB and SQS use
/// it on the caller's behalf; every role and policy that touches a table
/// grants these (`UseTableKey`), and only then.
pub const PLATFORM: &[(&str, &str)] = &[
    ("stream", "dynamodb:DescribeStream"),
    ("stream", "dynamodb:GetRecords"),
    ("stream", "dynamodb:GetShardIterator"),
    ("stream", "dynamodb:ListStreams"),
    ("any", "lambda:InvokeFunction"),
    ("any", "sqs:SendMessage"),
    ("sqs-source", "sqs:ReceiveMessage"),
    ("sqs-source", "sqs:DeleteMessage"),
    ("sqs-source", "sqs:GetQueueAttributes"),
    ("sqs-source", "sqs:ChangeMessageVisibility"),
    ("any", "xray:PutTraceSegments"),
    ("any", "xray:PutTelemetryRecords"),
    ("kms", "kms:Decrypt"),
    ("kms", "kms:GenerateDataKey"),
];
