//! Unit tests of an episodic decider's answer: its shapes, and each way
//! it is refused (design.md § 10.5).

use serde_json::json;

use super::*;
use crate::plan::MAX_ACTIVITIES;

/// An execution with nodes `a` (COMPLETED), `b` (RUNNING) and `f`
/// (FAILED).
fn ctx() -> DecisionContext {
    use crate::contract::ActivityState::{Completed, Failed, Running};
    DecisionContext {
        state_by_name: [("a", Completed), ("b", Running), ("f", Failed)]
            .into_iter()
            .map(|(n, s)| (n.to_string(), s))
            .collect(),
        node_count: 3,
        open_bytes: 1,
        open_count: 1,
        markers: Default::default(),
        unseen_events: false,
        dependents_by_name: Default::default(),
        now: 1_000,
        first: false,
    }
}

fn answer(decisions: Value) -> DecisionsAnswer {
    match DeciderAnswer::from_value(json!({ "decisions": decisions })).expect("an answer") {
        DeciderAnswer::Decisions(d) => d,
        other => panic!("not decisions: {other:?}"),
    }
}

fn refusal(decisions: Value) -> DecisionRefusal {
    validate(&answer(decisions), &ctx()).expect_err("refused")
}

#[test]
fn an_answer_with_activities_is_a_plan_and_one_with_decisions_is_an_episode() {
    let plan = DeciderAnswer::from_value(json!({"activities": [{"name": "x", "lambda": "f"}]}));
    assert!(matches!(plan, Ok(DeciderAnswer::Plan(p)) if p.activities.len() == 1));
    let episode = DeciderAnswer::from_value(json!({
        "decisions": [{"type": "record_marker", "name": "m", "details": {"n": 1}}],
        "decide_on": ["activity_ended", "signal"],
    }))
    .expect("decisions");
    let DeciderAnswer::Decisions(d) = episode else {
        panic!("not decisions")
    };
    assert_eq!(
        d.decide_on,
        Some(vec![EventKind::ActivityEnded, EventKind::Signal])
    );
    assert_eq!(d.version, SHAPE_VERSION);
}

#[test]
fn a_misspelt_field_or_type_is_an_error_not_a_dropped_decision() {
    for bad in [
        json!({"decisions": [{"type": "complete_workflow", "resutl": 1}]}),
        json!({"decisions": [{"type": "start_timer", "seconds": 5}]}),
        json!({"decisions": [], "decideOn": []}),
    ] {
        assert!(DeciderAnswer::from_value(bad.clone()).is_err(), "{bad}");
    }
}

#[test]
fn nodes_of_every_kind_are_scheduled_on_earlier_ones_and_the_workflow_completes() {
    let a = answer(json!([
        {"type": "schedule", "activities": [
            {"name": "thumb", "task_list": "host-1", "depends_on": ["a", "b"]},
            {"name": "pause", "wait": {"seconds": 2}, "depends_on": ["thumb"]},
            {"name": "ok", "signal": "approve", "timeout_seconds": 60},
            {"name": "kid", "workflow": "child", "input": {"n": 1}},
        ]},
        {"type": "schedule", "activities": [{"name": "after", "lambda": "f", "depends_on": ["pause"]}]},
        {"type": "cancel", "names": ["b", "ok"]},
        {"type": "record_marker", "name": "round", "details": 3},
        {"type": "complete_workflow", "result": {"done": true}},
    ]));
    assert_eq!(validate(&a, &ctx()), Ok(()));
    assert!(a.decisions.last().expect("last").closes());
}

#[test]
fn an_empty_answer_waits_for_the_next_event() {
    assert_eq!(validate(&answer(json!([])), &ctx()), Ok(()));
}

#[test]
fn a_name_used_before_or_twice_is_refused() {
    let before =
        refusal(json!([{"type": "schedule", "activities": [{"name": "a", "lambda": "f"}]}]));
    assert_eq!(
        before,
        DecisionRefusal::Schedule {
            index: 0,
            error: PlanError::DuplicateName("a".into())
        }
    );
    let twice = refusal(json!([
        {"type": "schedule", "activities": [{"name": "x", "lambda": "f"}]},
        {"type": "schedule", "activities": [{"name": "x", "lambda": "f"}]},
    ]));
    assert!(
        matches!(twice, DecisionRefusal::Schedule { index: 1, error: PlanError::DuplicateName(ref n) } if n == "x"),
        "{twice}"
    );
}

