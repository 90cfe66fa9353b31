//! The in-memory DynamoDB model (the simulation's store) against DynamoDB
//! Local: random command sequences of the shapes the engine uses (puts,
//! conditional updates with every action and condition kind, transactions,
//! an item over 400 KB) must give the same outcome (ok, condition failed,
//! invalid) and the same items on both.

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use whimbrel_core::store::memory::MemoryBackend;
use whimbrel_core::store::Value as AttributeValue;
use whimbrel_core::store::{n, s, Action, Backend, Cmp, Cond, Item, Store, Write};

const SEQUENCES: u64 = 200;
const COMMANDS: usize = 12;

fn key(k: usize) -> Item {
    HashMap::from([
        ("activity_exec_id".to_string(), s(format!("a{k}"))),
        ("workflow_exec_id".to_string(), s("w")),
    ])
}

fn value(r: &mut ChaCha8Rng) -> AttributeValue {
    match r.gen_range(0..4) {
        0 => n(r.gen_range(-1..3)),
        1 => s(["x", "y", "z"][r.gen_range(0..3)]),
        2 => AttributeValue::Ss(vec![["p", "q"][r.gen_range(0..2)].to_string()]),
        _ => AttributeValue::L(vec![n(r.gen_range(0..2))]),
    }
}

fn attr(r: &mut ChaCha8Rng) -> String {
    ["count", "state", "tags", "log"][r.gen_range(0..4)].to_string()
}

fn cond(r: &mut ChaCha8Rng, depth: u32) -> Cond {
    match r.gen_range(0..if depth > 1 { 7 } else { 9 }) {
        0 => Cond::Exists(attr(r)),
        1 => Cond::NotExists(attr(r)),
        2 => Cond::Compare(
            attr(r),
            [Cmp::Eq, Cmp::Ne, Cmp::Lt, Cmp::Ge, Cmp::BeginsWith][r.gen_range(0..5)],
            value(r),
        ),
        3 => Cond::In(attr(r), vec![value(r), value(r)]),
        4 => Cond::Contains("tags".into(), s(["p", "q"][r.gen_range(0..2)])),
        5 => Cond::Compare("count".into(), Cmp::Gt, n(r.gen_range(-1..3))),
        6 => Cond::SizeLt(attr(r), r.gen_range(0..3)),
        7 => Cond::Not(Box::new(cond(r, depth + 1))),
        _ => Cond::And(vec![cond(r, depth + 1), cond(r, depth + 1)]),
    }
}

fn actions(r: &mut ChaCha8Rng) -> Vec<Action> {
    let mut out: Vec<Action> = vec![];
    for _ in 0..r.gen_range(1..3) {
        let a = match r.gen_range(0..6) {
            0 => Action::Set("state".into(), s(["x", "y"][r.gen_range(0..2)])),
            1 => Action::SetIfNotExists("state".into(), s("z")),
            2 => Action::Add("count".into(), n(r.gen_range(-1..2))),
            3 => Action::Add(
                "tags".into(),
                AttributeValue::Ss(vec![["p", "q"][r.gen_range(0..2)].into()]),
            ),
            4 => Action::Append("log".into(), vec![n(r.gen_range(0..3))]),
            _ => Action::Remove(attr(r)),
        };
        // One action per attribute, as DynamoDB requires.
        if out.iter().all(|o| o.attr() != a.attr()) {
            out.push(a);
        }
    }
    out
}

#[derive(Debug, Clone)]
enum Command {
    Put(Item, Option<Cond>),
    Update(usize, Vec<Action>, Option<Cond>),
    Transact(Vec<(usize, Vec<Action>, Option<Cond>)>),
    Huge(usize),
}

fn command(r: &mut ChaCha8Rng) -> Command {
    let k = r.gen_range(0..3);
    let maybe_cond = |r: &mut ChaCha8Rng| r.gen_bool(0.7).then(|| cond(r, 0));
    match r.gen_range(0..10) {
        0 | 1 => {
            let mut item = key(k);
            item.insert("count".into(), n(r.gen_range(0..3)));
            item.insert("state".into(), s("x"));
            let c = maybe_cond(r);
            Command::Put(item, c)
        }
        2..=7 => {
            let a = actions(r);
            let c = maybe_cond(r);
            Command::Update(k, a, c)
        }
        8 => {
            let other = (k + 1) % 3;
            let (a1, c1, a2, c2) = (actions(r), maybe_cond(r), actions(r), maybe_cond(r));
            Command::Transact(vec![(k, a1, c1), (other, a2, c2)])
        }
        _ => Command::Huge(k),
    }
}

