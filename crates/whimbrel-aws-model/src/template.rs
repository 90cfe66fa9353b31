//! The one reader of `template.yaml` (the SAM template `sam deploy` uses,
//! the one place the settings are written down): each function's timeout,
//! memory, async invoke settings and schedule, and each DynamoDB stream
//! event source mapping's settings. `whimbrel local` runs with them; the
//! simulation takes its mappings' settings from them. Pure: text in,
//! settings out.
//!
//! The template is YAML with CloudFormation's short tags (`!Ref`, `!Sub`,
//! `!GetAtt`): serde_yaml keeps them as tagged values, and intrinsics are
//! resolved as far as the settings need: `!Ref Param` (or `{Ref: Param}`)
//! to the parameter's `Default` (`TablePrefix` to the caller's table
//! prefix), the one-argument `!Sub` over parameters, and `!GetAtt
//! Table.StreamArn` to that table's resolved `TableName`. So
//! `BatchSize: !Ref StreamBatchSize` reads as the `StreamBatchSize`
//! parameter's default.
//!
//! A template may nest others (`AWS::Serverless::Application` whose
//! `Location` is a local template path, as `sam build` reads it: a user's
//! project nesting the Whimbrel stack): [`Template::parse_tree`] reads
//! them through the loader it is given, and the functions and queues of
//! every template are one [`Template`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::sqs::{QueueConfig, RedrivePolicy, SqsMapping, AWS_DEFAULT_SQS_BATCH_SIZE};
use serde_yaml::Value;

/// AWS's default function timeout when neither the function nor `Globals`
/// gives one, seconds.
pub const AWS_DEFAULT_TIMEOUT_SECONDS: u64 = 3;
/// AWS's default `MemorySize`, MB.
pub const AWS_DEFAULT_MEMORY_MB: i64 = 128;
/// AWS's default async retries when a function has no `EventInvokeConfig`.
pub const AWS_DEFAULT_ASYNC_RETRIES: u32 = 2;
/// AWS's default maximum event age for async invokes, seconds (6 hours).
pub const AWS_DEFAULT_ASYNC_EVENT_AGE_SECONDS: u64 = 21_600;
/// AWS's default `BatchSize` of a DynamoDB stream event source mapping.
pub const AWS_DEFAULT_BATCH_SIZE: usize = 100;

/// Where a mapping starts reading a shard that has no checkpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StartingPosition {
    /// The oldest record still in the shard (the default here: AWS has
    /// none, the template must say).
    #[default]
    TrimHorizon,
    /// Only records written after the mapping started.
    Latest,
}

/// A DynamoDB stream event source mapping (an `Events` entry of
/// `Type: DynamoDB`).
#[derive(Debug, Clone, PartialEq)]
pub struct StreamMapping {
    /// The table whose stream is read (`Stream: !GetAtt <Table>.StreamArn`
    /// resolved to that table's `TableName`, with the caller's table prefix).
    pub table: String,
    /// Most records per batch (`BatchSize`; in this repository's template
    /// `!Ref StreamBatchSize`, the parameter's default).
    pub batch_size: usize,
    /// Retries of a failing batch before it goes to the on-failure
    /// destination (`MaximumRetryAttempts`); `None` = infinite (-1).
    pub maximum_retry_attempts: Option<u32>,
    /// Records older than this are not delivered but sent to the on-failure
    /// destination (`MaximumRecordAgeInSeconds`, whole seconds); `None` =
    /// infinite (-1).
    pub maximum_record_age: Option<Duration>,
    /// Split a batch in two on a function error (`BisectBatchOnFunctionError`).
    pub bisect_batch_on_function_error: bool,
    /// `FunctionResponseTypes: [ReportBatchItemFailures]`: the answer is a
    /// partial batch response. Otherwise any non-error answer is success.
    pub report_batch_item_failures: bool,
    /// `FilterCriteria` on `eventName` (e.g. `["INSERT"]`); `None` = all.
    pub event_names: Option<Vec<String>>,
    /// `StartingPosition`.
    pub starting_position: StartingPosition,
    /// Whether an on-failure destination is configured
    /// (`DestinationConfig.OnFailure.Destination`).
    pub on_failure_destination: bool,
    /// The destination queue's logical id, when it is `!GetAtt
    /// <Queue>.Arn` of the template (else `None`: an SNS topic or an ARN
    /// given as text).
    pub on_failure_queue: Option<String>,
}

impl Default for StreamMapping {
    /// AWS's defaults for every optional property (`BatchSize` 100,
    /// `MaximumRetryAttempts` and `MaximumRecordAgeInSeconds` -1, no
    /// bisection, no partial batch responses, no filter, no destination),
    /// no table, `TRIM_HORIZON`.
    fn default() -> Self {
        StreamMapping {
            table: String::new(),
            batch_size: AWS_DEFAULT_BATCH_SIZE,
            maximum_retry_attempts: None,
            maximum_record_age: None,
            bisect_batch_on_function_error: false,
            report_batch_item_failures: false,
            event_names: None,
            starting_position: StartingPosition::TrimHorizon,
            on_failure_destination: false,
            on_failure_queue: None,
        }
    }
}

/// Async invoke settings (`EventInvokeConfig`, or AWS's defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncConfig {
    /// Retries after a function error (`MaximumRetryAttempts`, 0 to 2).
    pub maximum_retry_attempts: u32,
    /// An event older than this is discarded (`MaximumEventAgeInSeconds`).
    pub maximum_event_age: Duration,
}

