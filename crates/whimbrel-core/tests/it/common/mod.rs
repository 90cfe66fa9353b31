//! Test support: DynamoDB Local (AWS's own DynamoDB + Streams API) started
//! by the tests themselves, fresh tables per test, and a recording launcher.
//!
//! DynamoDB Local is started once per test process on a free loopback port
//! (`scripts/dynamodb-local.sh run PORT`, which installs it into `.local/ddb`
//! on first use), with a watchdog that stops it when the test process exits.
//! Set `WHIMBREL_TEST_DYNAMODB=http://127.0.0.1:PORT` to use a running
//! server instead.

#![allow(dead_code)]

pub mod deciders;

use std::collections::HashMap;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use whimbrel_core::activity::Activity;
use whimbrel_core::contract::{ActivityState, Transition};
use whimbrel_core::dates::Timestamp;
use whimbrel_core::engine::decide::{self, Change, Details};
use whimbrel_core::engine::{Engine, EngineConfig, Environment, MonitorReport};
use whimbrel_core::handlers::{self, BatchSummary};
use whimbrel_core::ids;
use whimbrel_core::launcher::{InvokeError, Launcher};
use whimbrel_core::model::{
    ActivityEvent, ActivityExec, WorkflowExec, WorkflowLambda, WorkflowRequest,
};
use whimbrel_core::plan::{LaunchPayload, Plan};
use whimbrel_core::store::{s, Store, Tables};

fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The endpoint of the shared DynamoDB Local, starting it on first use.
pub fn dynamodb_endpoint() -> String {
    static ENDPOINT: OnceLock<String> = OnceLock::new();
    ENDPOINT
        .get_or_init(|| {
            if let Ok(url) = std::env::var("WHIMBREL_TEST_DYNAMODB") {
                return url;
            }
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("free port")
                .port();
            let script = repo_root().join("scripts/dynamodb-local.sh");
            let log = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
                "whimbrel-dynamodb-local-{}-{port}.log",
                std::process::id()
            ));
            // The watchdog stops DynamoDB Local (`run` execs java, so $m is
            // the server) when this test process is gone.
            let watch = format!(
                "bash '{}' run {port} >'{}' 2>&1 & m=$!; \
                 while kill -0 {pid} 2>/dev/null && kill -0 $m 2>/dev/null; do sleep 0.5; done; \
                 kill $m 2>/dev/null",
                script.display(),
                log.display(),
                pid = std::process::id()
            );
            let watchdog = Command::new("sh")
                .arg("-c")
                .arg(watch)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start DynamoDB Local");
            // Kept for the life of the test process; the watchdog ends
            // itself and the server when this process exits.
            static WATCHDOG: OnceLock<Mutex<std::process::Child>> = OnceLock::new();
            let watchdog = WATCHDOG.get_or_init(|| Mutex::new(watchdog));
            let start = Instant::now();
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                let exited = watchdog.lock().unwrap().try_wait().ok().flatten().is_some();
                // A first run may install it (npm) before starting.
                if exited || start.elapsed() > Duration::from_secs(180) {
                    panic!(
                        "DynamoDB Local did not start on 127.0.0.1:{port}; {}:\n{}",
                        log.display(),
                        std::fs::read_to_string(&log).unwrap_or_default()
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            format!("http://127.0.0.1:{port}")
        })
        .clone()
}

/// A decider answering from its request.
pub type DeciderFn = Arc<dyn Fn(Value) -> Result<Value, InvokeError> + Send + Sync>;

/// A launcher that records async invocations and answers deciders from a
/// map of function name → answer.
#[derive(Clone, Default)]
pub struct RecordingLauncher {
    pub launched: Arc<Mutex<Vec<(String, Value)>>>,
    pub deciders: Arc<Mutex<HashMap<String, Result<Value, InvokeError>>>>,
    /// Deciders that answer from the request (episodic ones), by name.
    pub decider_fns: Arc<Mutex<HashMap<String, DeciderFn>>>,
    /// Every request a decider was invoked with, in order.
    pub decider_requests: Arc<Mutex<Vec<(String, Value)>>>,
    /// Wake-ups sent to the timer queue, with their `DelaySeconds`.
    pub wake_ups: Arc<Mutex<Vec<(whimbrel_core::engine::decide::WakeUp, i64)>>>,
    /// Deciders that answer only after this long (real time), by name: a
    /// slow or hung decider.
    pub decider_delays: Arc<Mutex<HashMap<String, std::time::Duration>>>,
}

