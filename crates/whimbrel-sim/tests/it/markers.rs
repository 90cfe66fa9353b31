//! Due markers against heartbeats whose times go backwards: two writers
//! of one activity's heartbeat (two instances of one launch, delivered
//! twice by Lambda) whose clocks are a second or two apart. Found by the
//! simulation (seed 210 of the time-fault mix): a marker the monitor moved
//! was after the heartbeat deadline.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use crate::support::{block_on, Rec, T0};
use futures::future::BoxFuture;
use futures::FutureExt;
use serde_json::json;
use whimbrel_core::contract::ActivityState;
use whimbrel_core::dates::Timestamp;
use whimbrel_core::engine::{deadline, Engine, EngineConfig, Environment};
use whimbrel_core::model::{ActivityEvent, ActivityExec, WorkflowLambda, WorkflowRequest};
use whimbrel_core::store::memory::MemoryBackend;
use whimbrel_core::store::{
    n, s, Action, Backend, Cond, Found, Item, KeyCond, Page, Store, StoreError, Tables, Write,
};

#[derive(Debug)]
struct Clock(Arc<AtomicI64>);
impl Environment for Clock {
    fn now(&self) -> Timestamp {
        Timestamp::from_epoch(self.0.load(Ordering::SeqCst))
    }
    fn new_token(&self) -> String {
        "0123456789abcdef0123456789abcdef".into()
    }
}

/// The in-memory store, with one update put in just before the first
/// write that moves a due marker (armed once).
#[derive(Debug)]
struct BeforeMove {
    mem: Arc<MemoryBackend>,
    armed: AtomicBool,
    first: Mutex<Option<(String, Item, Vec<Action>)>>,
}
impl Backend for BeforeMove {
    fn get(
        &self,
        t: String,
        k: Item,
        p: Vec<String>,
    ) -> BoxFuture<'_, Result<Option<Item>, StoreError>> {
        self.mem.get(t, k, p)
    }
    fn put(&self, t: String, i: Item, c: Option<Cond>) -> BoxFuture<'_, Result<(), StoreError>> {
        self.mem.put(t, i, c)
    }
    fn update(
        &self,
        t: String,
        k: Item,
        a: Vec<Action>,
        c: Option<Cond>,
        r: bool,
    ) -> BoxFuture<'_, Result<Option<Item>, StoreError>> {
        async move {
            let moves = a
                .iter()
                .any(|x| matches!(x, Action::Set(name, _) if name == "due_epoch"));
            if moves && self.armed.swap(false, Ordering::SeqCst) {
                let (table, key, actions) = self.first.lock().unwrap().take().expect("armed");
                self.mem.update(table, key, actions, None, false).await?;
            }
            self.mem.update(t, k, a, c, r).await
        }
        .boxed()
    }
    fn transact(&self, w: Vec<Write>) -> BoxFuture<'_, Result<(), StoreError>> {
        self.mem.transact(w)
    }
    fn batch_put(&self, t: String, i: Vec<Item>) -> BoxFuture<'_, Result<Vec<Item>, StoreError>> {
        self.mem.batch_put(t, i)
    }
    fn batch_get(&self, t: String, k: Vec<Item>) -> BoxFuture<'_, Result<Found, StoreError>> {
        self.mem.batch_get(t, k)
    }
    fn query(
        &self,
        t: String,
        i: Option<String>,
        k: KeyCond,
        s: Option<Item>,
    ) -> BoxFuture<'_, Result<Page, StoreError>> {
        self.mem.query(t, i, k, s)
    }
    fn pause(&self, _m: u64) -> BoxFuture<'_, ()> {
        futures::future::ready(()).boxed()
    }
}

