//! The simulation crate's integration tests, in one test binary: each file
//! used to be its own binary, linking the engine, the AWS SDK and tokio
//! again; one binary links them once, and nextest still runs each test in
//! its own process (so the 500 schedules' shards in `sim` run side by
//! side).

mod clocks;
mod interleavings;
mod markers;
mod sim;
mod support;
