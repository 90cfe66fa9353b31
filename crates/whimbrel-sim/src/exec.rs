//! A deterministic single-threaded executor: the seed picks which ready
//! task is polled next, so one seed gives one interleaving. Every store
//! call of a simulated function yields once before it runs, so two
//! invocations interleave at store-call granularity, as concurrent Lambda
//! instances do against DynamoDB.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use futures::future::LocalBoxFuture;

/// One simulated invocation's fate: after how many store calls it crashes
/// (the call's effect lands, its answer is lost, the function dies).
#[derive(Debug, Default)]
pub struct Invocation {
    /// Store calls made so far.
    pub calls: AtomicU32,
    /// Crash right after this call number (1-based), if any.
    pub crash_after: Option<u32>,
    /// Set when the invocation crashed; the executor drops its task.
    pub crashed: AtomicBool,
    /// Store faults (throttling, conflicts) may be injected into its calls.
    pub faulty: bool,
    /// An engine function's timeout, and the stall that may run into it
    /// (none for clients, whose time the simulation does not bound).
    pub timeout: Option<FunctionTimeout>,
}

/// Lambda stops an invocation at its function's timeout (the template's
/// `Timeout`): a store call that would start at or after `deadline` (world
/// time, epoch seconds) is never made, and the invocation dies, as a
/// crash does, but late. A stall makes one call wait: a slow network or
/// a throttled SDK retrying (`Faults::function_timeout`).
#[derive(Debug, Clone, Copy)]
pub struct FunctionTimeout {
    /// World time the invocation is stopped at.
    pub deadline: i64,
    /// Before which call (1-based) it stalls, and for how many seconds.
    pub stall: Option<(u32, i64)>,
}

impl Invocation {
    /// Count a finished store call; true if the invocation dies now.
    pub fn called(&self) -> bool {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if self.crash_after == Some(n) {
            self.crashed.store(true, Ordering::SeqCst);
        }
        self.is_crashed()
    }
    /// The seconds to stall before the next store call, if it is the one
    /// that stalls.
    pub fn stall_before_next(&self) -> Option<i64> {
        let next = self.calls.load(Ordering::SeqCst) + 1;
        self.timeout
            .and_then(|t| t.stall)
            .and_then(|(at, secs)| (at == next).then_some(secs))
    }
    /// Die now if `now` (world time) is past the function's timeout;
    /// true if it died now.
    pub fn timed_out(&self, now: i64) -> bool {
        let out = self.timeout.is_some_and(|t| now >= t.deadline);
        if out {
            self.crashed.store(true, Ordering::SeqCst);
        }
        out
    }
    /// True once crashed.
    pub fn is_crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }
}

struct Task {
    fut: LocalBoxFuture<'static, ()>,
    invocation: Arc<Invocation>,
}

struct TaskWaker {
    id: u64,
    ready: Arc<Mutex<BTreeSet<u64>>>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.ready.lock().unwrap().insert(self.id);
    }
}

/// The executor: tasks by id, and the set of those ready to be polled.
#[derive(Default)]
pub struct Executor {
    tasks: BTreeMap<u64, Task>,
    ready: Arc<Mutex<BTreeSet<u64>>>,
    next: u64,
}

/// What polling a task did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Polled {
    /// Still running.
    Pending,
    /// Finished.
    Done(u64),
    /// Crashed and dropped.
    Crashed(u64),
}

impl Executor {
    /// Add a task; it is ready at once. Returns its id.
    pub fn spawn(
        &mut self,
        invocation: Arc<Invocation>,
        fut: impl Future<Output = ()> + 'static,
    ) -> u64 {
        let id = self.next;
        self.next += 1;
        self.tasks.insert(
            id,
            Task {
                fut: Box::pin(fut),
                invocation,
            },
        );
        self.ready.lock().unwrap().insert(id);
        id
    }

    /// True if the task still exists.
    pub fn alive(&self, id: u64) -> bool {
        self.tasks.contains_key(&id)
    }

    /// Tasks not finished.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// True when no task is left.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Tasks ready to be polled.
    pub fn ready_count(&self) -> usize {
        self.ready.lock().unwrap().len()
    }

    /// Poll the ready task `pick` selects (modulo their number); `None`
    /// when none is ready.
    pub fn step(&mut self, pick: usize) -> Option<Polled> {
        let id = {
            let mut ready = self.ready.lock().unwrap();
            if ready.is_empty() {
                return None;
            }
            let i = pick % ready.len();
            let id = *ready.iter().nth(i).expect("index in range");
            ready.remove(&id);
            id
        };
        let Some(task) = self.tasks.get_mut(&id) else {
            return Some(Polled::Pending);
        };
        let waker = Waker::from(Arc::new(TaskWaker {
            id,
            ready: self.ready.clone(),
        }));
        let mut cx = Context::from_waker(&waker);
        let r = Pin::new(&mut task.fut).poll(&mut cx);
        let crashed = task.invocation.is_crashed();
        match r {
            Poll::Ready(()) => {
                self.tasks.remove(&id);
                Some(Polled::Done(id))
            }
            Poll::Pending if crashed => {
                self.tasks.remove(&id);
                Some(Polled::Crashed(id))
            }
            Poll::Pending => Some(Polled::Pending),
        }
    }

    /// Drop every task (end of a schedule).
    pub fn clear(&mut self) {
        self.tasks.clear();
        self.ready.lock().unwrap().clear();
    }
}

/// Yield once: the task goes back to the ready set, so another task may
/// run before this one continues.
pub struct YieldNow(bool);

impl YieldNow {
    /// A fresh yield point.
    pub fn new() -> Self {
        YieldNow(false)
    }
}

impl Default for YieldNow {
    fn default() -> Self {
        Self::new()
    }
}

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}
