//! Clients whose clocks are off by minutes (`Params::client_clock_minutes`).
//! Engine functions run on NTP-synced Lambda hosts; activities, workers and
//! users do not have to. A heartbeat time is written on the client's
//! clock, and a worker's claim stamps the start and first heartbeat with
//! the worker's; the engine counts a heartbeat's deadline from no earlier
//! than when it saw the heartbeat, so a client whose clock is minutes
//! behind is not timed out while it heartbeats.

use whimbrel_sim::{run, Params};

/// Seed 46 with clients' clocks off by minutes: activity a0 of one
/// workflow heartbeats through a client 102 s behind; the monitor timed it
/// out for lack of heartbeat (60 s timeout) 18 s after its last heartbeat
/// (world time), while the engine judged heartbeats by the client's clock.
/// It now counts a heartbeat from when it saw it
/// (`deadline::heartbeat_deadline`, docs/design.md § 3.10). That the check
/// would catch it is `check/timing.rs`'s own test.
#[test]
fn clients_minutes_behind_are_not_timed_out_while_they_heartbeat() {
    let params = Params {
        client_clock_minutes: true,
        ..Params::default()
    };
    if let Err(f) = run(46, &params) {
        panic!("{}", f.violations.join("\n"));
    }
}
