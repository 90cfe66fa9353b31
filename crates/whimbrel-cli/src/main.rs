//! `whimbrel`: install the tables, register and start workflows, report
//! activity events and heartbeats, show a workflow's status, timeline
//! (`show`) and plan (`graph`), replay given-up stream records, run
//! workers, and run the local runner (`whimbrel local`, design.md § 6).

mod bench;
mod commands;
mod graph;
mod limits;
mod local;
mod new;
mod output;
mod replay;
mod show;
mod status;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;
use whimbrel_core::attr;

use clap::{Args, Parser, Subcommand};
use serde_json::Value;
use whimbrel_core::contract::Transition;
use whimbrel_core::dates::Timestamp;
use whimbrel_core::engine::EngineConfig;
use whimbrel_core::ids;
use whimbrel_core::model::{ActivityEvent, WorkflowRequest};
use whimbrel_core::store::{Store, Tables};

/// Whimbrel: a serverless workflow engine on DynamoDB and Lambda.
#[derive(Parser, Debug)]
#[command(name = "whimbrel", version, about)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// Options every command takes.
#[derive(Args, Debug, Clone)]
pub struct Global {
    /// DynamoDB / Lambda endpoint (e.g. http://127.0.0.1:8000 for the local
    /// stack). Default: AWS, or AWS_ENDPOINT_URL.
    #[arg(long, global = true, env = "WHIMBREL_ENDPOINT_URL")]
    endpoint_url: Option<String>,
    /// Table name prefix.
    #[arg(
        long,
        global = true,
        env = "WHIMBREL_TABLE_PREFIX",
        default_value = "whimbrel_"
    )]
    table_prefix: String,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create every table (keys, GSIs, streams); idempotent.
    Install,
    /// Register a workflow: its decider Lambda or a static plan file.
    Register {
        /// Workflow name.
        name: String,
        /// Decider Lambda (name or ARN), invoked synchronously at start.
        #[arg(
            long,
            conflicts_with = "definition",
            required_unless_present = "definition"
        )]
        lambda: Option<String>,
        /// JSON plan file (see docs/shapes/plan.json).
        #[arg(long)]
        definition: Option<PathBuf>,
        /// What its plans and decisions may name (absent: anything).
        #[command(flatten)]
        allow: commands::AllowArgs,
    },
    /// Start a workflow: insert one whimbrel_workflow_request row (Simple
    /// Lambda API) and print its ids.
    Start {
        /// Workflow name.
        name: String,
        /// Input as JSON text.
        #[arg(long, conflicts_with = "input_file")]
        input: Option<String>,
        /// Input read from a file: JSON, or any other text as {"text": ...}.
        #[arg(long)]
        input_file: Option<PathBuf>,
        /// The request's `source`.
        #[arg(long, default_value = "whimbrel cli")]
        source: String,
    },
    /// Report an activity transition: insert one whimbrel_activity_event row.
    Event {
        /// The activity exec id.
        activity_exec_id: String,
        /// RUNNING, COMPLETED, FAILED, CANCEL, PREPARING...
        transition: String,
        /// Output (JSON) for COMPLETED.
        #[arg(long)]
        output: Option<String>,
        /// Reason for FAILED or CANCEL.
        #[arg(long)]
        error: Option<String>,
    },
    /// Cancel a workflow: insert a CANCEL event row for each of its
    /// activities that has not ended (contract: CANCEL "if the user requests
    /// a cancellation"). Running ones become CANCELLED_RUNNING and learn it
    /// at their next heartbeat.
    Cancel {
        /// The workflow exec id.
        workflow_exec_id: String,
        /// The reason, stored as each activity's `error`.
        #[arg(long, default_value = "cancelled by the user")]
        reason: String,
        /// How long to watch the workflow for the request to take effect,
        /// seconds (0: only insert the request).
        #[arg(long, default_value_t = 15)]
        wait: u64,
    },
    /// Redrive a FAILED or CANCELLED workflow (design.md § 9.4): insert a
    /// request row naming it. It goes back to RUNNING with the same exec
    /// id; its COMPLETED activities keep their outputs and do not run
    /// again, the others get their next attempt. Prints the request id,
    /// then waits for it to end (`--wait`): the exit status is 0 only if
    /// it ended COMPLETED, 1 if it ended FAILED or CANCELLED again, was
    /// still running when the wait was over, or the request was refused.
    Redrive {
        /// The workflow exec id.
        workflow_exec_id: String,
        /// How long to wait for the workflow to end again, seconds (0: only
        /// insert the request).
        #[arg(long, default_value_t = 0)]
        wait: u64,
    },
    /// Concurrency limits per Lambda function or task list, across
    /// workflows (design.md § 9.3): `limit set TARGET N`, `limit show
    /// TARGET`, `limit remove TARGET`, TARGET being `lambda:FUNCTION` or
    /// `task_list:NAME`.
    Limit {
        #[command(subcommand)]
        action: limits::LimitAction,
    },
    /// Send a signal to a workflow: insert one whimbrel_signal row
    /// (design.md § 9.2). A `signal` node of that name completes with the
    /// input as its output; one that does not wait yet takes it when it
    /// does. Prints the signal key.
    Signal {
        /// The workflow exec id.
        workflow_exec_id: String,
        /// The signal's name, as the plan's `signal` node gives it.
        name: String,
        /// The payload, JSON text (default `null`).
        #[arg(long)]
        input: Option<String>,
        /// The signal id (dedupe: a second signal with the same id is not
        /// sent). Default: a new UUID.
        #[arg(long)]
        id: Option<String>,
        /// How long to watch for a node waiting for it to complete,
        /// seconds (0: only insert the row).
        #[arg(long, default_value_t = 0)]
        wait: u64,
    },
    /// Record a heartbeat for a running activity; prints its state.
    Heartbeat {
        /// The activity exec id.
        activity_exec_id: String,
    },
    /// List workflow executions in a state, newest first (a Query on the
    /// `state-start_time_epoch-index` GSI).
    List {
        /// The workflow state (case ignored).
        #[arg(long, value_enum, ignore_case = true, default_value = "RUNNING")]
        state: output::StateArg,
        /// Only those started in the last this many seconds.
        #[arg(long, default_value_t = 86_400)]
        since_seconds: i64,
        /// Output format: tab-separated lines, or a JSON array.
        #[arg(long, value_enum, default_value = "table")]
        output: output::Format,
    },
    /// Show a workflow execution and its activities.
    Status {
        /// The workflow exec id printed by `whimbrel start`.
        workflow_exec_id: String,
        /// Redraw until the workflow ends.
        #[arg(long)]
        watch: bool,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        output: output::Format,
    },
    /// Show a workflow execution's timeline: every accepted transition of
    /// each activity and the workflow's own, in time order, with who caused
    /// it (engine, worker, monitor or client), the attempt and the error.
    Show {
        /// The workflow exec id.
        workflow_exec_id: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        output: output::Format,
        /// Show this execution only, not every run of its continue-as-new
        /// chain.
        #[arg(long)]
        no_follow: bool,
    },
    /// Draw a plan's DAG: a registered workflow's static plan, a workflow
    /// exec's stored plan (nodes coloured by state) or a plan file (.json),
    /// as Mermaid, Graphviz DOT or PNG (through Graphviz's `dot`).
    Graph(graph::GraphArgs),
    /// Run the local runner: stream pollers (event source mappings), the
    /// heartbeat schedule and a Lambda Invoke API front (design.md § 6).
    Local(Box<local::LocalArgs>),
    /// Run the functions' instances for the local stack: N processes of
    /// every function of the template, polling `whimbrel lambda-apis`,
    /// each started again when it exits.
    Instances(local::instances::InstancesArgs),
    /// Serve the Lambda Invoke API and Runtime API of the local stack,
    /// for any function of any runtime (the functions' instances poll it).
    LambdaApis(local::lambda_apis::LambdaApisArgs),
    /// Create a project of one's own workflow: one activity, one
    /// definition, a template nesting the Whimbrel stack, a Makefile that
    /// runs it on the local stack (README: "Your first workflow").
    New(new::NewArgs),
    /// Benchmark a registered workflow on the local stack (`make bench`).
    Bench(bench::BenchArgs),
    /// One heartbeat monitor tick over many RUNNING activities, few of
    /// them stale, and what it read (`make bench-monitor`).
    BenchMonitor(bench::monitor::MonitorArgs),
    /// One stream batch through the activity-event handler, one item at a
    /// time and concurrently: the speed-up (`make bench`).
    BenchBatch(bench::batch::BatchArgs),
    /// Apply stream records an event source mapping gave up on, read back
    /// from the stream by the on-failure records' shard and sequence range.
    Replay(replay::ReplayArgs),
    /// Claim activities from a task list and run a command for each: the
    /// activity's input on stdin, its output from stdout (docs/workers.md).
    Worker(worker::WorkerArgs),
    /// Print a COMPLETED workflow's result as JSON: the outputs of its
    /// activities that nothing depends on, by activity name.
    Result {
        /// The workflow exec id.
        workflow_exec_id: String,
        /// Wait until the workflow ends (else a workflow not ended is an
        /// error).
        #[arg(long)]
        wait: bool,
        /// Output format: the result is JSON either way (pretty-printed).
        #[arg(long, value_enum, default_value = "table")]
        output: output::Format,
    },
}

