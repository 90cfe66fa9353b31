//! `whimbrel local`: what AWS wires and no local tool does (design.md § 6), with
//! the settings of `template.yaml` (the one place they are written down;
//! flags only override them).
//!
//! * **Event source mappings** ([`mapping`]): one per `Type: DynamoDB`
//!   event of the template. Polls the stream's shards (a parent to its end
//!   before its children) and delivers batches of real DynamoDB stream event
//!   JSON: event name filter, `BatchSize`, partial batch responses, retries
//!   up to `MaximumRetryAttempts`, `MaximumRecordAgeInSeconds`, bisect on
//!   function error, the function's `Timeout` (a hung or unreachable
//!   instance is a function error), an on-failure destination (a JSON-lines
//!   file, records shaped as Lambda sends them to SQS), and durable shard
//!   checkpoints so a restarted runner resumes where it stopped.
//! * **SQS event source mappings** ([`queues`]): the template's queues
//!   (the stream mappings' on-failure destination) and their `Type: SQS`
//!   events, which invoke the stream-redrive function: visibility timeout,
//!   receive counts, the redrive policy (dead-lettered messages to
//!   `--dead-letter-file`), partial batch responses.
//! * **SQS SendMessage** ([`sqs_api`]): the engine's wake-ups to the
//!   `TimerQueue`, with `DelaySeconds` (design.md § 9).
//! * **Schedule**: invoke the scheduled function (`Type: Schedule`) with an
//!   EventBridge Scheduled Event every `--monitor-interval-seconds`.
//! * **Invoke API front** ([`front`]): `POST
//!   /2015-03-31/functions/{name}/invocations` on `--listen`, forwarded to
//!   `whimbrel lambda-apis` ([`lambda_apis`]). `InvocationType=Event` answers 202 at once and
//!   runs in the background with the function's `EventInvokeConfig`
//!   (retries, maximum event age); ARNs and deployed names resolve to binary
//!   names; a function error becomes 200 + `X-Amz-Function-Error`.
//! * **Instances** ([`instances`], `whimbrel instances`, its own process
//!   as Lambda's execution environments are apart from its pollers): N
//!   processes of every function, from the built binaries, polling `cargo
//!   lambda watch --only-lambda-apis`, started again when one exits.
//! * **Chaos** ([`chaos`], `--chaos`): drops, duplicates and delays async
//!   invokes, delivers successful stream batches again; every action is
//!   logged with the prefix `CHAOS`. Decided from the seed and what each
//!   event is, each kind bounded; with a pause to kill the runner at
//!   ([`pause`]).

mod chaos;
mod checkpoint;
mod front;
mod guard;
pub(crate) mod instances;
mod invoke;
pub(crate) mod lambda_apis;
pub(crate) mod mapping;
pub(crate) mod on_failure;
mod pause;
mod queues;
mod shards;
mod sqs_api;
mod template;
pub(crate) mod timeline;
mod warm;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::{get, post};
use axum::Router;
use clap::Args;
use tracing::{info, warn};

use crate::{CliError, Global};
use chaos::{Chaos, ChaosConfig};
use checkpoint::Checkpoints;
pub use invoke::scheduled_event;
pub(crate) use invoke::Outcome;
use template::{AsyncConfig, Template};

fn rate(s: &str) -> Result<f64, String> {
    let r: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if (0.0..=1.0).contains(&r) {
        Ok(r)
    } else {
        Err(format!("{r} is not a rate in [0, 1]"))
    }
}

