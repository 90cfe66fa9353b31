//! What the commands that print data share: the `--output` format and the
//! workflow states `list --state` takes.

use whimbrel_core::contract::WorkflowState;

/// Output format of the commands that print data (`--output`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A human-readable table.
    Table,
    /// One JSON document.
    Json,
}

/// A workflow state on the command line: the stored names of
/// [`WorkflowState`] (case ignored). A mirror, as a foreign type cannot
/// derive a foreign trait; the matches below keep the two in step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StateArg {
    /// Created; the plan is being obtained.
    #[value(name = "REQUESTED")]
    Requested,
    /// Activities exist and run.
    #[value(name = "RUNNING")]
    Running,
    /// Every activity COMPLETED.
    #[value(name = "COMPLETED")]
    Completed,
    /// An activity FAILED or TIMED_OUT, or no plan, or the execution timeout.
    #[value(name = "FAILED")]
    Failed,
    /// Cancelled.
    #[value(name = "CANCELLED")]
    Cancelled,
}

impl From<StateArg> for WorkflowState {
    fn from(s: StateArg) -> Self {
        match s {
            StateArg::Requested => WorkflowState::Requested,
            StateArg::Running => WorkflowState::Running,
            StateArg::Completed => WorkflowState::Completed,
            StateArg::Failed => WorkflowState::Failed,
            StateArg::Cancelled => WorkflowState::Cancelled,
        }
    }
}

impl From<WorkflowState> for StateArg {
    // Exhaustive: a new workflow state fails to compile here.
    fn from(s: WorkflowState) -> Self {
        match s {
            WorkflowState::Requested => StateArg::Requested,
            WorkflowState::Running => StateArg::Running,
            WorkflowState::Completed => StateArg::Completed,
            WorkflowState::Failed => StateArg::Failed,
            WorkflowState::Cancelled => StateArg::Cancelled,
        }
    }
}

/// `value` as pretty JSON and a newline.
pub fn pretty(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).expect("serializable") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn state_names_are_the_stored_names() {
        for v in StateArg::value_variants() {
            let name = v.to_possible_value().unwrap().get_name().to_string();
            let state = WorkflowState::from(*v);
            assert_eq!(name, state.as_str());
            assert_eq!(StateArg::from(state), *v);
        }
    }
}
