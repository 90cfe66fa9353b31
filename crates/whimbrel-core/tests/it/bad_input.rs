//! Garbage in, rejected without a panic: every file of the bad-input
//! corpus (`tests/bad-input/`, described by its `MANIFEST` and
//! `README.md`) fed to the handler of the function it names, on DynamoDB
//! Local, with one real workflow running so the files can point at real
//! activities.
//!
//! For each file: no panic; the outcome the manifest names (a rejection
//! with its reason's stable prefix, a skip, an invocation error, ...); no
//! batch item failure for a record that can never succeed; and nothing in
//! any table changed unless the manifest says what must change.
//!
//! Then a mixed batch: bad records interleaved with valid ones, one of
//! which meets a (simulated) transient DynamoDB failure: the valid ones
//! apply and the batch item failures name exactly the record to retry.
//!
//! Inputs that must not break the engine are kept as tests here too: a
//! 400 KB event id, an early COMPLETED with the deepest output, a binary
//! attribute in an event row, a sink output too deep for the workflow's
//! result.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::common::{failures, Harness};
use aws_sdk_dynamodb::types::AttributeValue;
use futures::future::BoxFuture;
use futures::FutureExt;
use futures::StreamExt;
use serde_json::{json, Value};
use whimbrel_core::contract::{ActivityState, WorkflowState};
use whimbrel_core::engine::{Applied, Engine, MonitorReport};
use whimbrel_core::handlers::{self, BatchSummary, Outcome};
use whimbrel_core::ids;
use whimbrel_core::model::ActivityEvent;
use whimbrel_core::store::{
    Action, Backend, Cond, Found, Item, KeyCond, Page, Store, StoreError, Write,
};

// ------------------------------------------------------------------ corpus

fn corpus_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/bad-input")
}

/// One line of `tests/bad-input/MANIFEST`.
#[derive(Debug, Clone)]
struct Case {
    category: String,
    file: String,
    function: String,
    expect: String,
    /// The expected reason's stable prefix, placeholders not yet
    /// substituted ("" = any).
    reason: String,
    what: String,
}

/// The corpus files as MANIFEST lists them, checked against the directory.
fn cases() -> Vec<Case> {
    let text = std::fs::read_to_string(corpus_dir().join("MANIFEST")).expect("MANIFEST");
    let mut cases = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let (fields, what) = line
            .split_once(" # ")
            .unwrap_or_else(|| panic!("MANIFEST line without ' # ': {line}"));
        // Four columns, then the reason: the rest, inner spaces kept.
        let mut columns = Vec::new();
        let mut rest = fields;
        for _ in 0..4 {
            rest = rest.trim_start();
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            columns.push(&rest[..end]);
            rest = &rest[end..];
        }
        let reason = match rest.trim() {
            "-" => "",
            r => r,
        };
        cases.push(Case {
            category: columns[0].into(),
            file: columns[1].into(),
            function: columns[2].into(),
            expect: columns[3].into(),
            reason: reason.into(),
            what: what.trim().into(),
        });
    }
    let listed: BTreeSet<String> = cases.iter().map(|c| c.file.clone()).collect();
    assert_eq!(listed.len(), cases.len(), "a file listed twice in MANIFEST");
    let on_disk: BTreeSet<String> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    assert_eq!(
        on_disk.difference(&listed).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "corpus files missing from MANIFEST"
    );
    assert_eq!(
        listed.difference(&on_disk).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "MANIFEST names files that do not exist"
    );
    cases
}

// ------------------------------------------------------------------ world

/// A harness with real workflows in known states, and the placeholder
/// values the corpus files use.
struct World {
    h: Harness,
    vars: Vec<(String, String)>,
}

impl World {
    fn var(&self, name: &str) -> &str {
        self.vars
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("no placeholder {name}"))
    }

    /// `text` with every `{{NAME}}` and `{{REPEAT:n:unit}}` expanded, and
    /// the default table prefix of stream ARNs replaced by this harness's.
    fn substitute(&self, text: &str) -> String {
        let mut out = text.replace(
            ":table/whimbrel_",
            &format!(":table/{}", self.h.store.tables().prefix),
        );
        for (k, v) in &self.vars {
            out = out.replace(&format!("{{{{{k}}}}}"), v);
        }
        while let Some(start) = out.find("{{REPEAT:") {
            let end = start + out[start..].find("}}").expect("closed REPEAT");
            let spec = &out[start + "{{REPEAT:".len()..end];
            let (count, unit) = spec.split_once(':').expect("REPEAT:n:unit");
            let count: usize = count.parse().expect("REPEAT count");
            out.replace_range(start..end + 2, &unit.repeat(count));
        }
        assert!(
            !out.contains("{{"),
            "unknown placeholder in {}",
            &out[out.find("{{").unwrap()..][..40.min(out.len() - out.find("{{").unwrap())]
        );
        out
    }

    fn activity_id(&self, var: &str) -> String {
        self.var(var).to_string()
    }
}

async fn apply(h: &Harness, ev: &ActivityEvent) -> Applied {
    h.engine.apply_event(ev).await.unwrap_or_else(|e| {
        panic!(
            "world set-up: {} {}: {e}",
            ev.activity_exec_id, ev.transition
        )
    })
}

fn token_of(h: &Harness, name: &str, i: usize) -> String {
    h.launcher
        .payload(name, i)
        .attempt_token
        .unwrap_or_else(|| panic!("{name}: launch {i} has no token"))
}

