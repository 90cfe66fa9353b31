//! The `whimbrel` command against DynamoDB Local started by the tests:
//! install, register, start, event, heartbeat, status, list, result, show,
//! graph; one-line errors, and clap's own for usage errors.

use crate::common;

use std::process::{Command, Output};

use serde_json::Value;
use whimbrel_core::engine::Applied;

fn whimbrel(endpoint: &str, prefix: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_whimbrel"))
        .args(args)
        .env("WHIMBREL_ENDPOINT_URL", endpoint)
        .env("WHIMBREL_TABLE_PREFIX", prefix)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env("RUST_LOG", "warn")
        .output()
        .expect("run whimbrel")
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn field<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}\t")))
        .unwrap_or_else(|| panic!("no {name} in {out}"))
}

/// The request row `whimbrel start` inserted (its id and workflow).
async fn request_row(
    h: &common::Harness,
    request_id: &str,
    workflow: &str,
) -> whimbrel_core::model::WorkflowRequest {
    let key = std::collections::HashMap::from([
        ("workflow_request_id".to_string(), common::sv(request_id)),
        ("workflow_name".to_string(), common::sv(workflow)),
    ]);
    h.store
        .get(&h.store.tables().workflow_request(), key)
        .await
        .unwrap()
        .expect("request row inserted")
}

