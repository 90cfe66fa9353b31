//! `whimbrel status`: a workflow exec and a table of its activities.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Duration;
use whimbrel_core::attr;

use serde_json::{json, Value};
use whimbrel_core::contract::{ActivityState, WorkflowState};
use whimbrel_core::ids;
use whimbrel_core::model::{ActivityExec, TargetLimit, WorkflowExec};
use whimbrel_core::store::{
    n, s, Cmp, KeyCond, Store, INDEX_ACTIVITIES_BY_WORKFLOW, INDEX_WORKFLOWS_BY_STATE,
};

use crate::output::Format;
use crate::CliError;

/// How [`snapshot`]'s error for a workflow exec that does not exist
/// begins.
pub const NO_EXEC: &str = "no workflow exec";

/// A workflow exec and its activities, read once.
pub struct Snapshot {
    /// The workflow exec.
    pub workflow: WorkflowExec,
    /// Its activities, by name.
    pub activities: Vec<ActivityExec>,
    /// The limits of its activities' targets (`whimbrel_limit`), those
    /// set, by target (design.md § 9.3). Read by `whimbrel status` only
    /// ([`with_target_limits`]): the wait loops that poll a snapshot
    /// (`redrive --wait`, `cancel --wait`, `result --wait`) never need them.
    pub targets: Vec<TargetLimit>,
}

impl Snapshot {
    /// True once the workflow's close is done: it ended, and no activity
    /// is left that its close still ends. A workflow moves to FAILED or
    /// CANCELLED first and cancels its open activities right after
    /// (design.md § 3.3), so a reader between the two writes sees it ended
    /// with activities still QUEUED. An activity CANCELLED_RUNNING counts
    /// as closed: the engine asked it to stop, and only its own report or
    /// the cancel grace ends it. The wait loops (`result --wait`,
    /// `status --watch`, `cancel --wait`) stop here, not at the first
    /// terminal state, so what they print last is the state that stays.
    pub fn closed(&self) -> bool {
        self.workflow.state.is_terminal()
            && self
                .activities
                .iter()
                .all(|a| a.state.is_terminal() || a.state == ActivityState::CancelledRunning)
    }
}

/// Read the workflow exec (consistent) and its activities (GSI query),
/// with the outputs kept on event rows read back into `output`.
///
/// Errors: a malformed id, an unknown workflow, or DynamoDB errors.
pub async fn snapshot(store: &Store, workflow_exec_id: &str) -> Result<Snapshot, CliError> {
    let name = ids::name_of(workflow_exec_id).ok_or_else(|| {
        CliError(format!(
            "{workflow_exec_id:?} is not a workflow exec id ((workflow_name)::(uuid))"
        ))
    })?;
    let key = HashMap::from([
        (attr::WORKFLOW_EXEC_ID.to_string(), s(workflow_exec_id)),
        (attr::WORKFLOW_NAME.to_string(), s(name)),
    ]);
    let workflow: WorkflowExec = store
        .get(&store.tables().workflow_exec(), key)
        .await?
        .ok_or_else(|| CliError(format!("{NO_EXEC} {workflow_exec_id}")))?;
    let mut activities: Vec<ActivityExec> = store
        .query_keys_only(
            &store.tables().activity_exec(),
            INDEX_ACTIVITIES_BY_WORKFLOW,
            KeyCond {
                hash: (attr::WORKFLOW_EXEC_ID.into(), s(workflow_exec_id)),
                range: None,
            },
            [attr::ACTIVITY_EXEC_ID, attr::WORKFLOW_EXEC_ID],
        )
        .await?;
    // Outputs kept off the items (engine::payloads), put back for display.
    let kept: Vec<ActivityExec> = activities
        .iter()
        .filter(|a| a.output_kept_off_item())
        .cloned()
        .collect();
    if !kept.is_empty() {
        let mut outputs = whimbrel_core::engine::payloads::outputs_of(store, kept).await?;
        for a in &mut activities {
            if a.output_kept_off_item() {
                a.outcome.output = outputs.remove(&a.activity_name);
            }
        }
    }
    activities.sort_by_key(|a| natural_key(&a.activity_name));
    Ok(Snapshot {
        workflow,
        activities,
        targets: vec![],
    })
}

