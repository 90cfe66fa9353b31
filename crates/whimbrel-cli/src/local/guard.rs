//! Who may talk to `whimbrel local`'s Invoke API front. It invokes any
//! function of the stack with any payload, and has no authentication, as
//! the local stack has none: so it listens on loopback only unless told
//! otherwise, and answers only requests whose `Host` is an IP address or
//! `localhost`. A web page cannot then reach it through DNS rebinding (a
//! name of the attacker's that resolves to 127.0.0.1 still sends that name
//! as `Host`).

use std::net::{IpAddr, SocketAddr};

use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Whether the front may listen on `listen`: a loopback address, or any
/// with `allow_non_loopback` (`--allow-non-loopback`).
///
/// Errors: the refusal, saying what to pass to listen there anyway.
pub fn check_listen(listen: SocketAddr, allow_non_loopback: bool) -> Result<(), String> {
    if listen.ip().is_loopback() || allow_non_loopback {
        return Ok(());
    }
    Err(format!(
        "refusing to listen on {listen}: the Invoke API front has no authentication and invokes \
         any function of the stack; listen on 127.0.0.1, or pass --allow-non-loopback"
    ))
}

/// Bind `listen` (checked by [`check_listen`] first) for a local server.
///
/// Errors: the address is taken or not ours.
pub async fn bind(listen: SocketAddr) -> Result<tokio::net::TcpListener, crate::CliError> {
    tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| crate::CliError(format!("cannot listen on {listen}: {e}")))
}

/// Serve `app` on `listener` until interrupted (Ctrl-C or SIGINT).
///
/// Errors: the server's.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
) -> Result<(), crate::CliError> {
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| crate::CliError(format!("serve: {e}")))
}

/// Whether a request's `Host` header names the front by address or as
/// `localhost` (with or without a port): never a DNS name that could have
/// been rebound to this machine. A request without one is refused.
pub fn host_allowed(host: Option<&str>) -> bool {
    let Some(host) = host else { return false };
    let name = match host.strip_prefix('[') {
        // [v6] or [v6]:port
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<IpAddr>().is_ok()
}

/// Middleware: refuses (403, with the reason) a request whose `Host`
/// [`host_allowed`] refuses.
pub async fn require_local_host(req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok());
    if host_allowed(host) {
        return next.run(req).await;
    }
    let why = format!(
        "Host {:?} is not an IP address or localhost: refused (DNS rebinding)",
        host.unwrap_or("")
    );
    tracing::warn!(%why, "Invoke API front");
    (StatusCode::FORBIDDEN, why).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_addresses_and_localhost_are_hosts_of_the_front() {
        for ok in [
            "127.0.0.1:9001",
            "127.0.0.1",
            "localhost:9001",
            "LOCALHOST",
            "[::1]:9001",
            "[::1]",
            "10.0.0.5:9001",
        ] {
            assert!(host_allowed(Some(ok)), "{ok}");
        }
        for refused in [
            "evil.example.com",
            "evil.example.com:9001",
            "localhost.evil.example.com:9001",
            "127.0.0.1.nip.io:9001",
            "",
        ] {
            assert!(!host_allowed(Some(refused)), "{refused}");
        }
        assert!(!host_allowed(None));
    }

    #[test]
    fn the_front_listens_beyond_loopback_only_when_told() {
        let lo: SocketAddr = "127.0.0.1:9001".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:9001".parse().unwrap();
        assert!(check_listen(lo, false).is_ok());
        assert!(check_listen("[::1]:9001".parse().unwrap(), false).is_ok());
        let refusal = check_listen(any, false).unwrap_err();
        assert!(refusal.contains("--allow-non-loopback"), "{refusal}");
        assert!(check_listen(any, true).is_ok());
    }
}
