//! What the in-process scale benchmarks share ([`super::monitor`],
//! [`super::batch`]): they run the engine's own code against a DynamoDB
//! (DynamoDB Local for `make bench-monitor` and `make bench`), on a clock
//! they move, with a launcher that records launches instead of invoking.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use futures::stream::{self, StreamExt, TryStreamExt};
use serde_json::{json, Value};
use whimbrel_core::activity::Activity;
use whimbrel_core::contract::Transition;
use whimbrel_core::dates::Timestamp;
use whimbrel_core::engine::{Engine, EngineConfig, Environment};
use whimbrel_core::launcher::{InvokeError, Launcher};
use whimbrel_core::model::{ActivityEvent, WorkflowLambda, WorkflowRequest};
use whimbrel_core::plan::{LaunchPayload, Plan};
use whimbrel_core::store::Store;
use whimbrel_core::{ids, install};

use crate::{store_for, CliError, Global};

/// A clock the benchmark moves (epoch seconds) and UUID v4 tokens.
#[derive(Debug)]
pub(super) struct BenchClock(pub(super) AtomicI64);

impl Environment for BenchClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_epoch(self.0.load(Ordering::SeqCst))
    }
    fn new_token(&self) -> String {
        uuid::Uuid::new_v4().simple().to_string()
    }
}

/// Keeps every async launch's payload; invokes nothing.
#[derive(Debug, Clone, Default)]
pub(super) struct Recorder(Arc<Mutex<Vec<LaunchPayload>>>);

impl Launcher for Recorder {
    async fn invoke_sync(&self, function: &str, _: &Value) -> Result<Value, InvokeError> {
        Err(InvokeError::Rejected {
            function: function.into(),
            message: "benchmarks register static plans".into(),
        })
    }
    async fn invoke_async(&self, function: &str, payload: &Value) -> Result<(), InvokeError> {
        let p = serde_json::from_value(payload.clone()).map_err(|e| InvokeError::Rejected {
            function: function.into(),
            message: e.to_string(),
        })?;
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(p);
        Ok(())
    }
}

impl Recorder {
    pub(super) fn take(&self) -> Vec<LaunchPayload> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// What a benchmark runs on: the engine (`g`'s tables, created if
/// missing, `concurrency` items at once), the activities' engine (the
/// `Activity` helper's: no launcher) and the clock both read, at `epoch`.
pub(super) type Bench = (Engine<Recorder>, Engine<()>, Arc<BenchClock>);

/// The [`Bench`] of `g` at `epoch`.
pub(super) async fn bench_engine(
    g: &Global,
    epoch: i64,
    concurrency: usize,
) -> Result<Bench, CliError> {
    let store = store_for(g).await;
    install::install(&store).await?;
    let clock = Arc::new(BenchClock(AtomicI64::new(epoch)));
    let config = EngineConfig {
        table_prefix: g.table_prefix.clone(),
        concurrency,
        ..EngineConfig::default()
    };
    let activities = Engine::with_environment(store.clone(), (), config.clone(), clock.clone());
    let engine = Engine::with_environment(store, Recorder::default(), config, clock.clone());
    Ok((engine, activities, clock))
}

/// Register `name` as `width` root activities with `extra` settings each.
pub(super) async fn register_roots(
    store: &Store,
    name: &str,
    width: usize,
    extra: Value,
) -> Result<(), CliError> {
    let activities: Vec<Value> = (0..width)
        .map(|i| {
            let mut a = json!({"name": format!("a-{i}"), "lambda": "whimbrel-noop"});
            if let (Some(a), Some(x)) = (a.as_object_mut(), extra.as_object()) {
                a.extend(x.clone());
            }
            a
        })
        .collect();
    let plan: Plan = serde_json::from_value(json!({ "activities": activities }))
        .map_err(|e| CliError(format!("bench plan: {e}")))?;
    plan.validate()
        .map_err(|e| CliError(format!("bench plan: {e}")))?;
    let item = WorkflowLambda {
        workflow_name: name.into(),
        lambda: None,
        definition: Some(plan),
        allow: None,
    };
    store.put(&store.tables().workflow_lambda(), &item).await?;
    Ok(())
}

/// Start `count` workflows of `name` in-process (Full Logic API) and
/// return the launch payloads of their activities.
pub(super) async fn start_many<L: Launcher>(
    engine: &Engine<L>,
    recorder: &Recorder,
    name: &str,
    count: usize,
) -> Result<Vec<LaunchPayload>, CliError> {
    let now = engine.now();
    stream::iter(0..count)
        .map(|_| async move {
            let row = WorkflowRequest {
                redrive_workflow_exec_id: None,
                parent: None,
                workflow_request_id: ids::new_id(name),
                workflow_name: name.into(),
                when: Some(now.date_list()),
                when_epoch: Some(now.epoch as f64),
                source: Some("whimbrel bench".into()),
                manual: Some(true),
                input: None,
                expires_at_epoch: None,
                cancel_workflow_exec_id: None,
                reason: None,
            };
            engine.start_workflow(&row).await
        })
        .buffer_unordered(4)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(recorder.take())
}

/// The event row the `Activity` helper of launch `p` writes for
/// `transition` (COMPLETED with a small output).
pub(super) fn report(
    activities: &Engine<()>,
    p: &LaunchPayload,
    transition: Transition,
) -> ActivityEvent {
    let output = (transition == Transition::Completed).then(|| json!({"ok": true}));
    Activity::with_engine(p.clone(), activities.clone()).event_row(transition, output, None)
}
