//! Signal waits (design.md § 9.2), against DynamoDB Local: a signal row
//! delivered from the stream completes a RUNNING wait of its name with its
//! input, once; a signal sent before the node waits is kept and delivered
//! at its release; a wait whose `timeout_seconds` pass is TIMED_OUT and
//! fails the workflow, unless a signal was written before the deadline;
//! bad signals are rejected with a reason, never retried.

use crate::common;

use crate::common::{stream_event, Harness};
use serde_json::json;
use whimbrel_core::contract::{ActivityState, WorkflowState};
use whimbrel_core::handlers;
use whimbrel_core::model::SignalRow;

fn approval() -> serde_json::Value {
    json!({"activities": [
        {"name": "prepare", "lambda": "f"},
        {"name": "approval", "signal": "approve", "timeout_seconds": 600,
         "depends_on": ["prepare"]},
        {"name": "publish", "lambda": "f", "depends_on": ["approval"]},
    ]})
}

/// Put `row` in the signal table, as a client does.
async fn put_signal(h: &Harness, row: &SignalRow) {
    h.store.put(&h.store.tables().signal(), row).await.unwrap();
}

/// Deliver `rows` as one stream batch of the signal table, through the
/// activity-event function's entry point; returns (applied, rejected,
/// retried).
async fn deliver_signals(h: &Harness, rows: &[SignalRow], seq: u64) -> (u64, u64, u64) {
    for r in rows {
        put_signal(h, r).await;
    }
    let table = h.store.tables().signal();
    let event = stream_event(&table, &["workflow_exec_id", "signal_key"], rows, seq);
    let (resp, sum) = handlers::client_rows(&h.engine, &event).await.unwrap();
    assert_eq!(common::failures(&resp).len() as u64, sum.retried);
    (sum.applied, sum.rejected, sum.retried)
}

#[tokio::test]
async fn a_signal_completes_its_wait_with_its_input_once() {
    let h = Harness::new().await;
    h.register("approval", approval()).await;
    let wf = h.start("approval").await;
    h.run_to_completion(&wf, "prepare").await;
    let wait = h.activity(&wf, "approval").await;
    assert_eq!(wait.state, ActivityState::Running);
    assert_eq!(
        wait.timing.due_epoch,
        Some(wait.timing.start_time_epoch + 600)
    );
    assert_eq!(
        h.launcher.launches_of("approval").len(),
        0,
        "nothing invoked"
    );
    let ok = SignalRow::new(&wf, "approve", "s-1", Some(json!({"by": "ana"})));
    assert_eq!(
        deliver_signals(&h, std::slice::from_ref(&ok), 1).await,
        (1, 0, 0)
    );
    let done = h.activity(&wf, "approval").await;
    assert_eq!(done.state, ActivityState::Completed);
    assert_eq!(done.outcome.output, Some(json!({"by": "ana"})));
    assert_eq!(
        h.launcher.payload("publish", 0).prerequisites["approval"],
        json!({"by": "ana"})
    );
    // The same record again, and a second signal: nothing changes.
    let again = SignalRow::new(&wf, "approve", "s-2", Some(json!({"by": "bo"})));
    deliver_signals(&h, &[ok, again], 5).await;
    let still = h.activity(&wf, "approval").await;
    assert_eq!(still.outcome.output, Some(json!({"by": "ana"})));
    assert_eq!(still.version, done.version, "applied once");
    h.run_to_completion(&wf, "publish").await;
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
}

#[tokio::test]
async fn a_signal_sent_before_the_wait_is_kept_and_delivered_at_its_release() {
    let h = Harness::new().await;
    h.register("approval", approval()).await;
    let wf = h.start("approval").await;
    // Sent while `prepare` runs: kept, not rejected.
    let early = SignalRow::new(&wf, "approve", "early", Some(json!("yes")));
    assert_eq!(deliver_signals(&h, &[early], 1).await, (1, 0, 0));
    assert_eq!(
        h.activity(&wf, "approval").await.state,
        ActivityState::Requested
    );
    h.run_to_completion(&wf, "prepare").await;
    let wait = h.activity(&wf, "approval").await;
    assert_eq!(wait.state, ActivityState::Completed);
    assert_eq!(wait.outcome.output, Some(json!("yes")));
    assert_eq!(h.launcher.launches_of("publish").len(), 1);
}

