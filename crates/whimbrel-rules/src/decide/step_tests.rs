//! Unit tests of the one-step decisions: a transition, a workflow's move.

use super::tests::{cfg, item, running};
use super::*;
use crate::contract::WorkflowState;
use crate::dates::Timestamp;
use crate::keys::Tables;
use crate::write::eval::{apply, eval};

fn report(attempt: u32) -> Source {
    Source::Report {
        attempt: Some(attempt),
        token_hash: None,
    }
}

fn step(exec: &ActivityExec, t: Transition, source: &Source, event_id: &str) -> TransitionStep {
    let tables = Tables::new("t_");
    transition_step(
        &tables,
        &cfg(),
        exec,
        (t, source, event_id),
        &Details::default(),
        2000,
    )
}

#[test]
fn a_report_that_caused_the_last_change_is_a_redelivery() {
    let mut a = running(None, None);
    a.trail.last_event_id = Some("a::e1".into());
    let got = step(&a, Transition::Completed, &report(1), "a::e1");
    assert_eq!(got, TransitionStep::Redelivered);
}

#[test]
fn completed_while_running_is_applied_with_a_contract_condition() {
    let mut a = running(None, None);
    a.attempt.token_hash = Some("h".into());
    let TransitionStep::Apply { next, update, .. } =
        step(&a, Transition::Completed, &report(1), "e2")
    else {
        panic!("not applied");
    };
    assert_eq!(next, ActivityState::Completed);
    let before = item(&a);
    assert!(
        eval(update.cond.as_ref().unwrap(), Some(&before)),
        "{:?}\n{before:?}",
        update.cond
    );
    // The write itself refuses an item in a state the contract has no
    // COMPLETED from, even at the version read.
    let mut queued = before.clone();
    queued.insert("state".into(), crate::write::s("QUEUED"));
    assert!(!eval(update.cond.as_ref().unwrap(), Some(&queued)));
    let after = apply(&update.key, Some(&before), &update.actions).unwrap();
    assert_eq!(after["state"], crate::write::s("COMPLETED"));
}

#[test]
fn a_report_not_valid_yet_is_parked_once() {
    let mut a = running(None, None);
    a.state = ActivityState::Queued;
    a.attempt.token_hash = Some("h".into());
    let TransitionStep::Park(parked) = step(&a, Transition::Completed, &report(1), "e3") else {
        panic!("not parked");
    };
    assert_eq!(parked.activity_event_id, "e3");
    a.trail.parked.push(parked);
    let again = step(&a, Transition::Completed, &report(1), "e4");
    assert_eq!(again, TransitionStep::AlreadyParked, "same report, new row");
}

/// Anyone who may read the item must not learn the live attempt's token
/// from a parked report: only its hash is kept. A report parked by an
/// earlier version, token and all, is still judged by that token.
#[test]
fn a_parked_report_keeps_the_hash_of_its_token_never_the_token() {
    let token = "live-token";
    let mut a = running(None, None);
    a.state = ActivityState::Queued;
    a.attempt.token_hash = Some(crate::ids::token_hash(token));
    let tokened = Source::Report {
        attempt: Some(1),
        token_hash: Some(crate::ids::token_hash(token)),
    };
    let TransitionStep::Park(parked) = step(&a, Transition::Completed, &tokened, "e3") else {
        panic!("not parked");
    };
    assert_eq!(parked.attempt_token, None);
    assert_eq!(
        parked.attempt_token_hash,
        Some(crate::ids::token_hash(token))
    );
    let stored = serde_json::to_string(&parked).unwrap();
    assert!(!stored.contains(token), "{stored}");
    // Once RUNNING, the parked report applies as the attempt's own.
    a.state = ActivityState::Running;
    let source = Source::Report {
        attempt: parked.attempt,
        token_hash: parked.token_hash(),
    };
    assert!(applicable(&a, Transition::Completed, &source));
    let legacy = ParkedEvent {
        attempt_token_hash: None,
        attempt_token: Some(token.into()),
        ..parked.clone()
    };
    assert_eq!(legacy.token_hash(), parked.token_hash());
    let forged = ParkedEvent {
        attempt_token_hash: None,
        attempt_token: Some("guessed".into()),
        ..parked
    };
    let source = Source::Report {
        attempt: forged.attempt,
        token_hash: forged.token_hash(),
    };
    assert!(!applicable(&a, Transition::Completed, &source));
}

