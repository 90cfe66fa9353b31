//! Tests of `plan` (kept apart so the module stays short).

#[cfg(test)]
mod tests {
    use super::super::*;

    fn act(name: &str, deps: &[&str]) -> PlannedActivity {
        PlannedActivity {
            parent_close: None,
            workflow: None,
            name: name.into(),
            lambda: "fn".into(),
            depends_on: deps.iter().map(|s| s.to_string()).collect(),
            heartbeat_timeout_seconds: None,
            heartbeat_enabled: None,
            start_to_close_seconds: None,
            input: None,
            input_ref: None,
            require_tokens: None,
            task_list: None,
            schedule_to_start_seconds: None,
            schedule_to_close_seconds: None,
            retry: None,
            wait: None,
            signal: None,
        }
    }

    fn timer(name: &str, wait: serde_json::Value) -> PlannedActivity {
        let v = serde_json::json!({"name": name, "wait": wait});
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_timer_node_is_one_kind_with_no_fields_of_activities() {
        let ok = plan(vec![
            act("a", &[]),
            timer("cool-off", serde_json::json!({"seconds": 3600})),
            timer(
                "morning",
                serde_json::json!({"until": "2026-12-01T09:00:00Z"}),
            ),
        ]);
        ok.validate().unwrap();
        assert_eq!(ok.activities[1].kind(), NodeKind::Timer);
        assert_eq!(
            ok.activities[2].wait.as_ref().unwrap().until_epoch(),
            Some(1_796_115_600)
        );
        let mut two = timer("t", serde_json::json!({"seconds": 5}));
        two.lambda = "fn".into();
        let e = plan(vec![two]).validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            "activity \"t\" gives lambda and wait; a node is exactly one of lambda, task_list, wait, signal or workflow"
        );
        let mut retried = timer("t", serde_json::json!({"seconds": 5}));
        retried.retry = Some(RetryPolicy::default());
        assert!(matches!(
            plan(vec![retried]).validate(),
            Err(PlanError::TimerField { field: "retry", .. })
        ));
        for bad in [
            serde_json::json!({}),
            serde_json::json!({"seconds": 5, "until": "2026-12-01T09:00:00Z"}),
            serde_json::json!({"seconds": -1}),
            serde_json::json!({"seconds": MAX_WAIT_SECONDS + 1}),
            serde_json::json!({"until": "tomorrow"}),
        ] {
            let e = plan(vec![timer("t", bad.clone())]).validate();
            assert!(matches!(e, Err(PlanError::BadWait { .. })), "{bad}: {e:?}");
        }
        let far = plan(vec![timer(
            "t",
            serde_json::json!({"until": "2030-01-01T00:00:00Z"}),
        )]);
        far.validate().unwrap();
        assert!(far.check_at(1_796_115_600).is_err());
        assert!(far.check_at(1_893_456_000 - MAX_WAIT_SECONDS).is_ok());
    }

