//! Whimbrel's deterministic simulation (in the style of FoundationDB's and
//! TigerBeetle's VOPR): the real engine, handlers and activity helper run
//! against an in-memory DynamoDB model, with streams, event source
//! mappings (bounded retries, record age and bisection as `template.yaml`
//! sets them), async invokes delivered 0, 1 or 2 times and late, crashes
//! after any store call, throttling, transaction conflicts, clock skew,
//! activities that die, report late, twice or for an old attempt, users
//! who cancel, and hostile rows. One seed drives everything; a failing seed
//! replays exactly.
//!
//! Why not a library scheduler: turmoil simulates networks on tokio,
//! madsim replaces tokio and needs every dependency built for it (the AWS
//! SDK is not), shuttle schedules threads with its own seed apart from the
//! fault decisions; here one seed must drive both, and simulated time must
//! drive timeouts. The executor is 150 lines (`exec`).

pub mod actors;
pub mod check;
pub mod counts;
pub mod edges;
pub mod episodes;
pub mod exec;
pub mod shared;
pub mod template;
pub mod users;
pub mod world;

pub use world::{Failure, Params, Stats};

/// Every binary that links the simulation (`whimbrel-sim`, its tests)
/// allocates with mimalloc: a schedule allocates and frees on every step.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Run one schedule.
pub fn run(seed: u64, params: &Params) -> Result<Stats, Failure> {
    world::Sim::new(seed, params.clone()).run()
}

/// The smallest parameters (fewer workflows and activities, fewer faulty
/// steps, no users, hostile rows or redrives) under which `seed` still fails.
pub fn shrink(seed: u64, params: &Params) -> (Params, Failure) {
    let mut best = params.clone();
    let mut failure = match run(seed, &best) {
        Err(f) => f,
        Ok(_) => panic!("shrink: seed {seed} does not fail"),
    };
    loop {
        let mut candidates = vec![];
        if best.workflows > 1 {
            candidates.push(Params {
                workflows: best.workflows - 1,
                ..best.clone()
            });
        }
        if best.max_activities > 1 {
            candidates.push(Params {
                max_activities: best.max_activities - 1,
                ..best.clone()
            });
        }
        if best.fault_steps > 50 {
            candidates.push(Params {
                fault_steps: best.fault_steps / 2,
                ..best.clone()
            });
        }
        if best.cancels {
            candidates.push(Params {
                cancels: false,
                ..best.clone()
            });
        }
        if best.hostile {
            candidates.push(Params {
                hostile: false,
                ..best.clone()
            });
        }
        if best.redrives {
            candidates.push(Params {
                redrives: false,
                ..best.clone()
            });
        }
        if best.episodes {
            candidates.push(Params {
                episodes: false,
                ..best.clone()
            });
        }
        if best.target_limits {
            candidates.push(Params {
                target_limits: false,
                ..best.clone()
            });
        }
        if best.fault_level > 0.0 {
            candidates.push(Params {
                fault_level: 0.0,
                ..best.clone()
            });
        }
        let mut improved = false;
        for c in candidates {
            if let Err(f) = run(seed, &c) {
                best = c;
                failure = f;
                improved = true;
                break;
            }
        }
        if !improved {
            return (best, failure);
        }
    }
}
