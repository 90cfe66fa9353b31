//! The subcommands with no module of their own: install, register, start,
//! event, cancel, heartbeat, show, list and result. Each one takes its
//! parsed flags, reads or writes the tables and prints what the user sees.

use std::path::PathBuf;

use serde_json::Value;
use whimbrel_core::contract::{ActivityState, Transition};
use whimbrel_core::dates::Timestamp;
use whimbrel_core::engine::{Engine, EngineConfig};
use whimbrel_core::install;
use whimbrel_core::model::{SignalRow, WorkflowLambda};

use crate::{
    insert_event, insert_request, output, parse_json, show, status, store_for, CliError, Global,
};

/// `whimbrel install`: create every table, and print each one's name
/// with `created` or `exists`.
pub async fn install(g: &Global) -> Result<(), CliError> {
    let store = store_for(g).await;
    let created = install::install(&store).await?;
    for t in install::table_names(store.tables()) {
        let what = if created.contains(&t) {
            "created"
        } else {
            "exists"
        };
        println!("{t}\t{what}");
    }
    Ok(())
}

/// `whimbrel register`'s allow-lists (docs/design.md § 3.10): patterns, `*`
/// matching any run of characters. A flag left out allows any; given
/// once as `''`, none.
#[derive(Debug, Default, clap::Args)]
pub struct AllowArgs {
    /// A child workflow name its `workflow` nodes may start (repeatable).
    #[arg(long = "allow-workflow", value_name = "PATTERN")]
    pub workflows: Vec<String>,
    /// A task list its `task_list` nodes may queue on (repeatable).
    #[arg(long = "allow-task-list", value_name = "PATTERN")]
    pub task_lists: Vec<String>,
    /// A Lambda function its `lambda` nodes may invoke (repeatable), within
    /// the deployment's launch targets.
    #[arg(long = "allow-lambda", value_name = "PATTERN")]
    pub lambdas: Vec<String>,
}

impl AllowArgs {
    /// The registration's `allow`, or `None` when no flag was given.
    fn allowed(self) -> Option<whimbrel_core::targets::Allowed> {
        let list = |v: Vec<String>| {
            (!v.is_empty()).then(|| v.into_iter().filter(|p| !p.is_empty()).collect())
        };
        let allow = whimbrel_core::targets::Allowed {
            workflows: list(self.workflows),
            task_lists: list(self.task_lists),
            lambdas: list(self.lambdas),
        };
        (allow != whimbrel_core::targets::Allowed::default()).then_some(allow)
    }
}

/// `whimbrel register`: store the workflow's decider Lambda or its static
/// plan (the `--definition` file), and what it may name (`allow`).
pub async fn register(
    g: &Global,
    name: String,
    lambda: Option<String>,
    definition: Option<PathBuf>,
    allow: AllowArgs,
) -> Result<(), CliError> {
    let definition = definition
        .as_deref()
        .map(crate::graph::plan_file)
        .transpose()?;
    let store = store_for(g).await;
    let item = WorkflowLambda {
        workflow_name: name.clone(),
        lambda,
        definition,
        allow: allow.allowed(),
    };
    if let Some(why) = item.invalid() {
        return Err(CliError(format!("register {name}: {why}")));
    }
    store.put(&store.tables().workflow_lambda(), &item).await?;
    println!("registered {name}");
    Ok(())
}

/// The workflow input: `--input` as JSON, else the `--input-file` as JSON
/// or, if it is not JSON, as `{"text": ...}`.
fn workflow_input(
    input: Option<String>,
    input_file: Option<PathBuf>,
) -> Result<Option<Value>, CliError> {
    Ok(match (input, input_file) {
        (Some(text), _) => Some(parse_json("--input", &text)?),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| CliError(format!("cannot read {}: {e}", path.display())))?;
            Some(serde_json::from_str(&text).unwrap_or_else(|_| serde_json::json!({"text": text})))
        }
        (None, None) => None,
    })
}

/// `whimbrel start`: insert the workflow request row and print its ids.
pub async fn start(
    g: &Global,
    name: &str,
    input: Option<String>,
    input_file: Option<PathBuf>,
    source: &str,
) -> Result<(), CliError> {
    let input = workflow_input(input, input_file)?;
    let store = store_for(g).await;
    let (request_id, exec_id) = insert_request(&store, name, input, source).await?;
    println!("workflow_request_id\t{request_id}");
    println!("workflow_exec_id\t{exec_id}");
    Ok(())
}