    #[test]
    fn a_child_node_takes_a_workflow_an_input_and_a_parent_close_policy() {
        let node = |v: serde_json::Value| -> PlannedActivity { serde_json::from_value(v).unwrap() };
        let ok = plan(vec![node(serde_json::json!(
            {"name": "thumbs", "workflow": "make-thumbnails", "input": {"n": 3}, "parent_close": "abandon"}
        ))]);
        ok.validate().unwrap();
        assert_eq!(ok.activities[0].kind(), NodeKind::Child);
        assert_eq!(ok.activities[0].parent_close, Some(ParentClose::Abandon));
        let e = plan(vec![node(serde_json::json!(
            {"name": "thumbs", "workflow": "w", "lambda": "f"}
        ))])
        .validate()
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "activity \"thumbs\" gives lambda and workflow; a node is exactly one of lambda, task_list, wait, signal or workflow"
        );
        let e = plan(vec![node(serde_json::json!(
            {"name": "thumbs", "workflow": "w", "timeout_seconds": 5}
        ))])
        .validate()
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "activity \"thumbs\" is a workflow node; start_to_close_seconds applies only to activities that run code"
        );
        let e = plan(vec![node(
            serde_json::json!({"name": "a", "lambda": "f", "parent_close": "cancel"}),
        )])
        .validate()
        .unwrap_err();
        assert!(matches!(e, PlanError::NotAChild(_)), "{e}");
        let bad = plan(vec![node(
            serde_json::json!({"name": "a", "workflow": "a b"}),
        )]);
        assert!(matches!(bad.validate(), Err(PlanError::NoLambda(_))));
    }

    #[test]
    fn a_signal_node_takes_a_name_and_only_a_timeout() {
        let node = |v: serde_json::Value| -> PlannedActivity { serde_json::from_value(v).unwrap() };
        let ok = plan(vec![node(serde_json::json!(
            {"name": "approval", "signal": "approve", "timeout_seconds": 86400}
        ))]);
        ok.validate().unwrap();
        assert_eq!(ok.activities[0].kind(), NodeKind::Signal);
        assert_eq!(ok.activities[0].start_to_close_seconds, Some(86400));
        let e = plan(vec![node(serde_json::json!(
            {"name": "approval", "signal": "approve", "wait": {"seconds": 5}}
        ))])
        .validate()
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "activity \"approval\" gives wait and signal; a node is exactly one of lambda, task_list, wait, signal or workflow"
        );
        let e = plan(vec![node(serde_json::json!(
            {"name": "approval", "signal": "approve", "retry": {"max_attempts": 3}}
        ))])
        .validate()
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "activity \"approval\" is a signal node; retry applies only to activities that run code"
        );
        let bad = plan(vec![node(
            serde_json::json!({"name": "a", "signal": "no spaces"}),
        )]);
        assert!(matches!(bad.validate(), Err(PlanError::NoLambda(_))));
        let timer_timeout = plan(vec![node(serde_json::json!(
            {"name": "t", "wait": {"seconds": 5}, "timeout_seconds": 9}
        ))]);
        assert!(matches!(
            timer_timeout.validate(),
            Err(PlanError::TimerField {
                kind: "wait",
                field: "start_to_close_seconds",
                ..
            })
        ));
    }

    fn plan(acts: Vec<PlannedActivity>) -> Plan {
        Plan::of(acts)
    }

    #[test]
    fn valid_diamond() {
        let p = plan(vec![
            act("a", &[]),
            act("b", &["a"]),
            act("c", &["a"]),
            act("d", &["b", "c"]),
        ]);
        assert_eq!(p.validate(), Ok(()));
        assert_eq!(p.dependents()["a"], vec!["b", "c"]);
    }

    #[test]
    fn duplicate_names() {
        let p = plan(vec![act("a", &[]), act("a", &[])]);
        assert_eq!(p.validate(), Err(PlanError::DuplicateName("a".into())));
    }

    #[test]
    fn a_decider_cannot_point_an_activity_at_an_input_row() {
        let mut a = act("a", &[]);
        a.input_ref = Some("other-workflow::1#input#00".into());
        let p = plan(vec![a]);
        assert_eq!(p.validate(), Err(PlanError::InputRef("a".into())));
    }

    #[test]
    fn unknown_and_self_prerequisites() {
        let p = plan(vec![act("a", &["zz"])]);
        assert!(matches!(
            p.validate(),
            Err(PlanError::UnknownPrerequisite { .. })
        ));
        let p = plan(vec![act("a", &["a"])]);
        assert!(matches!(
            p.validate(),
            Err(PlanError::UnknownPrerequisite { .. })
        ));
        let p = plan(vec![act("a", &[]), act("b", &["a", "a"])]);
        assert!(matches!(
            p.validate(),
            Err(PlanError::DuplicatePrerequisite { .. })
        ));
    }

    #[test]
    fn cycles() {
        let p = plan(vec![
            act("r", &[]),
            act("a", &["c"]),
            act("b", &["a"]),
            act("c", &["b"]),
        ]);
        assert_eq!(
            p.validate(),
            Err(PlanError::Cycle(vec!["a".into(), "b".into(), "c".into()]))
        );
    }

    #[test]
    fn sizes_and_names() {
        assert_eq!(plan(vec![]).validate(), Err(PlanError::Empty));
        let many = (0..=MAX_ACTIVITIES)
            .map(|i| act(&format!("a{i}"), &[]))
            .collect();
        assert!(matches!(
            plan(many).validate(),
            Err(PlanError::TooManyActivities(_))
        ));
        let mut big = act("big", &[]);
        big.input = Some(Value::String("x".repeat(MAX_ACTIVITY_INPUT_BYTES + 1)));
        assert!(matches!(
            plan(vec![big]).validate(),
            Err(PlanError::TooLarge { .. })
        ));
        // Every activity within its limits, the whole plan over its own.
        let each = MAX_ACTIVITY_INPUT_BYTES - 100;
        let whole: Vec<_> = (0..=MAX_PLAN_BYTES / each)
            .map(|i| {
                let mut a = act(&format!("a{i}"), &[]);
                a.input = Some(Value::String("x".repeat(each)));
                a
            })
            .collect();
        assert!(matches!(
            plan(whole).validate(),
            Err(PlanError::TooLarge { what, .. }) if what == "plan"
        ));
        // One activity that no plan part could hold: a join whose
        // prerequisite list alone passes PLAN_PART_BYTES.
        let names: Vec<String> = (0..PLAN_PART_BYTES / 100)
            .map(|i| format!("{i:0>100}"))
            .collect();
        let mut acts: Vec<_> = names.iter().map(|n| act(n, &[])).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        acts.push(act("join", &refs));
        assert!(matches!(
            plan(acts).validate(),
            Err(PlanError::TooLarge { what, .. }) if what.contains("as planned")
        ));
        assert!(matches!(
            plan(vec![act("a::b", &[])]).validate(),
            Err(PlanError::BadName(_))
        ));
        let mut no_lambda = act("a", &[]);
        no_lambda.lambda = " ".into();
        assert!(matches!(
            plan(vec![no_lambda]).validate(),
            Err(PlanError::NoLambda(_))
        ));
        for bad in [0, i64::MAX] {
            let mut hb = act("a", &[]);
            hb.heartbeat_timeout_seconds = Some(bad);
            assert!(matches!(
                plan(vec![hb]).validate(),
                Err(PlanError::BadHeartbeat(_))
            ));
        }
    }

    #[test]
    fn a_wide_fan_in_keeps_no_list_of_prerequisites_so_it_fits() {
        // Before join groups, 1,500 prerequisite ids (twice) and a 100 KB
        // input were too large for the join's item.
        let names: Vec<String> = (0..1500)
            .map(|i| format!("prerequisite-number-{i:05}"))
            .collect();
        let deps: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut acts: Vec<PlannedActivity> = names.iter().map(|n| act(n, &[])).collect();
        let mut join = act("join", &deps);
        join.input = Some(Value::String("x".repeat(100_000)));
        acts.push(join);
        assert_eq!(plan(acts).validate(), Ok(()));
    }

    #[test]
    fn a_wide_fan_out_is_not_limited_by_its_item() {
        // 1,500 dependents of 118-byte ids beside a 100 KB input and the
        // largest output would pass 380 KB on the item; a wide fan-out
        // keeps them in the plan (FAN_OUT_LIST_MAX), so the plan is valid.
        let names: Vec<String> = (0..1500).map(|i| format!("{i:080}")).collect();
        let mut source = act("source", &[]);
        source.input = Some(Value::String("x".repeat(100_000)));
        let mut acts = vec![source];
        acts.extend(names.iter().map(|n| act(n, &["source"])));
        assert_eq!(plan(acts).validate(), Ok(()));
    }

    #[test]
    fn plan_json_shape() {
        let p: Plan = serde_json::from_str(
            r#"{"activities":[{"name":"a","lambda":"f"},{"name":"b","lambda":"f","depends_on":["a"],"heartbeat_timeout_seconds":30,"input":{"k":1}}]}"#,
        )
        .unwrap();
        assert_eq!(p.version, 1);
        assert_eq!(p.validate(), Ok(()));
        // A misspelt field is an error, not silently dropped.
        let typo = serde_json::from_str::<Plan>(
            r#"{"activities":[{"name":"a","lambda":"f","dependsOn":["b"]}]}"#,
        );
        assert!(typo.unwrap_err().to_string().contains("dependsOn"));
    }
}

