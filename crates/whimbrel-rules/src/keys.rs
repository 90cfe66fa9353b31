//! Table names, index names, shards and item keys: every key Whimbrel
//! builds is built here (docs/tables.md).

use crate::attr;
use std::collections::HashMap;

use crate::write::{s, Item};

/// Default table name prefix (whimbrel-architecture.md).
pub const DEFAULT_TABLE_PREFIX: &str = "whimbrel_";

/// GSI of `activity_exec`: a workflow's activities (`workflow_exec_id` HASH,
/// `activity_name` RANGE). Used by `whimbrel status`.
pub const INDEX_ACTIVITIES_BY_WORKFLOW: &str = "workflow_exec_id-activity_name-index";
/// Sparse, sharded GSI of `activity_exec` and of `workflow_exec`: items the
/// heartbeat monitor must look at, by when (`due_shard` HASH, `due_epoch`
/// RANGE, KEYS_ONLY). An item is in it while it has a deadline (every
/// non-terminal state after launch) or an unfinished obligation (a terminal
/// activity whose side effects are not done, a REQUESTED workflow).
pub const INDEX_DUE: &str = "due_shard-due_epoch-index";
/// GSI of `activity_event`: an activity's event rows (`activity_exec_id`
/// HASH, KEYS_ONLY). The monitor reads the reports still in flight before
/// it times out or relaunches an activity.
pub const INDEX_EVENTS_BY_ACTIVITY: &str = "activity_exec_id-index";
/// Sparse KEYS_ONLY GSI of `activity_exec` on `task_list_shard` and
/// `task_queued_epoch`: the task-list activities waiting for a worker,
/// oldest first (present only while claimable).
pub const INDEX_TASK_LIST: &str = "task_list_shard-task_queued_epoch-index";
/// GSI of `workflow_exec`: workflows by state and start time.
pub const INDEX_WORKFLOWS_BY_STATE: &str = "state-start_time_epoch-index";

/// Number of shards of the sparse due GSIs, so one hot
/// partition key value cannot cap writes at 1,000/s (design.md § 2.2).
pub const INDEX_SHARDS: u32 = 8;

/// The shard (0..[`INDEX_SHARDS`]) of an item id in the sparse due GSIs.
pub fn shard_of(activity_exec_id: &str) -> u32 {
    // FNV-1a: stable across processes and releases, unlike `DefaultHasher`.
    let mut h: u32 = 0x811c_9dc5;
    for b in activity_exec_id.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h % INDEX_SHARDS
}

/// The table names for one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tables {
    /// The prefix, default `whimbrel_`.
    pub prefix: String,
}

impl Tables {
    /// Tables named `{prefix}{suffix}`.
    pub fn new(prefix: impl Into<String>) -> Self {
        Tables {
            prefix: prefix.into(),
        }
    }
    fn name(&self, suffix: &str) -> String {
        format!("{}{}", self.prefix, suffix)
    }
    /// `whimbrel_install_status`.
    pub fn install_status(&self) -> String {
        self.name("install_status")
    }
    /// `whimbrel_workflow_request` (stream).
    pub fn workflow_request(&self) -> String {
        self.name("workflow_request")
    }
    /// `whimbrel_activity_event` (stream).
    pub fn activity_event(&self) -> String {
        self.name("activity_event")
    }
    /// `whimbrel_workflow_exec`.
    pub fn workflow_exec(&self) -> String {
        self.name("workflow_exec")
    }
    /// `whimbrel_activity_exec`.
    pub fn activity_exec(&self) -> String {
        self.name("activity_exec")
    }
    /// `whimbrel_activity_exec_dependency`.
    pub fn activity_exec_dependency(&self) -> String {
        self.name("activity_exec_dependency")
    }
    /// `whimbrel_workflow_lambda`.
    pub fn workflow_lambda(&self) -> String {
        self.name("workflow_lambda")
    }
    /// `whimbrel_workflow_plan`: the write-once plan and input of each
    /// workflow exec ([`crate::model::WorkflowPlan`]).
    pub fn workflow_plan(&self) -> String {
        self.name("workflow_plan")
    }
    /// `whimbrel_signal` (stream): signals sent to workflow executions
    /// ([`crate::model::SignalRow`], design.md § 9.2).
    pub fn signal(&self) -> String {
        self.name("signal")
    }
    /// `whimbrel_limit`: concurrency limits per Lambda function or task
    /// list, across workflows ([`crate::model::TargetLimit`], design.md
    /// § 9.3).
    pub fn limit(&self) -> String {
        self.name("limit")
    }