#[tokio::test]
async fn a_wait_times_out_unless_a_signal_was_written_before_its_deadline() {
    let h = Harness::new().await;
    h.register("approval", approval()).await;
    let wf = h.start("approval").await;
    h.run_to_completion(&wf, "prepare").await;
    let due = h.activity(&wf, "approval").await.timing.due_epoch.unwrap();
    assert_eq!(h.tick(due - 1).await.timed_out, 0);
    let report = h.tick(due + 200).await;
    assert_eq!(report.timed_out, 1, "{report:?}");
    let wait = h.activity(&wf, "approval").await;
    assert_eq!(wait.state, ActivityState::TimedOut);
    assert!(
        wait.outcome
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("no signal \"approve\""),
        "{:?}",
        wait.outcome.error
    );
    h.tick(due + 400).await;
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Failed);
    // A signal for the ended workflow is rejected with its reason.
    let late = SignalRow::new(&wf, "approve", "late", None);
    assert_eq!(deliver_signals(&h, &[late], 9).await, (0, 1, 0));

    // A signal row the stream never delivered (the release read before it
    // was written): the monitor reads it before the timeout.
    let wf2 = h.start("approval").await;
    h.run_to_completion(&wf2, "prepare").await;
    put_signal(
        &h,
        &SignalRow::new(&wf2, "approve", "quiet", Some(json!(7))),
    )
    .await;
    let due = h.activity(&wf2, "approval").await.timing.due_epoch.unwrap();
    let report = h.tick(due + 200).await;
    assert_eq!(report.timed_out, 0, "{report:?}");
    let wait = h.activity(&wf2, "approval").await;
    assert_eq!(
        (wait.state, wait.outcome.output),
        (ActivityState::Completed, Some(json!(7)))
    );
}

#[tokio::test]
async fn bad_signals_are_rejected_never_retried() {
    let h = Harness::new().await;
    h.register("approval", approval()).await;
    let wf = h.start("approval").await;
    let unknown = SignalRow::new("approval::nope", "approve", "x", None);
    let no_name = SignalRow::new("garbage", "approve", "x", None);
    let unwaited = SignalRow::new(&wf, "reject", "x", None);
    let mut forged = SignalRow::new(&wf, "approve", "x", None);
    forged.signal_key = "approve#y".into();
    let rows = [unknown, no_name, unwaited, forged];
    assert_eq!(deliver_signals(&h, &rows, 1).await, (0, 4, 0));
    // A malformed image (no name) is rejected too.
    let table = h.store.tables().signal();
    let bad = json!({"workflow_exec_id": wf, "signal_key": "k"});
    let event = stream_event(&table, &["workflow_exec_id", "signal_key"], &[bad], 20);
    let (resp, sum) = handlers::signals(&h.engine, &event).await.unwrap();
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(sum.rejected, 1, "{sum:?}");
    // A large input goes to an output row and reaches the dependent whole.
    h.run_to_completion(&wf, "prepare").await;
    let big = json!({"pad": "x".repeat(2000)});
    let row = SignalRow::new(&wf, "approve", "big", Some(big.clone()));
    assert_eq!(deliver_signals(&h, &[row], 30).await, (1, 0, 0));
    let wait = h.activity(&wf, "approval").await;
    assert!(wait.outcome.output_ref.is_some(), "{:?}", wait.outcome);
    assert_eq!(
        h.launcher.payload("publish", 0).prerequisites["approval"],
        big
    );
}

#[tokio::test]
async fn a_release_that_died_before_its_read_is_finished_by_the_owed_settle() {
    use whimbrel_core::contract::Transition;
    use whimbrel_core::engine::decide;
    let h = Harness::new().await;
    // No timeout: no deadline would ever read the signals for it.
    h.register(
        "forever",
        json!({"activities": [
            {"name": "prepare", "lambda": "f"},
            {"name": "approval", "signal": "approve", "depends_on": ["prepare"]},
        ]}),
    )
    .await;
    let wf = h.start("forever").await;
    // Sent early: its stream record finds the node not waiting yet.
    let early = SignalRow::new(&wf, "approve", "early", Some(json!(1)));
    assert_eq!(deliver_signals(&h, &[early], 1).await, (1, 0, 0));
    h.engine
        .apply_event(&h.attempt_event(&wf, "prepare", "RUNNING", 0))
        .await
        .unwrap();
    let owed = common::terminal_write_only(
        &h,
        &wf,
        "prepare",
        Transition::Completed,
        ActivityState::Completed,
        "done",
        Default::default(),
    )
    .await;
    // The settle released `approval` to RUNNING, then died before it read
    // the signals.
    let wait = h.activity(&wf, "approval").await;
    let prepare_id = h.activity(&wf, "prepare").await.activity_exec_id;
    let release = decide::release_and_queue_update(
        h.store.tables(),
        &h.config(),
        &wait,
        &prepare_id,
        None,
        h.now(),
    );
    h.store.update(release).await.unwrap();
    let wait = h.activity(&wf, "approval").await;
    assert_eq!(
        (wait.state, wait.timing.due_epoch),
        (ActivityState::Running, None)
    );
    // The monitor finishes the owed settle, which reads them.
    h.tick(owed).await;
    let wait = h.activity(&wf, "approval").await;
    assert_eq!(
        (wait.state, wait.outcome.output),
        (ActivityState::Completed, Some(json!(1)))
    );
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
}