impl RecordingLauncher {
    /// Launch payloads by activity name.
    pub fn launches_of(&self, activity_name: &str) -> Vec<Value> {
        self.launched
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, p)| p["activity_name"] == activity_name)
            .map(|(_, p)| p.clone())
            .collect()
    }

    pub fn launch_count(&self) -> usize {
        self.launched.lock().unwrap().len()
    }

    /// The `i`-th launch payload (0-based) of activity `activity_name`.
    pub fn payload(&self, activity_name: &str, i: usize) -> LaunchPayload {
        let all = self.launches_of(activity_name);
        let p = all
            .get(i)
            .unwrap_or_else(|| panic!("{activity_name}: launch {i} of {}", all.len()));
        serde_json::from_value(p.clone()).expect("launch payload")
    }
}

impl Launcher for RecordingLauncher {
    async fn invoke_sync(&self, function: &str, payload: &Value) -> Result<Value, InvokeError> {
        self.decider_requests
            .lock()
            .unwrap()
            .push((function.into(), payload.clone()));
        let delay = self.decider_delays.lock().unwrap().get(function).copied();
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        let answering = self.decider_fns.lock().unwrap().get(function).cloned();
        if let Some(f) = answering {
            return f(payload.clone());
        }
        self.deciders
            .lock()
            .unwrap()
            .get(function)
            .cloned()
            .unwrap_or_else(|| {
                Err(InvokeError::Rejected {
                    function: function.into(),
                    message: "no such function".into(),
                })
            })
    }

    async fn invoke_async(&self, function: &str, payload: &Value) -> Result<(), InvokeError> {
        if function == "missing-function" {
            return Err(InvokeError::Rejected {
                function: function.into(),
                message: "ResourceNotFoundException".into(),
            });
        }
        self.launched
            .lock()
            .unwrap()
            .push((function.into(), payload.clone()));
        Ok(())
    }
    async fn wake_up(
        &self,
        wake: &whimbrel_core::engine::decide::WakeUp,
        delay_seconds: i64,
    ) -> Result<(), InvokeError> {
        self.wake_ups
            .lock()
            .unwrap()
            .push((wake.clone(), delay_seconds));
        Ok(())
    }
}

/// The engine's clock in the tests: the system clock moved by an offset, so
/// a monitor tick "at" a future time runs with the engine's own clock at
/// that time too (as in production, where both are the same clock).
/// It may be frozen at one second for a tick ([`Harness::tick`]), whose
/// judgments read the clock after each read of an item.
#[derive(Debug)]
pub struct TestClock {
    offset: AtomicI64,
    /// The second the clock stands at, or `i64::MIN` while it runs.
    frozen: AtomicI64,
}

impl Default for TestClock {
    fn default() -> Self {
        TestClock {
            offset: AtomicI64::new(0),
            frozen: AtomicI64::new(i64::MIN),
        }
    }
}

impl TestClock {
    /// Move the clock so that it reads `epoch` now (forwards or back), and
    /// let it run on.
    pub fn set(&self, epoch: i64) {
        self.frozen.store(i64::MIN, Ordering::SeqCst);
        self.offset
            .store(epoch - Timestamp::now().epoch, Ordering::SeqCst);
    }

    /// Stop the clock at `epoch` until it is [`Self::set`] again.
    pub fn freeze(&self, epoch: i64) {
        self.frozen.store(epoch, Ordering::SeqCst);
    }
}

impl Environment for TestClock {
    fn now(&self) -> Timestamp {
        match self.frozen.load(Ordering::SeqCst) {
            i64::MIN => {
                Timestamp::from_epoch(Timestamp::now().epoch + self.offset.load(Ordering::SeqCst))
            }
            at => Timestamp::from_epoch(at),
        }
    }
    fn new_token(&self) -> String {
        uuid::Uuid::new_v4().simple().to_string()
    }
}

/// A fresh set of installed tables on DynamoDB Local and an engine.
/// The SDK settings of the tests' DynamoDB Local ([`dynamodb_endpoint`]):
/// test credentials, us-east-1, the engine's HTTP client.
pub async fn sdk_config() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(whimbrel_core::http_client())
        .endpoint_url(dynamodb_endpoint())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "test", "test", None, None, "tests",
        ))
        .load()
        .await
}

