//! `whimbrel local --chaos`: the at-least-once and best-effort behaviours
//! AWS allows and rarely shows, made frequent. Async invokes are dropped
//! (answered 202, never run), duplicated (run twice) or delayed; stream
//! batches that succeeded are delivered again.
//!
//! Decisions are a pure function of the seed, what is decided on and how
//! many times that same thing was decided on before: the same seed gives
//! the same decisions for the same events whatever the timing, and an
//! invocation sent again is decided on afresh (not dropped forever). What
//! is decided on is what stays the same from one run to the next:
//! * an async invoke: the function and the payload, less the fields of an
//!   activity's launch that differ from run to run ([`RUN_SPECIFIC`]: its
//!   ids, derived from a random request id, and its token), its objects'
//!   keys in order; so a launch is known by its activity, attempt, launch
//!   number, input and prerequisites' outputs;
//! * a successful stream batch: its table and its place among the
//!   batches its shard's poller delivered, and whether that poller resumed
//!   after a checkpoint (a batch's records carry the run's ids).
//!
//! Each kind of action is bounded too (`--chaos-max-actions`), and
//! `--chaos-pause-after-batches` gives a point to kill the runner at that
//! does not depend on timing ([`super::pause`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;

use super::pause::Pause;

/// Log lines of chaos actions start with this.
pub const PREFIX: &str = "CHAOS";

/// Top-level fields of an activity's launch payload
/// (`whimbrel_core::plan::LaunchPayload`) that differ from one run to the
/// next for the same launch: left out of what chaos decides on.
pub const RUN_SPECIFIC: [&str; 3] = ["activity_exec_id", "workflow_exec_id", "attempt_token"];

/// Rates are probabilities in [0, 1].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChaosConfig {
    /// The seed (`--chaos-seed`).
    pub seed: u64,
    /// Async invokes answered 202 and never run.
    pub async_drop_rate: f64,
    /// Async invokes run twice.
    pub async_duplicate_rate: f64,
    /// Async invokes run after a delay.
    pub async_delay_rate: f64,
    /// Longest such delay.
    pub async_max_delay: Duration,
    /// Successful stream batches delivered once more.
    pub stream_duplicate_rate: f64,
    /// At most this many actions of each [`Kind`] per runner (`None`: no
    /// bound).
    pub max_actions: Option<u64>,
    /// Pause after this many successful stream batches ([`Pause`]).
    pub pause_after_batches: Option<u64>,
}

/// What happens to one async invoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AsyncChaos {
    /// Never run.
    pub drop: bool,
    /// Delay before the first delivery.
    pub delay: Option<Duration>,
    /// Run a second time, after this delay from the first start.
    pub duplicate_after: Option<Duration>,
}

/// The kinds of chaos action, each bounded by
/// [`ChaosConfig::max_actions`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An async invoke dropped.
    Drop,
    /// An async invoke run twice.
    Duplicate,
    /// An async invoke delayed.
    Delay,
    /// A successful stream batch delivered again.
    StreamDuplicate,
}

/// splitmix64: a stable, well-mixed step (not cryptographic).
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a 64 of `parts`, each followed by a separator byte.
fn key_hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for p in parts {
        for b in p.iter().chain(std::iter::once(&0xFFu8)) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01B3);
        }
    }
    h
}

/// What an async invoke of `function` with `payload` is, for chaos (see
/// the module): a JSON object without its [`RUN_SPECIFIC`] fields, keys
/// sorted; any other payload as it is.
fn async_key(function: &str, payload: &[u8]) -> u64 {
    let Ok(mut v) = serde_json::from_slice::<Value>(payload) else {
        return key_hash(&[b"async", function.as_bytes(), payload]);
    };
    if let Some(o) = v.as_object_mut() {
        for f in RUN_SPECIFIC {
            o.remove(f);
        }
    }
    v.sort_all_objects();
    key_hash(&[b"async", function.as_bytes(), v.to_string().as_bytes()])
}

/// Uniform draws in [0, 1) for one decision.
struct Draws(u64);