/// Issue 42 B.4: a signaller may flood an execution with rows of up to
/// 256 KB, and every look for a kept signal read every row of the name,
/// so about 250 MB of rows crashed a 256 MB function, and then every
/// batch and monitor tick that reached the execution. A look reads at most
/// `MAX_SIGNALS_READ` rows, page by page: 150 rows of 100 KB sent before
/// the wait, and its release reads no more than 100 of them (read units
/// of the signal table's Query), and the wait still takes the earliest of
/// those it read.
#[tokio::test]
async fn a_flood_of_signal_rows_is_read_only_up_to_its_bound() {
    use whimbrel_core::model::MAX_SIGNALS_READ;
    let h = Harness::new().await;
    h.register("approval", approval()).await;
    let wf = h.start("approval").await;
    let pad = "x".repeat(100_000);
    for i in 0..150u32 {
        let mut row = SignalRow::new(
            &wf,
            "approve",
            &format!("s{i:03}"),
            Some(json!({"i": i, "pad": pad})),
        );
        row.when_epoch = Some(1_000_000 + i64::from(i));
        put_signal(&h, &row).await;
    }
    h.store.metrics().take_capacity();
    h.run_to_completion(&wf, "prepare").await;
    let read: f64 = (h.store.metrics().take_capacity().iter())
        .filter(|(k, _)| k.starts_with("Query") && k.contains("signal"))
        .map(|(_, c)| c.read)
        .sum();
    // A strongly consistent read of a 100 KB row is about 25 units (4 KB
    // each); the last 1 MB page may hold 10 rows past the bound. All 150
    // rows would be about 4,000.
    let bound = 25.0 * (MAX_SIGNALS_READ as f64 + 12.0);
    assert!(
        read > 0.0 && read <= bound,
        "{read} read units of signal rows; at most {bound}"
    );
    let wait = h.activity(&wf, "approval").await;
    assert_eq!(wait.state, ActivityState::Completed);
    // Its input (kept on an output row, being large) reaches `publish`.
    assert_eq!(
        h.launcher.payload("publish", 0).prerequisites["approval"]["i"],
        json!(0)
    );
}

/// Issue 42 B.3: a signaller's grant lets it put any row of the signal
/// table, so it could overwrite a kept signal (same key, other input)
/// before a wait took it, and the wait was COMPLETED with the forged
/// input; or make the row invalid so the real signal was never
/// delivered. Only what was inserted is delivered: the engine keeps its
/// own copy of each signal when it first applies it (its INSERT record),
/// and a look for kept signals takes the copies.
#[tokio::test]
async fn a_kept_signal_is_delivered_as_inserted_not_as_overwritten() {
    let h = Harness::new().await;
    h.register("approval", approval()).await;
    // Overwritten with another input, after its INSERT was applied.
    let wf = h.start("approval").await;
    let sent = SignalRow::new(&wf, "approve", "s-1", Some(json!({"amount": 10})));
    assert_eq!(
        deliver_signals(&h, std::slice::from_ref(&sent), 1).await,
        (1, 0, 0)
    );
    let forged = SignalRow {
        input: Some(json!({"amount": 1_000_000})),
        ..sent.clone()
    };
    put_signal(&h, &forged).await;
    h.run_to_completion(&wf, "prepare").await;
    let wait = h.activity(&wf, "approval").await;
    assert_eq!(
        (wait.state, wait.outcome.output),
        (ActivityState::Completed, Some(json!({"amount": 10})))
    );
    // Overwritten into a row that can never be delivered (its name no
    // longer matches its key).
    let wf2 = h.start("approval").await;
    let sent = SignalRow::new(&wf2, "approve", "s-1", Some(json!("yes")));
    assert_eq!(
        deliver_signals(&h, std::slice::from_ref(&sent), 3).await,
        (1, 0, 0)
    );
    let spoiled = SignalRow {
        name: "other".into(),
        ..sent.clone()
    };
    put_signal(&h, &spoiled).await;
    h.run_to_completion(&wf2, "prepare").await;
    let wait = h.activity(&wf2, "approval").await;
    assert_eq!(
        (wait.state, wait.outcome.output),
        (ActivityState::Completed, Some(json!("yes")))
    );
}

