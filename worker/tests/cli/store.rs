//! The worker's commands on the SQL store, as real processes: a bad or unreachable
//! `DATABASE_URL` is one clear line and a non-zero exit, several workers starting at once share
//! one database, `prune` prunes, and `run-one` uses a user's stored connection without its key
//! showing in the output, the logs or the database file. Needs Redis (`REDIS_URL`) for `run-one`.

use crate::support;

use freeway::provider::ApiKey;
use freeway::store::{NewConnection, SecretKey, SecretKeys, SqlStore, Store};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use support::run_worker as worker;

const SECRET_HEX: &str = "4630e03beea5255d6c6febd4cdb63e283cebcc65954c1b60812c3a5ccd5d84e7";
const JOB: &[u8] = br#"{"user_id":"u1","input":"hi","routes":[{"model":"vendor/m:free"}]}"#;

fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique(&format!("freeway-cli-{name}")));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn one_clear_line(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{err}"
    );
    err
}

#[test]
fn a_malformed_database_url_exits_2_in_one_line() {
    for args in [
        &["run-one", "-"][..],
        &["prune", "--older-than-days", "30"][..],
    ] {
        let out = worker(args, &[("DATABASE_URL", "mysql://db/x")], JOB);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(one_clear_line(&out).contains("DATABASE_URL"));
    }
}