/// A one-line error for the user.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CliError(pub String);

impl From<whimbrel_core::store::StoreError> for CliError {
    fn from(e: whimbrel_core::store::StoreError) -> Self {
        CliError(e.to_string())
    }
}

impl From<whimbrel_core::engine::EngineError> for CliError {
    fn from(e: whimbrel_core::engine::EngineError) -> Self {
        CliError(e.to_string())
    }
}

/// The store for the global options.
pub async fn store_for(g: &Global) -> Store {
    let sdk = whimbrel_core::aws_config(g.endpoint_url.as_deref()).await;
    Store::new(
        aws_sdk_dynamodb::Client::new(&sdk),
        Tables::new(g.table_prefix.clone()),
    )
}

fn parse_json(what: &str, text: &str) -> Result<Value, CliError> {
    serde_json::from_str(text).map_err(|e| CliError(format!("{what} is not valid JSON: {e}")))
}

/// Insert one `whimbrel_workflow_request` row for `name` (Simple Lambda
/// API: a client's whole duty to start a workflow) and return its
/// `workflow_request_id` and the `workflow_exec_id` the engine derives.
pub async fn insert_request(
    store: &Store,
    name: &str,
    input: Option<Value>,
    source: &str,
) -> Result<(String, String), CliError> {
    let row = WorkflowRequest {
        input,
        ..request_row(name, source)?
    };
    put_request(store, &row).await?;
    let exec_id = ids::workflow_exec_id(name, &row.workflow_request_id);
    Ok((row.workflow_request_id, exec_id))
}

