//! Writes from many tasks at once, which the store commits in batches: each must land, or fail,
//! as if it had been alone.

use crate::{TestDb, fresh, record, unique};
use freeway::chat::Message;
use freeway::clock::epoch_ms;
use freeway::run::{AttemptRecord, RunStatus};
use freeway::store::Store;
use sqlx::Connection;

/// A successful first attempt of `run_id` on `route`.
fn ok_attempt(run_id: &str, route: &str, latency_ms: u32) -> AttemptRecord {
    AttemptRecord {
        latency_ms: u64::from(latency_ms),
        ..AttemptRecord::succeeded(run_id, 1, 1, route.into(), epoch_ms())
    }
}

/// A write the database refuses (here, a trigger refusing an attempt on route `poison`) fails
/// its own caller only: the batch it was in is retried one write at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_database_refuses_fails_only_its_own_caller() {
    for db in fresh("poison").await {
        poison_attempts(&db).await;
        let tasks: Vec<_> = (0..40u32)
            .map(|i| {
                let s = db.store.clone();
                tokio::spawn(async move {
                    let route = if i == 17 {
                        "poison"
                    } else {
                        "platform:openrouter/vendor/m"
                    };
                    let attempt = ok_attempt(&format!("run_{i}_{}", unique("p")), route, i);
                    (attempt.clone(), s.record_attempt(&attempt).await)
                })
            })
            .collect();
        for t in tasks {
            let (attempt, written) = t.await.unwrap();
            let stored = db.store.attempts(&attempt.run_id).await.unwrap();
            if attempt.route == "poison" {
                let e = written.expect_err("the poisoned write fails");
                assert!(e.to_string().contains("poisoned"), "{}: {e}", db.label);
                assert!(stored.is_empty(), "{}", db.label);
            } else {
                written.unwrap_or_else(|e| panic!("{}: {e}", db.label));
                assert_eq!(stored, vec![attempt], "{}", db.label);
            }
        }
        db.finish().await;
    }
}

/// Make the database refuse attempts on route `poison`.
async fn poison_attempts(db: &TestDb) {
    match db.label {
        "postgres" => {
            let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
            sqlx::raw_sql(
                "CREATE FUNCTION poison() RETURNS trigger AS $$ BEGIN \
                 IF NEW.route = 'poison' THEN RAISE EXCEPTION 'poisoned attempt'; END IF; \
                 RETURN NEW; END $$ LANGUAGE plpgsql; \
                 CREATE TRIGGER poison BEFORE INSERT ON attempts \
                 FOR EACH ROW EXECUTE FUNCTION poison();",
            )
            .execute(&mut conn)
            .await
            .unwrap();
        }
        _ => {
            let mut conn = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
            sqlx::raw_sql(
                "CREATE TRIGGER poison BEFORE INSERT ON attempts WHEN NEW.route = 'poison' \
                 BEGIN SELECT RAISE(ABORT, 'poisoned attempt'); END;",
            )
            .execute(&mut conn)
            .await
            .unwrap();
        }
    }
}

/// The conversation holds exactly `n` messages, all different.
async fn assert_distinct_messages(db: &TestDb, conversation: &str, n: usize) {
    let mut texts: Vec<String> = db
        .store
        .transcript(conversation)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| m.content)
        .collect();
    assert_eq!(texts.len(), n, "{}: {texts:?}", db.label);
    texts.sort();
    texts.dedup();
    assert_eq!(texts.len(), n, "{}", db.label);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_get_distinct_places_and_duplicates_are_dropped() {
    for db in fresh("append-concurrent").await {
        let conv = unique("conv");
        let tasks: Vec<_> = (0..40)
            .map(|i| {
                let (s, conv) = (db.store.clone(), conv.clone());
                // Every message is sent twice, by two tasks.
                let run = format!("run_{}", i % 20);
                tokio::spawn(async move {
                    s.append_message(&conv, &run, "input", &Message::user(run.clone()))
                        .await
                })
            })
            .collect();
        for t in tasks {
            t.await
                .unwrap()
                .unwrap_or_else(|e| panic!("{}: {e}", db.label));
        }
        assert_distinct_messages(&db, &conv, 20).await;
        db.finish().await;
    }
}

/// The writes of many runs at once are committed together (one transaction per batch, a few
/// multi-row statements per kind of write, more runs than one statement holds); each must land
/// as if it had been alone, including a run created twice and a run saved twice within one batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_of_many_runs_at_once_each_land_as_if_alone() {
    const RUNS: u32 = 200;
    for db in fresh("batch").await {
        let shared = unique("conv");
        let twice = record(&unique("run"), &unique("conv"));
        let mut tasks = Vec::new();
        for i in 0..RUNS {
            let (s, shared, twice) = (db.store.clone(), shared.clone(), twice.clone());
            tasks.push(tokio::spawn(async move {
                let mut rec = record(&format!("run_{i}_{}", unique("b")), &unique("conv"));
                s.create_run(&rec).await?;
                s.create_run(&twice).await?;
                let text = format!("message {i}");
                s.append_message(&shared, &rec.run_id, "input", &Message::user(text.clone()))
                    .await?;
                s.append_message(
                    &rec.conversation_id,
                    &rec.run_id,
                    "own",
                    &Message::user(text),
                )
                .await?;
                rec.status = RunStatus::Succeeded;
                rec.state.counters.calls = i;
                rec.output = format!("answer {i}");
                s.save_run(&rec).await?;
                let mut saved_twice = twice.clone();
                saved_twice.state.counters.calls = 7;
                s.save_run(&saved_twice).await?;
                let attempt = ok_attempt(&rec.run_id, "platform:openrouter/vendor/m:free", i);
                s.record_attempt(&attempt).await?;
                Ok::<_, freeway::store::StoreError>((rec, attempt))
            }));
        }
        let mut done = Vec::new();
        for t in tasks {
            done.push(
                t.await
                    .unwrap()
                    .unwrap_or_else(|e| panic!("{}: {e}", db.label)),
            );
        }
        let s = &db.store;
        for (rec, attempt) in &done {
            assert_eq!(
                s.run(&rec.run_id).await.unwrap().as_ref(),
                Some(rec),
                "{}",
                db.label
            );
            assert_eq!(
                s.attempts(&rec.run_id).await.unwrap(),
                vec![attempt.clone()]
            );
            let own = s.transcript(&rec.conversation_id).await.unwrap();
            assert_eq!(own.len(), 1, "{}", db.label);
        }
        assert_distinct_messages(&db, &shared, RUNS as usize).await;
        let stored_twice = s.run(&twice.run_id).await.unwrap().expect("created once");
        assert_eq!(stored_twice.state.counters.calls, 7, "{}", db.label);
        db.finish().await;
    }
}
