//! `apply_event`: a structured input (an activity exec item in any state,
//! with its attempt, token, task list, timeouts, retry policy, history,
//! parked events, and one requested transition with its actor and details)
//! run through the pure core the engine executes:
//! `contract::next_state` / `next_state_of_report`, `decide::report_actor`,
//! `decide::retry_after` + `retry_update` or `decide::transition_update`
//! (+ `count_end`), the attempt writes (`queue_update`, `launch_update`,
//! `relaunch_update`, `claim_task_update`), and the monitor's
//! `next_deadline` / `monitor_verdict` with the write each verdict leads to
//! (`extend_due`, `clear_due`, the TIMED_OUT or NOT_STARTED failure, a
//! relaunch or launch). Every UpdateRequest is applied to the item it was
//! conditioned on with `store::memory::{eval, apply}`.
//!
//! The item is generated per state as the engine leaves it (a QUEUED
//! activity has an attempt and a first queue time, a RUNNING one a token
//! and a start time, a terminal one no parked events, the due marker is
//! the one the engine writes...), except `heartbeat_time_epoch`, which any
//! client may write with a raw UpdateItem (docs/tables.md), so it is
//! sometimes any i64.
//!
//! Invariants (any failure panics):
//! * no panic anywhere in the core;
//! * the contract: a terminal state accepts nothing; an accepted
//!   transition is a row of the table allowed to its actor; "not yet" only
//!   for non-terminal states; a report's refusal as never launched only
//!   for progress reports without a claimed attempt;
//! * a terminal state never changes: no rule writes a terminal item, and
//!   every state-changing write is refused by an item a concurrent writer
//!   already moved on (version fencing), including its own result (a
//!   redelivered copy of the write does not apply twice);
//! * an update applied to the item it was conditioned on applies (the
//!   condition holds, the actions are valid) and yields an item that still
//!   deserializes as `model::ActivityExec`, in the state decided;
//! * the due marker: present whenever the new state is non-terminal after
//!   launch (QUEUED claimed or a Lambda retry, PREPARING, RUNNING,
//!   CANCELLED_RUNNING) and after a terminal write (its side effects are
//!   owed); `due_shard` exactly when `due_epoch`; never later than the new
//!   state's own deadline;
//! * a retry is only decided for a retryable failure with attempts left,
//!   due within `0..=MAX_DELAY_SECONDS` and before schedule-to-close;
//! * the monitor's verdicts agree with the contract and the deadlines, and
//!   the write it leads to applies to the item it judged.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use whimbrel_core::contract::{
    self, ActivityState, Actor, Transition, TransitionError, WorkflowState, RETRY_FROM, TRANSITIONS,
};
use whimbrel_core::dates::Timestamp;
use whimbrel_core::engine::decide::{self, Change, Deadline, Details, Verdict, MAX_ERROR_BYTES};
use whimbrel_core::engine::EngineConfig;
use whimbrel_core::ids;
use whimbrel_core::model::{
    ActivityExec, Attempt, HistoryEntry, Links, Outcome, ParkedEvent, Runner, Runs, Timeouts, Timing, Trail,
    WorkflowExec,
};
use whimbrel_core::plan::{MAX_HEARTBEAT_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS};
use whimbrel_core::retry::{Jitter, RetryPolicy, MAX_ATTEMPTS, MAX_DELAY_SECONDS};
use whimbrel_core::store::memory::{apply, eval};
use whimbrel_core::store::{self, n, s, Item, Tables, UpdateRequest};

/// Epoch seconds everything is relative to (the sample events' time).
const BASE: i64 = 1_795_306_411;
const LIVE_TOKEN: &str = "live-token";
const WORKFLOW: &str = "w::5b0f8e1c-2d7a-4f3e-9c61-7a2b9d0e4f13";

#[derive(Arbitrary, Debug, Clone, Copy, PartialEq)]
enum St {
    Requested,
    Ready,
    Queued,
    Preparing,
    Running,
    Cancelled,
    CancelledRunning,
    TimedOut,
    Failed,
    Completed,
}

