//! Targeted interleavings against the in-memory model: races that
//! at-least-once delivery, a slow start and the monitor can produce, each
//! pinned down by a test. A redelivery must not reclaim a PREPARING
//! activity, a slow start must not overwrite claimed items, a resumed start
//! must finish, the monitor must not fail a start that stored its plan, and
//! a stale parked event must not shorten a deadline.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::support::{block_on, Rec, T0};
use futures::future::BoxFuture;
use futures::FutureExt;
use serde_json::{json, Value};
use whimbrel_core::contract::{ActivityState, WorkflowState};
use whimbrel_core::dates::Timestamp;
use whimbrel_core::engine::{Engine, EngineConfig, Environment};
use whimbrel_core::launcher::{InvokeError, Launcher};
use whimbrel_core::model::{
    ActivityEvent, ActivityExec, WorkflowExec, WorkflowLambda, WorkflowRequest,
};
use whimbrel_core::store::memory::MemoryBackend;
use whimbrel_core::store::{
    Action, Backend, Cond, Found, Item, KeyCond, Page, Store, StoreError, Tables, Write,
};

// ---------- tiny executor ----------
struct Yield(bool);
impl Future for Yield {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

// ---------- environment, launcher ----------
#[derive(Debug)]
struct Env {
    now: Arc<AtomicI64>,
    n: AtomicU64,
}
impl Environment for Env {
    fn now(&self) -> Timestamp {
        Timestamp::from_epoch(self.now.load(Ordering::SeqCst))
    }
    fn new_token(&self) -> String {
        format!(
            "tok{:029}",
            self.n.fetch_add(1, Ordering::SeqCst) + rand_base()
        )
    }
}
fn rand_base() -> u64 {
    static B: AtomicU64 = AtomicU64::new(0);
    B.fetch_add(1000, Ordering::SeqCst)
}

// ---------- a gate: blocks the first BatchWriteItem on a table until opened ----------
#[derive(Debug)]
struct Gated {
    mem: Arc<MemoryBackend>,
    table: String,
    at_gate: Arc<AtomicBool>,
    open: Arc<AtomicBool>,
}
impl Backend for Gated {
    fn get(
        &self,
        t: String,
        k: Item,
        p: Vec<String>,
    ) -> BoxFuture<'_, Result<Option<Item>, StoreError>> {
        self.mem.get(t, k, p)
    }
    fn put(&self, t: String, i: Item, c: Option<Cond>) -> BoxFuture<'_, Result<(), StoreError>> {
        // The slow start's item creates (conditional puts) wait at the gate.
        async move {
            if t == self.table {
                self.at_gate.store(true, Ordering::SeqCst);
                while !self.open.load(Ordering::SeqCst) {
                    Yield(false).await;
                }
            }
            self.mem.put(t, i, c).await
        }
        .boxed()
    }
    fn update(
        &self,
        t: String,
        k: Item,
        a: Vec<Action>,
        c: Option<Cond>,
        r: bool,
    ) -> BoxFuture<'_, Result<Option<Item>, StoreError>> {
        self.mem.update(t, k, a, c, r)
    }
    fn transact(&self, w: Vec<Write>) -> BoxFuture<'_, Result<(), StoreError>> {
        self.mem.transact(w)
    }
    fn batch_put(
        &self,
        t: String,
        items: Vec<Item>,
    ) -> BoxFuture<'_, Result<Vec<Item>, StoreError>> {
        async move {
            if t == self.table {
                self.at_gate.store(true, Ordering::SeqCst);
                while !self.open.load(Ordering::SeqCst) {
                    Yield(false).await;
                }
            }
            self.mem.batch_put(t, items).await
        }
        .boxed()
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

struct World {
    mem: Arc<MemoryBackend>,
    tables: Tables,
    now: Arc<AtomicI64>,
    rec: Rec,
    cfg: EngineConfig,
}