/// `snap` with the limits set for the targets (`lambda:f`,
/// `task_list:l`) of its activities that run code: one GetItem per
/// distinct target.
///
/// Errors: DynamoDB errors.
pub async fn with_target_limits(store: &Store, mut snap: Snapshot) -> Result<Snapshot, CliError> {
    let targets: std::collections::BTreeSet<String> = snap
        .activities
        .iter()
        .filter_map(whimbrel_core::engine::decide::target_limits::target_of)
        .collect();
    let mut limits = vec![];
    for target in targets {
        let limit: Option<TargetLimit> = store
            .get(
                &store.tables().limit(),
                whimbrel_core::keys::limit_key(&target),
            )
            .await?;
        limits.extend(limit.filter(|l| l.max_concurrency.is_some()));
    }
    snap.targets = limits;
    Ok(snap)
}

/// Sort "count-10" after "count-9".
fn natural_key(name: &str) -> (String, u64) {
    let digits: String = name
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    let n = digits
        .chars()
        .rev()
        .collect::<String>()
        .parse()
        .unwrap_or(0);
    (name[..name.len() - digits.len()].to_string(), n)
}

fn hms(epoch: Option<i64>) -> String {
    match epoch.filter(|e| *e >= 0) {
        Some(e) => chrono::DateTime::from_timestamp(e, 0)
            .map(|t| t.format("%H:%M:%S").to_string())
            .unwrap_or_default(),
        None => "-".into(),
    }
}

fn duration(a: &ActivityExec) -> String {
    match (a.timing.start_time_epoch, a.timing.end_time_epoch) {
        (s, Some(e)) if s >= 0 => format!("{}s", e - s),
        (s, None) if s >= 0 => format!("{}s…", whimbrel_core::dates::Timestamp::now().epoch - s),
        _ => "-".into(),
    }
}

/// The workflow's result: as stored on the workflow exec, else (too large
/// to store, or not COMPLETED yet) the outputs of the activities nothing
/// depends on, by name (the rule of `engine::outcome::sinks`).
pub fn result(snap: &Snapshot) -> Value {
    if let Some(r) = &snap.workflow.result {
        return r.clone();
    }
    let sinks: serde_json::Map<String, Value> = snap
        .activities
        .iter()
        .filter(|a| !a.has_dependents())
        .map(|a| {
            (
                a.activity_name.clone(),
                a.outcome.output.clone().unwrap_or(Value::Null),
            )
        })
        .collect();
    Value::Object(sinks)
}

/// The snapshot as text: a header, the activity table, the error or result.
pub fn render(snap: &Snapshot) -> String {
    let w = &snap.workflow;
    let mut out = String::new();
    let elapsed = w
        .end_time_epoch
        .unwrap_or_else(|| whimbrel_core::dates::Timestamp::now().epoch)
        - w.start_time_epoch;
    out.push_str(&format!(
        "workflow {}  {}  ({} activities, {}s)\n",
        w.workflow_exec_id, w.state, w.activity_count, elapsed
    ));
    out.push_str(&format!(
        "{:<16} {:<18} {:>7} {:>8} {:>8} {:>8} {:>8}  {}\n",
        "ACTIVITY", "STATE", "ATTEMPT", "QUEUED", "STARTED", "ENDED", "DURATION", "ERROR"
    ));
    for a in &snap.activities {
        out.push_str(&format!(
            "{:<16} {:<18} {:>7} {:>8} {:>8} {:>8} {:>8}  {}\n",
            a.activity_name,
            a.state.as_str(),
            a.attempt.number,
            hms(a.timing.queued_time_epoch),
            hms(Some(a.timing.start_time_epoch)),
            hms(a.timing.end_time_epoch),
            duration(a),
            a.outcome.error.as_deref().unwrap_or("")
        ));
    }
    for a in &snap.activities {
        out.push_str(&attempts(a));
    }
    let timers: String = snap.activities.iter().filter_map(timer_line).collect();
    if !timers.is_empty() {
        out.push_str("timers:\n");
        out.push_str(&timers);
    }
    out.push_str(&slots_line(&snap.activities));
    out.push_str(&target_slot_lines(snap));
    let signals: String = snap.activities.iter().filter_map(signal_line).collect();
    if !signals.is_empty() {
        out.push_str("signals:\n");
        out.push_str(&signals);
    }
    let children: String = snap.activities.iter().filter_map(child_line).collect();
    if !children.is_empty() {
        out.push_str("children:\n");
        out.push_str(&children);
    }
    if let Some(p) = &w.parent {
        out.push_str(&format!(
            "parent: {} (node {}, depth {})\n",
            p.workflow_exec_id,
            whimbrel_core::ids::name_of(&p.activity_exec_id).unwrap_or("?"),
            p.depth
        ));
    }
    if let Some(e) = &w.error {
        out.push_str(&format!("error: {e}\n"));
    }
    if w.state == whimbrel_core::contract::WorkflowState::Completed {
        out.push_str(&format!("result: {}\n", result(snap)));
    }
    out
}

