//! Logging set-up shared by the functions and the CLI.

use tracing_subscriber::EnvFilter;

/// Install a `tracing` subscriber: JSON lines when `json` (Lambda, where
/// `LoggingConfig: JSON` expects them), plain text otherwise. The level
/// comes from `RUST_LOG` (default `info`). Calling it twice is harmless.
pub fn init(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    let _ = if json {
        builder.json().without_time().try_init()
    } else {
        builder.try_init()
    };
}
