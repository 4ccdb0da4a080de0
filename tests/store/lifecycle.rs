//! A store's life: migrations (once each, even when replicas start together), the URLs it refuses,
//! and pruning what retention no longer keeps.

use crate::{call, drop_database, fresh, fresh_urls, record, unique};
use freeway::canary::CanaryRecord;
use freeway::chat::Message;
use freeway::classify::Verdict;
use freeway::clock::epoch_ms;
use freeway::run::{AttemptRecord, RunStatus};
use freeway::store::{Backend, SqlStore, Store, StoreError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_are_idempotent() {
    for db in fresh("idempotent").await {
        let applied = db.store.applied_migrations().await.unwrap();
        let again = SqlStore::open(&db.url)
            .await
            .unwrap_or_else(|e| panic!("{}: a second open: {e}", db.label));
        let third = SqlStore::open(&db.url)
            .await
            .unwrap_or_else(|e| panic!("{}: a third open: {e}", db.label));
        assert_eq!(
            again.applied_migrations().await.unwrap(),
            applied,
            "{}",
            db.label
        );
        let expected: Vec<(i64, bool)> = freeway::store::MIGRATIONS
            .iter()
            .map(|m| (m.0, true))
            .collect();
        assert_eq!(
            applied, expected,
            "{}: every migration applied once",
            db.label
        );
        third
            .create_run(&record(&unique("run"), &unique("conv")))
            .await
            .unwrap();
        again.close().await;
        third.close().await;
        db.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_start_ups_apply_each_migration_once() {
    for (label, url, cleanup) in fresh_urls("concurrent").await {
        let opens: Vec<_> = (0..8)
            .map(|_| {
                let url = url.clone();
                tokio::spawn(async move { SqlStore::open(&url).await })
            })
            .collect();
        let mut stores = Vec::new();
        for open in opens {
            stores.push(
                open.await
                    .unwrap()
                    .unwrap_or_else(|e| panic!("{label}: a concurrent open failed: {e}")),
            );
        }
        let expected: Vec<(i64, bool)> = freeway::store::MIGRATIONS
            .iter()
            .map(|m| (m.0, true))
            .collect();
        for store in &stores {
            assert_eq!(
                store.applied_migrations().await.unwrap(),
                expected,
                "{label}"
            );
        }
        // Every replica writes at once: the schema is whole and shared.
        let conv = unique("conv");
        let writes = stores.iter().enumerate().map(|(i, s)| {
            let (s, conv) = (s.clone(), conv.clone());
            tokio::spawn(async move {
                s.append_message(
                    &conv,
                    &format!("run_{i}"),
                    "input",
                    &Message::user(format!("m{i}")),
                )
                .await
            })
        });
        for w in writes.collect::<Vec<_>>() {
            w.await.unwrap().unwrap_or_else(|e| panic!("{label}: {e}"));
        }
        assert_eq!(
            stores[0].transcript(&conv).await.unwrap().len(),
            8,
            "{label}"
        );
        if label == "sqlite" {
            assert!(matches!(stores[0].backend(), Backend::Sqlite));
        }
        for s in &stores {
            s.close().await;
        }
        drop_database(cleanup).await;
    }
}

#[tokio::test]
async fn prune_deletes_finished_runs_older_than_the_cutoff_and_keeps_transcripts() {
    for db in fresh("prune").await {
        let s = &db.store;
        let day = 86_400_000;
        let now = epoch_ms();
        let conv = unique("conv");
        let mut old_done = record("run_old_done", &conv);
        old_done.status = RunStatus::Succeeded;
        old_done.updated_ms = now - 40 * day;
        let mut old_running = record("run_old_running", &conv);
        old_running.status = RunStatus::Running;
        old_running.updated_ms = now - 40 * day;
        let mut old_paused = record("run_old_paused", &conv);
        old_paused.status = RunStatus::AwaitingApproval;
        old_paused.pending_tool_call = Some(call("call_p"));
        old_paused.updated_ms = now - 40 * day;
        let mut new_done = record("run_new_done", &conv);
        new_done.status = RunStatus::Failed;
        for r in [&old_done, &old_running, &old_paused, &new_done] {
            s.save_run(r).await.unwrap();
            let a = AttemptRecord {
                run_id: r.run_id.clone(),
                n: 1,
                step: 1,
                route: "r".into(),
                http_status: Some(200),
                error: None,
                verdict: None,
                retry_hint_ms: None,
                ratelimit_remaining: None,
                provider_name: None,
                latency_ms: 1,
                t_ms: r.updated_ms,
                cost_usd: 0.0,
            };
            s.record_attempt(&a).await.unwrap();
        }
        s.append_message(&conv, "run_old_done", "input", &Message::user("kept"))
            .await
            .unwrap();
        let pruned = s.prune(now - 30 * day).await.unwrap();
        assert_eq!(
            (pruned.runs, pruned.attempts, pruned.approvals),
            (1, 1, 0),
            "{}: {pruned:?}",
            db.label
        );
        assert_eq!(s.run("run_old_done").await.unwrap(), None);
        assert!(s.attempts("run_old_done").await.unwrap().is_empty());
        for kept in ["run_old_running", "run_old_paused", "run_new_done"] {
            assert!(
                s.run(kept).await.unwrap().is_some(),
                "{}: {kept} stays",
                db.label
            );
            assert_eq!(s.attempts(kept).await.unwrap().len(), 1);
        }
        assert_eq!(
            s.transcript(&conv).await.unwrap().len(),
            1,
            "{}: transcripts stay",
            db.label
        );
        assert_eq!(
            s.prune(now - 30 * day).await.unwrap(),
            Default::default(),
            "{}: nothing left to prune",
            db.label
        );
        db.finish().await;
    }
}

fn canary(provider: &str, t_ms: u64, status: u16) -> CanaryRecord {
    let attempt = AttemptRecord {
        http_status: Some(status),
        verdict: (status != 200).then_some(Verdict::Account),
        latency_ms: 7,
        ..AttemptRecord::succeeded(
            &CanaryRecord::run_id(provider, t_ms),
            1,
            0,
            format!("platform:{provider}/m"),
            t_ms,
        )
    };
    CanaryRecord {
        provider: provider.into(),
        attempt,
    }
}

#[tokio::test]
async fn canaries_are_attempts_of_their_own_kind_read_newest_per_provider_and_pruned_by_age() {
    for db in fresh("canaries").await {
        let s = &db.store;
        let day = 86_400_000;
        let now = epoch_ms();
        let (old, new) = (now - 40 * day, now - day);
        for c in [
            canary("openrouter", old, 429),
            canary("openrouter", new, 200),
            canary("groq", old, 200),
        ] {
            s.record_canary(&c).await.unwrap();
        }
        let last = s.last_canaries().await.unwrap();
        assert_eq!(
            last,
            vec![canary("groq", old, 200), canary("openrouter", new, 200)],
            "{}",
            db.label
        );
        assert!(
            s.count_by_status().await.unwrap().is_empty(),
            "{}: no run",
            db.label
        );
        let pruned = s.prune(now - 30 * day).await.unwrap();
        assert_eq!((pruned.canaries, pruned.attempts), (2, 0), "{}", db.label);
        assert_eq!(
            s.last_canaries().await.unwrap(),
            vec![canary("openrouter", new, 200)],
            "{}",
            db.label
        );
        db.finish().await;
    }
}

#[tokio::test]
async fn bad_urls_and_unreachable_databases_give_one_clear_line() {
    let err = SqlStore::open("mysql://localhost/x").await.unwrap_err();
    assert!(matches!(err, StoreError::BadUrl(_)), "{err}");
    let err = SqlStore::open("postgres://user:hunter2@127.0.0.1:1/x")
        .await
        .unwrap_err();
    let line = err.to_string();
    assert!(matches!(err, StoreError::Unavailable(_)), "{line}");
    assert!(
        !line.contains("hunter2") && !line.contains('\n') && line.contains("127.0.0.1:1"),
        "{line}"
    );
    assert!(
        line.contains("Connection refused"),
        "the cause, not a timeout: {line}"
    );
    let err = SqlStore::open("sqlite:///nonexistent-freeway-dir/x.db")
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Unavailable(_)) && err.to_string().contains("does not exist"),
        "{err}"
    );
    let err = SqlStore::open("postgres://[::1").await.unwrap_err();
    assert!(matches!(err, StoreError::BadUrl(_)), "{err}");
}

#[tokio::test]
async fn sqlite_memory_urls_work_for_experiments() {
    let s = SqlStore::open("sqlite::memory:").await.unwrap();
    s.append_message("c", "r", "input", &Message::user("hi"))
        .await
        .unwrap();
    assert_eq!(s.transcript("c").await.unwrap().len(), 1);
}

/// A SQLite file's writer checkpoints the WAL itself, outside the file's turn: what the store
/// writes reaches the database file while writes go on, and the WAL does not grow without end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_sqlite_store_writes_reaches_its_file_while_writes_go_on() {
    let Some((_, url, cleanup)) = fresh_urls("checkpoint").await.into_iter().next() else {
        panic!("a SQLite url");
    };
    let store = SqlStore::open(&url).await.unwrap();
    let file = std::path::PathBuf::from(url.trim_start_matches("sqlite://"));
    let migrated = std::fs::metadata(&file).unwrap().len();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut batches = 0;
    while std::fs::metadata(&file).unwrap().len() <= migrated {
        assert!(
            tokio::time::Instant::now() < deadline,
            "after {batches} batches of writes the database file still has only its schema"
        );
        let writes = (0..50).map(|_| {
            let rec = record(&unique("run"), &unique("conv"));
            let store = &store;
            async move { store.save_run(&rec).await }
        });
        for saved in futures_util::future::join_all(writes).await {
            saved.unwrap();
        }
        batches += 1;
    }
    store.close().await;
    drop_database(cleanup).await;
}