impl Default for AsyncConfig {
    fn default() -> Self {
        AsyncConfig {
            maximum_retry_attempts: AWS_DEFAULT_ASYNC_RETRIES,
            maximum_event_age: Duration::from_secs(AWS_DEFAULT_ASYNC_EVENT_AGE_SECONDS),
        }
    }
}

/// One `AWS::Serverless::Function` of the template.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionConfig {
    /// The logical id (`WorkflowRequestFunction`).
    pub logical_id: String,
    /// The local function name: the cargo binary
    /// (`Metadata.BuildProperties.Binary`), the program an instance runs and the
    /// name the local Lambda APIs (`whimbrel lambda-apis`) serve it under.
    pub binary: String,
    /// `FunctionName` as deployed, parameters at their defaults, if given.
    pub deployed_name: Option<String>,
    /// `Timeout` (or `Globals.Function.Timeout`, or AWS's 3 s).
    pub timeout: Duration,
    /// `MemorySize`, MB (or `Globals.Function.MemorySize`, or AWS's 128):
    /// what an instance is told in `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`.
    pub memory_mb: u32,
    /// `EventInvokeConfig` or AWS's defaults.
    pub async_config: AsyncConfig,
    /// Its DynamoDB stream event source mappings.
    pub stream_mappings: Vec<StreamMapping>,
    /// Its SQS event source mappings (`Type: SQS`).
    pub sqs_mappings: Vec<SqsMapping>,
    /// Whether an EventBridge schedule invokes it (`Type: Schedule`).
    pub scheduled: bool,
}

/// The settings of every function of the template, by local name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Template {
    /// By binary name.
    pub functions: BTreeMap<String, FunctionConfig>,
    /// `Globals.Function.Timeout` (or AWS's 3 s): the timeout of functions
    /// the template does not name.
    pub default_timeout: Duration,
    /// Every `AWS::SQS::Queue`, by logical id.
    pub queues: BTreeMap<String, QueueConfig>,
}

/// A template the runner cannot use, with the place that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("template: {0}")]
pub struct TemplateError(pub String);

/// The template text as YAML.
fn yaml(text: &str) -> Result<Value, TemplateError> {
    serde_yaml::from_str(text).map_err(|e| TemplateError(format!("not YAML: {e}")))
}

fn err<T>(msg: impl Into<String>) -> Result<T, TemplateError> {
    Err(TemplateError(msg.into()))
}

struct Ctx<'a> {
    root: &'a Value,
    table_prefix: &'a str,
    overrides: &'a BTreeMap<String, String>,
}