pub struct Harness {
    pub engine: Engine<RecordingLauncher>,
    pub launcher: RecordingLauncher,
    pub store: Store,
    pub clock: Arc<TestClock>,
    /// The same tables through a store of their own, for what clients
    /// write (event rows a delivery implies): its calls are not counted
    /// among the engine's.
    pub clients: Store,
}

impl Harness {
    /// Fresh tables with a random prefix.
    pub async fn new() -> Harness {
        let prefix = format!("t{}_", &uuid::Uuid::new_v4().simple().to_string()[..10]);
        Harness::with_prefix(&prefix).await
    }

    /// Tables with `prefix` (created if missing).
    pub async fn with_prefix(prefix: &str) -> Harness {
        let prefix = prefix.to_string();
        let sdk = sdk_config().await;
        let store = Store::new(
            aws_sdk_dynamodb::Client::new(&sdk),
            Tables::new(prefix.clone()),
        );
        let clients = Store::new(
            aws_sdk_dynamodb::Client::new(&sdk),
            Tables::new(prefix.clone()),
        );
        whimbrel_core::install::install(&store)
            .await
            .expect("install tables");
        let launcher = RecordingLauncher::default();
        let config = EngineConfig {
            table_prefix: prefix,
            ..EngineConfig::default()
        };
        let clock = Arc::new(TestClock::default());
        Harness {
            engine: Engine::with_environment(
                store.clone(),
                launcher.clone(),
                config,
                clock.clone(),
            ),
            launcher,
            store,
            clock,
            clients,
        }
    }

    /// The engine's current time, epoch seconds.
    pub fn now(&self) -> i64 {
        self.clock.now().epoch
    }

    /// One heartbeat monitor tick at `at`, with the engine's clock stopped
    /// at `at` while it runs (so each item is judged at `at`), then
    /// running on from there.
    pub async fn tick(&self, at: i64) -> MonitorReport {
        self.clock.freeze(at);
        let report = self.engine.monitor_tick(at).await.expect("monitor tick");
        self.clock.set(at);
        report
    }

    /// Register `name` with a static plan.
    pub async fn register(&self, name: &str, plan: Value) {
        let plan: Plan = serde_json::from_value(plan).expect("plan json");
        let item = WorkflowLambda {
            workflow_name: name.into(),
            lambda: None,
            definition: Some(plan),
            allow: None,
        };
        self.store
            .put(&self.store.tables().workflow_lambda(), &item)
            .await
            .unwrap();
    }

    /// Register `name` as planned by the decider Lambda `{name}-decider`,
    /// whose answer to every start is `plan` (a decider-planned workflow,
    /// not episodic); registered again, the answer is the new `plan`.
    pub async fn register_planned(&self, name: &str, plan: Value) {
        let lambda = format!("{name}-decider");
        self.register_lambda(name, &lambda).await;
        self.launcher
            .deciders
            .lock()
            .unwrap()
            .insert(lambda, Ok(plan));
    }

    /// Register `name` as decided by the Lambda `lambda`.
    async fn register_lambda(&self, name: &str, lambda: &str) {
        let item = WorkflowLambda {
            workflow_name: name.into(),
            lambda: Some(lambda.into()),
            definition: None,
            allow: None,
        };
        self.store
            .put(&self.store.tables().workflow_lambda(), &item)
            .await
            .unwrap();
    }

    /// Register `name` as episodic, with decider Lambda `lambda` answered
    /// in-process by `decider` (through the core's decider helper).
    pub async fn register_decider(
        &self,
        name: &str,
        lambda: &str,
        decider: Arc<dyn whimbrel_core::deciding::Decider>,
    ) {
        self.register_lambda(name, lambda).await;
        let answer = move |payload: Value| {
            Ok(whimbrel_core::deciding::answer(decider.as_ref(), payload).unwrap())
        };
        self.launcher
            .decider_fns
            .lock()
            .unwrap()
            .insert(lambda.into(), Arc::new(answer));
    }

    pub fn request(&self, name: &str, input: Option<Value>) -> WorkflowRequest {
        let now = self.clock.now();
        WorkflowRequest {
            redrive_workflow_exec_id: None,
            parent: None,
            workflow_request_id: ids::new_id(name),
            workflow_name: name.into(),
            when: Some(now.date_list()),
            when_epoch: Some(now.epoch as f64),
            source: Some("tests".into()),
            manual: None,
            input,
            expires_at_epoch: None,
            cancel_workflow_exec_id: None,
            reason: None,
        }
    }

