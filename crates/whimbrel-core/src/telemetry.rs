//! Logging set-up shared by the functions and the CLI.

use tracing_subscriber::filter::Targets;
use tracing_subscriber::prelude::*;

/// Install a `tracing` subscriber: JSON lines when `json` (Lambda, where
/// `LoggingConfig: JSON` expects them), plain text otherwise. The level
/// comes from `RUST_LOG` as `level` or `target=level,...` directives
/// (`tracing_subscriber::filter::Targets`; default `info`, also when
/// `RUST_LOG` does not parse). `Targets` rather than `EnvFilter`: the
/// latter's span and field filters need the `regex` crates, a tenth of each
/// function's size. Calling it twice is harmless.
pub fn init(json: bool) {
    init_with(json, std::env::var("RUST_LOG").ok());
}

/// The subscriber of a Lambda function, as Lambda's logging controls ask:
/// JSON lines when `AWS_LAMBDA_LOG_FORMAT` is `JSON` (the template's
/// `LoggingConfig: LogFormat: JSON`), at `AWS_LAMBDA_LOG_LEVEL` when set,
/// else `RUST_LOG` (default `info`). What
/// `lambda_runtime::tracing::init_default_subscriber` does, without the
/// `EnvFilter` (and its `regex` crates) that its `tracing` feature brings.
pub fn init_lambda() {
    let json = std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let level = std::env::var("AWS_LAMBDA_LOG_LEVEL")
        .ok()
        // Lambda's levels are TRACE..ERROR and FATAL; tracing has no FATAL.
        .map(|l| match l.to_ascii_lowercase().as_str() {
            "fatal" => "error".to_string(),
            l => l.to_string(),
        })
        .or_else(|| std::env::var("RUST_LOG").ok());
    init_with(json, level);
}

fn init_with(json: bool, directives: Option<String>) {
    let filter = directives
        .and_then(|v| v.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(tracing::Level::INFO));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false);
    let registry = tracing_subscriber::registry().with(filter);
    let _ = if json {
        registry.with(fmt.json().without_time()).try_init()
    } else {
        registry.with(fmt).try_init()
    };
}
