//! What runs a node, with the fields of its kind: the one type every rule
//! that differs by kind matches on, exhaustively, so that a new kind is
//! the compiler's list of places (design.md § 9.1).
//!
//! An activity exec item keeps it ([`super::Runner::runs`]), stored flat
//! as the attributes it has always been read from (docs/tables.md):
//! `lambda` (a string, empty for the other kinds), `task_list`,
//! `wait_seconds` / `wait_until_epoch`, `signal_name`, `child`. Exactly
//! one kind is given; an item that gives none, or two, is refused when
//! read, never taken for a Lambda.

use serde::{Deserialize, Serialize};

use super::ChildRunner;
use crate::kind::NodeKind;

/// What runs a node ([`NodeKind`] with its fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RunsFields", into = "RunsFields")]
pub enum Runs {
    /// An asynchronous Invoke of this function (name or ARN) per attempt.
    Lambda {
        /// The function.
        function: String,
    },
    /// A task list workers claim each attempt from.
    TaskList {
        /// The list's name.
        list: String,
    },
    /// A durable timer: it fires `seconds` after its release, or at
    /// `until_epoch` (epoch seconds), whichever the plan gave.
    Timer {
        /// Seconds from its release (plan `wait.seconds`).
        seconds: Option<i64>,
        /// Its fire time, epoch seconds (plan `wait.until`).
        until_epoch: Option<i64>,
    },
    /// A wait for a signal of this name.
    Signal {
        /// The signal's name.
        name: String,
    },
    /// A child workflow.
    Child(ChildRunner),
}

impl Default for Runs {
    /// An unnamed Lambda: a starting point for building an item field by
    /// field (tests); stored so, it is refused when read.
    fn default() -> Self {
        Runs::Lambda {
            function: String::new(),
        }
    }
}

impl Runs {
    /// Its kind.
    pub fn kind(&self) -> NodeKind {
        match self {
            Runs::Lambda { .. } => NodeKind::Lambda,
            Runs::TaskList { .. } => NodeKind::TaskList,
            Runs::Timer { .. } => NodeKind::Timer,
            Runs::Signal { .. } => NodeKind::Signal,
            Runs::Child(_) => NodeKind::Child,
        }
    }

    /// Its function, task list, signal or child workflow name; `None` for
    /// a timer.
    pub fn target_name(&self) -> Option<&str> {
        match self {
            Runs::Lambda { function } => Some(function),
            Runs::TaskList { list } => Some(list),
            Runs::Timer { .. } => None,
            Runs::Signal { name } => Some(name),
            Runs::Child(c) => Some(&c.workflow_name),
        }
    }

    /// The function a Lambda node invokes.
    pub fn lambda(&self) -> Option<&str> {
        match self {
            Runs::Lambda { function } => Some(function),
            _ => None,
        }
    }

    /// The task list a task-list node waits in.
    pub fn task_list(&self) -> Option<&str> {
        match self {
            Runs::TaskList { list } => Some(list),
            _ => None,
        }
    }

    /// The signal a signal node waits for.
    pub fn signal_name(&self) -> Option<&str> {
        match self {
            Runs::Signal { name } => Some(name),
            _ => None,
        }
    }

    /// The child a child workflow node runs.
    pub fn child(&self) -> Option<&ChildRunner> {
        match self {
            Runs::Child(c) => Some(c),
            _ => None,
        }
    }

    /// A timer's `(seconds, until_epoch)`.
    pub fn timer(&self) -> Option<(Option<i64>, Option<i64>)> {
        match self {
            Runs::Timer {
                seconds,
                until_epoch,
            } => Some((*seconds, *until_epoch)),
            _ => None,
        }
    }
}

/// The stored attributes of [`Runs`] (the item's shape, unchanged).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct RunsFields {
    #[serde(default)]
    lambda: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    task_list: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    wait_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    wait_until_epoch: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    signal_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    child: Option<ChildRunner>,
}

impl TryFrom<RunsFields> for Runs {
    type Error = String;

    fn try_from(f: RunsFields) -> Result<Self, String> {
        let timer = f.wait_seconds.is_some() || f.wait_until_epoch.is_some();
        let given = [
            !f.lambda.is_empty(),
            f.task_list.is_some(),
            timer,
            f.signal_name.is_some(),
            f.child.is_some(),
        ];
        if given.iter().filter(|g| **g).count() != 1 {
            return Err(format!(
                "an activity runs exactly one of lambda, task_list, wait_seconds/wait_until_epoch, signal_name, child; this one gives {}",
                given.iter().filter(|g| **g).count()
            ));
        }
        Ok(if let Some(child) = f.child {
            Runs::Child(child)
        } else if let Some(name) = f.signal_name {
            Runs::Signal { name }
        } else if timer {
            Runs::Timer {
                seconds: f.wait_seconds,
                until_epoch: f.wait_until_epoch,
            }
        } else if let Some(list) = f.task_list {
            Runs::TaskList { list }
        } else {
            Runs::Lambda { function: f.lambda }
        })
    }
}

impl From<Runs> for RunsFields {
    fn from(r: Runs) -> Self {
        match r {
            Runs::Lambda { function } => RunsFields {
                lambda: function,
                ..RunsFields::default()
            },
            Runs::TaskList { list } => RunsFields {
                task_list: Some(list),
                ..RunsFields::default()
            },
            Runs::Timer {
                seconds,
                until_epoch,
            } => RunsFields {
                wait_seconds: seconds,
                wait_until_epoch: until_epoch,
                ..RunsFields::default()
            },
            Runs::Signal { name } => RunsFields {
                signal_name: Some(name),
                ..RunsFields::default()
            },
            Runs::Child(c) => RunsFields {
                child: Some(c),
                ..RunsFields::default()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Each kind keeps the stored shape it had as five optional fields,
    /// and reads back as itself.
    #[test]
    fn each_kind_round_trips_through_its_stored_attributes() {
        let child = ChildRunner {
            workflow_name: "kid".into(),
            depth: 1,
            ..ChildRunner::default()
        };
        let cases = [
            (
                Runs::Lambda {
                    function: "f".into(),
                },
                json!({"lambda": "f"}),
            ),
            (
                Runs::TaskList { list: "tl".into() },
                json!({"lambda": "", "task_list": "tl"}),
            ),
            (
                Runs::Timer {
                    seconds: Some(5),
                    until_epoch: None,
                },
                json!({"lambda": "", "wait_seconds": 5}),
            ),
            (
                Runs::Signal { name: "go".into() },
                json!({"lambda": "", "signal_name": "go"}),
            ),
            (
                Runs::Child(child),
                json!({"lambda": "", "child": {"workflow_name": "kid", "depth": 1, "parent_close": "cancel"}}),
            ),
        ];
        for (runs, stored) in cases {
            assert_eq!(serde_json::to_value(&runs).unwrap(), stored, "{runs:?}");
            assert_eq!(serde_json::from_value::<Runs>(stored).unwrap(), runs);
        }
    }

    /// No kind, or two, is refused: never taken for a Lambda.
    #[test]
    fn an_item_that_names_no_runner_or_two_is_refused() {
        for stored in [
            json!({}),
            json!({"lambda": ""}),
            json!({"lambda": "f", "task_list": "tl"}),
            json!({"lambda": "", "signal_name": "go", "wait_seconds": 1}),
        ] {
            let e = serde_json::from_value::<Runs>(stored.clone()).unwrap_err();
            assert!(
                e.to_string().contains("exactly one of lambda"),
                "{stored}: {e}"
            );
        }
    }
}