/// A timer node's line (design.md § 9.1): its wait, and when it fires (or
/// fired, or that it was cancelled), UTC; `None` for an activity.
fn timer_line(a: &ActivityExec) -> Option<String> {
    use whimbrel_core::contract::ActivityState as S;
    let (seconds, until_epoch) = a.runner.runs.timer()?;
    let wait = match (until_epoch, seconds) {
        (Some(until), _) => format!("until {}", hms(Some(until))),
        (None, s) => format!("{}s", s.unwrap_or(0)),
    };
    let fire = whimbrel_core::engine::deadline::timer_fire_epoch(a);
    let when = match a.state {
        S::Running => format!("fires at {}", hms(fire)),
        S::Completed => format!("fired at {}", hms(a.timing.end_time_epoch)),
        S::Cancelled => "cancelled".into(),
        s => format!("{s}: not started"),
    };
    Some(format!("  {:<16} {when} (wait {wait})\n", a.activity_name))
}

/// The slots of a plan's `max_concurrency` (design.md § 9.3): how many
/// its activities hold, and how many are ready and wait for one; empty
/// for a plan without a limit.
fn slots_line(activities: &[ActivityExec]) -> String {
    use whimbrel_core::contract::ActivityState as S;
    let Some(limit) = activities.iter().find_map(|a| a.links.max_concurrency) else {
        return String::new();
    };
    let held = activities.iter().filter(|a| a.links.slot_held).count();
    let waiting = activities
        .iter()
        .filter(|a| a.links.max_concurrency.is_some() && !a.links.slot_held)
        .filter(|a| matches!(a.state, S::Requested | S::Ready))
        .filter(|a| a.links.pending_dependency_count == 0)
        .count();
    format!("slots: {held} of {limit} in use, {waiting} ready and waiting for one\n")
}

/// The slots of each limited target of the workflow's activities
/// (design.md § 9.3), across workflows: held, of the limit, how many this
/// workflow holds, and how many wait (of this workflow); empty for none.
fn target_slot_lines(snap: &Snapshot) -> String {
    use whimbrel_core::engine::decide::target_limits::waiter_of;
    let id = snap.workflow.workflow_exec_id.as_str();
    let mut out = String::new();
    for l in &snap.targets {
        let here = snap
            .activities
            .iter()
            .filter(|a| a.links.target_slot_held)
            .filter(|a| a.links.target_limit.as_deref() == Some(l.target.as_str()))
            .count();
        let waiting_here = l
            .slot_waiters
            .iter()
            .filter(|e| waiter_of(e).is_some_and(|(wf, _)| wf == id))
            .count();
        out.push_str(&format!(
            "  {:<24} {} of {} in use ({here} here), {} waiting ({waiting_here} here)\n",
            l.target,
            l.slots_used(),
            l.max_concurrency.unwrap_or_default(),
            l.slot_waiters.len()
        ));
    }
    match out.is_empty() {
        true => out,
        false => format!("target slots, across workflows:\n{out}"),
    }
}