/// Insert a request to cancel workflow exec `workflow_exec_id` (of workflow
/// `name`) into `whimbrel_workflow_request`, and return its
/// `workflow_request_id`.
pub async fn insert_cancel_request(
    store: &Store,
    name: &str,
    workflow_exec_id: &str,
    reason: &str,
) -> Result<String, CliError> {
    let row = WorkflowRequest {
        cancel_workflow_exec_id: Some(workflow_exec_id.into()),
        reason: Some(reason.into()),
        ..request_row(name, "whimbrel cancel")?
    };
    put_request(store, &row).await?;
    Ok(row.workflow_request_id)
}

/// Insert a redrive request for `workflow_exec_id` (of workflow `name`);
/// returns its request id.
///
/// Errors: the store's.
pub async fn insert_redrive_request(
    store: &Store,
    name: &str,
    workflow_exec_id: &str,
) -> Result<String, CliError> {
    let row = WorkflowRequest {
        redrive_workflow_exec_id: Some(workflow_exec_id.into()),
        ..request_row(name, "whimbrel redrive")?
    };
    put_request(store, &row).await?;
    Ok(row.workflow_request_id)
}

/// A fresh row of `whimbrel_workflow_request` for workflow `name`, dated
/// now, with the retention the environment sets.
fn request_row(name: &str, source: &str) -> Result<WorkflowRequest, CliError> {
    let now = Timestamp::now();
    Ok(WorkflowRequest {
        redrive_workflow_exec_id: None,
        parent: None,
        workflow_request_id: ids::new_id(name),
        workflow_name: name.into(),
        when: Some(now.date_list()),
        when_epoch: Some(now.epoch as f64),
        source: Some(source.into()),
        manual: None,
        input: None,
        expires_at_epoch: EngineConfig::from_env()
            .map_err(CliError)?
            .row_expiry(now.epoch),
        cancel_workflow_exec_id: None,
        reason: None,
    })
}

