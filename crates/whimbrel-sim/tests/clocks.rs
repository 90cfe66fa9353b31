//! Clients whose clocks are off by minutes (`Params::client_clock_minutes`).
//! Engine functions run on NTP-synced Lambda hosts; activities, workers and
//! users do not have to. The engine judges heartbeat timeouts from the
//! `heartbeat_time_epoch` a client writes (its own clock), and a worker's
//! claim stamps the start and first heartbeat with the worker's clock, so a
//! client whose clock is minutes behind is timed out while it heartbeats.

use whimbrel_sim::{run, Params};

/// Seed 46 with clients' clocks off by minutes: activity a0 of one
/// workflow heartbeats through a client 102 s behind; the monitor times it
/// out for lack of heartbeat (60 s timeout) 18 s after its last heartbeat
/// (world time). (First found as seed 23, then 3, 38 and 27; engine changes
/// and new faults that add draws shuffle the schedules.)
#[test]
#[ignore = "engine bug: heartbeat deadlines trust the client's clock; a client minutes behind is timed out while heartbeating (sim seed 46 with client_clock_minutes)"]
fn clients_minutes_behind_are_not_timed_out_while_they_heartbeat() {
    let params = Params {
        client_clock_minutes: true,
        ..Params::default()
    };
    if let Err(f) = run(46, &params) {
        panic!("{}", f.violations.join("\n"));
    }
}

/// The timing check sees it (so it is not vacuous): the same seed fails
/// with the false heartbeat timeout, and passes with clocks right. When
/// the engine stops trusting clients' clocks, this test fails: un-ignore
/// the one above and turn `client_clock_minutes` on by default.
#[test]
fn the_timing_check_catches_a_client_minutes_behind_timed_out() {
    let skewed = Params {
        client_clock_minutes: true,
        ..Params::default()
    };
    let v = run(46, &skewed)
        .err()
        .map(|f| f.violations)
        .unwrap_or_default();
    assert!(
        v.iter()
            .any(|m| m.contains("timed out for lack of heartbeat")),
        "{v:?}"
    );
    let right = run(46, &Params::default());
    assert!(right.is_ok(), "{:?}", right.err().map(|f| f.violations));
}