#[test]
fn a_node_the_plan_rules_refuse_is_refused_with_their_reason() {
    let unknown = refusal(json!([{"type": "schedule", "activities": [
        {"name": "x", "lambda": "f", "depends_on": ["nope"]}]}]));
    assert!(
        unknown.to_string().contains("unknown activity \"nope\""),
        "{unknown}"
    );
    let two_kinds = refusal(json!([{"type": "schedule", "activities": [
        {"name": "x", "lambda": "f", "wait": {"seconds": 1}}]}]));
    assert!(
        two_kinds
            .to_string()
            .starts_with("decision 0: activity \"x\" gives lambda and wait"),
        "{two_kinds}"
    );
    let cycle = refusal(json!([{"type": "schedule", "activities": [
        {"name": "x", "lambda": "f", "depends_on": ["y"]},
        {"name": "y", "lambda": "f", "depends_on": ["x"]}]}]));
    assert!(
        matches!(
            cycle,
            DecisionRefusal::Schedule {
                error: PlanError::Cycle(_),
                ..
            }
        ),
        "{cycle}"
    );
    let nothing = refusal(json!([{"type": "schedule", "activities": []}]));
    assert_eq!(nothing, DecisionRefusal::ScheduleNothing(0));
}

#[test]
fn a_timer_until_past_a_year_from_now_is_refused() {
    // 1970-01-01T00:16:40Z is `now`; two years on is past the limit.
    let r = refusal(json!([{"type": "schedule", "activities": [
        {"name": "t", "wait": {"until": "1972-01-01T00:00:00Z"}}]}]));
    assert!(
        matches!(
            r,
            DecisionRefusal::Schedule {
                error: PlanError::BadWait { .. },
                ..
            }
        ),
        "{r}"
    );
}

#[test]
fn a_cancel_of_an_unknown_or_ended_node_is_refused() {
    assert_eq!(
        refusal(json!([{"type": "cancel", "names": ["zz"]}])),
        DecisionRefusal::CancelUnknown {
            index: 0,
            name: "zz".into()
        }
    );
    assert_eq!(
        refusal(json!([{"type": "cancel", "names": ["a"]}])),
        DecisionRefusal::CancelEnded {
            index: 0,
            name: "a".into()
        }
    );
    // Cancelled by the answer's first decision: ended for its second.
    assert_eq!(
        refusal(json!([{"type": "cancel", "names": ["b"]}, {"type": "cancel", "names": ["b"]}])),
        DecisionRefusal::CancelEnded {
            index: 1,
            name: "b".into()
        }
    );
}

#[test]
fn a_closing_decision_must_be_last_and_alone() {
    assert_eq!(
        refusal(json!([
            {"type": "fail_workflow", "reason": "no"},
            {"type": "record_marker", "name": "m"},
        ])),
        DecisionRefusal::CloseNotLast(0)
    );
    assert_eq!(
        refusal(json!([
            {"type": "cancel_workflow"},
            {"type": "continue_as_new", "input": 1},
        ])),
        DecisionRefusal::CloseNotLast(0)
    );
}

#[test]
fn the_workflow_is_not_ended_while_events_went_unseen() {
    let mut c = ctx();
    c.unseen_events = true;
    let close = answer(json!([{"type": "complete_workflow"}]));
    assert_eq!(validate(&close, &c), Err(DecisionRefusal::UnhandledEvents));
    // Anything else still commits; the next decision sees the events.
    let more = answer(json!([{"type": "schedule", "activities": [{"name": "x", "lambda": "f"}]}]));
    assert_eq!(validate(&more, &c), Ok(()));
}