impl St {
    fn get(self) -> ActivityState {
        use ActivityState as S;
        match self {
            St::Requested => S::Requested,
            St::Ready => S::Ready,
            St::Queued => S::Queued,
            St::Preparing => S::Preparing,
            St::Running => S::Running,
            St::Cancelled => S::Cancelled,
            St::CancelledRunning => S::CancelledRunning,
            St::TimedOut => S::TimedOut,
            St::Failed => S::Failed,
            St::Completed => S::Completed,
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Tr {
    Cancel,
    Ready,
    Queued,
    Preparing,
    Running,
    Failed,
    Completed,
    TimedOut,
}

impl Tr {
    fn get(self) -> Transition {
        use Transition as T;
        match self {
            Tr::Cancel => T::Cancel,
            Tr::Ready => T::Ready,
            Tr::Queued => T::Queued,
            Tr::Preparing => T::Preparing,
            Tr::Running => T::Running,
            Tr::Failed => T::Failed,
            Tr::Completed => T::Completed,
            Tr::TimedOut => T::TimedOut,
        }
    }
}

/// A token a report carries.
#[derive(Arbitrary, Debug, Clone)]
enum Tok {
    None,
    Live,
    Forged(String),
}

impl Tok {
    fn get(&self) -> Option<String> {
        match self {
            Tok::None => None,
            Tok::Live => Some(LIVE_TOKEN.into()),
            Tok::Forged(t) => Some(t.clone()),
        }
    }
}

/// The attempt a report names.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Att {
    None,
    Live,
    Other(u8),
}

impl Att {
    fn get(self, live: u32) -> Option<u32> {
        match self {
            Att::None => None,
            Att::Live => Some(live),
            Att::Other(a) => Some(u32::from(a)),
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Who {
    Report { attempt: Att, token: bool },
    Engine,
    Monitor,
}

#[derive(Arbitrary, Debug, Clone)]
enum ErrName {
    Busy,
    Bad,
    TimedOut,
    NotStarted,
    Other(String),
}

impl ErrName {
    fn get(&self) -> String {
        match self {
            ErrName::Busy => "Busy".into(),
            ErrName::Bad => "Bad".into(),
            ErrName::TimedOut => "TIMED_OUT".into(),
            ErrName::NotStarted => "NOT_STARTED".into(),
            ErrName::Other(s) => s.clone(),
        }
    }
}

/// A retry policy as a validated plan stores it (bounded fields; one that
/// still fails validation is dropped, as the plan would be refused).
#[derive(Arbitrary, Debug, Clone)]
struct Policy {
    max_attempts: Option<u8>,
    interval_seconds: Option<u32>,
    backoff_tenths: Option<u16>,
    max_delay_seconds: Option<u32>,
    full_jitter: Option<bool>,
    retry_on: Option<Vec<ErrName>>,
    no_retry_on: Option<Vec<ErrName>>,
}

impl Policy {
    fn get(&self) -> Option<RetryPolicy> {
        let delay = |x: u32| i64::from(x) % (MAX_DELAY_SECONDS + 1);
        let p = RetryPolicy {
            max_attempts: self.max_attempts.map(|m| 1 + u32::from(m) % MAX_ATTEMPTS),
            interval_seconds: self.interval_seconds.map(delay),
            backoff_rate: self.backoff_tenths.map(|t| 1.0 + f64::from(t % 991) / 10.0),
            max_delay_seconds: self.max_delay_seconds.map(delay),
            jitter: self
                .full_jitter
                .map(|f| if f { Jitter::Full } else { Jitter::None }),
            retry_on: self
                .retry_on
                .as_ref()
                .map(|l| l.iter().map(ErrName::get).collect()),
            no_retry_on: self
                .no_retry_on
                .as_ref()
                .map(|l| l.iter().map(ErrName::get).collect()),
        };
        // items.rs keeps a policy only when it allows a retry.
        (p.validate().is_ok() && p.attempts() > 1).then_some(p)
    }
}

#[derive(Arbitrary, Debug, Clone)]
enum Out {
    Null,
    Flag(bool),
    Number(i32),
    Text(String),
    List(Vec<u16>),
}

impl Out {
    fn get(&self) -> Value {
        match self {
            Out::Null => Value::Null,
            Out::Flag(b) => json!(b),
            Out::Number(n) => json!(n),
            Out::Text(t) => json!({ "text": t }),
            Out::List(l) => json!(l),
        }
    }
}

#[derive(Arbitrary, Debug, Clone)]
enum TrName {
    Known(Tr),
    Unknown(String),
}

#[derive(Arbitrary, Debug, Clone)]
struct Parked {
    id: u8,
    transition: TrName,
    attempt: Att,
    token: Tok,
    output: Option<Out>,
    error: Option<String>,
}

#[derive(Arbitrary, Debug, Clone)]
struct Hist {
    state: St,
    transition: Tr,
    ago: u16,
}

/// `heartbeat_time_epoch`: as the engine writes it, or whatever a client's
/// raw UpdateItem put there.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Beat {
    Never,
    Ago(u32),
    Raw(Raw),
}

/// A raw client value: any i64, or one near either end of the range
/// (which a uniform i64 practically never is).
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Raw {
    Any(i64),
    NearMax(u32),
    NearMin(u32),
}

impl Raw {
    fn get(self) -> i64 {
        match self {
            Raw::Any(x) => x,
            Raw::NearMax(d) => i64::MAX - i64::from(d),
            Raw::NearMin(d) => i64::MIN + i64::from(d),
        }
    }
}

/// The event the input's transition comes with.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Ev {
    Fresh(u8),
    Parked(u8),
    Last,
    InHistory(u8),
}

/// Engine settings: positive, as `EngineConfig::from_env` requires, and of
/// the size an operator would set.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct Cfg {
    custom: bool,
    queued_redrive: u16,
    max_launch: u8,
    start_to_close: u16,
    cancel_grace: u16,
    report_grace: u8,
    settle_grace: u8,
    heartbeat: u16,
}

impl Cfg {
    fn get(self) -> EngineConfig {
        let d = EngineConfig::default();
        if !self.custom {
            return d;
        }
        EngineConfig {
            relaunch_after_seconds: 1 + i64::from(self.queued_redrive),
            max_launch_attempts: 1 + u32::from(self.max_launch % 10),
            default_start_to_close_seconds: 1 + i64::from(self.start_to_close),
            cancel_grace_seconds: 1 + i64::from(self.cancel_grace),
            report_grace_seconds: 1 + i64::from(self.report_grace),
            settle_grace_seconds: 1 + i64::from(self.settle_grace),
            default_heartbeat_timeout_seconds: 1 + i64::from(self.heartbeat),
            ..d
        }
    }
}

#[derive(Arbitrary, Debug, Clone)]
struct Input {
    // The item.
    state: St,
    attempt: u8,
    launch: u8,
    version: u32,
    claimed: bool,
    require_tokens: bool,
    task_list: bool,
    heartbeat_timeout: Option<u32>,
    timeout: Option<u32>,
    schedule_to_start: Option<u32>,
    schedule_to_close: Option<u32>,
    retry: Option<Policy>,
    first_queued_ago: u32,
    scheduled_ago: i32,
    next_attempt_in: Option<u16>,
    queued_ago: u32,
    started_ago: u32,
    heartbeat: Beat,
    history: Vec<Hist>,
    parked: Vec<Parked>,
    prior_error: Option<String>,
    prior_output: Option<Out>,
    pending: u8,
    // The request.
    transition: Tr,
    who: Who,
    token: Tok,
    event: Ev,
    output: Option<Out>,
    error: Option<String>,
    at: Option<i32>,
    now_ahead: u32,
    cfg: Cfg,
    worker: String,
}

fn tables() -> Tables {
    Tables::new("whimbrel_")
}

/// The item for `input`, as the engine would have left it in that state.
fn exec_of(i: &Input, cfg: &EngineConfig, now: i64) -> Option<ActivityExec> {
    use ActivityState as S;
    let state = i.state.get();
    let id = ids::activity_exec_id(WORKFLOW, "a");
    let launched = !matches!(state, S::Requested | S::Ready);
    let attempt = if launched {
        1 + u32::from(i.attempt) % MAX_ATTEMPTS
    } else {
        0
    };
    let task_list = i.task_list.then(|| "tl".to_string());
    // A task-list attempt QUEUED waits for a worker: never claimed. A
    // started one was claimed (launcher or worker).
    let claimed = match state {
        S::Queued => i.claimed && task_list.is_none(),
        S::Requested | S::Ready => false,
        S::Preparing | S::Running | S::CancelledRunning => true,
        _ => i.claimed,
    };
    let first_queued = launched.then(|| now - i64::from(i.first_queued_ago % 10_000_000));
    let retry_wait = state == S::Queued && !claimed && task_list.is_none();
    let next_attempt = i
        .next_attempt_in
        .filter(|_| retry_wait && attempt > 1)
        .map(|d| now - 5_000 + i64::from(d));
    let scheduled = launched
        .then(|| next_attempt.unwrap_or(now - i64::from(i.scheduled_ago.rem_euclid(10_000_000))));
    let running =
        matches!(state, S::Running | S::CancelledRunning) || (state.is_terminal() && i.claimed);
    let start = if running {
        now - i64::from(i.started_ago % 10_000_000)
    } else {
        -1
    };
    let heartbeat_enabled = i.heartbeat_timeout.is_some();
    let heartbeat_time_epoch = match i.heartbeat {
        Beat::Raw(x) => x.get(),
        Beat::Ago(a) if running && heartbeat_enabled => now - i64::from(a % 10_000_000),
        _ if running && heartbeat_enabled => start,
        _ => -1,
    };
    let mut history: Vec<HistoryEntry> = i
        .history
        .iter()
        .take(12)
        .enumerate()
        .map(|(k, h)| {
            HistoryEntry::new(
                h.transition.get(),
                h.state.get(),
                now - i64::from(h.ago),
                &format!("h-{k}"),
            )
        })
        .collect();
    history.sort_by_key(|h| h.at_epoch);
    let parked: Vec<ParkedEvent> = if state.is_terminal() {
        vec![]
    } else {
        i.parked
            .iter()
            .take(4)
            .map(|p| ParkedEvent {
                activity_event_id: format!("p-{}", p.id),
                transition: match &p.transition {
                    TrName::Known(t) => t.get().as_str().into(),
                    TrName::Unknown(s) => s.clone(),
                },
                output: p.output.as_ref().map(Out::get),
                output_in_row: false,
                output_sha256: None,
                error: p.error.as_deref().map(decide::cap_error),
                attempt: p.attempt.get(attempt),
                attempt_token_hash: None,
                attempt_token: p.token.get(),
            })
            .collect()
    };
    let last_event_id = history.last().map(|h| h.event_id.clone());
    let mut exec = ActivityExec {
        activity_exec_id: id.clone(),
        workflow_exec_id: WORKFLOW.into(),
        workflow_name: "w".into(),
        activity_name: "a".into(),
        state,
        version: u64::from(i.version),
        runner: Runner {
            child_run: None,
            task_list_shard: (state == S::Queued && task_list.is_some())
                .then(|| decide::task_list_shard("tl", &id)),
            task_queued_epoch: (state == S::Queued && task_list.is_some())
                .then_some(scheduled.unwrap_or(now)),
            // Activities that run code only: timers and signal waits have
            // their own tables.
            runs: match task_list {
                Some(list) => Runs::TaskList { list },
                None => Runs::Lambda {
                    function: "f".into(),
                },
            },
            worker: None,
            input: Some(json!({"k": 1})),
            input_ref: None,
        },
        attempt: Attempt {
            retry: i.retry.as_ref().and_then(Policy::get),
            number: attempt,
            launches: if claimed && state == S::Queued {
                1 + u32::from(i.launch % 8)
            } else if claimed {
                1
            } else {
                0
            },
            token_hash: claimed.then(|| ids::token_hash(LIVE_TOKEN)),
            require_tokens: i.require_tokens,
        },
        timeouts: Timeouts {
            schedule_to_start_seconds: i
                .schedule_to_start
                .map(|t| 1 + i64::from(t) % MAX_TIMEOUT_SECONDS),
            schedule_to_close_seconds: i
                .schedule_to_close
                .map(|t| 1 + i64::from(t) % MAX_TIMEOUT_SECONDS),
            heartbeat_enabled,
            heartbeat_timeout_seconds: i
                .heartbeat_timeout
                .map(|t| 1 + i64::from(t) % MAX_HEARTBEAT_TIMEOUT_SECONDS),
            start_to_close_seconds: Some(i.timeout.map_or(cfg.default_start_to_close_seconds, |t| {
                1 + i64::from(t) % MAX_HEARTBEAT_TIMEOUT_SECONDS
            })),
        },
        timing: Timing {
            first_queued_epoch: first_queued,
            scheduled_epoch: scheduled,
            next_attempt_epoch: next_attempt,
            heartbeat_time_epoch,
            queued_time_epoch: (claimed && state == S::Queued)
                .then(|| now - i64::from(i.queued_ago % 10_000_000)),
            start_time_epoch: start,
            end_time_epoch: state.is_terminal().then_some(now - 1),
            ..Timing::default()
        },
        links: Links {
            pending_dependency_count: u64::from(i.pending % 3),
            ..Links::default()
        },
        outcome: Outcome {
            output: i.prior_output.as_ref().map(Out::get),
            output_ref: None,
            output_event_id: None,
            output_sha256: None,
            error: i.prior_error.clone().map(|e| decide::cap_error(&e)),
        },
        trail: Trail {
            history,
            last_event_id,
            parked,
        },
    };
    // The marker the engine wrote with this state: its deadline, or sooner
    // while parked events are owed; a terminal item keeps one until its
    // side effects are done (either is possible).
    let deadline = decide::next_deadline(&exec, cfg).map(|(at, _)| at);
    let owed = (!exec.trail.parked.is_empty()).then_some(now);
    let due = if state.is_terminal() {
        i.claimed.then_some(now)
    } else {
        [deadline, owed].into_iter().flatten().min()
    };
    exec.timing.due_epoch = due;
    exec.timing.due_shard = due.map(|_| store::shard_of(&id));
    Some(exec)
}

fn to_item(exec: &ActivityExec) -> Item {
    serde_dynamo::to_item(exec).expect("activity exec item")
}

/// Non-terminal after launch: the monitor must be watching it.
fn watched(a: &ActivityExec) -> bool {
    match a.state {
        ActivityState::Preparing | ActivityState::Running | ActivityState::CancelledRunning => true,
        ActivityState::Queued => a.attempt.token_hash.is_some() || a.runner.runs.task_list().is_none(),
        _ => false,
    }
}

/// Checks that hold for every activity write decided from `before` (read
/// as `item`): it applies, reads back, moves the version, is fenced, and
/// leaves the due marker right. Returns the item after.
fn apply_checked(
    what: &str,
    req: &UpdateRequest,
    item: &Item,
    before: &ActivityExec,
    cfg: &EngineConfig,
    expect: ActivityState,
) -> ActivityExec {
    assert_eq!(req.table, tables().activity_exec(), "{what}: table");
    assert_eq!(
        req.key,
        decide::activity_key(&before.activity_exec_id, &before.workflow_exec_id),
        "{what}: key"
    );
    let cond = req
        .cond
        .as_ref()
        .expect("every activity write is conditional");
    assert!(
        eval(cond, Some(item)),
        "{what}: its condition fails on the item it was decided from: {cond:?}"
    );
    let after_item = match apply(&req.key, Some(item), &req.actions) {
        Ok(i) => i,
        Err(e) => panic!("{what}: the update does not apply: {e}"),
    };
    let after: ActivityExec = match serde_dynamo::from_item(after_item.clone()) {
        Ok(a) => a,
        Err(e) => panic!("{what}: the item after no longer reads as ActivityExec: {e}"),
    };
    assert_eq!(after.state, expect, "{what}: state");
    assert_eq!(after.version, before.version + 1, "{what}: version");
    // Fencing: a redelivered copy of this write, or a stale reader's,
    // fails; so does any write on an item a concurrent writer moved on
    // (here: to a terminal state).
    assert!(!eval(cond, Some(&after_item)), "{what}: applies twice");
    let mut moved = item.clone();
    moved.insert("state".into(), s("COMPLETED"));
    moved.insert("version".into(), n(before.version + 1));
    assert!(
        !eval(cond, Some(&moved)),
        "{what}: applies to an item that went COMPLETED meanwhile"
    );
    assert!(!eval(cond, None), "{what}: creates a missing item");
    check_due(what, &after, cfg);
    after
}

fn check_due(what: &str, a: &ActivityExec, cfg: &EngineConfig) {
    assert_eq!(
        a.timing.due_epoch.is_some(),
        a.timing.due_shard.is_some(),
        "{what}: due_epoch {:?} / due_shard {:?}",
        a.timing.due_epoch,
        a.timing.due_shard
    );
    if let Some(shard) = a.timing.due_shard {
        assert_eq!(shard, store::shard_of(&a.activity_exec_id), "{what}: shard");
    }
    if watched(a) || a.state.is_terminal() {
        assert!(
            a.timing.due_epoch.is_some(),
            "{what}: {} (attempt {}, claimed {}) without a due marker",
            a.state,
            a.attempt.number,
            a.attempt.token_hash.is_some()
        );
    }
    if !a.state.is_terminal() {
        if let (Some(due), Some((deadline, kind))) = (a.timing.due_epoch, decide::next_deadline(a, cfg)) {
            assert!(
                due <= deadline,
                "{what}: due marker {due} is after the {kind:?} deadline {deadline} of {}",
                a.state
            );
        }
    }
}

/// The contract's answers agree with its table.
fn check_contract(
    state: ActivityState,
    launched: bool,
    t: Transition,
    actor: Actor,
    report: bool,
) -> Result<ActivityState, TransitionError> {
    let kind = contract::NodeKind::Lambda;
    let plain = contract::next_state(kind, state, t, actor);
    let got = if report {
        contract::next_state_of_report(kind, state, launched, t, actor)
    } else {
        plain.clone()
    };
    match &got {
        Ok(to) => {
            assert_eq!(got, plain);
            assert!(
                TRANSITIONS.iter().any(|(f, tt, too, who)| *f == state
                    && *tt == t
                    && too == to
                    && who.allows(actor)),
                "{state} x {t} by {actor:?} -> {to} is not a row"
            );
            assert!(!state.is_terminal());
        }
        Err(TransitionError::Terminal { .. }) => assert!(state.is_terminal()),
        Err(TransitionError::NeverLaunched { .. }) => {
            assert!(report && !launched);
            assert!(matches!(actor, Actor::Client | Actor::Attempt));
        }
        Err(e) => {
            assert!(!state.is_terminal(), "{state}: {e}");
            if e.is_retryable() {
                assert!(matches!(e, TransitionError::NotYet { .. }));
            }
        }
    }
    if state.is_terminal() {
        assert!(got.is_err(), "a terminal state accepted {t}");
    }
    got
}

/// Apply one decided transition (`change` from `exec`) as the engine does:
/// a retry when the policy allows it, else the transition itself (with the
/// workflow counter when terminal).
fn write_transition(
    what: &str,
    exec: &ActivityExec,
    item: &Item,
    cfg: &EngineConfig,
    change: Change<'_>,
    details: &Details,
    now: i64,
) {
    let t = tables();
    let retryable = !details.no_retry;
    if let Some(at) = decide::retry_after(exec, &change, details, retryable, now) {
        assert!(matches!(
            change.transition,
            Transition::Failed | Transition::TimedOut
        ));
        assert!(
            RETRY_FROM.contains(&exec.state),
            "retry from {}",
            exec.state
        );
        let policy = exec.attempt.retry.as_ref().expect("a retry needs a policy");
        assert!(retryable && exec.attempt.number < policy.attempts());
        assert!(
            (now..=now + MAX_DELAY_SECONDS).contains(&at),
            "next attempt at {at}, now {now}"
        );
        if let (Some(close), Some(from)) = (exec.timeouts.schedule_to_close_seconds, exec.timing.first_queued_epoch)
        {
            assert!(at < from + close, "a retry after schedule-to-close");
        }
        let req = decide::retry_update(&t, cfg, exec, &change, details, at, now);
        let what = format!("{what}: retry_update");
        let after = apply_checked(&what, &req, item, exec, cfg, ActivityState::Queued);
        assert_eq!(after.attempt.number, exec.attempt.number + 1, "{what}");
        assert_eq!(after.attempt.token_hash, None, "{what}");
        assert_eq!(after.timing.next_attempt_epoch, Some(at), "{what}");
        assert!(
            after.trail.parked.is_empty(),
            "{what}: parked reports of the failed attempt"
        );
        if exec.runner.runs.task_list().is_none() {
            assert_eq!(after.timing.due_epoch, Some(at), "{what}: the next attempt is due");
        } else {
            assert_eq!(after.runner.task_queued_epoch, Some(at), "{what}: offered at");
        }
        return;
    }
    let next = change.next;
    let req = decide::transition_update(&t, cfg, exec, change, details, now);
    if let Some(cut) = details.stale_before {
        if exec.timing.heartbeat_time_epoch >= cut {
            // A heartbeat landed: the timeout must not apply.
            assert!(!eval(req.cond.as_ref().unwrap(), Some(item)));
            return;
        }
    }
    let what = format!("{what}: transition_update {} -> {next}", exec.state);
    let after = apply_checked(&what, &req, item, exec, cfg, next);
    assert_eq!(
        after.trail.last_event_id.as_deref(),
        Some(change.event_id),
        "{what}"
    );
    assert_eq!(after.trail.history.len(), exec.trail.history.len() + 1, "{what}");
    let last = after.trail.history.last().unwrap();
    assert_eq!(
        (last.transition.as_str(), last.state, last.at_epoch),
        (change.transition.as_str(), next, now),
        "{what}"
    );
    if next.is_terminal() {
        assert!(after.trail.parked.is_empty(), "{what}: parked kept");
        assert_eq!(after.timing.end_time_epoch, Some(now), "{what}");
        assert_eq!(
            after.timing.due_epoch,
            Some(now + cfg.settle_grace_seconds),
            "{what}"
        );
        assert_eq!(after.timing.next_attempt_epoch, None, "{what}");
        let count = decide::count_end(&t, exec, next, details.error.as_deref());
        let wf = workflow_item();
        let cond = count.cond.as_ref().unwrap();
        assert!(
            eval(cond, Some(&wf)) && !eval(cond, None),
            "{what}: count_end condition"
        );
        let counted = apply(&count.key, Some(&wf), &count.actions).expect("count_end applies");
        let w: WorkflowExec = serde_dynamo::from_item(counted).expect("workflow reads back");
        assert_eq!(
            w.completed_count + w.failed_count + w.cancelled_count,
            1,
            "{what}"
        );
        if next.is_failure() {
            assert!(w.error.is_some(), "{what}: the failure reason");
        }
    } else {
        let rest: Vec<&ParkedEvent> = exec
            .trail.parked
            .iter()
            .filter(|p| p.activity_event_id != change.event_id)
            .collect();
        assert_eq!(
            after.trail.parked.iter().collect::<Vec<_>>(),
            rest,
            "{what}: parked"
        );
    }
    if next != ActivityState::Queued {
        assert_eq!(
            after.runner.task_list_shard, None,
            "{what}: still claimable by workers"
        );
    }
    if next == ActivityState::Running {
        assert_eq!(after.timing.start_time_epoch, now, "{what}");
    }
    if next == ActivityState::Completed {
        assert_eq!(after.outcome.error, None, "{what}: an earlier attempt's error kept");
        if let Some(o) = &details.output {
            // JSON null is stored as NULL, which reads back as none.
            assert_eq!(
                after.outcome.output.as_ref(),
                Some(o).filter(|o| !o.is_null()),
                "{what}: output"
            );
        }
    } else if let Some(e) = &details.error {
        let stored = after.outcome.error.as_deref().unwrap();
        assert!(
            stored.len() <= MAX_ERROR_BYTES,
            "{what}: error of {} bytes",
            stored.len()
        );
        assert_eq!(stored, decide::cap_error(e), "{what}");
    }
}

fn workflow_item() -> Item {
    let wf = WorkflowExec {
        parent: None,
        redrive_count: None,
        redriving: None,
        redrives: vec![],
        slots_used: None,
        decide_on: None,
        decider: None,
        continued_from: None,
        continued_as: None,
        workflow_exec_id: WORKFLOW.into(),
        workflow_name: "w".into(),
        state: WorkflowState::Running,
        workflow_request_id: None,
        start_time: Timestamp::from_epoch(BASE).date_list(),
        start_time_epoch: BASE,
        end_time: None,
        end_time_epoch: None,
        input: None,
        planned_epoch: Some(BASE),
        execution_timeout_seconds: None,
        activity_count: 1,
        completed_count: 0,
        failed_count: 0,
        cancelled_count: 0,
        error: None,
        source: None,
        due_epoch: None,
        due_shard: None,
        start_attempts: 0,
        result: None,
        result_in_activities: None,
    };
    serde_dynamo::to_item(&wf).expect("workflow item")
}

/// The attempt writes the engine may make from this item.
fn check_attempts(i: &Input, exec: &ActivityExec, item: &Item, cfg: &EngineConfig, now: i64) {
    use ActivityState as S;
    let t = tables();
    let hash = ids::token_hash("next-token");
    match exec.state {
        S::Requested | S::Ready if exec.links.pending_dependency_count == 0 => {
            let token = exec.runner.runs.task_list().is_none().then_some(hash.as_str());
            let req = decide::queue_update(&t, cfg, exec, token, now);
            let after = apply_checked("queue_update", &req, item, exec, cfg, S::Queued);
            assert_eq!(after.attempt.number, exec.attempt.number + 1);
            assert_eq!(after.timing.first_queued_epoch, Some(now));
            assert_eq!(after.attempt.token_hash.as_deref(), token);
            if exec.runner.runs.task_list().is_some() {
                assert!(after.runner.task_list_shard.is_some(), "queued without an offer");
            }
        }
        S::Requested | S::Ready => {
            let req = decide::queue_update(&t, cfg, exec, None, now);
            assert!(
                !eval(req.cond.as_ref().unwrap(), Some(item)),
                "queued with prerequisites pending"
            );
        }
        S::Queued if exec.runner.runs.task_list().is_some() => {
            let req = decide::claim_task_update(&t, cfg, exec, &hash, &i.worker, now);
            let after = apply_checked("claim_task_update", &req, item, exec, cfg, S::Running);
            assert_eq!(after.attempt.number, exec.attempt.number);
            assert_eq!(after.runner.task_list_shard, None);
            assert_eq!(after.runner.worker.as_deref(), Some(i.worker.as_str()));
        }
        S::Queued if exec.attempt.token_hash.is_some() => {
            let req = decide::relaunch_update(&t, cfg, exec, &hash, now);
            let after = apply_checked("relaunch_update", &req, item, exec, cfg, S::Queued);
            assert_eq!(after.attempt.number, exec.attempt.number);
            assert_eq!(after.attempt.launches, exec.attempt.launches.max(1) + 1);
            assert_eq!(after.attempt.token_hash.as_deref(), Some(hash.as_str()));
        }
        S::Queued => {
            let req = decide::launch_update(&t, cfg, exec, &hash, now);
            let after = apply_checked("launch_update", &req, item, exec, cfg, S::Queued);
            assert_eq!((after.attempt.number, after.attempt.launches), (exec.attempt.number, 1));
            assert_eq!(after.timing.next_attempt_epoch, None);
        }
        _ => {}
    }
}

/// The monitor's verdict on the item, and the write it leads to.
fn check_monitor(exec: &ActivityExec, item: &Item, cfg: &EngineConfig, now: i64) {
    use ActivityState as S;
    let t = tables();
    // The monitor counts a heartbeat it has not seen from now at the
    // latest before it judges (design.md § 3.10).
    let armed = if decide::unseen_heartbeat(exec) {
        decide::seen_at(exec, now)
    } else {
        exec.clone()
    };
    let deadline = decide::next_deadline(&armed, cfg);
    if let Some((_, kind)) = deadline {
        let ok = match kind {
            Deadline::Relaunch => exec.state == S::Queued && exec.attempt.token_hash.is_some(),
            Deadline::NextAttempt => exec.state == S::Queued && exec.attempt.token_hash.is_none(),
            Deadline::ScheduleToStart => exec.state == S::Queued,
            Deadline::StartToClose | Deadline::ScheduleToClose => {
                matches!(exec.state, S::Queued | S::Preparing | S::Running)
            }
            Deadline::Heartbeat => exec.state == S::Running && exec.timeouts.heartbeat_enabled,
            Deadline::CancelGrace => exec.state == S::CancelledRunning,
            Deadline::Timer => exec.state == S::Running && exec.runner.runs.timer().is_some_and(|(s, _)| s.is_some()),
        };
        assert!(ok, "{kind:?} deadline in {}", exec.state);
    } else {
        assert!(
            !watched(exec) || exec.runner.runs.task_list().is_some(),
            "{} unwatched",
            exec.state
        );
    }
    let verdict = decide::monitor_verdict(exec, cfg, now);
    assert_eq!(
        exec.state.is_terminal(),
        verdict == Verdict::Settle,
        "{}: {verdict:?}",
        exec.state
    );
    match verdict {
        Verdict::Settle => {
            let req = decide::clear_due(&t, exec);
            if exec.timing.due_epoch.is_some() {
                let after = apply(&req.key, Some(item), &req.actions).unwrap();
                assert!(eval(req.cond.as_ref().unwrap(), Some(item)));
                let a: ActivityExec = serde_dynamo::from_item(after).expect("cleared item");
                assert_eq!(
                    (a.state, a.version, a.timing.due_epoch),
                    (exec.state, exec.version, None)
                );
            } else {
                assert!(!eval(req.cond.as_ref().unwrap(), Some(item)));
            }
        }
        Verdict::Clear => assert!(deadline.is_none()),
        Verdict::Wait => {
            let (d, _) = deadline.expect("waiting for a deadline");
            assert!(now < d + cfg.report_grace_seconds);
        }
        Verdict::Extend(d) => {
            assert_eq!(deadline.map(|x| x.0), Some(d));
            assert!(d > now && exec.timing.due_epoch != Some(d));
            let req = decide::extend_due(&t, exec, d, now);
            assert!(eval(req.cond.as_ref().unwrap(), Some(item)));
            let after = apply(&req.key, Some(item), &req.actions).unwrap();
            let a: ActivityExec = serde_dynamo::from_item(after).expect("extended item");
            assert_eq!((a.state, a.timing.due_epoch), (exec.state, Some(d)));
            check_due("extend_due", &a, cfg);
        }
        // This target builds activities only: a timer's firing is the
        // rules' unit tests' (decide/timer_tests.rs).
        Verdict::Fire => panic!("a timer's verdict for an activity"),
        Verdict::TimeOut {
            reason,
            stale_before,
            unchanged_heartbeat,
            retryable,
            kind,
        } => {
            if let Some(read) = unchanged_heartbeat {
                assert_eq!(exec.timing.heartbeat_time_epoch, read, "a heartbeat timeout's read");
            }
            let (d, k) = deadline.expect("a timeout needs a deadline");
            assert_eq!(k, kind);
            assert!(now >= d + cfg.report_grace_seconds);
            let next = contract::next_state(exec.runner.kind(), exec.state, Transition::TimedOut, Actor::Monitor)
                .unwrap_or_else(|e| panic!("the monitor times out what the contract refuses: {e}"));
            assert_eq!(next, S::TimedOut);
            if let Some(cut) = stale_before {
                assert!(
                    exec.timing.heartbeat_time_epoch < cut,
                    "heartbeat timeout on a fresh heartbeat ({} >= {cut})",
                    exec.timing.heartbeat_time_epoch
                );
            }
            let event_id = format!("timed-out:{}:{}", exec.activity_exec_id, exec.attempt.number);
            let change = Change {
                transition: Transition::TimedOut,
                next,
                event_id: &event_id,
            };
            let details = Details {
                error: Some(reason),
                at: Some(now),
                stale_before,
                no_retry: !retryable,
                ..Details::default()
            };
            write_transition("monitor timeout", exec, item, cfg, change, &details, now);
        }
        Verdict::Relaunch => {
            assert!(exec.state == S::Queued && exec.attempt.token_hash.is_some());
            assert!(exec.attempt.launches.max(1) < cfg.max_launch_attempts);
            let req = decide::relaunch_update(&t, cfg, exec, "h2", now);
            apply_checked("monitor relaunch", &req, item, exec, cfg, S::Queued);
        }
        Verdict::Launch => {
            assert!(exec.state == S::Queued && exec.attempt.token_hash.is_none());
            let req = decide::launch_update(&t, cfg, exec, "h2", now);
            apply_checked("monitor launch", &req, item, exec, cfg, S::Queued);
        }
        Verdict::FailNotStarted(reason) => {
            assert!(exec.state == S::Queued && exec.attempt.token_hash.is_some());
            let next = contract::next_state(exec.runner.kind(), exec.state, Transition::Failed, Actor::Engine)
                .expect("the engine fails a QUEUED attempt");
            let event_id = format!("not-started:{}:{}", exec.activity_exec_id, exec.attempt.number);
            let change = Change {
                transition: Transition::Failed,
                next,
                event_id: &event_id,
            };
            let details = Details {
                error: Some(reason),
                at: Some(now),
                ..Details::default()
            };
            write_transition(
                "monitor not started",
                exec,
                item,
                cfg,
                change,
                &details,
                now,
            );
        }
    }
}

fuzz_target!(|i: Input| {
    let cfg = i.cfg.get();
    let now = BASE + i64::from(i.now_ahead);
    let Some(generated) = exec_of(&i, &cfg, now) else {
        return;
    };
    let item = to_item(&generated);
    // The engine decides from the item as read (e.g. a JSON null output
    // reads back as none).
    let exec: ActivityExec = serde_dynamo::from_item(item.clone()).expect("the item reads back");
    assert_eq!(exec.state, generated.state);

    // The requested transition.
    let t = i.transition.get();
    let (actor, report) = match i.who {
        Who::Report { attempt, token } => {
            let token = if token { i.token.get() } else { None };
            match decide::report_actor(&exec, attempt.get(exec.attempt.number), token.as_deref()) {
                Ok(actor) => (Some(actor), true),
                Err(_) => (None, true),
            }
        }
        Who::Engine => (Some(Actor::Engine), false),
        Who::Monitor => (Some(Actor::Monitor), false),
    };
    if let Some(actor) = actor {
        let next = check_contract(
            exec.state,
            exec.attempt.token_hash.is_some(),
            t,
            actor,
            report,
        );
        if let Ok(next) = next {
            let event_id = match i.event {
                Ev::Fresh(k) => format!("e-{k}"),
                Ev::Parked(k) if !exec.trail.parked.is_empty() => exec.trail.parked
                    [usize::from(k) % exec.trail.parked.len()]
                .activity_event_id
                .clone(),
                Ev::InHistory(k) if !exec.trail.history.is_empty() => exec.trail.history
                    [usize::from(k) % exec.trail.history.len()]
                .event_id
                .clone(),
                _ => format!("e-last-{}", exec.version),
            };
            let details = Details {
                output: i.output.as_ref().map(Out::get),
                output_event_id: None,
                output_sha256: None,
                output_copy: None,
                error: i.error.clone(),
                at: if report {
                    None
                } else {
                    i.at.map(|a| now + i64::from(a % 100_000))
                },
                stale_before: None,
                unchanged_heartbeat: None,
                no_retry: false,
                unstorable: false,
            };
            let when = details.at.unwrap_or(now);
            let change = Change {
                transition: t,
                next,
                event_id: &event_id,
            };
            write_transition("transition", &exec, &item, &cfg, change, &details, when);
        }
    }
    check_attempts(&i, &exec, &item, &cfg, now);
    check_monitor(&exec, &item, &cfg, now);
});
