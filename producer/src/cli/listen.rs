//! Serving the API over TCP so that slow or idle clients cannot take the process down.
//!
//! `axum::serve` accepts every connection it can and keeps it as long as the client likes: at a
//! file limit of 1,024, a thousand idle connections (or clients sending their headers a byte at a
//! time) left no descriptor for the next request, nor for the process's own Redis and database
//! connections, and the API was unreachable until they left. So the server here accepts at most
//! [`Limits::connections`] connections at once, a number it takes from the process's file limit
//! (`RLIMIT_NOFILE`) less what the process needs for itself; a connection past it waits in the
//! kernel's backlog, holding no descriptor. A client must send each request's headers within
//! [`Limits::header_timeout`], or its connection is closed.

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Descriptors kept for the process itself: Redis, the store, the event streams' reader, logs.
const RESERVED_FILES: u64 = 64;
/// The fewest connections served at once, whatever the file limit says.
const MIN_CONNECTIONS: u64 = 16;
/// How long a client has to send a request's headers.
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// What the server holds a client to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    pub connections: usize,
    pub header_timeout: Duration,
}

impl Limits {
    /// The limits for a process whose soft file limit is `nofile` (`None`: unknown).
    pub(crate) fn for_file_limit(nofile: Option<u64>) -> Limits {
        let connections = nofile.map_or(1_024, |n| n.saturating_sub(RESERVED_FILES));
        Limits {
            connections: connections.max(MIN_CONNECTIONS) as usize,
            header_timeout: HEADER_TIMEOUT,
        }
    }
}

/// The soft `RLIMIT_NOFILE` of this process, from `/proc/self/limits` (`None` where there is no
/// such file, or it says "unlimited").
pub(crate) fn file_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// Serve `router` on `listener` within `limits` until `shutdown` resolves, then let the open
/// connections finish their requests.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.connections));
    let graceful = GracefulShutdown::new();
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let builder = Arc::new(builder);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of descriptors after all (another part of the process took them):
                    // wait a moment rather than spin.
                    tracing::warn!(%error, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let builder = builder.clone();
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(error) = conn.await {
                tracing::debug!(error = %error, "a connection ended with an error");
            }
            drop(permit);
        });
    }
    graceful.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_limit_stays_below_the_file_limit() {
        assert_eq!(Limits::for_file_limit(Some(1_024)).connections, 960);
        assert_eq!(Limits::for_file_limit(Some(70)).connections, 16);
        assert_eq!(Limits::for_file_limit(None).connections, 1_024);
        assert!(file_limit().is_some_and(|n| n > 0));
    }
}