/// Issue 42 B.5: `whimbrel register --allow-*` stores the registration's
/// allow-lists (a flag given as `''` allows none, one left out any), and a
/// start whose plan names a Lambda outside them fails with the reason.
#[test]
fn register_keeps_what_a_workflow_may_name_and_a_start_past_it_fails() {
    let endpoint = common::dynamodb_endpoint();
    let prefix = format!("c{}_", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let run = |args: &[&str]| whimbrel(&endpoint, &prefix, args);
    stdout(&run(&["install"]));
    let dir = std::env::temp_dir().join(format!("whimbrel-cli-allow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("plan.json");
    std::fs::write(
        &plan,
        r#"{"activities":[{"name":"pay","lambda":"payroll"}]}"#,
    )
    .unwrap();
    let plan = plan.to_str().unwrap();
    #[rustfmt::skip]
    stdout(&run(&["register", "orders", "--definition", plan,
        "--allow-lambda", "whimbrel-task-orders-*", "--allow-lambda", "orders-*",
        "--allow-task-list", ""]));
    let out = stdout(&run(&["start", "orders"]));
    let request_id = field(&out, "workflow_request_id").to_string();
    let wf = field(&out, "workflow_exec_id").to_string();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let h = common::Harness::with_prefix(&prefix).await;
        let reg = h.engine.registration_of("orders").await.unwrap().unwrap();
        let allow = reg.allow.expect("allow stored");
        let lambdas = vec!["whimbrel-task-orders-*".to_string(), "orders-*".to_string()];
        assert_eq!(allow.lambdas, Some(lambdas));
        assert_eq!(allow.task_lists, Some(vec![]));
        assert_eq!(allow.workflows, None);
        let row = request_row(&h, &request_id, "orders").await;
        h.engine.start_workflow(&row).await.unwrap();
    });
    let out = stdout(&run(&["status", &wf]));
    assert!(out.lines().next().unwrap().contains("FAILED"), "{out}");
    let why = "\"payroll\" is not among the registration's allowed lambdas";
    assert!(out.contains(why), "{out}");
}

#[test]
fn install_register_start_and_status_against_dynamodb() {
    let endpoint = common::dynamodb_endpoint();
    let prefix = format!("c{}_", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let run = |args: &[&str]| whimbrel(&endpoint, &prefix, args);

    // Every table of the schema: the limit table the tenth, the episodic
    // executions' log (design.md § 10.2) the eleventh.
    let tables =
        whimbrel_core::install::table_names(&whimbrel_core::keys::Tables::new(&prefix)).len();
    assert_eq!(tables, 11);
    let out = stdout(&run(&["install"]));
    assert_eq!(
        out.lines().filter(|l| l.ends_with("\tcreated")).count(),
        tables,
        "{out}"
    );
    // Idempotent.
    let out = stdout(&run(&["install"]));
    assert_eq!(
        out.lines().filter(|l| l.ends_with("\texists")).count(),
        tables,
        "{out}"
    );

    let dir = std::env::temp_dir().join(format!("whimbrel-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("plan.json");
    std::fs::write(
        &plan,
        r#"{"version":1,"activities":[{"name":"only","lambda":"noop"}]}"#,
    )
    .unwrap();
    stdout(&run(&[
        "register",
        "static",
        "--definition",
        plan.to_str().unwrap(),
    ]));
    let bad = dir.join("bad.json");
    std::fs::write(
        &bad,
        r#"{"activities":[{"name":"a","lambda":"f","depends_on":["a"]}]}"#,
    )
    .unwrap();
    let o = run(&["register", "broken", "--definition", bad.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown activity"));

    // `start` inserts a request row; run it through the engine in-process
    // (no Lambda here), then look at it with `status`.
    let out = stdout(&run(&["start", "static", "--input", r#"{"k": 1}"#]));
    let request_id = field(&out, "workflow_request_id").to_string();
    let wf = field(&out, "workflow_exec_id").to_string();
    let o = run(&["status", &wf]);
    assert!(!o.status.success(), "not created yet");
    assert!(String::from_utf8_lossy(&o.stderr).starts_with("whimbrel: error: no workflow exec"));

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let h = common::Harness::with_prefix(&prefix).await;
        let row = request_row(&h, &request_id, "static").await;
        assert_eq!(row.input, Some(serde_json::json!({"k": 1})));
        assert_eq!(row.manual, None);
        h.engine.start_workflow(&row).await.unwrap();
    });
    let activity = whimbrel_core::ids::activity_exec_id(&wf, "only");
    // `event` inserts event rows; read them back and apply them in-process.
    let running = stdout(&run(&["event", &activity, "RUNNING"]));
    let completed = stdout(&run(&[
        "event",
        &activity,
        "COMPLETED",
        "--output",
        r#"{"n": 3}"#,
    ]));
    let ids: Vec<String> = [running, completed]
        .iter()
        .map(|o| field(o, "activity_event_id").to_string())
        .collect();
    rt.block_on(async {
        let h = common::Harness::with_prefix(&prefix).await;
        for id in &ids {
            let key = std::collections::HashMap::from([
                ("activity_event_id".to_string(), common::sv(id)),
                ("activity_exec_id".to_string(), common::sv(&activity)),
            ]);
            let ev: whimbrel_core::model::ActivityEvent = h
                .store
                .get(&h.store.tables().activity_event(), key)
                .await
                .unwrap()
                .expect("event row inserted");
            h.engine.apply_event(&ev).await.unwrap();
        }
    });
    let out = stdout(&run(&["status", &wf]));
    assert!(out.lines().next().unwrap().contains("COMPLETED"), "{out}");
    assert!(
        out.contains("only") && out.contains("result: {\"only\":{\"n\":3}}"),
        "{out}"
    );
    let json: Value =
        serde_json::from_str(&stdout(&run(&["status", &wf, "--output", "json"]))).unwrap();
    assert_eq!(json["workflow"]["state"], "COMPLETED");
    assert_eq!(json["activities"][0]["state"], "COMPLETED");
    // `list` finds it by state (GSI, eventually consistent on AWS).
    let listed = stdout(&run(&["list", "--state", "COMPLETED"]));
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(&format!("{wf}\tCOMPLETED\t")) && l.contains("1/1 ended")),
        "{listed}"
    );
    assert!(!stdout(&run(&["list"])).contains(&wf), "not RUNNING");
    let json: Value = serde_json::from_str(&stdout(&run(&[
        "list",
        "--state",
        "completed",
        "--output",
        "json",
    ])))
    .unwrap();
    let found = json
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["workflow_exec_id"] == wf.as_str())
        .unwrap_or_else(|| panic!("{wf} in {json}"));
    assert_eq!(found["state"], "COMPLETED");
    assert_eq!(found["ended_count"], 1);
    assert!(found.get("plan").is_none(), "a summary: {found}");
    // clap's whole error: the value, the possible ones, exit code 2.
    let o = run(&["list", "--state", "DONE"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("'DONE'")
            && err.contains("[possible values: REQUESTED, RUNNING, COMPLETED, FAILED, CANCELLED]"),
        "{err}"
    );
    let result: Value =
        serde_json::from_str(&stdout(&run(&["result", &wf, "--output", "json"]))).unwrap();
    assert_eq!(result, serde_json::json!({"only": {"n": 3}}));
    // Heartbeat on a finished activity prints its state.
    assert_eq!(stdout(&run(&["heartbeat", &activity])).trim(), "COMPLETED");
}

#[test]
fn usage_errors_print_clap_s_whole_message_and_exit_2() {
    for (args, expected) in [
        (&["frobnicate"][..], "unrecognized subcommand 'frobnicate'"),
        (&["register", "w"][..], "--lambda <LAMBDA>"),
        (
            &["status", "x", "--output", "yaml"][..],
            "[possible values: table, json]",
        ),
    ] {
        let o = whimbrel("http://127.0.0.1:9", "whimbrel_", args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
        assert!(
            err.contains("For more information, try '--help'."),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn errors_are_one_line_with_a_non_zero_exit() {
    // Nothing listens on port 9 of loopback.
    let unreachable = whimbrel(
        "http://127.0.0.1:9",
        "whimbrel_",
        &["status", "wordcount::0e7c2c36-3d5c-4c3b-8a53-2f0c6f8c1d11"],
    );
    assert_eq!(unreachable.status.code(), Some(1));
    let err = String::from_utf8_lossy(&unreachable.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("whimbrel: error: "), "{err}");

    for args in [
        &["event", "x::y", "EXPLODE"][..],
        &["start", "w", "--input", "{not json"][..],
        &["status", "not-an-id"][..],
    ] {
        let o = whimbrel("http://127.0.0.1:9", "whimbrel_", args);
        assert!(!o.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("whimbrel: error: "), "{args:?}: {err}");
    }
}

/// Apply the cancel request the CLI printed (`workflow_request_id\t<id>`)
/// as the workflow-request function does from the stream.
async fn apply_cancel_request(h: &common::Harness, out: &str) -> Applied {
    let id = out
        .lines()
        .find_map(|l| l.strip_prefix("workflow_request_id\t"))
        .expect("the request's id");
    let key = std::collections::HashMap::from([
        ("workflow_request_id".to_string(), common::sv(id)),
        ("workflow_name".to_string(), common::sv("three")),
    ]);
    let row: whimbrel_core::model::WorkflowRequest = h
        .store
        .get(&h.store.tables().workflow_request(), key)
        .await
        .unwrap()
        .expect("cancel request inserted");
    h.engine.cancel_workflow(&row).await.unwrap()
}

/// `whimbrel cancel` works where tokens are required: it asks through the
/// workflow request table, not with tokenless activity rows.
#[test]
fn cancel_requests_a_cancel_for_every_activity_that_has_not_ended() {
    let endpoint = common::dynamodb_endpoint();
    let prefix = format!("c{}_", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let run = |args: &[&str]| whimbrel(&endpoint, &prefix, args);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let wf = rt.block_on(async {
        let h = common::Harness::with_prefix(&prefix).await;
        h.register(
            "three",
            serde_json::json!({"require_tokens": true, "activities": [
                {"name": "done", "lambda": "noop"},
                {"name": "busy", "lambda": "noop"},
                {"name": "waiting", "lambda": "noop", "depends_on": ["busy"]}
            ]}),
        )
        .await;
        let wf = h.start("three").await;
        for t in ["RUNNING", "COMPLETED"] {
            let ev = h.attempt_event(&wf, "done", t, 0);
            h.engine.apply_event(&ev).await.unwrap();
        }
        let running = h.attempt_event(&wf, "busy", "RUNNING", 0);
        h.engine.apply_event(&running).await.unwrap();
        // The running attempt's own acknowledgement, for later.
        (wf.clone(), h.attempt_event(&wf, "busy", "CANCEL", 0))
    });
    let (wf, acknowledgement) = wf;
    let out = stdout(&run(&[
        "cancel",
        &wf,
        "--reason",
        "operator said so",
        "--wait",
        "0",
    ]));
    rt.block_on(async {
        let h = common::Harness::with_prefix(&prefix).await;
        use whimbrel_core::contract::{ActivityState, WorkflowState};
        let applied = apply_cancel_request(&h, &out).await;
        assert_eq!(applied, Applied::Workflow(WorkflowState::Running));
        let busy = h.activity(&wf, "busy").await;
        assert_eq!(busy.state, ActivityState::CancelledRunning);
        assert_eq!(busy.outcome.error.as_deref(), Some("operator said so"));
        assert_eq!(
            h.activity(&wf, "waiting").await.state,
            ActivityState::Cancelled
        );
        assert_eq!(
            h.activity(&wf, "done").await.state,
            ActivityState::Completed
        );
        assert_eq!(h.workflow(&wf).await.state, WorkflowState::Running);
        // A second request changes nothing, and a tokenless CANCEL row
        // cannot end CANCELLED_RUNNING.
        let again = stdout(&run(&["cancel", &wf, "--reason", "again", "--wait", "0"]));
        apply_cancel_request(&h, &again).await;
        assert_eq!(
            h.activity(&wf, "busy").await.state,
            ActivityState::CancelledRunning
        );
        assert!(h
            .engine
            .apply_event(&h.event(&wf, "busy", "CANCEL"))
            .await
            .is_err());
        assert_eq!(h.workflow(&wf).await.state, WorkflowState::Running);
        // The running attempt acknowledges at its next heartbeat.
        h.engine.apply_event(&acknowledgement).await.unwrap();
        assert_eq!(h.workflow(&wf).await.state, WorkflowState::Cancelled);
        // Nothing to cancel any more: refused, nothing inserted.
        let ended = run(&["cancel", &wf, "--wait", "0"]);
        assert!(!ended.status.success());
        let err = String::from_utf8_lossy(&ended.stderr);
        assert!(err.contains("already ended CANCELLED"), "{err}");
    });
}

#[test]
fn show_lists_every_transition_in_order_with_its_cause() {
    let endpoint = common::dynamodb_endpoint();
    let prefix = format!("c{}_", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let run = |args: &[&str]| whimbrel(&endpoint, &prefix, args);
    let rt = tokio::runtime::Runtime::new().unwrap();
    // A Lambda activity that fails its first attempt (retried at once),
    // then a task-list activity a worker claims and completes.
    let wf = rt.block_on(async {
        let h = common::Harness::with_prefix(&prefix).await;
        h.register(
            "flow",
            serde_json::json!({"activities": [
                {"name": "fetch", "lambda": "noop",
                 "retry": {"max_attempts": 2, "interval_seconds": 0}},
                {"name": "work", "task_list": "cli-tests", "depends_on": ["fetch"]}
            ]}),
        )
        .await;
        let wf = h.start("flow").await;
        let mut failed = h.attempt_event(&wf, "fetch", "FAILED", 0);
        failed.error = Some("Busy: try later".into());
        h.engine.apply_event(&failed).await.unwrap();
        for t in ["RUNNING", "COMPLETED"] {
            let ev = h.attempt_event(&wf, "fetch", t, 1);
            h.engine.apply_event(&ev).await.unwrap();
        }
        let engine = whimbrel_core::engine::Engine::with_environment(
            h.store.clone(),
            (),
            h.config(),
            h.clock.clone(),
        );
        let worker = whimbrel_core::worker::Worker::new(
            engine,
            "cli-tests",
            "cli-worker",
            whimbrel_core::worker::WorkerOptions::default(),
        );
        let task = worker.claim().await.unwrap().expect("work is claimable");
        let id = task
            .completed(serde_json::json!({"ok": true}))
            .await
            .unwrap();
        let row = h
            .event_row(&whimbrel_core::ids::activity_exec_id(&wf, "work"), &id)
            .await;
        h.engine.apply_event(&row).await.unwrap();
        assert_eq!(
            h.workflow(&wf).await.state,
            whimbrel_core::contract::WorkflowState::Completed
        );
        wf
    });

    let json: Value =
        serde_json::from_str(&stdout(&run(&["show", &wf, "--output", "json"]))).unwrap();
    assert_eq!(json["state"], "COMPLETED");
    let rows = json["timeline"].as_array().unwrap();
    let seen: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{} {}→{} {} {}",
                r["activity"].as_str().unwrap_or("-"),
                r["from"].as_str().unwrap_or("-"),
                r["to"].as_str().unwrap(),
                r["actor"].as_str().unwrap(),
                r["attempt"]
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            "- -→REQUESTED client null",
            "- REQUESTED→RUNNING engine null",
            "fetch REQUESTED→QUEUED engine 1",
            "fetch QUEUED→QUEUED client 1",
            "fetch QUEUED→QUEUED engine 2",
            "fetch QUEUED→RUNNING client 2",
            "fetch RUNNING→COMPLETED client 2",
            "work REQUESTED→READY engine null",
            "work READY→QUEUED engine 1",
            "work QUEUED→RUNNING worker 1",
            "work RUNNING→COMPLETED client 1",
            "- RUNNING→COMPLETED engine null",
        ],
        "{json:#}"
    );
    assert_eq!(rows[3]["transition"], "FAILED");
    assert_eq!(rows[3]["error"], "Busy: try later");
    assert!(rows[3]["next_attempt_epoch"].is_i64());
    assert_eq!(rows[9]["detail"], "cli-worker");
    let epochs: Vec<i64> = rows.iter().map(|r| r["epoch"].as_i64().unwrap()).collect();
    assert!(epochs.windows(2).all(|w| w[0] <= w[1]), "{epochs:?}");

    let table = stdout(&run(&["show", &wf]));
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with(&format!("workflow {wf}  COMPLETED  started ")),
        "{table}"
    );
    assert_eq!(lines.len(), 2 + rows.len(), "{table}");
    for (line, expected) in lines[2..].iter().zip([
        "client (request from tests)",
        "engine (plan stored)",
        "engine (launch)",
        "client event ",
        "engine (launch)",
        "client event ",
        "client event ",
        "engine (launch)",
        "engine (launch)",
        "worker cli-worker",
        "client event ",
        "engine (ended)",
    ]) {
        assert!(line.contains(expected), "{expected:?} in {line:?}\n{table}");
    }
    assert!(
        lines[5].contains("fetch")
            && lines[5].contains("FAILED: Busy: try later (next attempt at "),
        "{table}"
    );
}

/// The wordcount decider's plan shape (examples/src/lib.rs): 8 parallel
/// `count-N` activities feeding `merge`.
fn wordcount_plan() -> Value {
    let mut activities: Vec<Value> = (0..8)
        .map(|i| {
            serde_json::json!({"name": format!("count-{i}"), "lambda": "wordcount-count",
                "heartbeat_timeout_seconds": 30, "start_to_close_seconds": 300})
        })
        .collect();
    activities.push(
        serde_json::json!({"name": "merge", "lambda": "wordcount-merge",
        "depends_on": (0..8).map(|i| format!("count-{i}")).collect::<Vec<_>>(),
        "start_to_close_seconds": 120}),
    );
    serde_json::json!({"version": 1, "activities": activities, "require_tokens": true})
}

fn temp_dir(what: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "whimbrel-cli-{what}-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn has_dot() -> bool {
    Command::new("which")
        .arg("dot")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn graph_draws_a_plan_file_as_mermaid_and_dot() {
    let dir = temp_dir("graph");
    let plan = dir.join("wordcount.json");
    std::fs::write(&plan, wordcount_plan().to_string()).unwrap();
    let plan = plan.to_str().unwrap();
    // A plan file needs no DynamoDB.
    let run = |args: &[&str]| whimbrel("http://127.0.0.1:9", "whimbrel_", args);

    let mut expected = String::from("flowchart TD\n");
    for i in 0..8 {
        expected.push_str(&format!(
            "    n{i}[\"count-{i}<br/>lambda: wordcount-count\"]\n"
        ));
    }
    expected.push_str("    n8[\"merge<br/>lambda: wordcount-merge\"]\n");
    for i in 0..8 {
        expected.push_str(&format!("    n{i} --> n8\n"));
    }
    assert_eq!(
        stdout(&run(&["graph", plan])),
        expected,
        "mermaid is the default"
    );
    assert_eq!(
        stdout(&run(&["graph", plan, "--format", "mermaid"])),
        expected
    );
    let out = dir.join("wordcount.mmd");
    let printed = stdout(&run(&["graph", plan, "--out", out.to_str().unwrap()]));
    assert_eq!(printed, "");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), expected);

    let dot = stdout(&run(&["graph", plan, "--format", "dot"]));
    let lines: Vec<&str> = dot.lines().collect();
    assert_eq!(lines[0], "digraph plan {");
    let nodes: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.contains("[label="))
        .collect();
    let mut expected_nodes: Vec<String> = (0..8)
        .map(|i| format!("    \"count-{i}\" [label=\"count-{i}\\nlambda: wordcount-count\"];"))
        .collect();
    expected_nodes.push("    \"merge\" [label=\"merge\\nlambda: wordcount-merge\"];".into());
    assert_eq!(nodes, expected_nodes, "{dot}");
    let edges: Vec<&str> = lines.iter().copied().filter(|l| l.contains("->")).collect();
    let expected_edges: Vec<String> = (0..8)
        .map(|i| format!("    \"count-{i}\" -> \"merge\";"))
        .collect();
    assert_eq!(edges, expected_edges, "{dot}");
    assert_eq!(*lines.last().unwrap(), "}");

    if has_dot() {
        // Graphviz accepts it, and renders the PNG.
        let mut child = Command::new("dot")
            .arg("-Tsvg")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(dot.as_bytes())
            .unwrap();
        let svg = child.wait_with_output().unwrap();
        assert!(
            svg.status.success() && svg.stderr.is_empty(),
            "dot -Tsvg: {}",
            String::from_utf8_lossy(&svg.stderr)
        );
        let svg = String::from_utf8_lossy(&svg.stdout);
        assert!(
            svg.contains("<svg") && svg.contains(">count&#45;7</text>"),
            "{svg}"
        );
        let png = dir.join("wordcount.png");
        stdout(&run(&[
            "graph",
            plan,
            "--format",
            "png",
            "--out",
            png.to_str().unwrap(),
        ]));
        assert!(std::fs::read(&png)
            .unwrap()
            .starts_with(b"\x89PNG\r\n\x1a\n"));
    } else {
        eprintln!("graphviz's dot is not installed: dot -Tsvg and PNG not checked");
    }

    // Without Graphviz, PNG fails saying how to install it.
    let o = Command::new(env!("CARGO_BIN_EXE_whimbrel"))
        .args(["graph", plan, "--format", "png", "--out"])
        .arg(dir.join("never.png"))
        .env("PATH", "")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("whimbrel: error: --format png needs Graphviz's `dot`")
            && err.contains("apt-get install graphviz"),
        "{err}"
    );
    // An invalid plan file is refused with the reason.
    let bad = dir.join("bad.json");
    std::fs::write(
        &bad,
        r#"{"activities":[{"name":"a","lambda":"f","depends_on":["b"]}]}"#,
    )
    .unwrap();
    let o = run(&["graph", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown activity"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn graph_of_a_registered_workflow_and_of_an_exec_coloured_by_state() {
    let endpoint = common::dynamodb_endpoint();
    let prefix = format!("c{}_", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let run = |args: &[&str]| whimbrel(&endpoint, &prefix, args);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let wf = rt.block_on(async {
        let h = common::Harness::with_prefix(&prefix).await;
        h.register(
            "pipeline",
            serde_json::json!({"activities": [
                {"name": "fetch", "lambda": "noop"},
                {"name": "resize", "task_list": "images", "depends_on": ["fetch"]},
                {"name": "bad", "lambda": "noop"},
                {"name": "publish", "lambda": "noop", "depends_on": ["resize", "bad"]}
            ]}),
        )
        .await;
        let wf = h.start("pipeline").await;
        h.run_to_completion(&wf, "fetch").await;
        h.engine
            .apply_event(&h.event(&wf, "bad", "FAILED"))
            .await
            .unwrap();
        wf
    });
    // The registered workflow: its static plan, no states.
    let static_plan = stdout(&run(&["graph", "pipeline"]));
    assert_eq!(
        static_plan,
        "flowchart TD
    n0[\"fetch<br/>lambda: noop\"]
    n1[\"resize<br/>task list: images\"]
    n2[\"bad<br/>lambda: noop\"]
    n3[\"publish<br/>lambda: noop\"]
    n0 --> n1
    n1 --> n3
    n2 --> n3
"
    );
    // The exec: each node with its activity's state and colour ("bad"
    // failed, which cancelled "publish").
    let mermaid = stdout(&run(&["graph", &wf]));
    for line in [
        "    n0[\"fetch<br/>lambda: noop<br/>COMPLETED\"]",
        "    n1[\"resize<br/>task list: images<br/>QUEUED\"]",
        "    n2[\"bad<br/>lambda: noop<br/>FAILED\"]",
        "    n3[\"publish<br/>lambda: noop<br/>CANCELLED\"]",
        "    classDef completed fill:#b7e4c7,stroke:#2d6a4f,color:#000",
        "    class n0 completed",
        "    classDef failed fill:#f5b7b1,stroke:#c0392b,color:#000",
        "    class n2 failed",
        "    class n1 queued",
        "    classDef cancelled fill:#d5d8dc,stroke:#707b7c,color:#000",
        "    class n3 cancelled",
    ] {
        assert!(mermaid.lines().any(|l| l == line), "{line:?} in\n{mermaid}");
    }
    let dot = stdout(&run(&["graph", &wf, "--format", "dot"]));
    assert!(
        dot.contains("    \"bad\" [label=\"bad\\nlambda: noop\\nFAILED\", fillcolor=\"#f5b7b1\", color=\"#c0392b\"];\n"),
        "{dot}"
    );
    assert!(dot.contains("    \"resize\" -> \"publish\";\n"), "{dot}");

    // A decider-backed workflow has no static plan: pass an exec.
    stdout(&run(&["register", "decided", "--lambda", "decider-fn"]));
    let o = run(&["graph", "decided"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("has no static plan: its decider Lambda decider-fn plans each run")
            && err.contains("whimbrel graph decided::<uuid>"),
        "{err}"
    );
    let o = run(&["graph", "unknown"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("no workflow \"unknown\" is registered"));
}