    /// Start `name` and return its workflow exec id.
    pub async fn start(&self, name: &str) -> String {
        let req = self.request(name, None);
        self.engine.start_workflow(&req).await.expect("start");
        ids::workflow_exec_id(name, &req.workflow_request_id)
    }

    pub async fn workflow(&self, id: &str) -> WorkflowExec {
        let name = ids::name_of(id).unwrap();
        self.engine.load_workflow(id, name).await.unwrap()
    }

    pub async fn activity(&self, wf: &str, name: &str) -> ActivityExec {
        let id = ids::activity_exec_id(wf, name);
        self.engine
            .find_activity(&id)
            .await
            .unwrap()
            .expect("activity exists")
    }

    /// An event row for activity `name` of `wf`.
    pub fn event(&self, wf: &str, name: &str, transition: &str) -> ActivityEvent {
        let id = ids::activity_exec_id(wf, name);
        let now = self.clock.now();
        ActivityEvent {
            activity_event_id: ids::new_id(&id),
            activity_exec_id: id,
            transition: transition.into(),
            when: Some(now.date_list()),
            when_epoch: Some(now.epoch as f64),
            source: Some("tests".into()),
            manual: None,
            output: (transition == "COMPLETED").then(|| json!({"from": name})),
            error: (transition == "FAILED").then(|| format!("{name} broke")),
            activity_name: None,
            workflow_exec_id: None,
            workflow_name: None,
            attempt: None,
            attempt_token: None,
            expires_at_epoch: None,
            rejected_epoch: None,
            rejected_reason: None,
        }
    }

    /// A stream event of `whimbrel_activity_event` INSERTs for `events`,
    /// with sequence numbers from `seq`.
    pub fn event_batch(&self, events: &[ActivityEvent], seq: u64) -> Value {
        stream_event(
            &self.store.tables().activity_event(),
            &["activity_event_id", "activity_exec_id"],
            events,
            seq,
        )
    }

    /// The engine settings (table prefix of this harness).
    pub fn config(&self) -> EngineConfig {
        self.engine.config().clone()
    }

    /// The deadline of a live activity's state, epoch seconds
    /// (`decide::next_deadline`), after checking that its due marker is
    /// present and not later (markers are lazy: they may be early, and the
    /// monitor moves an early one when it looks, never late).
    ///
    /// Panics: no deadline, no marker, or a marker after the deadline.
    pub fn deadline(&self, exec: &ActivityExec) -> i64 {
        let (at, kind) = whimbrel_core::engine::decide::next_deadline(exec, &self.config())
            .unwrap_or_else(|| panic!("{} ({}) has no deadline", exec.activity_name, exec.state));
        let marker = exec
            .timing
            .due_epoch
            .unwrap_or_else(|| panic!("{} has no due marker", exec.activity_name));
        assert!(
            marker <= at,
            "{}: marker {marker} after its {kind:?} deadline {at}",
            exec.activity_name
        );
        at
    }

    /// The activity Lambda of the `i`-th launch (0-based) of `name`: it
    /// reports through the event table with that attempt's number and token.
    pub fn attempt(&self, name: &str, i: usize) -> Activity {
        let engine =
            Engine::with_environment(self.store.clone(), (), self.config(), self.clock.clone());
        Activity::with_engine(self.launcher.payload(name, i), engine)
    }

    /// An event row for activity `name` of `wf` from the `i`-th launch
    /// (0-based) of it: with that attempt's number and token.
    pub fn attempt_event(&self, wf: &str, name: &str, transition: &str, i: usize) -> ActivityEvent {
        let p = self.launcher.payload(name, i);
        ActivityEvent {
            attempt: Some(p.attempt),
            attempt_token: p.attempt_token,
            ..self.event(wf, name, transition)
        }
    }

    /// Insert an event row into `whimbrel_activity_event` (as an activity
    /// does), without applying it.
    pub async fn put_event(&self, ev: &ActivityEvent) {
        let written = self
            .store
            .put_new(
                &self.store.tables().activity_event(),
                "activity_event_id",
                ev,
            )
            .await
            .expect("put event row");
        assert!(written, "event row {} is new", ev.activity_event_id);
    }