impl Ctx<'_> {
    fn parameter_default(&self, name: &str) -> Option<String> {
        if name == "TablePrefix" {
            return Some(self.table_prefix.to_string());
        }
        if let Some(v) = self.overrides.get(name) {
            return Some(v.clone());
        }
        let d = self.root.get("Parameters")?.get(name)?.get("Default")?;
        scalar_string(d)
    }

    /// `value`, intrinsics resolved, as a string.
    fn string(&self, value: &Value, at: &str) -> Result<String, TemplateError> {
        if let Some(s) = scalar_string(value) {
            return Ok(s);
        }
        match intrinsic(value) {
            Some(("Ref", arg)) => {
                let name = scalar_string(arg).unwrap_or_default();
                self.parameter_default(&name)
                    .ok_or_else(|| TemplateError(format!("{at}: !Ref {name} has no default")))
            }
            Some(("Sub", arg)) => {
                let text = scalar_string(arg).ok_or_else(|| {
                    TemplateError(format!("{at}: only the one-argument !Sub is read"))
                })?;
                self.substitute(&text, at)
            }
            _ => err(format!("{at}: cannot resolve {value:?}")),
        }
    }

    fn substitute(&self, text: &str, at: &str) -> Result<String, TemplateError> {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let Some(end) = rest[start..].find('}') else {
                return err(format!("{at}: unclosed ${{ in {text:?}"));
            };
            let name = &rest[start + 2..start + end];
            let v = self
                .parameter_default(name)
                .ok_or_else(|| TemplateError(format!("{at}: cannot resolve ${{{name}}}")))?;
            out.push_str(&v);
            rest = &rest[start + end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    fn integer(&self, value: &Value, at: &str) -> Result<i64, TemplateError> {
        let s = self.string(value, at)?;
        s.trim()
            .parse()
            .map_err(|_| TemplateError(format!("{at}: {s:?} is not an integer")))
    }

    fn boolean(&self, value: &Value, at: &str) -> Result<bool, TemplateError> {
        match self.string(value, at)?.as_str() {
            "true" | "True" => Ok(true),
            "false" | "False" => Ok(false),
            s => err(format!("{at}: {s:?} is not a boolean")),
        }
    }

    /// `!GetAtt Logical.StreamArn` → that table's resolved `TableName`.
    fn stream_table(&self, value: &Value, at: &str) -> Result<String, TemplateError> {
        let logical = match intrinsic(value) {
            Some(("GetAtt", Value::String(s))) => s.split('.').next().unwrap_or("").to_string(),
            Some(("GetAtt", Value::Sequence(parts))) => {
                parts.first().and_then(scalar_string).unwrap_or_default()
            }
            _ => return err(format!("{at}: Stream must be !GetAtt <Table>.StreamArn")),
        };
        let name = self
            .root
            .get("Resources")
            .and_then(|r| r.get(logical.as_str()))
            .and_then(|t| t.get("Properties"))
            .and_then(|p| p.get("TableName"))
            .ok_or_else(|| TemplateError(format!("{at}: table {logical} has no TableName")))?;
        self.string(name, &format!("{logical}.TableName"))
    }
}

fn scalar_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// `!Ref x` / `{Ref: x}` → ("Ref", x); `!Sub` / `Fn::Sub` → ("Sub", ...).
fn intrinsic(v: &Value) -> Option<(&str, &Value)> {
    match v {
        Value::Tagged(t) => {
            let tag = t.tag.to_string();
            let name = tag.trim_start_matches('!');
            let name = match name {
                "Ref" => "Ref",
                "Sub" => "Sub",
                "GetAtt" => "GetAtt",
                _ => return None,
            };
            Some((name, &t.value))
        }
        Value::Mapping(m) if m.len() == 1 => {
            let (k, v) = m.iter().next()?;
            match k.as_str()? {
                "Ref" => Some(("Ref", v)),
                "Fn::Sub" => Some(("Sub", v)),
                "Fn::GetAtt" => Some(("GetAtt", v)),
                _ => None,
            }
        }
        _ => None,
    }
}

fn seconds(n: i64, at: &str) -> Result<Duration, TemplateError> {
    u64::try_from(n)
        .map(Duration::from_secs)
        .map_err(|_| TemplateError(format!("{at}: {n} is not a number of seconds")))
}

impl Template {
    /// Read the template text. `table_prefix` stands for the `TablePrefix`
    /// parameter (the runtime `--table-prefix`); every other parameter takes
    /// its `Default`.
    pub fn parse(text: &str, table_prefix: &str) -> Result<Template, TemplateError> {
        Template::parse_with(text, table_prefix, &BTreeMap::new())
    }

    /// [`Template::parse`], with the parameters in `overrides` (name →
    /// value) taking those values instead of their defaults, as `sam
    /// deploy --parameter-overrides` gives them. `whimbrel local` reads
    /// them from `--parameter-overrides`, so the stack's settings and the
    /// engine's agree (the launch targets' event age and the engine's
    /// relaunch window: issue 42 A.9).
    ///
    /// Errors: as [`Template::parse`].
    pub fn parse_with(
        text: &str,
        table_prefix: &str,
        overrides: &BTreeMap<String, String>,
    ) -> Result<Template, TemplateError> {
        let root = yaml(text)?;
        Template::of_root(&Ctx {
            root: &root,
            table_prefix,
            overrides,
        })
    }

    /// The settings of the parsed template `ctx.root`.
    fn of_root(ctx: &Ctx<'_>) -> Result<Template, TemplateError> {
        let root = ctx.root;
        let globals = root.get("Globals").and_then(|g| g.get("Function"));
        let global_timeout = match globals.and_then(|g| g.get("Timeout")) {
            Some(t) => ctx.integer(t, "Globals.Function.Timeout")?,
            None => AWS_DEFAULT_TIMEOUT_SECONDS as i64,
        };
        let global_memory = match globals.and_then(|g| g.get("MemorySize")) {
            Some(m) => ctx.integer(m, "Globals.Function.MemorySize")?,
            None => AWS_DEFAULT_MEMORY_MB,
        };
        let Some(Value::Mapping(resources)) = root.get("Resources") else {
            return err("no Resources");
        };
        let (mut functions, mut queues) = (BTreeMap::new(), BTreeMap::new());
        for (id, res) in resources {
            let Some(id) = id.as_str() else { continue };
            match res.get("Type").and_then(Value::as_str) {
                Some("AWS::Serverless::Function") => {
                    let f = function(ctx, id, res, global_timeout, global_memory)?;
                    functions.insert(f.binary.clone(), f);
                }
                Some("AWS::SQS::Queue") => {
                    drop(queues.insert(id.to_string(), queue(ctx, id, res)?))
                }
                _ => {}
            }
        }
        Ok(Template {
            functions,
            default_timeout: seconds(global_timeout, "Globals.Function.Timeout")?,
            queues,
        })
    }

    /// [`Template::parse_with`] of the template at `path` (its `text`),
    /// and of every template it nests: each `AWS::Serverless::Application`
    /// whose `Location` is a local path, relative to `path`'s directory,
    /// read with `load`. A nested template's parameters are `overrides`
    /// and the application's `Parameters` (resolved against the parent's,
    /// taking precedence), as CloudFormation passes them to a nested stack.
    ///
    /// Errors: a template's, a `load` error, a `Location` that is not a
    /// local path (an S3 URL or a Serverless Application Repository
    /// application: nothing to run locally), or two templates defining one
    /// function binary or queue.
    pub fn parse_tree(
        path: &Path,
        text: &str,
        table_prefix: &str,
        overrides: &BTreeMap<String, String>,
        load: &mut dyn FnMut(&Path) -> Result<String, TemplateError>,
    ) -> Result<Template, TemplateError> {
        let root = yaml(text)?;
        let ctx = Ctx {
            root: &root,
            table_prefix,
            overrides,
        };
        let mut tree = Template::of_root(&ctx)?;
        for (id, location, params) in nested_applications(&ctx, overrides)? {
            let child = path.parent().unwrap_or(Path::new(".")).join(&location);
            let text = load(&child)?;
            let nested = Template::parse_tree(&child, &text, table_prefix, &params, load)
                .map_err(|e| TemplateError(format!("{id} ({}): {}", child.display(), e.0)))?;
            tree.merge(nested, &id)?;
        }
        Ok(tree)
    }

    /// Add `nested`'s functions and queues (of application `id`).
    fn merge(&mut self, nested: Template, id: &str) -> Result<(), TemplateError> {
        for (binary, f) in nested.functions {
            if self.functions.contains_key(&binary) {
                return err(format!("{id}: function binary {binary} is defined twice"));
            }
            self.functions.insert(binary, f);
        }
        for (name, q) in nested.queues {
            if self.queues.contains_key(&name) {
                return err(format!("{id}: queue {name} is defined twice"));
            }
            self.queues.insert(name, q);
        }
        Ok(())
    }

    /// The settings of `name`: a binary name, or a deployed `FunctionName`.
    pub fn function(&self, name: &str) -> Option<&FunctionConfig> {
        self.functions.get(name).or_else(|| {
            self.functions
                .values()
                .find(|f| f.deployed_name.as_deref() == Some(name))
        })
    }

    /// The binary that serves `name` locally (a deployed `FunctionName`
    /// resolves to its binary; any other name is returned as is).
    pub fn local_name<'a>(&'a self, name: &'a str) -> &'a str {
        self.function(name).map_or(name, |f| f.binary.as_str())
    }

    /// Every (function, mapping) pair, in function name order.
    pub fn stream_mappings(&self) -> impl Iterator<Item = (&FunctionConfig, &StreamMapping)> {
        self.functions
            .values()
            .flat_map(|f| f.stream_mappings.iter().map(move |m| (f, m)))
    }

    /// Every (function, SQS mapping, its queue) triple, in function name
    /// order; a mapping whose queue is not in the template is left out.
    pub fn sqs_mappings(
        &self,
    ) -> impl Iterator<Item = (&FunctionConfig, &SqsMapping, &QueueConfig)> {
        self.functions.values().flat_map(move |f| {
            f.sqs_mappings
                .iter()
                .filter_map(move |m| Some((f, m, self.queues.get(&m.queue)?)))
        })
    }

    /// The functions an EventBridge schedule invokes.
    pub fn scheduled(&self) -> impl Iterator<Item = &FunctionConfig> {
        self.functions.values().filter(|f| f.scheduled)
    }
}

/// A nested application: its logical id, its local `Location`, and the
/// parameters its template gets.
type Nested = (String, PathBuf, BTreeMap<String, String>);

/// Each `AWS::Serverless::Application` of the template: its logical id,
/// its local `Location`, and the parameters its template gets
/// (`overrides`, then its own `Parameters`, resolved).
fn nested_applications(
    ctx: &Ctx<'_>,
    overrides: &BTreeMap<String, String>,
) -> Result<Vec<Nested>, TemplateError> {
    let Some(Value::Mapping(resources)) = ctx.root.get("Resources") else {
        return Ok(Vec::new());
    };
    let mut apps = Vec::new();
    for (id, res) in resources {
        let Some(id) = id.as_str() else { continue };
        if res.get("Type").and_then(Value::as_str) != Some("AWS::Serverless::Application") {
            continue;
        }
        let props = res.get("Properties");
        let location = props
            .and_then(|p| p.get("Location"))
            .and_then(scalar_string);
        let location = match location {
            Some(l) if !l.contains("://") => PathBuf::from(l),
            _ => {
                return err(format!(
                    "{id}.Location: only a local template path can be read (not an S3 URL nor a Serverless Application Repository application)"
                ))
            }
        };
        let mut params = overrides.clone();
        if let Some(Value::Mapping(given)) = props.and_then(|p| p.get("Parameters")) {
            for (name, v) in given {
                let name = name.as_str().unwrap_or_default().to_string();
                let value = ctx.string(v, &format!("{id}.Parameters.{name}"))?;
                params.insert(name, value);
            }
        }
        apps.push((id.to_string(), location, params));
    }
    Ok(apps)
}

fn function(
    ctx: &Ctx<'_>,
    id: &str,
    res: &Value,
    global_timeout: i64,
    global_memory: i64,
) -> Result<FunctionConfig, TemplateError> {
    let props = res.get("Properties");
    let prop = |k: &str| props.and_then(|p| p.get(k));
    let binary = res
        .get("Metadata")
        .and_then(|m| m.get("BuildProperties"))
        .and_then(|b| b.get("Binary"))
        .and_then(Value::as_str)
        .unwrap_or(id)
        .to_string();
    let deployed_name = match prop("FunctionName") {
        Some(v) => Some(ctx.string(v, &format!("{id}.FunctionName"))?),
        None => None,
    };
    let timeout = match prop("Timeout") {
        Some(t) => ctx.integer(t, &format!("{id}.Timeout"))?,
        None => global_timeout,
    };
    let memory = match prop("MemorySize") {
        Some(m) => ctx.integer(m, &format!("{id}.MemorySize"))?,
        None => global_memory,
    };
    let memory_mb = u32::try_from(memory)
        .ok()
        .filter(|m| (128..=10_240).contains(m))
        .ok_or_else(|| TemplateError(format!("{id}.MemorySize: {memory} is not 128-10240 MB")))?;
    let mut async_config = AsyncConfig::default();
    if let Some(c) = prop("EventInvokeConfig") {
        if let Some(v) = c.get("MaximumRetryAttempts") {
            let n = ctx.integer(v, &format!("{id}.EventInvokeConfig.MaximumRetryAttempts"))?;
            async_config.maximum_retry_attempts = u32::try_from(n).map_err(|_| {
                TemplateError(format!("{id}.EventInvokeConfig.MaximumRetryAttempts: {n}"))
            })?;
        }
        if let Some(v) = c.get("MaximumEventAgeInSeconds") {
            let at = format!("{id}.EventInvokeConfig.MaximumEventAgeInSeconds");
            async_config.maximum_event_age = seconds(ctx.integer(v, &at)?, &at)?;
        }
    }
    let (mut stream_mappings, mut sqs_mappings) = (Vec::new(), Vec::new());
    let mut scheduled = false;
    if let Some(Value::Mapping(events)) = prop("Events") {
        for (name, ev) in events {
            let name = format!("{id}.Events.{}", name.as_str().unwrap_or("?"));
            match ev.get("Type").and_then(Value::as_str) {
                Some("DynamoDB") => {
                    let p = ev.get("Properties").unwrap_or(&Value::Null);
                    stream_mappings.push(stream_mapping(ctx, &name, p)?);
                }
                Some("SQS") => {
                    let p = ev.get("Properties").unwrap_or(&Value::Null);
                    sqs_mappings.push(sqs_mapping(ctx, &name, p)?);
                }
                Some("Schedule") | Some("ScheduleV2") => scheduled = true,
                _ => {}
            }
        }
    }
    Ok(FunctionConfig {
        logical_id: id.to_string(),
        binary,
        deployed_name,
        timeout: seconds(timeout, &format!("{id}.Timeout"))?,
        memory_mb,
        async_config,
        stream_mappings,
        sqs_mappings,
        scheduled,
    })
}

/// The logical id `!GetAtt <id>.Arn` names.
fn get_att_arn(value: &Value, at: &str) -> Result<String, TemplateError> {
    let logical = match intrinsic(value) {
        Some(("GetAtt", Value::String(s))) => s.strip_suffix(".Arn").map(str::to_string),
        Some(("GetAtt", Value::Sequence(p))) if p.get(1).and_then(Value::as_str) == Some("Arn") => {
            p.first().and_then(scalar_string)
        }
        _ => None,
    };
    logical.ok_or_else(|| TemplateError(format!("{at}: must be !GetAtt <Queue>.Arn")))
}

/// A mapping's `BatchSize` (at least 1), or `default`.
fn batch_size(
    ctx: &Ctx<'_>,
    v: Option<&Value>,
    at: &str,
    default: usize,
) -> Result<usize, TemplateError> {
    let Some(v) = v else {
        return Ok(default);
    };
    let n = ctx.integer(v, &format!("{at}.BatchSize"))?;
    usize::try_from(n)
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| TemplateError(format!("{at}.BatchSize: {n}")))
}