/// The audit trail keeps each operator action whole, newest first, paged by the id it hands
/// out, on both backends and in memory alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_trail_pages_newest_first_and_keeps_each_entry_whole() {
    use freeway::store::{AuditEntry, AuditLog, MemoryStore};
    let entries: Vec<AuditEntry> = (0..5)
        .map(|i| {
            let mut e = AuditEntry::now(
                "admin token",
                "cancel",
                &format!("run_{i}"),
                &format!("cancelled; it was delayed ({i})"),
            );
            // Ids a millisecond apart sort as their times.
            e.id = format!("01J0000000000000000000000{i}");
            e
        })
        .collect();
    let long = AuditEntry::now("admin token", "pause", "pool/x", &"reason ".repeat(500));
    assert!(
        long.detail.len() <= freeway::store::MAX_AUDIT_DETAIL,
        "a long reason is cut"
    );
    let check = |label: &str, got: Vec<AuditEntry>, want: &[&AuditEntry]| {
        let want: Vec<AuditEntry> = want.iter().map(|e| (*e).clone()).collect();
        assert_eq!(got, want, "{label}");
    };
    let memory = MemoryStore::default();
    let mut logs: Vec<(String, Box<dyn AuditLog>)> = vec![("memory".into(), Box::new(memory))];
    let dbs = fresh("audit").await;
    for db in &dbs {
        logs.push((db.label.to_string(), Box::new(db.store.clone())));
    }
    for (label, log) in &logs {
        for e in &entries {
            log.record_action(e).await.unwrap();
        }
        let first = log.actions(None, 2).await.unwrap();
        check(label, first, &[&entries[4], &entries[3]]);
        let next = log.actions(Some(&entries[3].id), 2).await.unwrap();
        check(label, next, &[&entries[2], &entries[1]]);
        let last = log.actions(Some(&entries[1].id), 50).await.unwrap();
        check(label, last, &[&entries[0]]);
        assert!(
            log.actions(Some(&entries[0].id), 50)
                .await
                .unwrap()
                .is_empty(),
            "{label}"
        );
    }
    for db in dbs {
        db.finish().await;
    }
}