/// The world every corpus file runs against:
///
/// * workflow `corpus` (RUNNING): `work` RUNNING (attempt 1, launched with
///   a token), `after` REQUESTED (waits for `work`), `guarded` RUNNING
///   (`require_tokens`), `again` RUNNING as attempt 2 (attempt 1 FAILED
///   and was retried), and with `idle`, `idle` QUEUED (launched, not
///   started);
/// * workflow `finished` (COMPLETED): `done` COMPLETED;
/// * workflow `solo` (RUNNING): `only` RUNNING, its only activity.
async fn world(idle: bool) -> World {
    let h = Harness::new().await;
    let mut acts = vec![
        json!({"name": "work", "lambda": "noop"}),
        json!({"name": "after", "lambda": "noop", "depends_on": ["work"]}),
        json!({"name": "guarded", "lambda": "noop", "require_tokens": true}),
        json!({"name": "again", "lambda": "noop",
               "retry": {"max_attempts": 2, "interval_seconds": 0}}),
    ];
    if idle {
        acts.push(json!({"name": "idle", "lambda": "noop"}));
    }
    h.register("corpus", json!({"version": 1, "activities": acts}))
        .await;
    h.register(
        "finished",
        json!({"activities": [{"name": "done", "lambda": "noop"}]}),
    )
    .await;
    h.register(
        "solo",
        json!({"activities": [{"name": "only", "lambda": "noop"}]}),
    )
    .await;

    let req = h.request("corpus", Some(json!({"n": 1})));
    h.put_request(&req).await;
    h.engine.start_workflow(&req).await.expect("start corpus");
    let wf = ids::workflow_exec_id("corpus", &req.workflow_request_id);
    apply(&h, &h.attempt_event(&wf, "work", "RUNNING", 0)).await;
    apply(&h, &h.attempt_event(&wf, "guarded", "RUNNING", 0)).await;
    apply(&h, &h.attempt_event(&wf, "again", "RUNNING", 0)).await;
    let mut failed = h.attempt_event(&wf, "again", "FAILED", 0);
    failed.error = Some("Boom: the first attempt failed".into());
    assert_eq!(
        apply(&h, &failed).await,
        Applied::State(ActivityState::Queued),
        "again: retried"
    );
    apply(&h, &h.attempt_event(&wf, "again", "RUNNING", 1)).await;

    let fin = h.start("finished").await;
    h.run_to_completion(&fin, "done").await;
    let solo = h.start("solo").await;
    apply(&h, &h.attempt_event(&solo, "only", "RUNNING", 0)).await;

    for (w, name, state) in [
        (&wf, "work", ActivityState::Running),
        (&wf, "after", ActivityState::Requested),
        (&wf, "guarded", ActivityState::Running),
        (&wf, "again", ActivityState::Running),
        (&fin, "done", ActivityState::Completed),
        (&solo, "only", ActivityState::Running),
    ] {
        assert_eq!(h.activity(w, name).await.state, state, "world: {name}");
    }
    assert_eq!(h.activity(&wf, "again").await.attempt.number, 2);
    assert_eq!(
        h.workflow(&fin).await.state,
        WorkflowState::Completed,
        "world: finished"
    );
    if idle {
        assert_eq!(h.activity(&wf, "idle").await.state, ActivityState::Queued);
    }
    // The world stands at this second while its cases run: on a loaded
    // machine they take minutes, and a deadline of the world's own (the
    // retried attempt's) came due under a tick case that must change
    // nothing (make test, 2026-12-07).
    h.clock.freeze(h.now());

    let work = ids::activity_exec_id(&wf, "work");
    let token = token_of(&h, "work", 0);
    let (name, uuid) = work.rsplit_once("::").unwrap();
    let mut vars = vec![
        ("PREFIX", h.store.tables().prefix.clone()),
        ("WORKFLOW_EXEC_ID", wf.clone()),
        ("WORKFLOW_REQUEST_ID", req.workflow_request_id.clone()),
        (
            "ACTIVITY_EXEC_ID_UPPER",
            format!("{name}::{}", uuid.to_uppercase()),
        ),
        ("ACTIVITY_EXEC_ID", work.clone()),
        ("TOKEN_HASH", ids::token_hash(&token)),
        ("TOKEN_UPPER", token.to_uppercase()),
        ("TOKEN", token),
        (
            "LAST_EVENT_ID",
            h.activity(&wf, "work")
                .await
                .last_event()
                .expect("work has a last event"),
        ),
        (
            "REQUESTED_ACTIVITY_EXEC_ID",
            ids::activity_exec_id(&wf, "after"),
        ),
        (
            "GUARDED_ACTIVITY_EXEC_ID",
            ids::activity_exec_id(&wf, "guarded"),
        ),
        ("GUARDED_TOKEN", token_of(&h, "guarded", 0)),
        (
            "RETRIED_ACTIVITY_EXEC_ID",
            ids::activity_exec_id(&wf, "again"),
        ),
        ("STALE_TOKEN", token_of(&h, "again", 0)),
        ("RETRIED_TOKEN", token_of(&h, "again", 1)),
        ("DONE_ACTIVITY_EXEC_ID", ids::activity_exec_id(&fin, "done")),
        ("DONE_WORKFLOW_EXEC_ID", fin.clone()),
        (
            "SOLO_ACTIVITY_EXEC_ID",
            ids::activity_exec_id(&solo, "only"),
        ),
        ("SOLO_WORKFLOW_EXEC_ID", solo.clone()),
        ("SOLO_TOKEN", token_of(&h, "only", 0)),
    ];
    if idle {
        vars.push(("IDLE_ACTIVITY_EXEC_ID", ids::activity_exec_id(&wf, "idle")));
        vars.push(("IDLE_TOKEN", token_of(&h, "idle", 0)));
    }
    World {
        h,
        vars: vars.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
    }
}

// ------------------------------------------------------------------ tables