#[test]
fn a_report_from_a_stale_attempt_is_rejected() {
    let mut a = running(None, None);
    a.attempt.number = 2;
    let got = step(&a, Transition::Completed, &report(1), "e5");
    assert!(matches!(got, TransitionStep::Reject(_)), "{got:?}");
}

#[test]
fn a_claim_requires_a_state_the_contract_queues_from() {
    assert_eq!(
        contract::sources(
            crate::kind::NodeKind::Lambda,
            Transition::Queued,
            ActivityState::Queued
        ),
        vec![ActivityState::Requested, ActivityState::Ready]
    );
    assert!(contract::sources(
        crate::kind::NodeKind::Lambda,
        Transition::Completed,
        ActivityState::Queued
    )
    .is_empty());
}

#[test]
fn a_workflow_move_the_contract_has_not_is_refused_in_every_build() {
    let t = Tables::new("t_");
    let now = Timestamp::from_epoch(100);
    let back = WorkflowMove::new(WorkflowState::Completed, WorkflowState::Running, now, None);
    assert!(workflow_move(&t, "w::1", "w", &back).is_err());
    let end = WorkflowMove::new(
        WorkflowState::Running,
        WorkflowState::Failed,
        now,
        Some("x"),
    );
    let req = workflow_move(&t, "w::1", "w", &end).unwrap();
    let mut wf = std::collections::HashMap::new();
    wf.insert("state".to_string(), crate::write::s("RUNNING"));
    wf.insert("due_epoch".to_string(), crate::write::n(50));
    assert!(eval(req.cond.as_ref().unwrap(), Some(&wf)));
    // A workflow that completed as the monitor read it RUNNING (its
    // execution timeout's write, once a surviving mutant) stays
    // COMPLETED: the write requires the state it read.
    let mut completed = wf.clone();
    completed.insert("state".to_string(), crate::write::s("COMPLETED"));
    assert!(!eval(req.cond.as_ref().unwrap(), Some(&completed)));
    let after = apply(&req.key, Some(&wf), &req.actions).unwrap();
    assert_eq!(after["state"], crate::write::s("FAILED"));
    assert!(!after.contains_key("due_epoch"), "an end clears its marker");
    let owing = WorkflowMove {
        owes_until: Some(160),
        ..end
    };
    let req = workflow_move(&t, "w::1", "w", &owing).unwrap();
    let after = apply(&req.key, Some(&wf), &req.actions).unwrap();
    assert_eq!(after["due_epoch"], crate::write::n(160));
}

/// Issue 42 A.8 (sim seed 4543): a decision closed the execution (its
/// commit set `closed_by_decision` while the state is still RUNNING); the
/// execution's timeout, read RUNNING, must not end it otherwise. Only the
/// closing decision's own effect moves it.
#[test]
fn only_the_closing_decision_ends_an_execution_a_decision_closed() {
    let t = Tables::new("t_");
    let now = Timestamp::from_epoch(100);
    let mut wf = std::collections::HashMap::new();
    wf.insert("state".to_string(), crate::write::s("RUNNING"));
    let timeout = WorkflowMove::new(
        WorkflowState::Running,
        WorkflowState::Failed,
        now,
        Some("execution timeout"),
    );
    let req = workflow_move(&t, "w::1", "w", &timeout).unwrap();
    assert!(eval(req.cond.as_ref().unwrap(), Some(&wf)), "not closed");
    wf.insert("closed_by_decision".to_string(), crate::write::n(3));
    assert!(!eval(req.cond.as_ref().unwrap(), Some(&wf)), "closed by 3");
    let close = WorkflowMove {
        closing_decision: true,
        ..WorkflowMove::new(WorkflowState::Running, WorkflowState::Cancelled, now, None)
    };
    let req = workflow_move(&t, "w::1", "w", &close).unwrap();
    assert!(
        eval(req.cond.as_ref().unwrap(), Some(&wf)),
        "its own effect"
    );
}