/// A signal wait's line (design.md § 9.2): the signal it waits for, and
/// until when, or when it was received (and by which signal id), or how
/// it ended; `None` for any other node.
fn signal_line(a: &ActivityExec) -> Option<String> {
    use whimbrel_core::contract::ActivityState as S;
    let name = a.runner.runs.signal_name()?;
    let timeout = a.timeouts.start_to_close_seconds;
    let when = match a.state {
        S::Running => match timeout {
            Some(t) => format!(
                "waiting (times out at {})",
                hms(Some(a.timing.start_time_epoch + t))
            ),
            None => "waiting".into(),
        },
        S::Completed => {
            let by = a.trail.history.last().map(|h| h.event_id.as_str());
            let id = by.and_then(|e| e.rsplit_once('#')).map_or("", |(_, id)| id);
            format!("received at {} (id {id})", hms(a.timing.end_time_epoch))
        }
        S::Requested | S::Ready => "not waiting yet".into(),
        s => format!("{s}"),
    };
    Some(format!("  {:<16} {name:?}: {when}\n", a.activity_name))
}

/// A child workflow node's line (design.md § 9.5): its child's exec id
/// (`whimbrel status` it for the child's own activities) and where the
/// node is; `None` for any other node.
fn child_line(a: &ActivityExec) -> Option<String> {
    let child = a.runner.runs.child()?;
    let close = match child.parent_close {
        whimbrel_core::plan::ParentClose::Cancel => "",
        whimbrel_core::plan::ParentClose::Abandon => ", abandoned if cancelled",
    };
    Some(format!(
        "  {:<16} {} {}{close}\n",
        a.activity_name,
        crate::show::child_of(a),
        a.state
    ))
}

/// The attempts of a retried activity: each failed attempt with its
/// outcome, error and the backoff before the next, then the live one.
/// Empty for an activity that never retried.
pub fn attempts(a: &ActivityExec) -> String {
    let failed: Vec<_> = a
        .trail
        .history
        .iter()
        .filter(|h| h.attempt.is_some())
        .collect();
    if failed.is_empty() {
        return String::new();
    }
    let mut out = format!("attempts of {}:\n", a.activity_name);
    for h in failed {
        let next = h.next_attempt_epoch.unwrap_or(h.at_epoch);
        out.push_str(&format!(
            "  attempt {:<3} {:<10} at {}  next attempt at {} (backoff {}s)  {}\n",
            h.attempt.unwrap_or(0),
            h.transition,
            hms(Some(h.at_epoch)),
            hms(Some(next)),
            next - h.at_epoch,
            h.error.as_deref().unwrap_or("")
        ));
    }
    let live = match a.timing.next_attempt_epoch {
        Some(at) if a.attempt.token_hash.is_none() && !a.state.is_terminal() => {
            format!("waiting until {}", hms(Some(at)))
        }
        _ => a.state.as_str().to_string(),
    };
    out.push_str(&format!("  attempt {:<3} {live}\n", a.attempt.number));
    out
}