/// A canonical text of an attribute value (maps sorted), for comparing
/// table contents.
fn canonical(v: &AttributeValue) -> Value {
    match v {
        AttributeValue::S(s) => json!({ "S": s }),
        AttributeValue::N(n) => json!({ "N": n }),
        AttributeValue::Bool(b) => json!({ "BOOL": b }),
        AttributeValue::Null(b) => json!({ "NULL": b }),
        AttributeValue::B(b) => json!({ "B": format!("{:?}", b.as_ref()) }),
        AttributeValue::Ss(v) => json!({ "SS": v.iter().collect::<BTreeSet<_>>() }),
        AttributeValue::Ns(v) => json!({ "NS": v.iter().collect::<BTreeSet<_>>() }),
        AttributeValue::Bs(v) => {
            json!({ "BS": v.iter().map(|b| format!("{:?}", b.as_ref())).collect::<BTreeSet<_>>() })
        }
        AttributeValue::L(l) => json!({ "L": l.iter().map(canonical).collect::<Vec<_>>() }),
        AttributeValue::M(m) => {
            let m: BTreeMap<&String, Value> = m.iter().map(|(k, v)| (k, canonical(v))).collect();
            json!({ "M": m })
        }
        other => json!({ "?": format!("{other:?}") }),
    }
}

fn item_text(item: &std::collections::HashMap<String, AttributeValue>) -> String {
    let m: BTreeMap<&String, Value> = item.iter().map(|(k, v)| (k, canonical(v))).collect();
    serde_json::to_string(&m).unwrap()
}

/// Every item of every table of the harness (Scan), as canonical text,
/// sorted: table name → items.
async fn snapshot(h: &Harness) -> BTreeMap<String, Vec<String>> {
    let t = h.store.tables();
    let client = h.store.client().expect("a DynamoDB store");
    let mut out = BTreeMap::new();
    for table in [
        t.install_status(),
        t.workflow_request(),
        t.activity_event(),
        t.workflow_exec(),
        t.activity_exec(),
        t.activity_exec_dependency(),
        t.workflow_lambda(),
    ] {
        let mut items = Vec::new();
        let mut start: Option<std::collections::HashMap<String, AttributeValue>> = None;
        loop {
            let page = client
                .scan()
                .table_name(&table)
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .unwrap_or_else(|e| panic!("scan {table}: {e:?}"));
            items.extend(page.items().iter().map(item_text));
            match page.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => break,
            }
        }
        items.sort();
        out.insert(table, items);
    }
    out
}

/// Items added and removed between two snapshots, per table.
fn diff(
    before: &BTreeMap<String, Vec<String>>,
    after: &BTreeMap<String, Vec<String>>,
) -> BTreeMap<String, (Vec<String>, Vec<String>)> {
    let mut out = BTreeMap::new();
    for (table, items) in after {
        let was: BTreeSet<&String> = before.get(table).into_iter().flatten().collect();
        let now: BTreeSet<&String> = items.iter().collect();
        let added: Vec<String> = now.difference(&was).map(|s| s.to_string()).collect();
        let removed: Vec<String> = was.difference(&now).map(|s| s.to_string()).collect();
        if !added.is_empty() || !removed.is_empty() {
            out.insert(table.clone(), (added, removed));
        }
    }
    out
}

fn short(s: &str) -> String {
    if s.len() <= 300 {
        return s.to_string();
    }
    let mut end = 300;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &s[..end], s.len())
}