#[test]
fn only_the_first_answer_sets_an_execution_timeout_and_within_bounds() {
    let timed = |secs: i64| -> DecisionsAnswer {
        let parsed = DeciderAnswer::from_value(json!({
            "decisions": [], "execution_timeout_seconds": secs,
        }));
        match parsed.expect("an answer") {
            DeciderAnswer::Decisions(d) => d,
            other => panic!("not decisions: {other:?}"),
        }
    };
    let first = DecisionContext {
        first: true,
        ..ctx()
    };
    assert_eq!(timed(60).execution_timeout_seconds, Some(60));
    assert_eq!(validate(&timed(60), &first), Ok(()));
    let max = crate::plan::MAX_TIMEOUT_SECONDS;
    assert_eq!(validate(&timed(max), &first), Ok(()));
    for bad in [0, -5, max + 1] {
        let r = validate(&timed(bad), &first).expect_err("out of bounds");
        assert!(r.to_string().contains("within 1..="), "{r}");
    }
    let later = validate(&timed(60), &ctx()).expect_err("a later answer");
    assert!(
        later.to_string().contains("only the first answer"),
        "{later}"
    );
}

#[test]
fn sizes_and_marker_names_are_bounded() {
    let big = "x".repeat(MAX_RESULT_BYTES);
    assert!(matches!(
        refusal(json!([{"type": "complete_workflow", "result": big}])),
        DecisionRefusal::TooLarge { what: "result", .. }
    ));
    let input = "x".repeat(MAX_WORKFLOW_INPUT_BYTES);
    assert!(matches!(
        refusal(json!([{"type": "continue_as_new", "input": input}])),
        DecisionRefusal::TooLarge { what: "input", .. }
    ));
    for (name, details) in [
        ("bad name", json!(1)),
        ("m", json!("y".repeat(MAX_MARKER_BYTES))),
    ] {
        let r = refusal(json!([{"type": "record_marker", "name": name, "details": details}]));
        assert!(matches!(r, DecisionRefusal::BadMarker { .. }), "{r}");
    }
}

/// Issue 42 D (docs/limits.md § 4): a result, a continue-as-new input and
/// a marker's details nest at most 24 levels, as every input does.
#[test]
fn results_inputs_and_details_nested_past_the_limit_are_refused() {
    use crate::payloads::MAX_JSON_DEPTH;
    let nested = |d: usize| (1..d).fold(json!([1]), |v, _| json!({ "a": v }));
    for (kind, field) in [
        ("complete_workflow", "result"),
        ("continue_as_new", "input"),
        ("record_marker", "details"),
    ] {
        let decisions = |d| {
            let mut decision = json!({"type": kind, field: nested(d)});
            if kind == "record_marker" {
                decision["name"] = json!("m");
            }
            json!([decision])
        };
        let at = validate(&answer(decisions(MAX_JSON_DEPTH)), &ctx());
        assert!(at.is_ok(), "{kind} at the limit: {at:?}");
        let r = refusal(decisions(MAX_JSON_DEPTH + 1));
        let text = r.to_string();
        assert!(matches!(r, DecisionRefusal::TooDeep { .. }), "{text}");
        assert!(text.contains("nests 25 levels; at most 24"), "{text}");
    }
}

#[test]
fn too_many_decisions_or_nodes_or_a_new_version_are_refused() {
    let many: Vec<Value> = (0..=MAX_DECISIONS)
        .map(|i| json!({"type": "record_marker", "name": format!("m{i}")}))
        .collect();
    assert_eq!(
        refusal(Value::Array(many)),
        DecisionRefusal::TooMany(MAX_DECISIONS + 1)
    );
    let mut c = ctx();
    c.state_by_name = (0..MAX_ACTIVITIES)
        .map(|i| (format!("n{i}"), crate::contract::ActivityState::Completed))
        .collect();
    let one_more =
        answer(json!([{"type": "schedule", "activities": [{"name": "x", "lambda": "f"}]}]));
    assert!(matches!(
        validate(&one_more, &c),
        Err(DecisionRefusal::Schedule {
            error: PlanError::TooManyActivities(_),
            ..
        })
    ));
    let mut v2 = answer(json!([]));
    v2.version = 2;
    assert_eq!(validate(&v2, &ctx()), Err(DecisionRefusal::Version(2)));
}