/// Options of `whimbrel local`.
#[derive(Args, Debug, Clone)]
pub struct LocalArgs {
    /// The Lambda Invoke and Runtime APIs (`whimbrel lambda-apis`).
    #[arg(
        long,
        env = "WHIMBREL_LAMBDA_UPSTREAM",
        default_value = "http://127.0.0.1:9000"
    )]
    lambda_upstream: String,
    /// Where the Invoke API front listens (point AWS_ENDPOINT_URL_LAMBDA here).
    #[arg(long, default_value = "127.0.0.1:9001")]
    listen: SocketAddr,
    /// Listen on a non-loopback `--listen` address. The front has no
    /// authentication and invokes any function of the stack: anyone who
    /// can reach the address can.
    #[arg(long)]
    allow_non_loopback: bool,
    /// The SAM template the mappings, timeouts and async settings are read
    /// from.
    #[arg(long, env = "WHIMBREL_TEMPLATE", default_value = "template.yaml")]
    template: PathBuf,
    /// Template parameters as deployed, `Name=Value` (repeatable, or
    /// space-separated in the variable), as `sam deploy
    /// --parameter-overrides` takes them; the others take their defaults.
    /// The stack gives `LaunchEventAgeSeconds` the engine's
    /// `WHIMBREL_LAUNCH_EVENT_AGE_SECONDS`, so the emulated async queue
    /// keeps a launch no longer than the engine waits before it launches
    /// again.
    #[arg(long, env = "WHIMBREL_PARAMETER_OVERRIDES", value_delimiter = ' ', num_args = 0..)]
    parameter_overrides: Vec<String>,
    /// Override every mapping's BatchSize (records per batch; template:
    /// the StreamBatchSize parameter's default).
    #[arg(long)]
    batch_size: Option<usize>,
    /// Override every mapping's MaximumRetryAttempts (-1: infinite).
    #[arg(
        long,
        allow_hyphen_values = true,
        env = "WHIMBREL_MAXIMUM_RETRY_ATTEMPTS"
    )]
    maximum_retry_attempts: Option<i64>,
    /// Override every mapping's MaximumRecordAgeInSeconds (-1: infinite).
    #[arg(long, allow_hyphen_values = true)]
    maximum_record_age_seconds: Option<i64>,
    /// Override every mapping's BisectBatchOnFunctionError.
    #[arg(long)]
    bisect_batch_on_function_error: Option<bool>,
    /// Override every function's Timeout, seconds.
    #[arg(long, env = "WHIMBREL_FUNCTION_TIMEOUT_SECONDS")]
    function_timeout_seconds: Option<u64>,
    /// Multiply the waits between async invoke retries (AWS: about 1 min,
    /// then 2 min) by this; e.g. 0.05 for 3 s then 6 s. Event ages are not
    /// scaled.
    #[arg(long, env = "WHIMBREL_ASYNC_RETRY_DELAY_SCALE", default_value_t = 1.0)]
    async_retry_delay_scale: f64,
    /// Seconds between scheduled invocations (the template's rate is for
    /// AWS; locally the monitor ticks faster).
    #[arg(long, default_value_t = 5)]
    monitor_interval_seconds: u64,
    /// Milliseconds between polls of an idle shard.
    #[arg(long, default_value_t = 200)]
    poll_interval_ms: u64,
    /// On-failure destination of the mappings: one JSON line per batch
    /// given up, shaped as Lambda sends it to SQS.
    #[arg(long, default_value = ".stack/on-failure.jsonl")]
    on_failure_file: PathBuf,
    /// Where messages a queue's redrive policy moves to its dead-letter
    /// queue are appended (one body per line, for `whimbrel replay`).
    #[arg(long, default_value = ".stack/dead-letter.jsonl")]
    dead_letter_file: PathBuf,
    /// Override every queue's VisibilityTimeout, seconds (the template's
    /// 720 s is for AWS; a local stack redrives sooner).
    #[arg(long, env = "WHIMBREL_VISIBILITY_TIMEOUT_SECONDS")]
    visibility_timeout_seconds: Option<u64>,
    /// Shard checkpoints (default: checkpoints.json beside the on-failure
    /// file, i.e. in the stack directory).
    #[arg(long, env = "WHIMBREL_CHECKPOINT_FILE")]
    checkpoint_file: Option<PathBuf>,
    /// Async invocations of one function run at most this many at once
    /// (its concurrency: the instances the stack started); the others wait
    /// in Lambda's async queue, their event age counting.
    #[arg(long, env = "WHIMBREL_LAMBDA_CONCURRENCY", default_value_t = 16)]
    function_concurrency: usize,
    /// Before listening, invoke every function of the template so its
    /// instances are known to answer: stream and scheduled functions once,
    /// every other function this many times at once (0: no warm-up).
    #[arg(long, default_value_t = 0)]
    warm: usize,
    #[command(flatten)]
    chaos: ChaosArgs,
}