impl World {
    fn new(plan: Value) -> World {
        let cfg = EngineConfig {
            table_prefix: "rv_".into(),
            ..EngineConfig::default()
        };
        let tables = Tables::new("rv_");
        let mem = Arc::new(MemoryBackend::new(&tables, false));
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
        World {
            mem,
            tables,
            now: Arc::new(AtomicI64::new(T0)),
            rec: Rec::default(),
            cfg,
        }
    }
    fn engine_on(&self, backend: Arc<dyn Backend>) -> Engine<Rec> {
        let store = Store::with_backend(backend, self.tables.clone());
        Engine::with_environment(
            store,
            self.rec.clone(),
            self.cfg.clone(),
            Arc::new(Env {
                now: self.now.clone(),
                n: AtomicU64::new(0),
            }),
        )
    }
    fn engine(&self) -> Engine<Rec> {
        self.engine_on(self.mem.clone())
    }
    fn request(&self) -> WorkflowRequest {
        WorkflowRequest {
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
        }
    }
    fn activities(&self) -> Vec<ActivityExec> {
        self.mem
            .items(&self.tables.activity_exec())
            .into_iter()
            .map(|i| serde_dynamo::from_item(i).unwrap())
            .collect()
    }
    fn act(&self, name: &str) -> ActivityExec {
        self.activities()
            .into_iter()
            .find(|a| a.activity_name == name)
            .unwrap()
    }
    fn workflow(&self) -> WorkflowExec {
        serde_dynamo::from_item(self.mem.items(&self.tables.workflow_exec()).pop().unwrap())
            .unwrap()
    }
    fn invokes_of(&self, id: &str) -> Vec<(u64, String)> {
        self.rec
            .invokes
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p["activity_exec_id"] == id)
            .map(|p| {
                (
                    p["attempt"].as_u64().unwrap(),
                    p["attempt_token"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }
    fn token(&self, id: &str) -> (u32, String) {
        let (a, t) = self.invokes_of(id).pop().unwrap();
        (a as u32, t)
    }
    /// Write an event row (like the helper) and apply it (like the stream).
    fn report(
        &self,
        e: &Engine<Rec>,
        id: &str,
        transition: &str,
        attempt: Option<(u32, String)>,
        seed: &str,
    ) -> Result<whimbrel_core::engine::Applied, whimbrel_core::engine::EngineError> {
        let ev = self.event(id, transition, attempt, seed);
        block_on(e.apply_event(&ev))
    }
    fn event(
        &self,
        id: &str,
        transition: &str,
        attempt: Option<(u32, String)>,
        seed: &str,
    ) -> ActivityEvent {
        let mut ev = ActivityEvent::new(
            id,
            transition,
            Timestamp::from_epoch(self.now.load(Ordering::SeqCst)),
            "review",
            seed,
        );
        if transition == "COMPLETED" {
            ev.output = Some(json!({"ok": true}));
        }
        if let Some((a, t)) = attempt {
            ev.attempt = Some(a);
            ev.attempt_token = Some(t);
        }
        block_on(self.mem.put(
            self.tables.activity_event(),
            serde_dynamo::to_item(&ev).unwrap(),
            None,
        ))
        .unwrap();
        ev
    }
    fn advance(&self, s: i64) {
        self.now.fetch_add(s, Ordering::SeqCst);
    }
}

fn one_root() -> Value {
    json!({"version": 1, "activities": [{"name": "a", "lambda": "f", "depends_on": []}]})
}
fn chain() -> Value {
    json!({"version": 1, "activities": [
        {"name": "a", "lambda": "f", "depends_on": []},
        {"name": "b", "lambda": "f", "depends_on": ["a"]}]})
}

/// A redelivered workflow request must not re-claim a root that is
/// PREPARING (`queue_and_launch` must not treat PREPARING as claimable).
#[test]
fn redelivered_request_reclaims_a_preparing_root() {
    let w = World::new(one_root());
    let e = w.engine();
    block_on(e.start_workflow(&w.request())).unwrap();
    let a = w.act("a");
    let tok = w.token(&a.activity_exec_id);
    assert_eq!(tok.0, 1);
    w.advance(2);
    w.report(
        &e,
        &a.activity_exec_id,
        "PREPARING",
        Some(tok.clone()),
        "p1",
    )
    .unwrap();
    assert_eq!(w.act("a").state, ActivityState::Preparing);
    // The request's stream record comes again (at-least-once, or a later
    // record of the batch failed and the mapping resumed before it).
    w.advance(1);
    block_on(e.start_workflow(&w.request())).unwrap();
    let after = w.act("a");
    let invokes = w.invokes_of(&a.activity_exec_id);
    eprintln!(
        "state {} attempt {} invokes {:?} history {:?}",
        after.state,
        after.attempt.number,
        invokes,
        after
            .trail
            .history
            .iter()
            .map(|h| (h.state, h.event_id.clone()))
            .collect::<Vec<_>>()
    );
    // The running attempt's own RUNNING report is now refused as stale.
    let r = w.report(&e, &a.activity_exec_id, "RUNNING", Some(tok), "r1");
    eprintln!("attempt 1 RUNNING -> {r:?}");
    assert_eq!(
        after.state,
        ActivityState::Preparing,
        "PREPARING went back to {} (attempt {})",
        after.state,
        after.attempt.number
    );
}

/// A redelivered COMPLETED of a prerequisite must not re-claim a
/// dependent that is PREPARING.
#[test]
fn redelivered_prerequisite_completed_reclaims_a_preparing_dependent() {
    let w = World::new(chain());
    let e = w.engine();
    block_on(e.start_workflow(&w.request())).unwrap();
    let a = w.act("a");
    let ta = w.token(&a.activity_exec_id);
    w.report(&e, &a.activity_exec_id, "RUNNING", Some(ta.clone()), "ra")
        .unwrap();
    let done = w.event(&a.activity_exec_id, "COMPLETED", Some(ta), "ca");
    block_on(e.apply_event(&done)).unwrap();
    let b = w.act("b");
    assert_eq!(b.state, ActivityState::Queued);
    let tb = w.token(&b.activity_exec_id);
    w.report(&e, &b.activity_exec_id, "PREPARING", Some(tb), "pb")
        .unwrap();
    // Redelivery of a's COMPLETED record.
    block_on(e.apply_event(&done)).unwrap();
    let after = w.act("b");
    eprintln!(
        "b: state {} attempt {} invokes {:?}",
        after.state,
        after.attempt.number,
        w.invokes_of(&b.activity_exec_id)
    );
    assert_eq!(
        after.state,
        ActivityState::Preparing,
        "PREPARING went back to {} (attempt {})",
        after.state,
        after.attempt.number
    );
}

/// Every activity ended while the workflow was REQUESTED; the start dies
/// (or is throttled) after REQUESTED -> RUNNING and before its finish
/// check. A resumed start must still finish the workflow: skipping
/// finish_workflow, then clearing the due marker, would leave it RUNNING
/// for ever.
#[test]
fn resumed_start_never_finishes_a_workflow_whose_activities_ended_while_requested() {
    let w = World::new(one_root());
    let e = w.engine();
    // First start: the move to RUNNING is throttled (any transient error).
    let wf_updates = Arc::new(AtomicUsize::new(0));
    let c = wf_updates.clone();
    let table = w.tables.workflow_exec();
    w.mem.set_fault_hook(Some(Arc::new(move |op, t| {
        if op == "UpdateItem" && t == table && c.fetch_add(1, Ordering::SeqCst) == 1 {
            return Some(StoreError::Transient {
                op: "UpdateItem",
                message: "throttled".into(),
            });
        }
        None
    })));
    let r = block_on(e.start_workflow(&w.request()));
    assert!(r.is_err(), "{r:?}");
    w.mem.set_fault_hook(None);
    // A user cancels the (only) activity meanwhile: CANCELLED, counted; its
    // finish check sees REQUESTED; its marker is cleared.
    let a = w.act("a");
    w.report(&e, &a.activity_exec_id, "CANCEL", None, "c1")
        .unwrap();
    assert_eq!(w.act("a").state, ActivityState::Cancelled);
    // Redelivery: the move to RUNNING lands, the finish check's read is
    // throttled (or the function dies right there).
    let gets = Arc::new(AtomicUsize::new(0));
    let g = gets.clone();
    let table = w.tables.workflow_exec();
    w.mem.set_fault_hook(Some(Arc::new(move |op, t| {
        if op == "GetItem" && t == table && g.fetch_add(1, Ordering::SeqCst) == 1 {
            return Some(StoreError::Transient {
                op: "GetItem",
                message: "throttled".into(),
            });
        }
        None
    })));
    let r = block_on(e.start_workflow(&w.request()));
    eprintln!("second start: {r:?}");
    w.mem.set_fault_hook(None);
    // Redelivery again (and the monitor, much later).
    let r = block_on(e.start_workflow(&w.request()));
    eprintln!("third start: {r:?}");
    w.advance(3600);
    let rep = block_on(e.monitor_tick(T0 + 3600)).unwrap();
    eprintln!("monitor: {rep:?}");
    let wf = w.workflow();
    eprintln!(
        "workflow {} counts c{} f{} x{} of {} due {:?}",
        wf.state,
        wf.completed_count,
        wf.failed_count,
        wf.cancelled_count,
        wf.activity_count,
        wf.due_epoch
    );
    assert_ne!(
        wf.state,
        WorkflowState::Running,
        "stuck RUNNING with no due marker: nothing will ever finish it"
    );
}

/// The caller that stored the plan is slow to create the activity items; a
/// concurrent start (the monitor's restart) creates and claims them
/// meanwhile. The slow start must not overwrite them (creates are
/// conditional puts), or the same attempt would be launched twice with two
/// tokens.
#[test]
fn slow_planner_overwrites_activities_a_monitor_restart_already_claimed() {
    let w = World::new(one_root());
    let at_gate = Arc::new(AtomicBool::new(false));
    let open = Arc::new(AtomicBool::new(false));
    let gated = Arc::new(Gated {
        mem: w.mem.clone(),
        table: w.tables.activity_exec(),
        at_gate: at_gate.clone(),
        open: open.clone(),
    });
    let slow = w.engine_on(gated);
    let monitor = w.engine();
    let req = w.request();
    let x = async { slow.start_workflow(&req).await };
    let y = async {
        while !at_gate.load(Ordering::SeqCst) {
            Yield(false).await;
        }
        // The stream's start is slow (throttled BatchWriteItem, a decider
        // close to the 60 s start retry): the monitor's tick comes.
        w.advance(61);
        let rep = monitor.monitor_tick(T0 + 61).await;
        open.store(true, Ordering::SeqCst);
        rep
    };
    let (rx, ry) = block_on(futures::future::join(x, y));
    eprintln!("slow start {rx:?}; monitor {ry:?}");
    let a = w.act("a");
    let inv = w.invokes_of(&a.activity_exec_id);
    eprintln!(
        "a: state {} attempt {} version {} invokes {:?}",
        a.state, a.attempt.number, a.version, inv
    );
    let attempt1: Vec<_> = inv.iter().filter(|(n, _)| *n == 1).collect();
    assert!(
        attempt1.len() <= 1,
        "attempt 1 launched {} times with different tokens",
        attempt1.len()
    );
}

/// A parked event that can no longer apply (its attempt was replaced)
/// must not shorten the due marker to the settle grace: the monitor would
/// read the marker of PREPARING as its deadline and time it out after
/// ~70 s instead of start-to-close.
#[test]
fn stale_parked_event_turns_the_preparing_deadline_into_sixty_seconds() {
    let w = World::new(one_root());
    let e = w.engine();
    block_on(e.start_workflow(&w.request())).unwrap();
    let a = w.act("a");
    let t1 = w.token(&a.activity_exec_id);
    // Attempt 1 starts at the edge of schedule-to-start: its COMPLETED is
    // delivered (and parked: QUEUED) ...
    w.advance(128);
    w.report(&e, &a.activity_exec_id, "COMPLETED", Some(t1.clone()), "c1")
        .unwrap();
    assert_eq!(w.act("a").trail.parked.len(), 1);
    // ... and its RUNNING row is not in the event index when the monitor
    // judges (written later than COMPLETED was delivered, or index lag).
    w.advance(3);
    let rep = block_on(e.monitor_tick(T0 + 131)).unwrap();
    assert_eq!(rep.relaunched, 1, "{rep:?}");
    let r = w.report(&e, &a.activity_exec_id, "RUNNING", Some(t1), "r1");
    assert!(r.is_err());
    // Attempt 2 starts normally and prepares (start-to-close is 3600 s).
    let t2 = w.token(&a.activity_exec_id);
    w.advance(5);
    w.report(&e, &a.activity_exec_id, "PREPARING", Some(t2), "p2")
        .unwrap();
    let now = w.now.load(Ordering::SeqCst);
    let p = w.act("a");
    eprintln!(
        "PREPARING at {now}, due {:?} (+{}), parked {}",
        p.timing.due_epoch,
        p.timing.due_epoch.unwrap() - now,
        p.trail.parked.len()
    );
    w.advance(75);
    let rep = block_on(e.monitor_tick(now + 75)).unwrap();
    let after = w.act("a");
    eprintln!(
        "monitor 75 s after PREPARING: {rep:?}; state {} error {:?}",
        after.state, after.outcome.error
    );
    assert_eq!(
        after.state,
        ActivityState::Preparing,
        "timed out 75 s into a 3600 s PREPARING"
    );
}

// ---------- the monitor's "not started after N attempts" races a start ----------
#[derive(Debug, Clone)]
struct Decider {
    down: Arc<AtomicBool>,
    plan: Value,
    rec: Rec,
}
impl Launcher for Decider {
    async fn invoke_sync(&self, f: &str, _p: &Value) -> Result<Value, InvokeError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(InvokeError::Unavailable {
                function: f.into(),
                message: "429".into(),
            });
        }
        Ok(self.plan.clone())
    }
    async fn invoke_async(&self, f: &str, p: &Value) -> Result<(), InvokeError> {
        self.rec.invoke_async(f, p).await
    }
}

/// Blocks the n-th UpdateItem (1-based) on `table` until `open`.
#[derive(Debug)]
struct GateUpdate {
    mem: Arc<MemoryBackend>,
    table: String,
    nth: usize,
    seen: AtomicUsize,
    at_gate: Arc<AtomicBool>,
    open: Arc<AtomicBool>,
}
impl Backend for GateUpdate {
    fn get(
        &self,
        t: String,
        k: Item,
        p: Vec<String>,
    ) -> BoxFuture<'_, Result<Option<Item>, StoreError>> {
        self.mem.get(t, k, p)
    }
    fn put(&self, t: String, i: Item, c: Option<Cond>) -> BoxFuture<'_, Result<(), StoreError>> {
        // The slow start's item creates (conditional puts) wait at the gate.
        async move {
            if t == self.table {
                self.at_gate.store(true, Ordering::SeqCst);
                while !self.open.load(Ordering::SeqCst) {
                    Yield(false).await;
                }
            }
            self.mem.put(t, i, c).await
        }
        .boxed()
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
            if t == self.table && self.seen.fetch_add(1, Ordering::SeqCst) + 1 == self.nth {
                self.at_gate.store(true, Ordering::SeqCst);
                while !self.open.load(Ordering::SeqCst) {
                    Yield(false).await;
                }
            }
            self.mem.update(t, k, a, c, r).await
        }
        .boxed()
    }
    fn transact(&self, w: Vec<Write>) -> BoxFuture<'_, Result<(), StoreError>> {
        self.mem.transact(w)
    }
    fn batch_put(
        &self,
        t: String,
        items: Vec<Item>,
    ) -> BoxFuture<'_, Result<Vec<Item>, StoreError>> {
        self.mem.batch_put(t, items)
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