#[test]
fn a_decision_request_reads_as_the_shape_documents_it() {
    let mut req = DecisionRequest::new("img::1", "img", "img::1::d2::a1", json!({"urls": 2}));
    req.open.push(NodeView {
        name: "download-1".into(),
        kind: "task_list".into(),
        state: crate::contract::ActivityState::Running,
        attempt: 1,
        target: Some("shared".into()),
        fires_epoch: None,
    });
    req.markers.insert("round".into(), json!(2));
    req.events.push(
        EventView {
            node: Some("download-0".into()),
            state: Some(crate::contract::ActivityState::Completed),
            ..EventView::new(7, EventKind::ActivityEnded, 1_000)
        }
        .with_output(json!({"task_list": "host-a"}), || unreachable!("small")),
    );
    let big = json!("x".repeat(request::MAX_INLINE_BYTES));
    req.events
        .push(EventView::new(8, EventKind::Signal, 1_001).with_output(big, || "ref-8".into()));
    let v = serde_json::to_value(&req).expect("json");
    assert_eq!(v["type"], "decision");
    assert_eq!(v["open"][0]["state"], "RUNNING");
    assert_eq!(v["events"][0]["output"]["task_list"], "host-a");
    assert_eq!(v["events"][0]["kind"], "activity_ended");
    assert_eq!(v["events"][1]["output_ref"], "ref-8");
    assert!(v["events"][1].get("output").is_none());
    let back: DecisionRequest = serde_json::from_value(v).expect("reads back");
    assert_eq!(back, req);
}

#[test]
fn a_node_waiting_for_one_that_failed_is_refused_as_it_could_never_run() {
    let r = refusal(json!([{"type": "schedule", "activities": [
        {"name": "x", "lambda": "f", "depends_on": ["a", "f"]}]}]));
    assert_eq!(
        r,
        DecisionRefusal::PrerequisiteEnded {
            index: 0,
            activity: "x".into(),
            prerequisite: "f".into(),
            state: crate::contract::ActivityState::Failed,
        }
    );
    // One cancelled earlier in the same answer, likewise.
    let r = refusal(json!([
        {"type": "cancel", "names": ["b", "b"]},
        {"type": "schedule", "activities": [{"name": "x", "lambda": "f", "depends_on": ["b"]}]},
    ]));
    assert!(
        matches!(r, DecisionRefusal::PrerequisiteEnded { index: 1, .. }),
        "{r}"
    );
}

#[test]
fn an_answer_too_large_to_record_is_refused() {
    let markers: Vec<Value> = (0..12)
        .map(|i| json!({"type": "record_marker", "name": format!("m{i}"), "details": "z".repeat(30_000)}))
        .collect();
    let r = refusal(Value::Array(markers));
    assert!(
        matches!(
            r,
            DecisionRefusal::TooLarge {
                what: "the answer",
                ..
            }
        ),
        "{r}"
    );
}

/// An answer that schedules `n` timers named `name(i)`.
fn timers(n: usize, name: impl Fn(usize) -> String) -> DecisionsAnswer {
    let nodes: Vec<serde_json::Value> = (0..n)
        .map(|i| json!({"name": name(i), "wait": {"seconds": 60}}))
        .collect();
    answer(json!([{"type": "schedule", "activities": nodes}]))
}

/// Issue 42 A.6: the names of the open nodes stay within
/// [`MAX_OPEN_NODE_BYTES`] of the workflow item: an answer that would
/// pass it is refused with the reason (recorded, shown to the next
/// decision), never a commit DynamoDB refuses.
#[test]
fn the_open_nodes_names_are_bounded_at_the_limit_and_refused_past_it() {
    let timers = |n: usize, len: usize| timers(n, |i| format!("{i:0>len$}"));
    // 781 names of 128 bytes and one of 31: exactly the limit, with `b`
    // (1 byte) open already.
    let mut at = timers(781, 128);
    if let Decision::Schedule { activities } = &mut at.decisions[0] {
        let last: PlannedActivity = serde_json::from_value(
            json!({"name": "z".repeat(MAX_OPEN_NODE_BYTES - 1 - 781 * 128), "wait": {"seconds": 60}}),
        )
        .unwrap();
        activities.push(last);
    }
    assert_eq!(validate(&at, &ctx()), Ok(()));
    let past = DecisionContext {
        open_bytes: 2,
        ..ctx()
    };
    let refused = validate(&at, &past).unwrap_err().to_string();
    assert_eq!(
        refused,
        format!(
            "decision 0: the list of open nodes (their names) is {} bytes; at most {MAX_OPEN_NODE_BYTES} are allowed",
            MAX_OPEN_NODE_BYTES + 1
        )
    );
}