#[cfg(test)]
mod fit_tests {
    use super::super::*;
    use serde_json::json;

    fn payload(outputs: usize, bytes: usize) -> LaunchPayload {
        LaunchPayload {
            version: SHAPE_VERSION,
            activity_exec_id: "join::1".into(),
            activity_name: "join".into(),
            workflow_exec_id: "w::1".into(),
            workflow_name: "w".into(),
            attempt: 1,
            launch: 1,
            input: Value::Null,
            prerequisites: (0..outputs)
                .map(|i| (format!("p{i}"), Value::String("x".repeat(bytes + i))))
                .collect(),
            prerequisites_by_reference: vec![],
            heartbeat_timeout_seconds: None,
            timeout_seconds: Some(60),
            attempt_token: Some("t".into()),
        }
    }

    /// Issue 42 D (docs/limits.md § 2, Open 9): a fitted payload cannot
    /// pass Lambda's 1 MB, so the engine need not check the size `fit`
    /// returns. The largest node a plan admits (300,000 bytes as planned:
    /// an input of 149,000 bytes and prerequisites of 128-byte names for
    /// the rest), every prerequisite output too large to go inline, and
    /// the longest ids, still fits once its outputs go by reference.
    #[test]
    fn the_largest_node_a_plan_admits_always_fits_a_launch() {
        let name = |i: usize| format!("{i:0>128}");
        let input = Value::String("i".repeat(149_000));
        let mut node = json!({"name": name(0), "lambda": "f", "input": input, "depends_on": []});
        let mut names = vec![];
        while node.to_string().len() + 131 <= PLAN_PART_BYTES {
            names.push(name(names.len() + 1));
            node["depends_on"] = json!(names);
        }
        let planned: PlannedActivity = serde_json::from_value(node.clone()).unwrap();
        assert!(node.to_string().len() <= PLAN_PART_BYTES);
        let mut p = payload(0, 0);
        let exec_id = format!("{}::{}", name(0), "8".repeat(36));
        (p.activity_exec_id, p.workflow_exec_id) = (exec_id.clone(), exec_id);
        p.input = planned.input.clone().unwrap();
        p.prerequisites = (names.iter())
            .map(|n| (n.clone(), Value::String("o".repeat(MAX_OUTPUT_BYTES - 2))))
            .take(50)
            .chain(
                names
                    .iter()
                    .skip(50)
                    .map(|n| (n.clone(), json!("o".repeat(1_000)))),
            )
            .collect();
        let size = p.fit(MAX_LAUNCH_PAYLOAD_BYTES);
        assert!(size <= MAX_LAUNCH_PAYLOAD_BYTES, "{size}");
        // With every output by reference it would still be far under.
        let mut all = p.clone();
        all.prerequisites_by_reference
            .extend(all.prerequisites.keys().cloned());
        all.prerequisites.clear();
        assert!(serde_json::to_vec(&all).unwrap().len() < MAX_LAUNCH_PAYLOAD_BYTES / 2);
    }