    /// The event row `event_id` of activity exec `activity_exec_id`, read
    /// back from `whimbrel_activity_event`.
    pub async fn event_row(&self, activity_exec_id: &str, event_id: &str) -> ActivityEvent {
        let key = HashMap::from([
            ("activity_event_id".to_string(), s(event_id)),
            ("activity_exec_id".to_string(), s(activity_exec_id)),
        ]);
        self.store
            .get(&self.store.tables().activity_event(), key)
            .await
            .expect("get event row")
            .expect("event row exists")
    }

    /// Deliver `events` as one stream batch (sequence numbers from `seq`)
    /// to the activity-event handler; returns the sequence numbers to
    /// retry and the summary. Each event's row is stored first when it is
    /// not yet (a stream record is an inserted row; the engine reads large
    /// outputs back from it); a row DynamoDB refuses (a test's oversized
    /// one) is delivered all the same.
    pub async fn deliver(&self, events: &[ActivityEvent], seq: u64) -> (Vec<String>, BatchSummary) {
        let table = self.clients.tables().activity_event();
        for ev in events {
            let _ = self.clients.put_new(&table, "activity_event_id", ev).await;
        }
        let (resp, sum) = handlers::activity_events(&self.engine, &self.event_batch(events, seq))
            .await
            .expect("stream batch");
        (failures(&resp), sum)
    }

    /// Put the request row into `whimbrel_workflow_request` (as a client
    /// does), so the monitor can start the workflow again from it.
    pub async fn put_request(&self, req: &WorkflowRequest) {
        let written = self
            .store
            .put_new(
                &self.store.tables().workflow_request(),
                "workflow_request_id",
                req,
            )
            .await
            .expect("put request row");
        assert!(written, "request row {} is new", req.workflow_request_id);
    }

    /// The ends counted so far in `wf`'s count groups (complete or not:
    /// the workflow exec sees a group only once it is complete), as
    /// (completed, failed, cancelled).
    pub async fn counted(&self, wf: &str) -> (u64, u64, u64) {
        let n = self.workflow(wf).await.activity_count;
        let groups = n.div_ceil(self.config().join_group_size.max(1) as u64);
        let mut sum = (0, 0, 0);
        for g in 0..groups {
            let group: Option<whimbrel_core::model::CountGroup> = self
                .store
                .get(
                    &self.store.tables().activity_exec_dependency(),
                    whimbrel_core::engine::counting::count_group_key(wf, g as u32),
                )
                .await
                .expect("read count group");
            if let Some(c) = group {
                sum.0 += c.completed_count;
                sum.1 += c.failed_count;
                sum.2 += c.cancelled_count;
            }
        }
        sum
    }

    /// Apply RUNNING then COMPLETED for activity `name`.
    pub async fn run_to_completion(&self, wf: &str, name: &str) {
        self.engine
            .apply_event(&self.event(wf, name, "RUNNING"))
            .await
            .unwrap();
        self.engine
            .apply_event(&self.event(wf, name, "COMPLETED"))
            .await
            .unwrap();
    }
}

/// A DynamoDB stream event (Lambda shape) of INSERT records for `rows` of
/// `table`, with sequence numbers starting at `seq`.
pub fn stream_event<T: serde::Serialize>(
    table: &str,
    key_attrs: &[&str],
    rows: &[T],
    seq: u64,
) -> Value {
    let records: Vec<Value> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let image: serde_dynamo::Item = serde_dynamo::to_item(r).unwrap();
            let image = serde_json::to_value(&image).unwrap();
            let keys: serde_json::Map<String, Value> = key_attrs
                .iter()
                .map(|k| (k.to_string(), image[*k].clone()))
                .collect();
            json!({
                "eventID": format!("e{}", seq + i as u64),
                "eventName": "INSERT",
                "eventVersion": "1.1",
                "eventSource": "aws:dynamodb",
                "awsRegion": "us-east-1",
                "dynamodb": {
                    "ApproximateCreationDateTime": 1795306411.0,
                    "Keys": keys,
                    "NewImage": image,
                    "SequenceNumber": format!("{}", seq + i as u64),
                    "SizeBytes": 100,
                    "StreamViewType": "NEW_IMAGE"
                },
                "eventSourceARN": format!("arn:aws:dynamodb:us-east-1:000000000000:table/{table}/stream/2026-11-22T00:00:00.000")
            })
        })
        .collect();
    json!({ "Records": records })
}

/// The sequence numbers a partial batch response asks to retry.
pub fn failures(resp: &aws_lambda_events::event::streams::DynamoDbEventResponse) -> Vec<String> {
    resp.batch_item_failures
        .iter()
        .filter_map(|f| f.item_identifier.clone())
        .collect()
}