/// Issue 42 A.10: marker names per execution are bounded at
/// [`MAX_MARKERS`]; recording again under a name in use replaces it and
/// adds none.
#[test]
fn markers_are_bounded_at_the_limit_and_refused_past_it() {
    let record = |names: &[String]| {
        let ds: Vec<serde_json::Value> = (names.iter())
            .map(|n| json!({"type": "record_marker", "name": n, "details": {"n": 1}}))
            .collect();
        answer(json!(ds))
    };
    let known: std::collections::BTreeSet<String> =
        (0..MAX_MARKERS - 1).map(|i| format!("m{i}")).collect();
    let with = DecisionContext {
        markers: known.clone(),
        ..ctx()
    };
    let last = vec!["m0".to_string(), format!("m{}", MAX_MARKERS - 1)];
    assert_eq!(validate(&record(&last), &with), Ok(()), "the 50th");
    let past = vec!["m1".to_string(), "late".to_string(), "later".to_string()];
    let refused = validate(&record(&past[..2]), &with).map(|_| ());
    assert_eq!(refused, Ok(()), "m1 replaces; late is the 50th");
    let refused = validate(&record(&past), &with).unwrap_err().to_string();
    assert!(
        refused.starts_with(&format!(
            "decision 2: marker \"later\" would be the execution's marker number {}",
            MAX_MARKERS + 1
        )),
        "{refused}"
    );
}