fn sqs_mapping(ctx: &Ctx<'_>, at: &str, p: &Value) -> Result<SqsMapping, TemplateError> {
    let queue = get_att_arn(
        p.get("Queue").unwrap_or(&Value::Null),
        &format!("{at}.Queue"),
    )?;
    let batch_size = batch_size(ctx, p.get("BatchSize"), at, AWS_DEFAULT_SQS_BATCH_SIZE)?;
    let report_batch_item_failures = matches!(p.get("FunctionResponseTypes"),
        Some(Value::Sequence(s)) if s.iter().any(|t| t.as_str() == Some("ReportBatchItemFailures")));
    Ok(SqsMapping {
        queue,
        batch_size,
        report_batch_item_failures,
    })
}

fn queue(ctx: &Ctx<'_>, id: &str, res: &Value) -> Result<QueueConfig, TemplateError> {
    let mut q = QueueConfig::new(id);
    let Some(props) = res.get("Properties") else {
        return Ok(q);
    };
    if let Some(v) = props.get("VisibilityTimeout") {
        let at = format!("{id}.VisibilityTimeout");
        q.visibility_timeout = seconds(ctx.integer(v, &at)?, &at)?;
    }
    if let Some(v) = props.get("MessageRetentionPeriod") {
        let at = format!("{id}.MessageRetentionPeriod");
        q.message_retention = seconds(ctx.integer(v, &at)?, &at)?;
    }
    if let Some(r) = props.get("RedrivePolicy") {
        let at = format!("{id}.RedrivePolicy");
        let target = r.get("deadLetterTargetArn").unwrap_or(&Value::Null);
        let count = r.get("maxReceiveCount").unwrap_or(&Value::Null);
        let n = ctx.integer(count, &format!("{at}.maxReceiveCount"))?;
        q.redrive = Some(RedrivePolicy {
            dead_letter_queue: get_att_arn(target, &format!("{at}.deadLetterTargetArn"))?,
            max_receive_count: u32::try_from(n)
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| TemplateError(format!("{at}.maxReceiveCount: {n}")))?,
        });
    }
    Ok(q)
}