#[test]
fn an_unreachable_database_exits_1_in_one_line_without_its_password() {
    let dir = temp_dir("unreachable");
    let missing = format!("sqlite://{}/no-such-dir/freeway.db", dir.display());
    for url in [
        "postgres://freeway:hunter2@127.0.0.1:1/freeway",
        missing.as_str(),
    ] {
        for args in [
            &["run-one", "-"][..],
            &["prune", "--older-than-days", "30"][..],
        ] {
            let out = worker(args, &[("DATABASE_URL", url)], JOB);
            assert_eq!(out.status.code(), Some(1), "{url} {args:?}");
            let line = one_clear_line(&out);
            assert!(!line.contains("hunter2"), "{line}");
            assert!(out.stdout.is_empty(), "nothing ran");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Several worker processes opening one fresh database at once all start (the migrations are
/// applied once, under a lock), and `prune` reports one JSON line.
#[test]
fn workers_starting_at_once_share_one_database() {
    let dir = temp_dir("concurrent");
    let mut urls = vec![format!("sqlite://{}", dir.join("freeway.db").display())];
    match std::env::var("PG_URL") {
        Ok(pg) if !pg.is_empty() => urls.push(pg),
        _ => eprintln!("PG_URL is not set: the PostgreSQL case of this test is SKIPPED"),
    }
    for url in urls {
        let children: Vec<_> = (0..6)
            .map(|_| {
                Command::new(env!("CARGO_BIN_EXE_worker"))
                    .args(["prune", "--older-than-days", "30"])
                    .env("DATABASE_URL", &url)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("worker starts")
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().expect("worker ends");
            assert!(
                out.status.success(),
                "{url}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let line: serde_json::Value =
                serde_json::from_slice(&out.stdout).expect("one JSON line");
            assert!(
                line["pruned"]["runs"].is_u64() && line["cutoff_ms"].is_u64(),
                "{line}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A provider that refuses every key, recording the `Authorization` header it was sent.
fn refusing_provider() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/api/v1", listener.local_addr().expect("addr"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut line = String::new();
            let mut length = 0usize;
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                let lower = line.to_ascii_lowercase();
                if lower.starts_with("authorization:") {
                    record
                        .lock()
                        .expect("lock")
                        .push(line["authorization:".len()..].trim().to_string());
                }
                if let Some(v) = lower.strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0u8; length];
            let _ = std::io::Read::read_exact(&mut reader, &mut body);
            let answer = r#"{"error":{"code":401,"message":"User not found."}}"#;
            let response = format!(
                "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            );
            let mut stream = stream;
            let _ = stream.write_all(response.as_bytes());
        }
    });
    (url, seen)
}

#[test]
fn run_one_opens_the_stored_connection_at_call_time_and_its_key_leaks_nowhere() {
    let dir = temp_dir("connection");
    let db = dir.join("freeway.db");
    let url = format!("sqlite://{}", db.display());
    let raw = unique("sk-user-RAWKEY");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    if runtime.block_on(support::skip::redis()).is_none() {
        return;
    }
    runtime.block_on(async {
        let store = SqlStore::open(&url).await.expect("open");
        let secret = SecretKey::from_hex(SECRET_HEX).expect("secret");
        let c = NewConnection {
            id: "conn_cli".into(),
            user_id: "u1".into(),
            provider: "openrouter".into(),
            api_key: ApiKey::new(raw.clone()),
        };
        store
            .put_connection(&secret, &c, &freeway::catalog::Catalog::builtin())
            .await
            .expect("put");
        store.close().await;
    });
    let (base_url, seen) = refusing_provider();
    let job = concat!(
        r#"{"user_id":"u1","conversation_id":"conv_cli","input":"hi","#,
        r#""routes":[{"model":"vendor/paid","connection":"conn_cli"}]}"#
    )
    .as_bytes();
    let ns = unique("t-cli");
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("FREEWAY_SECRET_KEY", SECRET_HEX),
        ("OPENROUTER_BASE_URL", base_url.as_str()),
        ("FREEWAY_NAMESPACE", ns.as_str()),
        ("RUST_LOG", "trace"),
    ];
    let out = worker(&["run-one", "-"], &env, job);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "the key is refused: {stdout}\n{stderr}"
    );
    assert!(
        stdout
            .lines()
            .last()
            .is_some_and(|l| l.contains("auth_failed")),
        "{stdout}"
    );
    assert_eq!(
        *seen.lock().expect("lock"),
        vec![format!("Bearer {raw}")],
        "the user's key was used"
    );
    assert!(
        !stdout.contains(&raw) && !stderr.contains(&raw),
        "the raw key is in the output:\n{stdout}\n{stderr}"
    );
    let mut bytes = Vec::new();
    for suffix in ["", "-wal", "-shm"] {
        let mut name = db.clone().into_os_string();
        name.push(suffix);
        bytes.extend(std::fs::read(PathBuf::from(name)).unwrap_or_default());
    }
    assert!(
        !bytes.windows(raw.len()).any(|w| w == raw.as_bytes()),
        "the raw key is in the database files"
    );
    runtime.block_on(async {
        let store = SqlStore::open(&url).await.expect("open");
        let transcript = store.transcript("conv_cli").await.expect("transcript");
        assert_eq!(transcript.len(), 1, "the run wrote its input to the store");
        store.close().await;
    });
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn reseal_keys_moves_every_connection_key_to_the_new_secret() {
    let new_hex = SECRET_HEX.replace('0', "1");
    let dir = temp_dir("reseal");
    let url = format!("sqlite://{}", dir.join("freeway.db").display());
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let raw = unique("sk-user-RAWKEY");
    runtime.block_on(async {
        let store = SqlStore::open(&url).await.expect("open");
        let old = SecretKey::from_hex(SECRET_HEX).expect("secret");
        let c = NewConnection {
            id: "conn_old".into(),
            user_id: "u1".into(),
            provider: "openrouter".into(),
            api_key: ApiKey::new(raw.clone()),
        };
        store
            .put_connection(&old, &c, &freeway::catalog::Catalog::builtin())
            .await
            .expect("put");
        store.close().await;
    });

    let out = worker(&["reseal-keys"], &[("DATABASE_URL", url.as_str())], b"");
    assert_eq!(out.status.code(), Some(2), "no new key");
    assert!(one_clear_line(&out).contains("FREEWAY_SECRET_KEY"));

    let env = [
        ("DATABASE_URL", url.as_str()),
        ("FREEWAY_SECRET_KEY", new_hex.as_str()),
        ("FREEWAY_SECRET_KEY_PREVIOUS", SECRET_HEX),
    ];
    let out = worker(&["reseal-keys"], &env, b"");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    assert_eq!(
        line,
        serde_json::json!({"resealed": 1, "current": 0, "unreadable": []})
    );
    let printed = format!("{out:?}");
    assert!(!printed.contains(&raw) && !printed.contains(&new_hex[..16]));

    runtime.block_on(async {
        let store = SqlStore::open(&url).await.expect("open");
        let new_only = SecretKeys {
            current: SecretKey::from_hex(&new_hex).expect("secret"),
            previous: None,
        };
        let (_, key) = store
            .connection_key(&new_only, "conn_old")
            .await
            .expect("opens")
            .expect("stored");
        assert_eq!(key.expose(), raw, "the new key alone opens it now");
        store.close().await;
    });

    let wrong = SECRET_HEX.replace('0', "2");
    let lost = [
        ("DATABASE_URL", url.as_str()),
        ("FREEWAY_SECRET_KEY", wrong.as_str()),
        ("FREEWAY_SECRET_KEY_PREVIOUS", SECRET_HEX),
    ];
    let out = worker(&["reseal-keys"], &lost, b"");
    assert_eq!(out.status.code(), Some(1), "a key neither opens");
    assert!(String::from_utf8_lossy(&out.stdout).contains("conn_old"));
    let _ = std::fs::remove_dir_all(dir);
}