/// `--chaos` and its settings (also from the environment, so a stack
/// script can turn it on without new flags).
#[derive(Args, Debug, Clone)]
pub struct ChaosArgs {
    /// Drop, duplicate and delay async invokes; deliver successful stream
    /// batches again. Every action is logged with the prefix CHAOS.
    #[arg(long, env = "WHIMBREL_CHAOS", value_parser = clap::builder::BoolishValueParser::new())]
    chaos: bool,
    /// Seed of the chaos decisions (default: from the clock, logged).
    #[arg(long, env = "WHIMBREL_CHAOS_SEED")]
    chaos_seed: Option<u64>,
    /// Share of async invokes answered 202 and never run.
    #[arg(long, env = "WHIMBREL_CHAOS_DROP_RATE", default_value = "0.05", value_parser = rate)]
    chaos_drop_rate: f64,
    /// Share of async invokes run twice.
    #[arg(long, env = "WHIMBREL_CHAOS_DUPLICATE_RATE", default_value = "0.1", value_parser = rate)]
    chaos_duplicate_rate: f64,
    /// Share of async invokes delayed (up to --chaos-max-delay-ms).
    #[arg(long, env = "WHIMBREL_CHAOS_DELAY_RATE", default_value = "0.2", value_parser = rate)]
    chaos_delay_rate: f64,
    /// Longest chaos delay of an async invoke, milliseconds.
    #[arg(long, env = "WHIMBREL_CHAOS_MAX_DELAY_MS", default_value_t = 3000)]
    chaos_max_delay_ms: u64,
    /// Share of successful stream batches delivered once more.
    #[arg(long, env = "WHIMBREL_CHAOS_STREAM_DUPLICATE_RATE", default_value = "0.1", value_parser = rate)]
    chaos_stream_duplicate_rate: f64,
    /// At most this many chaos actions of each kind (drops, duplicates,
    /// delays, stream batches delivered again) per runner (default: no
    /// bound).
    #[arg(long, env = "WHIMBREL_CHAOS_MAX_ACTIONS")]
    chaos_max_actions: Option<u64>,
    /// After this many successful stream batches, start no more work, let
    /// the work under way end, log `CHAOS paused` and wait to be killed: a
    /// kill point that does not depend on timing (tests/e2e-chaos.sh).
    #[arg(long, env = "WHIMBREL_CHAOS_PAUSE_AFTER_BATCHES", value_parser = clap::value_parser!(u64).range(1..))]
    chaos_pause_after_batches: Option<u64>,
}

impl ChaosArgs {
    fn config(&self) -> Option<ChaosConfig> {
        self.chaos.then(|| ChaosConfig {
            seed: self.chaos_seed.unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            }),
            async_drop_rate: self.chaos_drop_rate,
            async_duplicate_rate: self.chaos_duplicate_rate,
            async_delay_rate: self.chaos_delay_rate,
            async_max_delay: Duration::from_millis(self.chaos_max_delay_ms),
            stream_duplicate_rate: self.chaos_stream_duplicate_rate,
            max_actions: self.chaos_max_actions,
            pause_after_batches: self.chaos_pause_after_batches,
        })
    }
}

/// Invocation counters, by function name and kind.
type Counters = Arc<Mutex<BTreeMap<String, u64>>>;

pub(crate) struct Runner {
    args: LocalArgs,
    template: Template,
    lambda: aws_sdk_lambda::Client,
    streams: aws_sdk_dynamodbstreams::Client,
    dynamodb: aws_sdk_dynamodb::Client,
    counters: Counters,
    timeline: timeline::Timeline,
    region: String,
    checkpoints: Checkpoints,
    queues: queues::Queues,
    chaos: Option<Chaos>,
    /// Per function: its async invocations in flight (front::async_slot).
    async_slots: Mutex<BTreeMap<String, Arc<tokio::sync::Semaphore>>>,
}

/// `ARN` or `name[:qualifier]` → the bare function name (design.md § 6: the
/// local Lambda APIs serve functions by their bare name).
pub fn function_name(name_or_arn: &str) -> &str {
    match name_or_arn.split_once(":function:") {
        Some((_, rest)) => rest.split(':').next().unwrap_or(rest),
        None => name_or_arn.split(':').next().unwrap_or(name_or_arn),
    }
}

impl Runner {
    fn count(&self, key: String) {
        *self
            .counters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key)
            .or_default() += 1;
    }

    /// The function's timeout: `--function-timeout-seconds`, else its
    /// template `Timeout`, else the template's global one.
    fn timeout(&self, function: &str) -> Duration {
        if let Some(s) = self.args.function_timeout_seconds {
            return Duration::from_secs(s.max(1));
        }
        self.template
            .function(function)
            .map_or(self.template.default_timeout, |f| f.timeout)
    }

    /// The function's `EventInvokeConfig` (AWS's defaults if none).
    fn async_config(&self, function: &str) -> AsyncConfig {
        self.template
            .function(function)
            .map(|f| f.async_config)
            .unwrap_or_default()
    }
}