fn stream_mapping(ctx: &Ctx<'_>, at: &str, p: &Value) -> Result<StreamMapping, TemplateError> {
    let get = |k: &str| p.get(k);
    let table = ctx.stream_table(
        get("Stream").unwrap_or(&Value::Null),
        &format!("{at}.Stream"),
    )?;
    let batch_size = batch_size(ctx, get("BatchSize"), at, AWS_DEFAULT_BATCH_SIZE)?;
    let maximum_retry_attempts = match get("MaximumRetryAttempts") {
        Some(v) => infinite_or(ctx.integer(v, &format!("{at}.MaximumRetryAttempts"))?),
        None => None,
    }
    .map(|n| n as u32);
    let maximum_record_age = match get("MaximumRecordAgeInSeconds") {
        Some(v) => infinite_or(ctx.integer(v, &format!("{at}.MaximumRecordAgeInSeconds"))?)
            .map(Duration::from_secs),
        None => None,
    };
    let bisect_batch_on_function_error = match get("BisectBatchOnFunctionError") {
        Some(v) => ctx.boolean(v, &format!("{at}.BisectBatchOnFunctionError"))?,
        None => false,
    };
    let report_batch_item_failures = match get("FunctionResponseTypes") {
        Some(Value::Sequence(s)) => s
            .iter()
            .any(|t| t.as_str() == Some("ReportBatchItemFailures")),
        _ => false,
    };
    let starting_position = match get("StartingPosition")
        .map(|v| ctx.string(v, &format!("{at}.StartingPosition")))
        .transpose()?
        .as_deref()
    {
        Some("TRIM_HORIZON") => StartingPosition::TrimHorizon,
        Some("LATEST") => StartingPosition::Latest,
        other => return err(format!("{at}.StartingPosition: {other:?}")),
    };
    let event_names = filter_criteria(at, get("FilterCriteria"))?;
    let destination = get("DestinationConfig")
        .and_then(|d| d.get("OnFailure"))
        .and_then(|o| o.get("Destination"));
    let on_failure_queue = destination.and_then(|d| get_att_arn(d, at).ok());
    Ok(StreamMapping {
        table,
        batch_size,
        maximum_retry_attempts,
        maximum_record_age,
        bisect_batch_on_function_error,
        report_batch_item_failures,
        event_names,
        starting_position,
        on_failure_destination: destination.is_some(),
        on_failure_queue,
    })
}

