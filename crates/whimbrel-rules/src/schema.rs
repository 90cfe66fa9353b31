//! The tables Whimbrel keeps: names, keys, GSIs and streams, defined
//! once. `whimbrel install` creates them, the in-memory store models them,
//! and `template.yaml` and `docs/tables.md` describe the same layout.

use crate::attr;
use crate::keys::{self, Tables};

/// The type of a key attribute (DynamoDB `ScalarAttributeType`): every
/// Whimbrel key is a string or a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalarType {
    /// `S`
    S,
    /// `N`
    N,
}

/// One GSI: name, hash (name, type), optional range, projection.
#[derive(Debug, Clone)]
pub struct Gsi {
    /// Index name.
    pub name: &'static str,
    /// Hash key attribute and type.
    pub hash: (&'static str, ScalarType),
    /// Range key attribute and type.
    pub range: Option<(&'static str, ScalarType)>,
    /// KEYS_ONLY projection (else ALL).
    pub keys_only: bool,
}

/// One table definition.
#[derive(Debug, Clone)]
pub struct TableDef {
    /// Table name (with the prefix).
    pub name: String,
    /// Hash key attribute and type.
    pub hash: (&'static str, ScalarType),
    /// Range key attribute and type.
    pub range: Option<(&'static str, ScalarType)>,
    /// A `NEW_IMAGE` stream.
    pub stream: bool,
    /// Global secondary indexes.
    pub gsis: Vec<Gsi>,
    /// What the table holds.
    pub description: &'static str,
}

/// Every Whimbrel table for the names of `t`: keys, GSIs, streams. The
/// same definitions are in `template.yaml` and `docs/tables.md`.
pub fn definitions(t: &Tables) -> Vec<TableDef> {
    let mut defs = write_once_tables(t);
    defs.extend(state_tables(t));
    defs
}

/// The tables of write-once rows: install status, workflow requests,
/// activity events, plans, edges, the workflow registry and signals.
fn write_once_tables(t: &Tables) -> Vec<TableDef> {
    vec![
        TableDef {
            name: t.install_status(),
            hash: (attr::OBJECT_ID, ScalarType::S),
            range: Some((attr::OBJECT_TYPE, ScalarType::S)),
            stream: false,
            gsis: vec![],
            description: "install status of Whimbrel objects",
        },
        TableDef {
            name: t.workflow_request(),
            hash: (attr::WORKFLOW_REQUEST_ID, ScalarType::S),
            range: Some((attr::WORKFLOW_NAME, ScalarType::S)),
            stream: true,
            gsis: vec![],
            description: "workflow requests (write-once; stream feeds workflow-request)",
        },
        TableDef {
            name: t.activity_event(),
            hash: (attr::ACTIVITY_EVENT_ID, ScalarType::S),
            range: Some((attr::ACTIVITY_EXEC_ID, ScalarType::S)),
            stream: true,
            gsis: vec![Gsi {
                name: keys::INDEX_EVENTS_BY_ACTIVITY,
                hash: (attr::ACTIVITY_EXEC_ID, ScalarType::S),
                range: None,
                keys_only: true,
            }],
            description: "activity events (write-once; stream feeds activity-event)",
        },
        TableDef {
            name: t.workflow_plan(),
            hash: (attr::WORKFLOW_EXEC_ID, ScalarType::S),
            range: Some((attr::WORKFLOW_NAME, ScalarType::S)),
            stream: false,
            gsis: vec![],
            description: "each workflow exec's plan and input (write-once)",
        },
        TableDef {
            name: t.activity_exec_dependency(),
            hash: (attr::ACTIVITY_EXEC_DEPENDENCY, ScalarType::S),
            range: Some((attr::ACTIVITY_EXEC_ID, ScalarType::S)),
            stream: false,
            gsis: vec![],
            description: "dependency edges (write-once)",
        },
        TableDef {
            name: t.workflow_lambda(),
            hash: (attr::WORKFLOW_NAME, ScalarType::S),
            range: None,
            stream: false,
            gsis: vec![],
            description: "workflow name -> decider lambda or static definition",
        },
        TableDef {
            name: t.signal(),
            hash: (attr::WORKFLOW_EXEC_ID, ScalarType::S),
            range: Some((attr::SIGNAL_KEY, ScalarType::S)),
            stream: true,
            gsis: vec![],
            description: "signals sent to workflow executions (stream feeds activity-event)",
        },
    ]
}

/// The tables the engine updates: workflow and activity executions, with
/// their due, listing and task-list indexes, the concurrency limits per
/// target, and the episodic executions' event logs.
fn state_tables(t: &Tables) -> Vec<TableDef> {
    vec![
        TableDef {
            name: t.workflow_exec(),
            hash: (attr::WORKFLOW_EXEC_ID, ScalarType::S),
            range: Some((attr::WORKFLOW_NAME, ScalarType::S)),
            stream: false,
            gsis: vec![
                Gsi {
                    name: keys::INDEX_WORKFLOWS_BY_STATE,
                    hash: (attr::STATE, ScalarType::S),
                    range: Some((attr::START_TIME_EPOCH, ScalarType::N)),
                    keys_only: true,
                },
                Gsi {
                    name: keys::INDEX_DUE,
                    hash: (attr::DUE_SHARD, ScalarType::N),
                    range: Some((attr::DUE_EPOCH, ScalarType::N)),
                    keys_only: true,
                },
            ],
            description: "workflow executions",
        },
        TableDef {
            name: t.activity_exec(),
            hash: (attr::ACTIVITY_EXEC_ID, ScalarType::S),
            range: Some((attr::WORKFLOW_EXEC_ID, ScalarType::S)),
            stream: false,
            gsis: vec![
                Gsi {
                    name: keys::INDEX_ACTIVITIES_BY_WORKFLOW,
                    hash: (attr::WORKFLOW_EXEC_ID, ScalarType::S),
                    range: Some((attr::ACTIVITY_NAME, ScalarType::S)),
                    keys_only: true,
                },
                Gsi {
                    name: keys::INDEX_DUE,
                    hash: (attr::DUE_SHARD, ScalarType::N),
                    range: Some((attr::DUE_EPOCH, ScalarType::N)),
                    keys_only: true,
                },
                Gsi {
                    name: keys::INDEX_TASK_LIST,
                    hash: (attr::TASK_LIST_SHARD, ScalarType::S),
                    range: Some((attr::TASK_QUEUED_EPOCH, ScalarType::N)),
                    keys_only: true,
                },
            ],
            description: "activity executions",
        },
        TableDef {
            name: t.limit(),
            hash: (attr::TARGET, ScalarType::S),
            range: None,
            stream: false,
            gsis: vec![],
            description: "concurrency limits per Lambda function or task list, across workflows",
        },
        TableDef {
            name: t.decision(),
            hash: (attr::WORKFLOW_EXEC_ID, ScalarType::S),
            range: Some((attr::LOG_KEY, ScalarType::S)),
            stream: false,
            gsis: vec![],
            description: "episodic executions' event logs and committed decisions",
        },
    ]
}