/// The mappings of the template with the flags' overrides applied.
fn mappings(template: &Template, args: &LocalArgs) -> Result<Vec<mapping::Mapping>, CliError> {
    let mut out = Vec::new();
    for (f, m) in template.stream_mappings() {
        let mut m = m.clone();
        if let Some(n) = args.batch_size {
            m.batch_size = n.max(1);
        }
        if let Some(n) = args.maximum_retry_attempts {
            m.maximum_retry_attempts = u32::try_from(n).ok();
        }
        if let Some(n) = args.maximum_record_age_seconds {
            m.maximum_record_age = u64::try_from(n).ok().map(Duration::from_secs);
        }
        if let Some(b) = args.bisect_batch_on_function_error {
            m.bisect_batch_on_function_error = b;
        }
        let timeout = args
            .function_timeout_seconds
            .map_or(f.timeout, |s| Duration::from_secs(s.max(1)));
        out.push(mapping::Mapping {
            function: f.binary.clone(),
            settings: m,
            timeout,
        });
    }
    if out.is_empty() {
        return Err(CliError(format!(
            "{} has no DynamoDB stream events",
            args.template.display()
        )));
    }
    Ok(out)
}

/// Read the SAM template at `path` (`--template`), `TablePrefix` standing
/// for `table_prefix` and the parameters `overrides` (`Name=Value`) taking
/// their values.
///
/// The templates it nests (`AWS::Serverless::Application` with a local
/// `Location`: a project made by `whimbrel new` nests the Whimbrel stack)
/// are read too ([`Template::parse_tree`]).
///
/// Errors: a file cannot be read, an override is not `Name=Value`, or
/// [`Template::parse_tree`] refuses it.
pub(crate) fn read_template(
    path: &std::path::Path,
    table_prefix: &str,
    overrides: &[String],
) -> Result<Template, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError(format!("cannot read {}: {e} (--template)", path.display())))?;
    let overrides = (overrides.iter())
        .filter(|o| !o.is_empty())
        .map(|o| match o.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(CliError(format!(
                "--parameter-overrides: {o:?} is not Name=Value"
            ))),
        })
        .collect::<Result<_, _>>()?;
    let mut load = |p: &std::path::Path| {
        std::fs::read_to_string(p).map_err(|e| {
            whimbrel_aws_model::template::TemplateError(format!("cannot read {}: {e}", p.display()))
        })
    };
    Template::parse_tree(path, &text, table_prefix, &overrides, &mut load)
        .map_err(|e| CliError(format!("{}: {e}", path.display())))
}

/// The shard checkpoint file: `--checkpoint-file`, else checkpoints.json
/// beside the on-failure file.
fn checkpoint_file(args: &LocalArgs) -> PathBuf {
    args.checkpoint_file.clone().unwrap_or_else(|| {
        args.on_failure_file.parent().map_or_else(
            || PathBuf::from("checkpoints.json"),
            |d| d.join("checkpoints.json"),
        )
    })
}

/// Chaos mode if `--chaos` is on, its settings logged.
fn chaos_mode(args: &ChaosArgs) -> Option<Chaos> {
    args.config().map(|c| {
        warn!(
            seed = c.seed,
            drop_rate = c.async_drop_rate,
            duplicate_rate = c.async_duplicate_rate,
            delay_rate = c.async_delay_rate,
            max_delay_ms = c.async_max_delay.as_millis() as u64,
            stream_duplicate_rate = c.stream_duplicate_rate,
            max_actions = ?c.max_actions,
            pause_after_batches = ?c.pause_after_batches,
            "{} mode on",
            chaos::PREFIX
        );
        Chaos::new(c)
    })
}

/// The routes `--listen` serves: the Lambda Invoke API, SQS SendMessage
/// ([`sqs_api`]), and the invocation counters and timeline `whimbrel
/// bench` reads.
fn front_routes(runner: Arc<Runner>) -> Router {
    Router::new()
        .route(
            "/2015-03-31/functions/{name}/invocations",
            post(front::invoke),
        )
        .route("/", post(sqs_api::serve))
        .route("/whimbrel/invocations", get(front::counters))
        .route("/whimbrel/timeline", get(timeline::serve))
        .layer(axum::middleware::from_fn(guard::require_local_host))
        .with_state(runner)
}