fn describe_diff(d: &BTreeMap<String, (Vec<String>, Vec<String>)>) -> String {
    d.iter()
        .map(|(t, (a, r))| {
            format!(
                "{t}: +{:?} -{:?}",
                a.iter().map(|s| short(s)).collect::<Vec<_>>(),
                r.iter().map(|s| short(s)).collect::<Vec<_>>()
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

// ------------------------------------------------------------------ running

/// What a handler did with one corpus file.
#[derive(Debug)]
enum Ran {
    /// The bytes are not JSON: the Lambda runtime's `LambdaEvent<Value>`
    /// deserialization fails and the handler is never called.
    Unparseable(String),
    /// A stream handler's response and summary.
    Batch(Vec<String>, BatchSummary),
    /// The heartbeat monitor's report.
    Tick(MonitorReport),
    /// The handler's invocation error.
    PayloadError(String),
    /// The handler panicked.
    Panicked(String),
}

async fn run(w: &World, case: &Case) -> Ran {
    let bytes = std::fs::read(corpus_dir().join(&case.file)).unwrap();
    // The function mains take `LambdaEvent<Value>`: the runtime parses the
    // bytes with serde_json before the handler runs.
    let text = match std::str::from_utf8(&bytes) {
        Ok(t) => w.substitute(t),
        Err(_) => {
            return match serde_json::from_slice::<Value>(&bytes) {
                Err(e) => Ran::Unparseable(e.to_string()),
                Ok(_) => Ran::Panicked("not UTF-8, yet parsed as JSON".into()),
            }
        }
    };
    let payload: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => return Ran::Unparseable(e.to_string()),
    };
    let e = &w.h.engine;
    let fut = async {
        match case.function.as_str() {
            "activity-event" => match handlers::activity_events(e, &payload).await {
                Ok((resp, sum)) => Ran::Batch(failures(&resp), sum),
                Err(err) => Ran::PayloadError(err.to_string()),
            },
            "workflow-request" => match handlers::workflow_requests(e, &payload).await {
                Ok((resp, sum)) => Ran::Batch(failures(&resp), sum),
                Err(err) => Ran::PayloadError(err.to_string()),
            },
            "heartbeat-monitor" => match handlers::scheduled_event(e, &payload).await {
                Ok(report) => Ran::Tick(report),
                Err(err) => Ran::PayloadError(err.to_string()),
            },
            other => panic!("{}: unknown function {other}", case.file),
        }
    };
    match AssertUnwindSafe(fut).catch_unwind().await {
        Ok(r) => r,
        Err(p) => Ran::Panicked(
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default(),
        ),
    }
}

/// True when `got` starts with `want` or one of its ` || ` alternatives.
fn matches_reason(got: &str, want: &str) -> bool {
    want.split(" || ").any(|w| got.starts_with(w))
}

/// The one record's outcome of a batch, or why there is not exactly one.
fn only_outcome(sum: &BatchSummary) -> Result<&Outcome, String> {
    match sum.records.as_slice() {
        [r] => Ok(&r.outcome),
        rs => Err(format!("{} records reported, expected 1", rs.len())),
    }
}

fn outcome_text(o: &Outcome) -> String {
    match o {
        Outcome::Rejected(r) => format!("Rejected({})", short(r)),
        Outcome::Retry(r) => format!("Retry({})", short(r)),
        other => format!("{other:?}"),
    }
}

/// Check one case on `w` (whose tables are `before`); returns the problems.
async fn check(w: &World, case: &Case, before: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let launches = w.h.launcher.launch_count();
    let ran = run(w, case).await;
    let after = snapshot(&w.h).await;
    let changed = diff(before, &after);
    let reason = w.substitute(&case.reason);
    let mut problems = Vec::new();
    let mut p = |s: String| problems.push(s);
    if let Ran::Panicked(msg) = &ran {
        p(format!("PANIC: {msg}"));
        return problems;
    }
    // Whatever the case: a record that can never succeed is never named.
    if let Ran::Batch(retry, sum) = &ran {
        if !retry.is_empty() {
            p(format!(
                "batch item failures {retry:?} for a record that can never succeed: {}",
                sum.records
                    .iter()
                    .map(|r| outcome_text(&r.outcome))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    let unchanged = |p: &mut dyn FnMut(String)| {
        if !changed.is_empty() {
            p(format!("tables changed: {}", describe_diff(&changed)));
        }
        if w.h.launcher.launch_count() != launches {
            p(format!(
                "{} activity launches",
                w.h.launcher.launch_count() - launches
            ));
        }
    };
    match (case.expect.as_str(), &ran) {
        ("unparseable", Ran::Unparseable(_)) => unchanged(&mut p),
        ("payload-error", Ran::PayloadError(e)) => {
            if !matches_reason(e, &reason) {
                p(format!("invocation error {e:?}, expected {reason:?}…"));
            }
            unchanged(&mut p);
        }
        ("empty", Ran::Batch(_, sum)) => {
            if !sum.records.is_empty() {
                p(format!("{} records reported", sum.records.len()));
            }
            unchanged(&mut p);
        }
        ("rejected" | "skipped" | "applied-nochange", Ran::Batch(_, sum)) => {
            match only_outcome(sum) {
                Ok(Outcome::Rejected(r)) if case.expect == "rejected" => {
                    if !matches_reason(r, &reason) {
                        p(format!(
                            "rejected with {:?}, expected {:?}…",
                            short(r),
                            short(&reason)
                        ));
                    }
                }
                Ok(Outcome::Skipped) if case.expect == "skipped" => {}
                Ok(Outcome::Applied) if case.expect == "applied-nochange" => {}
                Ok(o) => p(format!(
                    "outcome {}, expected {}",
                    outcome_text(o),
                    case.expect
                )),
                Err(e) => p(e),
            }
            unchanged(&mut p);
        }
        ("failed-workflow", Ran::Batch(_, sum)) => {
            match only_outcome(sum) {
                Ok(Outcome::Applied) => {}
                Ok(o) => p(format!("outcome {}, expected Applied", outcome_text(o))),
                Err(e) => p(e),
            }
            // Exactly one new item: the workflow exec, FAILED with the reason.
            let exec_table = w.h.store.tables().workflow_exec();
            let added: Vec<&String> = match changed.get(&exec_table) {
                Some((a, r)) if r.is_empty() => a.iter().collect(),
                _ => vec![],
            };
            let others: BTreeMap<_, _> =
                changed.iter().filter(|(t, _)| **t != exec_table).collect();
            if added.len() != 1 || !others.is_empty() {
                p(format!(
                    "expected one new workflow exec and nothing else; changed: {}",
                    describe_diff(&changed)
                ));
            } else {
                let item: BTreeMap<String, Value> = serde_json::from_str(added[0]).unwrap();
                let state = item["state"]["S"].as_str().unwrap_or("");
                let error = item["error"]["S"].as_str().unwrap_or("");
                if state != "FAILED" || !matches_reason(error, &reason) {
                    p(format!(
                        "workflow exec {state} with error {:?}, expected FAILED with {reason:?}…",
                        short(error)
                    ));
                }
            }
            if w.h.launcher.launch_count() != launches {
                p("activities were launched".into());
            }
        }
        ("tick", Ran::Tick(report)) => {
            // Looking at due items is not doing something.
            let acted = MonitorReport {
                swept: 0,
                ..report.clone()
            };
            if acted != MonitorReport::default() {
                p(format!("the tick did something: {report:?}"));
            }
            unchanged(&mut p);
        }
        ("applied", Ran::Batch(_, sum)) => {
            match only_outcome(sum) {
                Ok(Outcome::Applied) => {}
                Ok(o) => p(format!("outcome {}, expected Applied", outcome_text(o))),
                Err(e) => p(e),
            }
            // "<VAR> <STATE> [error prefix]"
            let mut parts = case.reason.splitn(3, ' ');
            let var = parts.next().unwrap_or("");
            let state = parts.next().unwrap_or("");
            let error = parts.next().map(|e| w.substitute(e));
            let id = w.activity_id(var);
            match w.h.engine.find_activity(&id).await {
                Ok(Some(x)) => {
                    if x.state.as_str() != state {
                        p(format!("{var} is {}, expected {state}", x.state));
                    }
                    if x.state.is_terminal() && x.timing.due_epoch.is_some() {
                        p(format!(
                            "{var} is {} but its side effects are still owed (due_epoch {:?})",
                            x.state, x.timing.due_epoch
                        ));
                    }
                    if let Some(e) = error {
                        let got = x.outcome.error.clone().unwrap_or_default();
                        if !got.starts_with(&e) {
                            p(format!(
                                "{var} error {:?}, expected {:?}…",
                                short(&got),
                                short(&e)
                            ));
                        }
                    }
                }
                other => p(format!("{var}: {other:?}")),
            }
        }
        (want, got) => p(format!("expected {want}, got {}", ran_text(got))),
    }
    problems
}

fn ran_text(r: &Ran) -> String {
    match r {
        Ran::Batch(retry, sum) => format!(
            "batch: failures {retry:?}, outcomes [{}]",
            sum.records
                .iter()
                .map(|r| outcome_text(&r.outcome))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Ran::Unparseable(e) => format!("unparseable: {e}"),
        Ran::Tick(t) => format!("tick: {t:?}"),
        Ran::PayloadError(e) => format!("invocation error: {e}"),
        Ran::Panicked(m) => format!("panic: {m}"),
    }
}

/// Run `cases`: those expecting `applied` each on a fresh world (they
/// change it), the others one after the other on one shared world, whose
/// tables must not change unless the case says how. Returns the problems,
/// one line per case.
async fn run_cases(cases: &[Case]) -> Vec<String> {
    let mut problems = Vec::new();
    let shared = world(false).await;
    let mut before = snapshot(&shared.h).await;
    for case in cases.iter().filter(|c| c.expect != "applied") {
        let found = check(&shared, case, &before).await;
        if !found.is_empty() {
            problems.push(format!(
                "{} [{}]: {}",
                case.file,
                case.what,
                found.join(" | ")
            ));
        }
        // Re-read: a case may change the tables (a FAILED workflow exec).
        before = snapshot(&shared.h).await;
    }
    // Each applied case on a world of its own: four at a time (DynamoDB
    // Local answers one while it works on another), judged in order.
    let applied = cases
        .iter()
        .filter(|c| c.expect == "applied")
        .map(|case| async move {
            let fresh = world(false).await;
            let before = snapshot(&fresh.h).await;
            (case, check(&fresh, case, &before).await)
        });
    let judged: Vec<_> = futures::stream::iter(applied).buffered(4).collect().await;
    for (case, found) in judged {
        if !found.is_empty() {
            problems.push(format!(
                "{} [{}]: {}",
                case.file,
                case.what,
                found.join(" | ")
            ));
        }
    }
    problems
}

/// Every corpus file, through its function's handler: the outcome the
/// MANIFEST names, no panic, no batch item failure for a record that can
/// never succeed, no table change for a rejected record.
#[tokio::test]
async fn every_corpus_file_is_handled_as_its_manifest_says() {
    let all = cases();
    assert!(all.len() >= 100, "{} cases", all.len());
    let problems = run_cases(&all).await;
    assert!(
        problems.is_empty(),
        "{} of {} corpus files are not handled as MANIFEST says:\n{}",
        problems.len(),
        all.len(),
        problems.join("\n")
    );
    // Counted by category, for the record.
    let mut by: BTreeMap<&str, usize> = BTreeMap::new();
    for c in &all {
        *by.entry(c.category.as_str()).or_default() += 1;
    }
    eprintln!("bad-input corpus: {} files {by:?}", all.len());
}

// ------------------------------------------------------------------ mixed batch

/// A backend over another one that fails every Query of the activity exec
/// table for one hash key with a transient (throttling) error while
/// `active` is set: a stand-in for a throttled partition.
#[derive(Debug)]
struct Throttled {
    inner: Arc<dyn Backend>,
    table: String,
    key: String,
    active: Arc<AtomicBool>,
}

impl Throttled {
    fn hit(&self, table: &str, key: &KeyCond) -> bool {
        self.active.load(Ordering::SeqCst)
            && table == self.table
            && matches!(&key.hash.1, whimbrel_core::store::Value::S(s) if *s == self.key)
    }
    fn throttled() -> StoreError {
        StoreError::Transient {
            op: "Query",
            message: "ProvisionedThroughputExceededException: injected by the test".into(),
        }
    }
}

impl Backend for Throttled {
    fn get(
        &self,
        t: String,
        k: Item,
        p: Vec<String>,
    ) -> BoxFuture<'_, Result<Option<Item>, StoreError>> {
        self.inner.get(t, k, p)
    }
    fn put(&self, t: String, i: Item, c: Option<Cond>) -> BoxFuture<'_, Result<(), StoreError>> {
        self.inner.put(t, i, c)
    }
    fn update(
        &self,
        t: String,
        k: Item,
        a: Vec<Action>,
        c: Option<Cond>,
        r: bool,
    ) -> BoxFuture<'_, Result<Option<Item>, StoreError>> {
        self.inner.update(t, k, a, c, r)
    }
    fn transact(&self, w: Vec<Write>) -> BoxFuture<'_, Result<(), StoreError>> {
        self.inner.transact(w)
    }
    fn batch_put(
        &self,
        t: String,
        items: Vec<Item>,
    ) -> BoxFuture<'_, Result<Vec<Item>, StoreError>> {
        self.inner.batch_put(t, items)
    }
    fn batch_get(&self, t: String, k: Vec<Item>) -> BoxFuture<'_, Result<Found, StoreError>> {
        self.inner.batch_get(t, k)
    }
    fn query(
        &self,
        t: String,
        i: Option<String>,
        k: KeyCond,
        s: Option<Item>,
    ) -> BoxFuture<'_, Result<Page, StoreError>> {
        if self.hit(&t, &k) {
            return futures::future::ready(Err(Self::throttled())).boxed();
        }
        self.inner.query(t, i, k, s)
    }
    fn query_limited(
        &self,
        t: String,
        i: Option<String>,
        k: KeyCond,
        limit: i32,
    ) -> BoxFuture<'_, Result<Vec<Item>, StoreError>> {
        if self.hit(&t, &k) {
            return futures::future::ready(Err(Self::throttled())).boxed();
        }
        self.inner.query_limited(t, i, k, limit)
    }
    fn pause(&self, m: u64) -> BoxFuture<'_, ()> {
        self.inner.pause(m)
    }
}

