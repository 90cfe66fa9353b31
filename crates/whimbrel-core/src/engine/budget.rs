//! The time budget of one invocation (issue 42 A.4, A.9): a Lambda
//! function has a timeout, and work that runs past it is cut between any
//! two writes and retried whole (a stream batch, bisected down to one
//! record that times out again). So the function's main gives the work a
//! deadline ([`within`]), and the engine's long loops (a wide fan-out's
//! release, a monitor sweep) stop *starting* work once it has passed
//! ([`spent`]), leaving the rest owed where the monitor resumes it: a
//! terminal activity keeps its due marker until its settle is done, and a
//! due item stays in the index until it is swept.
//!
//! The deadline is task-local: work outside [`within`] (tests, the
//! simulation, a Full Logic API process) has no deadline and runs to its
//! end. Within one, the settle that applying a report starts has at most
//! [`SETTLE_SLICE`] of it.

use std::future::Future;
use std::time::{Duration, Instant};

tokio::task_local! {
    static DEADLINE: Instant;
}

/// What the budget keeps back from the function's own deadline: time to
/// finish the steps in flight and answer.
pub const RESERVE: Duration = Duration::from_secs(10);

/// Run `work` with `deadline`: [`spent`] is true inside it once the
/// deadline has passed.
pub async fn within<F: Future>(deadline: Instant, work: F) -> F::Output {
    DEADLINE.scope(deadline, work).await
}

/// What the settle that applying one report starts may spend on it: a
/// stream shard applies its records one after another, so a settle that
/// takes the whole budget (a 10,000-wide release) holds every report
/// behind it. Past the slice the settle is owed, and the monitor, whose
/// sweeps settle with the whole budget, resumes it.
pub const SETTLE_SLICE: Duration = Duration::from_secs(5);

/// Run `work` with at most `slice` of the budget: its deadline is the
/// earlier of the current one and now + `slice`. Outside [`within`] it has
/// no deadline still (a test or the simulation decides by the work, never
/// by the machine's speed).
pub async fn sliced<F: Future>(slice: Duration, work: F) -> F::Output {
    match deadline() {
        Some(d) => within(d.min(Instant::now() + slice), work).await,
        None => work.await,
    }
}

/// Run `work` within the deadline of a Lambda invocation whose context
/// gives `deadline_epoch_ms` ([`lambda_deadline`]); without one when no
/// deadline is known.
pub async fn within_lambda<F: Future>(deadline_epoch_ms: u64, work: F) -> F::Output {
    match lambda_deadline(deadline_epoch_ms, function_timeout()) {
        Some(deadline) => within(deadline, work).await,
        None => work.await,
    }
}

/// `WHIMBREL_FUNCTION_TIMEOUT_SECONDS`: the function's timeout, for
/// runtimes whose deadline header is not a time (`whimbrel instances` sets
/// it from the template's `Timeout`).
fn function_timeout() -> Option<Duration> {
    std::env::var("WHIMBREL_FUNCTION_TIMEOUT_SECONDS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
}

/// The deadline of a Lambda invocation whose context gives
/// `deadline_epoch_ms` (the Runtime API's `Lambda-Runtime-Deadline-Ms`,
/// `lambda_runtime::Context::deadline`, epoch milliseconds), less
/// [`RESERVE`] (or half the time left, when less than twice the reserve is
/// left). A deadline that has passed already is not a time but an
/// emulator's constant (`cargo lambda watch` sends 600000): then `timeout`
/// counts from now, and with no timeout there is no deadline.
pub fn lambda_deadline(deadline_epoch_ms: u64, timeout: Option<Duration>) -> Option<Instant> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let left = match deadline_epoch_ms.checked_sub(now_ms) {
        Some(ms) if ms > 0 => Duration::from_millis(ms),
        _ => timeout?,
    };
    let keep = if left >= RESERVE * 2 {
        RESERVE
    } else {
        left / 2
    };
    Some(Instant::now() + left - keep)
}

/// How long work taken in hand now may be held before its holder has
/// surely ended: what is left of the invocation's deadline plus
/// [`RESERVE`] (the function's own timeout then has passed), or
/// [`HELD_WITHOUT_DEADLINE`] outside [`within`].
pub fn held_for() -> Duration {
    match deadline() {
        Some(d) => d.saturating_duration_since(Instant::now()) + RESERVE + Duration::from_secs(1),
        None => HELD_WITHOUT_DEADLINE,
    }
}

/// What [`held_for`] gives work with no deadline (a Full Logic API
/// process, a test): the heartbeat monitor's timeout (template.yaml,
/// 120 s).
pub const HELD_WITHOUT_DEADLINE: Duration = Duration::from_secs(120);

/// Run `work` until the deadline of the work in hand: `None` if the
/// deadline passed first (the work is dropped between two of its steps,
/// as a function that dies is). Outside [`within`], to its end. For a
/// call whose time is not the engine's (a decider's answer, issue 42
/// A.4): a step the engine starts before its deadline may still take any
/// time.
pub async fn before_deadline<F: Future>(work: F) -> Option<F::Output> {
    match deadline() {
        Some(d) => tokio::time::timeout_at(d.into(), work).await.ok(),
        None => Some(work.await),
    }
}

/// True once the deadline of the work in hand has passed; always false
/// outside [`within`].
pub fn spent() -> bool {
    DEADLINE.try_with(|d| Instant::now() >= *d).unwrap_or(false)
}

/// The deadline of the work in hand, if it has one.
pub fn deadline() -> Option<Instant> {
    DEADLINE.try_with(|d| *d).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_deadline_holds_inside_its_scope_only() {
        assert!(!spent(), "no deadline outside a scope");
        let past = Instant::now();
        assert!(within(past, async { spent() }).await);
        let later = Instant::now() + Duration::from_secs(60);
        assert!(!within(later, async { spent() }).await);
        assert_eq!(within(later, async { deadline() }).await, Some(later));
        let sliced_deadline = within(later, sliced(Duration::from_secs(5), async { deadline() }));
        let d = sliced_deadline.await.unwrap();
        assert!(d < later && d <= Instant::now() + Duration::from_secs(5));
        assert_eq!(
            sliced(Duration::from_secs(5), async { deadline() }).await,
            None
        );
    }

    #[test]
    fn a_lambda_deadline_keeps_a_reserve() {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let left = |d: Option<Instant>| d.unwrap().saturating_duration_since(Instant::now());
        let in_range = |d, lo, hi| (Duration::from_secs(lo)..=Duration::from_secs(hi)).contains(&d);
        let l = left(lambda_deadline(now_ms + 120_000, None));
        assert!(in_range(l, 105, 110), "{l:?}");
        assert!(left(lambda_deadline(now_ms + 4_000, None)) <= Duration::from_secs(2));
        // cargo lambda watch's constant header: not a time.
        assert_eq!(lambda_deadline(600_000, None), None);
        let l = left(lambda_deadline(600_000, Some(Duration::from_secs(120))));
        assert!(in_range(l, 105, 110), "{l:?}");
    }
}