#[test]
fn monitor_fails_a_workflow_whose_start_is_storing_its_plan_and_the_start_launches_anyway() {
    let plan = one_root();
    let tables = Tables::new("rv_");
    let mem = Arc::new(MemoryBackend::new(&tables, false));
    let reg = WorkflowLambda {
        workflow_name: "wf".into(),
        lambda: Some("decider".into()),
        definition: None,
        allow: None,
    };
    block_on(mem.put(
        tables.workflow_lambda(),
        serde_dynamo::to_item(&reg).unwrap(),
        None,
    ))
    .unwrap();
    let now = Arc::new(AtomicI64::new(T0));
    let down = Arc::new(AtomicBool::new(true));
    let rec = Rec::default();
    let cfg = EngineConfig {
        table_prefix: "rv_".into(),
        ..EngineConfig::default()
    };
    let mk = |b: Arc<dyn Backend>| {
        Engine::with_environment(
            Store::with_backend(b, tables.clone()),
            Decider {
                down: down.clone(),
                plan: plan.clone(),
                rec: rec.clone(),
            },
            cfg.clone(),
            Arc::new(Env {
                now: now.clone(),
                n: AtomicU64::new(0),
            }),
        )
    };
    let w = World::new(one_root());
    let req = w.request();
    let plain = mk(mem.clone());
    assert!(block_on(plain.start_workflow(&req)).is_err()); // decider down
                                                            // The decider stays down across max_start_attempts monitor restarts.
    for k in 1..=5 {
        let t = T0 + 61 * k;
        now.store(t, Ordering::SeqCst);
        let rep = block_on(plain.monitor_tick(t)).unwrap();
        assert_eq!(rep.restarted + rep.errors, 1, "{rep:?}");
    }
    down.store(false, Ordering::SeqCst);
    let t = T0 + 61 * 6;
    now.store(t, Ordering::SeqCst);
    // The monitor reads the exec (no plan, 5 attempts) and is about to fail
    // it; the stream's retry of the request runs meanwhile.
    let (m_at, m_open) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let (x_at, x_open) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let monitor = mk(Arc::new(GateUpdate {
        mem: mem.clone(),
        table: tables.workflow_exec(),
        nth: 1,
        seen: AtomicUsize::new(0),
        at_gate: m_at.clone(),
        open: m_open.clone(),
    }));
    let stream = mk(Arc::new(GateUpdate {
        mem: mem.clone(),
        table: tables.workflow_exec(),
        nth: 2,
        seen: AtomicUsize::new(0),
        at_gate: x_at.clone(),
        open: x_open.clone(),
    }));
    let m = async { monitor.monitor_tick(t).await };
    let x = async {
        while !m_at.load(Ordering::SeqCst) {
            Yield(false).await;
        }
        let r = stream.start_workflow(&req).await;
        r
    };
    let driver = async {
        while !x_at.load(Ordering::SeqCst) {
            Yield(false).await;
        }
        m_open.store(true, Ordering::SeqCst); // FAILED lands
        for _ in 0..50 {
            Yield(false).await;
        }
        x_open.store(true, Ordering::SeqCst); // REQUESTED -> RUNNING fails, ignored
    };
    let (rm, rx, ()) = block_on(futures::future::join3(m, x, driver));
    let wf: WorkflowExec =
        serde_dynamo::from_item(mem.items(&tables.workflow_exec()).pop().unwrap()).unwrap();
    let acts: Vec<ActivityExec> = mem
        .items(&tables.activity_exec())
        .into_iter()
        .map(|i| serde_dynamo::from_item(i).unwrap())
        .collect();
    eprintln!(
        "monitor {rm:?}; start {rx:?}; workflow {} error {:?}; activities {:?}; invokes {}",
        wf.state,
        wf.error,
        acts.iter()
            .map(|a| (a.activity_name.clone(), a.state, a.attempt.number))
            .collect::<Vec<_>>(),
        rec.invokes.lock().unwrap().len()
    );
    assert!(
        wf.state != WorkflowState::Failed || rec.invokes.lock().unwrap().is_empty(),
        "workflow FAILED 'not started' while its activities were launched"
    );
}

