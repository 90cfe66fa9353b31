//! `whimbrel lambda-apis`: the Lambda Invoke API and the Lambda Runtime
//! API of the local stack, for any function, in any runtime. It takes the
//! place of `cargo lambda watch --only-lambda-apis`, which serves only the
//! binaries of the Cargo project it runs in: a project made by `whimbrel
//! new` has functions of its own beside the Whimbrel stack's.
//!
//! As Lambda does (AWS Lambda Developer Guide, "Using the Lambda runtime
//! API for custom runtimes"; API reference "Invoke"):
//! * `POST /2015-03-31/functions/{name}/invocations` queues one invocation
//!   of `name` and answers when an instance has answered it: 200 with the
//!   response, or 200 with `X-Amz-Function-Error: Unhandled` and the error
//!   document the instance posted. Synchronous only: `whimbrel local`'s
//!   front handles async invokes and their retries, and calls this.
//! * An instance of `name` polls `GET {base}/2018-06-01/runtime/invocation/next`
//!   (its `AWS_LAMBDA_RUNTIME_API` is `<listen>/.rt/<name>`, as `whimbrel
//!   instances` sets it), which waits for the next invocation and gives
//!   its payload with the `Lambda-Runtime-Aws-Request-Id`,
//!   `Lambda-Runtime-Deadline-Ms` (now + the function's `Timeout` from the
//!   template, epoch milliseconds), `Lambda-Runtime-Invoked-Function-Arn`
//!   and `Lambda-Runtime-Trace-Id` headers; it answers with `POST
//!   …/invocation/{id}/response` or `…/invocation/{id}/error` (202), and
//!   reports a failed start with `POST …/init/error` (202, logged).
//!
//! An invocation waits in its function's queue until an instance takes
//! it, however long (as cargo lambda watch's did): the caller's own
//! timeout bounds the wait, as `whimbrel local`'s does. An instance that
//! dies with an invocation in hand never answers it; the caller's timeout
//! ends it (Lambda would report `Runtime.ExitError` at once).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use clap::Args;
use tokio::sync::{oneshot, Notify};
use tracing::{info, warn};

use super::template::Template;
use crate::{CliError, Global};

/// Options of `whimbrel lambda-apis`.
#[derive(Args, Debug, Clone)]
pub struct LambdaApisArgs {
    /// Address to listen on (loopback only, unless
    /// --allow-non-loopback).
    #[arg(long, default_value = "127.0.0.1:9000")]
    listen: SocketAddr,
    /// Listen on a non-loopback address anyway.
    #[arg(long)]
    allow_non_loopback: bool,
    /// The SAM template whose functions' timeouts give each invocation's
    /// deadline (other names get 900 s, Lambda's longest).
    #[arg(long, env = "WHIMBREL_TEMPLATE", default_value = "template.yaml")]
    template: PathBuf,
}

/// What an instance answered: the response, or the error document.
type Answer = Result<Bytes, Bytes>;

/// One queued invocation.
struct Invocation {
    id: String,
    payload: Bytes,
    reply: oneshot::Sender<Answer>,
}

/// A function's queue, and the instances waiting on it.
#[derive(Default)]
struct Queue {
    pending: Mutex<VecDeque<Invocation>>,
    ready: Notify,
}

/// The server's state: a queue per function, the invocations in hand.
struct Apis {
    queues: Mutex<HashMap<String, Arc<Queue>>>,
    in_hand: Mutex<HashMap<String, oneshot::Sender<Answer>>>,
    timeouts: HashMap<String, Duration>,
    region: String,
}

/// Lambda's longest timeout: the deadline of a function not in the template.
const LONGEST_TIMEOUT: Duration = Duration::from_secs(900);

impl Apis {
    fn queue(&self, function: &str) -> Arc<Queue> {
        let mut all = self.queues.lock().expect("queues lock");
        all.entry(function.to_string()).or_default().clone()
    }

    /// Queue `payload` for `function` and wait for an instance's answer.
    async fn invoke(&self, function: &str, payload: Bytes) -> Option<Answer> {
        let (reply, answer) = oneshot::channel();
        let id = uuid::Uuid::new_v4().to_string();
        let q = self.queue(function);
        q.pending
            .lock()
            .expect("queue lock")
            .push_back(Invocation { id, payload, reply });
        q.ready.notify_one();
        answer.await.ok()
    }

