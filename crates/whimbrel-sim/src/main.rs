//! `whimbrel-sim`: run seeded schedules of the whole system under faults.
//! `make torture` runs 10,000; `WHIMBREL_SIM_SEED=n` replays one seed and
//! prints its shrunk trace on failure (the last 80 lines; all of it with
//! `WHIMBREL_SIM_TRACE=1`). `WHIMBREL_SIM_DEBUG=text` also prints, on a
//! failure, every activity item whose dump contains `text` (an activity
//! exec id, say), as the store holds it then.

use std::time::Instant;

use clap::Parser;
use whimbrel_sim::{run, shrink, Params};

/// Options.
#[derive(Parser, Debug)]
#[command(about = "Deterministic simulation of Whimbrel under faults")]
struct Args {
    /// Schedules to run (seeds first-seed, first-seed + 1, ...).
    #[arg(long, default_value_t = 1000)]
    schedules: u64,
    /// The first seed; `WHIMBREL_SIM_SEED` runs only that seed.
    #[arg(long, default_value_t = 1)]
    first_seed: u64,
    /// Replay this one seed.
    #[arg(long, env = "WHIMBREL_SIM_SEED")]
    seed: Option<u64>,
    /// Workflows per schedule.
    #[arg(long, default_value_t = 3)]
    workflows: usize,
    /// Steps of the faulty phase.
    #[arg(long, default_value_t = 1500)]
    fault_steps: usize,
    /// Keep clients' clocks right (by default they may be off by minutes,
    /// as the engine must allow: `tests/clocks.rs`).
    #[arg(long)]
    trusted_client_clocks: bool,
}

fn main() {
    let args = Args::parse();
    let params = Params {
        workflows: args.workflows,
        fault_steps: args.fault_steps,
        client_clock_minutes: !args.trusted_client_clocks,
        ..Params::default()
    };
    let seeds: Vec<u64> = match args.seed {
        Some(s) => vec![s],
        None => (args.first_seed..args.first_seed + args.schedules).collect(),
    };
    let started = Instant::now();
    let (mut activities, mut batches, mut crashes, mut lost, mut sim_seconds, mut stranded) =
        (0, 0, 0, 0, 0, 0);
    let (mut redriven, mut dead_lettered) = (0, 0);
    let mut ended: std::collections::BTreeMap<String, u64> = Default::default();
    let mut relaunches = 0;
    let mut features = std::collections::BTreeMap::<String, u64>::new();
    let mut faults = std::collections::BTreeMap::<String, u64>::new();
    for (n, &seed) in seeds.iter().enumerate() {
        match run(seed, &params) {
            Ok(s) => {
                activities += s.activities;
                batches += s.batches;
                crashes += s.crashes;
                lost += s.on_failure;
                sim_seconds += s.sim_seconds;
                stranded += s.requests_given_up;
                redriven += s.redriven;
                dead_lettered += s.dead_lettered;
                relaunches += s.relaunches;
                for (k, v) in &s.features {
                    *features.entry(k.clone()).or_insert(0) += v;
                }
                for (k, v) in &s.faults {
                    *faults.entry(k.clone()).or_insert(0) += v;
                }
                for (k, v) in s.ended {
                    *ended.entry(k).or_insert(0) += v;
                }
            }
            Err(_) => {
                let (small, failure) = shrink(seed, &params);
                eprintln!("seed {seed} FAILED; replay: WHIMBREL_SIM_SEED={seed} make torture");
                eprintln!("shrunk to {small:?}");
                for v in &failure.violations {
                    eprintln!("violation: {v}");
                }
                eprintln!("trace (last lines):");
                for line in &failure.trace {
                    eprintln!("  {line}");
                }
                eprintln!("{n} passed, 1 failed");
                std::process::exit(1);
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{} schedules in {secs:.1}s ({:.1}/s): {activities} activities, {batches} stream batches, {crashes} crashed invocations, {lost} records given up by the mappings ({stranded} of them requests with no exec yet; {redriven} on-failure messages redriven, {dead_lettered} dead-lettered), {:.1} simulated hours",
        seeds.len(),
        seeds.len() as f64 / secs,
        sim_seconds as f64 / 3600.0
    );
    println!("activities ended: {ended:?}; attempts relaunched: {relaunches}");
    println!("retries, workers, timeouts: {features:?}");
    println!("faults injected: {faults:?}");
    println!("{} passed, 0 failed", seeds.len());
}
