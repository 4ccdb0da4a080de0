//! Transcript writes per second on each backend: `append_message` (takes the conversation's row
//! for a position and inserts the message unless the run's key is there), by one writer and by
//! several writers on their own conversations. The store commits the writes waiting at once in
//! one transaction, so several writers share commits; one writer pays a commit per write.
//!
//! `cargo bench -p freeway --bench store_writes`. SQLite runs on a fresh file in the temp dir;
//! PostgreSQL on a fresh database of the server at `PG_URL` (skipped when unset). Optional
//! `STORE_BENCH_WRITES` sets the writes per case (default 2000).

use freeway::chat::Message;
use freeway::store::{SqlStore, Store};
use sqlx::Connection;
use std::time::Instant;

const WRITERS: usize = 16;

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let writes: usize = std::env::var("STORE_BENCH_WRITES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let dir = std::env::temp_dir().join(format!("freeway-bench-{}", ulid::Ulid::generate()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("store_writes: cannot create {}: {e}", dir.display());
        return;
    }
    let sqlite = format!("sqlite://{}", dir.join("bench.db").display());
    bench("sqlite", &sqlite, writes).await;
    let _ = std::fs::remove_dir_all(&dir);

    let Some(admin) = std::env::var("PG_URL").ok().filter(|u| !u.is_empty()) else {
        println!("store_writes postgres: skipped (PG_URL is not set)");
        return;
    };
    let name = format!(
        "freeway_bench_{}",
        ulid::Ulid::generate().to_string().to_lowercase()
    );
    if let Err(e) = admin_sql(&admin, &format!("CREATE DATABASE {name}")).await {
        eprintln!("store_writes postgres: cannot create a database: {e}");
        return;
    }
    let base = admin
        .split('?')
        .next()
        .and_then(|u| u.rsplit_once('/'))
        .map_or(admin.as_str(), |(b, _)| b);
    bench("postgres", &format!("{base}/{name}"), writes).await;
    if let Err(e) = admin_sql(
        &admin,
        &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
    )
    .await
    {
        eprintln!("store_writes postgres: cannot drop {name}: {e}");
    }
}

async fn admin_sql(url: &str, sql: &str) -> Result<(), sqlx::Error> {
    let mut conn = sqlx::PgConnection::connect(url).await?;
    sqlx::query(sqlx::AssertSqlSafe(sql.to_string()))
        .execute(&mut conn)
        .await?;
    conn.close().await
}

async fn bench(label: &str, url: &str, writes: usize) {
    let store = match SqlStore::open(url).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("store_writes {label}: {e}");
            return;
        }
    };
    let conv = format!("conv_{}", ulid::Ulid::generate());
    let started = Instant::now();
    for i in 0..writes {
        if let Err(e) = store
            .append_message(
                &conv,
                "run_bench",
                &format!("k{i}"),
                &Message::user(format!("message {i}")),
            )
            .await
        {
            eprintln!("store_writes {label}: {e}");
            return;
        }
    }
    report(label, "1 writer, 1 conversation", writes, started);

    let started = Instant::now();
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let store = store.clone();
            let per_writer = writes / WRITERS;
            tokio::spawn(async move {
                let conv = format!("conv_{}", ulid::Ulid::generate());
                for i in 0..per_writer {
                    store
                        .append_message(
                            &conv,
                            &format!("run_{w}"),
                            &format!("k{i}"),
                            &Message::user(format!("message {i}")),
                        )
                        .await?;
                }
                Ok::<usize, freeway::store::StoreError>(per_writer)
            })
        })
        .collect();
    let mut done = 0;
    for task in tasks {
        match task.await {
            Ok(Ok(n)) => done += n,
            Ok(Err(e)) => eprintln!("store_writes {label}: {e}"),
            Err(e) => eprintln!("store_writes {label}: {e}"),
        }
    }
    report(
        label,
        &format!("{WRITERS} writers, own conversations"),
        done,
        started,
    );
    store.close().await;
}

fn report(label: &str, case: &str, writes: usize, started: Instant) {
    let secs = started.elapsed().as_secs_f64();
    println!(
        "store_writes {label} ({case}): {writes} transcript writes in {secs:.2} s = {:.0} writes/s",
        writes as f64 / secs
    );
}