/// Issue 42 B.5: a client scoped to `orders::*` writes a row of another
/// workflow under its own prefix; the engine refuses it. Ids without `::`
/// (existing clients) and names that contain `::` still pass.
/// A start request row `id` for workflow `name`, with no other field.
fn request_row(id: &str, name: &str) -> crate::model::WorkflowRequest {
    crate::model::WorkflowRequest {
        workflow_request_id: id.into(),
        workflow_name: name.into(),
        redrive_workflow_exec_id: None,
        when: None,
        when_epoch: None,
        source: None,
        manual: None,
        input: None,
        expires_at_epoch: None,
        cancel_workflow_exec_id: None,
        reason: None,
        parent: None,
    }
}

#[test]
fn a_request_id_must_be_scoped_to_its_own_workflow() {
    let row = request_row;
    let uuid = "4d3f6f3e-5b6a-4c1e-9a53-2f0c8d1e7b10";
    assert_eq!(
        check_request(&row(&format!("orders::{uuid}"), "orders")),
        Ok(true)
    );
    let forged = check_request(&row(&format!("orders::{uuid}"), "payroll")).unwrap_err();
    assert!(
        forged.starts_with("workflow_request_id is not scoped to workflow_name \"payroll\""),
        "{forged}"
    );
    assert!(check_request(&row(&format!("ordersx::{uuid}"), "orders")).is_err());
    assert!(check_request(&row("orders::batch-7", "payroll")).is_err());
    assert_eq!(check_request(&row("job-17", "payroll")), Ok(false));
    assert_eq!(
        check_request(&row(&format!("a::b::{uuid}"), "a::b")),
        Ok(true)
    );
    // docs/limits.md § 2: a workflow name of 128 bytes, not 129.
    let longest = "n".repeat(crate::plan::MAX_NAME_LEN);
    assert_eq!(check_request(&row("r-1", &longest)), Ok(false));
    let past = check_request(&row("r-1", &format!("{longest}n"))).unwrap_err();
    assert_eq!(past, "workflow_name is 129 bytes; at most 128 are allowed");
}

/// Issue 42 D (docs/limits.md § 2, Open 10): a request's `source` is free
/// text the execution item copies; the execution keeps at most 1,024
/// bytes of it (cut on a character boundary and marked, as reasons are),
/// so a long one starts its workflow instead of failing the item's write.
#[test]
fn a_request_source_is_kept_up_to_its_limit_and_cut_past_it() {
    let req = |source: String| crate::model::WorkflowRequest {
        source: Some(source),
        ..request_row("r-1", "w")
    };
    let now = Timestamp::from_epoch(1_000);
    let at = "s".repeat(MAX_SOURCE_BYTES);
    let (exec, why) = requested_exec(&req(at.clone()), now, &cfg());
    assert_eq!((exec.source, why), (Some(at), None));
    let past = format!(
        "{}é{}",
        "s".repeat(MAX_SOURCE_BYTES - 1),
        "t".repeat(409_000)
    );
    let (exec, why) = requested_exec(&req(past), now, &cfg());
    let kept = exec.source.expect("a source");
    assert!(
        kept.len() <= MAX_SOURCE_BYTES && kept.ends_with(" bytes cut]"),
        "{kept}"
    );
    assert_eq!(why, None, "not a failure");
}
