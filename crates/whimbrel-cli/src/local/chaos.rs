//! `whimbrel local --chaos`: the at-least-once and best-effort behaviours
//! AWS allows and rarely shows, made frequent. Async invokes are dropped
//! (answered 202, never run), duplicated (run twice) or delayed; stream
//! batches that succeeded are delivered again.
//!
//! Decisions are a pure function of the seed, what is decided on (the
//! function and payload, or the stream, shard and sequence numbers) and how
//! many times that same thing was decided on before: the same seed gives
//! the same decisions for the same events whatever the timing, and an
//! invocation sent again is decided on afresh (not dropped forever).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Log lines of chaos actions start with this.
pub const PREFIX: &str = "CHAOS";

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

/// The chaos of one runner: its config and how often each key was seen.
#[derive(Debug)]
pub struct Chaos {
    /// The rates and seed.
    pub config: ChaosConfig,
    seen: Mutex<HashMap<u64, u64>>,
}

impl Chaos {
    /// Chaos with `config`.
    pub fn new(config: ChaosConfig) -> Chaos {
        Chaos {
            config,
            seen: Mutex::new(HashMap::new()),
        }
    }

    fn occurrence(&self, key: u64) -> u64 {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let n = seen.entry(key).or_default();
        *n += 1;
        *n - 1
    }

    /// The decision for an async invoke of `function` with `payload`.
    pub fn async_invoke(&self, function: &str, payload: &[u8]) -> AsyncChaos {
        let key = key_hash(&[b"async", function.as_bytes(), payload]);
        self.config.decide_async(key, self.occurrence(key))
    }

    /// Whether the successful batch `first..=last` of `shard` is delivered
    /// once more.
    pub fn stream_duplicate(&self, stream: &str, shard: &str, first: &str, last: &str) -> bool {
        let key = key_hash(&[
            b"stream",
            stream.as_bytes(),
            shard.as_bytes(),
            first.as_bytes(),
            last.as_bytes(),
        ]);
        self.config
            .decide_stream_duplicate(key, self.occurrence(key))
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
        };
        for k in 0..1000 {
            assert_eq!(cfg.decide_async(k, 0), AsyncChaos::default());
            assert!(!cfg.decide_stream_duplicate(k, 0));
        }
    }
}