/// The counts of a batch summary: (applied, skipped, rejected, retried,
/// parked).
pub fn counts(sum: &BatchSummary) -> (u64, u64, u64, u64, u64) {
    (
        sum.applied,
        sum.skipped,
        sum.rejected,
        sum.retried,
        sum.parked,
    )
}

/// A string attribute value, re-exported for tests.
pub fn sv(v: &str) -> whimbrel_core::store::Value {
    s(v)
}

/// Do by hand exactly the engine's terminal transaction for activity `name`
/// (the activity's conditional update with its due marker + the workflow
/// counter), and nothing after it: the state a function that dies right
/// after the write leaves. Returns when its side effects are due (its due
/// marker, epoch seconds): at least the settle grace after the write.
pub async fn terminal_write_only(
    h: &Harness,
    wf: &str,
    name: &str,
    transition: Transition,
    end: ActivityState,
    event_id: &str,
    details: Details,
) -> i64 {
    let exec = h.activity(wf, name).await;
    let now = h.now();
    let t = h.store.tables();
    let cfg = h.config();
    let change = Change {
        transition,
        next: end,
        event_id,
    };
    let update = decide::transition_update(t, &cfg, &exec, change, &details, now);
    // As the engine writes it: a plain update for an item with a count
    // slot (its end is counted by the settle), else the transaction with
    // the workflow's counter.
    if exec.links.count_slot.is_some() {
        h.store.update(update).await.expect("terminal write");
    } else {
        let count = decide::count_end(t, &exec, end, details.error.as_deref());
        h.store
            .transact(vec![update.into_write(), count.into_write()])
            .await
            .expect("terminal transaction");
    }
    let after = h.activity(wf, name).await;
    assert_eq!(after.state, end);
    // The side effects are owed (a due marker): the function has the
    // settle grace, and the monitor looks at most one grace later (a marker
    // already in that window is kept).
    let owed = after
        .timing
        .due_epoch
        .expect("the terminal write leaves its side effects owed (due marker)");
    let grace = cfg.settle_grace_seconds;
    assert!(
        owed >= now + grace && owed <= now + 2 * grace,
        "{owed} vs {now}"
    );
    owed
}

/// A backend that holds the first write of one activity item (an
/// UpdateItem of it, or a transaction that writes it) until `gate` is
/// notified, after telling `reached`: a function stalled between its read
/// and its write, as long as the test likes.
#[derive(Debug)]
pub struct Stalled {
    inner: std::sync::Arc<dyn whimbrel_core::store::Backend>,
    /// The key attribute that names the held item.
    attribute: &'static str,
    /// Whether a PutItem of it is held too (else only updates and
    /// transactions).
    puts: bool,
    activity_exec_id: std::sync::Mutex<Option<String>>,
    reached: std::sync::Arc<tokio::sync::Notify>,
    gate: std::sync::Arc<tokio::sync::Notify>,
}

/// An engine whose store holds one write, with the `reached` it tells
/// when that write is held and the `gate` that lets it go.
pub type StalledEngine = (
    Engine<RecordingLauncher>,
    std::sync::Arc<tokio::sync::Notify>,
    std::sync::Arc<tokio::sync::Notify>,
);

impl Stalled {
    /// An engine over `h`'s tables and launcher whose store holds the
    /// first write of `activity_exec_id`'s item, with the `reached` it
    /// tells when that write is held and the `gate` that lets it go.
    pub fn engine(h: &Harness, activity_exec_id: &str) -> StalledEngine {
        Stalled::engine_on(h, "activity_exec_id", activity_exec_id)
    }

    /// [`Stalled::engine`] holding the first write of `activity_exec_id`'s
    /// item, a PutItem included (a decision's effect that creates a node).
    pub fn engine_holding_put(h: &Harness, activity_exec_id: &str) -> StalledEngine {
        Stalled::build(h, "activity_exec_id", activity_exec_id, true)
    }

    /// [`Stalled::engine`] holding the first UpdateItem or transaction of
    /// the item whose key attribute `attribute` is `id` (as
    /// `"workflow_exec_id"`, the first update of a workflow exec).
    pub fn engine_on(
        h: &Harness,
        attribute: &'static str,
        activity_exec_id: &str,
    ) -> StalledEngine {
        Stalled::build(h, attribute, activity_exec_id, false)
    }