/// The outcome class, comparable across backends.
fn class(r: Result<(), whimbrel_core::store::StoreError>) -> &'static str {
    use whimbrel_core::store::StoreError as E;
    match r {
        Ok(()) => "ok",
        Err(E::ConditionFailed) => "condition failed",
        Err(E::Invalid { .. }) => "invalid",
        Err(_) => "other",
    }
}

async fn apply(b: &dyn Backend, table: &str, c: &Command) -> &'static str {
    let t = table.to_string();
    class(match c.clone() {
        Command::Put(item, cond) => b.put(t, item, cond).await,
        Command::Update(k, actions, cond) => {
            b.update(t, key(k), actions, cond, false).await.map(|_| ())
        }
        Command::Transact(ws) => {
            b.transact(
                ws.into_iter()
                    .map(|(k, actions, cond)| Write::Update {
                        table: t.clone(),
                        key: key(k),
                        actions,
                        cond,
                    })
                    .collect(),
            )
            .await
        }
        Command::Huge(k) => {
            let mut item = key(k);
            item.insert("blob".into(), s("x".repeat(410 * 1024)));
            b.put(t, item, None).await
        }
    })
}

/// Items with numbers and sets normalized (DynamoDB may reorder sets).
fn normalized(items: Vec<Item>) -> Vec<String> {
    let mut out: Vec<String> = items
        .into_iter()
        .map(|i| {
            let mut attrs: Vec<(String, String)> = i
                .into_iter()
                .map(|(k, v)| {
                    let text = match v {
                        AttributeValue::N(x) => {
                            format!("N:{}", x.parse::<f64>().unwrap_or(f64::NAN))
                        }
                        AttributeValue::Ss(mut xs) => {
                            xs.sort();
                            format!("SS:{xs:?}")
                        }
                        other => format!("{other:?}"),
                    };
                    (k, text)
                })
                .collect();
            attrs.sort();
            format!("{attrs:?}")
        })
        .collect();
    out.sort();
    out
}

/// Sequences run at once, each lane on its own tables (DynamoDB Local
/// answers one lane's round trip while it works on another's).
const LANES: u64 = 4;