// ---------- a gate on the writes to one activity item ----------
/// Holds the first UpdateItem or transaction that writes the item whose
/// `activity_exec_id` is `id` until `open`; other writes pass.
#[derive(Debug)]
struct ItemGate {
    mem: Arc<MemoryBackend>,
    id: String,
    at_gate: Arc<AtomicBool>,
    open: Arc<AtomicBool>,
}
impl ItemGate {
    fn names(&self, key: &Item) -> bool {
        key.get("activity_exec_id") == Some(&whimbrel_core::store::s(&self.id))
    }
    async fn hold(&self) {
        self.at_gate.store(true, Ordering::SeqCst);
        while !self.open.load(Ordering::SeqCst) {
            Yield(false).await;
        }
    }
}
impl Backend for ItemGate {
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
            if self.names(&k) {
                self.hold().await;
            }
            self.mem.update(t, k, a, c, r).await
        }
        .boxed()
    }
    fn transact(&self, w: Vec<Write>) -> BoxFuture<'_, Result<(), StoreError>> {
        async move {
            let held = w
                .iter()
                .any(|x| matches!(x, Write::Update { key, .. } if self.names(key)));
            if held {
                self.hold().await;
            }
            self.mem.transact(w).await
        }
        .boxed()
    }
    fn batch_put(
        &self,
        t: String,
        items: Vec<Item>,
    ) -> BoxFuture<'_, Result<Vec<Item>, StoreError>> {
        self.mem.batch_put(t, items)
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