/// Issue 42 B.4 and docs/limits.md § 3: an execution keeps at most
/// `MAX_SIGNALS_PER_EXECUTION` signals (every valid one the engine
/// applies counts, whatever its name). Up to the limit each is kept and
/// the execution runs to its end with the earliest; the next is refused
/// with the reason and never delivered, even dated before all of them;
/// a record of a kept signal applied again is still kept (the count is
/// of signals, not of records).
#[tokio::test]
async fn an_execution_keeps_at_most_its_limit_of_signals_and_refuses_the_next() {
    use whimbrel_core::engine::EngineError;
    use whimbrel_core::model::MAX_SIGNALS_PER_EXECUTION;
    let h = Harness::new().await;
    h.register("approval", approval()).await;
    let wf = h.start("approval").await;
    let kept: Vec<SignalRow> = (0..MAX_SIGNALS_PER_EXECUTION)
        .map(|i| {
            let mut row = SignalRow::new(&wf, "approve", &format!("s{i:03}"), Some(json!(i)));
            row.when_epoch = Some(2_000_000 + i as i64);
            row
        })
        .collect();
    for (n, batch) in kept.chunks(25).enumerate() {
        let applied = deliver_signals(&h, batch, 1 + 100 * n as u64).await;
        assert_eq!(applied, (batch.len() as u64, 0, 0), "batch {n}");
    }
    let mut past = SignalRow::new(&wf, "approve", "early", Some(json!("past")));
    past.when_epoch = Some(1);
    put_signal(&h, &past).await;
    match h.engine.receive_signal(&past).await {
        Err(EngineError::Rejected(why)) => assert!(
            why.contains(&format!("at most {MAX_SIGNALS_PER_EXECUTION}")),
            "{why}"
        ),
        other => panic!("the signal past the limit is refused, not {other:?}"),
    }
    let last = &kept[MAX_SIGNALS_PER_EXECUTION - 1];
    assert_eq!(
        deliver_signals(&h, std::slice::from_ref(last), 900).await,
        (1, 0, 0),
        "a kept signal applied again is still kept"
    );
    h.run_to_completion(&wf, "prepare").await;
    let wait = h.activity(&wf, "approval").await;
    assert_eq!(
        (wait.state, wait.outcome.output),
        (ActivityState::Completed, Some(json!(0)))
    );
    h.run_to_completion(&wf, "publish").await;
    assert_eq!(h.workflow(&wf).await.state, WorkflowState::Completed);
}

/// Issue 42 B.4: a look for a wait's signal holds in memory only what it
/// must, whatever signallers wrote: the most an execution keeps
/// (`MAX_SIGNALS_PER_EXECUTION`, each of the largest input) plus as many
/// rows whose records are not applied yet, 52 MB of JSON in all. The
/// look's peak heap (the whole process's, through a counting allocator)
/// stays within a small part of the activity-event function's 256 MB.
#[tokio::test]
async fn a_look_over_the_most_and_largest_signals_fits_a_256_mb_function() {
    use whimbrel_core::model::{MAX_SIGNALS_PER_EXECUTION, MAX_SIGNAL_INPUT_BYTES};
    let h = Harness::new().await;
    h.register("approval", approval()).await;
    let wf = h.start("approval").await;
    // A string of n characters is n + 2 bytes of JSON.
    let pad = "x".repeat(MAX_SIGNAL_INPUT_BYTES - 2);
    let row = |i: usize| {
        let mut row = SignalRow::new(&wf, "approve", &format!("s{i:03}"), Some(json!(pad)));
        row.when_epoch = Some(3_000_000 + i as i64);
        row
    };
    for i in 0..MAX_SIGNALS_PER_EXECUTION {
        assert_eq!(
            deliver_signals(&h, &[row(i)], 1 + i as u64).await,
            (1, 0, 0)
        );
    }
    for i in MAX_SIGNALS_PER_EXECUTION..2 * MAX_SIGNALS_PER_EXECUTION {
        put_signal(&h, &row(i)).await;
    }
    let before = crate::HEAP.current_usage();
    crate::HEAP.reset_peak_usage();
    h.run_to_completion(&wf, "prepare").await;
    let peak = crate::HEAP.peak_usage().saturating_sub(before);
    let wait = h.activity(&wf, "approval").await;
    assert_eq!(wait.state, ActivityState::Completed);
    let bound = 8 << 20;
    assert!(
        peak <= bound,
        "the look's peak heap grew {peak} bytes; at most {bound}"
    );
}