    /// The next invocation of `function`, waiting for one.
    async fn next(&self, function: &str) -> Invocation {
        let q = self.queue(function);
        loop {
            // A closed reply: its caller gave up before any instance took it.
            let taken = q.pending.lock().expect("queue lock").pop_front();
            match taken {
                Some(inv) if inv.reply.is_closed() => continue,
                Some(inv) => return inv,
                // notify_one keeps a permit when no instance waits, so a
                // push between the pop and this wait is not missed.
                None => q.ready.notified().await,
            }
        }
    }

    fn deadline_ms(&self, function: &str) -> u64 {
        let timeout = self
            .timeouts
            .get(function)
            .copied()
            .unwrap_or(LONGEST_TIMEOUT);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        (now + timeout).as_millis() as u64
    }
}

/// `POST /2015-03-31/functions/{name}/invocations`.
async fn invoke(State(apis): State<Arc<Apis>>, Path(name): Path<String>, body: Bytes) -> Response {
    match apis.invoke(&name, body).await {
        Some(Ok(response)) => (StatusCode::OK, response).into_response(),
        Some(Err(error)) => {
            let mut h = HeaderMap::new();
            h.insert(
                "X-Amz-Function-Error",
                HeaderValue::from_static("Unhandled"),
            );
            (StatusCode::OK, h, error).into_response()
        }
        None => (StatusCode::INTERNAL_SERVER_ERROR, "invocation lost").into_response(),
    }
}

/// `GET /.rt/{name}/2018-06-01/runtime/invocation/next`.
async fn next(State(apis): State<Arc<Apis>>, Path(name): Path<String>) -> Response {
    let inv = apis.next(&name).await;
    let mut h = HeaderMap::new();
    let arn = format!(
        "arn:aws:lambda:{}:000000000000:function:{name}",
        apis.region
    );
    let trace = format!("Root=1-{}", uuid::Uuid::new_v4().simple());
    for (k, v) in [
        ("Lambda-Runtime-Aws-Request-Id", inv.id.clone()),
        (
            "Lambda-Runtime-Deadline-Ms",
            apis.deadline_ms(&name).to_string(),
        ),
        ("Lambda-Runtime-Invoked-Function-Arn", arn),
        ("Lambda-Runtime-Trace-Id", trace),
    ] {
        if let Ok(v) = HeaderValue::from_str(&v) {
            h.insert(k, v);
        }
    }
    apis.in_hand
        .lock()
        .expect("in-hand lock")
        .insert(inv.id, inv.reply);
    (StatusCode::OK, h, inv.payload).into_response()
}

/// Deliver an instance's answer to invocation `id`.
fn answer(apis: &Apis, id: &str, answer: Answer) -> StatusCode {
    match apis.in_hand.lock().expect("in-hand lock").remove(id) {
        Some(reply) => {
            let _ = reply.send(answer); // the caller may have given up
            StatusCode::ACCEPTED
        }
        None => StatusCode::BAD_REQUEST,
    }
}

/// `POST /.rt/{name}/2018-06-01/runtime/invocation/{id}/response`.
async fn response(
    State(apis): State<Arc<Apis>>,
    Path((_, id)): Path<(String, String)>,
    body: Bytes,
) -> StatusCode {
    answer(&apis, &id, Ok(body))
}

/// `POST /.rt/{name}/2018-06-01/runtime/invocation/{id}/error`.
async fn error(
    State(apis): State<Arc<Apis>>,
    Path((_, id)): Path<(String, String)>,
    body: Bytes,
) -> StatusCode {
    answer(&apis, &id, Err(body))
}

/// `POST /.rt/{name}/2018-06-01/runtime/init/error`.
async fn init_error(Path(name): Path<String>, body: Bytes) -> StatusCode {
    warn!(function = %name, error = %String::from_utf8_lossy(&body), "init error");
    StatusCode::ACCEPTED
}

/// The routes (one place, for the server and its tests).
fn routes(apis: Arc<Apis>) -> Router {
    const RT: &str = "/.rt/{name}/2018-06-01/runtime";
    Router::new()
        .route("/2015-03-31/functions/{name}/invocations", post(invoke))
        .route(&format!("{RT}/invocation/next"), get(next))
        .route(&format!("{RT}/invocation/{{id}}/response"), post(response))
        .route(&format!("{RT}/invocation/{{id}}/error"), post(error))
        .route(&format!("{RT}/init/error"), post(init_error))
        .layer(axum::middleware::from_fn(super::guard::require_local_host))
        .with_state(apis)
}