async fn put_request(store: &Store, row: &WorkflowRequest) -> Result<(), CliError> {
    store
        .put_new(
            &store.tables().workflow_request(),
            attr::WORKFLOW_REQUEST_ID,
            row,
        )
        .await?;
    Ok(())
}

/// Insert one `whimbrel_activity_event` row (Simple Lambda API) and return
/// its `activity_event_id`.
async fn insert_event(
    store: &Store,
    activity_exec_id: String,
    transition: Transition,
    output: Option<Value>,
    error: Option<String>,
) -> Result<String, CliError> {
    let now = Timestamp::now();
    let ev = ActivityEvent {
        output,
        error,
        expires_at_epoch: EngineConfig::from_env()
            .map_err(CliError)?
            .row_expiry(now.epoch),
        ..ActivityEvent::new(
            &activity_exec_id,
            transition.as_str(),
            now,
            "whimbrel cli",
            &uuid::Uuid::new_v4().to_string(),
        )
    };
    store
        .put_new(
            &store.tables().activity_event(),
            attr::ACTIVITY_EVENT_ID,
            &ev,
        )
        .await?;
    Ok(ev.activity_event_id)
}

/// Run the parsed command: each subcommand's own function.
async fn run(cli: Cli) -> Result<(), CliError> {
    let g = &cli.global;
    match cli.command {
        Command::Install => commands::install(g).await?,
        Command::Register {
            name,
            lambda,
            definition,
            allow,
        } => commands::register(g, name, lambda, definition, allow).await?,
        Command::Start {
            name,
            input,
            input_file,
            source,
        } => commands::start(g, &name, input, input_file, &source).await?,
        Command::Event {
            activity_exec_id,
            transition,
            output,
            error,
        } => commands::event(g, activity_exec_id, &transition, output, error).await?,
        Command::Cancel {
            workflow_exec_id,
            reason,
            wait,
        } => commands::cancel(g, &workflow_exec_id, &reason, wait).await?,
        Command::Redrive {
            workflow_exec_id,
            wait,
        } => commands::redrive(g, &workflow_exec_id, wait).await?,
        Command::Limit { action } => limits::limit(g, action).await?,
        Command::Signal {
            workflow_exec_id,
            name,
            input,
            id,
            wait,
        } => commands::signal(g, &workflow_exec_id, &name, input, id, wait).await?,
        Command::Heartbeat { activity_exec_id } => {
            commands::heartbeat(g, &activity_exec_id).await?
        }
        Command::Status {
            workflow_exec_id,
            watch,
            output,
        } => status::run(&store_for(g).await, &workflow_exec_id, watch, output).await?,
        Command::Show {
            workflow_exec_id,
            output,
            no_follow,
        } => commands::show(g, &workflow_exec_id, output, !no_follow).await?,
        Command::List {
            state,
            since_seconds,
            output,
        } => commands::list(g, state, since_seconds, output).await?,
        Command::Graph(args) => graph::run(g, args).await?,
        Command::Local(args) => local::run(g.clone(), *args).await?,
        Command::Instances(args) => local::instances::run(g, args).await?,
        Command::LambdaApis(args) => local::lambda_apis::run(g, args).await?,
        Command::New(args) => new::run(args)?,
        Command::Bench(args) => bench::run(g.clone(), args).await?,
        Command::BenchMonitor(args) => bench::monitor::run(g.clone(), args).await?,
        Command::BenchBatch(args) => bench::batch::run(g.clone(), args).await?,
        Command::Worker(args) => worker::run(g, args).await?,
        Command::Replay(args) => replay::run(g, args).await?,
        Command::Result {
            workflow_exec_id,
            wait,
            output: _,
        } => commands::result(g, &workflow_exec_id, wait).await?,
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    whimbrel_core::telemetry::init(false);
    // A usage error prints clap's whole message (the error, its tips, the
    // usage line) and exits 2; --help and --version print and exit 0.
    let cli = Cli::try_parse().unwrap_or_else(|e| e.exit());
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let first = e.0.lines().next().unwrap_or("").to_string();
            eprintln!("whimbrel: error: {first}");
            ExitCode::FAILURE
        }
    }
}