/// The first record of corpus file `file`, substituted for `w`.
fn corpus_record(w: &World, file: &str) -> Value {
    let text = std::fs::read_to_string(corpus_dir().join(file)).unwrap();
    let v: Value = serde_json::from_str(&w.substitute(&text)).unwrap();
    v["Records"][0].clone()
}

/// A stream record for event row `ev` (the Lambda shape of `common`).
fn record_of(w: &World, ev: &ActivityEvent) -> Value {
    w.h.event_batch(std::slice::from_ref(ev), 0)["Records"][0].clone()
}

/// ~10 bad records interleaved with RUNNING then COMPLETED of a real QUEUED
/// activity, and a valid COMPLETED of another activity whose partition is
/// throttled: the valid ones apply, every bad one is rejected or skipped
/// with its reason, and the batch item failures name exactly the throttled
/// record. Redelivered from that record on (as Lambda does) once the
/// throttling stops, it applies and nothing else changes.
#[tokio::test]
async fn a_mixed_batch_applies_the_valid_records_and_retries_only_the_transient_one() {
    let w = world(true).await;
    let h = &w.h;
    let wf = w.var("WORKFLOW_EXEC_ID").to_string();
    let manifest: BTreeMap<String, Case> =
        cases().into_iter().map(|c| (c.file.clone(), c)).collect();

    let running = h.attempt_event(&wf, "idle", "RUNNING", 0);
    let mut completed = h.attempt_event(&wf, "idle", "COMPLETED", 0);
    completed.output = Some(json!({"words": 42}));
    let guarded_done = h.attempt_event(&wf, "guarded", "COMPLETED", 0);
    // A bad record about the same activity as the valid ones, between them
    // (its group runs in stream order).
    let mut lower = h.event(&wf, "idle", "completed");
    lower.attempt = Some(1);

    // What each record of the batch must lead to.
    enum Want {
        Applied,
        Rejected(String),
        Skipped,
        Retried,
    }
    let bad = |file: &str| -> (Value, Want) {
        let c = &manifest[file];
        let want = match c.expect.as_str() {
            "rejected" => Want::Rejected(w.substitute(&c.reason)),
            "skipped" => Want::Skipped,
            other => panic!("{file}: {other} is not a bad record"),
        };
        (corpus_record(&w, file), want)
    };
    let mut batch: Vec<(Value, Want)> = vec![
        bad("record-null.json"),
        (record_of(&w, &running), Want::Applied),
        bad("types-transition-number.json"),
        bad("table-foreign-orders.json"),
        (
            record_of(&w, &lower),
            Want::Rejected("unknown transition \"completed\"".into()),
        ),
        bad("tokens-forged.json"),
        bad("event-name-modify.json"),
        (record_of(&w, &guarded_done), Want::Retried),
        bad("ids-exec-unknown.json"),
        (record_of(&w, &completed), Want::Applied),
        bad("tokens-stale-attempt.json"),
        bad("transition-running-never-launched.json"),
        bad("types-output-binary.json"),
        bad("tokens-attempt-2.json"),
    ];
    // Sequence numbers in batch order, as one shard delivers them.
    for (i, (rec, _)) in batch.iter_mut().enumerate() {
        if rec.get("dynamodb").is_some_and(Value::is_object) {
            rec["dynamodb"]["SequenceNumber"] = json!(format!("{}", 9000 + i));
        }
    }
    let payload = json!({ "Records": batch.iter().map(|(r, _)| r.clone()).collect::<Vec<_>>() });
    let guarded = w.var("GUARDED_ACTIVITY_EXEC_ID").to_string();

    let active = Arc::new(AtomicBool::new(true));
    let throttled = Engine::with_environment(
        Store::with_backend(
            Arc::new(Throttled {
                inner: h.store.backend().clone(),
                table: h.store.tables().activity_exec(),
                key: guarded.clone(),
                active: active.clone(),
            }),
            h.store.tables().clone(),
        ),
        h.launcher.clone(),
        h.config(),
        h.clock.clone(),
    );
    let before = snapshot(h).await;
    let (resp, sum) = handlers::activity_events(&throttled, &payload)
        .await
        .expect("a stream batch");

    // Outcomes, matched by sequence number (the null record has none).
    let mut problems = Vec::new();
    for (i, (rec, want)) in batch.iter().enumerate() {
        let seq = rec["dynamodb"]["SequenceNumber"]
            .as_str()
            .map(str::to_string);
        let got = sum
            .records
            .iter()
            .find(|r| r.sequence == seq)
            .map(|r| &r.outcome);
        let ok = match (want, got) {
            (Want::Applied, Some(Outcome::Applied)) => true,
            (Want::Rejected(p), Some(Outcome::Rejected(r))) => r.starts_with(p.as_str()),
            (Want::Skipped, Some(Outcome::Skipped)) => true,
            (Want::Retried, Some(Outcome::Retry(r))) => r.contains("injected by the test"),
            _ => false,
        };
        if !ok {
            problems.push(format!("record {i} ({seq:?}): got {got:?}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_eq!(sum.records.len(), batch.len());
    assert_eq!(
        failures(&resp),
        vec!["9007".to_string()],
        "exactly the throttled record is retried"
    );
    assert_eq!((sum.applied, sum.skipped, sum.retried), (2, 1, 1));
    assert_eq!(sum.rejected, batch.len() as u64 - 4);

    let idle = h.activity(&wf, "idle").await;
    assert_eq!(idle.state, ActivityState::Completed);
    assert_eq!(idle.outcome.output, Some(json!({"words": 42})));
    assert!(idle.trail.parked.is_empty());
    assert_eq!(h.activity(&wf, "work").await.state, ActivityState::Running);
    assert_eq!(
        h.activity(&wf, "guarded").await.state,
        ActivityState::Running,
        "the throttled record did not apply"
    );
    // What changed: idle's item and its workflow's counters, nothing else.
    let changed = diff(&before, &snapshot(h).await);
    only_changed(h, &changed, &[w.var("IDLE_ACTIVITY_EXEC_ID"), &wf]);

    // Lambda redelivers from the failed record on; the partition is back.
    active.store(false, Ordering::SeqCst);
    let rest = json!({ "Records": batch[7..].iter().map(|(r, _)| r.clone()).collect::<Vec<_>>() });
    let before = snapshot(h).await;
    let (resp, sum) = handlers::activity_events(&throttled, &rest)
        .await
        .expect("redelivery");
    assert!(failures(&resp).is_empty(), "{resp:?}");
    // guarded COMPLETED, and idle's COMPLETED again (already applied).
    assert_eq!((sum.applied, sum.retried), (2, 0), "{:?}", sum.records);
    assert_eq!(
        h.activity(&wf, "guarded").await.state,
        ActivityState::Completed
    );
    let changed = diff(&before, &snapshot(h).await);
    only_changed(h, &changed, &[&guarded, &wf]);
}

/// Every item added or removed in `changed` is an activity exec, a
/// workflow exec, or a count group of a workflow (its range key, the
/// workflow exec id) whose text holds one of `ids`.
fn only_changed(h: &Harness, changed: &BTreeMap<String, (Vec<String>, Vec<String>)>, ids: &[&str]) {
    let t = h.store.tables();
    for (table, (added, removed)) in changed {
        let counts = *table == t.activity_exec_dependency()
            && added.iter().chain(removed).all(|i| i.contains("#count-"));
        assert!(
            *table == t.activity_exec() || *table == t.workflow_exec() || counts,
            "{table} changed: {}",
            describe_diff(changed)
        );
        for item in added.iter().chain(removed) {
            let key = if *table == t.activity_exec() || counts {
                "activity_exec_id"
            } else {
                "workflow_exec_id"
            };
            let v: Value = serde_json::from_str(item).unwrap();
            let id = v[key]["S"].as_str().unwrap_or("");
            assert!(
                ids.contains(&id),
                "{table}: {id} changed: {}",
                describe_diff(changed)
            );
        }
    }
}

// ------------------------------------------------------------------ rows the engine reads back

/// An output of `depth` nested objects around a string: with 31 it is as
/// deep as an attribute of a DynamoDB item may be (32 is refused).
fn nested(depth: usize) -> Value {
    let mut v = json!("leaf");
    for i in 0..depth {
        v = json!({ format!("d{i}"): v });
    }
    v
}

/// A COMPLETED whose output is as deep as DynamoDB allows, written by the
/// live attempt before its RUNNING was applied (the stream delivers the
/// rows of one activity in any order): it is parked, then applied after
/// RUNNING, as the same COMPLETED delivered in order would be.
#[tokio::test]
async fn an_early_completed_with_the_deepest_output_is_applied_after_running() {
    // Fixed: an output too deep to park is parked by reference and read
    // back from the event row when RUNNING lets it apply.
    // Was (DynamoDB Local 2.6.1): the first delivery returns Applied
    // (not Parked) and leaves `idle` FAILED with error "UNSTORABLE:
    // COMPLETED could not be stored: UpdateItem: invalid request:
    // ValidationException: ExpressionAttributeValues contains invalid value:
    // Nesting Levels have exceeded supported limits: … for key :v2".
    // Parking puts the output two levels deeper (`parked` is a list of
    // maps), past DynamoDB's 32, and the park's permanent write error takes
    // the path meant for a COMPLETED whose own write is too large
    // (`unstorable`), which records FAILED.
    // The same row delivered after RUNNING completes the activity
    // (accepted-output-deep.json). A valid report is lost for a delivery
    // order the stream is allowed to produce.
    let w = world(true).await;
    let h = &w.h;
    let wf = w.var("WORKFLOW_EXEC_ID").to_string();
    let mut done = h.attempt_event(&wf, "idle", "COMPLETED", 0);
    done.output = Some(nested(31));
    // The activity could write the row: DynamoDB accepts it.
    h.put_event(&done).await;
    let running = h.attempt_event(&wf, "idle", "RUNNING", 0);
    h.put_event(&running).await;

    let (retry, sum) = h.deliver(std::slice::from_ref(&done), 1).await;
    assert!(retry.is_empty(), "{retry:?}");
    let idle = h.activity(&wf, "idle").await;
    assert_eq!(
        (idle.state, sum.parked, idle.outcome.error.as_deref()),
        (ActivityState::Queued, 1, None),
        "the early COMPLETED waits for RUNNING"
    );
    let (retry, _) = h.deliver(std::slice::from_ref(&running), 2).await;
    assert!(retry.is_empty(), "{retry:?}");
    let idle = h.activity(&wf, "idle").await;
    assert_eq!(
        idle.state,
        ActivityState::Completed,
        "{:?}",
        idle.outcome.error
    );
    assert_eq!(idle.outcome.output, Some(nested(31)));
}

/// The heartbeat monitor reads an activity's event rows back before it
/// times it out (reports still in flight). A row no event can be made of
/// (here a binary attribute, which any client of the event table can
/// write; its stream record is rejected) must not stop it from timing the
/// activity out.
#[tokio::test]
async fn a_binary_attribute_in_an_event_row_does_not_blind_the_monitor() {
    // Fixed (the rows are now converted one by one, a hostile one skipped).
    // Was: every tick past the deadline reports `errors: 1` for it,
    // and `only` stays RUNNING for good (log: "heartbeat
    // monitor: will try again next tick"). `apply_in_flight` reads the rows
    // with `Store::batch_get::<serde_json::Value>`, and serde_json::Value
    // cannot hold a DynamoDB B (bytes) value: the whole read fails with a
    // Shape error before the `from_value::<ActivityEvent>` filter meant for
    // hostile rows is reached. The activity is never timed out, its
    // workflow never ends.
    let w = world(false).await;
    let h = &w.h;
    let only = w.var("SOLO_ACTIVITY_EXEC_ID").to_string();
    let client = h.store.client().unwrap();
    let event_id = format!("{only}::{}", uuid::Uuid::new_v4());
    client
        .put_item()
        .table_name(h.store.tables().activity_event())
        .item("activity_event_id", AttributeValue::S(event_id.clone()))
        .item("activity_exec_id", AttributeValue::S(only.clone()))
        .item("transition", AttributeValue::S("COMPLETED".into()))
        .item(
            "output",
            AttributeValue::B(aws_smithy_types::Blob::new(vec![0u8, 1, 2])),
        )
        .send()
        .await
        .expect("a client may write this row");
    // Its stream record is rejected, never retried.
    let record = json!({"Records": [{
        "eventID": "b1", "eventName": "INSERT", "eventVersion": "1.1",
        "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
        "dynamodb": {"ApproximateCreationDateTime": 1795306413,
            "Keys": {"activity_event_id": {"S": event_id}, "activity_exec_id": {"S": only}},
            "NewImage": {"activity_event_id": {"S": event_id}, "activity_exec_id": {"S": only},
                "transition": {"S": "COMPLETED"}, "output": {"B": "AAEC"}},
            "SequenceNumber": "1", "SizeBytes": 120, "StreamViewType": "NEW_IMAGE"},
        "eventSourceARN": format!("arn:aws:dynamodb:us-east-1:000000000000:table/{}/stream/x",
            h.store.tables().activity_event())}]});
    let (resp, sum) = handlers::activity_events(&h.engine, &record).await.unwrap();
    assert!(failures(&resp).is_empty());
    assert_eq!(sum.rejected, 1, "{:?}", sum.records);

    // Past the start-to-close deadline (default 3600 s) and the report grace.
    let at = h.now() + h.config().default_start_to_close_seconds + 60;
    let report = h.tick(at).await;
    let solo = w.var("SOLO_WORKFLOW_EXEC_ID").to_string();
    let x = h.activity(&solo, "only").await;
    // (The world's other RUNNING activities time out at this tick too.)
    assert_eq!(report.errors, 0, "{report:?}");
    assert_eq!(x.state, ActivityState::TimedOut, "{report:?}");
}

/// A workflow's sink activity COMPLETED with an output as deep as an event
/// row may hold: the workflow completes (its result kept on the item, or
/// left on the activity when it cannot be), at the latest at the monitor's
/// next tick after the settle grace.
#[tokio::test]
async fn a_sink_with_the_deepest_output_completes_its_workflow() {
    // Fixed: a result DynamoDB refuses for good stays on the activities
    // (`result_in_activities`). Was: the delivery is Rejected("UpdateItem: invalid request:
    // ValidationException: Nesting Levels have exceeded supported limits")
    // although `only` is COMPLETED (with its due marker still set); then
    // every tick reports `errors: 1` and the workflow stays RUNNING, no
    // `result`, no `result_in_activities`. `finish_workflow` sets `result`
    // = {"only": output}, one level deeper than the output, past DynamoDB's
    // 32 levels; the permanent error is not turned into
    // `result_in_activities` as an oversized result is.
    let w = world(false).await;
    let h = &w.h;
    let solo = w.var("SOLO_WORKFLOW_EXEC_ID").to_string();
    let mut done = h.attempt_event(&solo, "only", "COMPLETED", 0);
    done.output = Some(nested(31));
    // The activity could write the row: DynamoDB accepts it.
    h.put_event(&done).await;
    let (retry, _) = h.deliver(std::slice::from_ref(&done), 1).await;
    assert!(retry.is_empty(), "{retry:?}");
    let at = h.now() + h.config().settle_grace_seconds + 30;
    let report = h.tick(at).await;
    assert_eq!(report.errors, 0, "{report:?}");
    assert_eq!(
        h.activity(&solo, "only").await.state,
        ActivityState::Completed
    );
    let wf = h.workflow(&solo).await;
    assert_eq!(wf.state, WorkflowState::Completed);
    assert!(wf.result.is_some() || wf.result_in_activities == Some(true));
}