    #[test]
    fn a_large_join_fits_with_as_few_references_as_needed() {
        // 2,000 outputs of about 1 KB: 2 MB to bring under 1 MB.
        let mut p = payload(2_000, 1_000);
        let size = p.fit(MAX_LAUNCH_PAYLOAD_BYTES);
        assert_eq!(size, serde_json::to_vec(&p).unwrap().len());
        assert!(size <= MAX_LAUNCH_PAYLOAD_BYTES, "{size}");
        assert_eq!(
            p.prerequisites.len() + p.prerequisites_by_reference.len(),
            2_000
        );
        // The largest went, and no more than needed: the smallest one
        // referenced would not fit back.
        let largest_inline = p.prerequisites.values().map(|v| v.to_string().len()).max();
        let smallest_referenced = p
            .prerequisites_by_reference
            .iter()
            .map(|n| 1_000 + n[1..].parse::<usize>().unwrap() + 2)
            .min()
            .unwrap();
        assert!(largest_inline.unwrap() <= smallest_referenced);
        assert!(
            size + smallest_referenced > MAX_LAUNCH_PAYLOAD_BYTES,
            "{size}"
        );
        let mut sorted = p.prerequisites_by_reference.clone();
        sorted.sort();
        assert_eq!(sorted, p.prerequisites_by_reference);
        // A payload that fits is left alone.
        let mut small = payload(3, 10);
        let before = small.clone();
        small.fit(MAX_LAUNCH_PAYLOAD_BYTES);
        assert_eq!(small, before);
    }
}