/// `whimbrel result`: the result of a COMPLETED workflow (waiting for it
/// to end with `wait`).
///
/// Errors: a workflow that ended otherwise (with its state and error), or
/// one not ended without `wait`.
pub async fn workflow_result(store: Store, id: &str, wait: bool) -> Result<Value, CliError> {
    loop {
        let snap = snapshot(&store, id).await;
        match snap {
            Ok(s) if wait && s.workflow.state.is_terminal() && !s.closed() => {
                tokio::time::sleep(Duration::from_millis(500)).await
            }
            Ok(s) if s.workflow.state == WorkflowState::Completed => {
                let engine = whimbrel_core::engine::Engine::new(
                    store.clone(),
                    (),
                    whimbrel_core::engine::EngineConfig::default(),
                );
                return Ok(engine
                    .workflow_result(id, &s.workflow.workflow_name)
                    .await?
                    .unwrap_or_else(|| result(&s)));
            }
            Ok(s) if s.workflow.state.is_terminal() => {
                return Err(CliError(format!(
                    "workflow {id} ended {}: {}",
                    s.workflow.state,
                    s.workflow.error.as_deref().unwrap_or("no reason recorded")
                )))
            }
            Ok(s) if !wait => {
                return Err(CliError(format!(
                    "workflow {id} is {}; no result yet (use --wait)",
                    s.workflow.state
                )))
            }
            Err(CliError(m)) if !(wait && m.starts_with(NO_EXEC)) => return Err(CliError(m)),
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

fn as_json(snap: &Snapshot) -> Value {
    json!({
        "workflow": snap.workflow,
        "activities": snap.activities,
        "target_limits": snap.targets,
        attr::RESULT: result(snap),
    })
}

/// `whimbrel status`: print once, or redraw every second until the
/// workflow is terminal with `watch`.
pub async fn run(store: &Store, id: &str, watch: bool, format: Format) -> Result<(), CliError> {
    let tty = std::io::stdout().is_terminal();
    let mut last = String::new();
    let mut waiting = false;
    loop {
        let snap = match snapshot(store, id).await {
            Ok(s) => with_target_limits(store, s).await?,
            // Just inserted: the workflow-request function has not created
            // the exec yet.
            Err(CliError(m)) if watch && m.starts_with(NO_EXEC) => {
                if !waiting {
                    println!("waiting for {id} to be created...");
                    waiting = true;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let done = snap.closed();
        let text = match format {
            Format::Table => render(&snap),
            Format::Json => {
                serde_json::to_string_pretty(&as_json(&snap)).unwrap_or_default() + "\n"
            }
        };
        if !watch || done {
            if watch && tty {
                print!("\x1b[2J\x1b[H");
            }
            print!("{text}");
            return Ok(());
        }
        if text != last {
            if tty {
                print!("\x1b[2J\x1b[H{text}");
            } else if format == Format::Table {
                // Not a terminal: one progress line per change.
                let w = &snap.workflow;
                let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
                for a in &snap.activities {
                    *counts.entry(a.state.as_str()).or_default() += 1;
                }
                println!("{} {:?}", w.state, counts);
            }
            last = text;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The workflow execs in `state` started at or after `since` (epoch
/// seconds), newest first.
///
/// Errors: DynamoDB errors.
pub async fn list(
    store: &Store,
    state: WorkflowState,
    since: i64,
) -> Result<Vec<WorkflowExec>, CliError> {
    let mut found: Vec<WorkflowExec> = store
        .query_keys_only(
            &store.tables().workflow_exec(),
            INDEX_WORKFLOWS_BY_STATE,
            KeyCond {
                hash: (attr::STATE.into(), s(state.as_str())),
                range: Some((attr::START_TIME_EPOCH.into(), Cmp::Ge, n(since))),
            },
            [attr::WORKFLOW_EXEC_ID, attr::WORKFLOW_NAME],
        )
        .await?;
    // The index lags the table: an exec that moved on is not listed.
    found.retain(|w| w.state == state);
    found.sort_by_key(|w| std::cmp::Reverse(w.start_time_epoch));
    Ok(found)
}

/// `whimbrel list` as text: one tab-separated line per workflow exec: id,
/// state, start time (UTC), activity counts, error.
pub fn list_lines(found: &[WorkflowExec]) -> String {
    found
        .iter()
        .map(|w| {
            let started = chrono::DateTime::from_timestamp(w.start_time_epoch, 0)
                .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
                .unwrap_or_default();
            format!(
                "{}\t{}\t{}\t{}/{} ended\t{}\n",
                w.workflow_exec_id,
                w.state,
                started,
                ended(w),
                w.activity_count,
                w.error.as_deref().unwrap_or("")
            )
        })
        .collect()
}

fn ended(w: &WorkflowExec) -> u64 {
    w.completed_count + w.failed_count + w.cancelled_count
}

/// `whimbrel list --output json`: an array of the workflow execs' summary
/// attributes (not their plan, input or result, which may be large).
pub fn list_json(found: &[WorkflowExec]) -> Value {
    found
        .iter()
        .map(|w| {
            json!({
                "workflow_exec_id": w.workflow_exec_id,
                "workflow_name": w.workflow_name,
                "state": w.state,
                "start_time_epoch": w.start_time_epoch,
                "end_time_epoch": w.end_time_epoch,
                "activity_count": w.activity_count,
                "completed_count": w.completed_count,
                "failed_count": w.failed_count,
                "cancelled_count": w.cancelled_count,
                "ended_count": ended(w),
                "error": w.error,
                "source": w.source,
            })
        })
        .collect()
}
