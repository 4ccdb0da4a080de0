//! A PostgreSQL that goes away under a running store: every read and write fails within the
//! pool's short acquire timeout (about 2 s), so a request is answered 503 at once instead of
//! hanging, and nothing panics. Needs `PG_URL` (`scripts/test.sh` starts a private server);
//! without it the test is skipped, loudly (`support::skip`).

use freeway::store::{SqlStore, Store};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// A TCP relay in front of PostgreSQL that can be cut: then every connection through it drops
/// and new ones are refused, as when the server is gone.
struct Relay {
    port: u16,
    tasks: JoinSet<()>,
}

impl Relay {
    async fn to(upstream: String) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let port = listener.local_addr().expect("bound").port();
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            let mut pipes = JoinSet::new();
            while let Ok((mut client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                pipes.spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        Relay { port, tasks }
    }

    fn cut(&mut self) {
        // Aborting the accept task drops the listener and every pipe it spawned.
        self.tasks.abort_all();
    }
}

#[tokio::test]
async fn a_postgresql_that_goes_away_fails_requests_within_seconds() {
    let Some(pg) = std::env::var("PG_URL").ok().filter(|u| !u.is_empty()) else {
        crate::support::skip::skipped("PostgreSQL", "PG_URL is not set");
        return;
    };
    let after_at = pg.rsplit_once('@').expect("postgres://user@host:port/db").1;
    let (host_port, db) = after_at.split_once('/').expect("a database");
    let mut relay = Relay::to(host_port.to_string()).await;
    let via_relay = pg.replace(
        &format!("{host_port}/{db}"),
        &format!("127.0.0.1:{}/{db}", relay.port),
    );
    let store = SqlStore::open(&via_relay)
        .await
        .expect("the store opens through the relay");
    assert!(store.run("run_x").await.expect("reads").is_none());

    relay.cut();
    for what in ["read", "write"] {
        let started = Instant::now();
        let result = match what {
            "read" => store.run("run_x").await.map(|_| ()),
            _ => store.check_writable().await,
        };
        let took = started.elapsed();
        assert!(result.is_err(), "{what} with PostgreSQL gone: {result:?}");
        assert!(
            took < Duration::from_secs(5),
            "a {what} took {took:?} to fail: a request would hang that long before its 503"
        );
    }
}