/// docs/limits.md § 1 and § 6: each bounded field of a plan is accepted
/// exactly at its limit and refused just past it (issue 42 D). One row per
/// limit: the plan as JSON at the limit, then just past it.
#[cfg(test)]
mod limit_tests {
    use super::super::*;
    use serde_json::{json, Value};

    /// A plan of one node `a` with `node` merged into it and `top` merged
    /// into the plan.
    fn one(node: Value, top: Value) -> Plan {
        let mut a = json!({"name": "a", "lambda": "fn"});
        a.as_object_mut()
            .unwrap()
            .extend(node.as_object().unwrap().clone());
        let mut p = json!({"activities": [a]});
        p.as_object_mut()
            .unwrap()
            .extend(top.as_object().unwrap().clone());
        serde_json::from_value(p).unwrap()
    }

    /// (limit, node fields at it, plan fields at it, node fields past it,
    /// plan fields past it).
    fn rows() -> Vec<(&'static str, Value, Value, Value, Value)> {
        let (none, s) = (json!({}), |n: usize| "x".repeat(n));
        let h = MAX_HEARTBEAT_TIMEOUT_SECONDS;
        let t = MAX_TIMEOUT_SECONDS;
        let retry = |k: &str, v: Value| {
            let mut policy = serde_json::Map::new();
            policy.insert(k.to_string(), v);
            json!({ "retry": policy })
        };
        let mut rows = vec![
            (
                "name",
                json!({"name": s(MAX_NAME_LEN)}),
                none.clone(),
                json!({"name": s(MAX_NAME_LEN + 1)}),
                none.clone(),
            ),
            // Lambda's FunctionName (a name, an ARN, with a qualifier).
            (
                "lambda",
                json!({"lambda": s(MAX_LAMBDA_LEN)}),
                none.clone(),
                json!({"lambda": s(MAX_LAMBDA_LEN + 1)}),
                none.clone(),
            ),
            (
                "lambda characters",
                json!({"lambda": "arn:aws:lambda:us-east-1:123456789012:function:f-1_a.b:$LATEST"}),
                none.clone(),
                json!({"lambda": "my function"}),
                none.clone(),
            ),
            // A string of n - 2 characters is n bytes of JSON.
            (
                "input",
                json!({"input": s(MAX_ACTIVITY_INPUT_BYTES - 2)}),
                none.clone(),
                json!({"input": s(MAX_ACTIVITY_INPUT_BYTES - 1)}),
                none.clone(),
            ),
            (
                "heartbeat",
                json!({"heartbeat_timeout_seconds": h}),
                none.clone(),
                json!({"heartbeat_timeout_seconds": h + 1}),
                none.clone(),
            ),
            (
                "start_to_close",
                json!({"timeout_seconds": h}),
                none.clone(),
                json!({"timeout_seconds": h + 1}),
                none.clone(),
            ),
            (
                "schedule_to_start",
                json!({"schedule_to_start_seconds": t}),
                none.clone(),
                json!({"schedule_to_start_seconds": t + 1}),
                none.clone(),
            ),
            (
                "schedule_to_close",
                json!({"schedule_to_close_seconds": t}),
                none.clone(),
                json!({"schedule_to_close_seconds": t + 1}),
                none.clone(),
            ),
            (
                "execution_timeout",
                none.clone(),
                json!({"execution_timeout_seconds": t}),
                none.clone(),
                json!({"execution_timeout_seconds": t + 1}),
            ),
            (
                "max_concurrency",
                none.clone(),
                json!({"max_concurrency": MAX_ACTIVITIES}),
                none.clone(),
                json!({"max_concurrency": MAX_ACTIVITIES + 1}),
            ),
            (
                "max_attempts",
                retry("max_attempts", json!(crate::retry::MAX_ATTEMPTS)),
                none.clone(),
                retry("max_attempts", json!(crate::retry::MAX_ATTEMPTS + 1)),
                none.clone(),
            ),
            (
                "interval",
                retry("interval_seconds", json!(crate::retry::MAX_DELAY_SECONDS)),
                none.clone(),
                retry(
                    "interval_seconds",
                    json!(crate::retry::MAX_DELAY_SECONDS + 1),
                ),
                none.clone(),
            ),
            (
                "max_delay",
                retry("max_delay_seconds", json!(crate::retry::MAX_DELAY_SECONDS)),
                none.clone(),
                retry(
                    "max_delay_seconds",
                    json!(crate::retry::MAX_DELAY_SECONDS + 1),
                ),
                none.clone(),
            ),
            (
                "backoff_rate",
                retry("backoff_rate", json!(100.0)),
                none.clone(),
                retry("backoff_rate", json!(100.01)),
                none.clone(),
            ),
        ];
        // A task list's, a signal's, a child workflow's name (a blank
        // `lambda` gives no kind, so the node is of the named one).
        for field in ["task_list", "signal", "workflow"] {
            let node = |n: usize| json!({"lambda": "", field: s(n)});
            let (at, past) = (node(MAX_NAME_LEN), node(MAX_NAME_LEN + 1));
            rows.push((field, at, none.clone(), past, none.clone()));
        }
        rows
    }