    fn build(
        h: &Harness,
        attribute: &'static str,
        activity_exec_id: &str,
        puts: bool,
    ) -> StalledEngine {
        let (reached, gate): (
            std::sync::Arc<tokio::sync::Notify>,
            std::sync::Arc<tokio::sync::Notify>,
        ) = Default::default();
        let stalled = Stalled {
            inner: h.store.backend().clone(),
            attribute,
            puts,
            activity_exec_id: std::sync::Mutex::new(Some(activity_exec_id.to_string())),
            reached: std::sync::Arc::clone(&reached),
            gate: std::sync::Arc::clone(&gate),
        };
        let store = Store::with_backend(std::sync::Arc::new(stalled), h.store.tables().clone());
        let engine =
            Engine::with_environment(store, h.launcher.clone(), h.config(), h.clock.clone());
        (engine, reached, gate)
    }

    /// Whether `key` is the held item's, and the hold still to come (it
    /// is taken: later writes pass).
    fn holds(&self, key: &whimbrel_core::store::Item) -> bool {
        use whimbrel_core::store::Value;
        let mut held = self.activity_exec_id.lock().unwrap();
        let hit = matches!((held.as_deref(), key.get(self.attribute)), (Some(id), Some(Value::S(s))) if s == id);
        if hit {
            *held = None;
        }
        hit
    }
}

impl whimbrel_core::store::Backend for Stalled {
    fn get(
        &self,
        t: String,
        k: whimbrel_core::store::Item,
        p: Vec<String>,
    ) -> futures::future::BoxFuture<
        '_,
        Result<Option<whimbrel_core::store::Item>, whimbrel_core::store::StoreError>,
    > {
        self.inner.get(t, k, p)
    }
    fn put(
        &self,
        t: String,
        i: whimbrel_core::store::Item,
        c: Option<whimbrel_core::store::Cond>,
    ) -> futures::future::BoxFuture<'_, Result<(), whimbrel_core::store::StoreError>> {
        let hold = self.puts && self.holds(&i);
        Box::pin(async move {
            if hold {
                self.reached.notify_one();
                self.gate.notified().await;
            }
            self.inner.put(t, i, c).await
        })
    }
    fn update(
        &self,
        t: String,
        k: whimbrel_core::store::Item,
        a: Vec<whimbrel_core::store::Action>,
        c: Option<whimbrel_core::store::Cond>,
        r: bool,
    ) -> futures::future::BoxFuture<
        '_,
        Result<Option<whimbrel_core::store::Item>, whimbrel_core::store::StoreError>,
    > {
        let hold = self.holds(&k);
        Box::pin(async move {
            if hold {
                self.reached.notify_one();
                self.gate.notified().await;
            }
            self.inner.update(t, k, a, c, r).await
        })
    }
    fn transact(
        &self,
        w: Vec<whimbrel_core::store::Write>,
    ) -> futures::future::BoxFuture<'_, Result<(), whimbrel_core::store::StoreError>> {
        use whimbrel_core::store::Write;
        let hold = w.iter().any(|w| match w {
            Write::Update { key, .. } => self.holds(key),
            Write::Put { item, .. } => self.holds(item),
        });
        Box::pin(async move {
            if hold {
                self.reached.notify_one();
                self.gate.notified().await;
            }
            self.inner.transact(w).await
        })
    }
    fn batch_put(
        &self,
        t: String,
        items: Vec<whimbrel_core::store::Item>,
    ) -> futures::future::BoxFuture<
        '_,
        Result<Vec<whimbrel_core::store::Item>, whimbrel_core::store::StoreError>,
    > {
        self.inner.batch_put(t, items)
    }
    fn batch_get(
        &self,
        t: String,
        k: Vec<whimbrel_core::store::Item>,
    ) -> futures::future::BoxFuture<
        '_,
        Result<whimbrel_core::store::Found, whimbrel_core::store::StoreError>,
    > {
        self.inner.batch_get(t, k)
    }
    fn query(
        &self,
        t: String,
        i: Option<String>,
        k: whimbrel_core::store::KeyCond,
        s: Option<whimbrel_core::store::Item>,
    ) -> futures::future::BoxFuture<
        '_,
        Result<whimbrel_core::store::Page, whimbrel_core::store::StoreError>,
    > {
        self.inner.query(t, i, k, s)
    }
    fn pause(&self, millis: u64) -> futures::future::BoxFuture<'_, ()> {
        self.inner.pause(millis)
    }
}