    /// `whimbrel_decision`: each episodic execution's event log and its
    /// committed decisions (design.md § 10.2).
    pub fn decision(&self) -> String {
        self.name("decision")
    }
}

/// The key of a `whimbrel_limit` item: `target` is `lambda:(function)` or
/// `task_list:(name)` ([`crate::decide::target_limits::target_of`]).
pub fn limit_key(target: &str) -> Item {
    HashMap::from([(attr::TARGET.to_string(), s(target))])
}

/// The key of an activity exec item.
pub fn activity_key(id: &str, workflow_exec_id: &str) -> Item {
    HashMap::from([
        (attr::ACTIVITY_EXEC_ID.into(), s(id)),
        (attr::WORKFLOW_EXEC_ID.into(), s(workflow_exec_id)),
    ])
}

/// The key of an event row of `whimbrel_activity_event`.
pub fn event_key(activity_event_id: &str, activity_exec_id: &str) -> Item {
    HashMap::from([
        (attr::ACTIVITY_EVENT_ID.into(), s(activity_event_id)),
        (attr::ACTIVITY_EXEC_ID.into(), s(activity_exec_id)),
    ])
}

/// The key of a signal row of `whimbrel_signal`.
pub fn signal_row_key(workflow_exec_id: &str, signal_key: &str) -> Item {
    HashMap::from([
        (attr::WORKFLOW_EXEC_ID.into(), s(workflow_exec_id)),
        (attr::SIGNAL_KEY.into(), s(signal_key)),
    ])
}

/// The key of a `workflow_request` row: its `workflow_request_id` and
/// `workflow_name`.
pub fn request_key(workflow_request_id: &str, name: &str) -> Item {
    HashMap::from([
        (attr::WORKFLOW_REQUEST_ID.into(), s(workflow_request_id)),
        (attr::WORKFLOW_NAME.into(), s(name)),
    ])
}

/// A workflow execution, by the key of its item in `whimbrel_workflow_exec`
/// (hash key `workflow_exec_id`, range key `workflow_name`): what the
/// rules and the engine pass for "this execution" (no bare `(&str, &str)`
/// whose order a caller could swap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WorkflowRef<'a> {
    /// Its `workflow_exec_id`, `(workflow_name)::(uuid)`.
    pub exec_id: &'a str,
    /// Its `workflow_name`.
    pub name: &'a str,
}

impl<'a> WorkflowRef<'a> {
    /// Execution `exec_id` of workflow `name`.
    pub fn new(exec_id: &'a str, name: &'a str) -> Self {
        WorkflowRef { exec_id, name }
    }

    /// The key of its item.
    pub fn key(self) -> Item {
        workflow_key(self.exec_id, self.name)
    }
}

/// The key of a workflow exec item.
pub fn workflow_key(id: &str, name: &str) -> Item {
    HashMap::from([
        (attr::WORKFLOW_EXEC_ID.into(), s(id)),
        (attr::WORKFLOW_NAME.into(), s(name)),
    ])
}

/// The key of join group `group` of the wide join `join_id` (an item of
/// `activity_exec_dependency`, [`crate::model::JoinGroup`]).
pub fn join_group_key(join_id: &str, group: u32) -> Item {
    group_item_key(crate::ids::join_group_id(join_id, group), join_id)
}

/// The key of a group item of `activity_exec_dependency` (a join group,
/// or a count group, `engine::counting`): its id and its owner's id.
pub fn group_item_key(group_id: String, owner_id: &str) -> Item {
    HashMap::from([
        (attr::ACTIVITY_EXEC_DEPENDENCY.into(), s(group_id)),
        (attr::ACTIVITY_EXEC_ID.into(), s(owner_id)),
    ])
}