/// Issue 42 A.3: the monitor reads a timer due and decides to fire it; its
/// write stalls. Meanwhile the workflow is cancelled (the timer with it)
/// and redriven: the timer runs again, in generation 1, due a minute
/// later. The stalled write then fails its condition, and the monitor
/// reads the timer again: it must not fire the new generation's timer with
/// the old generation's verdict (before the fix it did, a minute early).
#[test]
fn a_fire_stalled_across_a_redrive_does_not_fire_the_redriven_timer() {
    let w = World::new(json!({"version": 1, "activities": [
        {"name": "t", "wait": {"seconds": 60}}]}));
    let e = w.engine();
    block_on(e.start_workflow(&w.request())).unwrap();
    let t = w.act("t");
    assert_eq!(t.state, ActivityState::Running);
    let at_gate = Arc::new(AtomicBool::new(false));
    let open = Arc::new(AtomicBool::new(false));
    let gated = Arc::new(ItemGate {
        mem: w.mem.clone(),
        id: t.activity_exec_id.clone(),
        at_gate: at_gate.clone(),
        open: open.clone(),
    });
    let monitor = w.engine_on(gated);
    w.advance(60);
    let x = async { monitor.monitor_tick(T0 + 60).await };
    let y = async {
        while !at_gate.load(Ordering::SeqCst) {
            Yield(false).await;
        }
        // While the Fire stalls: the workflow is cancelled, its timer with
        // it, and then redriven.
        let id = w.workflow().workflow_exec_id;
        let request = |n: u32| WorkflowRequest {
            workflow_request_id: format!("wf::00000000-0000-4000-8000-00000000000{n}"),
            ..w.request()
        };
        let cancel = WorkflowRequest {
            cancel_workflow_exec_id: Some(id.clone()),
            ..request(2)
        };
        e.cancel_workflow(&cancel).await.unwrap();
        assert_eq!(w.workflow().state, WorkflowState::Cancelled);
        assert_eq!(w.act("t").state, ActivityState::Cancelled);
        let redrive = WorkflowRequest {
            redrive_workflow_exec_id: Some(id),
            ..request(3)
        };
        e.redrive_workflow(&redrive).await.unwrap();
        assert_eq!(w.act("t").state, ActivityState::Running);
        open.store(true, Ordering::SeqCst);
    };
    let (tick, ()) = block_on(futures::future::join(x, y));
    tick.unwrap();
    let t = w.act("t");
    assert_eq!(t.generation(), 1, "redriven");
    assert_eq!(
        t.state,
        ActivityState::Running,
        "the redriven timer fires at its own time, not the stale verdict's: {:?}",
        t.trail.history
    );
}