/// The monitor reads a RUNNING activity whose marker is early (a heartbeat
/// moved its deadline) and moves the marker to the heartbeat deadline; just
/// before its write, the other instance's heartbeat lands, two seconds
/// older than the one it read. The marker must still be no later than the
/// deadline (contract.md § 4: "the marker is never later than the state's
/// deadline"). `extend_due` was conditioned on the item's version only,
/// which a heartbeat does not change, so the marker ended two seconds
/// late; it now also requires the heartbeat time not to have gone back.
#[test]
fn a_heartbeat_older_than_the_one_read_cannot_leave_the_moved_marker_late() {
    let tables = Tables::new("mk_");
    let mem = Arc::new(MemoryBackend::new(&tables, false));
    let plan = json!({"version": 1, "activities": [
        {"name": "a", "lambda": "f", "depends_on": [], "heartbeat_timeout_seconds": 60}]});
    let reg = WorkflowLambda {
        workflow_name: "wf".into(),
        lambda: None,
        definition: Some(serde_json::from_value(plan).unwrap()),
        allow: None,
    };
    block_on(mem.put(
        tables.workflow_lambda(),
        serde_dynamo::to_item(&reg).unwrap(),
        None,
    ))
    .unwrap();
    let now = Arc::new(AtomicI64::new(T0));
    let hook = Arc::new(BeforeMove {
        mem: mem.clone(),
        armed: AtomicBool::new(false),
        first: Mutex::new(None),
    });
    let cfg = EngineConfig {
        table_prefix: "mk_".into(),
        ..EngineConfig::default()
    };
    let rec = Rec::default();
    let e = Engine::with_environment(
        Store::with_backend(hook.clone(), tables.clone()),
        rec.clone(),
        cfg.clone(),
        Arc::new(Clock(now.clone())),
    );
    let request = WorkflowRequest {
        redrive_workflow_exec_id: None,
        parent: None,
        workflow_request_id: "wf::00000000-0000-4000-8000-000000000001".into(),
        workflow_name: "wf".into(),
        when: None,
        when_epoch: None,
        source: None,
        manual: None,
        input: None,
        expires_at_epoch: None,
        cancel_workflow_exec_id: None,
        reason: None,
    };
    block_on(e.start_workflow(&request)).unwrap();
    let act = || -> ActivityExec {
        serde_dynamo::from_item(mem.items(&tables.activity_exec()).pop().unwrap()).unwrap()
    };
    let a = act();
    let launch = rec.invokes.lock().unwrap().last().cloned().unwrap();
    let mut running = ActivityEvent::new(
        &a.activity_exec_id,
        "RUNNING",
        Timestamp::from_epoch(T0),
        "test",
        "r1",
    );
    running.attempt = Some(1);
    running.attempt_token = launch["attempt_token"].as_str().map(str::to_string);
    block_on(mem.put(
        tables.activity_event(),
        serde_dynamo::to_item(&running).unwrap(),
        None,
    ))
    .unwrap();
    block_on(e.apply_event(&running)).unwrap();
    assert_eq!(act().state, ActivityState::Running);
    // Instance 1 heartbeats at T0 + 50 (its clock); its twin, whose clock
    // is two seconds behind, heartbeats at T0 + 48 just as the monitor
    // moves the marker.
    let key = std::collections::HashMap::from([
        ("activity_exec_id".to_string(), s(&a.activity_exec_id)),
        ("workflow_exec_id".to_string(), s(&a.workflow_exec_id)),
    ]);
    let beat = |t: i64| vec![Action::Set("heartbeat_time_epoch".into(), n(t))];
    block_on(mem.update(
        tables.activity_exec(),
        key.clone(),
        beat(T0 + 50),
        None,
        false,
    ))
    .unwrap();
    *hook.first.lock().unwrap() = Some((tables.activity_exec(), key, beat(T0 + 48)));
    hook.armed.store(true, Ordering::SeqCst);
    now.store(T0 + 61, Ordering::SeqCst);
    block_on(e.monitor_tick(T0 + 61)).unwrap();
    assert!(
        !hook.armed.load(Ordering::SeqCst),
        "the monitor moved no marker"
    );
    let a = act();
    let (deadline, _) = deadline::running_deadline(&a, &cfg);
    assert_eq!(a.timing.heartbeat_time_epoch, T0 + 48);
    assert!(
        a.timing.due_epoch.is_some_and(|m| m <= deadline),
        "marker {:?} is after the heartbeat deadline {deadline}",
        a.timing.due_epoch
    );
}