/// Issue 42 A.5: a request over the byte budget shows fewer of its new
/// events (at least one), the rest wait for the next decision.
#[test]
fn a_request_over_its_budget_shows_fewer_events() {
    use super::request::{DecisionRequest, EventView};
    let mut r = DecisionRequest::new("w::1", "w", "w::1::d1::a1", json!(null));
    for seq in 1..=10 {
        let e: EventView = serde_json::from_value(json!({
            "seq": seq, "kind": "signal", "at_epoch": 1, "signal": "s",
            "output": "x".repeat(20_000)
        }))
        .unwrap();
        r.events.push(e);
    }
    let whole = serde_json::to_vec(&r).unwrap().len();
    let size = r.clone().fit(whole);
    assert_eq!(size, whole, "within its budget: all ten");
    let size = r.fit(65_000);
    assert!(size <= 65_000, "{size}");
    assert_eq!(
        r.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    let mut tiny = r.clone();
    tiny.fit(10);
    assert_eq!(tiny.events.len(), 1, "never fewer than one");
}

/// Issue 42 A.1: a decided node keeps its prerequisites and dependents on
/// its item, so a reduce over 9,500 nodes passed validation and then could
/// not be written (400 KB), and the execution was stuck. An answer past
/// [`MAX_DECIDED_LINKS`] either way is refused with the reason, before
/// anything is written; at the limit it is judged as any other.
#[test]
fn a_decided_node_within_its_links_is_admitted_and_past_them_refused() {
    use crate::contract::ActivityState::Completed;
    let names: Vec<String> = (0..=MAX_DECIDED_LINKS).map(|i| format!("n{i}")).collect();
    let mut context = ctx();
    context
        .state_by_name
        .extend(names.iter().map(|n| (n.clone(), Completed)));
    context.node_count += names.len();
    let reduce = |over: &[String]| {
        answer(json!([{"type": "schedule", "activities": [
            {"name": "reduce", "lambda": "f", "depends_on": over}]}]))
    };
    assert_eq!(
        validate(&reduce(&names[..MAX_DECIDED_LINKS]), &context),
        Ok(())
    );
    let refused = validate(&reduce(&names), &context).unwrap_err();
    assert!(
        matches!(&refused, DecisionRefusal::TooManyLinks { what: "prerequisites", count, .. } if *count == MAX_DECIDED_LINKS + 1),
        "{refused}"
    );
    // Dependents: those a node has, and those the answer adds.
    let fan = |count: usize| {
        let nodes: Vec<Value> = (0..count)
            .map(|i| json!({"name": format!("d{i}"), "lambda": "f", "depends_on": ["a"]}))
            .collect();
        answer(json!([{"type": "schedule", "activities": nodes}]))
    };
    context.dependents_by_name.insert("a".into(), 100);
    assert_eq!(validate(&fan(MAX_DECIDED_LINKS - 100), &context), Ok(()));
    let refused = validate(&fan(MAX_DECIDED_LINKS - 99), &context).unwrap_err();
    assert!(
        matches!(&refused, DecisionRefusal::TooManyLinks { name, what: "dependents", .. } if name == "a"),
        "{refused}"
    );
    assert!(refused.to_string().contains("at most 500"), "{refused}");
}

/// Issue 42 D (docs/limits.md § 4, rows that had no test at the limit):
/// each admitted at exactly its limit, refused one past it: 1,000
/// decisions, an answer of 350,000 bytes, a result and a continue-as-new
/// input of 64,000 bytes of JSON, a marker's details of 32,000 bytes and
/// its name of 128 characters.
#[test]
fn each_answer_size_is_admitted_at_its_limit_and_refused_one_past_it() {
    let timers = |n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| json!({"type": "schedule", "activities": [{"name": format!("n{i}"), "wait": {"seconds": 60}}]}))
            .collect()
    };
    assert_eq!(
        validate(&answer(Value::Array(timers(MAX_DECISIONS))), &ctx()),
        Ok(())
    );
    assert_eq!(
        refusal(Value::Array(timers(MAX_DECISIONS + 1))),
        DecisionRefusal::TooMany(MAX_DECISIONS + 1)
    );
    // A string of `len` bytes of JSON (its quotes counted).
    let text = |len: usize| json!("x".repeat(len - 2));
    let one =
        |kind: &str, field: &str, len: usize| answer(json!([{ "type": kind, field: text(len) }]));
    for (kind, field, max) in [
        ("complete_workflow", "result", MAX_RESULT_BYTES),
        ("continue_as_new", "input", MAX_WORKFLOW_INPUT_BYTES),
    ] {
        assert_eq!(
            validate(&one(kind, field, max), &ctx()),
            Ok(()),
            "{kind} at {max}"
        );
        let past = validate(&one(kind, field, max + 1), &ctx());
        assert!(
            matches!(past, Err(DecisionRefusal::TooLarge { .. })),
            "{past:?}"
        );
    }
    let marker = |name: &str, len: usize| json!({"type": "record_marker", "name": name, "details": text(len)});
    let longest = "m".repeat(128);
    let at = answer(json!([marker(&longest, MAX_MARKER_BYTES)]));
    assert_eq!(validate(&at, &ctx()), Ok(()));
    for past in [
        marker(&longest, MAX_MARKER_BYTES + 1),
        marker(&format!("{longest}m"), 10),
    ] {
        let r = refusal(json!([past]));
        assert!(matches!(r, DecisionRefusal::BadMarker { .. }), "{r}");
    }
    // Markers whose decisions make exactly the answer's limit, then one
    // byte more.
    let sized = |total: usize| {
        let mut ms: Vec<Value> = (0..11).map(|i| marker(&format!("m{i}"), 30_000)).collect();
        let base = serde_json::to_string(&ms).unwrap().len() + 1;
        let last = json!({"type": "record_marker", "name": "z", "details": ""});
        let empty = serde_json::to_string(&last).unwrap().len();
        ms.push(marker("z", total - base - empty + 2));
        answer(Value::Array(ms))
    };
    let exact = sized(MAX_ANSWER_BYTES);
    assert_eq!(
        serde_json::to_string(&exact.decisions).unwrap().len(),
        MAX_ANSWER_BYTES
    );
    assert_eq!(validate(&exact, &ctx()), Ok(()));
    let r = refusal(serde_json::to_value(&sized(MAX_ANSWER_BYTES + 1).decisions).unwrap());
    assert!(
        matches!(
            r,
            DecisionRefusal::TooLarge {
                what: "the answer",
                ..
            }
        ),
        "{r}"
    );
}