#[tokio::test]
async fn the_memory_model_agrees_with_dynamodb_local() {
    let lanes = (0..LANES).map(|lane| async move {
        let h = common::Harness::new().await;
        let mut found = vec![];
        for seq in (lane..SEQUENCES).step_by(LANES as usize) {
            found.push((seq, sequence(&h, seq).await));
        }
        found
    });
    let mut by_seq: Vec<(u64, Vec<String>)> = futures::future::join_all(lanes)
        .await
        .into_iter()
        .flatten()
        .collect();
    by_seq.sort_by_key(|(seq, _)| *seq);
    let mismatches: Vec<String> = by_seq.into_iter().flat_map(|(_, m)| m).collect();
    assert!(
        mismatches.is_empty(),
        "{} of {SEQUENCES} sequences differ:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

/// Sequence `seq` on the tables of `h` and on a fresh model, from the same
/// bare items: what differs (nothing when they agree).
async fn sequence(h: &common::Harness, seq: u64) -> Vec<String> {
    let dynamo: Arc<dyn Backend> = h.store.backend().clone();
    let tables = h.store.tables().clone();
    let table = tables.activity_exec();
    let mut mismatches = vec![];
    let memory = MemoryBackend::new(&tables, false);
    let mut r = ChaCha8Rng::seed_from_u64(seq);
    // Start each sequence from the same bare items on both.
    let reset = Store::with_backend(dynamo.clone(), tables.clone());
    for k in 0..3 {
        let clean: Item = key(k);
        reset
            .backend()
            .put(table.clone(), clean.clone(), None)
            .await
            .unwrap();
        memory.put(table.clone(), clean, None).await.unwrap();
    }
    for step in 0..COMMANDS {
        let c = command(&mut r);
        let (a, b) = (
            apply(dynamo.as_ref(), &table, &c).await,
            apply(&memory, &table, &c).await,
        );
        if a != b {
            mismatches.push(format!(
                "sequence {seq} step {step}: DynamoDB Local {a}, model {b}: {c:?}"
            ));
            break;
        }
    }
    let keys: Vec<Item> = (0..3).map(key).collect();
    let (real, _) = dynamo.batch_get(table.clone(), keys.clone()).await.unwrap();
    let (model, _) = memory.batch_get(table.clone(), keys).await.unwrap();
    if normalized(real.clone()) != normalized(model.clone()) {
        mismatches.push(format!(
            "sequence {seq}: items differ:\n  DynamoDB Local {:?}\n  model          {:?}",
            normalized(real),
            normalized(model)
        ));
    }
    mismatches
}

/// The engine's own attempt writes (queue a task-list activity, a worker's
/// claim, a retried failure, the next claim) and the sparse GSIs they feed
/// (the task-list index, the due index, queried with `<=` and a limit)
/// agree between the model and DynamoDB Local, write by write.
#[tokio::test]
async fn attempt_writes_and_sparse_indexes_agree_with_dynamodb_local() {
    use whimbrel_core::contract::{ActivityState, Transition};
    use whimbrel_core::engine::decide::{self, Change, Details};
    use whimbrel_core::engine::EngineConfig;
    use whimbrel_core::model::ActivityExec;
    use whimbrel_core::store::{KeyCond, INDEX_DUE, INDEX_TASK_LIST};

    let h = common::Harness::new().await;
    let tables = h.store.tables().clone();
    let real = h.store.clone();
    let model = Store::with_backend(Arc::new(MemoryBackend::new(&tables, false)), tables.clone());
    let cfg = EngineConfig::default();
    h.register(
        "w",
        serde_json::json!({"activities": [{"name": "t", "task_list": "tl", "heartbeat_timeout_seconds": 30,
            "schedule_to_close_seconds": 5000, "retry": {"max_attempts": 3, "interval_seconds": 7}}]}),
    )
    .await;
    let wf = h.start("w").await;
    let fresh = h.activity(&wf, "t").await;
    assert_eq!(fresh.state, ActivityState::Queued, "queued by the start");
    for store in [&real, &model] {
        store.put(&tables.activity_exec(), &fresh).await.unwrap();
    }
    let t0 = fresh.timing.first_queued_epoch.expect("queued");
    // Items as JSON (sorted maps at every depth) for comparison.
    let deep = |items: Vec<Item>| -> Vec<String> {
        let mut v: Vec<String> = items
            .into_iter()
            .map(|i| {
                serde_dynamo::from_item::<_, serde_json::Value>(i)
                    .unwrap()
                    .to_string()
            })
            .collect();
        v.sort();
        v
    };
    type Step<'a> = Box<dyn Fn(&ActivityExec) -> whimbrel_core::store::UpdateRequest + 'a>;
    let steps: Vec<Step> = vec![
        Box::new(|a| decide::claim_task_update(&tables, &cfg, a, "h1", "w1", t0 + 5)),
        Box::new(|a| {
            let change = Change {
                transition: Transition::TimedOut,
                next: ActivityState::TimedOut,
                event_id: "timed-out:t:1",
            };
            let details = Details {
                error: Some("no heartbeat for 30s (heartbeat timeout)".into()),
                stale_before: Some(t0 + 40),
                ..Details::default()
            };
            decide::retry_update(&tables, &cfg, a, &change, &details, t0 + 57, t0 + 50)
        }),
        Box::new(|a| decide::claim_task_update(&tables, &cfg, a, "h2", "w2", t0 + 60)),
    ];
    let key = decide::activity_key(&fresh.activity_exec_id, &fresh.workflow_exec_id);
    for (i, step) in steps.iter().enumerate() {
        let before: ActivityExec = real
            .get(&tables.activity_exec(), key.clone())
            .await
            .unwrap()
            .unwrap();
        let req = step(&before);
        let a = real.update_returning_new(req.clone()).await.map(|_| ());
        let b = model.update_returning_new(req).await.map(|_| ());
        assert_eq!(class(a), class(b), "step {i}");
        let mut items: Vec<Option<Item>> = vec![];
        for store in [&real, &model] {
            let got = store
                .backend()
                .get(tables.activity_exec(), key.clone(), vec![])
                .await
                .unwrap();
            items.push(got);
        }
        assert_eq!(
            deep(items[0].clone().into_iter().collect()),
            deep(items[1].clone().into_iter().collect()),
            "step {i}: items differ"
        );
        for (index, hash, range, at) in [
            (
                INDEX_TASK_LIST,
                "task_list_shard",
                "task_queued_epoch",
                s(decide::task_list_shard("tl", &fresh.activity_exec_id)),
            ),
            (
                INDEX_DUE,
                "due_shard",
                "due_epoch",
                n(whimbrel_core::store::shard_of(&fresh.activity_exec_id)),
            ),
        ] {
            let q = KeyCond {
                hash: (hash.into(), at),
                range: Some((range.into(), Cmp::Le, n(t0 + 10_000))),
            };
            let mut found = vec![];
            for store in [&real, &model] {
                let rows = store
                    .backend()
                    .query_limited(tables.activity_exec(), Some(index.into()), q.clone(), 5)
                    .await
                    .unwrap();
                found.push(deep(rows));
            }
            assert_eq!(found[0], found[1], "step {i}: {index} differs");
        }
    }
    let end: ActivityExec = model
        .get(&tables.activity_exec(), key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (end.state, end.attempt.number, end.runner.worker.as_deref()),
        (ActivityState::Running, 2, Some("w2"))
    );
}
