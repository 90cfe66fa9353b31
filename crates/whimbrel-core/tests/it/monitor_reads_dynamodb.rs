//! On DynamoDB Local: heartbeats write the heartbeat time only, never the
//! due marker (an activity's role may not name it: docs/design.md § 3.10),
//! so the monitor re-arms the marker of each live activity itself, one
//! read and one write per heartbeat timeout, and times out those whose
//! heartbeats stopped.

use crate::common::Harness;
use serde_json::json;
use whimbrel_core::contract::ActivityState;
use whimbrel_core::engine::decide;
use whimbrel_core::ids;
use whimbrel_core::store::Value as AttributeValue;
use whimbrel_core::store::{n, Cond, UpdateRequest};

const HEARTBEAT: i64 = 100;

fn names(prefix: &str, k: usize) -> Vec<String> {
    (0..k).map(|i| format!("{prefix}{i}")).collect()
}

#[tokio::test]
async fn the_monitor_re_arms_live_activities_and_times_out_the_stale() {
    let h = Harness::new().await;
    let (helper, raw, stale) = (names("helper-", 12), names("raw-", 4), names("stale-", 3));
    let all: Vec<&String> = helper.iter().chain(&raw).chain(&stale).collect();
    let activities: Vec<_> = all
        .iter()
        .map(|a| json!({"name": a, "lambda": "noop", "heartbeat_timeout_seconds": HEARTBEAT, "timeout_seconds": 3600}))
        .collect();
    h.register("many", json!({ "activities": activities }))
        .await;
    let wf = h.start("many").await;
    let t0 = h.now();
    for a in &all {
        h.engine
            .apply_event(&h.attempt_event(&wf, a, "RUNNING", 0))
            .await
            .unwrap();
        let exec = h.activity(&wf, a).await;
        assert_eq!(
            exec.timing.due_epoch,
            Some(exec.timing.start_time_epoch + HEARTBEAT),
            "{a}"
        );
        assert!(exec.timing.start_time_epoch < t0 + 10);
    }

    // Half-way through the heartbeat timeout: every helper activity
    // heartbeats (one UpdateItem each, the marker left where it was); the
    // raw ones update heartbeat_time_epoch only, as a reference client does.
    h.clock.set(t0 + 60);
    for a in &helper {
        let before = h.activity(&wf, a).await.timing.due_epoch;
        h.store.metrics().take();
        let state = h.attempt(a, 0).heartbeat().await.unwrap();
        assert_eq!(state, ActivityState::Running);
        let ops = h.store.metrics().take();
        assert_eq!(ops["UpdateItem"].requests, 1, "{ops:?}");
        let exec = h.activity(&wf, a).await;
        assert_eq!(exec.timing.due_epoch, before, "{a}: marker left alone");
        assert!(exec.timing.heartbeat_time_epoch >= t0 + 60);
    }
    for a in &raw {
        let req = UpdateRequest::new(
            h.store.tables().activity_exec(),
            decide::activity_key(&ids::activity_exec_id(&wf, a), &wf),
        )
        .when(Cond::eq("heartbeat_enabled", AttributeValue::Bool(true)))
        .set("heartbeat_time_epoch", n(t0 + 60));
        h.store.update(req).await.unwrap();
    }

    // Past the first deadline and its report grace: every activity came
    // due once; the stale ones time out, the live ones are re-armed at
    // their last heartbeat's deadline.
    let report = h.tick(t0 + HEARTBEAT + 15).await;
    assert_eq!(report.timed_out, 3, "{report:?}");
    assert_eq!(report.swept, all.len() as u64, "{report:?}");
    for a in &stale {
        assert_eq!(h.activity(&wf, a).await.state, ActivityState::TimedOut);
    }
    for a in helper.iter().chain(&raw) {
        let exec = h.activity(&wf, a).await;
        assert_eq!(exec.state, ActivityState::Running, "{a}");
        assert_eq!(
            exec.timing.due_epoch,
            Some(exec.timing.heartbeat_time_epoch + HEARTBEAT),
            "{a}: re-armed"
        );
    }
    // The next tick finds nothing due but the settling of the timed-out.
    let quiet = h.tick(t0 + HEARTBEAT + 20).await;
    assert_eq!(quiet.timed_out, 0, "{quiet:?}");
    assert!(quiet.swept <= stale.len() as u64, "{quiet:?}");
}

/// A tick that spent its budget starts no more shards (issue: the monitor
/// had no time budget, so one shard's work could take every tick); the
/// first shard turns each minute, so successive ticks cover every shard.
/// With no budget at all, each tick sweeps exactly its first shard.
#[tokio::test]
async fn ticks_out_of_budget_sweep_one_shard_each_and_cover_all_in_turn() {
    use whimbrel_core::engine::monitor::first_shard;
    use whimbrel_core::keys::{shard_of, INDEX_SHARDS};
    let h = Harness::new().await;
    let names = names("quiet-", 24);
    let activities: Vec<_> = names
        .iter()
        .map(|a| json!({"name": a, "lambda": "noop", "heartbeat_timeout_seconds": HEARTBEAT}))
        .collect();
    h.register("wide", json!({ "activities": activities }))
        .await;
    let wf = h.start("wide").await;
    let mut shards = std::collections::BTreeSet::new();
    for a in &names {
        h.engine
            .apply_event(&h.attempt_event(&wf, a, "RUNNING", 0))
            .await
            .unwrap();
        shards.insert(shard_of(&ids::activity_exec_id(&wf, a)));
    }
    assert!(shards.len() > 2, "spread over shards: {shards:?}");
    // Every one went quiet: all due, in their shards, and past the report
    // grace by the first tick (a minute boundary at least 60 s later).
    let t = (h.now() + HEARTBEAT + 120).div_euclid(60) * 60;
    let mut timed_out = 0;
    for minute in 0..i64::from(INDEX_SHARDS) {
        let at = t + 60 * minute;
        h.clock.set(at);
        let report = h
            .engine
            .monitor_tick_within(at, std::time::Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(
            report.shards_left,
            u64::from(INDEX_SHARDS) - 1,
            "{report:?}"
        );
        let first = first_shard(at);
        let here = names
            .iter()
            .filter(|a| shard_of(&ids::activity_exec_id(&wf, a)) == first)
            .count() as u64;
        assert_eq!(report.timed_out, here, "tick {minute}, shard {first}");
        timed_out += report.timed_out;
    }
    assert_eq!(timed_out, names.len() as u64, "every shard came first once");
}