/// Issue 42 A.5 (docs/limits.md § 4, Open 2): nodes open at once are
/// bounded in count at [`MAX_OPEN_NODES`], as their names are in bytes;
/// an answer that would open one more is refused with the reason.
#[test]
fn open_nodes_are_bounded_in_count_at_the_limit_and_refused_past_it() {
    let timers = |n: usize| timers(n, |i| format!("t{i}"));
    let near = DecisionContext {
        open_count: MAX_OPEN_NODES - 2,
        ..ctx()
    };
    assert_eq!(validate(&timers(2), &near), Ok(()));
    let refused = validate(&timers(3), &near).unwrap_err().to_string();
    assert_eq!(
        refused,
        format!(
            "decision 0: {} nodes would be open at once; at most {MAX_OPEN_NODES} are allowed (each is shown in every decision request)",
            MAX_OPEN_NODES + 1
        )
    );
}

/// Issue 42 A.5 (docs/limits.md § 4, Open 2): the largest decision
/// request the bounds admit fits the engine's budget, so Lambda's 6 MB
/// is never passed: `MAX_OPEN_NODES` views each at their largest (a
/// 128-byte name, a 170-byte target, the longest kind and state, the
/// largest attempt and fire time), `MAX_MARKERS` markers of
/// `MAX_MARKER_BYTES`, the largest input and one event at its largest
/// (an output inline at `MAX_INLINE_BYTES`, a reason of 2,048 bytes).
#[test]
fn the_largest_request_the_bounds_admit_fits_its_budget() {
    use crate::contract::ActivityState;
    use crate::decider::request::{EventView, NodeView, MAX_INLINE_BYTES, MAX_REQUEST_BYTES};
    let name = "n".repeat(crate::plan::MAX_NAME_LEN);
    let mut request = DecisionRequest::new(
        &format!("{name}::{}", "u".repeat(36)),
        &name,
        &format!(
            "{name}::{}::d18446744073709551615::a4294967295",
            "u".repeat(36)
        ),
        json!("i".repeat(crate::plan::MAX_WORKFLOW_INPUT_BYTES - 2)),
    );
    request.open = (0..MAX_OPEN_NODES)
        .map(|_| NodeView {
            name: name.clone(),
            kind: "task_list".into(),
            state: ActivityState::CancelledRunning,
            attempt: u32::MAX,
            target: Some("t".repeat(crate::plan::MAX_LAMBDA_LEN)),
            fires_epoch: Some(i64::MIN),
        })
        .collect();
    request.markers = (0..MAX_MARKERS)
        .map(|i| {
            (
                format!("{i:0>128}"),
                json!("m".repeat(MAX_MARKER_BYTES - 2)),
            )
        })
        .collect();
    let mut event = EventView::new(u64::MAX, EventKind::ActivityEnded, i64::MIN);
    event.node = Some(name.clone());
    event.state = Some(ActivityState::CancelledRunning);
    event.output = Some(json!("o".repeat(MAX_INLINE_BYTES - 2)));
    event.reason = Some("r".repeat(2_048));
    request.events = vec![event];
    let size = serde_json::to_vec(&request).unwrap().len();
    assert!(
        size <= MAX_REQUEST_BYTES,
        "{size} bytes; the budget is {MAX_REQUEST_BYTES}"
    );
}

/// limits.md § 4: an output (or a signal's input) of exactly
/// [`request::MAX_INLINE_BYTES`] bytes of JSON is shown inline in a
/// decision request; one byte more goes by reference.
#[test]
fn an_output_at_the_inline_limit_is_shown_inline_and_one_byte_more_by_reference() {
    use crate::decider::request::{EventView, MAX_INLINE_BYTES};
    let of = |bytes: usize| json!("o".repeat(bytes - 2));
    let at = EventView::new(1, EventKind::ActivityEnded, 0)
        .with_output(of(MAX_INLINE_BYTES), || unreachable!("fits inline"));
    assert_eq!(at.output, Some(of(MAX_INLINE_BYTES)));
    assert_eq!(at.output_ref, None);
    let past = EventView::new(2, EventKind::ActivityEnded, 0)
        .with_output(of(MAX_INLINE_BYTES + 1), || "ref-2".into());
    assert_eq!(
        (past.output, past.output_ref.as_deref()),
        (None, Some("ref-2"))
    );
}