/// `whimbrel event`: insert one activity event row and print its id.
pub async fn event(
    g: &Global,
    activity_exec_id: String,
    transition: &str,
    output: Option<String>,
    error: Option<String>,
) -> Result<(), CliError> {
    let t: Transition = transition.parse().map_err(|e| {
        CliError(format!(
            "{e}; use one of RUNNING, COMPLETED, FAILED, CANCEL, PREPARING"
        ))
    })?;
    let output = output.map(|o| parse_json("--output", &o)).transpose()?;
    let store = store_for(g).await;
    let id = insert_event(&store, activity_exec_id, t, output, error).await?;
    println!("activity_event_id\t{id}");
    Ok(())
}

/// `whimbrel redrive`: a redrive request for a FAILED or CANCELLED
/// workflow (design.md § 9.4), then, with `wait_seconds`, its state once
/// it ended again (or when the wait is over).
///
/// Errors: an unknown workflow, or one not ended FAILED or CANCELLED
/// (nothing is inserted); the store's.
pub async fn redrive(
    g: &Global,
    workflow_exec_id: &str,
    wait_seconds: u64,
) -> Result<(), CliError> {
    use whimbrel_core::contract::WorkflowState as W;
    let store = store_for(g).await;
    let snap = status::snapshot(&store, workflow_exec_id).await?;
    let state = snap.workflow.state;
    if !matches!(state, W::Failed | W::Cancelled) {
        return Err(CliError(format!(
            "{workflow_exec_id} is {state}: only a FAILED or CANCELLED workflow is redriven"
        )));
    }
    let name = &snap.workflow.workflow_name;
    let id = crate::insert_redrive_request(&store, name, workflow_exec_id).await?;
    println!("workflow_request_id\t{id}");
    if wait_seconds == 0 {
        return Ok(());
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(wait_seconds);
    loop {
        let wf = status::snapshot(&store, workflow_exec_id).await?.workflow;
        let taken = wf.redriven_by(&id);
        if (taken && wf.state.is_terminal()) || std::time::Instant::now() >= deadline {
            println!("{workflow_exec_id}\t{}", wf.state);
            return redrive_outcome(&wf, taken, wait_seconds);
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// What `whimbrel redrive --wait` exits with once `wf` (read last) ended
/// or the wait of `wait_seconds` was over: success only for a redrive
/// applied (`taken`) that ended COMPLETED, so a script can branch on it.
///
/// Errors: the request not applied (refused, or the functions down), the
/// workflow ended FAILED or CANCELLED again (with its error), or still
/// running.
fn redrive_outcome(
    wf: &whimbrel_core::model::WorkflowExec,
    taken: bool,
    wait_seconds: u64,
) -> Result<(), CliError> {
    use whimbrel_core::contract::WorkflowState as W;
    let id = &wf.workflow_exec_id;
    match (taken, wf.state) {
        (false, _) => Err(CliError(format!(
            "the redrive request was not applied within {wait_seconds} s: the workflow-request function's log says why a request is refused"
        ))),
        (true, W::Completed) => Ok(()),
        (true, s) if s.is_terminal() => Err(CliError(format!(
            "{id} ended {s} again: {}",
            wf.error.as_deref().unwrap_or("no error recorded")
        ))),
        (true, s) => Err(CliError(format!(
            "{id} is still {s} after {wait_seconds} s"
        ))),
    }
}

/// `whimbrel cancel`: insert a request to cancel the workflow execution
/// (a row of `whimbrel_workflow_request`, which the workflow-request
/// function applies: docs/contract.md § 6, "Cancel requests"), print its id, then watch the
/// workflow for up to `wait_seconds` and print what the request came to.
/// A cancel needs no attempt token, so it works where tokens are required.
///
/// Errors: an unknown workflow, or one that already ended (nothing is
/// inserted).
pub async fn cancel(
    g: &Global,
    workflow_exec_id: &str,
    reason: &str,
    wait_seconds: u64,
) -> Result<(), CliError> {
    let store = store_for(g).await;
    let snap = status::snapshot(&store, workflow_exec_id).await?;
    let state = snap.workflow.state;
    if state.is_terminal() {
        return Err(CliError(format!(
            "{workflow_exec_id} already ended {state}: nothing to cancel"
        )));
    }
    let name = &snap.workflow.workflow_name;
    let id = crate::insert_cancel_request(&store, name, workflow_exec_id, reason).await?;
    println!("workflow_request_id\t{id}");
    if wait_seconds == 0 {
        return Ok(());
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(wait_seconds);
    loop {
        let snap = status::snapshot(&store, workflow_exec_id).await?;
        let ending = snap
            .activities
            .iter()
            .filter(|a| a.state == ActivityState::CancelledRunning)
            .count();
        let cancelled = snap
            .activities
            .iter()
            .filter(|a| a.state == ActivityState::Cancelled)
            .count();
        let ended = snap.closed();
        if ended || std::time::Instant::now() >= deadline {
            let state = snap.workflow.state;
            println!("{workflow_exec_id}\t{state}");
            if !ended && ending + cancelled == 0 {
                eprintln!("the cancel request was not applied within {wait_seconds} s: is the workflow-request function running? (its log says why a request is refused)");
            } else if !ended {
                eprintln!("{cancelled} activities CANCELLED, {ending} CANCELLED_RUNNING until they acknowledge or the cancel grace ends them");
            }
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// `whimbrel signal`: put one signal row for a running workflow (unless
/// a signal with this id was sent already), then optionally watch for a
/// waiting node of that name to complete.
pub async fn signal(
    g: &Global,
    workflow_exec_id: &str,
    name: &str,
    input: Option<String>,
    id: Option<String>,
    wait_seconds: u64,
) -> Result<(), CliError> {
    let input: Option<Value> = input
        .map(|t| serde_json::from_str(&t))
        .transpose()
        .map_err(|e| CliError(format!("--input is not JSON: {e}")))?;
    let store = store_for(g).await;
    let snap = status::snapshot(&store, workflow_exec_id).await?;
    if snap.workflow.state.is_terminal() {
        return Err(CliError(format!(
            "{workflow_exec_id} already ended {}: a signal would be rejected",
            snap.workflow.state
        )));
    }
    let now = Timestamp::now();
    let id = id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let row = SignalRow {
        when_epoch: Some(now.epoch),
        expires_at_epoch: EngineConfig::from_env()
            .map_err(CliError)?
            .row_expiry(now.epoch),
        ..SignalRow::new(workflow_exec_id, name, &id, input)
    };
    if let Some(why) = row.invalid() {
        return Err(CliError(why));
    }
    if !whimbrel_core::engine::signals::send_signal(&store, &row).await? {
        return Err(CliError(format!(
            "signal {:?} was sent already; its first input stands",
            row.signal_key
        )));
    }
    println!("signal_key\t{}", row.signal_key);
    if wait_seconds > 0 {
        watch_signal_waits(&store, workflow_exec_id, name, wait_seconds).await?;
    }
    Ok(())
}

/// Watch the workflow's waits for signal `name` until one COMPLETES or
/// `wait_seconds` pass, then print each wait's state.
async fn watch_signal_waits(
    store: &whimbrel_core::store::Store,
    workflow_exec_id: &str,
    name: &str,
    wait_seconds: u64,
) -> Result<(), CliError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(wait_seconds);
    loop {
        let snap = status::snapshot(store, workflow_exec_id).await?;
        let waits: Vec<_> = snap
            .activities
            .iter()
            .filter(|a| a.runner.runs.signal_name() == Some(name))
            .collect();
        if waits.iter().any(|a| a.state == ActivityState::Completed)
            || std::time::Instant::now() >= deadline
        {
            for a in waits {
                println!("{}\t{}", a.activity_name, a.state);
            }
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// `whimbrel heartbeat`: record a heartbeat and print the activity's state.
pub async fn heartbeat(g: &Global, activity_exec_id: &str) -> Result<(), CliError> {
    let store = store_for(g).await;
    let config = EngineConfig {
        table_prefix: g.table_prefix.clone(),
        ..EngineConfig::from_env().map_err(CliError)?
    };
    let engine = Engine::new(store, (), config);
    let state = engine.heartbeat(activity_exec_id).await?;
    println!("{state}");
    Ok(())
}

/// `whimbrel show`: print the workflow execution's timeline, an episodic
/// execution's decisions among it; with `follow`, every run of its
/// continue-as-new chain, first to last (design.md § 10.6). JSON: the
/// execution's object, and when following, `chain`: each run's object in
/// order (this one among them).
pub async fn show(
    g: &Global,
    workflow_exec_id: &str,
    format: output::Format,
    follow: bool,
) -> Result<(), CliError> {
    let store = store_for(g).await;
    let snap = status::snapshot(&store, workflow_exec_id).await?;
    let runs = if follow {
        show::chain(&store, snap).await?
    } else {
        vec![snap]
    };
    let mut shown = vec![];
    for run in &runs {
        let decisions = show::decisions(&store, &run.workflow.workflow_exec_id).await?;
        shown.push(show::with_decisions(show::timeline(run), &decisions));
    }
    let asked = (runs.iter())
        .position(|r| r.workflow.workflow_exec_id == workflow_exec_id)
        .unwrap_or(0);
    match format {
        output::Format::Table => {
            for (k, (run, rows)) in runs.iter().zip(&shown).enumerate() {
                if runs.len() > 1 {
                    let sep = if k == 0 { "" } else { "\n" };
                    println!("{sep}run {} of {} of the chain", k + 1, runs.len());
                }
                print!("{}", show::render(run, rows));
            }
        }
        output::Format::Json => {
            let mut out = show::as_json(&runs[asked], &shown[asked]);
            if follow {
                let chain = runs
                    .iter()
                    .zip(&shown)
                    .map(|(r, rows)| show::as_json(r, rows));
                out["chain"] = serde_json::Value::Array(chain.collect());
            }
            print!("{}", output::pretty(&out));
        }
    }
    Ok(())
}

/// `whimbrel list`: print the workflow executions in `state` started in
/// the last `since_seconds`.
pub async fn list(
    g: &Global,
    state: output::StateArg,
    since_seconds: i64,
    format: output::Format,
) -> Result<(), CliError> {
    let store = store_for(g).await;
    let since = Timestamp::now().epoch - since_seconds;
    let found = status::list(&store, state.into(), since).await?;
    match format {
        output::Format::Table => print!("{}", status::list_lines(&found)),
        output::Format::Json => print!("{}", output::pretty(&status::list_json(&found))),
    }
    Ok(())
}

/// `whimbrel result`: print a COMPLETED workflow's result. JSON is the
/// result's only natural form: every output format prints it.
pub async fn result(g: &Global, workflow_exec_id: &str, wait: bool) -> Result<(), CliError> {
    let store = store_for(g).await;
    let result = status::workflow_result(store, workflow_exec_id, wait).await?;
    print!("{}", output::pretty(&result));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::redrive_outcome;
    use serde_json::json;
    use whimbrel_core::model::WorkflowExec;

    fn workflow(state: &str, error: Option<&str>) -> WorkflowExec {
        serde_json::from_value(json!({
            "workflow_exec_id": "w::u",
            "workflow_name": "w",
            "state": state,
            "workflow_request_id": "w::r",
            "start_time": [2026, 1, 1, 0, 0, 0],
            "start_time_epoch": 100,
            "source": "tests",
            "activity_count": 2,
            "error": error,
        }))
        .unwrap()
    }

    #[test]
    fn redrive_wait_succeeds_only_for_a_redrive_that_completed() {
        assert!(redrive_outcome(&workflow("COMPLETED", None), true, 60).is_ok());
        let again = redrive_outcome(
            &workflow("FAILED", Some("activity once FAILED: boom")),
            true,
            60,
        );
        assert!(again.is_err_and(|e| e
            .0
            .contains("ended FAILED again: activity once FAILED: boom")),);
        let running = redrive_outcome(&workflow("RUNNING", None), true, 60);
        assert!(running.is_err_and(|e| e.0.contains("still RUNNING after 60 s")));
        let refused = redrive_outcome(&workflow("FAILED", None), false, 60);
        assert!(refused.is_err_and(|e| e.0.contains("not applied within 60 s")));
    }
}