/// Serve both APIs until interrupted.
///
/// Errors: a non-loopback `--listen`, the template, or the address taken.
pub async fn run(g: &Global, args: LambdaApisArgs) -> Result<(), CliError> {
    super::guard::check_listen(args.listen, args.allow_non_loopback).map_err(CliError)?;
    let template: Template = super::read_template(&args.template, &g.table_prefix, &[])?;
    let apis = Arc::new(Apis {
        queues: Mutex::default(),
        in_hand: Mutex::default(),
        timeouts: template
            .functions
            .values()
            .map(|f| (f.binary.clone(), f.timeout))
            .collect(),
        region: std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into()),
    });
    let listener = super::guard::bind(args.listen).await?;
    info!(listen = %args.listen, functions = apis.timeouts.len(), "Lambda Invoke and Runtime APIs");
    super::guard::serve(listener, routes(apis)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apis() -> Arc<Apis> {
        Arc::new(Apis {
            queues: Mutex::default(),
            in_hand: Mutex::default(),
            timeouts: HashMap::from([("f".to_string(), Duration::from_secs(60))]),
            region: "us-east-1".into(),
        })
    }

    /// An invocation waits for an instance; the instance's response, or
    /// its error, is the caller's answer; each goes to one instance.
    #[tokio::test]
    async fn an_invocation_is_answered_by_the_instance_that_took_it() {
        let apis = apis();
        let a = apis.clone();
        let call =
            tokio::spawn(async move { a.invoke("f", Bytes::from_static(b"{\"n\":1}")).await });
        let inv = apis.next("f").await;
        assert_eq!(&inv.payload[..], b"{\"n\":1}");
        apis.in_hand
            .lock()
            .unwrap()
            .insert(inv.id.clone(), inv.reply);
        assert_eq!(
            answer(&apis, &inv.id, Ok(Bytes::from_static(b"42"))),
            StatusCode::ACCEPTED
        );
        assert_eq!(call.await.unwrap(), Some(Ok(Bytes::from_static(b"42"))));
        // Answered once: a second answer is refused.
        assert_eq!(
            answer(&apis, &inv.id, Ok(Bytes::new())),
            StatusCode::BAD_REQUEST
        );
        let a = apis.clone();
        let call = tokio::spawn(async move { a.invoke("f", Bytes::new()).await });
        let inv = apis.next("f").await;
        apis.in_hand
            .lock()
            .unwrap()
            .insert(inv.id.clone(), inv.reply);
        answer(
            &apis,
            &inv.id,
            Err(Bytes::from_static(b"{\"errorType\":\"E\"}")),
        );
        assert_eq!(
            call.await.unwrap(),
            Some(Err(Bytes::from_static(b"{\"errorType\":\"E\"}")))
        );
    }

    /// An instance that polls first gets the invocation queued after it,
    /// and one its caller gave up on is skipped; the deadline is the
    /// function's timeout from now.
    #[tokio::test]
    async fn a_waiting_instance_gets_the_next_live_invocation() {
        let apis = apis();
        let a = apis.clone();
        let waiting = tokio::spawn(async move { a.next("f").await.payload });
        tokio::task::yield_now().await;
        let a = apis.clone();
        let gave_up = tokio::spawn(async move { a.invoke("g", Bytes::from_static(b"old")).await });
        tokio::task::yield_now().await;
        gave_up.abort();
        let _ = gave_up.await;
        let a = apis.clone();
        let live = tokio::spawn(async move { a.invoke("g", Bytes::from_static(b"new")).await });
        assert_eq!(&apis.next("g").await.payload[..], b"new");
        live.abort();
        let a = apis.clone();
        tokio::spawn(async move { a.invoke("f", Bytes::from_static(b"first")).await });
        assert_eq!(&waiting.await.unwrap()[..], b"first");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let left = apis.deadline_ms("f") - now;
        assert!((59_000..=60_000).contains(&left), "{left}");
        assert!(apis.deadline_ms("unknown") - now > 899_000);
    }
}
