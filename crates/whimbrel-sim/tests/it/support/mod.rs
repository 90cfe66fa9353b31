//! What the targeted interleaving tests share: a tiny executor that polls
//! one future to the end, a launcher that records what it invokes, and the
//! tests' start time.

#![allow(dead_code)]

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use serde_json::Value;
use whimbrel_core::launcher::{InvokeError, Launcher};

/// The tests' clock at the start, epoch seconds.
pub const T0: i64 = 1_795_306_411;

struct Noop;
impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

/// Poll `f` until it is ready (the in-memory store never blocks; a test
/// that gates a write opens the gate from the same thread).
pub fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = Box::pin(f);
    let w = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&w);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

/// A launcher that records each async invoke's payload, in order, and
/// refuses every sync one (no decider).
#[derive(Debug, Clone, Default)]
pub struct Rec {
    /// The payloads invoked, oldest first.
    pub invokes: Arc<Mutex<Vec<Value>>>,
}

impl Launcher for Rec {
    async fn invoke_sync(&self, f: &str, _p: &Value) -> Result<Value, InvokeError> {
        Err(InvokeError::Rejected {
            function: f.into(),
            message: "no decider".into(),
        })
    }
    async fn invoke_async(&self, _f: &str, p: &Value) -> Result<(), InvokeError> {
        self.invokes.lock().unwrap().push(p.clone());
        Ok(())
    }
}