    #[test]
    fn each_bounded_field_is_accepted_at_its_limit_and_refused_just_past_it() {
        for (limit, at_node, at_top, past_node, past_top) in rows() {
            assert_eq!(
                one(at_node, at_top).validate(),
                Ok(()),
                "{limit} at its limit"
            );
            let refused = one(past_node, past_top).validate();
            assert!(refused.is_err(), "{limit} just past its limit: {refused:?}");
        }
    }

    /// Issue 42 D (docs/limits.md § 6, Open 5): the waiting nodes of a
    /// `max_concurrency` plan fit the workflow item: names of 240,000
    /// bytes with their entries' overhead pass, one byte more is refused
    /// (before, DynamoDB refused the waiter's join with its own text).
    #[test]
    fn a_limited_plans_waiters_are_bounded_by_the_workflow_item() {
        // 1,875 nodes of 121-byte names: 1,875 × (121 + 7) = 240,000.
        let plan = |extra: usize, limit: u32| -> Plan {
            let acts: Vec<Value> = (0..1_875)
                .map(|i| {
                    let pad = if i == 0 { 121 + extra } else { 121 };
                    json!({"name": format!("{i:0>pad$}"), "lambda": "fn"})
                })
                .collect();
            serde_json::from_value(json!({ "activities": acts, "max_concurrency": limit })).unwrap()
        };
        assert_eq!(plan(0, 5).validate(), Ok(()));
        assert_eq!(
            plan(1, 5).validate(),
            Err(PlanError::TooManyWaiters(MAX_SLOT_WAITERS_BYTES + 1))
        );
        // A limit no smaller than the nodes never makes one wait.
        assert_eq!(plan(1, 1_875).validate(), Ok(()));
    }

    #[test]
    fn a_plan_of_the_most_nodes_is_valid_and_one_more_is_refused() {
        let nodes = |n: usize| -> Plan {
            let acts: Vec<Value> = (0..n)
                .map(|i| json!({"name": format!("a{i}"), "lambda": "fn"}))
                .collect();
            serde_json::from_value(json!({ "activities": acts })).unwrap()
        };
        assert_eq!(nodes(MAX_ACTIVITIES).validate(), Ok(()));
        assert_eq!(
            nodes(MAX_ACTIVITIES + 1).validate(),
            Err(PlanError::TooManyActivities(MAX_ACTIVITIES + 1))
        );
    }
}