/// Run the local runner until interrupted.
pub async fn run(g: Global, args: LocalArgs) -> Result<(), CliError> {
    guard::check_listen(args.listen, args.allow_non_loopback).map_err(CliError)?;
    let template = read_template(&args.template, &g.table_prefix, &args.parameter_overrides)?;
    let mappings = mappings(&template, &args)?;
    let sdk = whimbrel_core::aws_config(g.endpoint_url.as_deref()).await;
    let region = sdk
        .region()
        .map(|r| r.to_string())
        .unwrap_or_else(|| "us-east-1".into());
    let lambda_conf = aws_sdk_lambda::config::Builder::from(&sdk)
        .endpoint_url(&args.lambda_upstream)
        .retry_config(aws_sdk_lambda::config::retry::RetryConfig::disabled())
        .build();
    let (checkpoints, warning) = Checkpoints::open(checkpoint_file(&args));
    if let Some(w) = warning {
        warn!("{w}");
    }
    let chaos = chaos_mode(&args.chaos);
    let scheduled: Vec<String> = template.scheduled().map(|f| f.binary.clone()).collect();
    let sqs_mappings: Vec<_> = template
        .sqs_mappings()
        .map(|(f, m, _)| (f.binary.clone(), m.clone()))
        .collect();
    let runner = Arc::new(Runner {
        lambda: aws_sdk_lambda::Client::from_conf(lambda_conf),
        streams: aws_sdk_dynamodbstreams::Client::new(&sdk),
        dynamodb: aws_sdk_dynamodb::Client::new(&sdk),
        counters: Counters::default(),
        timeline: timeline::Timeline::default(),
        region,
        checkpoints,
        queues: queues::Queues::new(&template, args.visibility_timeout_seconds),
        chaos,
        async_slots: Mutex::default(),
        template,
        args: args.clone(),
    });
    if args.warm > 0 {
        runner.warm(args.warm).await;
    }
    let app = front_routes(runner.clone());
    let listener = guard::bind(args.listen).await?;
    info!(listen = %args.listen, upstream = %args.lambda_upstream, template = %args.template.display(), checkpoints = %runner.checkpoints.path().display(), "Lambda Invoke API front listening");
    for m in mappings {
        tokio::spawn(runner.clone().map_stream(Arc::new(m)));
    }
    for f in scheduled {
        tokio::spawn(runner.clone().schedule(f));
    }
    for (f, m) in sqs_mappings {
        tokio::spawn(runner.clone().poll_queue(f, m));
    }
    guard::serve(listener, app).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        local: LocalArgs,
    }

    #[test]
    fn arns_resolve_to_binary_names() {
        assert_eq!(function_name("wordcount-count"), "wordcount-count");
        assert_eq!(function_name("wordcount-count:live"), "wordcount-count");
        assert_eq!(
            function_name("arn:aws:lambda:us-east-1:123456789012:function:wordcount-count:3"),
            "wordcount-count"
        );
    }

    #[test]
    fn scheduled_event_parses_as_eventbridge() {
        let v = scheduled_event("us-east-1");
        assert_eq!(v["detail-type"], "Scheduled Event");
        assert_eq!(v["source"], "aws.events");
    }

    #[test]
    fn template_values_unless_overridden() {
        let t = Template::parse(include_str!("../../../template.yaml"), "whimbrel_").unwrap();
        let args = Cli::parse_from(["x"]).local;
        let ms = mappings(&t, &args).unwrap();
        assert_eq!(ms.len(), 3, "workflow requests, activity events, signals");
        for m in &ms {
            assert_eq!(m.settings.maximum_retry_attempts, Some(10));
            assert_eq!(
                m.settings.maximum_record_age,
                Some(Duration::from_secs(3600))
            );
            assert_eq!(m.settings.batch_size, 100);
        }
        let args = Cli::parse_from([
            "x",
            "--maximum-retry-attempts",
            "-1",
            "--maximum-record-age-seconds",
            "60",
            "--batch-size",
            "5",
            "--bisect-batch-on-function-error",
            "false",
            "--function-timeout-seconds",
            "2",
        ])
        .local;
        let ms = mappings(&t, &args).unwrap();
        for m in &ms {
            assert_eq!(m.settings.maximum_retry_attempts, None);
            assert_eq!(m.settings.maximum_record_age, Some(Duration::from_secs(60)));
            assert_eq!(m.settings.batch_size, 5);
            assert!(!m.settings.bisect_batch_on_function_error);
            assert_eq!(m.timeout, Duration::from_secs(2));
        }
        assert!(Cli::try_parse_from(["x", "--chaos-drop-rate", "1.5"]).is_err());
        assert!(Cli::parse_from(["x"]).local.chaos.config().is_none());
        let c = Cli::parse_from(["x", "--chaos", "--chaos-seed", "7"])
            .local
            .chaos
            .config()
            .unwrap();
        assert_eq!(c.seed, 7);
        assert_eq!((c.max_actions, c.pause_after_batches), (None, None));
        let c = Cli::parse_from([
            "x",
            "--chaos",
            "--chaos-max-actions",
            "4",
            "--chaos-pause-after-batches",
            "6",
        ])
        .local
        .chaos
        .config()
        .unwrap();
        assert_eq!((c.max_actions, c.pause_after_batches), (Some(4), Some(6)));
        assert!(Cli::try_parse_from(["x", "--chaos-pause-after-batches", "0"]).is_err());
    }
}
