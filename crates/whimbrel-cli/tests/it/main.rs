//! The integration tests of `whimbrel-cli`, one module per former test
//! file, linked into one binary. Each file under `tests/` used to be its
//! own crate, and so linked its own binary with the AWS SDK, tokio and the
//! engine (and DynamoDB Local's test support); one binary links once.
//! cargo-nextest still runs each test in its own process, and a single
//! file's tests run with `cargo test -p whimbrel-cli --test it <module>::`.

// The DynamoDB Local support of whimbrel-core's tests, shared.
#[path = "../../../whimbrel-core/tests/it/common/mod.rs"]
mod common;

mod cli;
mod instances;
mod local_streams;
mod replay;
