//! Clients whose clocks are off by minutes (`Params::client_clock_minutes`).
//! Engine functions run on NTP-synced Lambda hosts; activities, workers and
//! users do not have to. A heartbeat time is written on the client's
//! clock, and a worker's claim stamps the start and first heartbeat with
//! the worker's; the engine counts a heartbeat's deadline from no earlier
//! than when it saw the heartbeat, so a client whose clock is minutes
//! behind is not timed out while it heartbeats.

use whimbrel_sim::{run, Params};

/// Seed 61 with clients' clocks off by minutes: activity a0 of one
/// workflow heartbeats through a client 201 s behind. With the engine
/// judging heartbeats by the client's clock, the monitor timed it out for
/// lack of heartbeat (85 s timeout) 55 s after its last heartbeat (world
/// time). It counts a heartbeat from when it saw it
/// (`deadline::heartbeat_deadline`, docs/design.md § 3.10), and the seed
/// passes. (It was seed 46 before later faults moved the draws: find it
/// again by making `heartbeat_deadline` return the client's clock alone
/// and `unseen_heartbeat` false, and running until the first failure.)
/// That the check would catch it is `check/timing.rs`'s own test.
#[test]
fn clients_minutes_behind_are_not_timed_out_while_they_heartbeat() {
    let params = Params {
        client_clock_minutes: true,
        ..Params::default()
    };
    if let Err(f) = run(61, &params) {
        panic!("{}", f.violations.join("\n"));
    }
}
