//! Whimbrel core: the contract, the item types, the DynamoDB store and the
//! engine operations. This crate is the Full Logic API: the three Lambda
//! functions are thin adapters over [`engine::Engine`] and [`handlers`].
//!
//! Layout, from pure to I/O:
//! * [`contract`]: states × transitions table (no I/O)
//! * [`ids`], [`dates`], [`plan`], [`model`]: formats and shapes (no I/O)
//! * [`store`]: the thin DynamoDB store (every request counted)
//! * [`launcher`]: Lambda Invoke (deciders sync, activities async)
//! * [`engine`]: the operations, over store + launcher
//! * [`handlers`]: stream batches / Scheduled Events → engine → responses
//! * [`activity`]: the helper activities use to report ([`activity::run`]
//!   serves one as a Lambda function)
//! * [`lambda`]: what every function's `main` shares ([`lambda::serve`])
//! * [`install`]: table definitions
//!
//! # Full Logic API
//!
//! A Rust process applies the contract in-process, without the Lambda
//! functions (contract: "Full Logic API"): it inserts its request row with
//! `manual = true` (for tracing; the workflow-request function skips it),
//! then runs the engine itself:
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use whimbrel_core::{dates::Timestamp, ids, model::WorkflowRequest};
//! let engine = whimbrel_core::engine_from_env().await?;
//! let now = Timestamp::now();
//! let request = WorkflowRequest {
//!     workflow_request_id: ids::new_id("nightly"),
//!     workflow_name: "nightly".into(),
//!     when: Some(now.date_list()),
//!     when_epoch: Some(now.epoch as f64),
//!     source: Some("batch host".into()),
//!     manual: Some(true),
//!     input: None,
//!     // The TTL attribute, when the stack keeps rows for a set time.
//!     expires_at_epoch: engine.config().row_expiry(now.epoch),
//!     // A start, not a cancel or redrive request, nor a child's.
//!     cancel_workflow_exec_id: None,
//!     reason: None,
//!     redrive_workflow_exec_id: None,
//!     parent: None,
//! };
//! let store = engine.store();
//! store
//!     .put_new(&store.tables().workflow_request(), "workflow_request_id", &request)
//!     .await?;
//! engine.start_workflow(&request).await?; // plan, activities, launches
//! // ... and for each activity event, written with `manual = true` too:
//! // engine.apply_event(&event).await?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod activity;
pub use whimbrel_rules::{
    attr, contract, dates, decider, history, ids, keys, kind, model, payloads, plan, retry,
    targets, write,
};
pub mod deciding;
pub mod engine;
pub mod grants;
pub mod handlers;
pub mod install;
pub mod lambda;
pub mod launcher;
pub mod metrics;
pub mod redrive;
pub mod store;
pub mod telemetry;
pub mod worker;

use engine::{Engine, EngineConfig};
use launcher::{LambdaLauncher, Launcher};
use store::{Store, Tables};

/// The AWS SDK configuration from the environment (region, credentials,
/// `AWS_ENDPOINT_URL*`), with `endpoint_url` overriding every service's
/// endpoint when given, and [`http_client`] for every request. Build every
/// SDK client from it: the SDK crates are compiled without a default HTTP
/// client.
pub async fn aws_config(endpoint_url: Option<&str>) -> aws_config::SdkConfig {
    let mut loader =
        aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(http_client());
    if let Some(url) = endpoint_url {
        loader = loader.endpoint_url(url);
    }
    loader.load().await
}

/// The HTTP client of every AWS SDK client: hyper with rustls on the `ring`
/// crypto provider (http:// endpoints such as DynamoDB Local work too).
/// The SDK's default client uses `aws-lc-rs`, which would make each Lambda
/// function's zipped `bootstrap` about a third larger (it must stay under
/// 3 MB: see `[profile.release]` in the workspace `Cargo.toml`).
pub fn http_client() -> aws_sdk_dynamodb::config::SharedHttpClient {
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

/// An engine over AWS (or the endpoints the environment names), configured
/// by `WHIMBREL_*` variables: what the Lambda functions run.
///
/// Errors: an invalid `WHIMBREL_*` variable.
pub async fn engine_from_env() -> Result<Engine<LambdaLauncher>, String> {
    let config = EngineConfig::from_env()?;
    let sdk = aws_config(None).await;
    let store = Store::new(
        aws_sdk_dynamodb::Client::new(&sdk),
        Tables::new(config.table_prefix.clone()),
    )
    .priced_from_env();
    let mut launcher = LambdaLauncher::new(aws_sdk_lambda::Client::new(&sdk));
    // The timer queue of the wake-ups (design.md § 9), when the stack has one.
    if let Ok(url) = std::env::var("WHIMBREL_TIMER_QUEUE_URL") {
        launcher = launcher.with_timer_queue(aws_sdk_sqs::Client::new(&sdk), url);
    }
    Ok(Engine::new(store, launcher, config))
}

/// The unit launcher launches nothing: for engines that only record
/// heartbeats or read state (e.g. [`activity::Activity`]). Every invoke is
/// rejected.
impl Launcher for () {
    async fn invoke_sync(
        &self,
        function: &str,
        _payload: &serde_json::Value,
    ) -> Result<serde_json::Value, launcher::InvokeError> {
        Err(launcher::InvokeError::Rejected {
            function: function.into(),
            message: "this engine has no launcher".into(),
        })
    }

    async fn invoke_async(
        &self,
        function: &str,
        _payload: &serde_json::Value,
    ) -> Result<(), launcher::InvokeError> {
        Err(launcher::InvokeError::Rejected {
            function: function.into(),
            message: "this engine has no launcher".into(),
        })
    }
}