impl Draws {
    fn new(seed: u64, key: u64, occurrence: u64) -> Draws {
        let mut s = seed ^ key.rotate_left(17) ^ occurrence.wrapping_mul(0xA24B_AED4_963E_E407);
        splitmix64(&mut s);
        Draws(s)
    }
    fn next(&mut self) -> f64 {
        (splitmix64(&mut self.0) >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl ChaosConfig {
    /// The decision for the `occurrence`-th async invoke of `key` (pure).
    pub fn decide_async(&self, key: u64, occurrence: u64) -> AsyncChaos {
        let mut d = Draws::new(self.seed, key, occurrence);
        let (drop, dup, delay, delay_len, dup_len) =
            (d.next(), d.next(), d.next(), d.next(), d.next());
        let max_ms = self.async_max_delay.as_millis() as f64;
        let ms = |x: f64| Duration::from_millis((x * max_ms) as u64);
        if drop < self.async_drop_rate {
            return AsyncChaos {
                drop: true,
                ..AsyncChaos::default()
            };
        }
        AsyncChaos {
            drop: false,
            delay: (delay < self.async_delay_rate).then(|| ms(delay_len)),
            duplicate_after: (dup < self.async_duplicate_rate).then(|| ms(dup_len)),
        }
    }

    /// Whether the `occurrence`-th successful delivery of batch `key` is
    /// delivered once more (pure).
    pub fn decide_stream_duplicate(&self, key: u64, occurrence: u64) -> bool {
        let mut d = Draws::new(self.seed ^ 0x5354_5245_414D, key, occurrence);
        d.next() < self.stream_duplicate_rate
    }
}

/// The chaos of one runner: its config, how often each key was seen, the
/// actions taken of each kind, and its pause.
#[derive(Debug)]
pub struct Chaos {
    /// The rates and seed.
    pub config: ChaosConfig,
    /// `--chaos-pause-after-batches`.
    pub pause: Pause,
    seen: Mutex<HashMap<u64, u64>>,
    /// Actions taken, by [`Kind`] (its index).
    taken: [AtomicU64; 4],
}

impl Chaos {
    /// Chaos with `config`.
    pub fn new(config: ChaosConfig) -> Chaos {
        Chaos {
            config,
            pause: Pause::new(config.pause_after_batches),
            seen: Mutex::new(HashMap::new()),
            taken: Default::default(),
        }
    }

    fn occurrence(&self, key: u64) -> u64 {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let n = seen.entry(key).or_default();
        *n += 1;
        *n - 1
    }

    /// Whether one more action of `kind` is within
    /// [`ChaosConfig::max_actions`] (it is then counted).
    fn take(&self, kind: Kind) -> bool {
        let max = self.config.max_actions.unwrap_or(u64::MAX);
        self.taken[kind as usize]
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    /// The decision for an async invoke of `function` with `payload`,
    /// within the bound of each kind: a drop past it is a plain delivery.
    pub fn async_invoke(&self, function: &str, payload: &[u8]) -> AsyncChaos {
        let key = async_key(function, payload);
        let d = self.config.decide_async(key, self.occurrence(key));
        if d.drop {
            return if self.take(Kind::Drop) {
                d
            } else {
                AsyncChaos::default()
            };
        }
        AsyncChaos {
            drop: false,
            delay: d.delay.filter(|_| self.take(Kind::Delay)),
            duplicate_after: d.duplicate_after.filter(|_| self.take(Kind::Duplicate)),
        }
    }

    /// Whether the `ordinal`-th (0-based) successful batch a poller of
    /// `table`'s stream delivered is delivered once more; `resumed`: the
    /// poller started after a checkpoint.
    pub fn stream_duplicate(&self, table: &str, resumed: bool, ordinal: u64) -> bool {
        let key = key_hash(&[
            b"stream",
            table.as_bytes(),
            &[u8::from(resumed)],
            &ordinal.to_le_bytes(),
        ]);
        self.config
            .decide_stream_duplicate(key, self.occurrence(key))
            && self.take(Kind::StreamDuplicate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(seed: u64) -> ChaosConfig {
        ChaosConfig {
            seed,
            async_drop_rate: 0.1,
            async_duplicate_rate: 0.2,
            async_delay_rate: 0.3,
            async_max_delay: Duration::from_millis(2000),
            stream_duplicate_rate: 0.25,
            max_actions: None,
            pause_after_batches: None,
        }
    }

    #[test]
    fn same_seed_same_decisions_whatever_the_order() {
        let a = Chaos::new(config(42));
        let b = Chaos::new(config(42));
        let payloads: Vec<String> = (0..200).map(|i| format!("{{\"n\":{i}}}")).collect();
        let first: Vec<_> = payloads
            .iter()
            .map(|p| a.async_invoke("f", p.as_bytes()))
            .collect();
        // The other runner sees them in reverse order.
        let mut second: Vec<_> = payloads
            .iter()
            .rev()
            .map(|p| b.async_invoke("f", p.as_bytes()))
            .collect();
        second.reverse();
        assert_eq!(first, second);
        // Another seed decides otherwise.
        let c = Chaos::new(config(43));
        let third: Vec<_> = payloads
            .iter()
            .map(|p| c.async_invoke("f", p.as_bytes()))
            .collect();
        assert_ne!(first, third);
    }

    /// A launch payload of activity `count-{n}`, launch `launch`, with the
    /// run's ids and token `run`, its fields in an order of their own.
    fn launch(n: u32, launch: u32, run: &str, reversed: bool) -> String {
        let mut fields = [
            format!("\"activity_exec_id\": \"count-{n}::{run}\""),
            format!("\"workflow_exec_id\": \"wordcount::{run}\""),
            format!("\"attempt_token\": \"{run}\""),
            format!("\"activity_name\": \"count-{n}\""),
            format!("\"launch\": {launch}"),
            format!("\"input\": {{\"text\": \"chunk {n}\", \"fail\": false}}"),
        ];
        if reversed {
            fields.reverse();
        }
        format!("{{{}}}", fields.join(", "))
    }

    #[test]
    fn a_launch_is_decided_on_by_what_it_carries_not_its_run_ids() {
        let key = |p: String| async_key("wordcount-count", p.as_bytes());
        for n in 0..50 {
            // Another run (other ids and token), fields in another order:
            // the same launch.
            assert_eq!(
                key(launch(n, 1, "run-a", false)),
                key(launch(n, 1, "run-b", true))
            );
            // Another launch of it, or another activity: another event.
            assert_ne!(
                key(launch(n, 1, "run-a", false)),
                key(launch(n, 2, "run-a", false))
            );
            assert_ne!(
                key(launch(n, 1, "run-a", false)),
                key(launch(n + 1, 1, "run-a", false))
            );
        }
        // The function counts; a payload that is not JSON is taken as is.
        assert_ne!(
            async_key("a", launch(0, 1, "r", false).as_bytes()),
            async_key("b", launch(0, 1, "r", false).as_bytes())
        );
        assert_ne!(async_key("f", b"not json"), async_key("f", b"not json!"));
    }

    #[test]
    fn rates_are_honoured() {
        let cfg = config(7);
        let n = 20_000u64;
        let (mut drops, mut dups, mut delays, mut stream) = (0, 0, 0, 0);
        for k in 0..n {
            let d = cfg.decide_async(key_hash(&[&k.to_le_bytes()]), 0);
            if d.drop {
                drops += 1;
                assert_eq!(d.delay, None);
                assert_eq!(d.duplicate_after, None);
            }
            dups += u32::from(d.duplicate_after.is_some());
            if let Some(delay) = d.delay {
                delays += 1;
                assert!(delay <= cfg.async_max_delay);
            }
            stream += u32::from(cfg.decide_stream_duplicate(k, 0));
        }
        let rate = |c: u32| f64::from(c) / n as f64;
        assert!((rate(drops) - 0.1).abs() < 0.015, "{}", rate(drops));
        // Duplicates and delays are drawn for the invokes not dropped.
        assert!((rate(dups) - 0.9 * 0.2).abs() < 0.015, "{}", rate(dups));
        assert!((rate(delays) - 0.9 * 0.3).abs() < 0.015, "{}", rate(delays));
        assert!((rate(stream) - 0.25).abs() < 0.015, "{}", rate(stream));
    }

    #[test]
    fn each_kind_is_bounded() {
        let chaos = Chaos::new(ChaosConfig {
            max_actions: Some(3),
            ..config(5)
        });
        let (mut drops, mut dups, mut delays, mut stream) = (0, 0, 0, 0);
        for i in 0..2000 {
            let d = chaos.async_invoke("f", format!("{{\"n\":{i}}}").as_bytes());
            drops += u32::from(d.drop);
            dups += u32::from(d.duplicate_after.is_some());
            delays += u32::from(d.delay.is_some());
            stream += u32::from(chaos.stream_duplicate("t", false, i));
        }
        assert_eq!((drops, dups, delays, stream), (3, 3, 3, 3));
    }

    #[test]
    fn a_batch_is_known_by_its_table_and_place() {
        let a = Chaos::new(config(3));
        let b = Chaos::new(config(3));
        let decide = |c: &Chaos, t: &str, resumed: bool| -> Vec<bool> {
            (0..200)
                .map(|i| c.stream_duplicate(t, resumed, i))
                .collect()
        };
        let first = decide(&a, "events", false);
        assert_eq!(first, decide(&b, "events", false));
        assert!(first.iter().any(|d| *d));
        assert_ne!(first, decide(&a, "requests", false));
        // A restarted runner's poller decides afresh.
        assert_ne!(first, decide(&a, "events", true));
    }

    #[test]
    fn a_resent_invoke_is_decided_afresh() {
        let cfg = ChaosConfig {
            async_drop_rate: 0.5,
            ..config(1)
        };
        let chaos = Chaos::new(cfg);
        let decisions: Vec<bool> = (0..64)
            .map(|_| chaos.async_invoke("f", b"same payload").drop)
            .collect();
        assert!(decisions.iter().any(|d| *d) && decisions.iter().any(|d| !*d));
        // And the sequence is the seed's.
        let again = Chaos::new(cfg);
        let replay: Vec<bool> = (0..64)
            .map(|_| again.async_invoke("f", b"same payload").drop)
            .collect();
        assert_eq!(decisions, replay);
    }

    #[test]
    fn zero_rates_do_nothing() {
        let cfg = ChaosConfig {
            seed: 9,
            async_drop_rate: 0.0,
            async_duplicate_rate: 0.0,
            async_delay_rate: 0.0,
            async_max_delay: Duration::from_secs(1),
            stream_duplicate_rate: 0.0,
            max_actions: None,
            pause_after_batches: None,
        };
        for k in 0..1000 {
            assert_eq!(cfg.decide_async(k, 0), AsyncChaos::default());
            assert!(!cfg.decide_stream_duplicate(k, 0));
        }
    }
}