/// The event names `FilterCriteria` lets through; `None`: no filter.
fn filter_criteria(
    at: &str,
    criteria: Option<&Value>,
) -> Result<Option<Vec<String>>, TemplateError> {
    let mut event_names: Option<Vec<String>> = None;
    if let Some(Value::Sequence(filters)) = criteria.and_then(|f| f.get("Filters")) {
        for f in filters {
            let pattern = f
                .get("Pattern")
                .and_then(Value::as_str)
                .ok_or_else(|| TemplateError(format!("{at}.FilterCriteria: no Pattern")))?;
            let names = event_name_filter(pattern)
                .map_err(|e| TemplateError(format!("{at}.FilterCriteria: {e}")))?;
            // Several filters are OR-ed.
            event_names.get_or_insert_with(Vec::new).extend(names);
        }
    }
    Ok(event_names)
}

/// -1 → `None` (infinite), n ≥ 0 → `Some(n)`.
fn infinite_or(n: i64) -> Option<u64> {
    u64::try_from(n).ok()
}

/// The event names a filter pattern such as `{"eventName": ["INSERT"]}`
/// lets through. Only `eventName` patterns are understood locally.
fn event_name_filter(pattern: &str) -> Result<Vec<String>, String> {
    let v: serde_json::Value =
        serde_json::from_str(pattern).map_err(|e| format!("pattern is not JSON: {e}"))?;
    let obj = v.as_object().ok_or("pattern is not an object")?;
    if obj.keys().any(|k| k != "eventName") {
        return Err(format!(
            "only eventName patterns are supported locally: {pattern}"
        ));
    }
    obj["eventName"]
        .as_array()
        .ok_or("eventName is not a list")?
        .iter()
        .map(|n| {
            n.as_str()
                .map(str::to_string)
                .ok_or_else(|| "eventName values must be strings".into())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The repository's own template, as `sam deploy` reads it.
    const REAL: &str = include_str!("../../../template.yaml");

    #[test]
    fn real_template_stream_mappings() {
        let t = Template::parse(REAL, "wb_").unwrap();
        let wr = t.function("whimbrel-workflow-request").unwrap();
        assert_eq!(wr.timeout, Duration::from_secs(300));
        assert_eq!(wr.stream_mappings.len(), 1);
        let m = &wr.stream_mappings[0];
        assert_eq!(m.table, "wb_workflow_request");
        // BatchSize: !Ref StreamBatchSize → the parameter's default.
        assert_eq!(m.batch_size, 100);
        assert_eq!(m.maximum_retry_attempts, Some(10));
        assert_eq!(m.maximum_record_age, Some(Duration::from_secs(3600)));
        assert!(m.bisect_batch_on_function_error);
        assert!(m.report_batch_item_failures);
        assert!(m.on_failure_destination);
        assert_eq!(m.on_failure_queue.as_deref(), Some("StreamFailureQueue"));
        // MODIFY records come in only to be counted (a reused row id).
        let names = ["INSERT".to_string(), "MODIFY".to_string()];
        assert_eq!(m.event_names.as_deref(), Some(&names[..]));
        assert_eq!(m.starting_position, StartingPosition::TrimHorizon);

        let ae = t.function("whimbrel-activity-event").unwrap();
        assert_eq!(ae.timeout, Duration::from_secs(120));
        // Two streams: activity events, then signals (handlers::client_rows
        // tells them apart), with the same settings.
        assert_eq!(ae.stream_mappings.len(), 2);
        assert_eq!(ae.stream_mappings[0].table, "wb_activity_event");
        let signals = &ae.stream_mappings[1];
        assert_eq!(signals.table, "wb_signal");
        assert_eq!(signals.event_names.as_deref(), Some(&names[..]));
        assert_eq!(signals.batch_size, 100);
        assert_eq!(signals.maximum_retry_attempts, Some(10));
        assert_eq!(signals.maximum_record_age, Some(Duration::from_secs(3600)));
        assert!(signals.bisect_batch_on_function_error);
        assert!(signals.report_batch_item_failures);
        assert_eq!(
            signals.on_failure_queue.as_deref(),
            Some("StreamFailureQueue")
        );
        assert_eq!(signals.starting_position, StartingPosition::TrimHorizon);
        assert_eq!(t.stream_mappings().count(), 3);
        let mut tables: Vec<&str> = t.stream_mappings().map(|(_, m)| m.table.as_str()).collect();
        tables.sort_unstable();
        assert_eq!(
            tables,
            ["wb_activity_event", "wb_signal", "wb_workflow_request"]
        );
    }

    #[test]
    fn real_template_schedule_and_async() {
        let t = Template::parse(REAL, "whimbrel_").unwrap();
        let scheduled: Vec<_> = t.scheduled().map(|f| f.binary.as_str()).collect();
        assert_eq!(scheduled, ["whimbrel-heartbeat-monitor"]);
        let monitor = t.function("whimbrel-heartbeat-monitor").unwrap();
        // Its own Timeout: the 40 s sweep, then the look-ahead's sleep.
        assert_eq!(monitor.timeout, Duration::from_secs(120));
        // Globals.Function.MemorySize.
        assert_eq!(monitor.memory_mb, 256);
        assert_eq!(monitor.async_config.maximum_retry_attempts, 0);
        // The decider is invoked synchronously: AWS's async defaults.
        let decider = t.function("wordcount-decider").unwrap();
        assert_eq!(decider.async_config, AsyncConfig::default());
        assert_eq!(
            decider.deployed_name.as_deref(),
            Some("whimbrel-task-wordcount-decider")
        );
        assert_eq!(
            t.local_name("whimbrel-task-wordcount-count"),
            "wordcount-count"
        );
        assert_eq!(t.local_name("unknown-fn"), "unknown-fn");
    }

    #[test]
    fn real_template_activities_do_not_retry_async() {
        // The engine relaunches an activity still QUEUED after its relaunch
        // window, the longer of QueuedRedriveSeconds and
        // LaunchEventAgeSeconds: Lambda's own async retries would only
        // duplicate that, later, and an event Lambda may keep queued
        // longer than the window could run beside its relaunch.
        let t = Template::parse(REAL, "whimbrel_").unwrap();
        let root: Value = serde_yaml::from_str(REAL).unwrap();
        let default = |p: &str| root["Parameters"][p]["Default"].as_u64().unwrap();
        let window = default("QueuedRedriveSeconds").max(default("LaunchEventAgeSeconds"));
        for name in [
            "wordcount-count",
            "wordcount-merge",
            "whimbrel-noop",
            "episode-step",
        ] {
            let f = t.function(name).unwrap();
            assert_eq!(f.async_config.maximum_retry_attempts, 0, "{name}");
            assert!(
                f.async_config.maximum_event_age <= Duration::from_secs(window),
                "{name}: {:?}",
                f.async_config
            );
        }
    }

    /// Issue 42 A.9: the local stack ran the engine with a 60 s launch
    /// event age and the emulated async queue with the template's default
    /// (six hours), so a launch that waited behind a backlog past the
    /// relaunch window was launched again while the queue still held it
    /// (`make bench`'s 10,000-wide fan-out: 8,857 invocations of the no-op
    /// for 1,144 activities completed). The stack now gives the template the
    /// engine's value, and the emulated queue keeps a launch exactly that
    /// long.
    #[test]
    fn a_parameter_override_sets_the_launch_targets_event_age() {
        let overrides = [("LaunchEventAgeSeconds".to_string(), "60".to_string())].into();
        let t = Template::parse_with(REAL, "whimbrel_", &overrides).unwrap();
        let noop = t.function("whimbrel-noop").unwrap();
        assert_eq!(noop.async_config.maximum_event_age, Duration::from_secs(60));
        let t = Template::parse(REAL, "whimbrel_").unwrap();
        let noop = t.function("whimbrel-noop").unwrap();
        assert_eq!(
            noop.async_config.maximum_event_age,
            Duration::from_secs(AWS_DEFAULT_ASYNC_EVENT_AGE_SECONDS)
        );
    }

    #[test]
    fn defaults_and_long_form_intrinsics() {
        let text = r#"
Parameters:
  Size: {Type: Number, Default: 7}
Resources:
  T:
    Type: AWS::DynamoDB::Table
    Properties:
      TableName: {"Fn::Sub": "${TablePrefix}t"}
  F:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        S:
          Type: DynamoDB
          Properties:
            Stream: {"Fn::GetAtt": [T, StreamArn]}
            StartingPosition: LATEST
            BatchSize: {Ref: Size}
            MaximumRetryAttempts: -1
"#;
        let t = Template::parse(text, "p_").unwrap();
        let f = t.function("F").unwrap();
        assert_eq!(f.timeout, Duration::from_secs(AWS_DEFAULT_TIMEOUT_SECONDS));
        assert_eq!(i64::from(f.memory_mb), AWS_DEFAULT_MEMORY_MB);
        assert_eq!(f.async_config, AsyncConfig::default());
        let m = &f.stream_mappings[0];
        assert_eq!(m.table, "p_t");
        assert_eq!(m.batch_size, 7);
        assert_eq!(m.maximum_retry_attempts, None);
        assert_eq!(m.maximum_record_age, None);
        assert!(!m.bisect_batch_on_function_error);
        assert!(!m.report_batch_item_failures);
        assert_eq!(m.event_names, None);
        assert_eq!(m.starting_position, StartingPosition::Latest);
    }

    #[test]
    fn unsupported_filters_and_unresolvable_values_are_errors() {
        let text = r#"
Resources:
  T: {Type: AWS::DynamoDB::Table, Properties: {TableName: t}}
  F:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        S:
          Type: DynamoDB
          Properties:
            Stream: !GetAtt T.StreamArn
            StartingPosition: TRIM_HORIZON
            FilterCriteria:
              Filters:
                - Pattern: '{"dynamodb": {"NewImage": {"x": {"S": ["y"]}}}}'
"#;
        let e = Template::parse(text, "").unwrap_err();
        assert!(e.0.contains("only eventName"), "{e}");
        let bad = text.replace("TRIM_HORIZON", "!Ref Nowhere");
        let e = Template::parse(&bad, "").unwrap_err();
        assert!(e.0.contains("Nowhere"), "{e}");
        let text =
            "Resources:\n  F: {Type: AWS::Serverless::Function, Properties: {MemorySize: 64}}\n";
        let e = Template::parse(text, "").unwrap_err();
        assert!(e.0.contains("F.MemorySize: 64"), "{e}");
    }

    /// A project's template nesting the Whimbrel stack (as `whimbrel new`
    /// writes it): one template of both sets of functions, the nested one
    /// read relative to the parent, with the parameters the application
    /// passes (`!Ref` to the parent's) in force.
    const PROJECT: &str = "Parameters:\n  Age: {Type: String, Default: '90'}\nResources:\n  Whimbrel:\n    Type: AWS::Serverless::Application\n    Properties:\n      Location: ../whimbrel/template.yaml\n      Parameters:\n        LaunchEventAgeSeconds: !Ref Age\n  Hello:\n    Type: AWS::Serverless::Function\n    Metadata: {BuildProperties: {Binary: hello}}\n    Properties: {FunctionName: whimbrel-task-hello, Timeout: 60}\n";

    #[test]
    fn a_nested_template_is_read_relative_to_its_parent_with_its_parameters() {
        let mut asked = Vec::new();
        let mut load = |p: &Path| {
            asked.push(p.to_path_buf());
            Ok(REAL.to_string())
        };
        let path = Path::new("/home/me/hello/template.yaml");
        let t = Template::parse_tree(path, PROJECT, "wb_", &BTreeMap::new(), &mut load).unwrap();
        assert_eq!(
            asked,
            [PathBuf::from("/home/me/hello/../whimbrel/template.yaml")]
        );
        assert_eq!(t.function("whimbrel-task-hello").unwrap().binary, "hello");
        let wr = t.function("whimbrel-workflow-request").unwrap();
        assert_eq!(wr.stream_mappings[0].table, "wb_workflow_request");
        // The nested stack's LaunchEventAgeSeconds is the parent's Age.
        let count = t.function("wordcount-count").unwrap();
        assert_eq!(
            count.async_config.maximum_event_age,
            Duration::from_secs(90)
        );
        assert_eq!(
            t.queues.len(),
            Template::parse(REAL, "wb_").unwrap().queues.len()
        );
    }

    #[test]
    fn a_nested_application_that_is_not_a_local_template_is_refused() {
        let text = PROJECT.replace("../whimbrel/template.yaml", "s3://bucket/whimbrel.yaml");
        let mut load = |_: &Path| Ok(REAL.to_string());
        let e = Template::parse_tree(Path::new("t.yaml"), &text, "", &BTreeMap::new(), &mut load)
            .unwrap_err();
        assert!(
            e.0.contains("Whimbrel.Location: only a local template path"),
            "{e}"
        );
    }

    #[test]
    fn a_binary_defined_in_two_templates_is_refused() {
        let mut load = |_: &Path| {
            Ok(PROJECT.replace("Whimbrel:", "Other:").replace(
                "Type: AWS::Serverless::Application",
                "Type: AWS::SNS::Topic",
            ))
        };
        let e = Template::parse_tree(
            Path::new("t.yaml"),
            PROJECT,
            "",
            &BTreeMap::new(),
            &mut load,
        )
        .unwrap_err();
        assert!(
            e.0.contains("function binary hello is defined twice"),
            "{e}"
        );
    }
}
