//! `whimbrel-sim`: run seeded schedules of the whole system under faults.
//! `make torture` runs 10,000; `WHIMBREL_SIM_SEED=n` replays one seed and
//! prints its shrunk trace on failure (the last 80 lines; all of it with
//! `WHIMBREL_SIM_TRACE=1`). `WHIMBREL_SIM_DEBUG=text` also prints, on a
//! failure, every activity item whose dump contains `text` (an activity
//! exec id, say), as the store holds it then.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use clap::Parser;
use whimbrel_sim::{run, shrink, Params, Stats};

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
    /// as the engine must allow: `tests/it/clocks.rs`).
    #[arg(long)]
    trusted_client_clocks: bool,
    /// Schedules run at once, each on its own thread (default: the
    /// machine's cores). Each schedule is deterministic alone, so the
    /// outcome of a seed does not depend on this.
    #[arg(long)]
    jobs: Option<usize>,
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
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let started = Instant::now();
    let (totals, failed) = run_all(&seeds, &params, jobs);
    match failed {
        Some(seed) => report_failure(seed, &params, totals.schedules),
        None => totals.print(started.elapsed().as_secs_f64()),
    }
}

/// Run `seeds` on `jobs` threads, each taking the next seed not run yet;
/// after a failure no new seed is taken. Returns the totals of the seeds
/// that passed and the lowest seed that failed.
fn run_all(seeds: &[u64], params: &Params, jobs: usize) -> (Totals, Option<u64>) {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let totals = Mutex::new(Totals::default());
    let failed = Mutex::new(None::<u64>);
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, seeds.len().max(1)) {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let Some(&seed) = seeds.get(next.fetch_add(1, Ordering::Relaxed)) else {
                        return;
                    };
                    match run(seed, params) {
                        Ok(stats) => totals.lock().expect("totals").add(stats),
                        Err(_) => {
                            stop.store(true, Ordering::Relaxed);
                            let mut f = failed.lock().expect("failed");
                            *f = Some(f.map_or(seed, |s| s.min(seed)));
                        }
                    }
                }
            });
        }
    });
    let failed = failed.into_inner().expect("failed");
    (totals.into_inner().expect("totals"), failed)
}

/// Shrink the failing `seed`, print its violations and trace, and exit 1.
fn report_failure(seed: u64, params: &Params, passed: u64) -> ! {
    let (small, failure) = shrink(seed, params);
    eprintln!("seed {seed} FAILED; replay: WHIMBREL_SIM_SEED={seed} make torture");
    eprintln!("shrunk to {small:?}");
    for v in &failure.violations {
        eprintln!("violation: {v}");
    }
    eprintln!("trace (last lines):");
    for line in &failure.trace {
        eprintln!("  {line}");
    }
    eprintln!("{passed} passed, 1 failed");
    std::process::exit(1);
}

/// What the schedules that passed did, summed.
#[derive(Default)]
struct Totals {
    /// Schedules that passed.
    schedules: u64,
    /// The sum of their stats (its `steps` is not printed).
    sum: Stats,
}

impl Totals {
    fn add(&mut self, s: Stats) {
        let t = &mut self.sum;
        self.schedules += 1;
        t.activities += s.activities;
        t.batches += s.batches;
        t.crashes += s.crashes;
        t.on_failure += s.on_failure;
        t.sim_seconds += s.sim_seconds;
        t.requests_given_up += s.requests_given_up;
        t.redriven += s.redriven;
        t.dead_lettered += s.dead_lettered;
        t.relaunches += s.relaunches;
        add_counts(&mut t.features, s.features);
        add_counts(&mut t.faults, s.faults);
        add_counts(&mut t.ended, s.ended);
    }

    fn print(&self, secs: f64) {
        let (n, t) = (self.schedules, &self.sum);
        println!(
            "{n} schedules in {secs:.1}s ({:.1}/s): {} activities, {} stream batches, {} crashed invocations, {} records given up by the mappings ({} of them requests with no exec yet; {} on-failure messages redriven, {} dead-lettered), {:.1} simulated hours",
            n as f64 / secs,
            t.activities,
            t.batches,
            t.crashes,
            t.on_failure,
            t.requests_given_up,
            t.redriven,
            t.dead_lettered,
            t.sim_seconds as f64 / 3600.0
        );
        println!(
            "activities ended: {:?}; attempts relaunched: {}",
            t.ended, t.relaunches
        );
        println!("retries, workers, timeouts: {:?}", t.features);
        println!("faults injected: {:?}", t.faults);
        println!("{n} passed, 0 failed");
    }
}

fn add_counts<K: Ord>(into: &mut BTreeMap<K, u64>, from: BTreeMap<K, u64>) {
    for (k, v) in from {
        *into.entry(k).or_insert(0) += v;
    }
}
