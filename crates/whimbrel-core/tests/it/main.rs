//! The integration tests of `whimbrel-core`, one module per former test
//! file, linked into one binary. Each file under `tests/` used to be its
//! own crate, and so linked its own binary with the AWS SDK, tokio and the
//! engine: 26 links of the same dependencies on every change. One binary
//! links once; cargo-nextest still runs each test in its own process, and
//! a single file's tests run with `cargo test -p whimbrel-core --test it
//! <module>::` (or `cargo nextest run -E 'test(/^<module>::/)'`).

mod common;

/// The process's heap, counted, so a test can bound what one call holds
/// (`signals_dynamodb`); each test runs in its own process under nextest.
#[global_allocator]
pub(crate) static HEAP: peak_alloc::PeakAlloc = peak_alloc::PeakAlloc;

mod activity_helper_dynamodb;
mod attempts_dynamodb;
mod bad_input;
mod bounds_dynamodb;
mod children_chain_dynamodb;
mod children_dynamodb;
mod counting_dynamodb;
mod differential;
mod docs_shapes;
mod engine_dynamodb;
mod episodes_dynamodb;
mod events_files;
mod fan_out_dynamodb;
mod fuzz_regressions;
mod grants;
mod install;
mod joins_dynamodb;
mod limits_dynamodb;
mod memory_background;
mod memory_pages;
mod monitor_reads_dynamodb;
mod price_dynamodb;
mod redrive_dynamodb;
mod redrive_workflow_dynamodb;
mod signals_dynamodb;
mod target_limits_dynamodb;
mod timers_dynamodb;
mod trust_dynamodb;
